"""Behaviour across sensors (pncnn_jax.experiments.sensors): the simulated sensors and the page's command."""

import json

import numpy as np
import pytest

from pncnn_jax.data import synthetic
from pncnn_jax.experiments import sensors


def test_fewer_beams_keep_every_other_laser_of_the_same_scan():
  """32 and 16 beams: about 1/2 and 1/4 of the 64-beam returns, the same scene and ground truth; the kept beams'
  returns are the 64-beam scan's (same noise and dropouts): every 16-beam return is a 32-beam return where no
  nearer return of a dropped beam hid it, so almost all of them coincide exactly."""
  window = (112, 416, 128, 384)
  ex = {b: synthetic.generate(0, 3, synthetic.SyntheticConfig(lidar_beams=b), window=window, stream=2)
        for b in (64, 32, 16)}
  n = {b: int((e["sparse"] > 0).sum()) for b, e in ex.items()}
  assert 0.4 < n[32] / n[64] < 0.6 and 0.4 < n[16] / n[32] < 0.6, n
  np.testing.assert_array_equal(ex[16]["target"], ex[64]["target"])
  np.testing.assert_array_equal(ex[16]["dense"], ex[64]["dense"])
  both = (ex[16]["sparse"] > 0) & (ex[32]["sparse"] > 0)
  assert both.sum() >= 0.95 * n[16]
  assert np.mean(ex[16]["sparse"][both] == ex[32]["sparse"][both]) > 0.95
  with pytest.raises(ValueError, match=r"lidar_beams must be None or a divisor of the 64 beams of 'hdl64' "
                                       r"\(64, 32, 16, 8, 4, 2, 1\), got 48"):
    synthetic.generate(0, 0, synthetic.SyntheticConfig(lidar_beams=48), window=window)


def test_visual_odometry_points_are_sparse_noisy_surface_points():
  b = sensors.sensor_batch("vo", [0, 1], (128, 384))
  assert b["sparse"].shape == (2, 128, 384, 1) and not b["disturbed"].any()
  density = np.mean(b["sparse"] > 0)
  assert 0.0008 < density < 0.0022, density  # VO_DENSITY of the pixels with a surface within range
  lidar = sensors.sensor_batch("lidar64", [0, 1], (128, 384))
  dense = np.stack([synthetic.generate(0, i, window=(112, 416, 128, 384), stream=2)["dense"] for i in (0, 1)])
  pts = b["sparse"] > 0
  assert np.abs(b["sparse"][pts] - dense[pts]).max() < 0.2  # 2 cm noise: within 10 sigma of the visible surface
  np.testing.assert_array_equal(b["target"], lidar["target"])
  with pytest.raises(ValueError, match="sensor must be one of"):
    sensors.sensor_batch("radar", [0], (64, 96))


def test_the_command_writes_the_table_with_ratios_to_the_training_sensor(tmp_path, capsys):
  out = tmp_path / "SENSORS.md"
  assert sensors.main(["--output", str(out), "--models", "ncnn", "--sensors", "lidar16,vo", "--num_scenes", "2",
                       "--crop", "64x96"]) == 0
  page = out.read_text()
  rows = [line for line in page.splitlines() if line.startswith("| ncnn |")]
  assert [r.split(" | ")[1] for r in rows] == ["lidar64", "lidar16", "vo"]  # the reference row first
  assert "x) |" in rows[1] and rows[0].endswith("| - |")  # ratios; NCNN has no sigma: no AUCE
  data = json.loads(out.with_suffix(".json").read_text())
  assert [r["sensor"] for r in data["rows"]] == ["lidar64", "lidar16", "vo"]
  assert data["rows"][0]["density"] > data["rows"][1]["density"] > data["rows"][2]["density"] > 0
  assert "- **ncnn** (trained sensor: MAE" in page
  assert sensors.main(["--output", str(out), "--sensors", "sonar"]) == 2
  assert "error: --sensors must be among" in capsys.readouterr().err
