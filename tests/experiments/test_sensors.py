"""Behaviour across sensors (pncnn_jax.experiments.sensors): the generator's thinned LiDAR and the page's command."""

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


def test_the_command_writes_the_table_with_ratios_to_64_beams_and_checks_the_targets(tmp_path, capsys):
  out = tmp_path / "SENSORS.md"
  assert sensors.main(["--output", str(out), "--models", "ncnn,masked=synthetic:pncnn_masked", "--recommended",
                       "masked", "--sensors", "thin4,vo_015", "--num_scenes", "2", "--crop", "64x96"]) == 0
  page = out.read_text()
  table = page.split("## Targets of the sensor-robust model")[0]
  rows = [line.split(" | ") for line in table.splitlines() if line.startswith(("| ncnn |", "| masked |"))]
  assert [r[:2] for r in rows] == [["| ncnn", s] for s in ("hdl64", "thin4", "vo_015")] + [
      ["| masked", s] for s in ("hdl64", "thin4", "vo_015")]  # the reference row first
  assert "×)" in rows[1][3] and rows[0][-4] == "-"  # ratios; NCNN has no sigma: no coverage
  data = json.loads(out.with_suffix(".json").read_text())
  got = data["results"]["masked"]
  assert list(got) == ["hdl64", "thin4", "vo_015"]
  assert got["hdl64"]["density"] > got["thin4"]["density"] > got["vo_015"]["density"] > 0
  assert got["thin4"]["mae_ratio"] == pytest.approx(got["thin4"]["mae"] / got["hdl64"]["mae"])
  targets = page.split("## Targets of the sensor-robust model")[1]
  assert "| masked | hdl64 | 64 beams | - |" in targets and "| ncnn |" not in targets  # only models with sigma
  verdict = "holds" if got["thin4"]["mae_ratio"] <= 1.6 else "misses"
  assert f"| masked | thin4 | 16 beams | {got['thin4']['mae_ratio']:.2f}x (<= 1.6: {verdict}) |" in targets
  assert sensors.main(["--output", str(out), "--sensors", "sonar"]) == 2
  assert "error: --sensors: unknown sensor or sensor mixture 'sonar'" in capsys.readouterr().err
