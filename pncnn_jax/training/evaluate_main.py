r"""Evaluates a checkpoint: `python eval.py --config configs/kitti.py:pncnn --workdir DIR --checkpoint best`.

`--checkpoint` is 'best' or 'latest' (of the run in --workdir), a pncnn_jax checkpoint directory, a shipped model
(`synthetic:pncnn_masked`, see pncnn_jax/pretrained), an official pNCNN `.pth.tar` / `.npz` state dict, or for an
ensemble config its members separated by commas. Prints the metrics table and writes results.{json,csv,md} and the
evaluation's figures (sparsification.png and panels.png of a depth model) to --output (default
DIR/eval_<checkpoint>). `--sensors hdl64,vlp16,vo_015` evaluates a depth model on the same split seen by each of
these sensors (pncnn_jax.data.sensors) and writes one row per sensor with its ratios to the first's (or
`--reference_sensor`'s). `--pairs_dir` evaluates KITTI velodyne_raw/groundtruth PNG pairs found under a directory
(bottom 352x1216 crop) instead of the config's split. Evaluation never builds the training pipeline. The output
folder is one evaluation's at a time (a second eval.py, predict or bag command on it stops at once, naming the
first) and records the checkpoint that wrote it in pncnn_writer.json: the reports of another checkpoint or other
settings there are refused in one line unless --overwrite. An empty --workdir or --output ("" from an unset shell
variable) is refused. Also installed as `pncnn-eval`.
"""

# This module is eval.py (a shim that calls `main`): the flags and one call of the one entry,
# `pncnn_jax.evaluate.checkpoint.evaluate_checkpoint`, for every config. It sits in the training layer because it
# checks the config with `training.config_fields` as train.py does; importing it imports no jax (`--help` is instant).

import os
import sys

from pncnn_jax.runtime import cli, distributed, hostmem

_FLAGS = {}


def define_flags() -> None:
  """eval.py's flags (once per process)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  if _FLAGS:
    return
  _FLAGS.update(
      config=cli.define_config_flag(),  # a path, or a packaged config by name (kitti:pncnn) from any directory
      workdir=flags.DEFINE_string("workdir", None, "training run directory (for best/latest; default output root)"),
      checkpoint=flags.DEFINE_string("checkpoint", "best", "best | latest | PATH (.pth.tar, .npz or a directory); "
                                     "ensemble configs: also PATH,PATH,... (its members)"),
      output=flags.DEFINE_string("output", None, "report directory (default: <workdir>/eval_<checkpoint>)"),
      overwrite=flags.DEFINE_bool("overwrite", False, "replace the reports in --output that another checkpoint or "
                                  "other settings wrote (default: refused, naming them)"),
      pairs_dir=flags.DEFINE_string("pairs_dir", None, "evaluate the KITTI PNG pairs under this directory instead"),
      sensors=flags.DEFINE_list("sensors", None, "evaluate the depth model on the split seen by each of these sensors "
                                "(names of pncnn_jax.data.sensors, e.g. hdl64,hdl32,vlp16,vo_015): one row each"),
      reference_sensor=flags.DEFINE_string("reference_sensor", None, "with --sensors: the sensor the ratios are "
                                           "taken to (default: the first)"),
      allow_mismatch=flags.DEFINE_bool("allow_mismatch", False, "evaluate a checkpoint trained on another dataset, "
                                       "variant, loss or input scaling than --config says (refused otherwise)"),
      allow_fallback=flags.DEFINE_bool("allow_fallback", False, "--checkpoint best/latest: evaluate the newest "
                                       "intact step of the run when that one cannot be restored (a truncated or "
                                       "garbled file)"),
      progress=cli.define_progress_flag())
  distributed.define_flags()  # --multihost, --coordinator_address, --num_processes, --process_id (as train.py)
  flags.mark_flags_as_required(["config"])
  for name in _FLAGS:  # --help lists the flags of the program (eval.py, pncnn-eval), not of this module
    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])


def run(argv) -> None:
  """eval.py's main: the flags' checks (one line and exit status 2 on a mistake), then `evaluate_checkpoint`."""
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  f = {k: h.value for k, h in _FLAGS.items()}
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every file it writes at INFO
  try:
    distributed.initialize_from_flags()
    from pncnn_jax import from_config  # pylint: disable=g-import-not-at-top
    from pncnn_jax.evaluate import checkpoint  # pylint: disable=g-import-not-at-top
    from pncnn_jax.runtime import run_files  # pylint: disable=g-import-not-at-top
    from pncnn_jax.training import config_fields  # pylint: disable=g-import-not-at-top
    config_fields.check_config(f["config"], training=False)
    if not f["pairs_dir"]:
      from_config.check_data(f["config"], training=False)  # the evaluation split is built
    run_files.require_path(f["workdir"], "--workdir")  # "" would be the current directory
    run_files.require_path(f["output"], "--output")
  except (ValueError, FileNotFoundError) as e:  # ConfigError, DatasetNotFoundError, incomplete flags: nothing made
    fail(e, 2)
  if not f["workdir"] and not f["output"]:
    raise app.UsageError("give --workdir or --output (where the reports go)")
  try:
    checkpoint.evaluate_checkpoint(f["config"], f["workdir"], f["checkpoint"], pairs_dir=f["pairs_dir"],
                                   output_dir=f["output"], allow_mismatch=f["allow_mismatch"],
                                   allow_fallback=f["allow_fallback"], overwrite=f["overwrite"],
                                   sensors=f["sensors"], reference_sensor=f["reference_sensor"],
                                   progress=cli.progress_from_flags(_FLAGS["progress"], f["config"]))
  except FloatingPointError as e:  # a diverged checkpoint
    fail(e, 1)
  except (ValueError, FileNotFoundError) as e:  # bad input (DepthFileError, CheckpointFormatError, a checkpoint
    # trained as something else, CheckpointCorruptError, an output folder in use or of another checkpoint)
    fail(e, 2)
  except OSError as e:  # a read-only or full output folder
    fail(f"cannot write {e.filename or f['output']}: {e.strerror or e}", 1)
  except KeyboardInterrupt:
    fail("interrupted", 130)


def fail(error, status: int) -> None:
  """One line on stderr and exit at once (os._exit: no background thread prints while the interpreter stops)."""
  print(f"error: {error}", file=sys.stderr)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)


def main(argv=None) -> None:
  """The `pncnn-eval` command (and eval.py): 2 MiB pages first (`hostmem`), then the flags and `run`."""
  hostmem.reexec_with_hugepages()
  from absl import app  # pylint: disable=g-import-not-at-top
  main_module = sys.modules.get("__main__")
  if main_module is not None:  # absl's --help prints the program's docstring
    main_module.__doc__ = __doc__ + cli.CONFIG_HELP
  define_flags()
  app.run(run, argv=argv, flags_parser=cli.parse_flags_or_exit)


if __name__ == "__main__":
  main()
