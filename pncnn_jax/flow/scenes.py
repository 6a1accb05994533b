"""Two frames of a synthetic street (`pncnn_jax.data.synthetic`) with known camera and object motion: the exact
dense optical flow, the surface under every pixel and a textured grey image to find trackable points in (numpy).

Frames are half-resolution KITTI (176x608, fx = fy = 360.77 px): a 64x192 training crop then shows about a third
of the street's width. Between the two frames (10 Hz)

* the camera moves: forward `speed` metres, a little sideways, and turns by a small yaw and pitch; the second
  camera's pose in the first camera's frame is (R_e, t_e): X_1 = R_e X_2 + t_e;
* `moving_cars` extra cars drive along their heading, each with its own speed (ground frame), on top of the
  scene's parked and queued cars, which stay where they are.

A pixel's flow is exact: its ray is cast in frame 1 (the z-buffer over the scene's solids, `raycast`), the hit
point X_1 moves with its solid (a moving car) or stays (everything else), is expressed in camera 2,
X_2 = R_e^T (X_1 - t_e), and projected: flow = pi(X_2) - pi(X_1) [px], u right, v down. Sky pixels are points
at infinity: only the rotation moves them. A pixel is valid unless its point ends up less than 0.1 m in front of
camera 2 (it never does at these speeds, but the rule is there).

The image is not a photograph: it gives each surface class a texture with the properties that make a
Lucas-Kanade tracker succeed or fail, in the surface's own coordinates: flat sky and almost flat asphalt
(homogeneous), dashed lane markings, kerbs and box edges (edges: the aperture problem), facades with a regular
grid of windows (repeated patterns), leafy crowns (rich texture), and cars whose faces shade differently
(reflective paint). `pncnn_jax.flow.dataset` samples the tracks and their failures from it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from pncnn_jax.data import raycast, synthetic

# Surface classes (`solid_classes`, `render`).
SKY, ROAD, SIDEWALK, FACADE, CAR, POLE, CROWN, HEAD = range(-1, 7)
CLASS_NAMES = {SKY: "sky", ROAD: "road", SIDEWALK: "sidewalk", FACADE: "facade", CAR: "car", POLE: "pole",
               CROWN: "crown", HEAD: "head"}


@dataclasses.dataclass(frozen=True)
class FlowSceneConfig:
  """Camera and motion settings of the flow scenes (defaults: half-resolution KITTI at 10 Hz)."""
  height: int = 176  # frame rows (crops are windows of this frame)
  width: int = 608  # frame columns
  fx: float = synthetic.KITTI_FX / 2  # focal length, pixels
  fy: float = synthetic.KITTI_FY / 2
  cx: float = (synthetic.KITTI_CX + 0.5) / 2 - 0.5  # principal point, pixels (pixel centres at integers)
  cy: float = (synthetic.KITTI_CY + 0.5) / 2 - 0.5
  speed_m: tuple[float, float] = (0.3, 1.4)  # forward camera motion per frame, metres (11-50 km/h at 10 Hz)
  lateral_std_m: float = 0.05  # sideways camera motion per frame, metres
  yaw_std_deg: float = 1.0  # camera yaw change per frame, degrees
  pitch_std_deg: float = 0.3  # camera pitch change per frame, degrees
  moving_cars: float = 2.0  # mean (Poisson) number of extra cars driving in the lanes
  car_speed_m: tuple[float, float] = (0.4, 1.6)  # their motion per frame along their heading, metres
  sky_depth_m: float = 200.0  # rays that hit nothing within this distance are sky
  image_noise: float = 0.004  # std of the image's sensor noise (intensities in [0, 1])


@dataclasses.dataclass
class Motion:
  """Camera and object motion from frame 1 to frame 2.

  rotation, translation: the second camera's pose in the first camera's frame, X_1 = R_e X_2 + t_e (metres).
  cars: (first box index, end box index, displacement (3,) in the street frame, metres) per moving car.
  """
  rotation: np.ndarray
  translation: np.ndarray
  cars: list[tuple[int, int, np.ndarray]]


def _car_boxes(rng: np.random.Generator, x: float, z: float, yaw: float, g: float) -> list[list[float]]:
  """A car as 6 boxes (body, cabin, wheels) in the form of `Scene.boxes`, like `synthetic.make_scene`'s."""
  length, width = rng.uniform(3.8, 4.8), rng.uniform(1.65, 1.9)
  body_top, roof = g - rng.uniform(0.95, 1.1), g - rng.uniform(1.4, 1.6)
  c, s = math.cos(yaw), math.sin(yaw)
  out = []

  def part(dx, dz, hx, y0, y1, hz):
    out.append([x + c * dx + s * dz, (y0 + y1) / 2, z - s * dx + c * dz, hx, (y1 - y0) / 2, hz, yaw])

  part(0.0, 0.0, width / 2, body_top, g - 0.3, length / 2)
  part(0.0, -0.15 * length, width / 2 - 0.1, roof, body_top, length * 0.27)
  for sx in (-1, 1):
    for sz in (-1, 1):
      part(sx * (width / 2 - 0.15), sz * length * 0.32, 0.13, g - 0.62, g, 0.31)
  return out


def road_centre(scene: synthetic.Scene) -> float:
  """x of the road's centre line (street frame): halfway between the two sidewalks' inner edges."""
  walks = [b for b in scene.boxes if b[6] == 0 and b[5] > 50]
  if len(walks) != 2:
    return 0.0
  inner = sorted((b[0] - b[3], b[0] + b[3]) for b in walks)
  return float((inner[0][1] + inner[1][0]) / 2)


def make_moving_scene(rng: np.random.Generator, cfg: FlowSceneConfig) -> tuple[synthetic.Scene, Motion]:
  """A `synthetic.make_scene` street with `cfg.moving_cars` (Poisson) extra driving cars, and the motion."""
  scene = synthetic.make_scene(rng)
  g, centre = scene.ground_y, road_centre(scene)
  boxes, cars = [scene.boxes], []
  start = len(scene.boxes)
  for _ in range(rng.poisson(cfg.moving_cars)):
    direction = rng.choice([-1.0, 1.0])  # +1: same direction as us (right lane), -1: oncoming (left lane)
    x = centre + direction * rng.uniform(1.2, 2.6)
    yaw = rng.normal(0.0, 0.04) + (0.0 if direction > 0 else math.pi)
    parts = np.asarray(_car_boxes(rng, x, rng.uniform(6.0, 45.0), yaw, g), np.float32)
    speed = rng.uniform(*cfg.car_speed_m)
    disp = speed * np.array([math.sin(yaw), 0.0, math.cos(yaw)])  # along the car's local +z (its heading)
    boxes.append(parts)
    cars.append((start, start + len(parts), disp))
    start += len(parts)
  scene = dataclasses.replace(scene, boxes=np.concatenate(boxes, axis=0))
  yaw, pitch = np.deg2rad(rng.normal(0.0, cfg.yaw_std_deg)), np.deg2rad(rng.normal(0.0, cfg.pitch_std_deg))
  rot_y = raycast.yaw_matrix(yaw)
  rot_x = np.array([[1.0, 0.0, 0.0], [0.0, math.cos(pitch), -math.sin(pitch)], [0.0, math.sin(pitch),
                                                                                 math.cos(pitch)]])
  t = np.array([rng.normal(0.0, cfg.lateral_std_m), 0.0, rng.uniform(*cfg.speed_m)])
  return scene, Motion(rot_y @ rot_x, t, cars)


def solid_classes(scene: synthetic.Scene) -> np.ndarray:
  """The class of every solid in `raycast.solids` order (boxes, cylinders, spheres), (K,) int.

  `make_scene` builds sidewalks and facades unrotated (yaw exactly 0; sidewalks are ~165 m long) and every car
  part with a drawn yaw; cylinders are poles, trunks and pedestrians; spheres are crowns (r > 0.5 m) and heads.
  """
  b = scene.boxes
  box_cls = np.where(b[:, 6] != 0, CAR, np.where(b[:, 5] > 50, SIDEWALK, FACADE))
  sph_cls = np.where(scene.spheres[:, 3] > 0.5, CROWN, HEAD)
  return np.concatenate([box_cls, np.full(len(scene.cylinders), POLE), sph_cls]).astype(np.int64)


def ray_directions(cfg: FlowSceneConfig, window: tuple[int, int, int, int], dtype=np.float64) -> np.ndarray:
  """Camera-frame ray directions (h, w, 3) of a window's pixel centres, z component 1 (t is the depth z)."""
  top, left, h, w = window
  d = np.empty((h, w, 3), dtype)
  d[..., 0] = ((np.arange(left, left + w, dtype=dtype) - cfg.cx) / cfg.fx)[None, :]
  d[..., 1] = ((np.arange(top, top + h, dtype=dtype) - cfg.cy) / cfg.fy)[:, None]
  d[..., 2] = 1.0
  return d


def render(scene: synthetic.Scene, cfg: FlowSceneConfig, window: tuple[int, int, int, int]):
  """z-buffer of a window with the surface hit: depth (h, w) metres (inf = sky), solid (h, w) int (index into
  `raycast.solids`; -1 = the road plane or sky), camera-frame rays (h, w, 3). The same depth as
  `synthetic.generate`'s camera (tested)."""
  top, left, h, w = window
  rot = raycast.yaw_matrix(scene.yaw)
  d = ray_directions(cfg, window, np.float32) @ rot.T.astype(np.float32)  # as synthetic's camera, in float32
  o = np.zeros(3, np.float32)
  depth = raycast.hit_plane_y(o, d, scene.ground_y).astype(np.float32)
  solid = np.full((h, w), -1, np.int64)
  for k, (hit, params, bb) in enumerate(raycast.solids(scene)):
    box = raycast.screen_box(bb, rot, cfg, window)
    if box is None:
      continue
    r0, r1, c0, c1 = box
    t = hit(o, d[r0:r1, c0:c1], params)
    closer = t < depth[r0:r1, c0:c1]
    depth[r0:r1, c0:c1][closer] = t[closer]
    solid[r0:r1, c0:c1][closer] = k
  depth[depth > cfg.sky_depth_m] = np.inf
  solid[~np.isfinite(depth)] = -1
  return depth, solid, ray_directions(cfg, window)


def exact_flow(scene: synthetic.Scene, motion: Motion, cfg: FlowSceneConfig, depth: np.ndarray,
               solid: np.ndarray, d_cam: np.ndarray, window: tuple[int, int, int, int]):
  """The forward flow of every pixel of the window (module docstring): flow (h, w, 2) float32 px, valid (h, w)."""
  top, left, h, w = window
  finite = np.isfinite(depth)
  x1 = np.where(finite, depth, 0.0)[..., None] * d_cam  # camera-1 frame, metres
  rot_street = raycast.yaw_matrix(scene.yaw)  # d_street = rot d_cam
  for first, end, disp in motion.cars:
    on = (solid >= first) & (solid < end)
    x1[on] += rot_street.T @ disp
  x2 = np.where(finite[..., None], (x1 - motion.translation) @ motion.rotation, d_cam @ motion.rotation)
  z2 = x2[..., 2]
  ok = np.where(finite, z2 > 0.1, z2 > 0)
  z2 = np.where(ok, z2, 1.0)
  u2 = cfg.fx * x2[..., 0] / z2 + cfg.cx - left
  v2 = cfg.fy * x2[..., 1] / z2 + cfg.cy - top
  flow = np.stack([u2 - np.arange(w)[None, :], v2 - np.arange(h)[:, None]], axis=-1)
  return np.where(ok[..., None], flow, 0.0).astype(np.float32), ok


def _hash_noise(cells: np.ndarray, salt: np.ndarray) -> np.ndarray:
  """A deterministic value in [0, 1) per integer cell (..., 3) and salt (...): piecewise-constant value noise."""
  dot = cells @ np.array([12.9898, 78.233, 37.719]) + salt * 4.1414
  return np.modf(np.abs(np.sin(dot) * 43758.5453))[0]


def surface_image(scene: synthetic.Scene, classes: np.ndarray, albedo: np.ndarray, periods: np.ndarray,
                  depth: np.ndarray, solid: np.ndarray, d_cam: np.ndarray):
  """The textured grey image of a window (intensity in [0, 1], before sensor noise), and per pixel whether it
  lies at or around a window of a facade's window grid (a repeated pattern).

  Args:
    classes: (K,) `solid_classes`. albedo: (K,) in [0, 1]. periods: (K,) window spacing of the facades [m].
    depth, solid, d_cam: `render`'s outputs.

  Returns:
    (image (h, w) float32, repeated (h, w) bool).
  """
  finite = np.isfinite(depth)
  rot = raycast.yaw_matrix(scene.yaw)
  p = (np.where(finite, depth, 0.0)[..., None] * d_cam) @ rot.T  # street frame, metres
  cls = np.where(solid >= 0, classes[np.maximum(solid, 0)], np.where(finite, ROAD, SKY))
  alb = albedo[np.maximum(solid, 0)]
  img = np.full(depth.shape, 0.85)  # sky
  # Road: asphalt with a faint coarse grain, and a dashed white centre line (edges for the aperture problem).
  road = cls == ROAD
  centre = road_centre(scene)
  grain = _hash_noise(np.floor(p / 0.4), np.zeros(depth.shape))
  line = (np.abs(p[..., 0] - centre) < 0.08) & (np.modf(np.abs(p[..., 2]) / 6.0)[0] < 0.5)
  img = np.where(road, np.where(line, 0.8, 0.3 + 0.012 * grain), img)
  # Sidewalk: flat slabs with dark joints every 1.5 m along the street.
  walk = cls == SIDEWALK
  joint = np.modf(np.abs(p[..., 2]) / 1.5)[0] < 0.04
  img = np.where(walk, np.where(joint, 0.3, 0.5), img)
  # Boxes (facades, cars): albedo times a shade per face, so that faces meet at edges.
  is_box = (solid >= 0) & (solid < len(scene.boxes))
  b = scene.boxes[np.clip(solid, 0, len(scene.boxes) - 1)]
  rel = p - b[..., :3]
  c, s = np.cos(b[..., 6]), np.sin(b[..., 6])
  local = np.stack([c * rel[..., 0] - s * rel[..., 2], rel[..., 1], s * rel[..., 0] + c * rel[..., 2]], -1)
  face = np.argmax(np.abs(local) / np.maximum(b[..., 3:6], 1e-6), axis=-1)  # 0: side (x), 1: top, 2: front (z)
  shade = np.choose(face, [0.8, 1.0, 0.65])
  # Facades: a grid of dark windows on the street-facing (x) face: a repeated pattern.
  fac = cls == FACADE
  per = periods[np.maximum(solid, 0)]
  fz, fy = np.modf(np.abs(p[..., 2]) / per)[0], np.modf(np.abs(p[..., 1]) / 3.0)[0]
  window = fac & (face == 0) & (fz > 0.25) & (fz < 0.7) & (fy > 0.3) & (fy < 0.75)
  plaster = 0.06 * _hash_noise(np.floor(p / 0.7), solid.astype(np.float64))
  img = np.where(fac, np.where(window, 0.12, alb * shade + plaster), img)
  img = np.where(cls == CAR, alb * shade, img)
  img = np.where(cls == POLE, 0.25 + 0.1 * alb, img)
  img = np.where(cls == HEAD, 0.6, img)
  leaves = _hash_noise(np.floor(p / 0.12), solid.astype(np.float64))
  img = np.where(cls == CROWN, 0.15 + 0.35 * leaves, img)
  repeated = fac & (face == 0) & (fz > 0.15) & (fz < 0.8) & (fy > 0.2) & (fy < 0.85)  # at and around windows
  return img.astype(np.float32), repeated & is_box


def scene_appearance(rng: np.random.Generator, scene: synthetic.Scene) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Per-solid (classes, albedo in [0.2, 0.8], facade window period in [2.2, 3.6] m), drawn from `rng`."""
  classes = solid_classes(scene)
  n = len(classes)
  return classes, rng.uniform(0.2, 0.8, n), rng.uniform(2.2, 3.6, n)
