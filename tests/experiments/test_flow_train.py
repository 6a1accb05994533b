"""The flow models end to end: train.py's loop with a flow config, validation, eval.py's report; the experiment's
convergence rule and claims."""

import json
import math

import numpy as np
import pytest

from pncnn_jax import evaluate, from_config
from pncnn_jax.experiments import runner
from pncnn_jax.experiments.flow import report as flow_report
from pncnn_jax.experiments.flow import reproduce as flow_reproduce
from pncnn_jax.flow import evaluate as flow_evaluate
from pncnn_jax.training import loop

from conftest import REPO


def _tiny(variant):
  config = from_config.load_config(f"{REPO}/configs/flow_synthetic.py:{variant}")
  with config.unlocked():
    config.model.unet_features = (4, 4, 8, 8)
    config.data.train_crop_height, config.data.train_crop_width = 32, 64
    config.data.eval_crop_height, config.data.eval_crop_width = 32, 64
    config.data.synthetic_size, config.data.eval_synthetic_size = 4, 2
    config.data.num_threads = 1
    config.batch_size = config.eval_batch_size = 2
    config.steps_per_epoch, config.num_epochs, config.log_every_steps = 2, 1, 1
    config.num_panels = 1
    config.progress_bar = False
  return config


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["flow_pncnn"])
def test_flow_model_trains_validates_and_evaluates(tmp_path, variant):
  config = _tiny(variant)
  workdir = tmp_path / "run"
  summary = loop.train_and_evaluate(config, workdir)
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  train_rows = [r for r in rows if r["split"] == "train"]
  assert len(train_rows) == 2 and all(math.isfinite(r["loss"]) and r["epe"] > 0 for r in train_rows)
  val = summary["val"]
  assert summary["step"] == 2 and val["epe"] > 0 and val["rmse"] >= val["epe"] and 0 <= val["outliers"] <= 100
  assert 0 <= val["auroc_corrupted"] <= 1 and val["nll"] is not None and val["num_images"] == 2
  # eval.py's path (the one entry, for every config): the best checkpoint (the only one) on the same split gives the
  # validation's numbers.
  result, paths = evaluate.evaluate_checkpoint(config, str(workdir), "best", output_dir=str(tmp_path / "ev"),
                                               progress=False)
  assert result.evaluator == "flow"
  for k in ("epe", "rmse", "outliers", "ause_epe", "auroc_corrupted", "nll"):
    assert result.metrics[k] == pytest.approx(val[k], rel=1e-5), k
  report = json.loads((tmp_path / "ev" / "results.json").read_text())
  assert report["results"]["epe"] == pytest.approx(val["epe"]) and report["checkpoint_step"] == 2
  assert {"panels", "sparsification", "md", "csv"} <= set(paths) and paths["panels"].endswith("flow_panels.png")
  assert json.loads((tmp_path / "ev" / "pncnn_writer.json").read_text())["checkpoint"] == "best"  # locked, claimed
  # The one loader checks a flow checkpoint as any other: its identity, and its weights are finite.
  with pytest.raises(ValueError, match="was trained as variant 'flow_pncnn', loss 'flow_nll'"):
    evaluate.evaluate_checkpoint(_tiny("flow_ncnn"), str(workdir), "latest", output_dir=str(tmp_path / "ev2"))
  assert not (tmp_path / "ev2").exists()  # a refused evaluation leaves no folder


def test_baselines_interpolate_exactly_and_the_oracle_drops_the_failed_tracks():
  # A constant flow measured at two tracks: normalized convolution returns it everywhere the tracks reach; one
  # failed track (flagged corrupted) is ignored by the oracle.
  sparse = np.zeros((1, 16, 16, 3), np.float32)
  sparse[0, 4, 4] = [2.0, -1.0, 1.0]
  sparse[0, 10, 9] = [2.0, -1.0, 1.0]
  sparse[0, 8, 12] = [40.0, 40.0, 1.0]
  corrupted = np.zeros((1, 16, 16, 1), bool)
  corrupted[0, 8, 12] = True
  nc = flow_evaluate.GaussianNC(3.0, 9)
  oracle = flow_evaluate.FlowEvaluator(loss_name="flow_epe", oracle=True)
  inputs = oracle.inputs({"sparse": sparse, "target": sparse, "corrupted": corrupted}, 0)
  np.testing.assert_array_equal(inputs["sparse"], sparse)  # the metrics see the whole input, the model the rest
  out = nc.apply({}, inputs["oracle_sparse"])
  np.testing.assert_allclose(out.flow[0, 2:14, 2:14], np.broadcast_to([2.0, -1.0], (12, 12, 2)), rtol=1e-5)
  leak = np.asarray(nc.apply({}, sparse).flow[0, 8, 11]) - [2.0, -1.0]
  assert np.abs(leak).max() > 5.0  # without the oracle it leaks in


def test_convergence_rule_and_claims(tmp_path):
  rundir = tmp_path / "r"
  rundir.mkdir()
  decay = flow_reproduce.RECIPE["steps_per_epoch"] * flow_reproduce.RECIPE["lr_decay_epochs"]
  curve = {100: 5.0, 200: 4.0, decay - 100: 3.05, decay: 3.0}
  (rundir / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "split": "val", "epe": e}) + "\n"
                                                for s, e in curve.items()))
  conv = runner.convergence(rundir, decay, "epe", "auroc_corrupted")
  assert conv["flat"] is False and conv["epe_change_last_30pct"] == pytest.approx(3.0 / 4.0 - 1)
  base = {"epe": 4.0, "outliers": 30.0, "ause_epe": 0.3}
  good = {"epe": 3.0, "outliers": 20.0, "ause_epe": 0.2, "nll": 3.0, "auroc_corrupted": 0.9, "c0_corrupted": 0.1,
          "c0_clean": 0.5}
  lines = flow_report.claims({"flow_ncnn": base, "gaussian_nc": base, "flow_pncnn": good})
  assert [line.split("**")[1] for line in lines] == ["holds", "holds", "holds"]
  bad = {**good, "auroc_corrupted": 0.7, "epe": 4.5}
  assert [line.split("**")[1] for line in flow_report.claims({"flow_ncnn": base, "flow_pncnn": bad})] == [
      "does not hold", "does not hold", "holds"]


def test_flow_configs_load_every_variant_and_are_cpu_sized():
  from pncnn_jax.flow import model as flow_model  # pylint: disable=g-import-not-at-top
  for variant, spec in flow_model.FLOW_VARIANTS.items():
    c = from_config.load_config(f"{REPO}/configs/flow_synthetic.py:{variant}")
    assert c.variant == variant and from_config.variant_loss(c) == spec.loss and c.metrics == "flow"
    assert c.data.dataset == "flow_synthetic" and c.data.train_crop_height * c.data.train_crop_width <= 128 * 384
    assert isinstance(from_config.build_model(c), flow_model.FlowPNCNN)
  with pytest.raises(ValueError, match="unknown variant 'flow_pncn'"):
    from_config.load_config(f"{REPO}/configs/flow_synthetic.py:flow_pncn")
