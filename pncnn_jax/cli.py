"""What train.py and eval.py share before jax is touched: flag parsing without tracebacks for user mistakes."""

from __future__ import annotations

import sys

from absl import flags


def parse_flags_or_exit(argv: list[str]) -> list[str]:
  """absl's flag parser (`app.run(main, flags_parser=parse_flags_or_exit)`): a misspelled `--config.<field>`
  prints one line with ml_collections' "Did you mean" hint and exits with status 2, instead of a traceback."""
  try:
    return flags.FLAGS(argv)
  except (AttributeError, KeyError) as e:  # ml_collections: an unknown field of a locked config
    text = str(e.args[0] if e.args else e)
    lines = [x.strip().strip("'\"\\") for x in text.replace("\\n", "\n").splitlines()]
    lines = [x for x in lines if x]
    hint = next((x for x in lines if x.startswith("Did you mean")), "")
    name = lines[0] if lines else text
    print(f"error: no config field {name!r}" + (f"; {hint}" if hint else ""), file=sys.stderr)
    sys.exit(2)
