"""Error metrics and uncertainty evaluation of pNCNN (docs/SPEC.md §7, §8).

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

from pncnn_jax.uncertainty import (  # noqa: F401
  AUCE_ALPHAS,
  FRACTIONS_GUSTAFSSON,
  FRACTIONS_PNCNN,
  TIE_BREAKS,
  Calibration,
  Sparsification,
  UncertaintyAccumulator,
  auce,
  auroc,
  ause_gustafsson,
  ause_pncnn,
  mean_gaussian_nll,
  sigma_from_precision,
  sparsification_curves,
)
from pncnn_jax.uncertainty import check_nhwc as _check_nhwc

# -------------------------------------------------------------------------------------------------
# Depth error metrics (docs/SPEC.md §7)
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
  """KITTI error metrics, official `KittiErrorMetrics` (docs/SPEC.md §7.1).

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
  """NYU error metrics, official `NyuErrorMetrics` (docs/SPEC.md §7.2).

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


DISTANCE_EDGES_PX = (0.0, 1.0, 3.0, 5.0, 10.0, 20.0)  # ErrorByDistance's bins: [0, 1), [1, 3), ..., [20, inf) pixels


class ErrorByDistance:
  """Where a model's error lies: the absolute depth error |mu - d|, pooled over the valid target pixels
  (target > 0) of a split and binned by each pixel's Euclidean distance, in pixels, to the nearest flagged input
  point (on the synthetic benchmark: the `disturbed` ones). Distance 0 is the flagged point itself; an image
  without a flagged point puts all its pixels in the last bin.

  With `share[k]` the fraction of valid pixels in bin k, the pooled MAE is sum_k share[k] * mae[k], so the
  difference between two models' pooled MAEs splits exactly into the bins' `share[k] * (mae_a[k] - mae_b[k])`.
  (The table metrics average per image first; the pooled MAE differs from that mean by the images' unequal
  numbers of valid pixels.)

  `update(pred, target, flagged)` takes (B, H, W, 1) arrays in metres (`flagged` boolean); `result()` gives
  {'edges_px', 'share', 'mae_mm', 'rmse_mm', 'pooled_mae_mm', 'num_pixels'} (lists over the bins, NaN where a
  bin is empty).
  """

  def __init__(self, edges_px: tuple[float, ...] = DISTANCE_EDGES_PX):
    if list(edges_px) != sorted(edges_px) or edges_px[0] != 0:
      raise ValueError(f"ErrorByDistance: edges_px must rise from 0, got {edges_px}")
    self.edges = np.asarray(edges_px, np.float64)
    self._n, self._abs, self._sq = (np.zeros(len(edges_px)) for _ in range(3))

  def update(self, pred, target, flagged) -> None:
    pred, target, flagged = (np.asarray(a) for a in (pred, target, flagged))
    if not pred.shape == target.shape == flagged.shape or pred.ndim != 4 or pred.shape[-1] != 1:
      raise ValueError(f"ErrorByDistance.update: expected pred, target, flagged of one (B, H, W, 1) shape, got "
                       f"{pred.shape}, {target.shape}, {flagged.shape}")
    from scipy import ndimage  # pylint: disable=g-import-not-at-top  (0.4 s to import; only this uses it)
    for p, t, f in zip(pred[..., 0], target[..., 0], flagged[..., 0].astype(bool)):
      dist = ndimage.distance_transform_edt(~f) if f.any() else np.full(f.shape, np.inf)
      valid = t > 0
      k = np.searchsorted(self.edges, dist[valid], side="right") - 1
      err = np.abs(p[valid].astype(np.float64) - t[valid])
      self._n += np.bincount(k, minlength=len(self.edges))
      self._abs += np.bincount(k, err, minlength=len(self.edges))
      self._sq += np.bincount(k, err ** 2, minlength=len(self.edges))

  def result(self) -> dict[str, list[float] | float | int]:
    total = self._n.sum()
    if total == 0:
      raise ValueError("ErrorByDistance.result: no valid pixels accumulated")
    with np.errstate(invalid="ignore", divide="ignore"):
      mae, rmse = 1000.0 * self._abs / self._n, 1000.0 * np.sqrt(self._sq / self._n)
    return {"edges_px": self.edges.tolist(), "share": (self._n / total).tolist(), "mae_mm": mae.tolist(),
            "rmse_mm": rmse.tolist(), "pooled_mae_mm": float(1000.0 * self._abs.sum() / total),
            "num_pixels": int(total)}


# -------------------------------------------------------------------------------------------------
# KITTI depth-completion benchmark conventions (the devkit's evaluate_depth)
# -------------------------------------------------------------------------------------------------

KITTI_DEVKIT_METRICS = ("devkit_mae", "devkit_rmse", "devkit_imae", "devkit_irmse")
KITTI_PNG_SCALE = 256.0  # a KITTI depth PNG stores round(d * 256), 0 = no depth


def kitti_devkit_fill(pred_hw: np.ndarray, *, quantize: bool = False) -> np.ndarray:
  """A prediction as the KITTI devkit scores it: missing depths filled from their neighbours.

  The devkit reads a prediction from a 16-bit PNG, where 0 means "no depth", and fills every such pixel before
  scoring (its `interpolateBackground`):
    1. each row: a run of missing pixels with valid pixels on both sides takes the smaller of those two depths;
       a run at the left (right) end takes the row's first (last) valid depth;
    2. then each column: rows above the first row with any valid pixel take that row's depths, rows below the
       last one take that one's. A row without any valid pixel *between* valid rows stays missing, and the devkit
       then scores it as a depth of -1 m (`DepthImage` marks missing pixels -1); so does a map without any depth.

  Args:
    pred_hw: (H, W) predicted depth [m]; pixels <= 0 or non-finite count as missing (a PNG cannot hold them).
    quantize: first round to the 16-bit PNG grid as `pncnn_jax.inference.predict` writes it: d -> round(clip(d, 0,
      65535/256) * 256) / 256; depths under 1/512 m become 0, i.e. missing.

  Returns:
    (H, W) float64 depth [m], -1 where the devkit leaves a pixel missing.
  """
  d = np.asarray(pred_hw, np.float64)
  if d.ndim != 2:
    raise ValueError(f"kitti_devkit_fill: expected an (H, W) depth map, got shape {d.shape}")
  d = np.where(np.isfinite(d), d, 0.0)
  if quantize:
    d = np.round(np.clip(d, 0.0, 65535.0 / KITTI_PNG_SCALE) * KITTI_PNG_SCALE) / KITTI_PNG_SCALE
  valid = d > 0
  h, w = d.shape
  cols = np.arange(w)
  prev = np.maximum.accumulate(np.where(valid, cols, -1), axis=1)  # last valid column at or before u (-1: none)
  nxt = np.minimum.accumulate(np.where(valid, cols, w)[:, ::-1], axis=1)[:, ::-1]  # first at or after u (w: none)
  rows = np.arange(h)[:, None]
  left, right = d[rows, np.clip(prev, 0, w - 1)], d[rows, np.clip(nxt, 0, w - 1)]
  has_l, has_r = prev >= 0, nxt < w
  out = np.where(valid, d, np.where(has_l & has_r, np.minimum(left, right),
                                    np.where(has_r, right, np.where(has_l, left, -1.0))))
  full = np.flatnonzero(valid.any(axis=1))
  if full.size:
    out[:full[0]] = out[full[0]]
    out[full[-1] + 1:] = out[full[-1]]
  return out


def kitti_devkit_metrics(pred: np.ndarray, target: np.ndarray, *, quantize: bool = False) -> dict[str, np.ndarray]:
  """The KITTI benchmark's MAE, RMSE, iMAE and iRMSE per image, with its conventions (devkit `evaluate_depth`).

  The prediction is first filled as the devkit does (`kitti_devkit_fill`, optionally quantised to the 16-bit PNG
  grid); then over the ground-truth pixels V = {target > 0}, with p the filled depth and t the target [m]:
  devkit_mae = 1000 mean|t - p| [mm], devkit_rmse = 1000 sqrt(mean (t - p)^2) [mm],
  devkit_imae = 1000 mean|1/t - 1/p| [1/km], devkit_irmse = 1000 sqrt(mean (1/t - 1/p)^2) [1/km].
  They differ from `kitti_metrics` only where the prediction is missing (<= 0) or, with `quantize`, off the PNG
  grid: `kitti_metrics` scores a 0 as a depth of 0 (iMAE = inf), the devkit fills it from its neighbours.
  Host-side numpy (the fill is a scan over rows), computed in float64; split values are means over images, as
  the devkit's.

  Args:
    pred, target: (B, H, W, 1) depth [m]; target 0 = no ground truth.
    quantize: round the prediction to the PNG grid first (what the devkit sees of `pncnn_jax.inference.predict`'s PNGs).

  Returns:
    dict of KITTI_DEVKIT_METRICS, each (B,) float64, and `num_valid` (B,) int |V| (NaN metrics where 0).
  """
  pred, target = np.asarray(pred), np.asarray(target)
  if pred.ndim != 4 or pred.shape[-1] != 1 or pred.shape != target.shape:
    raise ValueError(f"kitti_devkit_metrics: expected pred and target of one shape (B, H, W, 1), got {pred.shape} "
                     f"and {target.shape}")
  out = {k: np.full(pred.shape[0], np.nan) for k in KITTI_DEVKIT_METRICS}
  out["num_valid"] = np.zeros(pred.shape[0], np.int64)
  for b in range(pred.shape[0]):
    t = target[b, ..., 0].astype(np.float64)
    v = t > 0
    n = int(v.sum())
    out["num_valid"][b] = n
    if n == 0:
      continue
    p, t = kitti_devkit_fill(pred[b, ..., 0], quantize=quantize)[v], t[v]
    err, inv = np.abs(t - p), np.abs(1.0 / t - 1.0 / p)
    out["devkit_mae"][b], out["devkit_rmse"][b] = 1000.0 * err.mean(), 1000.0 * np.sqrt(np.mean(err**2))
    out["devkit_imae"][b], out["devkit_irmse"][b] = 1000.0 * inv.mean(), 1000.0 * np.sqrt(np.mean(inv**2))
  return out
