"""The predictive evaluator (pncnn_jax/baselines/predictive.py) gives the numbers of the evaluation it replaced: the
fused prediction of the first M = 1, 2 members of an ensemble of the shipped pncnn_masked and pncnn_masked_seed1, on 5
synthetic validation scenes (64 x 96, batches of 3 and 2).

The expected values were computed by the code before the evaluator protocol (`evaluate_prefixes` of commit fdf9add,
which ran on one device) in this suite's set-up (XLA:CPU optimisation level 0); on a one-device mesh the evaluator
reproduced them exactly. The tolerance leaves room for another CPU's rounding only."""

import jax
import pytest

from pncnn_jax import pretrained
from pncnn_jax.baselines import predictive
from pncnn_jax.data import pipeline
from pncnn_jax.ensemble import members
from pncnn_jax.nn import models
from pncnn_jax.runtime import sharding

BEFORE = {
    "1": {"mae": 744.9505981445312, "rmse": 2672.9153564453127, "ause_pncnn": 0.07140220596058355,
          "ause_shared_max": 0.07140220596058355, "ause_none": 0.20458664717571487, "auce": 0.15361112472433228,
          "nll": 0.3264702237717024, "num_images": 5},
    "2": {"mae": 794.4941284179688, "rmse": 2552.313720703125, "ause_pncnn": 0.05565656872040156,
          "ause_shared_max": 0.05565656872040156, "ause_none": 0.1522755580118221, "auce": 0.17732969860328354,
          "nll": 0.24210706209677527, "num_images": 5},
}


@pytest.mark.slow
def test_the_predictive_evaluator_gives_the_numbers_of_before():
  stacked = members.stack_trees([pretrained.load(f"synthetic:{n}")[0] for n in ("pncnn_masked", "pncnn_masked_seed1")])
  model = models.build_model("pncnn", mask_input_confidence=True)
  batches = list(pipeline.make_iterator({"dataset": "synthetic", "split": "val", "crop": "center", "crop_height": 64,
                                         "crop_width": 96, "batch_size": 3, "num_epochs": 1, "synthetic_size": 5}))
  evaluator = predictive.PredictiveEvaluator(loss_name="gaussian_nll", kind="ensemble", ms=(1, 2))
  result = evaluator.run(model, stacked, batches, mesh=sharding.make_mesh(jax.devices()[:1]))
  assert list(result.rows) == ["1", "2"] and result.header == "M"
  for m, want in BEFORE.items():
    for k, v in want.items():
      assert result.rows[m][k] == pytest.approx(v, rel=1e-5), (m, k)


def test_the_predictive_evaluator_refuses_what_it_cannot_measure():
  with pytest.raises(ValueError, match="ms must be positive ints"):
    predictive.PredictiveEvaluator(loss_name="gaussian_nll", kind="ensemble", ms=(0, 2))
  with pytest.raises(ValueError, match="kind must be one of mc_dropout, ensemble, single"):
    predictive.PredictiveEvaluator(loss_name="gaussian_nll", kind="ensembles", ms=(1,))
