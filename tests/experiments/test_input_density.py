"""The input density a model was trained on (`pncnn_jax.experiments.input_density`): measured on its own training
stream, in the train crop and in whole frames; a sparser training sensor gives a lower range; `stamp` writes it
into shipped manifests without touching anything else; every shipped manifest holds it, measured as it says."""

import json
import shutil

import pytest

from pncnn_jax import pretrained
from pncnn_jax.data import input_contract
from pncnn_jax.experiments import input_density, runs


def _config(sensors=""):
  config = runs.run_config(runs.RUNS_BY_NAME["ncnn"], "smoke")  # 32x64 train crops of 8 scenes
  with config.unlocked():
    config.data.sensors.train = sensors
  return config


def test_the_record_of_a_tiny_training_stream():
  record = input_density.measure(_config(), examples=6)
  assert record["measure"] == input_contract.DENSITY_MEASURE and record["examples"] == 6
  assert record["sensors"] == "native" and record["trained_on"] == "synthetic 64-beam LiDAR"
  crop, full = record["train_crop"], record["full_frame"]
  assert crop["size"] == [32, 64] and full["size"] == [352, 1216]
  for part in (crop, full):
    assert 0 < part["p1"] <= part["median"] <= part["p99"] < 1
  assert record["low"] == min(crop["p1"], full["p1"]) and record["high"] == max(crop["p99"], full["p99"])
  assert 0.05 < full["median"] < 0.07  # a 64-beam LiDAR's whole frame: about 6 % (a real KITTI frame: 6.1 %)
  thin = input_density.measure(_config("thin4"), examples=6)  # every 4th laser: a 16-beam LiDAR
  assert thin["sensors"] == "thin4" and thin["trained_on"] == "synthetic, sensors 'thin4'"
  # Whole frames: a quarter of the lasers, about a quarter of the density. (A 32x64 crop holds only one or two of
  # its lines, whose own rows are all the span: the measure needs a window of several lines.)
  assert 0.2 < thin["full_frame"]["median"] / full["median"] < 0.3
  assert thin["full_frame"]["p99"] < full["p1"]
  with pytest.raises(ValueError, match="examples must be at least 2"):
    input_density.measure(_config(), examples=1)


def test_stamp_adds_the_record_and_keeps_the_rest(tmp_path, capsys):
  """Two shipped models of one training stream (the same seed and data): measured once, written into both
  manifests; every other field and the weights as they were."""
  d = tmp_path / "synthetic"
  d.mkdir()
  names = ["ncnn", "ncnn_conf_l1"]
  for n in names:
    for suffix in (".npz", ".json"):
      shutil.copy(pretrained.ROOT / "synthetic" / f"{n}{suffix}", d)
  before = {n: json.loads((d / f"{n}.json").read_text()) for n in names}
  weights = {n: (d / f"{n}.npz").read_bytes() for n in names}
  lines = []
  done = input_density.stamp(d, examples=3, log=lines.append)
  assert sorted(done) == names and done["ncnn"] == done["ncnn_conf_l1"] and done["ncnn"]["examples"] == 3
  assert lines[1] == "[ncnn_conf_l1] the same training stream as a model above", lines
  for n in names:
    after = json.loads((d / f"{n}.json").read_text())
    assert after == {**before[n], "input_density": done[n]}
    assert (d / f"{n}.npz").read_bytes() == weights[n]
  assert sorted(p.name for p in d.iterdir()) == sorted(f"{n}{s}" for n in names for s in (".json", ".npz"))
  assert input_density.main([str(d), "--only", "nope"]) == 2
  assert "error: --only nope: not in" in capsys.readouterr().err
  assert input_density.main([str(tmp_path / "none")]) == 2


@pytest.mark.parametrize("name", pretrained.available("synthetic"))
def test_every_shipped_manifest_records_its_input_density(name):
  manifest = pretrained.load(f"synthetic:{name}")[1]
  record = manifest["input_density"]
  assert record["measure"] == input_contract.DENSITY_MEASURE and record["examples"] == input_density.EXAMPLES
  assert record["train_crop"]["size"] == [64, 320] and record["full_frame"]["size"] == [352, 1216]
  mixture = (manifest["config"]["data"].get("sensors") or {}).get("train")
  if mixture is None:  # the synthetic 64-beam LiDAR
    assert record["sensors"] == "native" and record["trained_on"] == "synthetic 64-beam LiDAR"
    assert 0.05 < record["low"] < record["full_frame"]["median"] < 0.07 < 0.08 < record["train_crop"]["median"] < \
        record["high"] < 0.12
  else:  # a mix of sensors (lidar_mix): from visual-odometry points (0.05-0.5 %) to the 64-beam LiDAR's crops
    assert record["sensors"] == mixture and record["trained_on"] == f"synthetic, sensors '{mixture}'"
    assert 0.0005 < record["low"] < 0.005 < record["full_frame"]["median"] < record["train_crop"]["median"] < 0.08 < \
        record["high"] < 0.12


def test_the_recommended_models_record_is_what_its_stream_measures():
  """The first 16 examples of its training stream (of the 256 the manifest's record rests on) lie within the
  record's percentiles, in the crop and in whole frames: the record was measured on this stream, this way."""
  manifest = pretrained.load("synthetic:sparse_var_beta_detach_masked")[1]
  import ml_collections  # pylint: disable=g-import-not-at-top
  again = input_density.measure(ml_collections.ConfigDict(manifest["config"]), examples=16)
  record = manifest["input_density"]
  for part in ("train_crop", "full_frame"):
    assert record[part]["p1"] <= again[part]["p1"] <= again[part]["p99"] <= record[part]["p99"], part
