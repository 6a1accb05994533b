"""A synthetic sparse-flow benchmark with labelled tracking failures (numpy; the grain source `flow_synthetic`).

Each example is a window of two frames of a moving street (`pncnn_jax.flow.scenes`: exact dense flow from
known camera and object motion, and a textured image). Sparse tracks are placed as a KLT front end places them
and fail as KLT fails:

1. **Corner-like points.** The Shi-Tomasi score (the smaller eigenvalue of the 5x5 structure tensor of the image)
   is computed; its local maxima (5x5) are the candidates. As driving front ends do, the window is bucketed into
   16x16 cells so that tracks cover the image: each cell keeps up to `per_cell` of its strongest textured
   candidates and `weak_per_cell` of its homogeneous ones (a low quality threshold), about 1 % of the pixels in
   all. Cells of sky or asphalt therefore get tracks on noise: that is where KLT fails most.
2. **Failures, by the texture under the track** (structure tensor eigenvalues l1 >= l2):
   - homogeneous (l1 + l2 < `homogeneous_energy`): with `p_homogeneous`, a gross random vector, the truth plus
     an error of uniform direction and magnitude in `gross_px` (the tracker wanders off);
   - repeated pattern (a facade's window grid): with `p_repeated`, a swapped match one pattern period away (the
     image displacement of one window spacing, horizontally or vertically);
   - edge (l2 < `edge_ratio` l1): with `p_edge`, drift along the edge by `drift_px` (the aperture problem);
   - car paint: with `p_reflective`, the flow of another surface of the window (a reflection moves with what it
     reflects);
   checked in this order. Every failed track is off by at least 2 px; every track also gets Gaussian noise of
   `noise_px` per component (KLT's sub-pixel accuracy).

The network sees only the sparse flow: it has to recognise failures from the flow field alone, where they "look
completely random" to anything but their neighbours.

Example (all (h, w, .) NHWC, float32 unless said):
  sparse     (h, w, 3)  [u, v, mask]: track flow [px] and 1 at a track (0 elsewhere, flow 0 there)
  target     (h, w, 3)  [u, v, valid]: exact dense flow [px] and 1 where it is defined
  corrupted  (h, w, 1)  bool: a failed track
  failure    (h, w, 1)  int8: FAILURES index (0 = none or no track)
  image      (h, w, 1)  the textured image [0, 1] the tracks were found in (for figures)
  name       int64 scalar: the index

Determinism: example `index` of (seed, stream) is one scene and motion whatever the window; the image noise is
drawn for the full frame. The tracks depend on the window (bucketing and the structure tensor see only it).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import grain
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from pncnn_jax.data import sparsify
from pncnn_jax.flow import scenes as flow_scenes

FAILURES = ("none", "gross (homogeneous)", "aperture (edge)", "swap (repeated)", "reflection (car)")
NONE, GROSS, APERTURE, SWAP, REFLECTION = range(5)
STREAMS = {"train": 0, "val": 1, "test": 2}
MIN_FAILURE_PX = 2.0  # every failed track is at least this far off (before the noise)


@dataclasses.dataclass(frozen=True)
class TrackConfig:
  """Track placement and failure model (module docstring)."""
  cell: int = 16  # bucketing cell, pixels
  per_cell: int = 4  # textured tracks per cell (at most 4 / 256 = 1.6 % of the pixels)
  weak_per_cell: int = 1  # homogeneous tracks per cell (a detector with a low quality threshold)
  nms_radius: int = 2  # candidates are maxima of the Shi-Tomasi score over (2r+1)^2 pixels
  window_radius: int = 2  # structure tensor averaging window (2r+1)^2
  noise_px: float = 0.25  # std of every track's error per component, pixels
  homogeneous_energy: float = 3e-4  # trace of the structure tensor below this: no texture
  edge_ratio: float = 0.1  # l2 / l1 below this: an edge
  p_homogeneous: float = 0.8  # failure probability of a homogeneous track (gross random vector)
  gross_px: tuple[float, float] = (3.0, 25.0)  # its error magnitude, pixels
  p_repeated: float = 0.4  # failure probability on a repeated pattern (swapped match)
  p_edge: float = 0.5  # failure probability on an edge (drift along it)
  drift_px: tuple[float, float] = (2.0, 8.0)  # the drift, pixels
  p_reflective: float = 0.25  # failure probability on car paint (another surface's flow)


def _box_mean(a: np.ndarray, r: int) -> np.ndarray:
  pad = np.pad(a, r, mode="edge")
  return sliding_window_view(pad, (2 * r + 1, 2 * r + 1)).mean(axis=(-1, -2))


def structure_tensor(img: np.ndarray, radius: int = 2):
  """Eigen-decomposition of the (2r+1)^2 box-averaged structure tensor of (h, w) `img`.

  Returns:
    (l1, l2, edge_dir): eigenvalues l1 >= l2 >= 0 (h, w), and the unit eigenvector of l2 (h, w, 2) as (x, y):
    the direction along which the image does not change, i.e. along an edge.
  """
  gy, gx = np.gradient(img.astype(np.float64))
  jxx, jxy, jyy = (_box_mean(a, radius) for a in (gx * gx, gx * gy, gy * gy))
  half_tr = (jxx + jyy) / 2
  disc = np.sqrt(np.maximum(((jxx - jyy) / 2) ** 2 + jxy**2, 0.0))
  theta = 0.5 * np.arctan2(2 * jxy, jxx - jyy)  # direction of the major eigenvector
  edge_dir = np.stack([-np.sin(theta), np.cos(theta)], axis=-1)
  return half_tr + disc, np.maximum(half_tr - disc, 0.0), edge_dir


def detect(score: np.ndarray, weak: np.ndarray, cfg: TrackConfig) -> tuple[np.ndarray, np.ndarray]:
  """Bucketed corner detection: in every cell, the `per_cell` strongest local maxima of `score` among the
  textured candidates and the `weak_per_cell` strongest among the `weak` (homogeneous) ones.

  Returns (rows, cols) of the tracks, int arrays.
  """
  r = cfg.nms_radius
  local_max = sliding_window_view(np.pad(score, r, mode="constant", constant_values=-np.inf),
                                  (2 * r + 1, 2 * r + 1)).max(axis=(-1, -2))
  rows, cols = np.nonzero((score >= local_max) & (score > 0))
  is_weak = weak[rows, cols]
  cell = ((rows // cfg.cell) * (score.shape[1] // cfg.cell + 1) + cols // cfg.cell) * 2 + is_weak
  order = np.lexsort((-score[rows, cols], cell))
  rows, cols, cell, is_weak = rows[order], cols[order], cell[order], is_weak[order]
  first = np.searchsorted(cell, cell, side="left")  # index of each (cell, weak) group's strongest candidate
  keep = (np.arange(len(cell)) - first) < np.where(is_weak, cfg.weak_per_cell, cfg.per_cell)
  return rows[keep], cols[keep]


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
  a = rng.uniform(0.0, 2 * np.pi, n)
  return np.stack([np.cos(a), np.sin(a)], axis=-1)


def _swap_offsets(scene, cfg, periods, solid, depth, d_cam, rows, cols, rng):
  """Image displacement (n, 2) of one window period (horizontal along the street, or 3 m vertical) from each
  track's surface point; NaN where it falls behind the camera."""
  rot = flow_scenes.raycast.yaw_matrix(scene.yaw)
  p_cam = depth[rows, cols, None] * d_cam[rows, cols]
  horizontal = rng.random(len(rows)) < 0.5
  step = np.where(horizontal[:, None], np.stack([np.zeros(len(rows)), np.zeros(len(rows)),
                                                 periods[solid[rows, cols]]], -1), np.array([0.0, 3.0, 0.0]))
  step *= rng.choice([-1.0, 1.0], len(rows))[:, None]
  q_cam = p_cam + step @ rot  # street step -> camera frame (d_cam = rot^T d_street)
  with np.errstate(divide="ignore", invalid="ignore"):
    du = cfg.fx * (q_cam[:, 0] / q_cam[:, 2] - p_cam[:, 0] / p_cam[:, 2])
    dv = cfg.fy * (q_cam[:, 1] / q_cam[:, 2] - p_cam[:, 1] / p_cam[:, 2])
  out = np.stack([du, dv], -1)
  out[q_cam[:, 2] < 0.5] = np.nan
  return out


def corrupt(flow_true: np.ndarray, valid: np.ndarray, texture: dict, rows, cols, cfg: TrackConfig,
            rng: np.random.Generator, swap_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Failure kinds (n,) int and measured track flows (n, 2) [px] (module docstring, step 2).

  Args:
    flow_true: (h, w, 2) exact flow. valid: (h, w) where it is defined.
    texture: (h, w) maps 'energy' (l1 + l2), 'ratio' (l2 / l1), 'edge_dir' (h, w, 2), 'repeated', 'car'.
    rows, cols: the tracks. swap_offsets: (n, 2) one pattern period in the image (NaN: none).
  """
  n = len(rows)
  true = flow_true[rows, cols].astype(np.float64)
  homog = texture["energy"][rows, cols] < cfg.homogeneous_energy
  edge = ~homog & (texture["ratio"][rows, cols] < cfg.edge_ratio)
  repeated = ~homog & texture["repeated"][rows, cols] & np.all(np.isfinite(swap_offsets), axis=-1)
  repeated &= np.hypot(*np.nan_to_num(swap_offsets).T) >= MIN_FAILURE_PX
  car = ~homog & texture["car"][rows, cols]
  u = rng.random(n)
  kind = np.full(n, NONE)
  kind[car & (u < cfg.p_reflective)] = REFLECTION
  kind[edge & (u < cfg.p_edge)] = APERTURE
  kind[repeated & (u < cfg.p_repeated)] = SWAP
  kind[homog & (u < cfg.p_homogeneous)] = GROSS
  err = np.zeros((n, 2))
  err += (_unit(rng, n) * rng.uniform(*cfg.gross_px, n)[:, None]) * (kind == GROSS)[:, None]
  drift = rng.uniform(*cfg.drift_px, n) * rng.choice([-1.0, 1.0], n)
  err += (texture["edge_dir"][rows, cols] * drift[:, None]) * (kind == APERTURE)[:, None]
  err += np.nan_to_num(swap_offsets) * (kind == SWAP)[:, None]
  # Reflections: the flow of a random valid pixel whose flow differs by >= MIN_FAILURE_PX; none found: gross.
  refl = np.flatnonzero(kind == REFLECTION)
  pool = flow_true[valid].astype(np.float64)
  for i in refl:
    other = pool[rng.integers(0, len(pool), 16)] - true[i]
    far = np.hypot(*other.T) >= MIN_FAILURE_PX
    err[i] = other[np.argmax(far)] if far.any() else _unit(rng, 1)[0] * cfg.gross_px[1]
  noise = rng.normal(0.0, cfg.noise_px, (n, 2))
  return kind, (true + err + noise).astype(np.float32)


def _rngs(seed: int, index: int, stream: int, window: tuple[int, int, int, int]):
  if min(seed, index, stream) < 0:
    raise ValueError(f"seed, stream and index must be non-negative, got seed={seed}, stream={stream}, index={index}")
  scene, look, noise = (np.random.default_rng(s) for s in
                        np.random.SeedSequence([int(seed), int(stream), int(index), 0xF10]).spawn(3))
  tracks = np.random.default_rng(np.random.SeedSequence([int(seed), int(stream), int(index), *window, 0x7AC]))
  return scene, look, noise, tracks


def generate(seed: int, index: int, scene_config: Optional[flow_scenes.FlowSceneConfig] = None,
             track_config: Optional[TrackConfig] = None, window: Optional[tuple[int, int, int, int]] = None,
             stream: int = 0) -> dict[str, np.ndarray]:
  """Example `index` of (seed, stream) (module docstring), optionally a window (top, left, h, w) of the frame."""
  cfg, tcfg = scene_config or flow_scenes.FlowSceneConfig(), track_config or TrackConfig()
  window = tuple(window) if window is not None else (0, 0, cfg.height, cfg.width)
  top, left, h, w = window
  if not (0 <= top and 0 <= left and h > 0 and w > 0 and top + h <= cfg.height and left + w <= cfg.width):
    raise ValueError(f"window {window} (top, left, height, width) is not inside the {cfg.height}x{cfg.width} frame")
  scene_rng, look_rng, noise_rng, track_rng = _rngs(seed, index, stream, window)
  scene, motion = flow_scenes.make_moving_scene(scene_rng, cfg)
  classes, albedo, periods = flow_scenes.scene_appearance(look_rng, scene)
  depth, solid, d_cam = flow_scenes.render(scene, cfg, window)
  flow, valid = flow_scenes.exact_flow(scene, motion, cfg, depth, solid, d_cam, window)
  img, repeated = flow_scenes.surface_image(scene, classes, albedo, periods, depth, solid, d_cam)
  img = img + cfg.image_noise * noise_rng.standard_normal((cfg.height, cfg.width))[top:top + h, left:left + w]
  l1, l2, edge_dir = structure_tensor(img, tcfg.window_radius)
  rows, cols = detect(l2, l1 + l2 < tcfg.homogeneous_energy, tcfg)
  keep = valid[rows, cols]
  rows, cols = rows[keep], cols[keep]
  car = (solid >= 0) & (classes[np.maximum(solid, 0)] == flow_scenes.CAR)
  texture = {"energy": l1 + l2, "ratio": l2 / np.maximum(l1, 1e-12), "edge_dir": edge_dir, "repeated": repeated,
             "car": car}
  swaps = _swap_offsets(scene, cfg, periods, solid, depth, d_cam, rows, cols, track_rng)
  kind, measured = corrupt(flow, valid, texture, rows, cols, tcfg, track_rng, swaps)
  sparse = np.zeros((h, w, 3), np.float32)
  sparse[rows, cols, :2] = measured
  sparse[rows, cols, 2] = 1.0
  failure = np.zeros((h, w, 1), np.int8)
  failure[rows, cols, 0] = kind
  return {
      "sparse": sparse,
      "target": np.concatenate([flow, valid[..., None].astype(np.float32)], axis=-1),
      "corrupted": failure > 0,
      "failure": failure,
      "image": np.clip(img, 0.0, 1.0).astype(np.float32)[..., None],
      "name": np.int64(index),
  }


class FlowSyntheticMap(grain.transforms.RandomMap):
  """grain map: index -> `generate` example of the pipeline config's split, rendered at its crop window."""

  def __init__(self, cfg):
    self._cfg = cfg
    self._scene = flow_scenes.FlowSceneConfig()
    self._stream = STREAMS[cfg.split]

  def random_map(self, index, rng: np.random.Generator):
    c, s = self._cfg, self._scene
    window = sparsify.crop_window(s.height, s.width, c.crop_height, c.crop_width, c.crop, rng)
    return generate(c.synthetic_seed, int(index), s, window=window, stream=self._stream)
