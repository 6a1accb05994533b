"""Evaluation across sensors (pncnn_jax/evaluate/across_sensors.py, eval.py --sensors): the shipped masked pNCNN on 4
synthetic validation scenes (64 x 96), seen by the LiDAR it was trained on, thinned, rendered as other presets and as
visual-odometry points."""

import json
import subprocess
import sys

import numpy as np
import pytest

from pncnn_jax import evaluate, from_config
from pncnn_jax.checkpoints import loader
from pncnn_jax.evaluate import across_sensors, checkpoint

from conftest import REPO

SIZE = {"data.eval_synthetic_size": 4, "data.eval_crop_height": 64, "data.eval_crop_width": 96, "eval_batch_size": 2}


def _config():
  config = from_config.load_config(f"{REPO}/configs/synthetic.py:pncnn")
  with config.unlocked():
    for key, value in SIZE.items():
      *path, last = key.split(".")
      node = config
      for p in path:
        node = node[p]
      node[last] = value
  return config


@pytest.fixture(scope="module")
def across():
  config = _config()
  ckpt = loader.load("synthetic:pncnn_masked")
  model = ckpt.build_model()
  names = ["hdl64", "thin2", "thin4", "vlp16", "vo_015", "native"]
  return config, ckpt, model, across_sensors.evaluate_sensors(model, ckpt.variables, config, names)


def test_each_sensor_is_the_depth_evaluation_of_the_split_it_sees(across):
  config, ckpt, model, result = across
  assert list(result.rows) == ["hdl64", "thin2", "thin4", "vlp16", "vo_015", "native"]
  assert result.evaluator == "sensors" and result.header == "sensor" and result.reference == "hdl64"
  # hdl64 is the synthetic scenes' own LiDAR: 'native' (the published stream) gives the same numbers
  assert {k: v for k, v in result.rows["hdl64"].items()} == result.rows["native"]
  # each row is the depth evaluator's on that sensor's batches
  with config.unlocked():
    config.data.sensors.eval = "vlp16"
  alone = evaluate.run_evaluation(model, ckpt.variables, from_config.eval_iterator(config), loss_name=ckpt.loss)
  row = result.rows["vlp16"]
  for k in ("mae", "rmse", "ause_pncnn", "auce", "nll", "auroc_disturbed", "num_images"):
    assert row[k] == alone.summary()[k], k
  batches = list(from_config.eval_iterator(config))
  # the density predict states per frame: measurements over the rows they span
  per_image = [np.mean(s[slice(*np.flatnonzero(s.any(axis=1))[[0, -1]] + [0, 1])] > 0)
               for b in batches for s in b["sparse"][..., 0] > 0]
  assert row["density"] == pytest.approx(100 * np.mean(per_image), rel=1e-12)
  # coverage of mu +- 1.96 sigma, counted here from the model's outputs
  inside = valid = 0
  for b in batches:
    out = model.apply(ckpt.variables, b["sparse"])
    sigma = evaluate.sigma_of(np.asarray(out.confidence), ckpt.loss)
    v = b["target"] > 0
    err = np.abs(b["target"][v].astype(np.float64) - np.asarray(out.depth)[v])
    inside += int(np.sum(err <= 1.959963984540054 * sigma[v]))
    valid += int(v.sum())
  assert row["coverage_95"] == pytest.approx(100 * inside / valid, abs=100 * 2 / valid)  # a pixel on the edge


def test_fewer_lasers_fewer_points_and_the_ratios_are_to_the_reference(across):
  _, _, _, result = across
  rows = result.rows
  assert rows["hdl64"]["density"] > rows["thin2"]["density"] > rows["thin4"]["density"] > rows["vo_015"]["density"]
  assert rows["vo_015"]["density"] == pytest.approx(0.15, rel=0.3)  # 0.15 % of the pixels, where there is surface
  assert rows["vo_015"]["auroc_disturbed"] is None  # VO points have no disturbed label: nothing to rank
  for name, row in rows.items():
    for k in across_sensors.RATIO_KEYS:
      if row[k] is not None and rows["hdl64"][k] is not None:
        assert row[f"{k}_ratio"] == pytest.approx(row[k] / rows["hdl64"][k]), (name, k)
    assert row["nll_diff"] == pytest.approx(row["nll"] - rows["hdl64"]["nll"])
  assert rows["thin4"]["mae_ratio"] > 1.5  # the 64-beam model degrades on 16 of its lasers (the reason for a new one)
  table = result.table()
  assert table.splitlines()[0].startswith("| sensor | density [%] | mae [mm] | rmse [mm] | ause_pncnn |")
  assert f"| thin4 | {rows['thin4']['density']:.3g} | {rows['thin4']['mae']:.0f} ({rows['thin4']['mae_ratio']:.2f}×)" \
      in table


def test_the_ratios_take_the_reference_asked_for():
  rows = {"a": {"mae": 2.0, "nll": -1.0, "auce": None}, "b": {"mae": 4.0, "nll": 0.5, "auce": 0.1}}
  out = across_sensors.with_ratios(rows, "b")
  assert out["a"]["mae_ratio"] == 0.5 and out["a"]["nll_diff"] == -1.5 and out["a"]["auce_ratio"] is None
  with pytest.raises(ValueError, match="reference sensor 'c' is not one of the sensors evaluated"):
    across_sensors.with_ratios(rows, "c")


def test_the_checkpoint_entry_writes_one_row_per_sensor(tmp_path, capsys):
  checkpoint.evaluate_checkpoint(_config(), None, "synthetic:pncnn_masked", output_dir=str(tmp_path / "out"),
                                 sensors=["hdl64", "vlp16"], reference_sensor="vlp16")
  report = json.loads((tmp_path / "out" / "results.json").read_text())
  assert report["evaluator"] == "sensors" and list(report["rows"]) == ["hdl64", "vlp16"]
  assert report["reference_sensor"] == "vlp16" and report["rows"]["vlp16"]["mae_ratio"] == 1.0
  assert report["units"]["density"] == "%" and report["units"]["mae"] == "mm"
  writer = json.loads((tmp_path / "out" / "pncnn_writer.json").read_text())
  assert writer["settings"]["sensors"] == ["hdl64", "vlp16"]
  assert "| vlp16 |" in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    (["--sensors", "hdl64,bogus"], "unknown sensor or sensor mixture 'bogus'; valid names: "),
    (["--sensors", "hdl64", "--reference_sensor", "vlp16"], "--reference_sensor 'vlp16' is not one of --sensors"),
    (["--sensors", "hdl64", "--pairs_dir", "."], "--pairs_dir frames have one sensor"),
])
def test_eval_py_refuses_a_sensor_request_it_cannot_run_in_one_line(tmp_path, extra, message):
  r = subprocess.run([sys.executable, "eval.py", "--config", "configs/synthetic.py:pncnn", "--checkpoint",
                      "synthetic:pncnn_masked", "--output", str(tmp_path / "out"), *extra], cwd=REPO,
                     capture_output=True, text=True, timeout=300,
                     env={"PATH": "", "PYTHONPATH": str(REPO), "PNCNN_NO_HUGEPAGES": "1", "JAX_PLATFORMS": "cpu"})
  assert r.returncode == 2, r.stderr[-2000:]
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr[-2000:]
  assert not (tmp_path / "out").exists()


def test_an_ensemble_config_is_refused_with_sensors():
  config = from_config.load_config(f"{REPO}/configs/ensemble_synthetic.py:pncnn")
  evaluator = evaluate.evaluator_for(config)
  with pytest.raises(ValueError, match="--sensors evaluates one depth model; config variant 'pncnn' is evaluated by "
                                       "the 'ensemble' evaluator"):
    checkpoint.check_sensors_request(evaluator, config, ["hdl64"], None, None)
