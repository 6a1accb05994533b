"""What train.py and eval.py share before jax is touched: their --help text, the `--config` flag and where its
file is found, and flag parsing without tracebacks for user mistakes."""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import re
import signal
import sys
import threading

from absl import flags

# The configs ship inside the package (pncnn_jax/configs/, in the wheel too); the checkout's configs/*.py are
# one-line doors to them. Found by path, not imported: this module imports nothing above runtime/.
CONFIG_DIR = pathlib.Path(__file__).resolve().parents[1] / "configs"
# Appended to train.py's and eval.py's docstrings, which absl prints for --help. Kept in step with
# models.VARIANTS, pncnn_jax/configs/ and its base.py by tests/test_commands.py (no jax import for --help).
CONFIG_FILES = ("synthetic", "kitti", "nyu", "ensemble_synthetic", "flow_synthetic")
VARIANTS = ("ncnn", "ncnn_conf_l1", "ncnn_conf_l2", "pncnn", "pncnn_exp", "no_conf_est", "no_var_est", "depth_pred",
            "laplace", "pncnn_beta", "sparse_var")
FLOW_VARIANTS = ("flow_ncnn", "flow_ncnn_conf", "flow_pncnn", "flow_pncnn_aniso")  # configs/flow_synthetic.py
CONFIG_HELP = f"""
Configs (--config FILE:VARIANT, e.g. configs/synthetic.py:pncnn):
  configs/synthetic.py           synthetic LiDAR street scenes, rendered on the fly: no download, sized for a CPU
  configs/kitti.py               KITTI depth completion, the published recipe (needs --config.data.data_dir)
  configs/nyu.py                 NYU-Depth-v2, the published recipe (needs --config.data.data_dir)
  configs/ensemble_synthetic.py  K members of one variant trained together, then every fusion rule
  configs/flow_synthetic.py      sparse optical flow (u, v) with labelled KLT-like failures: the flow variants
Variants: {', '.join(VARIANTS)}
  (NCNN, NCNN-Conf with L1 / L2, pNCNN, pNCNN-Exp, then the ablations; docs/SPEC.md section 5;
   pncnn_beta: pNCNN trained with beta-NLL weights; sparse_var: the variance UNet also sees the sparse input;
   our options, docs/results/RESULTS.md)
Flow variants (configs/flow_synthetic.py only): {', '.join(FLOW_VARIANTS)}
Most-used fields (--config.FIELD=VALUE; every field, with a comment, in pncnn_jax/configs/base.py):
  batch_size=4  learning_rate=0.01  num_epochs=10  steps_per_epoch=-1 (-1: one pass)  lr_decay_epochs=5  seed=0
  eval_every_steps=-1  max_to_keep=2  progress_bar=True  loss='' (the variant's)
  data.data_dir  data.train_crop_height  data.train_crop_width  data.eval_split  data.synthetic_size
  model.mask_input_confidence=False  model.conv_precision='highest'
A misspelled field is an error with a "Did you mean" hint. KITTI / NYU are built once into data.data_dir:
  python -m pncnn_jax.data.build kitti_depth --manual_dir KITTI_ROOT --data_dir DATA_DIR   (docs/DATA.md)
"""


def config_path(spec: str | os.PathLike) -> str:
  """`--config` FILE[:ARG] with FILE made a path that exists where it can be: FILE itself when it is a file;
  else, when FILE names a packaged config (`kitti`, `kitti.py` or `configs/kitti.py`), that config in
  pncnn_jax/configs/; else FILE unchanged (the caller reports it missing). ARG is kept as given.

  So `--config configs/kitti.py:pncnn` reads the checkout's configs/kitti.py in a checkout (a door to the packaged
  one) and the packaged one anywhere else, as `--config kitti:pncnn` does; a file of the user's always wins."""
  path, sep, arg = str(spec).partition(":")
  if not path or os.path.isfile(path):
    return str(spec)
  p = pathlib.PurePath(path)
  packaged = CONFIG_DIR / f"{p.stem}.py"
  if (p.suffix in ("", ".py") and p.parent.as_posix() in (".", "configs") and p.stem != "__init__"
      and packaged.is_file()):
    return f"{packaged}{sep}{arg}"
  return str(spec)


def define_config_flag(flag_values: flags.FlagValues = flags.FLAGS) -> flags.FlagHolder:
  """`--config FILE[:VARIANT]`: ml_collections' `DEFINE_config_file` (a locked config, `--config.FIELD=VALUE`
  overrides), whose FILE may also name a packaged config (`config_path`). For every command that takes a config."""
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top

  holder = config_flags.DEFINE_config_file(
      "config", None, "configs/<dataset>.py:<variant>, or <dataset>:<variant> from any directory",
      flag_values=flag_values, lock_config=True)
  flag = flag_values[holder.name]

  class _Parser(type(flag.parser)):  # ml_collections' ConfigFileFlagParser: it loads the file at the path given

    def parse(self, path):
      return super().parse(config_path(path))

  flag.parser = _Parser(name=holder.name, lock_config=True)
  return holder


PROGRESS_MODES = ("auto", "on", "off")
PROGRESS_HELP = "the progress bar on stderr: auto (only when stderr is a terminal), on or off"


def progress_enabled(mode: str, stream=None) -> bool:
  """`--progress auto|on|off` of every command: whether to draw a progress bar. 'auto' draws one only when `stream`
  (default stderr, where the bars go) is a terminal, so that logs and pipes get no carriage-return redraws."""
  if mode not in PROGRESS_MODES:
    raise ValueError(f"--progress {mode!r}: expected one of {', '.join(PROGRESS_MODES)}")
  if mode == "auto":
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
  return mode == "on"


def deprecated(old: str, new: str) -> None:
  """The one-line notice of a deprecated spelling that still works for this release."""
  print(f"note: {old} is deprecated and will be removed in the next release; use {new}", file=sys.stderr)


def define_progress_flag() -> flags.FlagHolder:
  """train.py's and eval.py's `--progress auto|on|off` (default auto)."""
  return flags.DEFINE_enum("progress", "auto", list(PROGRESS_MODES), PROGRESS_HELP)


def progress_from_flags(holder: flags.FlagHolder, config, argv: list[str] | None = None) -> bool:
  """train.py's and eval.py's progress bar: `--progress` when given; else the deprecated `--config.progress_bar`
  when given on the command line (with a notice: True is 'on', False 'off'); else 'auto', or 'off' where the
  config sets progress_bar=False."""
  argv = sys.argv[1:] if argv is None else argv
  old = any(a.split("=")[0] == "--config.progress_bar" for a in argv)
  if flags.FLAGS[holder.name].present:
    return progress_enabled(holder.value)
  if old:
    deprecated("--config.progress_bar", "--progress on|off|auto")
    return bool(config.progress_bar)
  return progress_enabled("auto") if config.get("progress_bar", True) else False


def first_line(e: BaseException) -> str:
  """The first line of an exception's message (its type's name when it has none): for one-line errors."""
  return (str(e).strip().splitlines() or [type(e).__name__])[0]


class ArgumentParser(argparse.ArgumentParser):
  """argparse's parser whose usage errors (a missing or malformed argument) are one line on stderr, exit status 2,
  like every other refusal of the commands, instead of the usage block followed by the reason."""

  def error(self, message: str):  # noqa: D102
    self.exit(2, f"error: {message} (see {self.prog} --help)\n")


class Terminated(BaseException):
  """SIGTERM arrived inside `sigterm_raises` (a BaseException, like KeyboardInterrupt: only cleanup catches it)."""


@contextlib.contextmanager
def sigterm_raises():
  """Within the block, SIGTERM raises `Terminated` in the main thread, so that `finally` blocks run (temporary files
  removed, locks released) as for Ctrl-C; the previous handler is restored after. Off the main thread: no change."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return

  def handler(signum, frame):
    del signum, frame
    raise Terminated()

  previous = signal.signal(signal.SIGTERM, handler)
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


def _fail(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def parse_flags_or_exit(argv: list[str]) -> list[str]:
  """absl's flag parser (`app.run(main, flags_parser=parse_flags_or_exit)`) that turns the user mistakes of
  `--config` into one line on stderr and exit status 2, instead of a traceback:
    * a misspelled `--config.<field>` (with ml_collections' "Did you mean" hint);
    * an error raised by the config file's get_config (an unknown variant);
    * a config file that does not exist."""
  try:
    rest = flags.FLAGS(argv)
  except (AttributeError, KeyError) as e:  # ml_collections: an unknown field of a locked config
    text = str(e.args[0] if e.args else e)
    lines = [x.strip().strip("'\"\\") for x in text.replace("\\n", "\n").splitlines()]
    lines = [x for x in lines if x]
    hint = next((x for x in lines if x.startswith("Did you mean")), "")
    name = lines[0] if lines else text
    _fail(f"no config field {name!r}" + (f"; {hint}" if hint else ""))
  except flags.IllegalFlagValueError as e:  # a flag's parser raised: for --config, the file's get_config
    last = re.sub(r"^[\w.]*(Error|Exception): ", "", [x for x in str(e).splitlines() if x.strip()][-1].strip())
    if "Error whilst parsing config file" in str(e):
      specs = [a.split("=", 1)[1] if "=" in a else argv[i + 1] for i, a in enumerate(argv)
               if a.split("=")[0] in ("--config", "-config") and ("=" in a or i + 1 < len(argv))]
      spec = specs[-1] if specs else ""  # absl keeps the last
      last = f"--config {spec}: " + re.sub(r"^configs/\w+\.py: ", "", last)
    _fail(last)
  config = flags.FLAGS["config"].value if "config" in flags.FLAGS else None
  if type(config).__name__ == "_ErrorConfig":  # ml_collections defers a file it could not load to the first use
    try:
      config.keys()
    except OSError as e:
      missing = re.search(r"No such file or directory: '([^']*)'", str(e))
      _fail(f"--config: {missing.group(1)} does not exist; the configs are "
            + ", ".join(f"configs/{c}.py" for c in CONFIG_FILES) if missing
            else f"--config: {str(e).splitlines()[-1].strip()}")
  return rest
