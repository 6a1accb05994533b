"""Sensor transforms and mixtures (`pncnn_jax.data.sensors`) and their use in the pipeline: dropout keeps its
fraction, VO points their density, outliers and noise what they say; a mixture's draws are reproducible per (seed,
index) and cover its members; synthetic, KITTI and NYU examples get the drawn sensor, NYU refuses what a depth
camera cannot do; bad values are one line."""

import collections

import numpy as np
import pytest

from pncnn_jax.data import io, make_iterator, pipeline, sensors

from conftest import DATA

KITTI_DRIVE = DATA / "kitti_depth_mini" / "train" / "2011_09_26_drive_0001_sync" / "proj_depth"
NYU = DATA / "nyu_mini" / "depth" / "sync_depth_00050.png"


def _binomial_ok(k: int, n: int, p: float, z: float = 5.0) -> bool:
  """k within z standard deviations of Binomial(n, p)'s mean."""
  return abs(k - n * p) <= z * np.sqrt(n * p * (1 - p)) + 1


@pytest.mark.parametrize("keep", [0.05, 0.3, 0.77, 1.0])
def test_dropout_keeps_a_binomial_share_of_the_points(keep):
  rng = np.random.default_rng(1)
  sparse = np.where(rng.random((96, 320, 1)) < 0.05, rng.uniform(1, 80, (96, 320, 1)), 0).astype(np.float32)
  n = int((sparse > 0).sum())
  for seed in range(5):
    out = sensors.dropout(sparse, keep, np.random.default_rng(seed))
    assert out.shape == sparse.shape and out.dtype == np.float32
    assert np.all((out == 0) | (out == sparse))  # a subset, depths unchanged
    assert _binomial_ok(int((out > 0).sum()), n, keep), (keep, int((out > 0).sum()), n)
  np.testing.assert_array_equal(sensors.dropout(sparse, keep, np.random.default_rng(3)),
                                sensors.dropout(sparse, keep, np.random.default_rng(3)))


@pytest.mark.parametrize("density", [0.0005, 0.0015, 0.005])
def test_vo_points_have_their_density_on_the_surface(density):
  """VO points: density x pixels expected, drawn from where the surface has a depth, with its depth; 0.05-0.5 % of
  a 352x1216 frame is 214-2140 points."""
  rng = np.random.default_rng(0)
  surface = rng.uniform(2, 60, (352, 1216)).astype(np.float32)
  surface[:100] = 0  # sky: no surface, no point
  n = surface.size
  for seed in range(3):
    vo = sensors.vo_points(surface, density, np.random.default_rng(seed))
    k = int((vo > 0).sum())
    assert _binomial_ok(k, int((surface > 0).sum()), density * n / (surface > 0).sum()), (k, density * n)
    assert np.all((vo == 0) | (vo == surface)) and not np.any(vo[:100])


def test_outliers_and_noise():
  rng = np.random.default_rng(0)
  sparse = np.where(rng.random((128, 384)) < 0.05, rng.uniform(2, 80, (128, 384)), 0).astype(np.float32)
  n = int((sparse > 0).sum())
  out = sensors.add_outliers(sparse, 0.1, np.random.default_rng(1))
  np.testing.assert_array_equal(out > 0, sparse > 0)  # the same pixels, other depths
  moved = out != sparse
  assert _binomial_ok(int(moved.sum()), n, 0.1 * (1 - 1 / n))
  assert set(np.unique(out[moved])) <= set(np.unique(sparse[sparse > 0]))  # another point's depth
  assert np.mean(np.abs(out - sparse)[moved] > 1.0) > 0.9  # nearly all > 1 m off: 'disturbed' points
  np.testing.assert_array_equal(sensors.add_outliers(sparse, 0.0, rng), sparse)
  noisy = sensors.add_noise(sparse, 0.1, np.random.default_rng(2))
  err = (noisy - sparse)[sparse > 0]
  assert abs(err.std() - 0.1) < 0.005 and abs(err.mean()) < 0.005
  assert np.all(noisy[sparse == 0] == 0)


def test_draws_are_reproducible_and_cover_the_mixture():
  """One sensor per sample from the named mixture, by its weights (lidar_mix: 70 % the five presets, 20 % the same
  with dropout, 10 % VO), each preset about equally often; a function of the generator alone."""
  draws = [sensors.draw("lidar_mix", np.random.default_rng([7, i])) for i in range(3000)]
  assert draws == [sensors.draw("lidar_mix", np.random.default_rng([7, i])) for i in range(3000)]
  names = collections.Counter(d.name for d in draws)
  for name, weight in sensors.members("lidar_mix"):
    assert _binomial_ok(names[name], 3000, weight), (name, names[name])
  presets = collections.Counter(d.lidar for d in draws if d.source == "lidar")
  assert set(presets) == set(sensors.PRESETS)
  for p in sensors.PRESETS:
    assert _binomial_ok(presets[p], sum(presets.values()), 1 / 5)
  keeps = np.array([d.keep for d in draws if d.name == "lidar_any_dropout"])
  assert keeps.min() >= 0.05 and keeps.max() <= 1.0 and abs(keeps.mean() - 0.525) < 0.05
  vo = np.array([d.vo_density for d in draws if d.source == "vo"])
  assert vo.min() >= 0.0005 and vo.max() <= 0.005 and abs(np.median(vo) - np.sqrt(0.0005 * 0.005)) < 0.0005
  assert sensors.draw("vlp16", np.random.default_rng(0)).lidar == "vlp16"  # a sensor is a mixture of one


SMALL = dict(dataset="synthetic", split="train", crop="random", crop_height=32, crop_width=96, batch_size=4,
             seed=0, synthetic_size=8, num_threads=1)


def test_synthetic_pipeline_draws_one_sensor_per_example_reproducibly():
  cfg = dict(SMALL, sensors="lidar_mix", num_epochs=2)
  a, b = list(make_iterator(cfg)), list(make_iterator(cfg))
  for x, y in zip(a, b):
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])
  plain = list(make_iterator(dict(SMALL, num_epochs=2)))
  for x, y in zip(a, plain):
    np.testing.assert_array_equal(x["name"], y["name"])  # the same order and scenes ...
    np.testing.assert_array_equal(x["target"], y["target"])  # ... and the same ground truth, whatever the sensor
    s, d = x["sparse"], x["dense"]
    np.testing.assert_array_equal(x["disturbed"], (s > 0) & ((d == 0) | (np.abs(s - d) > 1.0)))
  drawn = [str(n) for x in a for n in x["sensor"]]
  assert len(set(drawn)) > 1 and set(drawn) <= {"lidar_any", "lidar_any_dropout", "vo"}
  other_seed = [str(n) for x in make_iterator(dict(cfg, seed=1)) for n in x["sensor"]]
  assert drawn != other_seed


def test_synthetic_native_sensor_is_the_default_stream():
  """The 'native' sensor through the mixture machinery gives the published examples (plus their sensor name)."""
  a = next(make_iterator(dict(SMALL, sensors="native")))
  b = next(make_iterator(SMALL))
  for k in b:
    np.testing.assert_array_equal(a[k], b[k])
  assert a["sensor"].tolist() == ["native"] * 4


def test_synthetic_outliers_are_labelled_disturbed():
  a = next(make_iterator(dict(SMALL, crop="center", crop_height=128, crop_width=384, sensors="noisy", seed=3)))
  b = next(make_iterator(dict(SMALL, crop="center", crop_height=128, crop_width=384, seed=3)))
  assert a["disturbed"].mean() > b["disturbed"].mean()  # outliers (0-5 %) on top of the bleed-through points


def _kitti_record():
  raw = io.read_png_uint16(KITTI_DRIVE / "velodyne_raw" / "image_02" / "0000000005.png")
  gt = io.read_png_uint16(KITTI_DRIVE / "groundtruth" / "image_02" / "0000000005.png")
  return {"sparse": raw[..., None], "target": gt[..., None], "name": b"2011_09_26_drive_0001_sync/image_02/5"}


def test_kitti_map_thins_its_scans_and_draws_vo_from_the_ground_truth():
  rec = _kitti_record()
  full = rec["sparse"][..., 0] / 256.0
  base = dict(dataset="kitti_depth", split="train", crop="none", data_dir="unused")
  K, T = pipeline.kitti_camera(*full.shape)
  n_lasers = sensors.depth_laser_ids(full, K, T).max() + 1
  for name, every in (("thin2", 2), ("thin4", 4)):
    m = pipeline.DATASETS["kitti_depth"].make_map(pipeline.DataConfig(**base, sensors=name))
    ex = m.random_map(rec, np.random.default_rng(0))
    s = ex["sparse"][..., 0]
    assert np.all((s == 0) | (s == full)) and str(ex["sensor"]) == name
    assert sensors.depth_laser_ids(s, K, T).max() + 1 == -(-n_lasers // every)
  m = pipeline.DATASETS["kitti_depth"].make_map(pipeline.DataConfig(**base, sensors="vo"))
  ex = m.random_map(rec, np.random.default_rng(0))
  s, t = ex["sparse"], ex["target"]
  assert np.all((s == 0) | (s == t)) and 0.0005 * 0.5 < (s > 0).mean() < 0.005 * 1.5


def test_nyu_takes_dropout_vo_and_noise_and_refuses_lasers():
  depth = io.read_nyu_depth(NYU)
  rec = {"depth": depth[..., None], "name": b"scene/00050"}
  base = dict(dataset="nyu_depth", split="val", crop="none", data_dir="unused")
  m = pipeline.DATASETS["nyu_depth"].make_map(pipeline.DataConfig(**base, sensors="depth_camera_mix"))
  counts = collections.Counter()
  for i in range(12):
    ex = m.random_map(rec, np.random.default_rng([0, i]))
    s = ex["sparse"]
    assert np.all((s == 0) | (s == ex["target"]))
    counts[str(ex["sensor"])] += 1
  assert set(counts) == {"native", "dropout", "vo"}, counts
  for name, what in (("lidar_mix", r"sensor 'lidar_any' has source 'lidar', which nyu_depth cannot make"),
                     ("thin2", r"sensor 'thin2' thins lasers \(every=2\), but nyu_depth is a dense depth camera"),
                     ("recorded_mix", r"sensor 'thin2' thins lasers")):
    with pytest.raises(ValueError, match=rf"^sensors '{name}': {what}"):
      pipeline.DataConfig(**base, sensors=name).validate()
  with pytest.raises(ValueError, match=r"sensor 'hdl32' has source 'lidar', which kitti_depth cannot make \(only "
                                       r"the synthetic scenes render LiDAR presets\)"):
    pipeline.DataConfig(dataset="kitti_depth", split="train", data_dir="unused", sensors="hdl32").validate()


def test_bad_values_are_one_line():
  rng = np.random.default_rng(0)
  for keep in (0.0, 1.5, -0.2):
    with pytest.raises(ValueError, match=rf"^keep \(the share of points kept\) must be a fraction in \(0, 1\], "
                                         rf"got {keep}$"):
      sensors.dropout(np.ones((4, 4)), keep, rng)
  with pytest.raises(ValueError, match=r"^sensor 'bad': keep must be a range \(lo, hi\) with lo <= hi, each a "
                                       r"keep fraction in \(0, 1\], got \(0.0, 1.0\)$"):
    sensors.register_sensor("bad", sensors.Sensor(keep=(0.0, 1.0)))
  with pytest.raises(ValueError, match=r"^unknown LiDAR preset 'hdl128'; valid names: hdl32, hdl64, os1_128, "
                                       r"os1_32, vlp16$"):
    sensors.register_sensor("bad", sensors.Sensor(source="lidar", lidars=("hdl128",)))
  with pytest.raises(ValueError, match=r"^sensor 'bad': every=3 does not divide the 64 beams of 'hdl64'$"):
    sensors.register_sensor("bad", sensors.Sensor(source="lidar", every=3))
  with pytest.raises(ValueError, match=r"^unknown sensor or sensor mixture 'radar'; valid names: depth_camera_mix, "
                                       r"dropout, hdl32, hdl64, lidar_any, lidar_any_dropout, lidar_mix, native, "):
    make_iterator(dict(SMALL, sensors="radar"))
  with pytest.raises(ValueError, match=r"^density \(the fraction of the pixels\) must be a fraction in \(0, 1\]"):
    sensors.vo_points(np.ones((4, 4)), 2.0, rng)
  with pytest.raises(ValueError, match=r"^sensor mixture 'lidar_mix': the name is taken by a mixture"):
    sensors.register_mixture("lidar_mix", (("hdl64", 1.0),))
  assert "bad" not in sensors.names()
