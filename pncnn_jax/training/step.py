"""The pure training and evaluation steps: TrainState, optimizer, `train_step`, `eval_step`.

`train_step(state, batch, *, loss_name) -> (state, metrics)` is a pure function; bind the static `loss_name` with
`functools.partial` and `jax.jit` it. Under `jit` with the batch sharded over a `data` mesh axis and the state
replicated, it is data-parallel: the loss and the BatchNorm statistics are means over the *global* batch, so
gradients and statistics equal those of one device on the whole batch (sync BatchNorm, as the reference's
single-GPU training).

Batches are dicts of NHWC arrays: `sparse` (B, H, W, 1) input depth in metres (0 = missing) and `target`
(B, H, W, 1) ground-truth depth in metres (0 = no ground truth).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct
from flax.training import train_state

from pncnn_jax import losses
from pncnn_jax.nn import models

Array = jax.Array


class TrainState(train_state.TrainState):
  """Flax TrainState plus the BatchNorm running statistics (empty dict for NCNN, which has none) and, for a model
  with dropout, the key data (uint32 (2,)) its dropout masks derive from: step t uses fold_in(key, t), so a resumed
  run draws the masks an uninterrupted one would (None for models without dropout; not checkpointed)."""

  batch_stats: Any = struct.field(default_factory=dict)
  dropout_key: Any = None


def step_lr(count: Array, init_value: Array, transition_steps: Array, decay_rate: Array) -> Array:
  """PyTorch StepLR stepped once per epoch (docs/SPEC.md §11.2: KITTI decays every 5 epochs, NYU every 3):

    lr(count) = init_value * decay_rate ^ floor(count / transition_steps),   transition_steps = steps per epoch *
                                                                             decay epochs

  `optax.exponential_decay(init_value, transition_steps, decay_rate, staircase=True)` on arrays (its argument checks
  need Python numbers), so that the settings can be optimizer state instead of constants (`make_optimizer`)."""
  return jnp.where(count <= 0, init_value, init_value * jnp.power(decay_rate, jnp.floor(count / transition_steps)))


def _adam_step_lr(init_value, transition_steps, decay_rate) -> optax.GradientTransformation:
  """Adam as the published models were trained (amsgrad=False, docs/SPEC.md §11.1): betas (0.9, 0.999), eps 1e-8
  added after the bias-corrected sqrt(v), no weight decay; its step scaled by -`step_lr` of the update count."""
  return optax.chain(optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8),
                     optax.scale_by_learning_rate(lambda count: step_lr(count, init_value, transition_steps,
                                                                        decay_rate)))


def make_optimizer(clip_norm: float = 0.0) -> optax.GradientTransformation:
  """The optimizer of every training (single models and ensembles): Adam with the StepLR schedule (`step_lr`),
  whose three settings are hyperparameters held in the optimizer state (`optax.inject_hyperparams`), not constants
  of the program. `set_step_lr` puts a config's settings there after `init`; `learning_rate` reads the rate of the
  next update back. So one optimizer object per `clip_norm` (cached), and one compiled training step, serves every
  learning rate, decay and epoch length.

  clip_norm > 0 (a recipe option, not the published training): the gradient g is first scaled to
  g * min(1, clip_norm / ||g||_2), ||.||_2 over all parameters, so one outlier batch moves Adam's moments by at
  most that much."""
  return _make_optimizer(float(clip_norm))


@functools.lru_cache(maxsize=8)
def _make_optimizer(clip_norm: float) -> optax.GradientTransformation:
  adam = optax.inject_hyperparams(_adam_step_lr)(init_value=0.0, transition_steps=1, decay_rate=1.0)
  return optax.chain(optax.clip_by_global_norm(clip_norm), adam) if clip_norm > 0 else adam


STEP_LR_SETTINGS = ("init_value", "transition_steps", "decay_rate")


def set_step_lr(opt_state: Any, base_lr: float, steps_per_epoch: int = 1, decay_epochs: int = 0,
                gamma: float = 0.1) -> Any:
  """`opt_state` (of `make_optimizer`; an ensemble's, with a leading member axis) with the StepLR settings
  lr = base_lr * gamma^(epoch // decay_epochs), epoch = step // steps_per_epoch (`step_lr`); decay_epochs 0 keeps
  base_lr constant."""
  values = (dict(zip(STEP_LR_SETTINGS, (base_lr, steps_per_epoch * decay_epochs, gamma))) if decay_epochs > 0
            else dict(zip(STEP_LR_SETTINGS, (base_lr, 1, 1.0))))
  return with_step_lr_settings(opt_state, {
      k: jnp.full(jnp.shape(old), v, jnp.asarray(old).dtype)
      for k, v in values.items() for old in [optax.tree_utils.tree_get(opt_state, k)]})


def step_lr_settings(opt_state: Any) -> dict[str, Array]:
  """The StepLR settings held by a `make_optimizer` state: {init_value, transition_steps, decay_rate}."""
  return {k: optax.tree_utils.tree_get(opt_state, k) for k in STEP_LR_SETTINGS}


def with_step_lr_settings(opt_state: Any, settings: Mapping[str, Array]) -> Any:
  """`opt_state` with the StepLR settings `settings` (arrays of `step_lr_settings`'s shapes)."""
  return optax.tree_utils.tree_set(opt_state, **settings)


def _has_step_lr(opt_state: Any) -> bool:
  return optax.tree_utils.tree_get(opt_state, "init_value") is not None


def learning_rate(opt_state: Any) -> Array:
  """The learning rate of the next update of a `make_optimizer` state (per member for an ensemble's)."""
  count = optax.tree_utils.tree_get(  # the schedule's own count (Adam's and inject_hyperparams' have one too)
      opt_state, "count", filtering=lambda path, _: getattr(path[-1], "tuple_name", "") == "ScaleByScheduleState")
  return step_lr(count, **step_lr_settings(opt_state))


def create_train_state(model: nn.Module, variables: dict[str, Any], *, learning_rate: float,
                       steps_per_epoch: int = 1, decay_epochs: int = 0, gamma: float = 0.1, clip_norm: float = 0.0,
                       dropout_seed: int = 0) -> TrainState:
  """A TrainState from initial or converted variables ({'params', 'batch_stats'?}) with the optimizer of
  `make_optimizer(clip_norm)` and the StepLR schedule of `set_step_lr` (decay_epochs 0: a constant
  `learning_rate`); a model with dropout (`model.dropout_rate > 0`, e.g. pncnn_jax.baselines) gets the dropout key
  of `dropout_seed`."""
  key = None
  if getattr(model, "dropout_rate", 0) > 0:
    key = jax.random.key_data(jax.random.fold_in(jax.random.key(dropout_seed), DROPOUT_STREAM))
  state = TrainState.create(apply_fn=model.apply, params=variables["params"], tx=make_optimizer(clip_norm),
                            batch_stats=variables.get("batch_stats", {}), dropout_key=key)
  return state.replace(opt_state=set_step_lr(state.opt_state, learning_rate, steps_per_epoch, decay_epochs, gamma))


DROPOUT_STREAM = 0x64726F70  # folded into the seed's key, so dropout masks never reuse the init's random numbers


def dropout_rngs(state: TrainState) -> dict[str, Array]:
  """{'dropout': fold_in(state.dropout_key, state.step)} for a model with dropout, else {} (an unused rng)."""
  if state.dropout_key is None:
    return {}
  return {"dropout": jax.random.fold_in(jax.random.wrap_key_data(state.dropout_key), state.step)}


def variables_of(state: TrainState) -> dict[str, Any]:
  """The model variables held by a state, in `model.apply` form."""
  if state.batch_stats:
    return {"params": state.params, "batch_stats": state.batch_stats}
  return {"params": state.params}


def state_to_tree(state: TrainState) -> dict[str, Any]:
  """What a checkpoint stores: a plain dict (step, params, opt_state, batch_stats if any)."""
  tree = {"step": state.step, "params": state.params, "opt_state": state.opt_state}
  if state.batch_stats:
    tree["batch_stats"] = state.batch_stats
  return tree


def tree_to_state(state: TrainState, tree: Mapping[str, Any]) -> TrainState:
  """`state` with the arrays of a checkpoint tree (`state_to_tree`)."""
  return state.replace(step=tree["step"], params=tree["params"], opt_state=tree["opt_state"],
                       batch_stats=tree.get("batch_stats", state.batch_stats))


def loss_and_grads(
    state: TrainState, params: Any, batch: dict[str, Array], loss_name: str
) -> tuple[tuple[Array, tuple[models.ModelOutput, Any]], Any]:
  """Train-mode forward (BatchNorm batch statistics), the loss, and d loss / d params.

  Returns ((loss, (outputs, new_batch_stats)), grads).
  """
  loss_fn = losses.get_loss(loss_name)

  def objective(p):
    variables = {"params": p}
    if state.batch_stats:
      variables["batch_stats"] = state.batch_stats
      out, updates = state.apply_fn(variables, batch["sparse"], train=True, mutable=["batch_stats"],
                                    rngs=dropout_rngs(state))
      new_stats = updates["batch_stats"]
    else:
      out, new_stats = state.apply_fn(variables, batch["sparse"], train=True, rngs=dropout_rngs(state)), {}
    return loss_fn(out, batch["target"]), (out, new_stats)

  return jax.value_and_grad(objective, has_aux=True)(params)


def _raveled(tree: Any) -> Array:
  """Every element of every leaf of `tree` in one vector (empty for an empty tree). The checks and norms below
  reduce it once instead of once per leaf: per leaf, they were ~920 of the ~2,700 fused kernels of a pNCNN training
  step on 2 devices, whose XLA:CPU compilation this cut from 12.4 to 9.8 s of CPU (docs/develop/benchmarks-log.md)."""
  leaves = [jnp.ravel(x) for x in jax.tree.leaves(tree)]
  return jnp.concatenate(leaves) if leaves else jnp.zeros((0,), jnp.float32)


def all_finite(tree: Any) -> Array:
  """True iff every element of every leaf of `tree` is finite (True for an empty tree)."""
  return jnp.all(jnp.isfinite(_raveled(tree)))


def global_norm(tree: Any) -> Array:
  """The L2 norm over every element of every leaf, sqrt(sum_i x_i^2) (`optax.tree.norm` of a real tree)."""
  v = _raveled(tree)
  return jnp.sqrt(jnp.sum(v * v))


def state_is_finite(state: TrainState) -> Array:
  """The health check of a state: its parameters, their global L2 norm (which overflows float32 once an element
  passes ~1e19, where the network's activations overflow too) and its BatchNorm statistics are finite.

  The training loop applies it after every step, before anything is saved, and to the state it resumes from. One
  non-finite element makes the norm non-finite, so the norm's check covers the elements' too.
  """
  return jnp.isfinite(global_norm(state.params)) & all_finite(state.batch_stats)


def train_step(state: TrainState, batch: dict[str, Array], *, loss_name: str) -> tuple[TrainState, dict[str, Array]]:
  """One optimisation step: forward in train mode, loss, backward, Adam update, BatchNorm statistics update.

  Metrics (scalars): loss, lr (the learning rate of this update, for a `make_optimizer` state), the loss's batch
  errors (`losses.get_batch_errors`: depth mae and rmse in metres, from
  this step's train-mode prediction, before the update, as the reference's training CSV; flow epe and rmse [px]),
  grad_norm and param_norm (global L2), and is_finite: the loss, the gradients and their norm, and the updated state
  (`state_is_finite`: parameters, their norm, BatchNorm statistics).
  """
  (loss, (out, new_stats)), grads = loss_and_grads(state, state.params, batch, loss_name)
  lr = learning_rate(state.opt_state) if _has_step_lr(state.opt_state) else None
  new_state = state.apply_gradients(grads=grads, batch_stats=new_stats)
  grad_norm = global_norm(grads)
  metrics = {
      "loss": loss,
      "grad_norm": grad_norm,
      "param_norm": global_norm(new_state.params),
      "is_finite": jnp.isfinite(loss) & jnp.isfinite(grad_norm) & state_is_finite(new_state),
      **losses.get_batch_errors(loss_name)(out.depth, batch["target"]),  # chosen by name, statically
  }
  if lr is not None:
    metrics["lr"] = lr
  return new_state, metrics


def train_steps(state: TrainState, batches: dict[str, Array], *, loss_name: str
                ) -> tuple[TrainState, dict[str, Array]]:
  """n optimisation steps in one program: `batches` holds n batches stacked on a leading axis (n, B, H, W, 1);
  the metrics come back stacked, (n,) each. The same arithmetic as n `train_step` calls.

  The steps are unrolled (`lax.scan` with unroll=n), not looped: XLA:CPU runs convolutions inside a while loop
  on a far slower path (38 s instead of 2.9 s per pNCNN step at 176x608, batch 4). One program also allocates
  its working memory once for all n steps, where separate calls fault it in afresh each time (CPU: ~1.5 s of
  system time per KITTI-size step; docs/develop/benchmarks-log.md).
  """
  n = jax.tree.leaves(batches)[0].shape[0]
  return jax.lax.scan(lambda s, b: train_step(s, b, loss_name=loss_name), state, batches, unroll=n)


def eval_step(state: TrainState, batch: dict[str, Array]) -> models.ModelOutput:
  """Eval-mode forward (BatchNorm running statistics) on `batch['sparse']`."""
  return state.apply_fn(variables_of(state), batch["sparse"], train=False)
