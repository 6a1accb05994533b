r"""The input contract: what every entry that takes sparse depth accepts, checked in one place (numpy only).

The entries are `pncnn_jax.Completer` and `pncnn_jax.predict_array` (the Python API), `python -m pncnn_jax.predict`
(depth files, and point clouds with --points), the ROS 2 bag command (`pncnn_jax.inference.rosbag`) and export's
serving function (`pncnn_jax.inference.export.serving_fn`). Each checks its input with the functions below, so a
wrong input is refused with the same one-line `ValueError` everywhere, naming the file, frame or argument (`name`);
the entry adds how to fix it in its own terms (`hint`: a flag, a unit, a ROS convention). The user's page is
docs/deploy/index.md, "The input contract".

  layout     the shapes an entry takes (`LAYOUTS`: (H, W), (H, W, 1), (B, H, W), (B, H, W, 1), ...) of real numbers
             (floats of any width or integers; not bool, complex or objects), at least one pixel.
  unit       metres: the depth z along the optical axis.
  no value   0, NaN, +inf and -inf all mean "no measurement" and become 0, silently. numpy writes missing values as
             NaN, and REP 118's float depth images use all three (NaN: invalid, -inf: too near, +inf: too far or
             no return).
  sign       a negative depth is an error: a depth is a distance.
  units      per frame, the measurements (the finite values > 0) must look like metres: none beyond
             MAX_PLAUSIBLE_M (1000 m, which no range sensor reaches: millimetres, or a broken value) and a median
             of at least MIN_PLAUSIBLE_MEDIAN_M (5 cm: kilometres, or a scale applied twice). The message says what
             the numbers look like when another unit explains them ("looks like millimetres (x 0.001: ...)").
  content    a frame without any measurement is an error (a network given nothing returns a constant), except
             where an entry says what it writes for one (the bag command: NaN, `allow_empty`).
Point clouds: the same units check on the ranges |p| of their points (`check_point_ranges`; non-finite points and
points at the origin, which drivers write for "no return", are no measurement). A depth image and the camera info
published with it have one size (`check_same_size`, the bag command).

Why the units check is also a safety check: the networks are finite on finite inputs of plausible depth (a property
test over extreme inputs, tests/inference/test_completer.py), but not beyond: the recommended model's depth is inf
for inputs of 1e20 m and NaN near float32's maximum. Such inputs are refused here, before they reach a network.
The check is done in float64 on the values as given, so float64 inputs beyond float32's range are refused rather
than rounded to inf (no measurement).

Input density (`input_density`, the one measure every entry reports per frame): how much of the frame a sensor
covers, independent of how many rows above (or below) the sensor's field the image has. See its docstring for the
equation; a model's manifest records the range of it that the model was trained on (docs/deploy/sensors.md).

The exported graphs (StableHLO, ONNX) cannot refuse an input: they read NaN and +-inf as no measurement too
(`pncnn_jax.nn.models.PNCNN`, `pncnn_jax.inference.completer.support_mask`), and a deployment feeding them checks
units and signs itself (export.json states the contract).
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np

MAX_PLAUSIBLE_M = 1000.0  # no range sensor measures this far: a larger depth is a wrong unit or a broken value
MIN_PLAUSIBLE_MEDIAN_M = 0.05  # a median under 5 cm: a wrong unit (kilometres) or a scale applied twice

Layout = tuple[Union[int, str], ...]  # dimension names ('B', 'H', 'W') and sizes that must be exact (1)
HW: Layout = ("H", "W")
HW1: Layout = ("H", "W", 1)
BHW: Layout = ("B", "H", "W")
BHW1: Layout = ("B", "H", "W", 1)
ONE_HW: Layout = (1, "H", "W")
ONE_HW1: Layout = (1, "H", "W", 1)
LAYOUTS = (HW, HW1, BHW, BHW1, ONE_HW, ONE_HW1)

# The hints of the entries (what to do, in their terms), appended to a units error.
METRES_HINT = "pass depth in metres"
POINTS_HINT = "point coordinates must be in metres"


def layout_text(layout: Layout) -> str:
  return "(" + ", ".join(map(str, layout)) + ")"


def _real(dtype: np.dtype) -> bool:
  """Floats of any width (ml_dtypes' bfloat16 and float8 included) and integers; not bool, complex or objects."""
  return dtype.kind in "fiu" or (dtype.kind == "V" and dtype.name.startswith(("float", "bfloat")))


def check_layout(shape: Sequence, dtype, *, name: str, layouts: Sequence[Layout]) -> Layout:
  """The first of `layouts` that an array of `shape` and `dtype` fits (the layout check of every entry).

  Works on traced shapes too (a symbolic batch is only compared where a layout names an exact size).
  Raises ValueError, one line naming `name`: "<name>: expected depth (H, W) or (B, H, W) in metres as real numbers,
  got shape (...) of <dtype>".
  """
  dtype = np.dtype(dtype)
  shape = tuple(shape)
  if _real(dtype):
    for layout in layouts:
      if len(shape) == len(layout) and all(d == e for d, e in zip(shape, layout) if isinstance(e, int)):
        return layout
  raise ValueError(f"{name}: expected depth {' or '.join(map(layout_text, layouts))} in metres as real numbers, got "
                   f"shape {shape} of {dtype}")


def as_frames(depth, *, name: str, layouts: Sequence[Layout]) -> tuple[np.ndarray, bool]:
  """(the input as (B, H, W) numpy, of its own dtype; whether its layout has a batch axis 'B'), after
  `check_layout` and a check that it holds at least one pixel. Layouts without 'B' give B = 1."""
  a = np.asarray(depth)
  layout = check_layout(a.shape, a.dtype, name=name, layouts=layouts)
  if a.size == 0:
    raise ValueError(f"{name}: empty depth map, shape {a.shape}")
  h, w = a.shape[layout.index("H")], a.shape[layout.index("W")]
  return a.reshape(-1, h, w), "B" in layout


def _frames_name(name: str, frames: Sequence[int], batched: bool) -> str:
  if not batched:
    return name
  return f"{name} frame {frames[0]}" if len(frames) == 1 else f"{name} frames {list(frames[:5])}"


def check_not_negative(depth: np.ndarray, *, name: str) -> None:
  """Raises ValueError naming `name` if `depth` holds a negative value (NaN is not negative)."""
  neg = depth < 0
  if neg.any():
    raise ValueError(f"{name}: {int(neg.sum())} negative depths (min {np.min(depth[neg]):.4g} m); use 0 for no "
                     "measurement")


def _unit_guess(values: np.ndarray, factor: float, unit: str) -> str:
  scaled = values * factor
  if scaled.max() <= MAX_PLAUSIBLE_M and np.median(scaled) >= MIN_PLAUSIBLE_MEDIAN_M:
    return (f"looks like {unit} (x {factor:g}: {scaled.min():.3g}-{scaled.max():.3g} m, median "
            f"{np.median(scaled):.3g} m)")
  return "not metres"


def check_plausible(values: np.ndarray, *, name: str, hint: str, what: str = "depth") -> None:
  """The units check of one frame: `values` are its measurements (finite, > 0) [m], checked in float64.

  Raises ValueError, one line naming `name`, when one lies beyond MAX_PLAUSIBLE_M or their median is under
  MIN_PLAUSIBLE_MEDIAN_M; the line says what the numbers look like (millimetres: x 0.001, kilometres: x 1000, when
  that makes them plausible) and ends with the entry's `hint`. `what`: 'depth', or 'range' for point clouds.
  """
  v = np.asarray(values, np.float64).ravel()
  if not v.size:
    return
  top, median = float(v.max()), float(np.median(v))
  if top > MAX_PLAUSIBLE_M:
    raise ValueError(f"{name}: {what}s up to {top:.4g} m (median {median:.4g} m), beyond the {MAX_PLAUSIBLE_M:g} m no "
                     f"range sensor reaches: {_unit_guess(v, 1e-3, 'millimetres')}; {hint}")
  if median < MIN_PLAUSIBLE_MEDIAN_M:
    raise ValueError(f"{name}: median {what} {median:.3g} m (up to {top:.3g} m), under "
                     f"{100 * MIN_PLAUSIBLE_MEDIAN_M:g} cm: {_unit_guess(v, 1e3, 'kilometres')}; {hint}")


def check_sparse_depth(depth, *, name: str = "input", layouts: Sequence[Layout] = (HW, BHW),
                       hint: str = METRES_HINT, allow_empty: bool = False) -> np.ndarray:
  """Checks sparse depth against the contract (module doc) and returns it as (B, H, W) float32 metres, 0 = none.

  Args:
    depth: array-like in one of `layouts` (the entry's), metres; 0, NaN and +-inf = no measurement.
    name: what the messages name (a file, a bag message, an argument); frames of a batch are named '<name> frame i'.
    layouts: the shapes the entry takes (`LAYOUTS`).
    hint: how to fix a units error in the entry's terms (a flag, a format).
    allow_empty: a frame without any measurement passes (all 0) instead of being an error.

  Returns:
    (B, H, W) float32 [m], non-finite values set to 0 (B = 1 for layouts without a batch axis).

  Raises:
    ValueError: one line naming `name` (and the frame of a batch) for a wrong layout or dtype, an empty array,
      negative depths, depths that are not metres (`check_plausible`) or a frame without any measurement (unless
      allow_empty).
  """
  frames, batched = as_frames(depth, name=name, layouts=layouts)
  a = frames.astype(np.float64)  # exact for every float and integer input; the checks see the values as given
  a[~np.isfinite(a)] = 0.0  # NaN, +-inf: no measurement
  negative = [i for i in range(a.shape[0]) if (a[i] < 0).any()]
  if negative:
    check_not_negative(a[negative], name=_frames_name(name, negative, batched))
  empty = []
  for i in range(a.shape[0]):
    measured = a[i][a[i] > 0]
    if not measured.size:
      empty.append(i)
    check_plausible(measured, name=_frames_name(name, [i], batched), hint=hint)
  if empty and not allow_empty:
    raise ValueError(f"{_frames_name(name, empty, batched)}: no measurement (every pixel is 0 or NaN); nothing to "
                     "complete")
  return a.astype(np.float32)


def check_point_ranges(points, *, name: str, hint: str = POINTS_HINT) -> None:
  """The units check (`check_plausible`) on the ranges |p| [m] of a point cloud's (N, >= 3) points x, y, z.

  Points with a non-finite coordinate and points at the origin (0, 0, 0) are no measurement (drivers write both
  for "no return"). Raises ValueError, one line naming `name`, e.g. for a scan in millimetres.
  """
  p = np.asarray(points)
  if p.ndim != 2 or p.shape[1] < 3 or not _real(p.dtype):
    raise ValueError(f"{name}: expected (N, 3) or (N, 4) points x, y, z[, ...] in metres as real numbers, got shape "
                     f"{p.shape} of {p.dtype}")
  xyz = p[:, :3].astype(np.float64)
  xyz = xyz[np.all(np.isfinite(xyz), axis=1)]
  ranges = np.hypot(np.hypot(xyz[:, 0], xyz[:, 1]), xyz[:, 2])  # no overflow to inf for finite points
  check_plausible(ranges[ranges > 0], name=name, hint=hint, what="range")


def check_same_size(size: Sequence[int], expected: Sequence[int], *, name: str, source: str) -> None:
  """Raises ValueError naming `name` unless a depth image of (H, W) `size` has the (H, W) of its camera, `source`
  (e.g. the camera info published with it: depth and camera must describe one image)."""
  (h, w), (eh, ew) = (int(s) for s in size), (int(s) for s in expected)
  if (h, w) != (eh, ew):
    raise ValueError(f"{name}: {h}x{w} pixels (HxW), but {source} is {eh}x{ew}; a depth image and its camera must "
                     "have one size")


DENSITY_MEASURE = "rows_spanned"  # the name of `input_density`'s measure, as models' manifests record it


def input_density(depth, *, name: str = "input", layouts: Sequence[Layout] = (HW, BHW)) -> np.ndarray:
  r"""The input density of each frame: the share of pixels holding a measurement within the rows spanned by
  measurements (DENSITY_MEASURE 'rows_spanned'),

      density = N / ((r_last - r_first + 1) W)

  where N is the number of measurements (finite values > 0; 0, NaN and +-inf are none, as in
  `check_sparse_depth`), r_first and r_last the first and last row holding one, and W the frame's width. A frame
  without any measurement has density 0. Rows outside [r_first, r_last] (the sky above a LiDAR, the car's bonnet
  below it) do not count, so cropping empty rows off a frame, or padding it with them, leaves its density as it
  is; removing measurements lowers it (unless the first or last row loses all of its own, which shrinks the span:
  thinning every k-th laser keeps the top one). Unitless, in [0, 1]; a 64-beam LiDAR in a KITTI camera frame is
  about 0.06, a visual-odometry front end 0.0005-0.005. It describes a window of several of a LiDAR's lines: a
  crop that holds only one or two has just their own rows as its span, and measures the lines' density.

  Args:
    depth: sparse depth in one of `layouts` (metres; only where it is > 0 and finite matters).
    name, layouts: as `check_layout`'s.
  Returns:
    (B,) float64 densities (B = 1 for layouts without a batch axis).
  """
  frames, _ = as_frames(depth, name=name, layouts=layouts)
  a = frames.astype(np.float64)
  has = np.isfinite(a) & (a > 0)
  rows = has.any(axis=2)  # (B, H)
  out = np.zeros(has.shape[0], np.float64)
  for i in np.flatnonzero(rows.any(axis=1)):
    first, last = np.flatnonzero(rows[i])[[0, -1]]
    out[i] = has[i].sum() / ((last - first + 1) * has.shape[2])
  return out

