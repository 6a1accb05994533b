r"""Trains a pNCNN-family model: `python train.py --config configs/kitti.py:pncnn --workdir DIR`.

Rerunning the same command resumes from the latest checkpoint in DIR. Config fields can be overridden on the
command line (`--config.batch_size=8`); a misspelled field is an error (the config is locked). Multi-process (one
process per host or per GPU, docs/guide/multi-host.md): run the same command in every process with
`--coordinator_address=HOST:PORT --num_processes=N --process_id=I`, or `--multihost` alone in a SLURM job or on a
TPU pod slice (pncnn_jax/runtime/distributed.py); `jax.distributed.initialize` runs before anything touches a device.
"""

import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from pncnn_jax.runtime import cli, distributed

__doc__ += cli.CONFIG_HELP  # configs, variants and fields in --help

_CONFIG = config_flags.DEFINE_config_file("config", None, "configs/<dataset>.py:<variant>", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "run directory (checkpoints, metrics.jsonl, config.json)")
distributed.define_flags()
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every file it writes at INFO
  try:
    distributed.initialize_from_flags()
  except ValueError as e:  # an incomplete set of flags, or --multihost outside a cluster
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  import jax  # pylint: disable=g-import-not-at-top

  from pncnn_jax import evaluate  # pylint: disable=g-import-not-at-top
  from pncnn_jax.data.build import DatasetNotFoundError  # pylint: disable=g-import-not-at-top
  from pncnn_jax.from_config import ConfigError  # pylint: disable=g-import-not-at-top
  from pncnn_jax.training import loop as train  # pylint: disable=g-import-not-at-top
  absl_logging.warning("devices: %s (process %d of %d)", jax.devices(), jax.process_index(), jax.process_count())
  try:
    summary = train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except (ConfigError, DatasetNotFoundError) as e:  # a setting out of range, data not built: nothing was started
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  except FloatingPointError as e:  # a diverged run: no traceback
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  except (ValueError, FileNotFoundError) as e:  # bad input (a workdir of another run, ...): one line, status 2
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  if summary and jax.process_index() == 0:
    if "rows" in summary:  # an ensemble (configs/ensemble_synthetic.py): every member and fusion rule
      print(evaluate.format_table(summary["rows"], _CONFIG.value.metrics, header="member / fusion"))
      return
    val = summary["val"]
    print(f"final validation (step {summary['step']}): " + ", ".join(
        f"{k}={val[k]:.4g}" for k in ("mae", "rmse", "ause_pncnn", "auce", "epe", "ause_epe", "auroc_corrupted")
        if isinstance(val.get(k), float)))


if __name__ == "__main__":
  from pncnn_jax.runtime import hostmem  # pylint: disable=g-import-not-at-top
  hostmem.reexec_with_hugepages()  # 2 MiB pages for XLA's per-step buffers (see pncnn_jax/runtime/hostmem.py)
  app.run(main, flags_parser=cli.parse_flags_or_exit)
