r"""LiDAR point clouds and their calibration -> the sparse depth map the networks take (numpy only).

  depth = sparse_depth_from_files("0000000005.bin", "2011_09_26/", camera="02")   # (375, 1242) metres, 0 = none
  depth = project_points(points, K, T_cam_from_lidar, (H, W))

The projection (`project_points`), for a point p = (x, y, z) in the LiDAR frame [m]:

    (X, Y, Z) = R p + t                   T_cam_from_lidar = [[R, t], [0, 1]] (4x4): LiDAR -> camera frame
    u = fx X / Z + s Y / Z + cx           (u, v, 1) ~ K (X, Y, Z): pixel coordinates, the centre of the top-left
    v = fy Y / Z + cy                     pixel at (0, 0), u to the right, v down (OpenCV's and KITTI's convention)
    pixel (row, column) = (round(v), round(u)); depth there = Z

A point is kept when Z > 0 (in front of the camera) and its rounded pixel lies inside the H x W image; where
several points fall on one pixel, the nearest (smallest Z) is kept, as a LiDAR return occludes what lies behind
it. The depth is Z, the distance along the optical axis (the networks' and KITTI's depth), not the range |p|.
Points with a non-finite coordinate are dropped (no measurement, as in the input contract,
`pncnn_jax.data.input_contract`); the readers (`read_points`) refuse a scan whose ranges are not metres.

Source of the formulas: the KITTI raw-data development kit, `run_demoVelodyne.m` (matlab/), which projects a
Velodyne scan into camera `cam` with `P_velo_to_img = P_rect{cam+1} * R_cam_to_rect * Tr_velo_to_cam`
(R_cam_to_rect = R_rect_00 padded to 4x4, Tr_velo_to_cam = [R T] of calib_velo_to_cam.txt) and `project.m`
(u = p1/p3, v = p2/p3). The demo draws the continuous coordinates and drops points with x_velo < 5 m "(an
approximation)" for display; for a depth map we keep every point with Z > 0 and take the pixel as round(u),
round(v) on 0-based pixel indices. Some ports subtract 1 after rounding "to match the MATLAB code" (monodepth2's
`kitti_utils.generate_depth_map`); on the real frame below that agrees with KITTI's own `velodyne_raw` on 6.8 %
of its pixels against 32.6 % for round(u), and floor(u) on 21.3 %, so round(u) without the shift is what KITTI's
depth-completion data uses. P_rect_0X = K_rect [I | b] carries the stereo baseline b, so a KITTI camera here is
K = P_rect_0X[:, :3] and T_cam_from_lidar = [I, K^-1 P_rect_0X[:, 3]] R_rect_00 Tr_velo_to_cam: the same pixels
and the same third homogeneous coordinate (the depth) as the devkit's 3x4 product.

Agreement with KITTI's `velodyne_raw` (2011_09_26_drive_0001_sync, frame 5, image_02; the scan and calibration
in ../shared/data/kitti_raw_mini, docs/deploy/sensors.md): 19,137 pixels against velodyne_raw's 19,154; 32.6 % of
velodyne_raw's pixels hold a point of ours at the same pixel (median depth difference 3.3 cm there), 85.5 % within
one pixel and 96.8 % within two (depth within 5 %; `depth_agreement`). The offsets are along the rows (the scan
direction): KITTI's benchmark inputs were produced by code that is not public and, by these offsets, moves points
along the sweep (the vehicle moves during the 0.1 s rotation), which the devkit's formulas do not do.

Readers:
  KITTI raw      `.bin` scans: float32 (x, y, z, reflectance) records, metres (`read_points`); the calibration is
                 the date folder's `calib_cam_to_cam.txt` and `calib_velo_to_cam.txt` (pass the folder or either
                 file); cameras '02' (left colour) and '03' (right colour), their rectified image size S_rect_0X.
  numpy          `.npy` of shape (N, 3) or (N, 4) (x, y, z[, anything]) in metres, LiDAR frame.
  YAML / JSON    a small calibration file (`.yaml`, `.yml`, `.json`), `read_calibration`:
                   K: [[fx, 0, cx], [0, fy, cy], [0, 0, 1]]     # 3x3 (or 9 numbers, row-major), pixels
                   T_cam_from_lidar: [[r11, r12, r13, tx], ...]  # 4x4 or 3x4 (or 16 / 12 numbers), metres
                   image_size: [H, W]                            # optional when `image_size` is passed
                 or several cameras, one chosen by `camera`:
                   cameras: {front: {K: ..., T_cam_from_lidar: ..., image_size: ...}, rear: {...}}

Errors are one-line ValueError / FileNotFoundError messages naming the file or argument.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import numpy as np

from pncnn_jax.data import input_contract
from pncnn_jax.runtime.cli import first_line

KITTI_CAMERAS = ("02", "03")  # the colour cameras of KITTI raw (00 and 01 are grayscale, not used by the benchmark)
CAM_TO_CAM, VELO_TO_CAM = "calib_cam_to_cam.txt", "calib_velo_to_cam.txt"
CALIB_SUFFIXES = (".yaml", ".yml", ".json")
POINT_SUFFIXES = (".bin", ".npy")
RIGID_TOLERANCE = 1e-3  # |R R^T - I| and |det R - 1| of a calibration's rotation


@dataclasses.dataclass(frozen=True)
class Calibration:
  """One camera's calibration against the LiDAR.

  Attributes:
    K: (3, 3) float64 intrinsics [pixels]: [[fx, s, cx], [0, fy, cy], [0, 0, 1]].
    T_cam_from_lidar: (4, 4) float64 rigid transform, LiDAR frame -> camera frame (x right, y down, z forward),
      translation in metres.
    image_size: (H, W) in pixels, or None when the file gives none.
  """

  K: np.ndarray
  T_cam_from_lidar: np.ndarray
  image_size: tuple[int, int] | None


def project_points(points: np.ndarray, K: np.ndarray, T_cam_from_lidar: np.ndarray,
                   image_size: tuple[int, int]) -> np.ndarray:
  """Projects LiDAR points into a sparse depth map (the module doc gives the equations and their source).

  Args:
    points: (N, 3) or (N, 4) in metres, LiDAR frame; a 4th column (reflectance, ...) is ignored. N may be 0.
    K: (3, 3) camera intrinsics [pixels].
    T_cam_from_lidar: (4, 4) rigid transform LiDAR -> camera [m].
    image_size: (H, W) of the depth map.

  Returns:
    (H, W) float32 depth Z [m] along the optical axis; 0 where no point projects; the nearest point per pixel.
  """
  pts = np.asarray(points)
  if pts.ndim != 2 or pts.shape[1] not in (3, 4) or not np.issubdtype(pts.dtype, np.number):
    raise ValueError(f"points: expected an (N, 3) or (N, 4) array of x, y, z[, reflectance] in metres, got "
                     f"{pts.dtype} {pts.shape}")
  K = _matrix("K", K, (3, 3))
  T = _rigid("T_cam_from_lidar", T_cam_from_lidar)
  h, w = _image_size("image_size", image_size)
  xyz = pts[:, :3].astype(np.float64)
  xyz = xyz[np.all(np.isfinite(xyz), axis=1)]
  cam = xyz @ T[:3, :3].T + T[:3, 3]  # (N, 3) camera frame
  cam = cam[cam[:, 2] > 0]
  uvw = cam @ K.T
  z = uvw[:, 2]  # = Z for K's last row (0, 0, 1)
  u = np.round(uvw[:, 0] / z)
  v = np.round(uvw[:, 1] / z)
  inside = (u >= 0) & (u < w) & (v >= 0) & (v < h)
  rows, cols, z = v[inside].astype(np.int64), u[inside].astype(np.int64), z[inside]
  depth = np.full(h * w, np.inf)
  np.minimum.at(depth, rows * w + cols, z)  # nearest return per pixel
  depth[np.isinf(depth)] = 0.0
  return depth.reshape(h, w).astype(np.float32)


def depth_agreement(ours: np.ndarray, ref: np.ndarray, radius: int = 2, rel: float = 0.05) -> float:
  """How well two sparse depth maps of one scan agree, allowing for projection differences: the fraction of `ref`'s
  pixels (depth > 0) with a pixel of `ours` within `radius` pixels (Chebyshev distance) holding a depth within `rel`
  of `ref`'s, |d_ours - d_ref| <= rel d_ref (the module doc's agreement with KITTI's velodyne_raw: 85.5 % at
  radius 1, 96.8 % at radius 2).

  Args:
    ours, ref: (H, W) depth maps [m] of one shape, 0 = no point.
    radius: the largest pixel offset, >= 0 (0: the same pixel).
    rel: the largest relative depth difference, >= 0.

  Returns:
    The fraction in [0, 1]; NaN when `ref` has no point.
  """
  a, b = np.asarray(ours), np.asarray(ref)
  if a.ndim != 2 or a.shape != b.shape:
    raise ValueError(f"depth_agreement: expected two (H, W) depth maps of one shape, got {a.shape} and {b.shape}")
  if int(radius) != radius or radius < 0 or not rel >= 0:
    raise ValueError(f"depth_agreement: radius must be an integer >= 0 and rel a number >= 0, got {radius}, {rel}")
  radius = int(radius)
  h, w = b.shape
  hit = np.zeros(b.shape, bool)
  pad = np.pad(a, radius)
  for dv in range(-radius, radius + 1):
    for du in range(-radius, radius + 1):
      o = pad[radius + dv:radius + dv + h, radius + du:radius + du + w]
      hit |= (o > 0) & (np.abs(o - b) <= rel * b)
  return float(hit[b > 0].mean()) if np.any(b > 0) else float("nan")


def read_points(path: str | os.PathLike) -> np.ndarray:
  """A point cloud file -> (N, 3 or 4) float32 [m]: KITTI `.bin` (float32 x, y, z, reflectance records) or `.npy`
  ((N, 3) or (N, 4) numbers).

  The points must be in metres: their ranges |p| pass the input contract's units check
  (`pncnn_jax.data.input_contract.check_point_ranges`: none beyond 1000 m, a median of at least 5 cm), else a
  one-line ValueError names the file and what the numbers look like (a scan in millimetres, say)."""
  p = pathlib.Path(path)
  if not p.is_file():
    raise FileNotFoundError(f"points {p}: no such file")
  if p.suffix == ".bin":
    size = p.stat().st_size
    if size % 16:
      raise ValueError(f"points {p}: {size} bytes is not a whole number of KITTI records (4 float32: x, y, z, "
                       f"reflectance = 16 bytes)")
    a = np.fromfile(p, dtype="<f4").reshape(-1, 4)
    input_contract.check_point_ranges(a, name=f"points {p}")
    return a
  if p.suffix == ".npy":
    try:
      a = np.load(p, allow_pickle=False)
    except (ValueError, OSError) as e:
      raise ValueError(f"points {p}: not a readable .npy array ({first_line(e)})") from None
    if a.ndim != 2 or a.shape[1] not in (3, 4) or not (np.issubdtype(a.dtype, np.floating)
                                                        or np.issubdtype(a.dtype, np.integer)):
      raise ValueError(f"points {p}: expected an (N, 3) or (N, 4) array of x, y, z[, reflectance] in metres, got "
                       f"{a.dtype} {a.shape}")
    input_contract.check_point_ranges(a, name=f"points {p}")  # before float32 could round a value to inf
    return a.astype(np.float32)
  raise ValueError(f"points {p}: unknown format {p.suffix!r}; expected one of {', '.join(POINT_SUFFIXES)}")


@dataclasses.dataclass(frozen=True)
class KittiCamera:
  """One KITTI raw camera as its calibration files give it (`read_kitti_camera`).

  Attributes:
    P_rect: (3, 4) float64 P_rect_0X [pixels]: projects the rectified reference frame (camera 00's, rectified) into
      camera X's rectified image; its 4th column holds the stereo baseline (K_rect b).
    R_rect: (4, 4) float64 R_rect_00 padded to 4x4: camera 00's frame -> the rectified reference frame.
    Tr_velo_to_cam: (4, 4) float64 [R T] of calib_velo_to_cam.txt: the Velodyne frame -> camera 00's frame [m].
    image_size: (H, W) of the rectified image, S_rect_0X.
  """

  P_rect: np.ndarray
  R_rect: np.ndarray
  Tr_velo_to_cam: np.ndarray
  image_size: tuple[int, int]

  @property
  def T_rect_from_lidar(self) -> np.ndarray:
    """(4, 4) R_rect_00 @ Tr_velo_to_cam: the Velodyne frame -> the rectified reference frame that P_rect projects
    from [m] (a ROS CameraInfo's P and this transform project a scan as the devkit does)."""
    return self.R_rect @ self.Tr_velo_to_cam


def read_kitti_camera(path: str | os.PathLike, camera: str = "02") -> KittiCamera:
  """P_rect_0X, R_rect_00 Tr_velo_to_cam and S_rect_0X of `camera` ('02' or '03') from a KITTI raw date folder (or
  either of its two files), checked: one-line errors naming the file for a missing file, camera or row."""
  p = pathlib.Path(path)
  folder = p if p.is_dir() else p.parent
  if camera not in KITTI_CAMERAS:
    raise ValueError(f"calibration {folder}: no camera {camera!r} (KITTI raw has the colour cameras "
                     f"{', '.join(KITTI_CAMERAS)})")
  c2c = _kitti_file(folder / CAM_TO_CAM)
  v2c = _kitti_file(folder / VELO_TO_CAM)
  need = [f"P_rect_{camera}", "R_rect_00", f"S_rect_{camera}"]
  missing = [k for k in need if k not in c2c]
  if missing:
    raise ValueError(f"calibration {folder / CAM_TO_CAM}: no {', '.join(missing)} (camera {camera!r} not in it)")
  if "R" not in v2c or "T" not in v2c:
    raise ValueError(f"calibration {folder / VELO_TO_CAM}: expected the rows 'R:' (9 numbers) and 'T:' (3)")
  P = _matrix(f"{folder / CAM_TO_CAM} P_rect_{camera}", c2c[f"P_rect_{camera}"], (3, 4))
  _intrinsics(f"{folder / CAM_TO_CAM} P_rect_{camera}", P[:, :3])
  r_rect = np.eye(4)
  r_rect[:3, :3] = _matrix(f"{folder / CAM_TO_CAM} R_rect_00", c2c["R_rect_00"], (3, 3))
  velo = np.eye(4)
  velo[:3, :3] = _matrix(f"{folder / VELO_TO_CAM} R", v2c["R"], (3, 3))
  velo[:3, 3] = _matrix(f"{folder / VELO_TO_CAM} T", v2c["T"], (3,))
  w, h = _matrix(f"{folder / CAM_TO_CAM} S_rect_{camera}", c2c[f"S_rect_{camera}"], (2,))
  size = _image_size(f"{folder / CAM_TO_CAM} S_rect_{camera}", (h, w))
  return KittiCamera(P_rect=P, R_rect=r_rect, Tr_velo_to_cam=velo, image_size=size)


def read_kitti_calibration(path: str | os.PathLike, camera: str = "02") -> Calibration:
  """KITTI raw calibration of `camera` ('02' or '03') from a date folder (or either of its two files).

  K = P_rect_0X[:, :3]; T_cam_from_lidar = [I, K^-1 P_rect_0X[:, 3]] @ R_rect_00 (4x4) @ Tr_velo_to_cam, where
  Tr_velo_to_cam = [R T] of calib_velo_to_cam.txt; image_size = S_rect_0X (W, H in the file) as (H, W).
  """
  cam = read_kitti_camera(path, camera)
  K = cam.P_rect[:, :3]
  baseline = np.eye(4)
  baseline[:3, 3] = np.linalg.solve(K, cam.P_rect[:, 3])
  return Calibration(K=K, T_cam_from_lidar=baseline @ cam.R_rect @ cam.Tr_velo_to_cam, image_size=cam.image_size)


def read_calibration(path: str | os.PathLike, camera: str | None = None) -> Calibration:
  """A calibration file or folder -> `Calibration`: KITTI raw (a folder, or calib_cam_to_cam.txt /
  calib_velo_to_cam.txt; `camera` '02' by default) or YAML / JSON (the module doc's schema; `camera` picks one
  of its `cameras:`, None the only one; a file without `cameras:` is one camera and ignores `camera`)."""
  p = pathlib.Path(path)
  if not p.exists():
    raise FileNotFoundError(f"calibration {p}: no such file or folder")
  if p.is_dir() or p.name in (CAM_TO_CAM, VELO_TO_CAM):
    return read_kitti_calibration(p, "02" if camera is None else camera)
  data, where = _calibration_entry(p, camera, ("K", "T_cam_from_lidar"))
  K = _intrinsics(f"{where} K", _matrix(f"{where} K", _numbers(f"{where} K", data["K"]), (3, 3)))
  size = data.get("image_size")
  return Calibration(K=K, T_cam_from_lidar=_transform(where, data["T_cam_from_lidar"]),
                     image_size=None if size is None else _image_size(f"{where} image_size", size))


def read_transform(path: str | os.PathLike, camera: str | None = None) -> np.ndarray:
  """T_cam_from_lidar (4, 4) from a YAML / JSON calibration (the module doc's schema, where K and image_size may
  then be left out: the ROS bag converter takes them from the CameraInfo messages)."""
  p = pathlib.Path(path)
  if not p.is_file():
    raise FileNotFoundError(f"calibration {p}: no such file")
  data, where = _calibration_entry(p, camera, ("T_cam_from_lidar",))
  return _transform(where, data["T_cam_from_lidar"])


def _calibration_entry(p: pathlib.Path, camera: str | None, required: tuple[str, ...]) -> tuple[dict, str]:
  """The mapping of one camera in a YAML / JSON calibration file, and how to name it in messages."""
  if p.suffix.lower() not in CALIB_SUFFIXES:
    raise ValueError(f"calibration {p}: unknown format; expected a KITTI folder ({CAM_TO_CAM}, {VELO_TO_CAM}) or a "
                     f"{', '.join(CALIB_SUFFIXES)} file")
  text = p.read_text(errors="replace")
  try:
    if p.suffix.lower() == ".json":
      data = json.loads(text)
    else:
      import yaml  # pylint: disable=g-import-not-at-top  (PyYAML: a dependency of flax)
      data = yaml.safe_load(text)
  except Exception as e:  # noqa: BLE001  (json and yaml parse errors differ; both become one line)
    raise ValueError(f"calibration {p}: not valid {p.suffix[1:].upper()} ({first_line(e)})") from None
  if not isinstance(data, dict):
    raise ValueError(f"calibration {p}: expected a mapping with {', '.join(required)}")
  where = f"calibration {p}"
  if "cameras" in data:
    cams = data["cameras"]
    if not isinstance(cams, dict) or not cams:
      raise ValueError(f"calibration {p}: 'cameras' must map camera names to calibrations")
    cams = {str(k): v for k, v in cams.items()}
    name = next(iter(cams)) if camera is None and len(cams) == 1 else camera
    if name not in cams:
      raise ValueError(f"calibration {p}: no camera {name!r} (it has {', '.join(map(str, cams))})")
    data, where = cams[name], f"calibration {p} camera {name!r}"
    if not isinstance(data, dict):
      raise ValueError(f"{where}: expected a mapping with {', '.join(required)}")
  missing = [k for k in required if k not in data]
  if missing:
    raise ValueError(f"{where}: no {' and '.join(missing)}")
  unknown = sorted(set(data) - {"K", "T_cam_from_lidar", "image_size"}, key=str)
  if unknown:
    raise ValueError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; expected K, T_cam_from_lidar, "
                     f"image_size")
  return data, where


def _transform(where: str, value) -> np.ndarray:
  """T_cam_from_lidar given as 4x4 or 3x4 (nested or flat, row-major) -> a checked (4, 4) rigid transform."""
  T = np.asarray(_numbers(f"{where} T_cam_from_lidar", value))
  if T.size == 12:
    T = np.vstack([T.reshape(3, 4), [0.0, 0.0, 0.0, 1.0]])
  return _rigid(f"{where} T_cam_from_lidar", T.reshape(4, 4) if T.size == 16 else T)


def sparse_depth_from_files(points_path: str | os.PathLike, calib_path: str | os.PathLike, camera: str | None = "02",
                            image_size: tuple[int, int] | None = None) -> np.ndarray:
  """A point cloud file and its calibration -> (H, W) float32 sparse depth [m], 0 = no measurement.

  Args:
    points_path: KITTI `.bin` or `.npy` points (`read_points`).
    calib_path: a KITTI date folder (or one of its calib files), or a YAML / JSON calibration (`read_calibration`).
    camera: the camera: '02' or '03' for KITTI; a name under `cameras:` for YAML / JSON (a file without
      `cameras:` describes one camera and ignores it; None takes the only camera of a `cameras:` file).
    image_size: (H, W); overrides the calibration's size (required when the calibration gives none).
  """
  points = read_points(points_path)
  p = pathlib.Path(calib_path)
  calib = read_calibration(p, camera)
  size = calib.image_size if image_size is None else _image_size("image_size", image_size)
  if size is None:
    raise ValueError(f"calibration {p}: no image_size; pass the image size (H, W)")
  return project_points(points, calib.K, calib.T_cam_from_lidar, size)


def _kitti_file(path: pathlib.Path) -> dict[str, list[float]]:
  """'key: numbers' lines of a KITTI calibration file (lines whose values are not numbers, e.g. calib_time, are
  skipped)."""
  if not path.is_file():
    raise FileNotFoundError(f"calibration {path}: no such file (a KITTI calibration needs {CAM_TO_CAM} and "
                            f"{VELO_TO_CAM} in one folder)")
  out = {}
  for line in path.read_text(errors="replace").splitlines():
    key, sep, value = line.partition(":")
    if not sep:
      continue
    try:
      out[key.strip()] = [float(x) for x in value.split()]
    except ValueError:
      continue
  return out


def _numbers(what: str, value) -> np.ndarray:
  try:
    a = np.asarray(value, dtype=np.float64)
  except (TypeError, ValueError):
    raise ValueError(f"{what}: expected numbers, got {str(value)[:60]!r}") from None
  if not np.all(np.isfinite(a)):
    raise ValueError(f"{what}: holds non-finite numbers")
  return a


def _matrix(what: str, value, shape: tuple[int, ...]) -> np.ndarray:
  a = _numbers(what, value)
  if a.shape != shape:
    if a.size != int(np.prod(shape)):
      raise ValueError(f"{what}: expected {'x'.join(map(str, shape))} numbers, got shape {a.shape}")
    a = a.reshape(shape)
  return a


def _intrinsics(what: str, K: np.ndarray) -> np.ndarray:
  if not (np.allclose(K[2], [0.0, 0.0, 1.0]) and K[1, 0] == 0 and K[0, 0] > 0 and K[1, 1] > 0):
    raise ValueError(f"{what}: expected [[fx, s, cx], [0, fy, cy], [0, 0, 1]] with fx, fy > 0, got "
                     f"{np.round(K, 4).tolist()}")
  return K


def _rigid(what: str, T) -> np.ndarray:
  T = _matrix(what, T, (4, 4))
  R = T[:3, :3]
  if (not np.allclose(T[3], [0.0, 0.0, 0.0, 1.0]) or np.abs(R @ R.T - np.eye(3)).max() > RIGID_TOLERANCE
      or abs(np.linalg.det(R) - 1) > RIGID_TOLERANCE):
    raise ValueError(f"{what}: not a rigid transform [[R, t], [0, 0, 0, 1]] with R a rotation (R R^T = I, det R = 1 "
                     f"within {RIGID_TOLERANCE:g})")
  return T


def _image_size(what: str, size) -> tuple[int, int]:
  try:
    h, w = (int(s) for s in size)
    ok = all(float(s) == int(s) for s in size)
  except (TypeError, ValueError):
    raise ValueError(f"{what}: expected (H, W), got {size!r}") from None
  if not ok or h < 1 or w < 1:
    raise ValueError(f"{what}: expected two positive integers (H, W), got {size!r}")
  return h, w
