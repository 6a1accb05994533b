"""Uncertainty evaluation of pNCNN (docs/SPEC.md §8): sparsification curves, AUSE, AUCE, NLL, AUROC.

Host numpy in float64, exact over a whole split (KITTI selval pools ~7e7 pixels) with O(N) memory and O(N log N)
time: one sort, then 100 prefix sums. `UncertaintyAccumulator` collects the per-pixel vectors image by image.
AUSE comes in the pNCNN and the Gustafsson et al. definitions, and `ause(..., normalization=)` gives the pNCNN ranking
with the three normalisations later work uses (pNCNN's, one shared maximum as BayesRays, none; docs/SPEC.md §8.2a).
`pncnn_jax.metrics` re-exports these names.
"""

from __future__ import annotations

import statistics
from typing import NamedTuple

import numpy as np


def check_nhwc(name: str, **arrays) -> None:
  """Raises ValueError unless every array is (B, H, W, 1) with one common shape."""
  shapes = {k: tuple(np.shape(v)) for k, v in arrays.items()}
  for k, s in shapes.items():
    if len(s) != 4 or s[-1] != 1:
      raise ValueError(f"{name}: `{k}` must be (B, H, W, 1) NHWC, got shape {s}")
  if len(set(shapes.values())) != 1:
    raise ValueError(f"{name}: all inputs must have the same shape, got {shapes}")


# -------------------------------------------------------------------------------------------------
# Sparsification curves and AUSE (docs/SPEC.md §8.1-§8.3)
# -------------------------------------------------------------------------------------------------

# pNCNN: torch/np linspace(0, 1, 100, endpoint=False); Gustafsson: np.arange(0, 1, 0.01).
FRACTIONS_PNCNN = np.linspace(0.0, 1.0, 100, endpoint=False)
FRACTIONS_GUSTAFSSON = np.arange(0.0, 1.0, 0.01)
TIE_BREAKS = ("stable", "smaller_error_first", "larger_error_first")


class Sparsification(NamedTuple):
  """AUSE and the two normalised sparsification curves it integrates (all float64)."""

  ause: float
  fractions: np.ndarray  # (K,) fraction of pixels removed
  oracle: np.ndarray  # (K,) normalised RMSE of the pixels kept when removing the largest errors
  model: np.ndarray  # (K,) normalised RMSE when removing the most uncertain pixels


def _check_vectors(name: str, err_sq, key, key_name: str) -> tuple[np.ndarray, np.ndarray]:
  err_sq, key = np.asarray(err_sq), np.asarray(key)
  if err_sq.ndim != 1 or key.shape != err_sq.shape:
    raise ValueError(f"{name}: `err_sq` and `{key_name}` must be 1-D of one length, got "
                     f"{err_sq.shape} and {key.shape}")
  if err_sq.size == 0:
    raise ValueError(f"{name}: no pixels (empty `err_sq`)")
  if not np.all(np.isfinite(err_sq)) or np.any(err_sq < 0):
    raise ValueError(f"{name}: `err_sq` must be finite and >= 0")
  if np.any(np.isnan(key)):
    raise ValueError(f"{name}: `{key_name}` contains NaN")
  return err_sq, key


def _kept_counts(fractions: np.ndarray, n: int) -> np.ndarray:
  """n_r = int((1 - r) N) in float64 with truncation; at least 1 (the reference gives NaN at 0)."""
  return np.maximum(((1.0 - np.asarray(fractions, np.float64)) * n).astype(np.int64), 1)


def _prefix_rmse(err_sorted: np.ndarray, counts: np.ndarray) -> np.ndarray:
  """sqrt(mean(err_sorted[:n])) for every n in counts: float64 block sums, O(1) extra memory."""
  n = err_sorted.shape[0]
  bounds = np.unique(np.concatenate([[0], counts, [n]]))
  prefix = np.zeros(bounds.shape, np.float64)
  for i in range(len(bounds) - 1):  # <= K + 1 blocks; numpy sums each pairwise in float64
    prefix[i + 1] = prefix[i] + err_sorted[bounds[i]:bounds[i + 1]].sum(dtype=np.float64)
  return np.sqrt(prefix[np.searchsorted(bounds, counts)] / counts)


def sparsification_curves(
    err_sq, key, *, descending: bool, fractions=FRACTIONS_PNCNN, tie_break: str = "stable"
) -> tuple[np.ndarray, np.ndarray]:
  """Unnormalised oracle and model sparsification curves (RMSE of the pixels kept).

  For each fraction r, the first n_r = int((1 - r) N) pixels are kept: for the oracle in
  ascending order of err_sq, for the model in the order of `key` (ascending, or descending when
  `descending`, so the pixels kept first are the most trusted ones).

  Ties in `key`: "stable" keeps tied pixels in input order (row-major pixels, images in loader
  order); the reference's torch.sort is unstable, so its order among ties is arbitrary.
  "smaller_error_first" / "larger_error_first" break ties by error. These two orders bound every
  possible tie order for the raw (unnormalised) model curve and for the Gustafsson AUSE, whose
  normalisation by the curve's first value (all pixels) does not depend on the order. They do NOT
  bound the pNCNN-normalised AUSE (`ause_pncnn`), which divides the model curve by its own maximum:
  that maximum moves with the tie order (measured: 20 random orders gave 0.575-0.580, outside the
  0.189-0.298 of the two extreme orders). The golden `ause_tie_bounds` are these two extremes.

  Args:
    err_sq: (N,) squared errors (any unit; the curves are in its square root).
    key: (N,) uncertainty (ascending) or confidence (descending) per pixel; must not be NaN.
    descending: sort `key` descending (confidence) instead of ascending (uncertainty).
    fractions: (K,) fractions removed, in [0, 1).
    tie_break: one of `TIE_BREAKS`.

  Returns:
    (oracle, model), each (K,) float64 RMSE. O(N) memory, O(N log N) time.
  """
  err_sq, key = _check_vectors("sparsification_curves", err_sq, key, "key")
  if tie_break not in TIE_BREAKS:
    raise ValueError(
        f"sparsification_curves: tie_break={tie_break!r}, expected one of {TIE_BREAKS}")
  counts = _kept_counts(fractions, err_sq.shape[0])
  oracle = _prefix_rmse(np.sort(err_sq), counts)
  k = -key if descending else key
  if tie_break == "stable":
    order = np.argsort(k, kind="stable")
  else:  # np.lexsort: the last key is the primary one
    order = np.lexsort((err_sq if tie_break == "smaller_error_first" else -err_sq, k))
  model = _prefix_rmse(err_sq[order], counts)
  return oracle, model


def _trapz(y: np.ndarray, x: np.ndarray) -> float:
  return float(np.sum(0.5 * (y[1:] + y[:-1]) * np.diff(x)))


def _normalise(curve: np.ndarray, by: float) -> np.ndarray:
  return np.zeros_like(curve) if by == 0 else curve / by  # all errors 0: flat curves, AUSE 0


def ause_pncnn(err_sq, confidence, *, tie_break: str = "stable") -> Sparsification:
  """AUSE as the official pNCNN `eval_ause` computes it (docs/SPEC.md §8.2).

  Model order: sqrt(confidence) (float32, as the reference; monotone, so it only matters through
  the ties sqrt creates) descending. Fractions linspace(0, 1, 100, endpoint=False). The oracle
  curve is normalised by its first value, the model curve by **its maximum**; AUSE = trapz of
  (model - oracle) over the fractions, i.e. over [0, 0.99]. Unlike the reference, the prefix sums
  are float64, and ties are broken per `tie_break` (see `sparsification_curves`).

  Args:
    err_sq: (N,) squared errors (t - mu)^2 of all valid pixels of the split [m^2].
    confidence: (N,) out[:,1] at those pixels (NConvUNet cout, or the pNCNN precision c).
    tie_break: see `sparsification_curves`.

  Returns:
    `Sparsification` with the AUSE and the normalised curves (the golden `rmse_by_err` and
    `rmse_by_var`).
  """
  err_sq, confidence = _check_vectors("ause_pncnn", err_sq, confidence, "confidence")
  key = np.sqrt(confidence.astype(np.float32))
  if np.any(np.isnan(key)):
    raise ValueError("ause_pncnn: `confidence` must be >= 0")
  oracle, model = sparsification_curves(
      err_sq, key, descending=True, fractions=FRACTIONS_PNCNN, tie_break=tie_break)
  oracle, model = _normalise(oracle, oracle[0]), _normalise(model, model.max())
  return Sparsification(_trapz(model - oracle, FRACTIONS_PNCNN), FRACTIONS_PNCNN, oracle, model)


def ause_gustafsson(err_sq, sigma, *, tie_break: str = "stable") -> Sparsification:
  """AUSE as Gustafsson et al. compute it (docs/SPEC.md §8.3).

  Model order: sigma ascending (theirs is np.argsort's quicksort, unstable; ours per
  `tie_break`). Fractions np.arange(0, 1, 0.01). **Both** curves are normalised by their own first
  value (the full RMSE), float64; AUSE = trapz(model - oracle). Equal to `ause_pncnn` when the
  model curve never rises above its start; larger when it does (pNCNN divides by the maximum).

  Args:
    err_sq: (N,) squared errors of all valid pixels of the split [m^2].
    sigma: (N,) predicted standard deviation [m], or any increasing function of it. For pNCNN,
      sigma = 1/sqrt(c) (`sigma_from_precision`).
    tie_break: see `sparsification_curves`.

  Returns:
    `Sparsification` with the AUSE and the normalised curves.
  """
  oracle, model = sparsification_curves(
      err_sq, sigma, descending=False, fractions=FRACTIONS_GUSTAFSSON, tie_break=tie_break)
  oracle, model = _normalise(oracle, oracle[0]), _normalise(model, model[0])
  return Sparsification(
      _trapz(model - oracle, FRACTIONS_GUSTAFSSON), FRACTIONS_GUSTAFSSON, oracle, model)


# How `ause` normalises the two curves (docs/SPEC.md §8.2a).
NORMALIZATIONS = ("pncnn", "shared_max", "none")


def normalise_curves(oracle: np.ndarray, model: np.ndarray, normalization: str) -> tuple[np.ndarray, np.ndarray]:
  """The two unnormalised sparsification curves (K,) normalised as `normalization` says (docs/SPEC.md §8.2a):

    'pncnn'       oracle / oracle[0], model / max(model)    each curve by its own maximum (the oracle is
                                                            non-increasing, so its maximum is its first value)
    'shared_max'  both / max(max(oracle), max(model))       one shared maximum (BayesRays' `ause`, from CF-NeRF)
    'none'        as they are                               RMSE in the error's unit (m for depth errors in m)

  All-zero curves stay zero (every error 0: AUSE 0)."""
  if normalization == "pncnn":
    return _normalise(oracle, oracle[0]), _normalise(model, model.max())
  if normalization == "shared_max":
    shared = max(float(oracle.max()), float(model.max()))
    return _normalise(oracle, shared), _normalise(model, shared)
  if normalization == "none":
    return oracle.copy(), model.copy()
  raise ValueError(f"ause: normalization={normalization!r}, expected one of {NORMALIZATIONS}")


def ause(err_sq, confidence, *, normalization: str = "pncnn", tie_break: str = "stable") -> Sparsification:
  """AUSE with pNCNN's ranking and fractions, normalised per `normalization` (docs/SPEC.md §8.2a).

  Pixels are ranked as in `ause_pncnn` (sqrt(confidence) in float32, descending; fractions r = 0, 0.01, ..., 0.99)
  and AUSE = trapz over r of (model - oracle) after `normalise_curves`:

    'pncnn' (default)  each curve by its own maximum: exactly `ause_pncnn` (the paper's 0.053 is of this kind);
    'shared_max'       both curves by one shared maximum, max(oracle, model) (BayesRays-style code). The oracle
                       starts at the full RMSE, as the model does, so the shared maximum is the model curve's; it
                       differs from 'pncnn' by the oracle's divisor only, and is unitless;
    'none'             the raw curves: AUSE in the error's unit (m for errors in m), so it scales with the errors.

  Args:
    err_sq: (N,) squared errors of all valid pixels of the split [m^2].
    confidence: (N,) confidence or precision c >= 0 (higher = more trusted; pNCNN: c [1/m^2]).
    normalization: one of NORMALIZATIONS.
    tie_break: see `sparsification_curves`.

  Returns:
    `Sparsification` (AUSE and the normalised curves).
  """
  if normalization not in NORMALIZATIONS:
    raise ValueError(f"ause: normalization={normalization!r}, expected one of {NORMALIZATIONS}")
  err_sq, confidence = _check_vectors("ause", err_sq, confidence, "confidence")
  key = np.sqrt(confidence.astype(np.float32))
  if np.any(np.isnan(key)):
    raise ValueError("ause: `confidence` must be >= 0")
  oracle, model = sparsification_curves(err_sq, key, descending=True, fractions=FRACTIONS_PNCNN, tie_break=tie_break)
  oracle, model = normalise_curves(oracle, model, normalization)
  return Sparsification(_trapz(model - oracle, FRACTIONS_PNCNN), FRACTIONS_PNCNN, oracle, model)


def sigma_from_precision(c) -> np.ndarray:
  """sigma = 1/sqrt(c) [m] for a precision c [1/m^2] (docs/SPEC.md §6); c = 0 gives inf."""
  c = np.asarray(c, np.float64)
  if np.any(c < 0) or np.any(np.isnan(c)):
    raise ValueError("sigma_from_precision: the precision must be >= 0 and not NaN")
  with np.errstate(divide="ignore"):
    return 1.0 / np.sqrt(c)


# -------------------------------------------------------------------------------------------------
# Calibration: AUCE and Gaussian NLL (docs/SPEC.md §8.5, §8.6)
# -------------------------------------------------------------------------------------------------

AUCE_ALPHAS = np.arange(0.01, 1.0, 0.01)  # 99 miscoverage levels, as Gustafsson et al.
_Z = np.array([statistics.NormalDist().inv_cdf(1.0 - a / 2.0) for a in AUCE_ALPHAS])


class Calibration(NamedTuple):
  """AUCE and its coverage curve (float64)."""

  auce: float  # trapz(|coverage - (1 - alpha)|, alpha)
  under_coverage: float  # trapz(max(0, (1 - alpha) - coverage), alpha)
  alphas: np.ndarray  # (99,)
  coverage: np.ndarray  # (99,) fraction of valid pixels inside mu +- z(alpha) sigma


def _valid_pixels(name, pred, sigma, target):
  pred, sigma, target = (np.asarray(a) for a in (pred, sigma, target))
  if not pred.shape == sigma.shape == target.shape:
    raise ValueError(f"{name}: pred, sigma, target shapes differ: "
                     f"{pred.shape}, {sigma.shape}, {target.shape}")
  valid = target > 0
  e = np.abs(target[valid].astype(np.float64) - pred[valid])
  s = sigma[valid].astype(np.float64)
  if np.any(np.isnan(s)) or np.any(s < 0):
    raise ValueError(f"{name}: `sigma` must be >= 0 and not NaN at valid pixels")
  return e, s


def _coverage_counts(e: np.ndarray, s: np.ndarray) -> np.ndarray:
  """Per alpha, #pixels with |t - mu| <= z(alpha) sigma (inclusive interval)."""
  with np.errstate(divide="ignore", invalid="ignore"):
    q = np.where(e == 0, 0.0, e / s)  # sigma = 0: inside only if the error is 0; sigma inf: 0
  return np.searchsorted(np.sort(q), _Z, side="right")


def _calibration(counts: np.ndarray, n: int) -> Calibration:
  cov = counts / n
  err = cov - (1.0 - AUCE_ALPHAS)
  return Calibration(_trapz(np.abs(err), AUCE_ALPHAS), _trapz(np.maximum(0.0, -err), AUCE_ALPHAS),
                     AUCE_ALPHAS, cov)


def auce(pred, sigma, target) -> Calibration:
  """Area under the calibration error curve, Gustafsson et al. (docs/SPEC.md §8.5).

  For alpha in arange(0.01, 1, 0.01), the interval mu +- Phi^-1(1 - alpha/2) sigma (both ends
  inclusive) should hold a fraction 1 - alpha of the valid pixels; AUCE = trapz over alpha of
  |coverage - (1 - alpha)|. 0 is perfect calibration; the maximum is about 0.49. For pNCNN use
  sigma = 1/sqrt(c). Phi^-1 is the standard library's `statistics.NormalDist.inv_cdf`.

  Args:
    pred: predicted depth [m], any shape (e.g. (B, H, W, 1)).
    sigma: predicted standard deviation [m], same shape, >= 0.
    target: ground truth [m], same shape, 0 = no ground truth.

  Returns:
    `Calibration`. Raises ValueError when there is no valid pixel.
  """
  e, s = _valid_pixels("auce", pred, sigma, target)
  if e.size == 0:
    raise ValueError("auce: no valid target pixel (target > 0)")
  return _calibration(_coverage_counts(e, s), e.size)


def _nll_sum(e: np.ndarray, s: np.ndarray) -> float:
  with np.errstate(divide="ignore", invalid="ignore"):
    return float(np.sum(0.5 * np.log(2.0 * np.pi * s**2) + e**2 / (2.0 * s**2)))


def mean_gaussian_nll(pred, sigma, target) -> float:
  """Proper Gaussian NLL per valid pixel: mean of 0.5 log(2 pi sigma^2) + e^2 / (2 sigma^2).

  float64 on the host. Related to the training loss (`losses.gaussian_nll`, c = 1/sigma^2) by
  NLL = (loss + log 2 pi) / 2, up to the loss's 1e-16.

  Args:
    pred: predicted depth [m], any shape. sigma: std [m], same shape, > 0.
    target: ground truth [m], same shape, 0 = no ground truth.

  Returns:
    the mean NLL in nats (log-density of metres); NaN if there is no valid pixel.
  """
  e, s = _valid_pixels("mean_gaussian_nll", pred, sigma, target)
  return _nll_sum(e, s) / e.size if e.size else float("nan")


class UncertaintyAccumulator:
  """Collects per-pixel errors and confidences over a split, then computes AUSE/AUCE/NLL.

  `update` takes a batch of (B, H, W, 1) arrays; the valid pixels (target > 0) are appended in
  row-major order, images in order, exactly as the reference's `eval_ause` concatenates them
  (8 bytes per valid pixel: float32 (t - mu)^2 and the confidence). AUCE and NLL are streamed
  (99 counts and one sum), since they need no sorting across images.

  `confidence` is out[:,1]: the NConvUNet cout for NCNN-Conf, the precision c for pNCNN. The
  Gustafsson AUSE orders by sigma = 1/sqrt(c), which is the same ranking as c descending for any
  confidence. AUCE and NLL treat c as a precision (sigma^2 = 1/c): meaningful for pNCNN only.
  """

  def __init__(self):
    self._err: list[np.ndarray] = []
    self._conf: list[np.ndarray] = []
    self._cover = np.zeros(AUCE_ALPHAS.shape, np.int64)
    self._nll = 0.0
    self.num_pixels = 0

  def update(self, pred, target, confidence) -> None:
    pred, target, confidence = (np.asarray(a, np.float32) for a in (pred, target, confidence))
    check_nhwc("UncertaintyAccumulator.update", pred=pred, target=target, confidence=confidence)
    valid = target > 0
    if np.any(confidence[valid] < 0) or np.any(np.isnan(confidence[valid])):
      raise ValueError("UncertaintyAccumulator.update: `confidence` must be >= 0 and not NaN")
    self._err.append(np.square(target[valid] - pred[valid]))  # float32, as the reference
    c = confidence[valid]
    self._conf.append(c)
    e, s = np.abs(target[valid].astype(np.float64) - pred[valid]), sigma_from_precision(c)
    self._cover += _coverage_counts(e, s)
    self._nll += _nll_sum(e, s)
    self.num_pixels += int(e.size)

  def result(self, *, tie_break: str = "stable") -> dict:
    """Returns ause_pncnn, ause_gustafsson (floats), their `Sparsification`s, auce, nll, and the pNCNN ranking's AUSE
    under the other normalisations of `ause`: ause_shared_max and ause_none [m] (docs/SPEC.md §8.2a)."""
    if self.num_pixels == 0:
      raise ValueError("UncertaintyAccumulator.result: no valid pixel accumulated")
    err, conf = np.concatenate(self._err), np.concatenate(self._conf)
    self._err, self._conf = [err], [conf]  # keep one copy, not two
    sp = ause_pncnn(err, conf, tie_break=tie_break)
    oracle_raw, model_raw = sparsification_curves(err, np.sqrt(conf), descending=True, tie_break=tie_break)
    other = {}
    for n in ("shared_max", "none"):  # the same ranking as `ause` (sqrt of the float32 confidence), one sort
      oracle, model = normalise_curves(oracle_raw, model_raw, n)
      other[f"ause_{n}"] = _trapz(model - oracle, FRACTIONS_PNCNN)
    sg = ause_gustafsson(err, sigma_from_precision(conf), tie_break=tie_break)
    cal = _calibration(self._cover, self.num_pixels)
    return {
        "ause_pncnn": sp.ause, "ause_gustafsson": sg.ause, "auce": cal.auce,
        "nll": self._nll / self.num_pixels, "num_pixels": self.num_pixels,
        "sparsification_pncnn": sp, "sparsification_gustafsson": sg, "calibration": cal, **other,
    }


# -------------------------------------------------------------------------------------------------
# AUROC of a score for a binary label (the disturbed LiDAR points of the synthetic scenes)
# -------------------------------------------------------------------------------------------------


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
  """Area under the ROC curve of `scores` for the positive `labels` (rank-based, Mann-Whitney U).

  AUROC = (sum of the ranks of the positives - n_pos (n_pos + 1) / 2) / (n_pos n_neg), ranks 1-based with ties
  averaged, so a tie between a positive and a negative counts 1/2. NaN when one class is empty.

  Args:
    scores: (N,) higher = more likely positive.
    labels: (N,) bool.
  """
  scores = np.asarray(scores, np.float64).ravel()
  labels = np.asarray(labels, bool).ravel()
  if scores.shape != labels.shape:
    raise ValueError(f"auroc: scores {scores.shape} and labels {labels.shape} differ in shape")
  n_pos = int(labels.sum())
  n_neg = labels.size - n_pos
  if n_pos == 0 or n_neg == 0:
    return float("nan")
  uniq, inv, counts = np.unique(scores, return_inverse=True, return_counts=True)
  first_rank = np.cumsum(counts) - counts + 1  # 1-based rank of each distinct value's first occurrence
  avg_rank = first_rank + (counts - 1) / 2.0
  rank_sum = float(np.sum(avg_rank[inv][labels]))
  return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)
