"""Error metrics and uncertainty evaluation of pNCNN (REFERENCE.md section 6).

Two kinds of function live here:

* **Depth error metrics** (`kitti_metrics`, `nyu_metrics`): pure jnp on (B, H, W, 1) arrays in
  metres, jit-able, per image (shape (B,)) or pooled over the batch (scalars). Split-level numbers
  are the mean of per-image values (the reference's `AverageMeter` with evaluation batch 1):
  `MeanAccumulator`. So a split's RMSE is the mean of per-image RMSEs, not sqrt(mean MSE).
* **Uncertainty metrics** (sparsification curves, AUSE in the pNCNN and the Gustafsson et al.
  definitions, AUCE, Gaussian NLL, AUROC) live in `pncnn_jax.uncertainty` and are re-exported here.

Units: KITTI metrics in mm (MAE, RMSE), mm^2 (MSE), 1/km (iMAE, iRMSE), % (delta); NYU in metres.
The valid set is target > 0 throughout, as in the reference (target 0 = no ground truth).
"""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from pncnn_jax.uncertainty import (AUCE_ALPHAS, FRACTIONS_GUSTAFSSON, FRACTIONS_PNCNN, TIE_BREAKS,  # noqa: F401
                                   Calibration, Sparsification, UncertaintyAccumulator, auce, auroc,
                                   ause_gustafsson, ause_pncnn, mean_gaussian_nll, sigma_from_precision,
                                   sparsification_curves)
from pncnn_jax.uncertainty import check_nhwc as _check_nhwc

# -------------------------------------------------------------------------------------------------
# Depth error metrics (REFERENCE.md 6.1, 6.2)
# -------------------------------------------------------------------------------------------------

KITTI_METRICS = ("mae", "rmse", "mse", "imae", "irmse", "absrel", "delta1", "delta2", "delta3")
NYU_METRICS = ("mae", "rmse", "mse", "absrel", "delta1", "delta2", "delta3")


def _error_metrics(name, pred, target, *, to_unit, inverse, pooled):
  _check_nhwc(name, pred=pred, target=target)
  axes = None if pooled else (1, 2, 3)
  valid = target > 0
  count = jnp.sum(valid, axis=axes, dtype=jnp.int32)
  n = count.astype(jnp.float32)  # 0 -> every mean below is 0/0 = NaN, by definition

  def mean(x):
    return jnp.sum(jnp.where(valid, x, 0.0), axis=axes) / n

  # Invalid pixels are replaced by 1 before any arithmetic so that nothing there is inf/NaN.
  p = jnp.where(valid, pred, 1.0)
  t = jnp.where(valid, target, 1.0)
  p_u, t_u = p * to_unit, t * to_unit  # mm for KITTI, m for NYU
  d = jnp.abs(p_u - t_u)
  mse = mean(jnp.square(d))
  ratio = jnp.maximum(p_u / t_u, t_u / p_u)
  out = {
      "mae": mean(d),
      "rmse": jnp.sqrt(mse),
      "mse": mse,
      "absrel": mean(d / t_u),
      # Strict "<"; 1.25**k is exact in float32. Negative predictions count as hits (no clipping).
      **{f"delta{k}": 100.0 * mean((ratio < 1.25**k).astype(jnp.float32)) for k in (1, 2, 3)},
  }
  if inverse:
    di = jnp.abs(1.0 / (1e-3 * p) - 1.0 / (1e-3 * t))  # [1/km], p and t in metres
    out["imae"] = mean(di)
    out["irmse"] = jnp.sqrt(mean(jnp.square(di)))
  out["num_valid"] = count
  return out


def kitti_metrics(pred: jax.Array, target: jax.Array, *, pooled: bool = False) -> dict:
  """KITTI error metrics, official `KittiErrorMetrics` (REFERENCE.md 6.1).

  With d = |1000 pred - 1000 target| [mm] over the valid pixels V = {target > 0}:
  MAE = mean d [mm], MSE = mean d^2 [mm^2], RMSE = sqrt(MSE) [mm],
  iMAE = mean |1/(1e-3 pred) - 1/(1e-3 target)| [1/km], iRMSE = sqrt(mean (...)^2) [1/km],
  absrel = mean d / target_mm, delta_k = 100 mean[max(p/t, t/p) < 1.25^k] [%] (in mm, strict <).
  No clipping: a prediction near 0 at a valid pixel blows up iMAE/iRMSE, and a negative one
  counts as a delta hit, as in the reference.

  Args:
    pred: (B, H, W, 1) predicted depth [m].
    target: (B, H, W, 1) ground truth [m], 0 = no ground truth.
    pooled: False: one value per image, each (B,). True: one value for the whole batch, pooling
      the valid pixels of all images (the reference's batch mode, e.g. its training CSV).

  Returns:
    dict with the keys of `KITTI_METRICS` (float32) and `num_valid` (int32 |V|). An image (or
    batch) without valid pixels gets NaN metrics and num_valid 0.
  """
  return _error_metrics("kitti_metrics", pred, target, to_unit=1000.0, inverse=True, pooled=pooled)


def nyu_metrics(pred: jax.Array, target: jax.Array, *, pooled: bool = False) -> dict:
  """NYU error metrics, official `NyuErrorMetrics` (REFERENCE.md 6.2).

  As `kitti_metrics` but in metres (MAE, RMSE [m], MSE [m^2]) and without iMAE/iRMSE.

  Args:
    pred: (B, H, W, 1) predicted depth [m].
    target: (B, H, W, 1) ground truth [m], 0 = no ground truth.
    pooled: False: per image, each (B,). True: pooled over the batch, scalars.

  Returns:
    dict with the keys of `NYU_METRICS` (float32) and `num_valid` (int32).
  """
  return _error_metrics("nyu_metrics", pred, target, to_unit=1.0, inverse=False, pooled=pooled)


class MeanAccumulator:
  """The reference's `AverageMeter`, one per key: running means over samples, float64 on host.

  `update(values)` with per-image arrays of shape (B,) (the output of `kitti_metrics`) adds B
  samples to each key. `update(values, weight=n)` with scalars (pooled batch values) adds
  value * n with weight n, as the reference's training CSV does. Keys are counted separately, so
  a loss meter can be fed alongside the metrics. A `num_valid` entry, when present, is summed
  into `num_valid` (not averaged), and images with num_valid == 0 (metrics NaN) are skipped and
  counted in `num_skipped`, so one frame without ground truth does not make a split's mean NaN.
  """

  def __init__(self):
    self._sums: dict[str, float] = {}
    self._counts: dict[str, float] = {}
    self.num_valid = 0
    self.num_skipped = 0

  def update(self, values: Mapping[str, jax.Array], weight: float | None = None) -> None:
    vals = {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
    nv = vals.pop("num_valid", None)
    shapes = {np.shape(v) for v in vals.values()}
    if len(shapes) > 1:
      raise ValueError(f"MeanAccumulator.update: values of mixed shapes {shapes}")
    shape = shapes.pop() if shapes else ()
    if weight is not None:
      if shape != ():
        raise ValueError(f"MeanAccumulator.update: weight needs scalar values, got shape {shape}")
      keep, w = np.ones((), bool), float(weight)
    else:
      if len(shape) != 1:
        raise ValueError(f"MeanAccumulator.update: per-image values must be (B,), got {shape}")
      keep = np.ones(shape, bool) if nv is None else np.asarray(nv) > 0
      w = 1.0
      self.num_skipped += int(np.sum(~keep))
    if nv is not None:
      self.num_valid += int(np.sum(nv))
    for k, v in vals.items():
      self._sums[k] = self._sums.get(k, 0.0) + float(np.sum(np.where(keep, v, 0.0))) * w
      self._counts[k] = self._counts.get(k, 0.0) + float(np.sum(keep)) * w

  def result(self) -> dict[str, float]:
    """Mean per key over its samples; raises ValueError if nothing was accumulated."""
    if not any(self._counts.values()):
      raise ValueError("MeanAccumulator.result: no samples accumulated")
    return {k: s / self._counts[k] if self._counts[k] else float("nan")
            for k, s in self._sums.items()}
