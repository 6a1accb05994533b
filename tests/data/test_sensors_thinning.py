"""Thinning recorded LiDAR data to every k-th laser (`pncnn_jax.data.sensors`): the real KITTI scan by scan order and
by elevation, its projected depth maps by pitch binning (ours and KITTI's own velodyne_raw), the synthetic HDL-64E
against the generator's 32- and 16-beam renders, and one-line errors.

The real-data tests fail, not skip, without ../shared/data (as the parity tests do without the reference files)."""

import numpy as np
import pytest

from pncnn_jax.data import io, pipeline, points, sensors, synthetic

from conftest import DATA

RAW = DATA / "kitti_raw_mini" / "2011_09_26"
SCAN = RAW / "2011_09_26_drive_0001_sync" / "velodyne_points" / "data" / "0000000005.bin"
VELODYNE_RAW = (DATA / "kitti_depth_mini" / "train" / "2011_09_26_drive_0001_sync" / "proj_depth" / "velodyne_raw"
                / "image_02" / "0000000005.png")
OTHER_DAY = DATA / "kitti_extra_2011_10_03" / "lidar.png"


@pytest.fixture(scope="module")
def scan():
  for p in (SCAN, VELODYNE_RAW, OTHER_DAY):
    if not p.is_file():
      pytest.fail(f"{p} not found: the real-scan tests need ../shared/data (set PNCNN_SHARED)")
  return points.read_points(SCAN)


@pytest.fixture(scope="module")
def lasers(scan):
  return {m: sensors.laser_ids(scan, m) for m in ("scan_order", "elevation")}


def test_real_scan_has_64_lasers_by_scan_order_and_by_elevation(scan, lasers):
  """KITTI's .bin holds one laser's revolution after another, top laser first (each row starts facing forward):
  scan order finds the HDL-64E's 64 lasers, and so does clustering the elevations (each laser a line el = a + b /
  range: the HDL-64E's lasers sit 0.12-0.21 m off its origin); the two agree on all but a handful of points."""
  so, el = lasers["scan_order"], lasers["elevation"]
  assert len(np.unique(so)) == len(np.unique(el)) == 64
  assert np.sum(so != el) <= 10
  assert np.all(np.diff(so) >= 0)  # the file's rows, top laser first
  xyz = scan[:, :3].astype(np.float64)
  e = np.degrees(np.arctan2(xyz[:, 2], np.hypot(xyz[:, 0], xyz[:, 1])))
  med = np.array([np.median(e[so == k]) for k in range(64)])
  assert np.all(np.diff(med) < 0)  # ranked from the top
  np.testing.assert_allclose([med[0], med[-1]], [2.49, -23.62], atol=0.05)  # the HDL-64E's field, as measured
  assert np.array_equal(sensors.laser_ids(scan), so)  # 'auto' takes the scan order of a .bin


@pytest.mark.parametrize("every,want", [(1, 64), (2, 32), (4, 16)])
def test_thinned_real_scan_has_a_half_and_a_quarter_of_the_lasers(scan, lasers, every, want):
  """Every k-th laser from the top: the kept points are a subset of the scan (its rows, in order), the lasers
  recovered on the thinned scan, by either method, number 64 / k, and about 1 / k of the points remain."""
  for method in ("scan_order", "elevation"):
    thin = sensors.thin_points(scan, every, method)
    kept = lasers[method] % every == 0
    np.testing.assert_array_equal(thin, scan[kept])  # a subset, in the file's order
    for m in ("scan_order", "elevation"):
      assert len(np.unique(sensors.laser_ids(thin, m))) == want, (method, m)
    assert abs(len(thin) / len(scan) - 1 / every) < 0.03


@pytest.fixture(scope="module")
def calib(scan):
  return points.read_kitti_calibration(RAW, "02")


@pytest.mark.parametrize("every", [2, 4])
def test_pitch_binning_of_the_projected_scan_equals_projecting_the_thinned_scan(scan, calib, every):
  """The depth map route (back-project with K, into the LiDAR frame, cluster the elevations) against the point
  route (thin the scan by its rows, then project): the same pixels but where two lasers met on one pixel."""
  full = points.project_points(scan, calib.K, calib.T_cam_from_lidar, calib.image_size)
  ids = sensors.depth_laser_ids(full, calib.K, calib.T_cam_from_lidar)
  assert ids.max() + 1 == 46 and np.array_equal(ids >= 0, full > 0)  # 46 of the 64 lasers cross the image
  thin = sensors.thin_depth(full, every, calib.K, calib.T_cam_from_lidar)
  ref = points.project_points(sensors.thin_points(scan, every, "scan_order"), calib.K, calib.T_cam_from_lidar,
                              calib.image_size)
  assert np.all((thin == 0) | (thin == full))  # a subset of the full map, depths unchanged
  assert np.mean((thin > 0) == (ref > 0)) > 0.9999
  assert np.sum((thin > 0) & (ref > 0)) > 0.995 * (ref > 0).sum()


@pytest.mark.parametrize("every", [2, 4])
def test_kitti_velodyne_raw_thinned_by_pitch_binning(scan, calib, every):
  """KITTI's own velodyne_raw moves near points by 1-3 rows (docs/deploy/sensors.md), which smears its lower rings;
  its thinned map still lies where the thinned scan projects as closely as velodyne_raw lies on the full scan's
  projection (96.8 % within 2 px), and keeps about 1 / k of its pixels."""
  raw = io.read_kitti_depth(VELODYNE_RAW)
  ids = sensors.depth_laser_ids(raw, calib.K, calib.T_cam_from_lidar)
  assert ids.max() + 1 == 46
  full = points.project_points(scan, calib.K, calib.T_cam_from_lidar, calib.image_size)
  ref = points.project_points(sensors.thin_points(scan, every, "scan_order"), calib.K, calib.T_cam_from_lidar,
                              calib.image_size)
  thin = sensors.thin_depth(raw, every, calib.K, calib.T_cam_from_lidar)
  assert np.all((thin == 0) | (thin == raw))
  assert abs((thin > 0).sum() / (raw > 0).sum() - 1 / every) < 0.02
  baseline = points.depth_agreement(full, raw)
  assert points.depth_agreement(ref, thin) >= baseline - 0.01, (points.depth_agreement(ref, thin), baseline)
  dropped = np.where(thin > 0, 0, raw)
  assert points.depth_agreement(ref, dropped) < 0.03  # what was dropped is not where the kept lasers are


def test_pipeline_camera_of_another_day_finds_the_same_lasers(scan):
  """`pipeline.kitti_camera` (the 2011_09_26 calibration) on a 2011_10_03 frame (another focal length and
  principal point): the elevations shift, the lasers found stay the image's 46."""
  raw = io.read_kitti_depth(OTHER_DAY)
  ids = sensors.depth_laser_ids(raw, *pipeline.kitti_camera(*raw.shape))
  assert ids.max() + 1 == 46


@pytest.mark.parametrize("index", [0, 3])
def test_synthetic_hdl64_thinned_equals_the_generators_32_and_16_beams(index):
  """Pitch binning of the synthetic HDL-64E frame keeps exactly the pixels of the generator's every-2nd / every-4th
  laser render (`SyntheticConfig.lidar_beams`, same scan), but where a dropped laser's nearer return hid them."""
  cfg = synthetic.SyntheticConfig()
  full = synthetic.generate(0, index, stream=2)["sparse"][..., 0]
  for every, beams in ((2, 32), (4, 16)):
    ref = synthetic.generate(0, index, synthetic.SyntheticConfig(lidar_beams=beams), stream=2)["sparse"][..., 0]
    thin = sensors.thin_depth(full, every, *pipeline.kitti_camera(cfg.height, cfg.width))
    np.testing.assert_array_equal(thin[thin > 0], ref[thin > 0])
    assert (thin > 0).sum() >= 0.995 * (ref > 0).sum()


def test_bad_input_is_one_line():
  rng = np.random.default_rng(0)
  flat = np.c_[rng.uniform(-20, 20, (500, 2)), np.full(500, -1.7)]  # a planar scan: one elevation per range
  ring = np.c_[np.cos(np.linspace(0, 6, 500)), np.sin(np.linspace(0, 6, 500)), np.zeros(500)] * 10.0
  for bad in (ring, ring + [0.0, 0.0, 1e-3]):
    with pytest.raises(ValueError, match=r"^points: no elevation spread \(the points' elevation angles span "
                                         r"0\.0\d\d deg, under 0\.1 deg\)"):
      sensors.thin_points(bad, 2)
  with pytest.raises(ValueError, match="points: no elevation spread"):
    sensors.laser_ids(np.c_[flat[:, :2], np.zeros(500)])
  with pytest.raises(ValueError, match=r"every must be a positive integer .*, got 0"):
    sensors.thin_points(flat, 0)
  with pytest.raises(ValueError, match=r"method must be 'auto', 'scan_order' or 'elevation', got 'rows'"):
    sensors.laser_ids(flat, "rows")
  with pytest.raises(ValueError, match=r"points: expected an \(N, 3\) or \(N, 4\) array"):
    sensors.laser_ids(np.zeros((5, 2)))
  with pytest.raises(ValueError, match=r"points: not in scan order .* use method='elevation'"):
    sensors.laser_ids(rng.permutation(np.c_[flat[:, :2], rng.uniform(-3, 1, 500)]), "scan_order")
  with pytest.raises(ValueError, match=r"depth: no elevation spread"):
    d = np.zeros((64, 64))
    d[32, 10:50] = 10.0  # one row of points: one laser
    sensors.thin_depth(d, 2, np.array([[700.0, 0, 32], [0, 700.0, 32], [0, 0, 1]]))
  np.testing.assert_array_equal(sensors.thin_depth(np.zeros((8, 8, 1), np.float32), 2, np.eye(3)), 0)  # no points
  with pytest.raises(ValueError, match=r"K: expected a 3x3 intrinsics matrix"):
    sensors.depth_laser_ids(np.ones((8, 8)), np.eye(2))
