"""The depth evaluator gives the numbers of the evaluation it replaced: the shipped masked pNCNN on 5 synthetic
validation scenes (64 x 96, batches of 3 and 2, padded over the suite's 2 host devices).

The expected values were computed by the code before the evaluator protocol (`pncnn_jax.evaluate.run_evaluation` of
commit fdf9add) in this suite's set-up (2 host devices, XLA:CPU optimisation level 0); the evaluator reproduced them
exactly there. On another CPU the model's float32 outputs round differently (about 1e-6 relative): the smooth metrics
keep their tolerance for that rounding only; the ones that rank or threshold pixels (AUSE, AUCE, AUROC) move in
steps when two near-tied pixels swap, so they are checked against the metric functions on the evaluator's own
outputs instead (those functions have golden tests in tests/test_uncertainty.py and tests/test_metrics.py)."""

import numpy as np
import pytest

from pncnn_jax import data, evaluate, metrics, pretrained, uncertainty
from pncnn_jax.nn import models

BEFORE = {"mae": 744.9505432128906, "rmse": 2672.91513671875, "imae": 0.6643188893795013, "irmse": 2.3899625062942507,
          "devkit_mae": 744.9389155258219, "devkit_rmse": 2672.8974213859683, "ause_pncnn": 0.07140224127942842,
          "ause_gustafsson": 0.07140224127942842, "auce": 0.15360622396471454, "nll": 0.32647089989788064,
          "auroc_disturbed": 0.5371536149463191, "num_pixels": 8162, "num_images": 5}
RANKED = ("ause_pncnn", "ause_gustafsson", "auce", "auroc_disturbed")
BEFORE_ERROR_BY_DISTANCE_MM = [5611.856162548065, 3537.153930388135, 1515.6429514154659, 713.1975041129807,
                               553.498163451453, 198.48787720231712]


def scenes():
  """5 synthetic validation scenes, centre 64 x 96, in batches of 3 and 2."""
  return list(data.make_iterator({"dataset": "synthetic", "split": "val", "crop": "center", "crop_height": 64,
                                  "crop_width": 96, "batch_size": 3, "num_epochs": 1, "synthetic_size": 5}))


def test_the_depth_evaluator_gives_the_numbers_of_before(recorded):
  fed = recorded(uncertainty.UncertaintyAccumulator, "update")
  variables, _ = pretrained.load("synthetic:pncnn_masked")
  model = models.build_model("pncnn", mask_input_confidence=True)
  batches = scenes()
  evaluator = evaluate.DepthEvaluator(loss_name="gaussian_nll", error_by_distance=True, num_panels=1,
                                      input_points=True)
  result = evaluator.run(model, variables, batches)
  got = result.summary()
  for k, v in BEFORE.items():
    if k not in RANKED:
      assert got[k] == pytest.approx(v, rel=1e-5), k
  again = uncertainty.UncertaintyAccumulator()  # what it fed the accumulator: the model's outputs (above)
  for args, _ in list(fed):  # replaying records more calls
    again.update(*args[1:])
  want = again.result()
  assert [got[k] for k in RANKED[:3]] == [want["ause_pncnn"], want["ause_gustafsson"], want["auce"]]
  np.testing.assert_allclose(result.error_by_disturbed_distance["mae_mm"], BEFORE_ERROR_BY_DISTANCE_MM, rtol=1e-5)
  assert result.evaluator == "depth" and len(result.panels) == 1 and result.uncertainty_kind == "sigma [m]"
  # The input points it pooled are every batch's: c0 at each measurement, its depth and label.
  points = result.input_points
  sparse = np.concatenate([b["sparse"] for b in batches])
  disturbed = np.concatenate([b["disturbed"] for b in batches])
  np.testing.assert_array_equal(points["depth"], sparse[sparse > 0])
  np.testing.assert_array_equal(points["disturbed"], disturbed[sparse > 0])
  assert points["num_empty"] == [int((b["sparse"] <= 0).sum()) for b in batches]
  assert points["c0_empty_sum"] == [0.0, 0.0]  # masked c0: nothing off the measurements
  assert got["auroc_disturbed"] == metrics.auroc(-points["c0"].astype(np.float64), points["disturbed"])
  # run_evaluation is its one-call form
  again = evaluate.run_evaluation(model, variables, batches, loss_name="gaussian_nll")
  assert again.summary() == {k: v for k, v in got.items()}


def test_a_metric_set_that_scores_no_depth_maps_is_refused():
  with pytest.raises(ValueError, match="metric set 'flow' is not a depth metric set"):
    evaluate.DepthEvaluator(loss_name="flow_nll", metric_set="flow")
