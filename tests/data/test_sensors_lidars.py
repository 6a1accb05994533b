"""LiDAR presets (`pncnn_jax.data.sensors.LIDARS`) and the synthetic generator rendering each: the rays reproduce the
datasheet's beams, field and azimuth step; in the image, the lasers recovered by pitch binning are the preset's; the
points per frame scale with the lasers in view over the azimuth step; the mount height moves the LiDAR."""

import math

import numpy as np
import pytest

from pncnn_jax.data import pipeline, sensors, synthetic

# The datasheet numbers (pncnn_jax/data/sensors.py's table): beams, (top, bottom) of the vertical field [deg],
# azimuth step [deg], mount height [m]. Written out here, not read from the module, so a changed preset fails.
DATASHEET = {
    "hdl64": (64, (2.4, -24.0), 0.175, 1.73),
    "hdl32": (32, (10.67, -30.67), 0.16, 1.84),
    "vlp16": (16, (15.0, -15.0), 0.2, 1.73),
    "os1_32": (32, (22.5, -22.5), 360 / 1024, 1.73),
    "os1_128": (128, (22.5, -22.5), 360 / 2048, 1.73),
}


def test_presets_are_the_datasheets():
  assert set(DATASHEET) <= set(sensors.LIDARS) and sensors.PRESETS == tuple(DATASHEET)
  for name, (beams, field, step, mount) in DATASHEET.items():
    lid = sensors.lidar(name)
    assert (lid.beams, lid.azimuth_step_deg, lid.mount_height_m) == (beams, pytest.approx(step), mount), name
    np.testing.assert_allclose(lid.field_deg, field, atol=1e-9)
    assert np.all(np.diff(lid.elevations_deg) < 0), name  # top laser first
  # The evenly spaced ones: HDL-32E 1.333 deg, VLP-16 2 deg, OS1 45 deg over beams - 1 gaps.
  for name, spacing in (("hdl32", 41.34 / 31), ("vlp16", 2.0), ("os1_32", 45 / 31), ("os1_128", 45 / 127)):
    np.testing.assert_allclose(-np.diff(sensors.lidar(name).elevations_deg), spacing, atol=1e-9)
  np.testing.assert_array_equal(sensors.lidar("hdl64").elevations_deg, synthetic.HDL64_ELEVATIONS_DEG)


@pytest.mark.parametrize("name", list(DATASHEET))
def test_rendered_rays_have_the_presets_beams_field_and_azimuth_step(name):
  """The generator's rays, turned back into the LiDAR frame: as many distinct elevations as beams, spanning the
  preset's field, one azimuth step apart."""
  beams, (top, bottom), step, _ = DATASHEET[name]
  d_cam, az = synthetic._lidar_rays(sensors.lidar(name), step)  # pylint: disable=protected-access
  d_lidar = d_cam @ synthetic.LIDAR_ROTATION  # R^T d
  el = np.degrees(np.arcsin(np.clip(d_lidar[..., 2], -1, 1)))
  assert d_cam.shape == (beams, len(az), 3)
  assert np.ptp(el, axis=1).max() < 1e-5  # one elevation per beam, at every azimuth
  distinct = np.unique(np.round(el[:, 0], 4))
  assert len(distinct) == beams
  np.testing.assert_allclose([distinct.max(), distinct.min()], [top, bottom], atol=1e-4)
  np.testing.assert_allclose(np.diff(az), step, rtol=1e-9)


def _visible_elevations(lid, cfg):
  """The preset's elevations inside the camera's vertical field as seen from the LiDAR (its rays' directions)."""
  top = math.degrees(math.atan(cfg.cy / cfg.fy))
  bottom = -math.degrees(math.atan((cfg.height - 1 - cfg.cy) / cfg.fy))
  return [e for e in lid.elevations_deg if bottom < e < top]


@pytest.fixture(scope="module")
def frames():
  """Scene 0 of the test split, full frame, seen by each preset."""
  return {name: synthetic.generate(0, 0, synthetic.SyntheticConfig(lidar=name), stream=2) for name in DATASHEET}


@pytest.mark.parametrize("name", list(DATASHEET))
def test_lasers_in_the_image_are_the_presets(frames, name):
  """Pitch binning of the rendered image: each laser found sits at one of the preset's elevations (the synthetic
  lasers have no vertical offset: within pixel rounding), distinct lasers at distinct elevations, a contiguous band
  of them that holds every preset laser between -14 and 0 deg (road, cars, facades: always hit)."""
  cfg = synthetic.SyntheticConfig(lidar=name)
  lid = sensors.lidar(name)
  sparse = frames[name]["sparse"][..., 0]
  K, T = pipeline.kitti_camera(cfg.height, cfg.width)
  dh = lid.mount_height_m - sensors.lidar("hdl64").mount_height_m
  T[1, 3] -= dh  # the preset's mount
  ids = sensors.depth_laser_ids(sparse, K, T)
  v, u = np.nonzero(sparse > 0)
  cam = sparse[v, u][:, None] * (np.stack([u, v, np.ones_like(u)], 1) @ np.linalg.inv(K).T)
  q = (cam - T[:3, 3]) @ T[:3, :3]
  el = np.degrees(np.arctan2(q[:, 2], np.hypot(q[:, 0], q[:, 1])))
  table = np.asarray(lid.elevations_deg)
  found = []
  for k in range(ids.max() + 1):
    e = np.median(el[ids[v, u] == k])
    j = int(np.argmin(np.abs(table - e)))
    assert abs(table[j] - e) < 0.06, (k, e, table[j])
    found.append(j)
  assert found == list(range(found[0], found[0] + len(found))), found  # distinct, contiguous, top first
  must = [j for j, e in enumerate(table) if -14.0 <= e <= 0.0]
  assert set(must) <= set(found)
  assert len(found) <= len(_visible_elevations(lid, cfg)) + 1


def test_points_per_frame_scale_with_the_lasers_in_view_over_the_azimuth_step(frames):
  """Against hdl64 (the default): a preset's returns in the image go as (lasers in the camera's vertical field) /
  (azimuth step), within 25 % (upper lasers miss the sky more often than the road)."""
  cfg = synthetic.SyntheticConfig()
  density = lambda n: len(_visible_elevations(sensors.lidar(n), cfg)) / sensors.lidar(n).azimuth_step_deg  # noqa
  points = {n: int((f["sparse"] > 0).sum()) for n, f in frames.items()}
  for name in DATASHEET:
    want = density(name) / density("hdl64")
    got = points[name] / points["hdl64"]
    assert 0.75 * want < got < 1.25 * want, (name, got, want)
  assert points["os1_32"] < points["vlp16"] < points["hdl32"] < points["hdl64"] < points["os1_128"], points


def test_same_scene_camera_and_ground_truth_for_every_preset(frames):
  ref = frames["hdl64"]
  default = synthetic.generate(0, 0, stream=2)  # SyntheticConfig() is hdl64
  for k in ("sparse", "target", "dense", "disturbed"):
    np.testing.assert_array_equal(ref[k], default[k])
  for name, f in frames.items():
    for k in ("target", "dense", "valid"):
      np.testing.assert_array_equal(f[k], ref[k], err_msg=f"{name} {k}")
    s, d = f["sparse"], f["dense"]
    np.testing.assert_array_equal(f["disturbed"], (s > 0) & ((d == 0) | (np.abs(s - d) > 1.0)))


def test_mount_height_moves_the_lidar(frames):
  """hdl32 is mounted 11 cm higher (nuScenes' roof): its road returns lie at its elevations seen from the raised
  origin, and 0.1-1 deg off them from the HDL-64E's."""
  f = frames["hdl32"]
  road = (f["sparse"][..., 0] > 0) & (np.abs(f["sparse"][..., 0] - f["dense"][..., 0]) < 0.05)
  v, u = np.nonzero(road)
  cfg = synthetic.SyntheticConfig()
  K, T = pipeline.kitti_camera(cfg.height, cfg.width)
  z = f["sparse"][v, u, 0]
  cam = z[:, None] * (np.stack([u, v, np.ones_like(u)], 1) @ np.linalg.inv(K).T)
  near = z < 15.0
  table = np.asarray(sensors.lidar("hdl32").elevations_deg)
  off = {}
  for name, origin in (("raised", T[:3, 3] - [0.0, 1.84 - 1.73, 0.0]), ("kitti", T[:3, 3])):
    q = (cam[near] - origin) @ T[:3, :3]
    el = np.degrees(np.arctan2(q[:, 2], np.hypot(q[:, 0], q[:, 1])))
    off[name] = np.median(np.min(np.abs(el[:, None] - table[None, :]), axis=1))
  assert off["raised"] < 0.05 < 0.1 < off["kitti"], off


def test_bad_presets_are_one_line_errors():
  with pytest.raises(ValueError, match=r"unknown LiDAR preset 'hdl128'; valid names: hdl32, hdl64, os1_128, "
                                       r"os1_32, vlp16"):
    synthetic.generate(0, 0, synthetic.SyntheticConfig(lidar="hdl128"), window=(144, 448, 32, 64))
  with pytest.raises(ValueError, match=r"lidar_beams must be None or a divisor of the 16 beams of 'vlp16' "
                                       r"\(16, 8, 4, 2, 1\), got 32"):
    synthetic.SyntheticConfig(lidar="vlp16", lidar_beams=32).resolved()
  with pytest.raises(ValueError, match="elevations_deg must be decreasing"):
    sensors.register_lidar("upside_down", sensors.Lidar((-1.0, 1.0), 0.2, 1.7, "test"))
