"""Training losses of pNCNN (docs/SPEC.md §6), as pure jnp functions on NHWC arrays.

Every function takes (B, H, W, 1) arrays in metres, with target 0 marking a pixel without ground
truth (the valid set V is target > 0, pooled over the whole batch), and returns a float32 scalar.

Normalisation, exactly as the official `common/losses.py` computes it:

* `masked_l1`, `masked_l2` divide by **all** B*H*W pixels (invalid pixels contribute 0), docs/SPEC.md
  §6.
* `gaussian_nll`, `gaussian_nll_beta`, `gaussian_nll_l1`, `gaussian_nll_exp`, `laplace_nll` divide by |V|.

An empty valid set gives a loss of exactly 0 (not NaN) and zero gradients. Values at invalid
pixels never reach the result or its gradient, even when they are inf or NaN (the reference
multiplies by the mask instead, so there `0 * inf` would give NaN).

`LOSSES` maps the names used in configs to functions `(ModelOutput, target) -> scalar`;
`get_loss(name)` looks one up. Each loss also declares, once, what the model's output confidence c means
for it: `PRECISION_RULES[name]` gives the precision 1/sigma^2 [1/m^2] of the distribution it fits,
  gaussian_nll       1/sigma^2 = c           c is the precision (docs/SPEC.md §6)
  gaussian_nll_beta  1/sigma^2 = c           the same Gaussian, fitted with per-pixel weights sg[sigma^(2 beta)]
                                             (beta = NLL_BETA; gaussian_nll_beta1: beta = 1)
  gaussian_nll_l1    1/sigma^2 = c           the Gaussian NLL plus an auxiliary L1 term on mu (AUX_L1_WEIGHT;
                                             gaussian_nll_beta_l1: with the beta-NLL weights)
  gaussian_nll_exp   1/sigma^2 = exp(c)      the data term's precision
  laplace_nll        1/sigma^2 = c^2 / 2     c = 1/b, Laplace std sqrt(2) b
  masked_l1 / l2     None: the confidence is the propagated NConv confidence, not calibrated
(`precision_of`; sigma = 1/sqrt(precision)). Each rule is monotone increasing in c.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from pncnn_jax.runtime.registry import Registry

if TYPE_CHECKING:  # models.py is only needed for the annotation.
  from pncnn_jax.nn.models import ModelOutput

# Added to the precision inside the log, as in the reference (docs/SPEC.md §6).
LOG_EPS = 1e-16
# The exponent of the beta-NLL weights (`gaussian_nll_beta`): 0.5, the value its authors recommend.
NLL_BETA = 0.5
# The weight of the auxiliary L1 term of `gaussian_nll_l1` [1/m]: at the NLL's per-pixel optimum its gradient on mu,
# 2 c e = 2 / |e|, is above the L1 term's 1 wherever |e| < 2 m, so the L1 term leads only where the error is large.
AUX_L1_WEIGHT = 1.0


def _check(name: str, **arrays: jax.Array) -> None:
  """Raises ValueError unless every array is (B, H, W, 1) with one common shape."""
  shapes = {k: tuple(jnp.shape(v)) for k, v in arrays.items()}
  for k, s in shapes.items():
    if len(s) != 4 or s[-1] != 1:
      raise ValueError(f"{name}: `{k}` must be (B, H, W, 1) NHWC, got shape {s}")
  if len(set(shapes.values())) != 1:
    raise ValueError(f"{name}: all inputs must have the same shape, got {shapes}")


def _valid(target: jax.Array) -> jax.Array:
  return target > 0


def _valid_mean(per_pixel: jax.Array, valid: jax.Array) -> jax.Array:
  """Mean of `per_pixel` over the valid pixels of the whole batch; 0 when there are none."""
  total = jnp.sum(jnp.where(valid, per_pixel, 0.0))
  count = jnp.sum(valid, dtype=jnp.int32)
  return total / jnp.maximum(count, 1).astype(total.dtype)


def _abs_err(pred: jax.Array, target: jax.Array, valid: jax.Array) -> jax.Array:
  # Double `where`: invalid pixels are 0 before any arithmetic, so inf/NaN there cannot leak.
  return jnp.where(valid, jnp.abs(jnp.where(valid, pred, 0.0) - target), 0.0)


def masked_l1(pred: jax.Array, target: jax.Array) -> jax.Array:
  """Official `MaskedL1Loss`: mean over all B*H*W pixels of m*|pred - target|, m = [target > 0].

  Args:
    pred: (B, H, W, 1) predicted depth mu [m].
    target: (B, H, W, 1) ground-truth depth [m], 0 = no ground truth.

  Returns:
    () float32 [m]: sum_V |t - mu| / (B*H*W) (docs/SPEC.md §6).
  """
  _check("masked_l1", pred=pred, target=target)
  return jnp.mean(_abs_err(pred, target, _valid(target)))


def masked_l2(pred: jax.Array, target: jax.Array) -> jax.Array:
  """Official `MaskedL2Loss`: mean over all B*H*W pixels of m*(pred - target)^2, m = [target > 0].

  Args:
    pred: (B, H, W, 1) predicted depth mu [m].
    target: (B, H, W, 1) ground-truth depth [m], 0 = no ground truth.

  Returns:
    () float32 [m^2]: sum_V (t - mu)^2 / (B*H*W) (docs/SPEC.md §6).
  """
  _check("masked_l2", pred=pred, target=target)
  return jnp.mean(jnp.square(_abs_err(pred, target, _valid(target))))


def _prob_terms(name, pred, precision, target):
  _check(name, pred=pred, precision=precision, target=target)
  valid = _valid(target)
  err = jnp.where(valid, target - jnp.where(valid, pred, 0.0), 0.0)
  c = jnp.where(valid, precision, 1.0)
  return err, c, valid


def gaussian_nll(pred: jax.Array, precision: jax.Array, target: jax.Array) -> jax.Array:
  """pNCNN loss, official `MaskedProbLoss` (docs/SPEC.md §6).

    L = (1/|V|) sum_V [ c (t - mu)^2 - log(c + 1e-16) ]

  with c the predicted **precision** (inverse variance, sigma^2 = 1/c; for pNCNN c = out[:,1], the
  softplus output of the variance UNet). Per pixel, c e^2 - log c = 2 NLL_Gauss(e; sigma^2 = 1/c)
  - log(2 pi): twice the Gaussian negative log-likelihood minus a constant. The 1e-16 only matters
  for c < ~1e-9 in float32.

  Args:
    pred: (B, H, W, 1) predicted depth mu [m].
    precision: (B, H, W, 1) c >= 0 [1/m^2].
    target: (B, H, W, 1) ground-truth depth [m], 0 = no ground truth.

  Returns:
    () float32, the mean over V pooled over the batch; 0 when V is empty.
  """
  err, c, valid = _prob_terms("gaussian_nll", pred, precision, target)
  return _valid_mean(c * jnp.square(err) - jnp.log(c + LOG_EPS), valid)


def gaussian_nll_beta(pred: jax.Array, precision: jax.Array, target: jax.Array, beta: float = NLL_BETA) -> jax.Array:
  """The pNCNN loss with beta-NLL weights (Seitzer et al., ICLR 2022); our option, not in the paper or its code.

    L = (1/|V|) sum_V sg[(c + 1e-16)^(-beta)] [ c (t - mu)^2 - log(c + 1e-16) ]

  sg = stop-gradient, c the predicted precision as in `gaussian_nll` (sigma^2 = 1/c), so the weight is
  sg[sigma^(2 beta)]. In the plain NLL the gradient on the prediction is 2 c (mu - t): pixels the network
  predicts as uncertain (depth edges, far surfaces, disturbed points) teach the depth path almost nothing, which
  costs MAE. The weight scales each pixel's whole term, so for beta = 1 the gradient on mu is the L2 loss's,
  2 (mu - t), and for beta = 0 this is `gaussian_nll`. The per-pixel optimum over c is unchanged, c = 1/e^2,
  so the confidence is still a calibrated precision [1/m^2].

  Args:
    pred: (B, H, W, 1) predicted depth mu [m].
    precision: (B, H, W, 1) c >= 0 [1/m^2].
    target: (B, H, W, 1) ground-truth depth [m], 0 = no ground truth.
    beta: the exponent, >= 0.

  Returns:
    () float32, the mean over V pooled over the batch; 0 when V is empty.
  """
  err, c, valid = _prob_terms("gaussian_nll_beta", pred, precision, target)
  return _valid_mean(_nll_beta_terms("gaussian_nll_beta", err, c, beta), valid)


def _nll_beta_terms(name: str, err: jax.Array, c: jax.Array, beta: float) -> jax.Array:
  """Per pixel sg[(c + 1e-16)^(-beta)] (c e^2 - log(c + 1e-16)); exactly the plain NLL's terms for beta = 0."""
  if not beta >= 0:
    raise ValueError(f"{name}: beta must be >= 0, got {beta!r}")
  terms = c * jnp.square(err) - jnp.log(c + LOG_EPS)
  if beta == 0:
    return terms
  return jax.lax.stop_gradient(jnp.power(c + LOG_EPS, -beta)) * terms


def gaussian_nll_l1(pred: jax.Array, precision: jax.Array, target: jax.Array, beta: float = 0.0,
                    weight: float = AUX_L1_WEIGHT) -> jax.Array:
  """The pNCNN loss plus an auxiliary L1 term on the prediction; our option, not in the paper or its code.

    L = (1/|V|) sum_V [ sg[(c + 1e-16)^(-beta)] (c (t - mu)^2 - log(c + 1e-16)) + w |t - mu| ]

  c the predicted precision as in `gaussian_nll` (sigma^2 = 1/c), w = `weight` [1/m]. beta = 0 is the plain
  Gaussian NLL, beta = NLL_BETA its beta-NLL form (`gaussian_nll_beta`). In the NLL the input confidence c0 learns
  only through the precision-weighted depth term 2 c (mu - t), and the variance network can explain a large error
  by a small c instead (docs/results/RESULTS.md, claim (b)). The L1 term gives mu, and through NConv c0, the gradient
  w sign(mu - t) at every pixel whatever its c: the signal NCNN-Conf-L1 trains c0 with. The optimum over c is
  unchanged, c = 1/e^2, so the confidence is still a calibrated precision [1/m^2].

  Args:
    pred: (B, H, W, 1) predicted depth mu [m].
    precision: (B, H, W, 1) c >= 0 [1/m^2].
    target: (B, H, W, 1) ground-truth depth [m], 0 = no ground truth.
    beta: the exponent of the beta-NLL weights, >= 0.
    weight: w >= 0, the weight of the L1 term [1/m].

  Returns:
    () float32, the mean over V pooled over the batch; 0 when V is empty.
  """
  if not weight >= 0:
    raise ValueError(f"gaussian_nll_l1: weight must be >= 0, got {weight!r}")
  err, c, valid = _prob_terms("gaussian_nll_l1", pred, precision, target)
  return _valid_mean(_nll_beta_terms("gaussian_nll_l1", err, c, beta) + weight * jnp.abs(err), valid)


def gaussian_nll_exp(pred: jax.Array, c: jax.Array, target: jax.Array) -> jax.Array:
  """pNCNN-Exp loss as the reference computes it, official `MaskedProbExpLoss` (docs/SPEC.md §6).

    L = (1/|V|) sum_V [ exp(c) (t - mu)^2 - log(c + 1e-16) ]

  This is **not** a proper negative log-likelihood: the data term uses the precision exp(c) but
  the regulariser is -log c, not -c (the log-precision NLL would be exp(c) e^2 - c). Its per-pixel
  optimum satisfies c exp(c) = 1/e^2, so c still falls monotonically with the error. Reproduced
  as written because the official pNCNN-Exp models were trained with it.

  Args:
    pred: (B, H, W, 1) predicted depth mu [m].
    c: (B, H, W, 1) out[:,1] of the pncnn_exp network, c >= 0.
    target: (B, H, W, 1) ground-truth depth [m], 0 = no ground truth.

  Returns:
    () float32, the mean over V pooled over the batch; 0 when V is empty.
  """
  err, c, valid = _prob_terms("gaussian_nll_exp", pred, c, target)
  return _valid_mean(jnp.exp(c) * jnp.square(err) - jnp.log(c + LOG_EPS), valid)


def laplace_nll(pred: jax.Array, c: jax.Array, target: jax.Array) -> jax.Array:
  """Laplace ablation of the pNCNN loss (no official golden; not in the reference code).

    L = (1/|V|) sum_V [ c |t - mu| - log(c + 1e-16) ]

  c is the inverse Laplace scale, b = 1/c. Per pixel, c|e| - log c = NLL_Laplace(e; b) - log 2,
  with NLL_Laplace = log(2b) + |e|/b. Minimised over c at c = 1/|e|, where it equals 1 + log|e|.

  Args:
    pred: (B, H, W, 1) predicted depth mu [m].
    c: (B, H, W, 1) inverse scale c >= 0 [1/m].
    target: (B, H, W, 1) ground-truth depth [m], 0 = no ground truth.

  Returns:
    () float32, the mean over V pooled over the batch; 0 when V is empty.
  """
  err, c, valid = _prob_terms("laplace_nll", pred, c, target)
  return _valid_mean(c * jnp.abs(err) - jnp.log(c + LOG_EPS), valid)


# --- registry: name -> (ModelOutput, target) -> scalar -------------------------------------------


def _masked_l1(out: ModelOutput, target: jax.Array) -> jax.Array:
  return masked_l1(out.depth, target)


def _masked_l2(out: ModelOutput, target: jax.Array) -> jax.Array:
  return masked_l2(out.depth, target)


def _gaussian_nll(out: ModelOutput, target: jax.Array) -> jax.Array:
  return gaussian_nll(out.depth, out.confidence, target)


def _gaussian_nll_beta(out: ModelOutput, target: jax.Array) -> jax.Array:
  return gaussian_nll_beta(out.depth, out.confidence, target)


def _gaussian_nll_beta1(out: ModelOutput, target: jax.Array) -> jax.Array:
  return gaussian_nll_beta(out.depth, out.confidence, target, beta=1.0)


def _gaussian_nll_l1(out: ModelOutput, target: jax.Array) -> jax.Array:
  return gaussian_nll_l1(out.depth, out.confidence, target)


def _gaussian_nll_beta_l1(out: ModelOutput, target: jax.Array) -> jax.Array:
  return gaussian_nll_l1(out.depth, out.confidence, target, beta=NLL_BETA)


def _gaussian_nll_exp(out: ModelOutput, target: jax.Array) -> jax.Array:
  return gaussian_nll_exp(out.depth, out.confidence, target)


def _laplace_nll(out: ModelOutput, target: jax.Array) -> jax.Array:
  return laplace_nll(out.depth, out.confidence, target)


# --- the registry: name -> (loss, what its confidence is, its training-log errors) --------------------------------
# A loss maps (ModelOutput, target) to a scalar. Its precision rule maps (c, array module) to the precision
# 1/sigma^2 [1/m^2] of the distribution it fits, or is None without a calibrated sigma. Its batch errors map
# (pred, target) to the training log's pooled errors. Extensions (pncnn_jax.flow) add theirs with `register`.

LOSSES: Registry[Callable[[ModelOutput, jax.Array], jax.Array]] = Registry("loss")
PRECISION_RULES: Registry[Callable[[Any, Any], Any] | None] = Registry("loss")
BATCH_ERRORS: Registry[Callable[[jax.Array, jax.Array], dict[str, jax.Array]]] = Registry("loss")


def depth_batch_errors(pred: jax.Array, target: jax.Array) -> dict[str, jax.Array]:
  """MAE and RMSE in metres over the valid (target > 0) pixels pooled over the batch (as the training CSV)."""
  valid = target > 0
  n = jnp.maximum(jnp.sum(valid), 1)
  err = jnp.where(valid, pred - target, 0.0)
  return {"mae": jnp.sum(jnp.abs(err)) / n, "rmse": jnp.sqrt(jnp.sum(err * err) / n)}


def register(name: str, fn: Callable[[Any, jax.Array], jax.Array],
             precision_rule: Callable[[Any, Any], Any] | None = None,
             batch_errors: Callable[[jax.Array, jax.Array], dict[str, jax.Array]] = depth_batch_errors) -> None:
  """Registers a training loss: `fn(out, target) -> scalar`, the precision its `out.confidence` stands for
  (`precision_rule(c, xp)`, None: no calibrated sigma) and the errors the training log reports (`batch_errors`)."""
  LOSSES.register(name, fn)
  PRECISION_RULES.register(name, precision_rule)
  BATCH_ERRORS.register(name, batch_errors)


def _exp_precision(c, xp):
  if xp is np:
    with np.errstate(over="ignore"):
      return np.exp(c)
  return xp.exp(c)


_gaussian = lambda c, xp: c  # noqa: E731
register("masked_l1", _masked_l1)  # official ncnn_conf_l1 (MaskedL1Loss); no calibrated sigma
register("masked_l2", _masked_l2)  # official ncnn_conf_l2 (MaskedL2Loss)
register("gaussian_nll", _gaussian_nll, _gaussian)  # official pncnn (MaskedProbLoss), uses out.confidence
register("gaussian_nll_beta", _gaussian_nll_beta, _gaussian)  # pncnn_beta: our option, beta-NLL weights (NLL_BETA)
register("gaussian_nll_beta1", _gaussian_nll_beta1, _gaussian)  # the same with beta = 1 (the L2 gradient on mu)
register("gaussian_nll_l1", _gaussian_nll_l1, _gaussian)  # our option: the NLL + AUX_L1_WEIGHT * L1 on mu
register("gaussian_nll_beta_l1", _gaussian_nll_beta_l1, _gaussian)  # the same with the beta-NLL weights (NLL_BETA)
register("gaussian_nll_exp", _gaussian_nll_exp, _exp_precision)  # official pncnn_exp (MaskedProbExpLoss)
register("laplace_nll", _laplace_nll, lambda c, xp: 0.5 * c * c)  # Laplace ablation, out.confidence = 1/b


def is_probabilistic(loss_name: str) -> bool:
  """Whether a model trained with `loss_name` has a calibrated sigma (its precision rule is not None)."""
  return PRECISION_RULES.lookup(loss_name) is not None


def __getattr__(name: str):
  # PROBABILISTIC_LOSSES lists the extensions' losses too, so it is computed when asked for (module __getattr__),
  # not at import, when no extension has registered yet.
  if name == "PROBABILISTIC_LOSSES":
    return tuple(k for k, rule in PRECISION_RULES.items() if rule is not None)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def precision_of(confidence, loss_name: str):
  """The precision 1/sigma^2 [1/m^2] of a model trained with `loss_name`, or None without a calibrated sigma.

  numpy input is computed in float64 (for the uncertainty metrics); jax input in its own dtype (the ensemble's
  fusion). A monotone increasing function of the confidence, so it ranks pixels exactly as the confidence does.
  """
  rule = PRECISION_RULES.lookup(loss_name)
  if rule is None:
    return None
  if isinstance(confidence, jax.Array):
    return rule(confidence, jnp)
  return rule(np.asarray(confidence, np.float64), np)


def get_loss(name: str) -> Callable[[ModelOutput, jax.Array], jax.Array]:
  """Returns `LOSSES[name]`; raises ValueError naming the valid losses otherwise."""
  return LOSSES.lookup(name)


def get_batch_errors(name: str) -> Callable[[jax.Array, jax.Array], dict[str, jax.Array]]:
  """The training-log errors of a model trained with loss `name` (depth: MAE and RMSE [m]; flow: EPE [px])."""
  return BATCH_ERRORS.lookup(name)
