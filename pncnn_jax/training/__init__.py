"""Training: the pure steps and the resumable, workdir-centred loop.

  step      TrainState, `train_step(state, batch, *, loss_name)`, `eval_step`, the optimizer and schedule
  ensemble  the ensemble's step: M members trained together in one vmapped step, each on its own data order
  loop      `train_and_evaluate(config, workdir)`: data, sharding, checkpoints, validation, metrics (train.py)
"""

from pncnn_jax.training.loop import train_and_evaluate  # noqa: F401
from pncnn_jax.training.step import TrainState, eval_step, make_optimizer, train_step  # noqa: F401
