r"""Evaluates a checkpoint: `python eval.py --config configs/kitti.py:pncnn --workdir DIR --checkpoint best`.

`--checkpoint` is 'best' or 'latest' (of the run in --workdir), a pncnn_jax checkpoint directory, a shipped model
(`synthetic:pncnn_masked`, see pncnn_jax/pretrained), or an official
pNCNN `.pth.tar` / `.npz` state dict. Prints the metrics table and writes results.{json,csv,md},
sparsification.png and panels.png to --output (default DIR/eval_<checkpoint>). `--pairs_dir` evaluates KITTI
velodyne_raw/groundtruth PNG pairs found under a directory (bottom 352x1216 crop) instead of the config's split.
Evaluation never builds the training pipeline. The output folder is one evaluation's at a time (a second eval.py,
predict or bag command on it stops at once, naming the first) and records the checkpoint that wrote it in
pncnn_writer.json: the reports of another checkpoint or other settings there are refused in one line unless
--overwrite. An empty --workdir or --output ("" from an unset shell variable) is refused.
"""

import os
import pathlib
import sys

# 2 MiB pages for XLA's per-step buffers (pncnn_jax/runtime/hostmem.py, standard library only): the re-execution comes
# first, so that it costs an interpreter start and not absl's and the configs' imports (~0.35 s).
if __name__ == "__main__":
  from pncnn_jax.runtime import hostmem
  hostmem.reexec_with_hugepages()

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from pncnn_jax.runtime import cli, distributed

__doc__ += cli.CONFIG_HELP  # configs, variants and fields in --help

_CONFIG = config_flags.DEFINE_config_file("config", None, "configs/<dataset>.py:<variant>", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "training run directory (for best/latest; default output root)")
_CHECKPOINT = flags.DEFINE_string("checkpoint", "best", "best | latest | PATH (.pth.tar, .npz or a directory); "
                                  "ensemble configs: also PATH,PATH,... (its members)")
_OUTPUT = flags.DEFINE_string("output", None, "report directory (default: <workdir>/eval_<checkpoint>)")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "replace the reports in --output that another checkpoint or "
                                "other settings wrote (default: refused, naming them)")
_PAIRS_DIR = flags.DEFINE_string("pairs_dir", None, "evaluate the KITTI PNG pairs under this directory instead")
_ALLOW_MISMATCH = flags.DEFINE_bool("allow_mismatch", False, "evaluate a checkpoint trained on another dataset, "
                                    "variant, loss or input scaling than --config says (refused otherwise)")
_ALLOW_FALLBACK = flags.DEFINE_bool("allow_fallback", False, "--checkpoint best/latest: evaluate the newest intact "
                                    "step of the run when that one cannot be restored (a truncated or garbled file)")
distributed.define_flags()  # --multihost, --coordinator_address, --num_processes, --process_id (as train.py)
_PROGRESS = cli.define_progress_flag()
flags.mark_flags_as_required(["config"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every file it writes at INFO
  try:
    distributed.initialize_from_flags()
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  from pncnn_jax import evaluate, from_config  # pylint: disable=g-import-not-at-top
  from pncnn_jax.data.build import DatasetNotFoundError  # pylint: disable=g-import-not-at-top
  from pncnn_jax.training import config_fields  # pylint: disable=g-import-not-at-top
  try:
    config_fields.check_config(_CONFIG.value, training=False)
    if not _PAIRS_DIR.value:
      from_config.check_data(_CONFIG.value, training=False)  # the evaluation split is built
  except (from_config.ConfigError, DatasetNotFoundError) as e:  # one line, exit 2, nothing created
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  from pncnn_jax.runtime import run_files  # pylint: disable=g-import-not-at-top
  try:
    run_files.require_path(_WORKDIR.value, "--workdir")  # "" would be the current directory
    run_files.require_path(_OUTPUT.value, "--output")
  except ValueError as e:
    _fail(e, 2)
  if not _WORKDIR.value and not _OUTPUT.value:
    raise app.UsageError("give --workdir or --output (where the reports go)")
  if "ensemble" in _CONFIG.value:  # members and fusion rules side by side (paper Table 3)
    from pncnn_jax.ensemble import members as ensemble_members  # pylint: disable=g-import-not-at-top
    try:
      members = [c.strip() for c in _CHECKPOINT.value.split(",")]  # K checkpoints, or a step of --workdir
      rows = ensemble_members.evaluate_ensemble_config(_CONFIG.value, members if len(members) > 1 else _WORKDIR.value,
                                              _CHECKPOINT.value, allow_mismatch=_ALLOW_MISMATCH.value)
    except (ValueError, FileNotFoundError) as e:
      _fail(e, 2)
    print(evaluate.format_table(rows, _CONFIG.value.metrics, header="member / fusion"))
    if _OUTPUT.value:  # the table and its numbers, as training writes them into an ensemble's workdir
      ensemble_members.write_ensemble_eval(rows, pathlib.Path(_OUTPUT.value), _CONFIG.value.metrics)
      print(f"wrote {_OUTPUT.value}/ensemble_eval.md and ensemble_eval.json")
    return
  try:
    own = evaluate.get_metric_set(_CONFIG.value.metrics).evaluate_checkpoint
  except ValueError as e:
    _fail(e, 2)
  if own is not None:  # an extension's own evaluation (pncnn_jax.flow: configs/flow_synthetic.py)
    try:
      own(_CONFIG.value, _WORKDIR.value, _CHECKPOINT.value, _OUTPUT.value)
    except (ValueError, FileNotFoundError, FloatingPointError) as e:
      sys.exit(f"error: {e}")
    return
  try:
    evaluate.evaluate_checkpoint(_CONFIG.value, _WORKDIR.value, _CHECKPOINT.value, pairs_dir=_PAIRS_DIR.value,
                                 output_dir=_OUTPUT.value, allow_mismatch=_ALLOW_MISMATCH.value,
                                 allow_fallback=_ALLOW_FALLBACK.value, overwrite=_OVERWRITE.value,
                                 progress=cli.progress_from_flags(_PROGRESS, _CONFIG.value))
  except FloatingPointError as e:  # a diverged checkpoint
    _fail(e, 1)
  except (ValueError, FileNotFoundError) as e:  # bad input (DepthFileError, CheckpointFormatError, a checkpoint
    # trained as something else, CheckpointCorruptError): one line, exit status 2
    _fail(e, 2)
  except OSError as e:  # a read-only or full output folder
    _fail(f"cannot write {e.filename or _OUTPUT.value}: {e.strerror or e}", 1)
  except KeyboardInterrupt:
    _fail("interrupted", 130)


def _fail(error, status: int) -> None:
  """One line on stderr and exit at once (os._exit: no background thread prints while the interpreter stops)."""
  print(f"error: {error}", file=sys.stderr)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags_or_exit)
