r"""Trains a pNCNN-family model: `python train.py --config configs/kitti.py:pncnn --workdir DIR`.

Rerunning the same command resumes from the latest checkpoint in DIR. Config fields can be overridden on the
command line (`--config.batch_size=8`); a misspelled field is an error (the config is locked). Multi-process (one
process per host or per GPU, docs/guide/multi-host.md): run the same command in every process with
`--coordinator_address=HOST:PORT --num_processes=N --process_id=I`, or `--multihost` alone in a SLURM job or on a
TPU pod slice (pncnn_jax/runtime/distributed.py); `jax.distributed.initialize` runs before anything touches a device.
One training per workdir: a second train.py on a busy workdir stops at once naming the running one (eval.py and
predict may read it meanwhile). Ctrl-C stops a run resumably; a latest checkpoint that cannot be restored is named
with the newest intact step, which --allow_fallback resumes from. A rerun with other settings than the run's
config.json (finished or not) stops with one line naming the fields that differ; --allow_config_change continues
it with the new settings from its latest checkpoint (the old config is kept as config.until_step_<step>.json).
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
_WORKDIR = flags.DEFINE_string("workdir", None, "run directory (checkpoints, metrics.jsonl, config.json)")
_ALLOW_FALLBACK = flags.DEFINE_bool("allow_fallback", False, "resume from the newest intact checkpoint when the "
                                    "latest cannot be restored (a truncated or garbled file), with a warning")
_ALLOW_CONFIG_CHANGE = flags.DEFINE_bool(
    "allow_config_change", False, "continue a run (finished or not) whose config.json holds other settings: resume "
    "from its latest checkpoint and train on to the new config's last step with the new settings (the old config is "
    "kept as config.until_step_<step>.json); without it such a rerun stops, naming the fields that differ")
distributed.define_flags()
_PROGRESS = cli.define_progress_flag()
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every file it writes at INFO
  try:
    distributed.initialize_from_flags()
  except ValueError as e:  # an incomplete set of flags, or --multihost outside a cluster
    _fail(e, 2)
  import jax  # pylint: disable=g-import-not-at-top

  from pncnn_jax import evaluate  # pylint: disable=g-import-not-at-top
  from pncnn_jax.training import loop  # pylint: disable=g-import-not-at-top
  absl_logging.warning("devices: %s (process %d of %d)", jax.devices(), jax.process_index(), jax.process_count())
  try:
    summary = loop.train_and_evaluate(_CONFIG.value, _WORKDIR.value, allow_fallback=_ALLOW_FALLBACK.value,
                                      allow_config_change=_ALLOW_CONFIG_CHANGE.value,
                                      progress=cli.progress_from_flags(_PROGRESS, _CONFIG.value))
  except FloatingPointError as e:  # a diverged run: no traceback
    _fail(e, 1)
  except (ValueError, FileNotFoundError) as e:  # a setting out of range (ConfigError), data not built
    # (DatasetNotFoundError), a workdir of another run or in use, a checkpoint that cannot be restored: one line
    _fail(e, 2)
  except OSError as e:  # a full disk, a read-only workdir
    _fail(f"cannot write {e.filename or _WORKDIR.value}: {e.strerror or e}" + (
        " (the disk is full; the run is resumable once there is room)" if "space" in str(e.strerror) else ""), 1)
  except KeyboardInterrupt:
    _fail(f"interrupted; the run in {_WORKDIR.value} is resumable: rerun the same command to continue from its "
          f"latest checkpoint ({_latest_step(_WORKDIR.value)})", 130)
  if summary and jax.process_index() == 0:
    if summary.get("finished"):
      best = f", best checkpoint: step {summary['best_step']}" if summary.get("best_step") is not None else ""
      print(f"the run in {_WORKDIR.value} had finished already at step {summary['step']}: nothing to do (its "
            f"results: {', '.join(summary['results'])}{best}; evaluate with eval.py --checkpoint best)")
      if not summary["val"]:
        return
    if "rows" in summary:  # an ensemble (configs/ensemble_synthetic.py): every member and fusion rule
      print(evaluate.format_table(summary["rows"], _CONFIG.value.metrics, header="member / fusion"))
      return
    val = summary["val"]
    print(f"final validation (step {summary['step']}): " + evaluate.format_values(
        val, ("mae", "rmse", "ause_pncnn", "auce", "epe", "ause_epe", "auroc_corrupted"),
        evaluate.get_metric_set(_CONFIG.value.metrics).units))


def _latest_step(workdir: str) -> str:
  """'step N' of the newest complete step folder of `workdir`, or 'none yet: it starts over'; without orbax."""
  steps = [int(p.name) for p in (pathlib.Path(workdir) / "checkpoints").glob("*") if p.name.isdigit()]
  return f"step {max(steps)}" if steps else "none yet: it starts over"


def _fail(error, status: int) -> None:
  """One line on stderr and exit `status` at once: os._exit, so that no background thread (orbax's async saver,
  grain's readers) prints a traceback while the interpreter shuts down ('cannot schedule new futures')."""
  print(f"error: {error}", file=sys.stderr)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags_or_exit)
