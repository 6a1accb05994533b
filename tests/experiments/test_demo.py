"""The demo's ensemble evaluation (pncnn_jax.experiments.demo.evaluate_shipped_fusion): the shipped members, all four
rules."""

import ml_collections
import numpy as np
import pytest

from pncnn_jax import evaluate, from_config, pretrained
from pncnn_jax.experiments import demo, runs


@pytest.mark.slow
def test_demo_evaluates_the_shipped_ensemble_and_every_rule():
  fusion = demo.evaluate_shipped_fusion(1)  # one scene: every row and rule is checked, not the figures
  assert fusion["members"] == list(runs.ENSEMBLE)
  assert fusion["steps"] == {n: pretrained.load(f"synthetic:{n}")[1]["step"] for n in runs.ENSEMBLE}
  assert list(fusion["rows"]) == [f"member {k}" for k in range(4)] + ["mean", "weighted_mean", "max_confidence", "mle"]
  rows = fusion["rows"]
  assert all(np.isfinite(r["rmse"]) and r["rmse"] > 0 for r in rows.values())
  assert len({rows[f"member {k}"]["rmse"] for k in range(4)}) == 4  # four different members, not one four times
  variables, manifest = pretrained.load(f"synthetic:{runs.ENSEMBLE[0]}")  # member 0 is that model on its own
  config = ml_collections.ConfigDict(manifest["config"])
  alone = evaluate.run_evaluation(from_config.build_model(config), variables,
                                  iter(demo.fresh_scenes(
                                      (config.data.eval_crop_height, config.data.eval_crop_width), 1)),
                                  loss_name=from_config.variant_loss(config)).metrics
  for k in ("mae", "rmse"):
    np.testing.assert_allclose(rows["member 0"][k], alone[k], rtol=1e-5, err_msg=k)


def test_demo_skips_the_ensemble_when_a_member_is_not_shipped(monkeypatch):
  monkeypatch.setattr(pretrained, "available", lambda dataset="synthetic", root=None: list(runs.ENSEMBLE[:3]))
  assert demo.evaluate_shipped_fusion(2) is None
