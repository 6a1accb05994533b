"""The flow evaluator ('flow'): the sparse-flow models (`pncnn_jax.flow`) and their baselines, on flow batches.

`FlowEvaluator` is an evaluator of the core's protocol (`pncnn_jax.evaluate.protocol`, which never imports this
module: it registers itself here, on import): what the training loop validates a flow model with, what `eval.py`
reports for a flow config and what the flow experiment measures. Its models: a trained flow model
(`model.FlowPNCNN`); the same model fed only the tracks that did not fail (`oracle=True`: what a perfect input
confidence would give); or the classical normalized convolution with a fixed Gaussian applicability and binary
confidence (`GaussianNC`, no parameters: interpolation of every track, no learning). The metrics are those of
`pncnn_jax.flow.metrics`: EPE and outliers per image, AUSE on EPE over the split's pixels, and the AUROC of a low
input confidence c0 for the failed tracks (the `corrupted` label of `pncnn_jax.flow.dataset`).
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from pncnn_jax import from_config, losses
from pncnn_jax.evaluate import protocol
from pncnn_jax.flow import dataset as flow_dataset
from pncnn_jax.flow import metrics as flow_metrics
from pncnn_jax.flow import model as flow_model
from pncnn_jax.flow import viz as flow_viz
from pncnn_jax.nn import layers

UNITS = {"epe": "px", "rmse": "px", "outliers": "%", "track_epe": "px", "nll": "nats"}
TABLE_ORDER = ("epe", "rmse", "outliers", "ause_epe", "nll", "auroc_corrupted", "auroc_gross", "auroc_aperture",
               "auroc_swap", "auroc_reflection", "c0_corrupted", "c0_clean", "num_images")


class GaussianNC(nn.Module):
  """Normalized convolution with a fixed Gaussian applicability g (std `sigma_px`, (2 radius + 1)^2 taps) and the
  binary track mask m as confidence, per flow component: x = conv(m x, g) / (conv(m, g) + eps), with the
  propagated confidence conv(m, g) / sum(g) (pNCNN eq. 2 without learning). g is separable, so the 'same'
  convolution with zero padding is two products with banded (Toeplitz) matrices, fast for wide kernels. No
  parameters: `GaussianNC(sigma_px, radius).apply({}, sparse)` on (B, H, W, C + 1) = [flow, mask] gives a
  `model.FlowOutput`."""

  sigma_px: float = 4.0
  radius: int = 12

  def __call__(self, sparse: jax.Array, train: bool = False) -> flow_model.FlowOutput:
    del train  # nothing learned
    ax = np.arange(-self.radius, self.radius + 1, dtype=np.float64)
    g = np.exp(-0.5 * (ax / self.sigma_px) ** 2)

    def band(n):  # (n, n): out[i] = sum_j g[j - i + radius] a[j], zero outside the image
      d = np.arange(n)[None, :] - np.arange(n)[:, None] + self.radius
      return jnp.asarray(np.where((d >= 0) & (d <= 2 * self.radius), g[np.clip(d, 0, 2 * self.radius)], 0.0),
                         jnp.float32)

    def blur(a):
      hi = jax.lax.Precision.HIGHEST
      a = jnp.einsum("hk,bkwc->bhwc", band(a.shape[1]), a, precision=hi)
      return jnp.einsum("wk,bhkc->bhwc", band(a.shape[2]), a, precision=hi)

    m = sparse[..., -1:]
    xs, cs = flow_model.fold_channels(sparse[..., :-1] * m), jnp.tile(m, (sparse.shape[-1] - 1, 1, 1, 1))
    num, den = blur(xs), blur(cs)  # xs is zero off the tracks: conv(m x, g)
    x, c = num / (den + layers.NCONV_EPS), den / float(g.sum() ** 2)
    c = c[:sparse.shape[0]]
    return flow_model.FlowOutput(flow=flow_model.unfold_channels(x, sparse.shape[-1] - 1), confidence=c,
                                 input_confidence=m, nconv_confidence=c)


@functools.lru_cache(maxsize=16)
def _apply_fn(model):
  """One jitted eval-mode apply per model (reused across validations: no recompilation)."""
  return jax.jit(lambda v, s: model.apply(v, s, train=False))


def uncertainty_label(loss_name: str) -> tuple[str, str]:
  """(what a model's `flow_metrics.flow_uncertainty` is, its unit) for the figures."""
  if losses.precision_of(1.0, loss_name) is not None:
    return "predicted RMS end-point error", "px"
  return "sqrt(2 / NConv confidence)", "relative"


class FlowEvaluator(protocol.Evaluator):
  """A flow model on flow_synthetic batches (sparse (B, H, W, C + 1), target (B, H, W, C + 1), and optionally the
  labels corrupted, failure and the image).

  Settings:
    loss_name: the loss the model trained with: 'flow_nll' makes its confidence a precision (NLL reported);
      otherwise the confidence only ranks pixels (AUSE).
    num_panels: keep the first `num_panels` examples for `flow_viz.flow_panels`.
    oracle: feed the model only the tracks that did not fail (input zeroed where `corrupted`; the metrics still
      see the whole input).

  Its result has one row (`flow_metrics.FlowAccumulator.result`: epe, rmse (the RMS end-point error, which picks the
  best checkpoint), outliers, ause_epe, nll, the AUROCs, ...) and the details metrics (the row), sparsification
  (`flow_metrics.EpeSparsification`) and panels; its figures: sparsification.png, and flow_panels.png when it kept
  panels.
  """

  header = "model"
  files = ("sparsification.png", "flow_panels.png")

  def __init__(self, *, loss_name: str, num_panels: int = 0, oracle: bool = False):
    self.loss_name, self.num_panels, self.oracle = loss_name, int(num_panels), oracle
    self.step_keys = ("oracle_sparse",) if oracle else ("sparse",)

  @classmethod
  def from_config(cls, config, **settings) -> FlowEvaluator:
    return cls(**{"loss_name": from_config.variant_loss(config), "num_panels": config.num_panels, **settings})

  def inputs(self, batch, index):
    sparse, target = np.asarray(batch["sparse"], np.float32), np.asarray(batch["target"], np.float32)
    if sparse.ndim != 4 or sparse.shape != target.shape:
      raise ValueError(f"flow evaluation batch {index}: expected sparse and target of one shape (B, H, W, C + 1), "
                       f"got {sparse.shape} and {target.shape}")
    out = {"sparse": sparse, "target": target}
    out.update({k: np.asarray(batch[k]) for k in ("corrupted", "failure", "image") if k in batch})
    if self.oracle:
      if "corrupted" not in out:
        raise ValueError(f"flow evaluation batch {index}: the oracle needs the `corrupted` labels")
      oracle = sparse.copy()
      oracle[out["corrupted"][..., 0]] = 0.0
      out["oracle_sparse"] = oracle
    return out

  def step(self, model):
    return _apply_fn(model)

  def start(self) -> None:
    self._acc = flow_metrics.FlowAccumulator()
    self._panels: list[dict[str, np.ndarray]] = []

  def update(self, rows, out, index):
    sparse, target = rows["sparse"], rows["target"]
    pred, conf = np.asarray(out.flow), np.asarray(out.confidence)
    if not np.isfinite(pred).all():
      raise FloatingPointError(f"flow evaluation batch {index}: {int((~np.isfinite(pred)).sum())} of {pred.size} "
                               "predicted flow values are not finite (the model's weights have diverged)")
    precision = losses.precision_of(conf, self.loss_name)
    unc = flow_metrics.flow_uncertainty(conf, pred.shape[-1])
    self._acc.update(pred, target, unc, sparse, np.asarray(out.input_confidence), rows.get("corrupted"),
                     rows.get("failure"), precision)
    epe, valid = flow_metrics.end_point_error(pred, target)
    for j in range(pred.shape[0]):
      if len(self._panels) >= self.num_panels:
        break
      self._panels.append({
          "image": np.asarray(rows["image"])[j, ..., 0] if "image" in rows else np.zeros(epe.shape[1:]),
          "sparse": sparse[j], "corrupted": np.asarray(rows.get("corrupted", sparse[..., :1] < 0))[j, ..., 0],
          "input_confidence": np.asarray(out.input_confidence)[j, ..., 0], "flow": pred[j], "target": target[j],
          "uncertainty": unc[j], "epe": np.where(valid[j], epe[j], np.nan)})

  def result(self) -> protocol.Result:
    res = self._acc.result(flow_dataset.FAILURES)
    sp = res.pop("sparsification")
    panels = self._panels
    label, unit = uncertainty_label(self.loss_name)

    def sparsification_png(path, name):
      flow_viz.sparsification_figure({name: sp}, path)

    def panels_png(path, name):
      flow_viz.flow_panels(panels, path, title=name, uncertainty_label=label, uncertainty_unit=unit)

    details: dict[str, Any] = {"metrics": res, "sparsification": sp, "panels": panels}
    return protocol.Result(
        evaluator=self.name, rows={"model": dict(res)}, units=UNITS, columns=TABLE_ORDER, details=details,
        report={"uncertainty_kind": f"{label} [{unit}]",
                "sparsification": {"fractions": sp.fractions.tolist(), "model": sp.model.tolist(),
                                   "oracle": sp.oracle.tolist()}},
        figures={"sparsification": ("sparsification.png", sparsification_png),
                 "panels": ("flow_panels.png", panels_png if panels else None)})


protocol.register_evaluator("flow", FlowEvaluator)
