"""Ray casting against the synthetic scenes' solids (numpy): planes, yawed boxes, vertical cylinders, spheres.

Each `hit_*` takes a ray origin o (3,) and directions d (..., 3) in the street frame (metres; x right, y down,
z forward) and returns the ray parameter t (...,) of the first hit with t > EPS (inf where it misses); the hit
point is o + t d. `solids(scene)` lists (hit function, parameters, axis-aligned bounding box) for every solid of a
`pncnn_jax.data.synthetic.Scene`, which renders camera and LiDAR with them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

EPS = 1e-3


def hit_plane_y(o, d, y):
  with np.errstate(divide="ignore", invalid="ignore"):
    t = (y - o[1]) / d[..., 1]
  return np.where(t > EPS, t, np.inf)


def hit_box(o, d, b):
  cx, cy, cz, hx, hy, hz, yaw = (float(v) for v in b)
  c, s = math.cos(yaw), math.sin(yaw)
  rx, ry, rz = o[0] - cx, o[1] - cy, o[2] - cz
  # Into the box frame (inverse of the yaw rotation x' = c x - s z ... written for R_y(yaw)).
  ox, oz = c * rx - s * rz, s * rx + c * rz
  dx = c * d[..., 0] - s * d[..., 2]
  dz = s * d[..., 0] + c * d[..., 2]
  dy = d[..., 1]
  with np.errstate(divide="ignore", invalid="ignore"):
    ix, iy, iz = 1.0 / dx, 1.0 / dy, 1.0 / dz
    ax, bx = (-hx - ox) * ix, (hx - ox) * ix
    ay, by = (-hy - ry) * iy, (hy - ry) * iy
    az, bz = (-hz - oz) * iz, (hz - oz) * iz
    tn = np.maximum(np.maximum(np.minimum(ax, bx), np.minimum(ay, by)), np.minimum(az, bz))
    tf = np.minimum(np.minimum(np.maximum(ax, bx), np.maximum(ay, by)), np.maximum(az, bz))
  return np.where((tn <= tf) & (tn > EPS), tn, np.inf)


def hit_cylinder(o, d, cyl):
  px, pz, r, y0, y1 = (float(v) for v in cyl)
  ox, oz = o[0] - px, o[2] - pz
  dx, dy, dz = d[..., 0], d[..., 1], d[..., 2]
  a = dx * dx + dz * dz
  b = ox * dx + oz * dz
  cc = ox * ox + oz * oz - r * r
  with np.errstate(divide="ignore", invalid="ignore"):
    disc = b * b - a * cc
    t = (-b - np.sqrt(disc)) / a
    y = o[1] + t * dy
    side = np.where((disc >= 0) & (t > EPS) & (y >= y0) & (y <= y1), t, np.inf)
    tc = (y0 - o[1]) / dy  # top cap
    xc, zc = ox + tc * dx, oz + tc * dz
    cap = np.where((tc > EPS) & (xc * xc + zc * zc <= r * r), tc, np.inf)
  return np.minimum(side, cap)


def hit_sphere(o, d, sph):
  sx, sy, sz, r = (float(v) for v in sph)
  ox, oy, oz = o[0] - sx, o[1] - sy, o[2] - sz
  a = np.sum(d * d, axis=-1)
  b = ox * d[..., 0] + oy * d[..., 1] + oz * d[..., 2]
  cc = ox * ox + oy * oy + oz * oz - r * r
  with np.errstate(divide="ignore", invalid="ignore"):
    disc = b * b - a * cc
    t = (-b - np.sqrt(disc)) / a
  return np.where((disc >= 0) & (t > EPS), t, np.inf)


def solids(scene: Any):
  """(hit function, parameters, axis-aligned bounding box corners (8, 3)) for every solid of `scene`, a
  `pncnn_jax.data.synthetic.Scene` (not imported here: that module imports this one)."""
  out = []
  for b in scene.boxes:
    cx, cy, cz, hx, hy, hz, yaw = b
    ext = abs(math.cos(yaw)) * hx + abs(math.sin(yaw)) * hz, hy, abs(math.sin(yaw)) * hx + abs(math.cos(yaw)) * hz
    out.append((hit_box, b, (cx - ext[0], cx + ext[0], cy - ext[1], cy + ext[1], cz - ext[2], cz + ext[2])))
  for c in scene.cylinders:
    px, pz, r, y0, y1 = c
    out.append((hit_cylinder, c, (px - r, px + r, y0, y1, pz - r, pz + r)))
  for s in scene.spheres:
    sx, sy, sz, r = s
    out.append((hit_sphere, s, (sx - r, sx + r, sy - r, sy + r, sz - r, sz + r)))
  return out


def corners(bb):
  x0, x1, y0, y1, z0, z1 = bb
  return np.array([[x, y, z] for x in (x0, x1) for y in (y0, y1) for z in (z0, z1)], np.float64)


def screen_box(bb, rot, cfg, window: tuple[int, int, int, int]) -> tuple[int, int, int, int] | None:
  """The pixel rows and columns (r0, r1, c0, c1) of a camera window (top, left, h, w) that a solid's street-frame
  bounding box `bb` can cover, rot being `yaw_matrix(scene.yaw)` and cfg the pinhole (fx, fy, cx, cy); the whole
  window when the box straddles the plane z = 0.1 m; None when it lies behind it or projects outside the window."""
  top, left, h, w = window
  pc = corners(bb) @ rot  # street -> camera (rot is orthonormal)
  if np.all(pc[:, 2] > 0.1):
    us = cfg.fx * pc[:, 0] / pc[:, 2] + cfg.cx - left
    vs = cfg.fy * pc[:, 1] / pc[:, 2] + cfg.cy - top
    c0, c1 = max(int(math.floor(us.min())), 0), min(int(math.ceil(us.max())) + 1, w)
    r0, r1 = max(int(math.floor(vs.min())), 0), min(int(math.ceil(vs.max())) + 1, h)
    return None if c0 >= c1 or r0 >= r1 else (r0, r1, c0, c1)
  if np.all(pc[:, 2] <= 0.1):
    return None
  return 0, h, 0, w


def yaw_matrix(yaw):
  """Street-from-camera rotation about +y: d_street = d_cam @ R.T."""
  c, s = math.cos(yaw), math.sin(yaw)
  return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])
