"""Training: the pure steps, the resumable, workdir-centred loop and the command.

  step           TrainState, `train_step(state, batch, *, loss_name)`, `eval_step`, the optimizer and schedule
  ensemble       the ensemble's step: M members trained together in one vmapped step, each on its own data order
  loop           `train_and_evaluate(config, workdir)`: data, sharding, checkpoints, validation, metrics (train.py)
  config_fields  every config field's constraint, `check_config` (train.py, eval.py, the loop)
  evaluate_main  eval.py's flags and main (`pncnn-eval`)
  train          the command: `pncnn-train`, `python -m pncnn_jax.training.train`, a checkout's train.py

The names below are imported on first use (`train` and `evaluate_main` are also programs, whose --help imports no
jax).
"""

from pncnn_jax.runtime.alias import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "train_and_evaluate": "pncnn_jax.training.loop",
    "TrainState": "pncnn_jax.training.step",
    "eval_step": "pncnn_jax.training.step",
    "make_optimizer": "pncnn_jax.training.step",
    "train_step": "pncnn_jax.training.step",
})
