"""LiDAR points + calibration -> sparse depth (`pncnn_jax.data.points`): the real KITTI scan against an independent
computation of the devkit's formulas, its agreement with KITTI's velodyne_raw, the projection's rules on
hand-made points, the YAML / JSON route, and one-line errors."""

import json

import numpy as np
import pytest
import yaml
from PIL import Image

from pncnn_jax.data import points

from conftest import DATA

RAW = DATA / "kitti_raw_mini" / "2011_09_26"
SCAN = RAW / "2011_09_26_drive_0001_sync" / "velodyne_points" / "data" / "0000000005.bin"
VELODYNE_RAW = (DATA / "kitti_depth_mini" / "train" / "2011_09_26_drive_0001_sync" / "proj_depth" / "velodyne_raw"
                / "image_02" / "0000000005.png")


@pytest.fixture(scope="module")
def kitti():
  if not SCAN.is_file():  # as the reference files: missing shared data fails, it does not pass unseen
    pytest.fail(f"{SCAN} not found: the real-scan tests need ../shared/data/kitti_raw_mini (set PNCNN_SHARED)")
  return RAW


def _devkit_depth(folder, scan, cam: int) -> np.ndarray:
  """The devkit's run_demoVelodyne.m written out again, independently of pncnn_jax: P_velo_to_img =
  P_rect{cam+1} R_cam_to_rect Tr_velo_to_cam on homogeneous points, u = p1/p3, v = p2/p3, pixel = round; kept:
  p3 > 0 and inside S_rect; the smallest p3 per pixel."""
  def parse(path):
    out = {}
    for line in path.read_text().splitlines():
      key, _, val = line.partition(":")
      try:
        out[key] = np.array(val.split(), dtype=np.float64)
      except ValueError:
        pass
    return out
  c2c, v2c = parse(folder / "calib_cam_to_cam.txt"), parse(folder / "calib_velo_to_cam.txt")
  tr = np.vstack([np.hstack([v2c["R"].reshape(3, 3), v2c["T"][:, None]]), [0, 0, 0, 1]])
  r_cam_to_rect = np.eye(4)
  r_cam_to_rect[:3, :3] = c2c["R_rect_00"].reshape(3, 3)
  p_velo_to_img = c2c[f"P_rect_0{cam}"].reshape(3, 4) @ r_cam_to_rect @ tr
  width, height = c2c[f"S_rect_0{cam}"].astype(int)
  velo = np.fromfile(scan, dtype=np.float32).reshape(-1, 4).astype(np.float64)
  p = np.hstack([velo[:, :3], np.ones((len(velo), 1))]) @ p_velo_to_img.T
  p = p[p[:, 2] > 0]
  u, v, z = np.round(p[:, 0] / p[:, 2]), np.round(p[:, 1] / p[:, 2]), p[:, 2]
  ok = (u >= 0) & (v >= 0) & (u < width) & (v < height)
  u, v, z = u[ok].astype(int), v[ok].astype(int), z[ok]
  order = np.lexsort((z, v * width + u))  # by pixel, then by depth: the first of each pixel is the nearest
  flat = (v * width + u)[order]
  first = np.r_[True, flat[1:] != flat[:-1]]
  depth = np.zeros(height * width)
  depth[flat[first]] = z[order][first]
  return depth.reshape(height, width)


@pytest.mark.parametrize("cam", [2, 3])
def test_kitti_scan_equals_the_devkit_formulas(kitti, cam):
  depth = points.sparse_depth_from_files(SCAN, kitti, camera=f"0{cam}")
  ref = _devkit_depth(kitti, SCAN, cam)
  assert depth.shape == ref.shape == (375, 1242) and depth.dtype == np.float32
  np.testing.assert_array_equal(depth > 0, ref > 0)
  np.testing.assert_allclose(depth, ref, rtol=1e-6, atol=0)
  assert 18_000 < (depth > 0).sum() < 20_500 and 0 < depth[depth > 0].min() and depth.max() < 120


def test_kitti_scan_against_velodyne_raw(kitti):
  """KITTI's own velodyne_raw of the same frame: about as many pixels, a third at the same pixel, nearly all within
  two pixels (along the rows; the numbers are in the module doc and docs/deploy/sensors.md)."""
  if not VELODYNE_RAW.is_file():
    pytest.fail(f"{VELODYNE_RAW} not found: the test needs ../shared/data/kitti_depth_mini (set PNCNN_SHARED)")
  raw = np.asarray(Image.open(VELODYNE_RAW), np.float64) / 256.0
  ours = points.sparse_depth_from_files(SCAN, kitti).astype(np.float64)
  n_raw, n_ours = int((raw > 0).sum()), int((ours > 0).sum())
  assert (n_raw, n_ours) == (19154, 19137)
  same = (raw > 0) & (ours > 0)
  assert round(same.sum() / n_raw, 3) == 0.326
  assert abs(np.median(np.abs(ours - raw)[same]) - 0.033) < 0.001
  assert round(points.depth_agreement(ours, raw, 1), 3) == 0.855
  assert round(points.depth_agreement(ours, raw, 2), 3) == 0.968
  # The rounding variants the module doc compares: round(u) - 1 (monodepth2) and floor(u) agree less.
  calib = points.read_calibration(kitti)
  pts = points.read_points(SCAN)
  shifted = points.project_points(pts, _shift(-1.0) @ calib.K, calib.T_cam_from_lidar, calib.image_size)
  assert ((raw > 0) & (shifted > 0)).sum() / n_raw < 0.1


def _shift(pixels: float) -> np.ndarray:
  """A pixel translation (u, v) += pixels, as a matrix applied to K's output (S @ K)."""
  return np.array([[1.0, 0.0, pixels], [0.0, 1.0, pixels], [0.0, 0.0, 1.0]])


K = np.array([[10.0, 0.0, 2.0], [0.0, 10.0, 1.0], [0.0, 0.0, 1.0]])


def test_projection_rules_on_hand_made_points():
  """Camera frame = LiDAR frame (T = I), a 3 x 5 image, K with fx = fy = 10, (cx, cy) = (2, 1)."""
  pts = np.array([
      [0.0, 0.0, 5.0, 0.7],     # (u, v) = (2, 1): depth 5 (4th column ignored)
      [0.0, 0.0, 3.0, 0.1],     # the same pixel, nearer: kept
      [0.0, 0.0, 8.0, 0.9],     # the same pixel, farther: hidden
      [0.049, 0.0, 1.0, 0.0],   # u = 2.49 -> 2, v = 1 ... same pixel at 1 m: the nearest of all
      [-0.249, 0.0, 1.0, 0.0],  # u = -0.49 -> column 0 (inside)
      [-0.251, 0.0, 1.0, 0.0],  # u = -0.51 -> column -1: outside
      [0.2449, 0.0, 1.0, 0.0],  # u = 4.449 -> column 4 (the last)
      [0.2551, 0.0, 1.0, 0.0],  # u = 4.551 -> column 5: outside
      [0.12, 0.11, 2.0, 0.0],   # (u, v) = (2.6, 1.55) -> (3, 2)
      [0.0, 0.0, -5.0, 0.0],    # behind the camera
      [0.0, 0.0, 0.0, 0.0],     # on the camera plane (z = 0): dropped
      [np.nan, 0.0, 4.0, 0.0],  # not finite: dropped
  ])
  depth = points.project_points(pts, K, np.eye(4), (3, 5))
  want = np.zeros((3, 5), np.float32)
  want[1, 2], want[1, 0], want[1, 4], want[2, 3] = 1.0, 1.0, 1.0, 2.0
  np.testing.assert_array_equal(depth, want)
  # (N, 3) input, a translation and a rotation: T moves the LiDAR's x-forward frame to the camera's z-forward one.
  T = np.array([[0.0, -1.0, 0.0, 0.0], [0.0, 0.0, -1.0, 0.0], [1.0, 0.0, 0.0, 0.5], [0.0, 0.0, 0.0, 1.0]])
  depth = points.project_points(np.array([[4.5, 0.0, 0.0]]), K, T, (3, 5))  # 4.5 m ahead -> Z = 5, centre
  assert depth[1, 2] == 5.0 and (depth > 0).sum() == 1
  assert not points.project_points(np.zeros((0, 3)), K, np.eye(4), (3, 5)).any()


@pytest.mark.parametrize("fmt", ["yaml", "json", "npy-3", "cameras"])
def test_npy_points_with_yaml_or_json_calibration_equal_the_kitti_route(kitti, tmp_path, fmt):
  calib = points.read_calibration(kitti, "03")
  entry = {"K": calib.K.tolist(), "T_cam_from_lidar": calib.T_cam_from_lidar[:3].ravel().tolist(),
           "image_size": list(calib.image_size)}
  pts = points.read_points(SCAN)
  np.save(tmp_path / "scan.npy", pts[:, :3] if fmt == "npy-3" else pts)
  if fmt == "json":
    (tmp_path / "calib.json").write_text(json.dumps(entry))
    path = tmp_path / "calib.json"
  else:
    data = {"cameras": {"front": {"K": entry["K"]}, "right": entry}} if fmt == "cameras" else entry
    (tmp_path / "calib.yaml").write_text(yaml.safe_dump(data))
    path = tmp_path / "calib.yaml"
  got = points.sparse_depth_from_files(tmp_path / "scan.npy", path, camera="right" if fmt == "cameras" else "02")
  np.testing.assert_array_equal(got, points.sparse_depth_from_files(SCAN, kitti, camera="03"))
  # image_size overrides the calibration's: the top-left part of the same projection.
  small = points.sparse_depth_from_files(tmp_path / "scan.npy", path, camera="right" if fmt == "cameras" else "02",
                                         image_size=(300, 1000))
  np.testing.assert_array_equal(small, got[:300, :1000])


def _bad_kitti(tmp_path, kitti, drop: str):
  folder = tmp_path / "calib"
  folder.mkdir()
  text = (kitti / "calib_cam_to_cam.txt").read_text()
  (folder / "calib_cam_to_cam.txt").write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith(drop)))
  (folder / "calib_velo_to_cam.txt").write_text((kitti / "calib_velo_to_cam.txt").read_text())
  return folder


@pytest.mark.parametrize("case, message", [
    ("no P_rect_03", "no P_rect_03"),
    ("camera 01", "no camera '01'"),
    ("points (N, 5)", "expected an (N, 3) or (N, 4) array"),
    ("points .bin of 17 bytes", "not a whole number of KITTI records"),
    ("points .txt", "unknown format '.txt'"),
    ("missing points", "no such file"),
    ("yaml without K", "no K"),
    ("yaml not rigid", "not a rigid transform"),
    ("yaml unknown camera", "no camera 'rear' (it has front)"),
    ("yaml without size", "no image_size"),
    ("yaml garbled", "not valid YAML"),
    ("calib .txt", "unknown format"),
])
def test_bad_inputs_are_one_line_naming_the_file(kitti, tmp_path, case, message):
  pts, calib, camera = SCAN, kitti, "02"
  good = {"K": K.tolist(), "T_cam_from_lidar": np.eye(4).tolist(), "image_size": [3, 5]}
  yml = tmp_path / "c.yaml"
  if case == "no P_rect_03":
    calib, camera = _bad_kitti(tmp_path, kitti, "P_rect_03"), "03"
  elif case == "camera 01":
    camera = "01"
  elif case.startswith("points"):
    pts = tmp_path / ("p.npy" if "N, 5" in case else "p.bin" if ".bin" in case else "p.txt")
    if pts.suffix == ".npy":
      np.save(pts, np.zeros((4, 5), np.float32))
    else:
      pts.write_bytes(b"\0" * 17)
  elif case == "missing points":
    pts = tmp_path / "none.bin"
  elif case == "calib .txt":
    calib = tmp_path / "c.txt"
    calib.write_text("K: 1")
  else:
    data = dict(good)
    if case == "yaml without K":
      del data["K"]
    elif case == "yaml not rigid":
      data["T_cam_from_lidar"] = (2 * np.eye(4)).tolist()
    elif case == "yaml unknown camera":
      data, camera = {"cameras": {"front": good}}, "rear"
    elif case == "yaml without size":
      del data["image_size"]
    yml.write_text("K: [1, 2\n" if case == "yaml garbled" else yaml.safe_dump(data))
    calib = yml
    np.save(tmp_path / "p.npy", np.ones((4, 3), np.float32))
    pts = tmp_path / "p.npy"
  with pytest.raises((ValueError, FileNotFoundError)) as e:
    points.sparse_depth_from_files(pts, calib, camera=camera)
  text = str(e.value)
  assert message in text and "\n" not in text, text
  named = pts if case.startswith("points") or case == "missing points" else calib
  assert str(named) in text, text


def test_scans_that_are_not_metres_are_refused_naming_the_file(kitti, tmp_path):
  """The real scan in millimetres (a .bin whose records are x1000) or a kilometre .npy projected into sparse depth
  of thousands of metres or of centimetres without a word: `read_points` checks the ranges |p| with the input
  contract (none beyond 1000 m, a median of at least 5 cm) and names the file and what the numbers look like."""
  scan = points.read_points(SCAN)  # metres: passes
  ranges = np.linalg.norm(scan[:, :3].astype(np.float64), axis=1)
  assert ranges.max() < 130 and np.median(ranges[ranges > 0]) > 5
  mm = tmp_path / "mm.bin"
  (scan * np.array([1000, 1000, 1000, 1], np.float32)).astype("<f4").tofile(mm)
  with pytest.raises(ValueError) as e:
    points.sparse_depth_from_files(mm, kitti)
  assert str(e.value).startswith(f"points {mm}: ranges up to ") and "looks like millimetres (x 0.001: " in str(e.value)
  assert str(e.value).endswith("; point coordinates must be in metres") and "\n" not in str(e.value)
  km = tmp_path / "km.npy"
  np.save(km, scan[:, :3].astype(np.float64) / 1000)
  with pytest.raises(ValueError, match=r"^points .*km\.npy: median range 0\.0\d+ m .*looks like kilometres"):
    points.read_points(km)
  huge = tmp_path / "huge.npy"
  np.save(huge, np.full((4, 3), 1e300))  # float64 beyond float32: refused, not rounded to inf and dropped
  with pytest.raises(ValueError, match=r"^points .*huge\.npy: ranges up to 1\.732e\+300 m"):
    points.read_points(huge)
