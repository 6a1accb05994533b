r"""Trains a pNCNN-family model: `pncnn-train --config kitti:pncnn --workdir DIR`.

The same command is `python -m pncnn_jax.training.train` and, in a checkout, `python train.py --config
configs/kitti.py:pncnn --workdir DIR`. --config takes a config file (FILE:VARIANT) or a packaged config by name from
any directory (kitti:pncnn, synthetic:ncnn; pncnn_jax/configs/).

Rerunning the same command resumes from the latest checkpoint in DIR. Config fields can be overridden on the
command line (`--config.batch_size=8`); a misspelled field is an error (the config is locked). Multi-process (one
process per host or per GPU, docs/guide/multi-host.md): run the same command in every process with
`--coordinator_address=HOST:PORT --num_processes=N --process_id=I`, or `--multihost` alone in a SLURM job or on a
TPU pod slice (pncnn_jax/runtime/distributed.py); `jax.distributed.initialize` runs before anything touches a device.
One training per workdir: a second training on a busy workdir stops at once naming the running one (eval.py and
predict may read it meanwhile). Ctrl-C stops a run resumably; a latest checkpoint that cannot be restored is named
with the newest intact step, which --allow_fallback resumes from. A rerun with other settings than the run's
config.json (finished or not) stops with one line naming the fields that differ; --allow_config_change continues
it with the new settings from its latest checkpoint (the old config is kept as config.until_step_<step>.json).
"""

from __future__ import annotations

import os
import sys
import types

from pncnn_jax.runtime import hostmem

_flags: types.SimpleNamespace | None = None  # the flag holders, defined once per process by `_define_flags`


def _define_flags() -> types.SimpleNamespace:
  """The command's flags, defined on first use (not at import: another command's module may be imported in the
  same process, and absl's flags are global)."""
  global _flags
  if _flags is None:
    from absl import flags  # pylint: disable=g-import-not-at-top

    from pncnn_jax.runtime import cli, distributed  # pylint: disable=g-import-not-at-top
    _flags = types.SimpleNamespace(
        config=cli.define_config_flag(),
        workdir=flags.DEFINE_string("workdir", None, "run directory (checkpoints, metrics.jsonl, config.json)"),
        allow_fallback=flags.DEFINE_bool(
            "allow_fallback", False, "resume from the newest intact checkpoint when the latest cannot be restored "
            "(a truncated or garbled file), with a warning"),
        allow_config_change=flags.DEFINE_bool(
            "allow_config_change", False, "continue a run (finished or not) whose config.json holds other "
            "settings: resume from its latest checkpoint and train on to the new config's last step with the new "
            "settings (the old config is kept as config.until_step_<step>.json); without it such a rerun stops, "
            "naming the fields that differ"),
        progress=cli.define_progress_flag())
    distributed.define_flags()
    flags.mark_flags_as_required(["config", "workdir"])
  return _flags


def main(argv: list[str] | None = None) -> None:
  """`pncnn-train`: parses `argv` (default sys.argv) and trains; exits with the command's status.

  Re-executes itself once with huge pages first (pncnn_jax/runtime/hostmem.py), before absl or jax is imported."""
  hostmem.reexec_with_hugepages()
  from absl import app  # pylint: disable=g-import-not-at-top

  from pncnn_jax.runtime import cli  # pylint: disable=g-import-not-at-top
  main_module = sys.modules.get("__main__")
  if main_module is not None:  # absl prints __main__'s docstring for --help: a console script has none
    main_module.__doc__ = __doc__ + cli.CONFIG_HELP  # configs, variants and fields in --help
  _define_flags()
  app.run(_train, argv=argv, flags_parser=cli.parse_flags_or_exit)


def _train(argv: list[str]) -> None:
  """absl's main: the parsed flags -> `loop.train_and_evaluate`; user mistakes are one line and a status."""
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top

  from pncnn_jax.runtime import cli, distributed  # pylint: disable=g-import-not-at-top
  f = _define_flags()
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
  config, workdir = f.config.value, f.workdir.value
  absl_logging.warning("devices: %s (process %d of %d)", jax.devices(), jax.process_index(), jax.process_count())
  try:
    summary = loop.train_and_evaluate(config, workdir, allow_fallback=f.allow_fallback.value,
                                      allow_config_change=f.allow_config_change.value,
                                      progress=cli.progress_from_flags(f.progress, config))
  except FloatingPointError as e:  # a diverged run: no traceback
    _fail(e, 1)
  except (ValueError, FileNotFoundError) as e:  # a setting out of range (ConfigError), data not built
    # (DatasetNotFoundError), a workdir of another run or in use, a checkpoint that cannot be restored: one line
    _fail(e, 2)
  except OSError as e:  # a full disk, a read-only workdir
    _fail(f"cannot write {e.filename or workdir}: {e.strerror or e}" + (
        " (the disk is full; the run is resumable once there is room)" if "space" in str(e.strerror) else ""), 1)
  except KeyboardInterrupt:
    _fail(f"interrupted; the run in {workdir} is resumable: rerun the same command to continue from its "
          f"latest checkpoint ({latest_step(workdir)})", 130)
  if summary and jax.process_index() == 0:
    if summary.get("finished"):
      best = f", best checkpoint: step {summary['best_step']}" if summary.get("best_step") is not None else ""
      print(f"the run in {workdir} had finished already at step {summary['step']}: nothing to do (its "
            f"results: {', '.join(summary['results'])}{best}; evaluate with eval.py --checkpoint best)")
      if not summary["val"]:
        return
    if "rows" in summary:  # an ensemble (configs/ensemble_synthetic.py): every member and fusion rule
      print(evaluate.format_table(summary["rows"], config.metrics, header="member / fusion"))
      return
    val = summary["val"]
    print(f"final validation (step {summary['step']}): " + evaluate.format_values(
        val, ("mae", "rmse", "ause_pncnn", "auce", "epe", "ause_epe", "auroc_corrupted"),
        evaluate.get_metric_set(config.metrics).units))


def latest_step(workdir: str) -> str:
  """'step N' of the newest step folder of `workdir`, or 'none yet: it starts over': from the file system, without
  orbax (an interrupt may have stopped its manager inside a save)."""
  from pncnn_jax.checkpoints import manager  # pylint: disable=g-import-not-at-top
  steps = manager.step_folders(workdir)
  return f"step {steps[-1]}" if steps else "none yet: it starts over"


def _fail(error, status: int) -> None:
  """One line on stderr and exit `status` at once: os._exit, so that no background thread (orbax's async saver,
  grain's readers) prints a traceback while the interpreter shuts down ('cannot schedule new futures')."""
  print(f"error: {error}", file=sys.stderr)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)


if __name__ == "__main__":
  main()
