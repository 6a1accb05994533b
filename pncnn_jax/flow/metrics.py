"""Optical-flow metrics (host numpy, float64): end-point error, outlier rate, AUSE on EPE, track-failure AUROC.

Conventions. Flows are (B, H, W, 2) in pixels; a target is (B, H, W, 3) = [u, v, valid]. Per image, over its
valid pixels V:
  EPE       = mean_V ||f - f*||_2                                      [px]
  RMS EPE   = sqrt(mean_V ||f - f*||_2^2)                              [px]
  outliers  = 100 mean_V [EPE > 3 px and EPE > 0.05 ||f*||_2]          [%]  (KITTI 2015's Fl criterion)
and a split's value is the mean of its images' values (as the depth metrics, `metrics.MeanAccumulator`).

AUSE on EPE pools every valid pixel of the split: the oracle curve removes the pixels of largest EPE first, the
model curve those of largest predicted uncertainty; both are the mean EPE of the pixels kept, divided by the mean
EPE of all (so both start at 1), at the fractions 0, 0.01, ..., 0.99 removed; AUSE = trapz(model - oracle). This
is the Gustafsson et al. / Ilg et al. form with EPE in place of RMSE.

AUROC of a track score for the failure label: the probability that a failed track scores higher than a good one
(`uncertainty.auroc`, ties 1/2); with the score -c0 it measures how well a low input confidence singles out the
failures. 0.5 = chance (a binary c0 gives exactly 0.5).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pncnn_jax.uncertainty import FRACTIONS_GUSTAFSSON, auroc

OUTLIER_PX = 3.0  # an outlier: EPE above this ...
OUTLIER_REL = 0.05  # ... and above this fraction of the true flow's magnitude


def _split(pred, target, name: str):
  pred, target = np.asarray(pred, np.float64), np.asarray(target, np.float64)
  if pred.ndim != 4 or target.shape != pred.shape[:3] + (pred.shape[3] + 1,):
    raise ValueError(f"{name}: expected pred (B, H, W, C) and target (B, H, W, C + 1) = [flow, valid], got "
                     f"{pred.shape} and {target.shape}")
  return pred, target[..., :-1], target[..., -1] > 0


def end_point_error(pred, target) -> tuple[np.ndarray, np.ndarray]:
  """(EPE (B, H, W) [px], valid (B, H, W) bool) of predicted flow (B, H, W, C) against target (B, H, W, C + 1)."""
  pred, flow, valid = _split(pred, target, "end_point_error")
  return np.sqrt(np.sum(np.square(pred - flow), axis=-1)), valid


def flow_metrics(pred, target) -> dict[str, np.ndarray]:
  """Per-image EPE, RMS EPE [px], outliers [%] and num_valid, each (B,) (module docstring).

  An image without valid pixels gets NaN metrics and num_valid 0 (`metrics.MeanAccumulator` skips it).
  """
  epe, valid = end_point_error(pred, target)
  _, flow, _ = _split(pred, target, "flow_metrics")
  mag = np.sqrt(np.sum(np.square(flow), axis=-1))
  n = valid.sum(axis=(1, 2)).astype(np.float64)
  with np.errstate(invalid="ignore", divide="ignore"):
    mean = lambda x: np.where(valid, x, 0.0).sum(axis=(1, 2)) / n  # noqa: E731
    out = (epe > OUTLIER_PX) & (epe > OUTLIER_REL * mag)
    return {"epe": mean(epe), "rmse": np.sqrt(mean(epe**2)), "outliers": 100.0 * mean(out.astype(np.float64)),
            "num_valid": n.astype(np.int64)}


def flow_uncertainty(confidence, channels: int = 2) -> np.ndarray:
  """A scalar uncertainty per pixel from a model's output confidence (B, H, W, 1 or C): sqrt(sum_k 1/c_k),
  with c broadcast over the C channels. For a precision it is the predicted RMS end-point error sqrt(E||e||^2)
  [px]; for a plain confidence (the NConv cout) a decreasing function of it. Infinite where c = 0."""
  c = np.asarray(confidence, np.float64)
  if np.any(c < 0) or np.any(np.isnan(c)):
    raise ValueError("flow_uncertainty: the confidence must be >= 0 and not NaN")
  with np.errstate(divide="ignore"):
    inv = 1.0 / c
  return np.sqrt(np.sum(np.broadcast_to(inv, c.shape[:3] + (channels,)), axis=-1))


def gaussian_nll_2d(pred, precision, target) -> float:
  """Mean NLL [nats] over the valid pixels of N(f*; f, diag(1/c)), c (B, H, W, 1) (isotropic) or (B, H, W, C):
  sum_k [ c_k e_k^2 / 2 - log(c_k) / 2 + log(2 pi) / 2 ]."""
  pred, flow, valid = _split(pred, target, "gaussian_nll_2d")
  c = np.broadcast_to(np.asarray(precision, np.float64), pred.shape)
  with np.errstate(divide="ignore"):
    per = 0.5 * (c * np.square(pred - flow) - np.log(c) + np.log(2 * np.pi))
  return float(np.sum(per, axis=-1)[valid].mean()) if valid.any() else float("nan")


class EpeSparsification(NamedTuple):
  """AUSE on EPE and its curves (float64)."""

  ause: float
  fractions: np.ndarray  # (K,) fraction of pixels removed
  oracle: np.ndarray  # (K,) mean EPE kept / mean EPE of all, removing the largest EPE first
  model: np.ndarray  # (K,) the same, removing the largest predicted uncertainty first


def ause_epe(epe, uncertainty, fractions=FRACTIONS_GUSTAFSSON) -> EpeSparsification:
  """AUSE on EPE (module docstring). epe, uncertainty: (N,) of the same length; ties in the uncertainty keep
  the input order (stable sort)."""
  epe, unc = np.asarray(epe, np.float64).ravel(), np.asarray(uncertainty, np.float64).ravel()
  if epe.shape != unc.shape or epe.size == 0:
    raise ValueError(f"ause_epe: epe and uncertainty must be non-empty and of one length, got {epe.shape}, "
                     f"{unc.shape}")
  if np.any(np.isnan(unc)) or not np.all(np.isfinite(epe)):
    raise ValueError("ause_epe: epe must be finite and the uncertainty not NaN")
  counts = np.maximum(((1.0 - np.asarray(fractions, np.float64)) * epe.size).astype(np.int64), 1)

  def curve(sorted_epe):
    prefix = np.concatenate([[0.0], np.cumsum(sorted_epe)])
    return prefix[counts] / counts

  oracle, model = curve(np.sort(epe)), curve(epe[np.argsort(unc, kind="stable")])
  total = oracle[0]
  oracle, model = (np.zeros_like(oracle), np.zeros_like(model)) if total == 0 else (oracle / total, model / total)
  area = float(np.sum(0.5 * ((model - oracle)[1:] + (model - oracle)[:-1]) * np.diff(fractions)))
  return EpeSparsification(area, np.asarray(fractions, np.float64), oracle, model)


class FlowAccumulator:
  """Collects a split's flow predictions batch by batch; `result()` gives every number of the flow report.

  `update(pred, target, uncertainty, sparse, c0, corrupted, failure, precision=None)`: (B, H, W, .) arrays;
  uncertainty (B, H, W) for AUSE, sparse (B, H, W, C + 1) the input (its mask marks the tracks), c0 (B, H, W, 1),
  corrupted and failure (B, H, W, 1) labels (None: not reported), precision (B, H, W, 1 or C) for the NLL.
  """

  def __init__(self):
    self._sums: dict[str, float] = {}
    self._images = 0
    self._skipped = 0
    self._epe: list[np.ndarray] = []
    self._unc: list[np.ndarray] = []
    self._c0: list[np.ndarray] = []
    self._labels: list[np.ndarray] = []
    self._kinds: list[np.ndarray] = []
    self._track_err: list[np.ndarray] = []
    self._nll = [0.0, 0]

  def update(self, pred, target, uncertainty, sparse, c0, corrupted=None, failure=None, precision=None):
    per = flow_metrics(pred, target)
    keep = per.pop("num_valid") > 0
    self._skipped += int((~keep).sum())
    for k, v in per.items():
      self._sums[k] = self._sums.get(k, 0.0) + float(v[keep].sum())
    self._images += int(keep.sum())
    epe, valid = end_point_error(pred, target)
    self._epe.append(epe[valid].astype(np.float32))
    self._unc.append(np.asarray(uncertainty, np.float64)[valid])
    tracks = np.asarray(sparse)[..., -1] > 0
    self._c0.append(np.asarray(c0)[..., 0][tracks].astype(np.float64))
    track_epe, _ = end_point_error(np.asarray(sparse)[..., :-1], target)
    self._track_err.append(track_epe[tracks & valid])
    if corrupted is not None:
      self._labels.append(np.asarray(corrupted)[..., 0][tracks].astype(bool))
    if failure is not None:
      self._kinds.append(np.asarray(failure)[..., 0][tracks].astype(np.int64))
    if precision is not None:
      n = int(valid.sum())
      self._nll[0] += gaussian_nll_2d(pred, precision, target) * n
      self._nll[1] += n

  def result(self, failure_names: tuple[str, ...] = ()) -> dict[str, Any]:
    """Split means (epe, rmse, outliers), ause_epe and its curves, the AUROC of -c0 for the corruption label
    (overall and per failure kind k >= 1 of `failure_names`, each against the good tracks), mean c0 of failed and
    good tracks, the input tracks' own EPE, nll (None without a precision), num_images, num_pixels, num_tracks."""
    if self._images == 0:
      raise ValueError("FlowAccumulator.result: no image with valid ground truth")
    out: dict[str, Any] = {k: v / self._images for k, v in self._sums.items()}
    epe, unc = np.concatenate(self._epe), np.concatenate(self._unc)
    sp = ause_epe(epe, unc)
    c0 = np.concatenate(self._c0)
    out.update(ause_epe=sp.ause, sparsification=sp, num_images=self._images, num_pixels=int(epe.size),
               num_tracks=int(c0.size), nll=self._nll[0] / self._nll[1] if self._nll[1] else None,
               track_epe=float(np.concatenate(self._track_err).mean()) if c0.size else float("nan"))
    if self._labels:
      bad = np.concatenate(self._labels)
      out["corrupted_fraction"] = float(bad.mean()) if bad.size else float("nan")
      out["auroc_corrupted"] = auroc(-c0, bad)
      out["c0_corrupted"] = float(c0[bad].mean()) if bad.any() else float("nan")
      out["c0_clean"] = float(c0[~bad].mean()) if (~bad).any() else float("nan")
      if self._kinds:
        kinds = np.concatenate(self._kinds)
        for k, name in enumerate(failure_names):
          if k > 0:
            sel = (kinds == k) | ~bad
            out[f"auroc_{name.split(' ')[0]}"] = auroc(-c0[sel], bad[sel])
    return out
