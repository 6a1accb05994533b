"""Training losses and batch errors of the sparse-flow pNCNN (`pncnn_jax.flow`), pure jnp on NHWC arrays.

Flow targets pack the ground truth with its validity, as the flow inputs pack the tracks with their mask:
target (B, H, W, C + 1) = [u, v, valid], flow in pixels, valid 1 where there is ground truth (a zero vector is a
valid flow, so validity cannot be target > 0 as for depth). Predictions are (B, H, W, C). Every loss is a mean
over the valid pixels V of the whole batch, 0 when V is empty; values at invalid pixels (even inf or NaN) never
reach the result or its gradient.

The extension registers `flow_epe` and `flow_nll` in `pncnn_jax.losses` (`pncnn_jax/flow/__init__.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
  pass

LOG_EPS = 1e-16  # added to the precision inside the log, as `losses.gaussian_nll`


def split_target(name: str, pred: jax.Array, target: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(error e = target - pred with 0 at invalid pixels (B, H, W, C), valid (B, H, W, 1) bool); checks shapes."""
  ps, ts = tuple(jnp.shape(pred)), tuple(jnp.shape(target))
  if len(ps) != 4 or ts != ps[:3] + (ps[3] + 1,):
    raise ValueError(f"{name}: expected pred (B, H, W, C) and target (B, H, W, C + 1) = [flow, valid], got "
                     f"pred {ps} and target {ts}")
  valid = target[..., -1:] > 0
  err = jnp.where(valid, target[..., :-1] - jnp.where(valid, pred, 0.0), 0.0)
  return err, valid


def _valid_mean(per_pixel: jax.Array, valid: jax.Array) -> jax.Array:
  total = jnp.sum(jnp.where(valid, per_pixel, 0.0))
  return total / jnp.maximum(jnp.sum(valid, dtype=jnp.int32), 1).astype(total.dtype)


def end_point_error(err: jax.Array) -> jax.Array:
  """||e||_2 over the last axis, (B, H, W, C) -> (B, H, W, 1); its gradient at e = 0 is 0 (not NaN)."""
  sq = jnp.sum(jnp.square(err), axis=-1, keepdims=True)
  pos = sq > 0
  return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def flow_epe(pred: jax.Array, target: jax.Array) -> jax.Array:
  """The end-point error loss of the binary and NCNN-Conf flow models.

    L = (1/|V|) sum_V ||t - mu||_2

  Args:
    pred: (B, H, W, C) predicted flow mu [px].
    target: (B, H, W, C + 1) ground-truth flow [px] and validity.

  Returns:
    () float32 [px].
  """
  err, valid = split_target("flow_epe", pred, target)
  return _valid_mean(end_point_error(err), valid)


def flow_nll(pred: jax.Array, precision: jax.Array, target: jax.Array) -> jax.Array:
  """Negative log-likelihood of a Gaussian over the flow vector with diagonal precision (pNCNN for flow).

    L = (1/|V|) sum_V sum_k 1/2 [ c_k (t_k - mu_k)^2 - log(c_k + 1e-16) ]

  summed over the C channels k. With one precision for all channels (`precision` (B, H, W, 1), broadcast;
  the isotropic N(t; mu, I/c)) a pixel's term is c ||e||^2 / 2 - (C/2) log c; with (B, H, W, C) it is the
  diagonal covariance diag(1/c_k). Either way the per-pixel term is the exact NLL minus (C/2) log(2 pi), and for
  C = 1 it is half of `losses.gaussian_nll`. The isotropic optimum is c = C / ||e||^2.

  Args:
    pred: (B, H, W, C) predicted flow mu [px].
    precision: (B, H, W, 1) or (B, H, W, C), c >= 0 [1/px^2].
    target: (B, H, W, C + 1) ground-truth flow [px] and validity.

  Returns:
    () float32, the mean over V pooled over the batch; 0 when V is empty.
  """
  err, valid = split_target("flow_nll", pred, target)
  ps = tuple(jnp.shape(precision))
  if ps not in (err.shape[:3] + (1,), err.shape):
    raise ValueError(f"flow_nll: precision must be (B, H, W, 1) or (B, H, W, C) for flow {err.shape}, got {ps}")
  c = jnp.where(valid, precision, 1.0)
  per_channel = 0.5 * (c * jnp.square(err) - jnp.log(c + LOG_EPS))  # (B, H, W, C), c broadcast if 1 channel
  return _valid_mean(jnp.sum(per_channel, axis=-1, keepdims=True), valid)


def batch_errors(pred: jax.Array, target: jax.Array) -> dict[str, jax.Array]:
  """Training-log errors pooled over the batch's valid pixels: mean EPE and its root mean square [px]."""
  err, valid = split_target("batch_errors", pred, target)
  epe = end_point_error(err)
  return {"epe": _valid_mean(epe, valid), "rmse": jnp.sqrt(_valid_mean(jnp.square(epe), valid))}
