"""The one writer of docs/develop/benchmarks-log.md sections: each benchmark script owns the text between
`<!-- name:begin -->` and `<!-- name:end -->` and rewrites only that (commentary after the end marker stays)."""

from __future__ import annotations

import pathlib
import re
import sys

HEADER = "# Benchmark log\n\nEach section is written by the script it names.\n"


def write_section(path: pathlib.Path, name: str, body: str) -> None:
  """Replaces the text between `<!-- name:begin -->` and `<!-- name:end -->` of `path` (appends it if absent)."""
  begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
  text = path.read_text() if path.exists() else HEADER
  block = f"{begin}\n{body}\n{end}"
  if begin in text:
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
  else:
    text = text.rstrip() + "\n\n" + block + "\n"
  path.write_text(text)


def command(script: str, argv: list[str] | None = None) -> str:
  """`python bench/<script> ARGS` as the report shows it: the arguments without the output paths (--output, --json
  and their values), which say where this copy went, not how it was measured."""
  words = list(argv if argv is not None else sys.argv[1:])
  kept = [a for i, a in enumerate(words)
          if not (a.startswith(("--output", "--json")) or (i and words[i - 1] in ("--output", "--json")))]
  return f"python bench/{script} {' '.join(kept)}".strip()
