"""Fusion rules of an ensemble's per-pixel predictions (paper section 5.4 / Table 3 and its supplementary).

Inputs are the members' depth mu_k [m] and precision c_k = 1/sigma_k^2 [1/m^2], each (K, B, H, W, 1) (the
precision from each member's `ModelOutput.confidence` by its loss's rule, `losses.precision_of`). Every rule is
a pure jnp function returning (B, H, W, 1): the mean, the confidence-weighted mean, the most confident member,
or the maximum-likelihood (MLE) estimate of a mixture built from the members' confidences; `fuse` adds the
fused precision 1 / (expected squared error under the mixture).

Members trained apart need not state their precisions on one scale. `calibration_sums` / `precision_scales` fit a
scale s_k per member by maximum likelihood on held-out pixels; fusing s_k c_k instead of c_k is the calibrated
fusion of `pncnn_jax.ensemble.members.evaluate_ensemble(precision_scales=...)`.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

Array = jax.Array

DEFAULT_MLE_VARIANCE = 0.1  # v^2 [m^2] of every mixture component (paper supplementary)
DEFAULT_MLE_STEPS = 500
DEFAULT_MLE_LR = 0.05  # Adam's initial step [m]; cosine-decayed to 0 over the steps


def _check_members(name: str, depth: Array, precision: Array) -> None:
  if depth.ndim != 5 or depth.shape[-1] != 1 or depth.shape != precision.shape:
    raise ValueError(f"{name}: depth and precision must both be (K, B, H, W, 1), got {tuple(depth.shape)} and "
                     f"{tuple(precision.shape)}")


def confidence_weights(precision: Array) -> Array:
  """w_k = c_k / sum_j c_j over the member axis 0; uniform 1/K where every c_j is 0. Shape of `precision`."""
  c = jnp.maximum(precision, 0.0)
  total = jnp.sum(c, axis=0, keepdims=True)
  return jnp.where(total > 0, c / jnp.where(total > 0, total, 1.0), 1.0 / c.shape[0])


def fuse_mean(depth: Array, precision: Array | None = None) -> Array:
  """Plain ensemble mean: mean_k mu_k [m]. `precision` is ignored (accepted for a common signature)."""
  del precision
  return jnp.mean(depth, axis=0)


def fuse_weighted_mean(depth: Array, precision: Array) -> Array:
  """Confidence-weighted mean sum_k c_k mu_k / sum_k c_k [m] (the mean of the precision-weighted mixture;
  the plain mean where all c_k = 0)."""
  _check_members("fuse_weighted_mean", depth, precision)
  return jnp.sum(confidence_weights(precision) * depth, axis=0)


def fuse_max_confidence(depth: Array, precision: Array) -> Array:
  """Per pixel, mu of the member with the largest c (the first such member on ties) [m]."""
  _check_members("fuse_max_confidence", depth, precision)
  k = jnp.argmax(precision, axis=0)[None]
  return jnp.take_along_axis(depth, k, axis=0)[0]


def _mixture_terms(x: Array, depth: Array, log_weights: Array, variance: float) -> tuple[Array, Array]:
  """log p(x) and d log p / dx for p(x) = sum_k w_k N(x; mu_k, v^2), with x (S, ...) and depth (K, ...).

  d log p / dx = sum_k r_k (mu_k - x) / v^2 with responsibilities r_k = w_k N(x; mu_k, v^2) / p(x). The K
  components are unrolled (K is small) so that XLA fuses everything into one pass without (S, K, ...)
  temporaries.
  """
  mus = [depth[k][None] for k in range(depth.shape[0])]
  logits = [log_weights[k][None] - 0.5 * jnp.square(x - mu) / variance for k, mu in enumerate(mus)]
  top = functools.reduce(jnp.maximum, logits)
  e = [jnp.exp(a - top) for a in logits]
  z = functools.reduce(jnp.add, e)
  drift = functools.reduce(jnp.add, [ek * (mu - x) for ek, mu in zip(e, mus)])
  log_p = top + jnp.log(z) - 0.5 * math.log(2.0 * math.pi * variance)
  return log_p, drift / (z * variance)


def mixture_log_density(x: Array, depth: Array, log_weights: Array, variance: float) -> Array:
  """log p(x) of the 1-D mixture p(x) = sum_k w_k N(x; mu_k, v^2) per pixel, for S points per pixel.

  Args:
    x: (S, ...) evaluation points [m]. depth: (K, ...) means mu_k [m]. log_weights: (K, ...) log w_k.
    variance: v^2 [m^2], common to all components.

  Returns:
    (S, ...) log-density [log 1/m].
  """
  return _mixture_terms(x, depth, log_weights, variance)[0]


@functools.partial(jax.jit, static_argnames=("variance", "steps", "learning_rate", "return_all"))
def fuse_mle(depth: Array, precision: Array, *, variance: float = DEFAULT_MLE_VARIANCE,
             steps: int = DEFAULT_MLE_STEPS, learning_rate: float = DEFAULT_MLE_LR, return_all: bool = False):
  """Maximum-likelihood fusion: the mode of the mixture sum_k w_k N(mu_k, v^2), w_k = c_k / sum_j c_j.

  Paper supplementary (MLE fusion): K starts x_s = mu_s (one per member) are each moved by Adam (optax.adam,
  learning rate `learning_rate` cosine-decayed to 0 over `steps`) to maximise log p(x); the start that ends at
  the highest log p is kept. Every pixel and start is an independent 1-D problem: Adam's moments are per
  element, so one Adam over the whole (K, B, H, W, 1) array of starts is exactly per-pixel Adam. The gradient
  of -log p is analytic (`_mixture_terms`), equal to autodiff's.

  Args:
    depth: (K, B, H, W, 1) member means mu_k [m].
    precision: (K, B, H, W, 1) member precisions c_k [1/m^2] (only their ratios matter: the weights).
    variance: v^2 [m^2] of every component (0.1 in the paper).
    steps: Adam steps (500 in the paper).
    learning_rate: Adam's initial learning rate [m per step].
    return_all: also return the K end points and their log-densities.

  Returns:
    (B, H, W, 1) the mode estimate [m]; with `return_all`, (mode, ends (K, ...), log_density (K, ...)).
  """
  _check_members("fuse_mle", depth, precision)
  if not variance > 0:
    raise ValueError(f"fuse_mle: variance must be > 0, got {variance}")
  depth = depth.astype(jnp.float32)
  w = confidence_weights(precision.astype(jnp.float32))
  log_w = jnp.where(w > 0, jnp.log(jnp.where(w > 0, w, 1.0)), -jnp.inf)
  tx = optax.adam(optax.cosine_decay_schedule(learning_rate, max(int(steps), 1)))

  def body(_, carry):
    x, opt_state = carry
    _, ascent = _mixture_terms(x, depth, log_w, variance)
    updates, opt_state = tx.update(-ascent, opt_state)  # Adam minimises -log p
    return optax.apply_updates(x, updates), opt_state

  ends, _ = jax.lax.fori_loop(0, int(steps), body, (depth, tx.init(depth)))
  log_p = mixture_log_density(ends, depth, log_w, variance)
  best = jnp.argmax(log_p, axis=0)[None]
  mode = jnp.take_along_axis(ends, best, axis=0)[0]
  return (mode, ends, log_p) if return_all else mode


def mixture_moments(depth: Array, precision: Array, *, weighting: str = "uniform") -> tuple[Array, Array]:
  """Mean and variance of the members' mixture sum_k w_k N(mu_k, 1/c_k).

    mean = sum_k w_k mu_k,   var = sum_k w_k / c_k  (aleatoric)  +  sum_k w_k (mu_k - mean)^2  (member spread)

  `weighting='uniform'` (w_k = 1/K) is the deep-ensemble predictive variance of Gustafsson et al. (docs/SPEC.md
  §9: sigma^2 = mean sigma_alea^2 + Var_M(mu)); 'confidence' uses w_k = c_k / sum c (then the aleatoric term is
  K'/sum c with K' the members with c_k > 0, and the mean is `fuse_weighted_mean`).

  Returns:
    (mean [m], variance [m^2]), each (B, H, W, 1); the variance is inf where a uniformly weighted c_k is 0.
  """
  _check_members("mixture_moments", depth, precision)
  mean = fuse_mean(depth) if weighting == "uniform" else fuse_weighted_mean(depth, precision)
  return mean, fused_variance(depth, precision, mean, weighting=weighting)


def fused_variance(depth: Array, precision: Array, fused: Array, *, weighting: str = "uniform") -> Array:
  """Expected squared error of a fused depth f under the members' mixture: sum_k w_k (1/c_k + (mu_k - f)^2).

  Equals the mixture variance when f is the mixture mean (`mixture_moments`), and adds the squared offset
  (mean - f)^2 otherwise (max-confidence and MLE fusion). Weights as in `mixture_moments`.

  Args:
    depth, precision: (K, B, H, W, 1). fused: (B, H, W, 1) [m]. weighting: 'uniform' or 'confidence'.

  Returns:
    (B, H, W, 1) variance [m^2].
  """
  _check_members("fused_variance", depth, precision)
  if weighting == "uniform":
    w = jnp.full_like(precision, 1.0 / precision.shape[0])
  elif weighting == "confidence":
    w = confidence_weights(precision)
  else:
    raise ValueError(f"weighting must be 'uniform' or 'confidence', got {weighting!r}")
  c = jnp.maximum(precision, 0.0)
  alea = jnp.where(w > 0, w / c, 0.0)  # w/0 = inf for a member that counts; 0 for one that does not
  return jnp.sum(alea + w * jnp.square(depth - fused[None]), axis=0)


def calibration_sums(depth: Array, precision: Array, target: Array) -> tuple[Array, Array]:
  """Sufficient statistics of per-member precision scales: sum_i c_ki (t_i - mu_ki)^2 per member, and N.

  Sums run over the N valid pixels of `target` (t > 0, as every metric here). Add them over held-out batches and
  pass the totals to `precision_scales`.

  Args:
    depth, precision: (K, B, H, W, 1) member means [m] and precisions [1/m^2]. target: (B, H, W, 1) [m].

  Returns:
    ((K,) float32 sums [1], () int32 N).
  """
  _check_members("calibration_sums", depth, precision)
  if target.shape != depth.shape[1:]:
    raise ValueError(f"calibration_sums: target must be (B, H, W, 1) = {tuple(depth.shape[1:])}, got "
                     f"{tuple(target.shape)}")
  valid = target > 0
  r2 = jnp.where(valid[None], jnp.maximum(precision, 0.0) * jnp.square(depth - jnp.where(valid, target, 0.0)[None]),
                 0.0)
  return jnp.sum(r2, axis=(1, 2, 3, 4)), jnp.sum(valid, dtype=jnp.int32)


def precision_scales(sums, count) -> np.ndarray:
  """Maximum-likelihood scale s_k of each member's precision, from `calibration_sums` totals.

  Member k's Gaussian N(t; mu_k, 1 / (s_k c_k)) has log-likelihood sum_i 0.5 log(s_k c_ki) - 0.5 s_k c_ki
  (t_i - mu_ki)^2 + const over the N valid pixels, maximal at

      s_k = N / sum_i c_ki (t_i - mu_ki)^2.

  s_k < 1: member k claims more precision than it earns (over-confident). Scaled precisions s_k c_k make the
  members' confidences comparable, which the rules that weigh or pick members (weighted mean, max-confidence,
  MLE) rely on; the plain mean ignores them.

  Returns:
    (K,) float64 scales.

  Raises:
    ValueError: no valid pixel, or a member whose sum is 0 or not finite.
  """
  sums, count = np.asarray(sums, np.float64), int(count)
  if count <= 0:
    raise ValueError("precision_scales: the calibration batches have no valid target pixel (target > 0)")
  bad = [k for k, v in enumerate(sums) if not (np.isfinite(v) and v > 0)]
  if bad:
    raise ValueError(f"precision_scales: members {bad} have a weighted squared error sum of "
                     f"{[float(sums[k]) for k in bad]} on the calibration pixels (needs finite and > 0: a member "
                     f"with infinite precision, or one with none anywhere, cannot be calibrated)")
  return count / sums


def scale_precision(precision: Array, scales) -> Array:
  """s_k c_k: member k's precision (K, B, H, W, 1) times scales[k] ((K,), `precision_scales`)."""
  return precision * jnp.asarray(scales, precision.dtype)[:, None, None, None, None]


FUSION_RULES = ("mean", "weighted_mean", "max_confidence", "mle")
_RULE_WEIGHTING = {"mean": "uniform", "weighted_mean": "confidence", "max_confidence": "confidence",
                   "mle": "confidence"}


def fuse(depth: Array, precision: Array, rule: str, *, variance: float = DEFAULT_MLE_VARIANCE,
         steps: int = DEFAULT_MLE_STEPS, learning_rate: float = DEFAULT_MLE_LR) -> tuple[Array, Array]:
  """One fusion rule with its uncertainty.

  Returns:
    (fused depth [m], fused precision 1 / `fused_variance` [1/m^2]), each (B, H, W, 1); the variance uses
    uniform weights for 'mean' and confidence weights for the other rules, so 'mean' and 'weighted_mean' get
    exactly their mixture's variance.
  """
  if rule == "mean":
    f = fuse_mean(depth)
  elif rule == "weighted_mean":
    f = fuse_weighted_mean(depth, precision)
  elif rule == "max_confidence":
    f = fuse_max_confidence(depth, precision)
  elif rule == "mle":
    f = fuse_mle(depth, precision, variance=variance, steps=steps, learning_rate=learning_rate)
  else:
    raise ValueError(f"unknown fusion rule {rule!r}; expected one of {FUSION_RULES}")
  var = fused_variance(depth, precision, f, weighting=_RULE_WEIGHTING[rule])
  return f, 1.0 / var
