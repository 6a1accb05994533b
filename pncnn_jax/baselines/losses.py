"""The Gaussian NLL of the baseline's (mean, log-variance) head: Gustafsson et al.'s `MaskedL2Gauss`.

    L = (1/|V|) sum_V [ exp(s) (t - mu)^2 - s ],   s = -log sigma^2 (the log-precision the network outputs)

V = {target > 0} pooled over the batch. Per pixel exp(s) e^2 - s = 2 NLL_Gauss(e; sigma^2 = exp(-s)) - log 2 pi:
twice the Gaussian negative log-likelihood minus a constant, the same scale as pNCNN's `gaussian_nll`
(c e^2 - log c with c = exp(s)); its optimum is s = -log e^2. Predicting log sigma^2 keeps the variance positive
without a softplus and the loss finite for any output.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

LOSS_NAME = "gaussian_nll_logvar"


def gaussian_nll_logvar(pred: jax.Array, log_precision: jax.Array, target: jax.Array) -> jax.Array:
  """The loss above.

  Args:
    pred: (B, H, W, 1) predicted depth mu [m].
    log_precision: (B, H, W, 1) s = -log sigma^2, sigma in m.
    target: (B, H, W, 1) ground-truth depth [m], 0 = no ground truth.

  Returns:
    () float32, the mean over V; 0 when V is empty.
  """
  if not pred.shape == log_precision.shape == target.shape:
    raise ValueError(f"gaussian_nll_logvar: pred, log_precision and target must have one shape, got "
                     f"{tuple(pred.shape)}, {tuple(log_precision.shape)}, {tuple(target.shape)}")
  valid = target > 0
  err = jnp.where(valid, target - pred, 0.0)
  s = jnp.where(valid, log_precision, 0.0)
  terms = jnp.where(valid, jnp.exp(s) * jnp.square(err) - s, 0.0)
  return jnp.sum(terms) / jnp.maximum(jnp.sum(valid), 1)


def precision_rule(s, xp):
  """The precision 1/sigma^2 = exp(s) [1/m^2] of the confidence s (numpy in float64, overflow to inf allowed)."""
  if xp is np:
    with np.errstate(over="ignore"):
      return np.exp(s)
  return xp.exp(s)
