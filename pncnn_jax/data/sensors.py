r"""Depth sensors as data: spinning-LiDAR presets, thinning of recorded scans, dropout, visual-odometry points, range
noise and outliers, and named mixtures that draw one sensor per sample (numpy only).

Presets (`LIDARS`, `Lidar`): the lasers' elevations (top first), the azimuth step at 10 Hz and the mount height of
five spinning LiDARs. The synthetic generator (`pncnn_jax.data.synthetic`, `SyntheticConfig.lidar`) casts each
preset's own rays into the same scene, seen by the same camera, with the same semi-dense ground truth; `hdl64` is the
generator as it was (bit-identical). The numbers, checked against the datasheets and manuals:

  preset   beams  vertical field [deg]                    azimuth step [deg]     mount [m]
  hdl64    64     +2.4 .. -24.0 (32 at ~1/3, 32 at ~1/2)  0.175                  1.73
  hdl32    32     +10.67 .. -30.67 (1.33 steps)           0.16                   1.84
  vlp16    16     +15 .. -15 (2 deg steps)                0.2                    1.73
  os1_32   32     +22.5 .. -22.5 (uniform)                0.3516 (1024 columns)  1.73
  os1_128  128    +22.5 .. -22.5 (uniform)                0.1758 (2048 columns)  1.73

  hdl64: Velodyne HDL-64E datasheet: +2 .. -24.9 deg, 0.08 deg at 5 Hz .. 0.35 deg at 20 Hz (~0.17 at 10 Hz). The
    elevations and 0.175 deg follow the real KITTI scan in ../shared/data (the generator's module doc). Mount:
    KITTI's roof, 1.73 m (the generator keeps KITTI's calibrated LiDAR-to-camera transform, 1.726 m above its road).
  hdl32: Velodyne HDL-32E user's manual (63-9113): 41.3 deg vertical field, the firing table's -30.67 .. +10.67 deg
    in 1.33 deg steps; 0.16 deg at 10 Hz. Mount: nuScenes' LIDAR_TOP (an HDL-32E), 1.84 m above the ground.
  vlp16: Velodyne VLP-16 user manual (63-9243): lasers at -15 .. +15 deg in 2 deg steps; 16 firings every
    55.296 us, 0.2 deg at 600 rpm. Mount: KITTI's roof.
  os1_32, os1_128: Ouster OS1 datasheet: 45 deg vertical field (+-22.5), uniform beam spacing, 512 / 1024 / 2048
    columns at 10 Hz (OS1-32 at 1024, OS1-128 at 2048). Mount: KITTI's roof.

The presets differ in their optics and mount only: range noise, dropouts and maximum range are the generator's
(`SyntheticConfig`). A mount height other than hdl64's raises (or lowers) the LiDAR by the difference.

Recorded data (`laser_ids`, `thin_points`, `depth_laser_ids`, `thin_depth`): a scan is thinned to every k-th laser,
counted from the top, so that a 64-beam recording becomes a 32- or 16-beam one with the same vertical field. The laser
of a point is recovered

  * from the scan order, for point clouds stored one laser's revolution after another (KITTI's `.bin`): the row of a
    point is floor((u - s) / 360 deg), u its unwrapped azimuth along the file and s the azimuth at which rows start
    (KITTI: 0, the camera's forward direction; estimated by default), rows ranked by elevation;
  * from the elevation angle, for any point cloud and for projected depth maps (pitch binning): a pixel is
    back-projected with the intrinsics K and its depth z, p_cam = z K^-1 (u, v, 1), moved into the LiDAR frame
    (T_cam_from_lidar), and its elevation el = atan2(z_l, sqrt(x_l^2 + y_l^2)) and horizontal range rho computed.
    Each laser of a real LiDAR is a line el = a + b / rho: a is its elevation, b its vertical offset from the
    sensor's origin (an HDL-64E's upper block sits ~0.21 m above it, the lower ~0.12 m: b ~ 12 and 7 deg m on the
    KITTI scan). The lines are found as peaks of the histogram of el - b0 / rho (b0 the slope that makes it
    sharpest), refined by k-lines (assign each point to its nearest line, refit each line by least squares, until
    nothing moves), and ranked by a, top first.

On the real KITTI scan (kitti_raw_mini frame 5, 121,948 points) both give the 64 lasers and agree on every point
but 2 (tests/data/test_sensors_thinning.py; docs/deploy/sensors.md has the numbers).

Transforms (pure functions of an rng): `dropout` keeps each point with probability `keep` in (0, 1]; `vo_points`
draws visual-odometry-like points at a density (fraction of the pixels, 0.05-0.5 % for VO / SLAM features) uniformly
from a visible surface (the dense or semi-dense depth); `add_outliers` moves a fraction of the points to the depth of
another point of the frame (a return from another surface, as the LiDAR/camera bleed-through points the benchmark
labels `disturbed`); `add_noise` adds Gaussian depth noise.

Sensors and mixtures (`SENSORS`, `MIXTURES`, `draw`): a `Sensor` names where the sparse input comes from ('native':
the dataset's own, 'lidar': a preset rendered by the synthetic generator, 'vo': visual-odometry points) and the
ranges its transforms are drawn from; a mixture weighs named sensors. `draw(name, rng)` picks one sensor per sample
and draws its values (`Draw`); the pipeline (`pncnn_jax.data.pipeline`, `DataConfig.sensors`) applies it per dataset.

Errors are one line naming the argument and its valid values.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from pncnn_jax.data import sparsify
from pncnn_jax.runtime.registry import Registry, load_extensions

# ----------------------------------------------------------------------------------------------------- presets


@dataclasses.dataclass(frozen=True)
class Lidar:
  """A spinning LiDAR (the module doc's table).

  Attributes:
    elevations_deg: the lasers' elevation angles, degrees above the horizontal, top laser first.
    azimuth_step_deg: the azimuth between two firings of a laser at 10 Hz, degrees.
    mount_height_m: height of the optical centre above the road, metres.
    source: where the numbers come from.
  """

  elevations_deg: tuple[float, ...]
  azimuth_step_deg: float
  mount_height_m: float
  source: str

  @property
  def beams(self) -> int:
    return len(self.elevations_deg)

  @property
  def field_deg(self) -> tuple[float, float]:
    """(top, bottom) elevation of the vertical field, degrees."""
    return max(self.elevations_deg), min(self.elevations_deg)


LIDARS: Registry[Lidar] = Registry("LiDAR preset")


def register_lidar(name: str, lidar: Lidar) -> None:
  """Adds a LiDAR preset that `SyntheticConfig.lidar` and the sensors' `lidars` may name."""
  el = np.asarray(lidar.elevations_deg, np.float64)
  if el.ndim != 1 or el.size < 1 or not np.all(np.diff(el) < 0):
    raise ValueError(f"LiDAR preset {name!r}: elevations_deg must be decreasing (top laser first)")
  if not lidar.azimuth_step_deg > 0 or not lidar.mount_height_m > 0:
    raise ValueError(f"LiDAR preset {name!r}: azimuth_step_deg and mount_height_m must be positive")
  LIDARS.register(name, lidar)


# HDL-64E elevations (degrees): upper block 32 lasers at ~1/3 deg, lower block 32 at ~1/2 deg. The datasheet says
# +2 to -24.8 deg; the peaks of the elevation histogram of the real KITTI scan (kitti_raw_mini, frame 5) run from
# +2.4 to -23.7 deg, which these values follow (the synthetic generator's since its first version).
HDL64_ELEVATIONS_DEG = np.concatenate([np.linspace(2.4, -8.1, 32), np.linspace(-8.6, -24.0, 32)])
KITTI_MOUNT_HEIGHT_M = 1.73  # KITTI's Velodyne above the road (Geiger et al., IJRR 2013, the sensor setup)

register_lidar("hdl64", Lidar(tuple(HDL64_ELEVATIONS_DEG.tolist()), 0.175, KITTI_MOUNT_HEIGHT_M,
                              "Velodyne HDL-64E datasheet; elevations and azimuth step from the real KITTI scan"))
register_lidar("hdl32", Lidar(tuple(np.linspace(10.67, -30.67, 32).tolist()), 0.16, 1.84,
                              "Velodyne HDL-32E user's manual 63-9113 (firing table); mount of nuScenes' LIDAR_TOP"))
register_lidar("vlp16", Lidar(tuple(np.linspace(15.0, -15.0, 16).tolist()), 0.2, KITTI_MOUNT_HEIGHT_M,
                              "Velodyne VLP-16 user manual 63-9243 (-15 .. +15 deg, 0.2 deg at 600 rpm)"))
register_lidar("os1_32", Lidar(tuple(np.linspace(22.5, -22.5, 32).tolist()), 360.0 / 1024, KITTI_MOUNT_HEIGHT_M,
                               "Ouster OS1 datasheet (45 deg uniform vertical field; 1024 columns at 10 Hz)"))
register_lidar("os1_128", Lidar(tuple(np.linspace(22.5, -22.5, 128).tolist()), 360.0 / 2048, KITTI_MOUNT_HEIGHT_M,
                                "Ouster OS1 datasheet (45 deg uniform vertical field; 2048 columns at 10 Hz)"))


def lidar(name: str) -> Lidar:
  """The preset `name`, or a one-line ValueError naming the valid presets."""
  return LIDARS.lookup(name)


# ------------------------------------------------------------------------------------- lasers of recorded scans

MIN_ELEVATION_SPREAD_DEG = 0.1  # a scan whose elevations span less (1st to 99th percentile) has no lasers to tell apart
_HIST_BIN_DEG = 0.02  # elevation histogram of the pitch binning
_HIST_SIGMA_DEG = 0.08  # its Gaussian smoothing: merges the +-0.15 deg smear of KITTI's velodyne_raw rings, keeps
#                         the HDL-64E's closest lasers (0.22 deg) apart
_SLOPES = np.arange(-16.0, 16.01, 0.5)  # candidate vertical offsets b0 [deg m] (HDL-64E: ~7 and ~12)
_MERGE_DEG = 0.05  # two lines closer than this at the median range are one laser (real lasers are >= 0.2 deg apart)
_PRIOR_VAR = 1e-4  # the ridge prior of a line's slope counts as points whose 1/rho spreads by 0.01 1/m
_PRIOR_BAND_DEG = 3.0  # ... taken from the lines within this elevation
_MIN_LINE_SHARE = 0.02  # a line with fewer points than this share of the median line's, or than 8, is noise


def _check_every(every) -> int:
  if not isinstance(every, (int, np.integer)) or isinstance(every, bool) or every < 1:
    raise ValueError(f"every must be a positive integer (keep every k-th laser, counted from the top), got {every!r}")
  return int(every)


def _points_xyz(points, what: str) -> np.ndarray:
  pts = np.asarray(points)
  if pts.ndim != 2 or pts.shape[1] not in (3, 4) or not np.issubdtype(pts.dtype, np.number):
    raise ValueError(f"{what}: expected an (N, 3) or (N, 4) array of x, y, z[, reflectance] in metres (LiDAR frame, "
                     f"z up), got {pts.dtype} {pts.shape}")
  xyz = pts[:, :3].astype(np.float64)
  if len(xyz) < 2 or not np.all(np.isfinite(xyz)):
    raise ValueError(f"{what}: needs at least 2 points with finite coordinates, got {len(xyz)} points"
                     f"{'' if np.all(np.isfinite(xyz)) else ' with non-finite ones'}")
  return xyz


def _elevation(xyz: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
  """Elevation [deg] and horizontal range [m] of LiDAR-frame points (z up); a one-line error without spread."""
  rho = np.hypot(xyz[:, 0], xyz[:, 1])
  el = np.degrees(np.arctan2(xyz[:, 2], rho))
  lo, hi = np.percentile(el, [1, 99])
  if hi - lo < MIN_ELEVATION_SPREAD_DEG:
    raise ValueError(f"{what}: no elevation spread (the points' elevation angles span {hi - lo:.3f} deg, under "
                     f"{MIN_ELEVATION_SPREAD_DEG} deg): a single laser or a planar scan has no lasers to thin; "
                     f"expected a multi-beam LiDAR scan in its own frame (z up)")
  return el, np.maximum(rho, 1e-3)


def _smoothed_histogram(e: np.ndarray) -> tuple[np.ndarray, float]:
  lo = float(e.min()) - 4 * _HIST_SIGMA_DEG
  n = int((float(e.max()) - lo) / _HIST_BIN_DEG) + int(8 * _HIST_SIGMA_DEG / _HIST_BIN_DEG) + 2
  h = np.bincount(((e - lo) / _HIST_BIN_DEG).astype(np.int64), minlength=n).astype(np.float64)
  k = np.arange(-4 * _HIST_SIGMA_DEG, 4 * _HIST_SIGMA_DEG + _HIST_BIN_DEG / 2, _HIST_BIN_DEG)
  g = np.exp(-0.5 * (k / _HIST_SIGMA_DEG) ** 2)
  return np.convolve(h, g / g.sum(), mode="same"), lo


def _entropy(e: np.ndarray) -> float:
  h = np.bincount(((e - e.min()) / _HIST_BIN_DEG).astype(np.int64)).astype(np.float64)
  q = h[h > 0] / h.sum()
  return float(-(q * np.log(q)).sum())


def _fit_lines(el, x, labels, n, a, b):
  """Per label, el = a + b x by least squares (closed form with bincount) with a ridge prior on b: the median slope
  of the lines within _PRIOR_BAND_DEG whose points spread in range (the lasers of one block share their vertical
  offset). A line whose points lie at one range (a ring on the road) so takes its neighbours' slope instead of
  tilting across them, which would misorder the lines."""
  w = np.bincount(labels, minlength=n).astype(np.float64)
  sx, sy = np.bincount(labels, x, n), np.bincount(labels, el, n)
  sxx, sxy = np.bincount(labels, x * x, n), np.bincount(labels, x * el, n)
  with np.errstate(divide="ignore", invalid="ignore"):
    xm, ym = sx / w, sy / w
    var, cov = sxx - sx * xm, sxy - sx * ym  # w var(x), w cov(x, el)
    free = np.clip(np.where(var > 1e-9 * w, cov / var, b), _SLOPES[0], _SLOPES[-1])
    spread = (w >= 8) & (var > _PRIOR_VAR * w)
    level = ym
    prior = np.array([np.median(free[spread & (np.abs(level - level[k]) < _PRIOR_BAND_DEG)])
                      if np.any(spread & (np.abs(level - level[k]) < _PRIOR_BAND_DEG)) else b[k] for k in range(n)])
    b_new = np.clip((cov + _PRIOR_VAR * w * prior) / (var + _PRIOR_VAR * w), _SLOPES[0], _SLOPES[-1])
    a_new = ym - b_new * xm
  has = w > 0
  return np.where(has, a_new, a), np.where(has, b_new, b), w


def _line_levels(el, labels, n) -> np.ndarray:
  """The median elevation of each line's points (-inf for a line without points)."""
  order = np.argsort(labels, kind="stable")
  bounds = np.searchsorted(labels[order], np.arange(n + 1))
  e = el[order]
  return np.array([np.median(e[bounds[k]:bounds[k + 1]]) if bounds[k + 1] > bounds[k] else -np.inf
                   for k in range(n)])


def _assign(el, x, a, b, chunk: int = 1 << 15) -> np.ndarray:
  """The nearest line of each point, |el - (a + b x)| (float32, in chunks)."""
  out = np.empty(len(el), np.int64)
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  for s in range(0, len(el), chunk):
    res = np.multiply.outer(x[s:s + chunk].astype(np.float32), b32)
    res += a32
    res -= el[s:s + chunk, None].astype(np.float32)
    np.abs(res, out=res)
    out[s:s + chunk] = res.argmin(axis=1)
  return out


def _cluster_lasers(el: np.ndarray, inv_rho: np.ndarray, max_iters: int = 30) -> np.ndarray:
  """Laser of each point (0 = top) from elevations [deg] and inverse horizontal ranges [1/m] (the module doc)."""
  b0 = float(_SLOPES[int(np.argmin([_entropy(el - s * inv_rho) for s in _SLOPES]))])
  hs, lo = _smoothed_histogram(el - b0 * inv_rho)
  peak = (hs[1:-1] > hs[:-2]) & (hs[1:-1] >= hs[2:]) & (hs[1:-1] > 2e-3 * hs.max())
  a = lo + (np.flatnonzero(peak) + 1 + 0.5) * _HIST_BIN_DEG
  b = np.full(len(a), b0)
  for _ in range(8):  # k-lines; then drop the lines that hold (almost) nothing and merge coinciding ones; again
    labels = _assign(el, inv_rho, a, b)
    for _ in range(max_iters):
      a, b, w = _fit_lines(el, inv_rho, labels, len(a), a, b)
      new = _assign(el, inv_rho, a, b)
      if np.array_equal(new, labels):
        break
      labels = new
    w = np.bincount(labels, minlength=len(a))
    level = _line_levels(el, labels, len(a))  # each line's elevation where its points are (lines may cross elsewhere)
    order = np.argsort(-level)
    keep = w >= max(8.0, _MIN_LINE_SHARE * float(np.median(w[w > 0])))
    close = np.r_[False, np.abs(np.diff(level[order])) < _MERGE_DEG]  # the second of two close lines goes
    keep[order[close]] = False
    if keep.all():
      break
    a, b = a[keep], b[keep]
  used = np.unique(labels)
  rank = np.full(len(a), -1, np.int64)
  rank[used[np.argsort(-_line_levels(el, labels, len(a))[used])]] = np.arange(len(used))
  return rank[labels]


def _scan_rows(xyz: np.ndarray, el: np.ndarray, start_azimuth_deg: float | None, what: str) -> np.ndarray:
  """Row of each point of a scan stored one laser's revolution after another, or a ValueError if it is not."""
  az = np.degrees(np.unwrap(np.arctan2(xyz[:, 1], xyz[:, 0])))
  steps = np.diff(az)
  turns = (az[-1] - az[0]) / 360.0
  if turns < 1.5 or np.mean(steps < -1.0) > 0.01:
    raise ValueError(f"{what}: not in scan order (each laser's revolution in turn, as KITTI's .bin: the azimuth "
                     f"turns {turns:.1f} times along the file and goes back at {np.mean(steps < -1.0):.1%} of the "
                     f"steps); use method='elevation'")
  if start_azimuth_deg is None:
    def cost(s, idx):
      rows = np.floor((az[idx] - s) / 360.0).astype(np.int64)
      rows -= rows.min()
      n = np.bincount(rows).astype(np.float64)
      s1, s2 = np.bincount(rows, el[idx]), np.bincount(rows, el[idx] ** 2)
      return float(np.sum(s2 - np.divide(s1 * s1, n, out=np.zeros_like(s1), where=n > 0)))

    sub = np.arange(0, len(az), 4)
    coarse = min(np.arange(0.0, 360.0, 1.0), key=lambda s: cost(s, sub))
    every_point = np.arange(len(az))
    start_azimuth_deg = min(np.arange(coarse - 1.0, coarse + 1.0, 0.02), key=lambda s: cost(s, every_point))
  rows = np.floor((az - float(start_azimuth_deg)) / 360.0).astype(np.int64)
  return rows - rows.min()


def laser_ids(points, method: str = "auto", start_azimuth_deg: float | None = None) -> np.ndarray:
  """The laser of each point of a LiDAR scan, 0 = the top laser (the module doc).

  Args:
    points: (N, 3) or (N, 4) x, y, z[, reflectance] in metres, in the LiDAR's frame (z up), e.g. `points.read_points`.
    method: 'scan_order' (a scan stored one laser's revolution after another, as KITTI's .bin), 'elevation'
      (clustering the elevation angles) or 'auto' (scan order when the file is in it, else elevation).
    start_azimuth_deg: scan order only: the azimuth at which the file's rows start (KITTI: 0); None estimates it.

  Returns:
    (N,) int64 laser ranks, 0 .. L-1 from the top, L the number of lasers found.
  """
  what = "points"
  if method not in ("auto", "scan_order", "elevation"):
    raise ValueError(f"method must be 'auto', 'scan_order' or 'elevation', got {method!r}")
  xyz = _points_xyz(points, what)
  el, rho = _elevation(xyz, what)
  if method == "elevation":
    return _cluster_lasers(el, 1.0 / rho)
  try:
    rows = _scan_rows(xyz, el, start_azimuth_deg, what)
  except ValueError:
    if method == "scan_order":
      raise
    return _cluster_lasers(el, 1.0 / rho)
  n = int(rows.max()) + 1
  med = np.array([np.median(el[rows == r]) if np.any(rows == r) else -np.inf for r in range(n)])
  rank = np.empty(n, np.int64)
  rank[np.argsort(-med, kind="stable")] = np.arange(n)
  return rank[rows]


def thin_points(points, every: int, method: str = "auto", start_azimuth_deg: float | None = None) -> np.ndarray:
  """The points of every `every`-th laser, counted from the top (`laser_ids`): a 64-beam scan with every=2 is a
  32-beam scan with the same vertical field. Returns the rows of `points` kept, in their order (every=1: all)."""
  every = _check_every(every)
  ids = laser_ids(points, method, start_azimuth_deg)
  return np.asarray(points)[ids % every == 0]


def _as_depth_map(depth, what: str) -> np.ndarray:
  d = np.asarray(depth)
  if d.ndim == 3 and d.shape[-1] == 1:
    d = d[..., 0]
  if d.ndim != 2 or not np.issubdtype(d.dtype, np.number):
    raise ValueError(f"{what}: expected an (H, W) or (H, W, 1) depth map in metres, got {d.dtype} {d.shape}")
  return d


def depth_laser_ids(depth, K, T_cam_from_lidar=None) -> np.ndarray:
  """The laser of each pixel of a projected LiDAR depth map, by pitch binning (the module doc).

  Args:
    depth: (H, W) or (H, W, 1) depth z [m] along the optical axis, 0 = no point (KITTI's velodyne_raw).
    K: (3, 3) intrinsics of that image [pixels] (pixel centres at integer coordinates).
    T_cam_from_lidar: (4, 4) LiDAR -> camera rigid transform [m]; None: the LiDAR at the camera's centre (axes
      x forward, y left, z up).

  Returns:
    (H, W) int64: 0 .. L-1 the laser from the top among the L found in the image, -1 where there is no point (all
    -1 for a map without points).
  """
  d = _as_depth_map(depth, "depth")
  K = np.asarray(K, np.float64)
  if K.shape != (3, 3) or not np.all(np.isfinite(K)) or K[0, 0] <= 0 or K[1, 1] <= 0:
    raise ValueError(f"K: expected a 3x3 intrinsics matrix with fx, fy > 0, got {np.round(K, 4).tolist()}")
  v, u = np.nonzero(d > 0)
  out = np.full(d.shape, -1, np.int64)
  if v.size == 0:  # an empty frame: nothing to bin (a KITTI test frame's ground truth, a fully dropped scan)
    return out
  z = d[v, u].astype(np.float64)
  cam = z[:, None] * (np.stack([u, v, np.ones_like(u)], 1).astype(np.float64) @ np.linalg.inv(K).T)
  if T_cam_from_lidar is None:
    xyz = np.stack([cam[:, 2], -cam[:, 0], -cam[:, 1]], 1)
  else:
    T = np.asarray(T_cam_from_lidar, np.float64)
    if T.shape != (4, 4):
      raise ValueError(f"T_cam_from_lidar: expected a 4x4 rigid transform, got shape {T.shape}")
    xyz = (cam - T[:3, 3]) @ T[:3, :3]  # R^T (p - t)
  el, rho = _elevation(xyz, "depth")
  out[v, u] = _cluster_lasers(el, 1.0 / rho)
  return out


def thin_depth(depth, every: int, K, T_cam_from_lidar=None) -> np.ndarray:
  """A projected LiDAR depth map with only every `every`-th laser from the top (`depth_laser_ids`); the input's
  shape and dtype, 0 where a point was removed. every=1 returns a copy."""
  every = _check_every(every)
  d = np.asarray(depth)
  if every == 1:
    return d.copy()
  ids = depth_laser_ids(d, K, T_cam_from_lidar).reshape(d.shape)
  return np.where((ids >= 0) & (ids % every == 0), d, np.zeros_like(d))


# ------------------------------------------------------------------------------------------------- transforms


def _check_fraction(value, what: str, *, zero_ok: bool = False) -> float:
  ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool) and (
      0.0 <= float(value) <= 1.0 if zero_ok else 0.0 < float(value) <= 1.0)
  if not ok:
    raise ValueError(f"{what} must be a fraction in {'[0, 1]' if zero_ok else '(0, 1]'}, got {value!r}")
  return float(value)


def dropout(sparse: np.ndarray, keep: float, rng: np.random.Generator) -> np.ndarray:
  """Random point dropout: each point (depth > 0) kept independently with probability `keep` in (0, 1], so the
  number kept is Binomial(n, keep). The uniform field covers every pixel: the draw depends only on rng and shape.

  Returns float32 of sparse's shape, 0 where a point was dropped."""
  keep = _check_fraction(keep, "keep (the share of points kept)")
  s = np.asarray(sparse, np.float32)
  u = rng.random(s.shape, dtype=np.float32)
  return np.where((s > 0) & (u < np.float32(keep)), s, np.float32(0.0))


def vo_points(surface: np.ndarray, density: float, rng: np.random.Generator) -> np.ndarray:
  """Visual-odometry-like sparse points: density x (number of pixels) expected points drawn uniformly from the pixels
  where `surface` (a dense or semi-dense depth [m], 0 = none) has a depth, with its depth (`sparsify.uniform_sparsify`).
  VO / SLAM back ends triangulate 0.05-0.5 % of the pixels (density 0.0005-0.005).

  Returns float32 of surface's shape, 0 elsewhere."""
  density = _check_fraction(density, "density (the fraction of the pixels)")
  s = np.asarray(surface, np.float32)
  return sparsify.uniform_sparsify(s, density * s.size, rng)


def add_noise(sparse: np.ndarray, std_m: float, rng: np.random.Generator) -> np.ndarray:
  """Gaussian depth noise N(0, std_m^2) [m] on every point (a range error n moves the depth by n z / r, within 25 %
  of n in a KITTI-like camera's field); a point pushed to depth <= 0 is removed."""
  if not (isinstance(std_m, (int, float, np.floating)) and math.isfinite(std_m) and std_m >= 0):
    raise ValueError(f"std_m must be a finite number >= 0 (metres), got {std_m!r}")
  s = np.asarray(sparse, np.float32)
  noisy = s + rng.normal(0.0, float(std_m), s.shape).astype(np.float32)
  return np.where((s > 0) & (noisy > 0), noisy, np.float32(0.0))


def add_outliers(sparse: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
  """Outliers: each point, with probability `fraction` in [0, 1], takes the depth of another point of the frame drawn
  uniformly (a return from another surface, as the points seen through foreground edges that the benchmark labels
  `disturbed`: the synthetic pipeline recomputes that label from the result, |depth - visible surface| > 1 m)."""
  fraction = _check_fraction(fraction, "fraction (of the points made outliers)", zero_ok=True)
  s = np.asarray(sparse, np.float32)
  out = s.copy()
  idx = np.flatnonzero(s > 0)
  pick = rng.random(idx.size) < fraction
  if idx.size:
    out.flat[idx[pick]] = s.flat[idx[rng.integers(0, idx.size, int(pick.sum()))]]
  return out


# --------------------------------------------------------------------------------------- sensors and mixtures

SOURCES = ("native", "lidar", "vo")  # where a sensor's sparse input comes from (the module doc)


@dataclasses.dataclass(frozen=True)
class Sensor:
  """One sensor a mixture can draw: the source of the sparse input, then dropout, outliers and noise, in that order.
  Ranges (lo, hi) are drawn per sample (uniformly; vo_density log-uniformly); lo == hi is a fixed value.

  Attributes:
    source: 'native' (the dataset's own input: synthetic, the hdl64 preset; kitti_depth, its HDL-64E scans; nyu_depth,
      the uniform sampler), 'lidar' (a preset of `lidars`, rendered by the synthetic generator) or 'vo'
      (visual-odometry points from the dense / semi-dense depth).
    lidars: source 'lidar': the presets, one drawn uniformly per sample.
    every: keep every k-th laser from the top (sources 'native' of a LiDAR dataset and 'lidar').
    vo_density: source 'vo': fraction of the pixels.
    keep: random dropout: the share of points kept, in (0, 1] ((1, 1): none).
    noise_m: std of Gaussian depth noise [m] ((0, 0): none).
    outliers: the share of points given another point's depth, in [0, 1] ((0, 0): none).
  """

  source: str = "native"
  lidars: tuple[str, ...] = ("hdl64",)
  every: int = 1
  vo_density: tuple[float, float] = (0.0005, 0.005)
  keep: tuple[float, float] = (1.0, 1.0)
  noise_m: tuple[float, float] = (0.0, 0.0)
  outliers: tuple[float, float] = (0.0, 0.0)

  def check(self, name: str) -> None:
    """A one-line ValueError naming the sensor, the field and its valid values when a field is out of range."""
    where = f"sensor {name!r}"
    if self.source not in SOURCES:
      raise ValueError(f"{where}: source must be one of {', '.join(SOURCES)}, got {self.source!r}")
    if not self.lidars:
      raise ValueError(f"{where}: lidars must name at least one preset ({', '.join(sorted(LIDARS))})")
    for p in self.lidars:
      lid = lidar(p)
      if self.source == "lidar" and lid.beams % _check_every(self.every):
        raise ValueError(f"{where}: every={self.every} does not divide the {lid.beams} beams of {p!r}")
    _check_every(self.every)

    def rng_range(field, lo_ok, hi_ok, rule):
      lo, hi = getattr(self, field)
      if not (lo_ok(lo) and hi_ok(hi) and lo <= hi):
        raise ValueError(f"{where}: {field} must be a range (lo, hi) with lo <= hi, each {rule}, got {(lo, hi)!r}")

    rng_range("keep", lambda v: 0 < v <= 1, lambda v: 0 < v <= 1, "a keep fraction in (0, 1]")
    rng_range("vo_density", lambda v: 0 < v <= 1, lambda v: 0 < v <= 1, "a fraction of the pixels in (0, 1]")
    rng_range("noise_m", lambda v: 0 <= v < math.inf, lambda v: v < math.inf, "a finite std >= 0 in metres")
    rng_range("outliers", lambda v: 0 <= v <= 1, lambda v: v <= 1, "a fraction in [0, 1]")


@dataclasses.dataclass(frozen=True)
class Draw:
  """One sample's sensor: the name drawn from a mixture and the values drawn from its ranges."""

  name: str
  source: str
  lidar: str  # the preset (source 'lidar'); '' otherwise
  every: int
  vo_density: float  # source 'vo'; 0 otherwise
  keep: float
  noise_m: float
  outliers: float


SENSORS: Registry[Sensor] = Registry("sensor")
MIXTURES: Registry[tuple[tuple[str, float], ...]] = Registry("sensor mixture")
_KINDS: dict[str, str] = {}  # name -> 'sensor' | 'mixture': one name, one meaning, read without loading extensions


def register_sensor(name: str, sensor: Sensor) -> None:
  """Adds a named sensor (a config may name it alone, as a mixture of one)."""
  sensor.check(name)
  if name in _KINDS:
    raise ValueError(f"sensor {name!r}: the name is taken by a {_KINDS[name]}")
  SENSORS.register(name, sensor)
  _KINDS[name] = "sensor"


def register_mixture(name: str, members: Sequence[tuple[str, float]]) -> None:
  """Adds a named mixture: (sensor name, weight > 0) pairs; one sensor is drawn per sample with these weights."""
  members = tuple((str(s), float(w)) for s, w in members)
  if not members or any(not w > 0 or not math.isfinite(w) for _, w in members):
    raise ValueError(f"sensor mixture {name!r}: needs (sensor, weight > 0) pairs, got {members!r}")
  for s, _ in members:
    SENSORS.lookup(s)
  if name in _KINDS:
    raise ValueError(f"sensor mixture {name!r}: the name is taken by a {_KINDS[name]}")
  MIXTURES.register(name, members)
  _KINDS[name] = "mixture"


PRESETS = ("hdl64", "hdl32", "vlp16", "os1_32", "os1_128")
register_sensor("native", Sensor())  # the dataset's own sensor, through the mixture machinery
for _p in PRESETS:
  register_sensor(_p, Sensor(source="lidar", lidars=(_p,)))
register_sensor("lidar_any", Sensor(source="lidar", lidars=PRESETS))
register_sensor("lidar_any_dropout", Sensor(source="lidar", lidars=PRESETS, keep=(0.05, 1.0)))
register_sensor("thin2", Sensor(every=2))  # every 2nd laser of the dataset's LiDAR (KITTI / synthetic: 32 of 64)
register_sensor("thin4", Sensor(every=4))  # every 4th (16 of 64)
register_sensor("dropout", Sensor(keep=(0.05, 1.0)))  # the 5-100 % of the points kept
register_sensor("vo", Sensor(source="vo", vo_density=(0.0005, 0.005)))
register_sensor("vo_015", Sensor(source="vo", vo_density=(0.0015, 0.0015)))  # VO at 0.15 % of the pixels (evaluation)
register_sensor("noisy", Sensor(noise_m=(0.02, 0.2), outliers=(0.0, 0.05)))
# For the sensor-robust training (configs/synthetic.py:<variant>,lidar_mix): the five presets (70 %), the same with
# 5-100 % of the points kept (20 %), VO points (10 %).
register_mixture("lidar_mix", (("lidar_any", 0.7), ("lidar_any_dropout", 0.2), ("vo", 0.1)))
# What recorded LiDAR data allows (kitti_depth, and synthetic): its own scans, thinned, dropped out, VO.
register_mixture("recorded_mix", (("native", 0.4), ("thin2", 0.2), ("thin4", 0.2), ("dropout", 0.1), ("vo", 0.1)))
# What a dense depth camera allows (nyu_depth, and the others): its own input, dropped out, VO points.
register_mixture("depth_camera_mix", (("native", 0.5), ("dropout", 0.25), ("vo", 0.25)))


def names() -> list[str]:
  """Every name a config's `data.sensors` may give: the sensors and the mixtures."""
  load_extensions()  # as a Registry listing does: extensions' sensors included
  return sorted(_KINDS)


def members(name: str) -> tuple[tuple[str, float], ...]:
  """(sensor, weight) pairs of a mixture, or ((name, 1.0),) for a sensor; a one-line error for an unknown name."""
  if isinstance(name, str) and name not in _KINDS:
    load_extensions()  # as a Registry miss does
  kind = _KINDS.get(name) if isinstance(name, str) else None
  if kind == "mixture":
    return MIXTURES[name]
  if kind == "sensor":
    return ((name, 1.0),)
  raise ValueError(f"unknown sensor or sensor mixture {name!r}; valid names: {', '.join(names())}")


def check_for_dataset(name: str, dataset: str, sources: Sequence[str], native_lidar: str) -> None:
  """That every sensor of mixture `name` applies to `dataset`, which takes the sensor `sources` and whose own sensor
  is the LiDAR preset `native_lidar` ('' for a depth camera: nothing to thin). One-line ValueError otherwise."""
  for s, _ in members(name):
    sensor = SENSORS[s]
    if sensor.source not in sources:
      allowed = f"sensors of source {' or '.join(repr(x) for x in sources)}" if sources else "no sensor mixture"
      raise ValueError(f"sensors {name!r}: sensor {s!r} has source {sensor.source!r}, which {dataset} cannot make "
                       f"(only the synthetic scenes render LiDAR presets); {dataset} takes {allowed}")
    if sensor.every > 1 and sensor.source == "native" and not native_lidar:
      raise ValueError(f"sensors {name!r}: sensor {s!r} thins lasers (every={sensor.every}), but {dataset} is a "
                       f"dense depth camera without lasers; it takes dropout, VO points, noise and outliers")
    if sensor.every > 1 and sensor.source == "native" and native_lidar:
      if lidar(native_lidar).beams % sensor.every:
        raise ValueError(f"sensors {name!r}: sensor {s!r}: every={sensor.every} does not divide the "
                         f"{lidar(native_lidar).beams} beams of {dataset}'s {native_lidar}")


def _uniform(rng: np.random.Generator, lo: float, hi: float, log: bool = False) -> float:
  if lo == hi:
    return float(lo)
  if log:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
  return float(rng.uniform(lo, hi))


def draw(name: str, rng: np.random.Generator) -> Draw:
  """One sensor of mixture (or sensor) `name` for one sample, and its values, from `rng` (the pipeline's per-sample
  generator, so a draw is a function of (seed, index))."""
  pairs = members(name)
  if len(pairs) == 1:
    sensor_name = pairs[0][0]
  else:
    w = np.cumsum([w for _, w in pairs])
    sensor_name = pairs[min(int(np.searchsorted(w / w[-1], rng.random(), side="right")), len(pairs) - 1)][0]
  s = SENSORS[sensor_name]
  preset = ""
  if s.source == "lidar":
    preset = s.lidars[int(rng.integers(len(s.lidars)))] if len(s.lidars) > 1 else s.lidars[0]
  density = _uniform(rng, *s.vo_density, log=True) if s.source == "vo" else 0.0
  return Draw(name=sensor_name, source=s.source, lidar=preset, every=s.every, vo_density=density,
              keep=_uniform(rng, *s.keep), noise_m=_uniform(rng, *s.noise_m), outliers=_uniform(rng, *s.outliers))


def apply_transforms(sparse: np.ndarray, d: Draw, rng: np.random.Generator) -> np.ndarray:
  """The drawn dropout, outliers and noise, in that order, on a sparse depth map (float32, its shape)."""
  s = np.asarray(sparse, np.float32)
  if d.keep < 1.0:
    s = dropout(s, d.keep, rng)
  if d.outliers > 0.0:
    s = add_outliers(s, d.outliers, rng)
  if d.noise_m > 0.0:
    s = add_noise(s, d.noise_m, rng)
  return s
