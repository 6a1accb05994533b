"""The flow evaluator (pncnn_jax/flow/evaluate.py) gives the numbers of the evaluation it replaced.

Three scenes of configs/flow_synthetic.py's eval split (32 x 64, one batch of 3, padded over the
suite's 2 host devices): the fixed Gaussian normalized convolution (sigma 4 px), the same fed only the tracks that
did not fail (the oracle), and a flow_pncnn with small UNets and its initial weights (key 2). The expected values
were computed by the code before the evaluator protocol (`run_flow_evaluation` with `gaussian_nc_predictor`,
`oracle_predictor` and `model_predictor`; commit fdf9add) in this suite's set-up (2 host devices, XLA:CPU
optimisation level 0); the evaluator reproduced them exactly there. On another CPU the float32 outputs round
differently: the smooth metrics keep their tolerance for that rounding only; those that rank or threshold pixels
(AUSE, outliers, AUROC) move in steps when near-tied pixels swap (ause_epe 0.69315 -> 0.69332 in CI), so they are
checked against `flow.metrics.FlowAccumulator` on what the evaluator fed it (its golden tests:
tests/flow/test_model_losses_metrics.py)."""

import jax
import pytest

from pncnn_jax import from_config
from pncnn_jax.flow import dataset as flow_dataset
from pncnn_jax.flow import evaluate as flow_evaluate
from pncnn_jax.flow import metrics as flow_metrics
from pncnn_jax.flow import model as flow_model

from conftest import REPO

BEFORE = {
    "gaussian_nc": {"epe": 18.040219092703754, "rmse": 22.47252712277245, "outliers": 83.85416666666667,
                    "ause_epe": 0.8574021610693161, "nll": None, "auroc_corrupted": 0.5, "num_images": 3},
    "oracle": {"epe": 5.215457302500076, "rmse": 7.566185921552507, "outliers": 36.686197916666664,
               "ause_epe": 0.10464006226429862, "nll": None, "auroc_corrupted": 1.0, "num_images": 3},
    "flow_pncnn": {"epe": 18.057440670305997, "rmse": 23.1512366757962, "outliers": 81.77083333333333,
                   "ause_epe": 0.6931489383093387, "nll": 259.25204349553286, "auroc_corrupted": 0.4791666666666667,
                   "num_images": 3},
}


def _config():
  config = from_config.load_config(f"{REPO}/configs/flow_synthetic.py:flow_pncnn")
  with config.unlocked():
    config.model.unet_features = (4, 4, 8, 8)
    config.data.eval_crop_height, config.data.eval_crop_width = 32, 64
    config.data.eval_synthetic_size, config.eval_batch_size = 3, 3
    config.data.num_threads = 1
  return config


RANKED = ("outliers", "ause_epe", "auroc_corrupted")


def _check(result, want, fed):
  got = result.summary()
  again = flow_metrics.FlowAccumulator()
  for args, kwargs in list(fed):  # replaying records more calls
    again.update(*args[1:], **kwargs)
  replayed = again.result(flow_dataset.FAILURES)
  del fed[:]
  for k, v in want.items():
    if k in RANKED:
      assert got[k] == replayed[k], k
    else:
      assert got[k] == (None if v is None else pytest.approx(v, rel=1e-5)), k


@pytest.mark.slow
def test_the_flow_evaluator_gives_the_numbers_of_before(tmp_path, recorded):
  fed = recorded(flow_metrics.FlowAccumulator, "update")
  config = _config()
  batches = list(from_config.eval_iterator(config))
  nc = flow_evaluate.GaussianNC(4.0, 12)
  _check(flow_evaluate.FlowEvaluator(loss_name="flow_epe").run(nc, {}, batches), BEFORE["gaussian_nc"], fed)
  _check(flow_evaluate.FlowEvaluator(loss_name="flow_epe", oracle=True).run(nc, {}, batches), BEFORE["oracle"], fed)
  model = from_config.build_model(config)
  variables = flow_model.init_flow_variables(model, jax.random.key(2), (32, 64))
  result = flow_evaluate.FlowEvaluator.from_config(config).run(model, variables, batches)
  _check(result, BEFORE["flow_pncnn"], fed)
  assert result.evaluator == "flow" and len(result.panels) == config.num_panels
  paths = result.write(tmp_path, "flow_pncnn@init")
  assert (tmp_path / "flow_panels.png").stat().st_size > 0 and set(paths) == {"json", "csv", "md", "sparsification",
                                                                               "panels"}
  assert (tmp_path / "results.md").read_text().startswith("| model | epe [px] | rmse [px] | outliers [%] |")
