"""Synthetic KITTI-like street scenes seen by a simulated spinning LiDAR (no files needed).

A scene is a set of simple solids in a "street" frame (x right, y down, z forward; metres, the
camera at the origin looking along +z, the road plane at y = +1.65 m, KITTI's camera height):
road, raised sidewalks, building facades with gaps, parked and driving cars (body, cabin, wheels),
poles, trees (trunk + crown) and pedestrians (body + head). It is seen by

* a camera with KITTI's val_selection_cropped intrinsics (352x1216, fx = fy = 721.5377,
  cx = 596.5593, cy = 149.854): dense depth z (metres along the optical axis) from ray casting
  every pixel centre (a z-buffer over the solids; sky = 0);
* a spinning LiDAR, by default a Velodyne HDL-64E (64 beams, +2.4 to -8.1 deg in 32 steps and -8.6 to
  -24.0 deg in 32 steps, spinning with a fixed azimuth step), mounted with KITTI's LiDAR-to-camera
  transform (`kitti_lidar_to_camera`, parsed from the 2011_09_26 calib_velo_to_cam / calib_cam_to_cam
  files: the LiDAR sits about 27 cm behind, 8 cm above and 6 cm right of camera 2). Returns get
  Gaussian range noise and range-dependent dropouts, are projected into the camera (nearest return
  wins per pixel) like KITTI's velodyne_raw maps. `SyntheticConfig.lidar` names another preset of
  `pncnn_jax.data.sensors.LIDARS` (hdl32, vlp16, os1_32, os1_128: their own elevations, azimuth step
  and mount height, the mount moved up or down from the HDL-64E's by the difference): the same scene,
  camera and ground truth, its own rays. The default, hdl64, is the generator as it always was.

Because the two sensors see from different places, LiDAR returns from the background appear
through the edges of foreground objects: each sparse pixel carries `disturbed`, true when its depth
differs from the camera-visible surface at that pixel by more than `disturbed_threshold_m`.
The KITTI-like semi-dense ground truth keeps dense depth where the HDL-64E's vertical field covers
the visible surface (whatever the LiDAR: the same ground truth for every sensor), up to
`gt_max_depth_m`, with a Bernoulli fill (accumulated scans are not complete); `dense` is the full
z-buffer.

Determinism: sample `index` of `seed` is always the same scene, noise and dropouts, whatever window
of the frame is rendered (all random fields are drawn for the full frame / full scan first).

Azimuth step: the issue text says 0.08 deg (HDL-64E datasheet at 5 Hz). The real KITTI scan in
../shared/data/kitti_raw_mini (10 Hz) has a median step of 0.18 deg between consecutive returns,
and 0.08 deg gives twice KITTI's sparse density, so the default is 0.175 deg (configurable),
which with the scenes below gives KITTI's 4.3-4.4% sparse density.
Statistics against the real frames are in docs/DATA.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from pncnn_jax.data import raycast, sensors

# KITTI val_selection_cropped intrinsics (../shared/data/kitti_depth_mini/intrinsics_*.txt).
KITTI_FX = 721.5377
KITTI_FY = 721.5377
KITTI_CX = 596.5593
KITTI_CY = 149.854
KITTI_HEIGHT = 352
KITTI_WIDTH = 1216
CAMERA_HEIGHT_M = 1.65  # KITTI camera height above the road.

# KITTI raw 2011_09_26 calibration (calib_velo_to_cam.txt R, T; calib_cam_to_cam.txt R_rect_00,
# P_rect_02). tests/data/test_synthetic.py checks these against the files in ../shared/data.
_VELO_TO_CAM_R = (7.533745e-03, -9.999714e-01, -6.166020e-04, 1.480249e-02, 7.280733e-04,
                  -9.998902e-01, 9.998621e-01, 7.523790e-03, 1.480755e-02)
_VELO_TO_CAM_T = (-4.069766e-03, -7.631618e-02, -2.717806e-01)
_R_RECT_00 = (9.999239e-01, 9.837760e-03, -7.445048e-03, -9.869795e-03, 9.999421e-01,
              -4.278459e-03, 7.402527e-03, 4.351614e-03, 9.999631e-01)
_P_RECT_02 = (7.215377e+02, 0.000000e+00, 6.095593e+02, 4.485728e+01, 0.000000e+00, 7.215377e+02,
              1.728540e+02, 2.163791e-01, 0.000000e+00, 0.000000e+00, 1.000000e+00, 2.745884e-03)


def kitti_lidar_to_camera(velo_to_cam_r, velo_to_cam_t, r_rect_00, p_rect_02):
  """LiDAR -> rectified camera-2 rigid transform from KITTI raw calibration values.

  X_cam2 = R_rect_00 (R X_velo + T) + t_2, with t_2 = K^-1 P_rect_02[:, 3] (the camera-2 offset
  in the rectified frame; K = P_rect_02[:, :3]).

  Args:
    velo_to_cam_r: 9 numbers, row-major R of calib_velo_to_cam.txt.
    velo_to_cam_t: 3 numbers, T of calib_velo_to_cam.txt (metres).
    r_rect_00: 9 numbers, R_rect_00 of calib_cam_to_cam.txt.
    p_rect_02: 12 numbers, P_rect_02 of calib_cam_to_cam.txt.

  Returns:
    (rotation (3, 3), origin (3,)): rotation maps LiDAR-frame directions to camera-2 directions;
    origin is the LiDAR centre in camera-2 coordinates (metres; x right, y down, z forward).
  """
  r = np.asarray(velo_to_cam_r, np.float64).reshape(3, 3)
  t = np.asarray(velo_to_cam_t, np.float64).reshape(3)
  rr = np.asarray(r_rect_00, np.float64).reshape(3, 3)
  p = np.asarray(p_rect_02, np.float64).reshape(3, 4)
  t2 = np.linalg.solve(p[:, :3], p[:, 3])
  return rr @ r, rr @ t + t2


LIDAR_ROTATION, LIDAR_ORIGIN = kitti_lidar_to_camera(_VELO_TO_CAM_R, _VELO_TO_CAM_T, _R_RECT_00,
                                                     _P_RECT_02)
# HDL-64E elevations (degrees; the hdl64 preset's, pncnn_jax.data.sensors): upper block 32 lasers at ~1/3 deg, lower
# block 32 at ~1/2 deg, following the real KITTI scan.
HDL64_ELEVATIONS_DEG = sensors.HDL64_ELEVATIONS_DEG


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
  """Sensor and rendering settings of the synthetic generator (defaults: KITTI-like)."""
  height: int = KITTI_HEIGHT  # full frame rows (crops are windows of this frame)
  width: int = KITTI_WIDTH  # full frame columns
  fx: float = KITTI_FX  # focal length, pixels
  fy: float = KITTI_FY
  cx: float = KITTI_CX  # principal point, pixels (pixel centres at integer coordinates)
  cy: float = KITTI_CY
  azimuth_step_deg: Optional[float] = None  # LiDAR azimuth step, degrees; None: the preset's (hdl64: 0.175, the KITTI
  #                                           scan's median; see module doc)
  range_noise_m: float = 0.02  # std of Gaussian LiDAR range noise, metres
  dropout: float = 0.01  # base probability that a LiDAR return is missing
  far_dropout: float = 0.10  # extra dropout probability at max_range_m (grows as (r/max)^2)
  max_range_m: float = 100.0  # LiDAR maximum range, metres
  lidar: str = "hdl64"  # the LiDAR preset (pncnn_jax.data.sensors.LIDARS): elevations, azimuth step, mount height
  lidar_beams: Optional[int] = None  # None: every laser of the preset; else a divisor B of its beams: every
  #                        (beams / B)-th laser from the top (e.g. hdl64 with 32 or 16: a 32- or 16-beam LiDAR with
  #                        the same vertical field; same scene, noise and dropouts per kept beam)
  sky_depth_m: float = 200.0  # camera rays that hit nothing within this distance are sky (0)
  gt_max_depth_m: float = 80.0  # semi-dense ground truth keeps depths up to this, metres
  gt_fill: float = 0.32  # Bernoulli fill of the semi-dense ground truth inside the LiDAR field
  disturbed_threshold_m: float = 1.0  # |sparse - visible surface| above this = disturbed

  def resolved(self) -> "SyntheticConfig":
    """This config with the preset's values in place of None (azimuth_step_deg, lidar_beams), checked: two configs
    render the same scans iff their resolved forms are equal (the scene cache compares these)."""
    lid = sensors.lidar(self.lidar)
    beams = lid.beams if self.lidar_beams is None else self.lidar_beams
    if isinstance(beams, bool) or not isinstance(beams, int) or beams < 1 or lid.beams % beams:
      divisors = [d for d in range(lid.beams, 0, -1) if lid.beams % d == 0]
      raise ValueError(f"SyntheticConfig.lidar_beams must be None or a divisor of the {lid.beams} beams of "
                       f"{self.lidar!r} ({', '.join(map(str, divisors))}), got {self.lidar_beams!r}")
    step = lid.azimuth_step_deg if self.azimuth_step_deg is None else self.azimuth_step_deg
    if not (isinstance(step, (int, float)) and math.isfinite(step) and step > 0):
      raise ValueError(f"SyntheticConfig.azimuth_step_deg must be None or positive degrees, got {step!r}")
    return dataclasses.replace(self, azimuth_step_deg=float(step), lidar_beams=beams)


# ----------------------------------------------------------------------------- scene


@dataclasses.dataclass
class Scene:
  """Solids in the street frame (metres; x right, y down, z forward; camera at the origin).

  boxes: (K, 7) centre xyz, half sizes xyz, yaw (radians, about +y).
  cylinders: (K, 5) vertical cylinders: axis x, axis z, radius, top y, bottom y (top < bottom).
  spheres: (K, 4) centre xyz, radius.
  yaw: heading of the camera relative to the street (radians).
  ground_y: road plane height (y down).
  """
  boxes: np.ndarray
  cylinders: np.ndarray
  spheres: np.ndarray
  yaw: float
  ground_y: float = CAMERA_HEIGHT_M


def _rngs(seed: int, index: int, stream: int = 0):
  """Independent generators for the scene, the LiDAR and the ground-truth fill of one sample."""
  if seed < 0 or index < 0 or stream < 0:
    raise ValueError(f"seed, stream and index must be non-negative, got seed={seed}, "
                     f"stream={stream}, index={index}")
  ss = np.random.SeedSequence([int(seed), int(stream), int(index), 0x5EED])
  return [np.random.default_rng(s) for s in ss.spawn(3)]


def make_scene(rng: np.random.Generator) -> Scene:
  """Draws a random street: road, sidewalks, facades, cars, poles, trees, pedestrians."""
  g = CAMERA_HEIGHT_M
  boxes, cyls, sphs = [], [], []

  def box(x0, x1, y0, y1, z0, z1, yaw=0.0):
    boxes.append([(x0 + x1) / 2, (y0 + y1) / 2, (z0 + z1) / 2,
                  (x1 - x0) / 2, (y1 - y0) / 2, (z1 - z0) / 2, yaw])

  def car(x, z, yaw):
    length, width = rng.uniform(3.8, 4.8), rng.uniform(1.65, 1.9)
    body_top, roof = g - rng.uniform(0.95, 1.1), g - rng.uniform(1.4, 1.6)
    c, s = math.cos(yaw), math.sin(yaw)

    def part(dx, dz, hx, y0, y1, hz):  # a box offset (dx, dz) in the car frame
      boxes.append([x + c * dx + s * dz, (y0 + y1) / 2, z - s * dx + c * dz, hx, (y1 - y0) / 2, hz, yaw])

    part(0.0, 0.0, width / 2, body_top, g - 0.3, length / 2)  # body (ground visible below)
    part(0.0, -0.15 * length, width / 2 - 0.1, roof, body_top, length * 0.27)  # cabin
    for sx in (-1, 1):
      for sz in (-1, 1):  # wheels
        part(sx * (width / 2 - 0.15), sz * length * 0.32, 0.13, g - 0.62, g, 0.31)

  half_road = rng.uniform(3.5, 8.0)
  centre = rng.uniform(-0.6, 0.6) * half_road
  yaw = rng.uniform(-0.12, 0.12)
  for side in (-1, 1):
    edge = centre + side * half_road
    walk = rng.uniform(1.5, 4.5)
    curb = rng.uniform(0.1, 0.18)
    outer = edge + side * walk
    box(min(edge, outer), max(edge, outer), g - curb, g + 0.5, -5.0, 160.0)  # sidewalk
    # Facades: blocks with gaps, random setbacks and heights.
    z = rng.uniform(-8.0, 2.0)
    while z < 150.0:
      length = rng.uniform(6.0, 35.0)
      if rng.random() < 0.15:
        z += rng.uniform(3.0, 20.0)  # gap (sky or far background visible)
        continue
      setback = rng.uniform(0.0, 4.0)
      front = outer + side * setback
      back = front + side * rng.uniform(8.0, 15.0)
      box(min(front, back), max(front, back), g - rng.uniform(4.0, 22.0), g, z, z + length)
      z += length
    # Parked cars along the curb.
    z = rng.uniform(3.0, 12.0)
    while z < 70.0:
      if rng.random() < 0.6:
        car(edge - side * rng.uniform(1.0, 1.4), z, rng.normal(0.0, 0.05))
      z += rng.uniform(5.0, 12.0)
    # Poles, trees and pedestrians on the sidewalk.
    for _ in range(rng.poisson(4)):
      px, pz = edge + side * rng.uniform(0.3, 1.0), rng.uniform(4.0, 80.0)
      cyls.append([px, pz, rng.uniform(0.05, 0.15), g - rng.uniform(3.0, 8.0), g])
    for _ in range(rng.poisson(3)):
      px, pz = edge + side * rng.uniform(0.5, 1.5), rng.uniform(5.0, 80.0)
      trunk = rng.uniform(1.8, 3.0)
      cyls.append([px, pz, rng.uniform(0.12, 0.3), g - trunk, g])
      r = rng.uniform(1.2, 3.0)
      sphs.append([px, g - trunk - 0.6 * r, pz, r])
    for _ in range(rng.poisson(2)):
      px, pz = edge + side * rng.uniform(0.3, walk - 0.3), rng.uniform(4.0, 50.0)
      h = rng.uniform(1.5, 1.9)
      cyls.append([px, pz, rng.uniform(0.18, 0.28), g - h + 0.25, g])
      sphs.append([px, g - h + 0.11, pz, 0.11])
  # Traffic in the lanes (both directions).
  for _ in range(rng.poisson(2.0)):
    lane = centre + rng.choice([-1, 1]) * rng.uniform(0.25, 0.75) * half_road
    car(lane, rng.uniform(8.0, 60.0), rng.normal(0.0, 0.08))
  as_arr = lambda xs, n: np.asarray(xs, np.float32).reshape(-1, n)
  return Scene(as_arr(boxes, 7), as_arr(cyls, 5), as_arr(sphs, 4), float(yaw))


def _render_camera(scene, cfg, top, left, h, w):
  """Dense z-buffer depth (h, w) float32 metres (inf = sky) of a window of the camera frame."""
  rot = raycast.yaw_matrix(scene.yaw)
  u = np.arange(left, left + w, dtype=np.float32)
  v = np.arange(top, top + h, dtype=np.float32)
  d_cam = np.empty((h, w, 3), np.float32)
  d_cam[..., 0] = ((u - cfg.cx) / cfg.fx)[None, :]
  d_cam[..., 1] = ((v - cfg.cy) / cfg.fy)[:, None]
  d_cam[..., 2] = 1.0
  d = d_cam @ rot.T.astype(np.float32)
  o = np.zeros(3, np.float32)
  depth = raycast.hit_plane_y(o, d, scene.ground_y).astype(np.float32)  # t = z because d_cam z = 1
  for hit, params, bb in raycast.solids(scene):
    box = raycast.screen_box(bb, rot, cfg, (top, left, h, w))
    if box is None:
      continue
    r0, r1, c0, c1 = box
    sub = depth[r0:r1, c0:c1]
    np.minimum(sub, hit(o, d[r0:r1, c0:c1], params), out=sub)
  depth[depth > cfg.sky_depth_m] = np.inf
  return depth


def _lidar_rays(lidar: sensors.Lidar, azimuth_step_deg: float):
  """Nominal LiDAR ray directions in the camera frame, (beams, A, 3), and their azimuths (A,)."""
  half = 60.0
  az = np.arange(-half, half, azimuth_step_deg)
  el = np.deg2rad(np.asarray(lidar.elevations_deg, np.float64))[:, None]
  a = np.deg2rad(az)[None, :]
  d_velo = np.stack(np.broadcast_arrays(np.cos(el) * np.cos(a), np.cos(el) * np.sin(a), np.sin(el)), -1)
  return d_velo @ LIDAR_ROTATION.T, az


def _render_lidar(scene, cfg, rng, top, left, h, w):
  """Sparse KITTI-style projection of one LiDAR scan into a window of the camera frame.

  Returns:
    (h, w) float32 depth z in metres (0 = no return), nearest return per pixel.
  """
  cfg = cfg.resolved()
  lidar = sensors.lidar(cfg.lidar)
  d_cam, az = _lidar_rays(lidar, cfg.azimuth_step_deg)
  n_el, n_az = d_cam.shape[:2]
  # All random draws cover the full scan so that every window sees the same scan.
  phase = rng.uniform(0.0, 1.0)
  noise = rng.normal(0.0, cfg.range_noise_m, (n_el, n_az))
  keep_u = rng.uniform(0.0, 1.0, (n_el, n_az))
  beams = slice(None, None, n_el // cfg.lidar_beams)  # after the draws: the kept beams see the full scan's
  d_cam, noise, keep_u = d_cam[beams], noise[beams], keep_u[beams]
  # The mount: KITTI's for the hdl64 preset; another preset's mount height moves the LiDAR up (camera -y) or down.
  dh = lidar.mount_height_m - sensors.lidar("hdl64").mount_height_m
  origin = LIDAR_ORIGIN if dh == 0 else LIDAR_ORIGIN - np.array([0.0, dh, 0.0])
  # Spinning phase: rotate the scan by a sub-step azimuth (about the LiDAR z axis ~ camera -y).
  ph = math.radians(phase * cfg.azimuth_step_deg)
  rz = np.array([[math.cos(ph), -math.sin(ph), 0], [math.sin(ph), math.cos(ph), 0], [0, 0, 1]])
  d_cam = d_cam @ (LIDAR_ROTATION @ rz @ LIDAR_ROTATION.T).T
  # Only columns that can project into the window (4 deg margin for the sensor offset).
  az_lo = math.degrees(math.atan((left - cfg.cx) / cfg.fx)) - 4.0
  az_hi = math.degrees(math.atan((left + w - 1 - cfg.cx) / cfg.fx)) + 4.0
  cols = (-az >= az_lo) & (-az <= az_hi)  # LiDAR azimuth is to the left (+y), camera u to the right
  d_cam, noise, keep_u = d_cam[:, cols], noise[:, cols], keep_u[:, cols]
  rot = raycast.yaw_matrix(scene.yaw)
  d = (d_cam @ rot.T).astype(np.float32)
  o = (rot @ origin).astype(np.float32)
  t = raycast.hit_plane_y(o, d, scene.ground_y)
  for hit, params, _ in raycast.solids(scene):
    np.minimum(t, hit(o, d, params), out=t)
  rng_m = t  # |d| = 1, so t is the range in metres
  p_drop = cfg.dropout + cfg.far_dropout * np.minimum(rng_m / cfg.max_range_m, 1.0) ** 2
  ok = (rng_m < cfg.max_range_m) & (keep_u >= p_drop)
  r = rng_m[ok] + noise[ok]
  pts = origin[None, :] + r[:, None] * d_cam[ok]
  z = pts[:, 2]
  front = z > 0.5
  pts, z = pts[front], z[front]
  ui = np.round(cfg.fx * pts[:, 0] / z + cfg.cx).astype(np.int64) - left
  vi = np.round(cfg.fy * pts[:, 1] / z + cfg.cy).astype(np.int64) - top
  inside = (ui >= 0) & (ui < w) & (vi >= 0) & (vi < h)
  flat = np.full(h * w, np.inf, np.float32)
  np.minimum.at(flat, vi[inside] * w + ui[inside], z[inside].astype(np.float32))
  flat[np.isinf(flat)] = 0.0
  return flat.reshape(h, w)


def _semi_dense_gt(dense, cfg, rng, top, left, h, w):
  """KITTI-like ground truth: dense depth inside the LiDAR's vertical field, <= gt_max_depth_m."""
  fill_u = rng.uniform(0.0, 1.0, (cfg.height, cfg.width)).astype(np.float32)[top:top + h, left:left + w]
  u = (np.arange(left, left + w, dtype=np.float32) - cfg.cx) / cfg.fx
  v = (np.arange(top, top + h, dtype=np.float32) - cfg.cy) / cfg.fy
  finite = np.isfinite(dense)
  z = np.where(finite, dense, 0.0).astype(np.float32)
  p = np.stack(np.broadcast_arrays(z * u[None, :], z * v[:, None], z), -1)  # camera frame
  q = (p - LIDAR_ORIGIN.astype(np.float32)) @ LIDAR_ROTATION.astype(np.float32)  # LiDAR frame
  el = np.degrees(np.arctan2(q[..., 2], np.hypot(q[..., 0], q[..., 1])))
  covered = (el <= HDL64_ELEVATIONS_DEG.max() + 0.2) & (el >= HDL64_ELEVATIONS_DEG.min() - 0.2)
  keep = finite & covered & (z <= cfg.gt_max_depth_m) & (fill_u < cfg.gt_fill)
  return np.where(keep, z, 0.0).astype(np.float32)


def generate(seed: int, index: int, config: Optional[SyntheticConfig] = None,
             window: Optional[tuple[int, int, int, int]] = None,
             stream: int = 0) -> dict[str, np.ndarray]:
  """Renders synthetic sample `index` of `seed` (deterministic), optionally only a window.

  Args:
    seed: non-negative dataset seed.
    index: non-negative sample index.
    config: sensor settings (default: KITTI-like 352x1216, the hdl64 LiDAR).
    window: (top, left, height, width) inside the config's full frame; default the full frame.
      A window renders exactly the corresponding crop of the full frame, only faster.
    stream: non-negative sub-seed separating splits (pipeline: train 0, val 1, test 2).

  Returns:
    dict of numpy arrays, all (h, w, 1) except `name`:
      sparse: float32 metres, LiDAR projection, 0 = no return.
      target: float32 metres, KITTI-like semi-dense ground truth, 0 = none.
      dense: float32 metres, full camera z-buffer, 0 = sky.
      valid: bool, target > 0.
      disturbed: bool, sparse > 0 and |sparse - dense| > disturbed_threshold_m (or dense is sky).
      name: int64 scalar, the index.
  """
  cfg = config or SyntheticConfig()
  cfg.resolved()  # an unknown preset or a bad lidar_beams fails before anything is rendered
  top, left, h, w = window if window is not None else (0, 0, cfg.height, cfg.width)
  if not (0 <= top and 0 <= left and h > 0 and w > 0 and top + h <= cfg.height and left + w <= cfg.width):
    raise ValueError(f"window {window} (top, left, height, width) is not inside the "
                     f"{cfg.height}x{cfg.width} frame")
  scene_rng, lidar_rng, gt_rng = _rngs(seed, index, stream)
  scene = make_scene(scene_rng)
  dense = _render_camera(scene, cfg, top, left, h, w)
  sparse = _render_lidar(scene, cfg, lidar_rng, top, left, h, w)
  target = _semi_dense_gt(dense, cfg, gt_rng, top, left, h, w)
  disturbed = (sparse > 0) & ~(np.abs(sparse - dense) <= cfg.disturbed_threshold_m)
  dense = np.where(np.isfinite(dense), dense, 0.0).astype(np.float32)
  return {
      "sparse": sparse[..., None],
      "target": target[..., None],
      "dense": dense[..., None],
      "valid": (target > 0)[..., None],
      "disturbed": disturbed[..., None],
      "name": np.int64(index),
  }
