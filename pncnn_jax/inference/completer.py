r"""One call from sparse depth in metres to dense depth and its uncertainty in metres.

  from pncnn_jax import Completer
  completer = Completer.from_pretrained()                    # the recommended shipped model
  completer = Completer.from_pretrained("synthetic:pncnn_masked")
  completer = Completer.from_checkpoint("runs/kitti_pncnn")  # a training workdir, step dir, converted model, .pth.tar
  out = completer(sparse_m)   # numpy (H, W) or (B, H, W) metres; 0, NaN or +-inf = no measurement
  out.depth, out.sigma, out.output_confidence, out.input_confidence, out.support, out.clamped, out.out_of_range
  out.valid   # support & ~clamped: where depth and sigma are numbers; NaN elsewhere (fill_unsupported=False)
  out.input_density, out.density_in_range   # the frame's input density, and whether the model was trained on it

What a call does, in order (each step is part of the contract):
  1. checks the input against the input contract (`pncnn_jax.data.input_contract.check_sparse_depth`, the one
     check of every entry; docs/deploy/index.md): (H, W) or (B, H, W) real numbers in metres; 0, NaN and +-inf
     mean no measurement; a negative depth, depths that are not metres (beyond 1000 m, or a median under 5 cm: a
     wrong unit) and a frame without any measurement are a ValueError naming the input and the frame of a batch.
  2. warns (`InputRangeWarning`, a UserWarning) when measurements lie beyond the depth range the model was trained
     on (`input_range_m`, from the dataset the checkpoint records, `TRAINED_INPUT_RANGE_M`): the networks do not
     extrapolate (a shipped model maps 150 m points to 33 m, and 10 km points, which step 1 refuses, to 2.7 mm).
     The prediction is still returned, with `out.out_of_range` marking those input pixels.
  2b. measures each frame's input density (`pncnn_jax.data.input_contract.input_density`: the share of pixels
     holding a measurement within the rows spanned by measurements) and warns (`InputDensityWarning`, one per
     frame) when it lies outside the range the model was trained on (`trained_density`, from a shipped model's
     manifest: a 64-beam LiDAR's for the shipped models; docs/deploy/sensors.md). The shipped models degrade badly
     on sparser input (docs/results/SENSORS.md: 1.6-2.7x the MAE at 32 beams). Checkpoints without such a record
     (official .pth.tar, training runs) have an unknown range: the density is given, nothing is checked.
  3. zero-pads each frame at the bottom and right to a multiple of `multiple` (8: three 2x2 poolings; at least 8),
     runs the model on every frame of the batch at once under `jax.jit` (one compilation per padded batch shape,
     shared by every Completer of the same model; on whatever device jax uses), and crops back to (H, W).
     Padded pixels have zero input confidence; NConv spreads confidence into them, so predictions within a few
     pixels of the bottom/right border differ slightly from a run at the image's own size (`multiple=1`).
  4. clamps the depth at 0 and records the clamped pixels in `out.clamped` (see "Negative depths" below); sigma is
     1 / sqrt(precision), finite: at most SIGMA_MAX_M where the precision underflowed to 0 (`sigma_of`).
  5. marks what is not a prediction: `out.support` (`support_mask`: a measurement within SUPPORT_RADIUS_PX pixels)
     and `out.valid` = support & ~clamped. By default (`fill_unsupported=False`) depth and sigma are NaN outside
     `valid`, REP 118's and numpy's "no value": a 0 there would read as a point at the camera, and the networks'
     extrapolation there (the rows above a LiDAR: sigma around 4 m) as a measurement. `fill_unsupported=True`
     keeps every pixel's value (depth clamped at 0), as before; `out.valid` still says which pixels to trust.

Negative depths. The networks' last NConv is a confidence-weighted average of non-negative inputs, but the
learned bias and the variance/refinement heads can push it slightly below 0 where the prediction has no support
(a shipped model writes -2.4 cm in the rows above a KITTI LiDAR). A depth is a distance along the optical axis,
never negative, so the Completer clamps at 0; `out.clamped` says which were clamped, and they are not `valid`
(NaN by default). The clamped pixels are (in every case we measured) also outside `out.support`.

An ensemble: several checkpoints separated by commas (members of one model trained with a probabilistic loss),
fused per pixel by `fusion` (`pncnn_jax.ensemble.fusion.fuse`: 'weighted_mean' by default, 'mean', 'max_confidence',
'mle'); sigma is then the fused sigma (the members' mixture, docs/SPEC.md §9), and the output and input confidences
are the members' means. The fused depth is clamped at 0 as a single model's is.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pncnn_jax import losses
from pncnn_jax.checkpoints import loader
from pncnn_jax.data import input_contract, synthetic
from pncnn_jax.ensemble import fusion
from pncnn_jax.ensemble import members as ensemble_members
from pncnn_jax.nn import models

MULTIPLE = 8  # three 2x2 poolings
RECOMMENDED = "synthetic:sparse_var_beta_detach_masked"  # docs/guide/pretrained.md: the pNCNN we recommend
SIGMA_MAX_M = float(1 / np.sqrt(np.float64(np.finfo(np.float32).tiny)))  # 9.2e18 m: the largest sigma (`sigma_of`)
LAYOUTS = (input_contract.HW, input_contract.BHW)  # the input shapes a Completer takes (each output has the input's)
SUPPORT_RADIUS_PX = 8  # `Completion.support`: a measurement within this many pixels (one 8x8 cell of the coarsest
#                        scale, the NConv UNet's deepest level)

# The largest input depth [m] each training dataset holds, by the dataset name a checkpoint records
# (`loader.Loaded.identity['dataset']`). The one place this range is defined: predict and the Completer read it.
TRAINED_INPUT_RANGE_M: dict[str, tuple[float, float]] = {
    # the simulated HDL-64E's maximum range (no return beyond it; pncnn_jax.data.synthetic.SyntheticConfig)
    "synthetic": (0.0, float(synthetic.SyntheticConfig.max_range_m)),
    # KITTI depth completion's velodyne_raw: an HDL-64E, whose datasheet range is 120 m
    "kitti_depth": (0.0, 120.0),
    # NYU-Depth-v2: a Kinect v1, whose depth maps stop at 10 m
    "nyu_depth": (0.0, 10.0),
}


class InputRangeWarning(UserWarning):
  """Input depths lie beyond the range the model was trained on (`Completer.input_range_m`)."""


class InputDensityWarning(UserWarning):
  """A frame's input density lies outside the range the model was trained on (`Completer.trained_density`)."""


DENSITY_PAGE = "docs/deploy/sensors.md"  # which model for which sensor: where the density warning points


def density_text(density: float) -> str:
  """An input density (a fraction) as percent for messages: one decimal, two under 1 % ('6.1', '0.15')."""
  pct = 100 * float(density)
  return f"{pct:.2f}" if pct < 1 else f"{pct:.1f}"


@dataclasses.dataclass(frozen=True)
class TrainedDensity:
  """The input density range a model was trained on: its manifest's 'input_density' record
  (pncnn_jax.experiments.input_density: the 1st-99th percentiles of its training stream's densities, in its train
  crop and in whole frames), in the measure of `pncnn_jax.data.input_contract.input_density`.

  Attributes:
    low, high: the range, fractions of the pixels (unitless, 0-1).
    trained_on: words for the sensor it was measured on ('synthetic 64-beam LiDAR').
  """

  low: float
  high: float
  trained_on: str

  @classmethod
  def from_record(cls, record: Any) -> "TrainedDensity | None":
    """The range of a manifest's record, or None (unknown) for none, or one in another measure than
    `input_contract.DENSITY_MEASURE` (not comparable), or one that is not a range of fractions."""
    if not isinstance(record, dict) or record.get("measure") != input_contract.DENSITY_MEASURE:
      return None
    try:
      low, high = float(record["low"]), float(record["high"])
    except (KeyError, TypeError, ValueError):
      return None
    if not (0.0 <= low <= high <= 1.0):
      return None
    return cls(low, high, str(record.get("trained_on") or record.get("sensors") or "its training data"))

  @classmethod
  def common(cls, ranges: Sequence["TrainedDensity | None"]) -> "TrainedDensity | None":
    """The range every member of an ensemble was trained on (their intersection); None when one is unknown or
    they share none."""
    if not ranges or any(r is None for r in ranges):
      return None
    low, high = max(r.low for r in ranges), min(r.high for r in ranges)
    names = {r.trained_on for r in ranges}
    return cls(low, high, names.pop() if len(names) == 1 else "its members' training data") if low <= high else None

  def contains(self, density):
    """Whether `density` (a fraction, or an array of them) lies in [low, high]."""
    return (np.asarray(density) >= self.low) & (np.asarray(density) <= self.high)

  def __str__(self) -> str:
    return f"{density_text(self.low)}-{density_text(self.high)} % ({self.trained_on})"

  def warning(self, density: float, name: str = "input") -> str:
    """The warning of a frame outside the range: '<name>: input density 1.2 % is below the 6.0-10.3 % this model
    was trained on (synthetic 64-beam LiDAR): expect larger errors; see docs/deploy/sensors.md'."""
    side = "below" if density < self.low else "above"
    return (f"{name}: input density {density_text(density)} % is {side} the {density_text(self.low)}-"
            f"{density_text(self.high)} % this model was trained on ({self.trained_on}): expect larger errors; see "
            f"{DENSITY_PAGE}")


def support_mask(sparse_bhw1: jax.Array) -> jax.Array:
  """The one definition of input support: True where a measurement (> 0) lies within SUPPORT_RADIUS_PX pixels,
  in Chebyshev distance (a (2r+1) x (2r+1) square; pixels beyond the image hold none).

  Args:
    sparse_bhw1: (B, H, W, 1) sparse depth [m]; 0, NaN and +-inf = no measurement (the input contract's).
  Returns:
    (B, H, W, 1) bool. Computed as two 1-D box sums of the 0/1 measurement map (exact in float32: at most 17 * 17)
    with `lax.conv_general_dilated`, so the same code runs in the Completer's program and in exported graphs
    (StableHLO; ONNX `Conv`, as the NConv layers there).
  """
  input_contract.check_layout(sparse_bhw1.shape, sparse_bhw1.dtype, name="support_mask",
                              layouts=(input_contract.BHW1,))
  r = SUPPORT_RADIUS_PX
  has = ((sparse_bhw1 > 0) & jnp.isfinite(sparse_bhw1)).astype(jnp.float32)
  dn = ("NHWC", "HWIO", "NHWC")
  rows = jax.lax.conv_general_dilated(has, jnp.ones((2 * r + 1, 1, 1, 1), jnp.float32), (1, 1), ((r, r), (0, 0)),
                                      dimension_numbers=dn)
  box = jax.lax.conv_general_dilated(rows, jnp.ones((1, 2 * r + 1, 1, 1), jnp.float32), (1, 1), ((0, 0), (r, r)),
                                     dimension_numbers=dn)
  return box > 0.5


def sigma_of(precision) -> np.ndarray:
  """sigma = 1 / sqrt(precision) [m] as float32, computed in float64, the precision [1/m^2] taken at least float32's
  smallest normal number, so sigma <= SIGMA_MAX_M (9.2e18 m) and stays finite.

  Where a network has no information its precision head can underflow to exactly 0 in float32 (softplus of a
  very negative number): the shipped `synthetic:pncnn` does at 200 of 960 pixels of a dense 24 x 40 frame at 30 m,
  inside the depth range it was trained on, and sigma was inf there. SIGMA_MAX_M says the same ("no information")
  as a number that squares, inverts and averages without inf (SIGMA_MAX_M^2 = 8.5e37 m^2 < float32's maximum).
  NaN stays NaN."""
  p = np.maximum(np.asarray(precision, np.float64), float(np.finfo(np.float32).tiny))
  return (1.0 / np.sqrt(p)).astype(np.float32)


def input_range_of(dataset: str | None) -> tuple[float, float] | None:
  """(smallest, largest) input depth [m] of the training data of `dataset` (a checkpoint's identity), or None
  when unknown (then nothing is checked)."""
  return TRAINED_INPUT_RANGE_M.get(dataset) if dataset else None


@dataclasses.dataclass(frozen=True)
class Completion:
  """What `Completer.__call__` returns; every array has the input's shape, (H, W) or (B, H, W), as numpy.

  Attributes:
    depth: float32, metres: the completed depth z (distance along the optical axis), >= 0 (clamped at 0) where
      `valid`, NaN elsewhere (no input support, or clamped) unless the Completer has `fill_unsupported`.
    sigma: float32, metres, or None: the predicted standard deviation of `depth`, sigma = 1 / sqrt(precision),
      where the precision 1/sigma^2 [1/m^2] is the network's output under the loss it was trained with
      (`pncnn_jax.losses.precision_of`; the Gaussian NLL's c = 1/sigma^2 for pNCNN). Given for models trained
      with a probabilistic loss (and for ensembles: the fused sigma); None for NCNN-style models (L1/L2 losses),
      which have no calibrated sigma: use `output_confidence` to rank their pixels. NaN where depth is; finite
      elsewhere, at most SIGMA_MAX_M (`sigma_of`: where the network's precision underflows to 0).
    output_confidence: float32, unitless, >= 0: the confidence of the network's last normalized convolution
      (the NConv UNet's output confidence, the variance head's input), a weighted average of the input
      confidences; higher = more input support. Not a probability and not calibrated; it ranks pixels.
    input_confidence: float32, unitless, >= 0: c0, the confidence the network gives each input pixel before the
      NConvs (learned by the input-confidence UNet, whose output is not bounded by 1; or 1 at measurements and
      0 elsewhere for models without one); relative to the frame's other values, low values flag measurements
      the model distrusts (e.g. LiDAR points seen through an object's edge).
    support: bool: True where an input measurement lies within `SUPPORT_RADIUS_PX` pixels (Chebyshev
      distance; `support_mask`). Outside it the network extrapolates (e.g. the rows above a LiDAR): depth and
      sigma are NaN there (with `fill_unsupported`: returned, but not to be trusted).
    clamped: bool: the pixels whose raw network depth was negative and was set to 0 (NaN unless
      `fill_unsupported`).
    out_of_range: bool: input measurements beyond the model's trained input range (`Completer.input_range_m`);
      all False when the range is unknown.
    input_density: the frame's input density (`pncnn_jax.data.input_contract.input_density`: the share of pixels
      holding a measurement within the rows spanned by measurements, a fraction): a float for an (H, W) input,
      (B,) float64 for a batch.
    density_in_range: whether it lies in the range the model was trained on (`Completer.trained_density`): a bool,
      (B,) bool for a batch; None when that range is unknown (official checkpoints, training runs).
  """

  depth: np.ndarray
  sigma: np.ndarray | None
  output_confidence: np.ndarray
  input_confidence: np.ndarray
  support: np.ndarray
  clamped: np.ndarray
  out_of_range: np.ndarray
  input_density: float | np.ndarray = 0.0
  density_in_range: bool | np.ndarray | None = None

  @property
  def valid(self) -> np.ndarray:
    """bool: `support & ~clamped`, the pixels whose depth and sigma are predictions (numbers by default; every
    other pixel is NaN unless `fill_unsupported`). What predict writes as <name>_valid.png, the bag command as
    <namespace>/valid and export as its `valid` output."""
    return self.support & ~self.clamped


@functools.lru_cache(maxsize=16)
def _forward(model: models.PNCNN, loss: str, rule: str | None, scales: tuple[float, ...] | None):
  """jit((variables, sparse (B, H, W, 1) [m]) -> {depth, confidence, output_confidence, input_confidence, support
  (`support_mask`)}, each (B, H, W, 1)). `rule` None: one model (confidence: the model's, precision or NConv
  confidence); otherwise an ensemble of stacked variables fused by `rule` (confidence: the fused precision
  [1/m^2]). Cached per setting, so Completers of one model share the compiled programs."""
  if rule is None:
    def fn(variables, sparse):
      out = model.apply(variables, sparse, train=False)
      return {"depth": out.depth, "confidence": out.confidence, "output_confidence": out.nconv_confidence,
              "input_confidence": out.input_confidence, "support": support_mask(sparse)}
    return jax.jit(fn)
  if loss not in losses.PROBABILISTIC_LOSSES:
    raise ValueError(f"an ensemble needs members with a predicted sigma (a probabilistic loss); these were trained "
                     f"with {loss!r}")

  def fused(variables, sparse):
    out = ensemble_members.apply_ensemble(model, variables, sparse)
    prec = losses.precision_of(out.confidence, loss)
    prec = prec if scales is None else fusion.scale_precision(prec, jnp.asarray(scales, prec.dtype))
    depth, fused_prec = fusion.fuse(out.depth, prec, rule)
    return {"depth": depth, "confidence": fused_prec, "output_confidence": out.nconv_confidence.mean(0),
            "input_confidence": out.input_confidence.mean(0), "support": support_mask(sparse)}
  return jax.jit(fused)


def padded_size(h: int, w: int, multiple: int = MULTIPLE) -> tuple[int, int]:
  """(H, W) rounded up to multiples of `multiple`, and to at least MULTIPLE (8) pixels (which the three 2x2 poolings
  need): the frame the network runs on (`pad_batch`, and the exported graphs)."""
  return max(h + (-h % multiple), MULTIPLE), max(w + (-w % multiple), MULTIPLE)


def pad_batch(sparse_bhw: np.ndarray, multiple: int = MULTIPLE) -> np.ndarray:
  """Zero-pads (B, H, W) at the bottom and right to `padded_size`."""
  _, h, w = sparse_bhw.shape
  hp, wp = padded_size(h, w, multiple)
  return np.pad(sparse_bhw, ((0, 0), (0, hp - h), (0, wp - w)))


class Completer:
  """A loaded model (or ensemble) that completes sparse depth maps: `completer(sparse_m) -> Completion`.

  Build one with `Completer.from_pretrained(name)` or `Completer.from_checkpoint(path)`; the constructor takes
  a model and its variables directly.

  Attributes:
    model: the Flax module; variables: its variables (leaves (K, ...) for an ensemble), on jax's default device.
    loss: the loss it was trained with (decides whether it has a sigma; None: unknown, no sigma).
    has_sigma: whether `Completion.sigma` is given (a probabilistic loss, or an ensemble).
    input_range_m: (smallest, largest) input depth [m] it was trained on, or None when unknown.
    trained_density: the input density range it was trained on (`TrainedDensity`), or None when unknown.
    multiple: the padding multiple. name: what it was loaded from (for messages).
    fill_unsupported: False (default): depth and sigma are NaN outside `Completion.valid`; True: every pixel keeps
      the network's value (depth clamped at 0), the dense output of predict's --fill_unsupported.
  """

  def __init__(self, model: models.PNCNN, variables: dict[str, Any], *, loss: str | None,
               input_range_m: tuple[float, float] | None = None, multiple: int = MULTIPLE,
               fusion_rule: str | None = None, precision_scales: Sequence[float] | None = None,
               name: str = "model", fill_unsupported: bool = False,
               trained_density: TrainedDensity | None = None):
    if int(multiple) != multiple or multiple < 1:
      raise ValueError(f"pad multiple must be an integer >= 1, got {multiple}")
    if fusion_rule is not None and fusion_rule not in fusion.FUSION_RULES:
      raise ValueError(f"fusion {fusion_rule!r} is not one of {', '.join(fusion.FUSION_RULES)}")
    self.model, self.loss, self.name = model, loss, name
    self.variables = jax.device_put(variables)
    self.input_range_m = input_range_m
    self.trained_density = trained_density
    self.multiple = int(multiple)
    self.fusion_rule = fusion_rule
    self.fill_unsupported = bool(fill_unsupported)
    scales = None if precision_scales is None else tuple(float(s) for s in precision_scales)
    self._fn = _forward(model, loss, fusion_rule, scales)
    self.has_sigma = fusion_rule is not None or (loss is not None and losses.precision_of(np.ones(1), loss) is not None)

  # ------------------------------------------------------------------------------------------------ loading

  @classmethod
  def from_pretrained(cls, name: str = RECOMMENDED, **kw) -> "Completer":
    """A shipped model by name, 'synthetic:<name>' (default: the recommended pNCNN, `RECOMMENDED`), or several
    separated by commas (an ensemble, e.g. 'synthetic:pncnn_masked,synthetic:pncnn_masked_seed1'). `kw` as
    `from_checkpoint`."""
    return cls.from_checkpoint(name, **kw)

  @classmethod
  def from_checkpoint(cls, checkpoint: str | os.PathLike | Sequence[str], *, variant: str | None = None,
                      allow_mismatch: bool = False, step: int | str = "best", multiple: int = MULTIPLE,
                      fusion: str | None = None, precision_scales: Sequence[float] | None = None,
                      allow_fallback: bool = False, fill_unsupported: bool = False) -> "Completer":
    """Any checkpoint `pncnn_jax.load` takes: a training workdir (its best step), a step directory, a converted
    model directory, an official `.pth.tar`/`.npz` or a shipped name; several (a list, or one string separated
    by commas) are an ensemble fused by `fusion` (default 'weighted_mean') after multiplying member k's precision
    by `precision_scales[k]`. `allow_fallback`: a step that cannot be restored (a truncated or garbled file) falls
    back to the newest intact step of its run, with a warning (`pncnn_jax.load`); without it, that is an error
    naming both steps. `fill_unsupported`: as the constructor's (the class doc).

    Raises FileNotFoundError / ValueError (one line naming the checkpoint) for a missing or wrong checkpoint, an
    ensemble of different models or of members without a sigma, or settings out of range.
    """
    names = ([os.fspath(c).strip() for c in checkpoint] if isinstance(checkpoint, (list, tuple))
             else [n.strip() for n in os.fspath(checkpoint).split(",")])
    if not names or not all(names):
      raise ValueError(f"checkpoint {checkpoint!r}: an empty name")
    if len(names) == 1 and (fusion is not None or precision_scales is not None):
      raise ValueError("fusion and precision_scales need an ensemble: several checkpoints separated by commas")
    if precision_scales is not None:
      if len(precision_scales) != len(names):
        raise ValueError(f"precision_scales has {len(precision_scales)} values for {len(names)} checkpoints")
      if not all(np.isfinite(v) and v > 0 for v in precision_scales):
        raise ValueError(f"precision_scales {','.join(map(str, precision_scales))}: every scale must be a finite "
                         "number > 0")
    members = [loader.load(n, variant=variant, step=step, against="--variant", allow_mismatch=allow_mismatch,
                           allow_fallback=allow_fallback) for n in names]
    first = members[0]
    for n, m in zip(names[1:], members[1:]):
      if (m.variant, m.loss, m.model_settings) != (first.variant, first.loss, first.model_settings):
        raise ValueError(f"--checkpoint: the members of an ensemble must be one model; {names[0]} is {first.variant} "
                         f"(loss {first.loss}, {first.model_settings}), {n} is {m.variant} (loss {m.loss}, "
                         f"{m.model_settings})")
    ranges = {input_range_of(m.identity.get("dataset")) for m in members}
    input_range = ranges.pop() if len(ranges) == 1 else None
    density = TrainedDensity.common([TrainedDensity.from_record(m.meta.get("input_density")) for m in members])
    if len(names) == 1:
      title = names[0] if first.variant in names[0] else f"{first.variant} ({names[0]})"
      return cls(first.build_model(), first.variables, loss=first.loss, input_range_m=input_range,
                 multiple=multiple, name=title, fill_unsupported=fill_unsupported, trained_density=density)
    rule = fusion or "weighted_mean"
    return cls(first.build_model(), ensemble_members.stack_trees([m.variables for m in members]), loss=first.loss,
               input_range_m=input_range, multiple=multiple, fusion_rule=rule, precision_scales=precision_scales,
               name=f"ensemble of {len(names)} {first.variant} fused by {rule}", fill_unsupported=fill_unsupported,
               trained_density=density)

  # ------------------------------------------------------------------------------------------------ running

  def check_input(self, sparse_m, *, name: str = "input") -> np.ndarray:
    """The input as float32 (B, H, W) metres, 0 = no measurement, after the checks of step 1 (module doc):
    `pncnn_jax.data.input_contract.check_sparse_depth` with the layouts (H, W) and (B, H, W).

    Raises ValueError naming `name` (and the frame of a batch) for a wrong shape or dtype, an empty map, negative
    depths, depths that are not metres or a frame without any measurement.
    """
    return input_contract.check_sparse_depth(sparse_m, name=name, layouts=LAYOUTS)

  def out_of_range(self, sparse_bhw: np.ndarray) -> np.ndarray:
    """The measurements of a checked (B, H, W) input outside `input_range_m` (bool; all False when unknown)."""
    if self.input_range_m is None:
      return np.zeros(sparse_bhw.shape, bool)
    lo, hi = self.input_range_m
    return (sparse_bhw > 0) & ((sparse_bhw < lo) | (sparse_bhw > hi))

  def density(self, sparse_bhw: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(input density (B,), whether each lies in `trained_density` (B,) bool, or None when that is unknown) of a
    checked (B, H, W) input (step 2b)."""
    d = input_contract.input_density(sparse_bhw, name="input", layouts=(input_contract.BHW,))
    return d, None if self.trained_density is None else self.trained_density.contains(d)

  def forward(self, sparse_bhw: np.ndarray) -> dict[str, np.ndarray]:
    """The raw network fields of a checked (B, H, W) input [m]: {depth [m] (not clamped), confidence (the model's:
    precision [1/m^2], or the NConv confidence for L1/L2 models; an ensemble's fused precision),
    output_confidence, input_confidence, support (bool, `support_mask`)}, each (B, H, W) numpy, padded and cropped
    back (step 3)."""
    _, h, w = sparse_bhw.shape
    padded = pad_batch(np.asarray(sparse_bhw, np.float32), self.multiple)
    out = self._fn(self.variables, jnp.asarray(padded)[..., None])
    return {k: np.asarray(v)[:, :h, :w, 0] for k, v in out.items()}

  def __call__(self, sparse_m, *, name: str = "input") -> Completion:
    """Completes sparse depth: `sparse_m` (H, W) or (B, H, W) metres, 0, NaN or +-inf = no measurement, any H and W.

    Returns a `Completion` whose arrays have the input's shape (see its docstring for each field's meaning and
    unit). Raises ValueError naming `name` for an input the input contract refuses (step 1); warns
    `InputRangeWarning` when measurements lie outside `input_range_m` and `InputDensityWarning` for each frame
    whose input density lies outside `trained_density` (module doc).
    """
    single = np.ndim(sparse_m) == 2
    sparse = self.check_input(sparse_m, name=name)
    far = self.out_of_range(sparse)
    if far.any():
      lo, hi = self.input_range_m
      v = sparse[far]
      warnings.warn(f"{name}: {int(far.sum())} measurement(s) outside the {lo:g}-{hi:g} m this model was trained on "
                    f"({v.min():.4g}-{v.max():.4g} m); its depth and sigma near them are extrapolations",
                    InputRangeWarning, stacklevel=2)
    density, inside = self.density(sparse)
    if inside is not None:
      for i in np.flatnonzero(~inside):
        warnings.warn(self.trained_density.warning(float(density[i]), name if single else f"{name} frame {i}"),
                      InputDensityWarning, stacklevel=2)
    raw = self.forward(sparse)
    depth = raw["depth"]
    clamped = depth < 0
    prec = (raw["confidence"] if self.fusion_rule is not None
            else losses.precision_of(raw["confidence"], self.loss) if self.has_sigma else None)
    sigma = None if prec is None else sigma_of(prec)
    support = raw["support"]
    depth = np.where(clamped, np.float32(0), depth).astype(np.float32)
    if not self.fill_unsupported:  # step 5: NaN where the depth is not a prediction
      valid = support & ~clamped
      depth = np.where(valid, depth, np.float32(np.nan))
      sigma = None if sigma is None else np.where(valid, sigma, np.float32(np.nan))
    fields = {"depth": depth, "sigma": sigma,
              "output_confidence": raw["output_confidence"].astype(np.float32),
              "input_confidence": raw["input_confidence"].astype(np.float32), "support": support,
              "clamped": clamped, "out_of_range": far, "input_density": density, "density_in_range": inside}
    if single:
      fields = {k: None if v is None else v[0] for k, v in fields.items()}
      fields["input_density"] = float(fields["input_density"])
      fields["density_in_range"] = None if inside is None else bool(fields["density_in_range"])
    return Completion(**fields)

  def __repr__(self) -> str:
    return (f"Completer({self.name}, loss={self.loss}, sigma={'yes' if self.has_sigma else 'no'}, "
            f"input_range_m={self.input_range_m}, trained_density={self.trained_density}, multiple={self.multiple}, "
            f"fill_unsupported={self.fill_unsupported})")
