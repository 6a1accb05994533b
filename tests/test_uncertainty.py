"""uncertainty.ause: the three normalisations on a hand-worked example (docs/SPEC.md §8.2a)."""

import numpy as np
import pytest

from pncnn_jax import uncertainty

# Two pixels, errors 2 m and 0 m, the erroneous one trusted more (confidence 1 vs 0): with N = 2 every fraction
# r >= 0.01 keeps n = int((1 - r) 2) = 1 pixel. Oracle curve: sqrt(4/2) = sqrt 2 at r = 0, then 0 (keeps the 0 m
# pixel); model curve: sqrt 2, then 2 (keeps the 2 m pixel). trapz over r = 0, 0.01, ..., 0.99 of model - oracle:
#   none        [sqrt2, 0, ...] vs [sqrt2, 2, ...]:          0.5 (0 + 2) 0.01 + 2 (0.98)            = 1.97 m
#   pncnn       oracle / sqrt2 = [1, 0, ...], model / 2 = [1/sqrt2, 1, ...]:
#               0.5 (1/sqrt2 - 1 + 1) 0.01 + 1 (0.98)                                        = 0.98 + 0.005/sqrt2
#   shared_max  both / max(sqrt2, 2) = 2: [sqrt2/2, 0, ...] vs [sqrt2/2, 1, ...]: 0.5 (0 + 1) 0.01 + 0.98 = 0.985
ERR_SQ, CONF = np.array([4.0, 0.0]), np.array([1.0, 0.0])
HAND = {"none": 1.97, "pncnn": 0.98 + 0.005 / np.sqrt(2.0), "shared_max": 0.985}


@pytest.mark.parametrize("normalization", uncertainty.NORMALIZATIONS)
def test_ause_normalisations_by_hand(normalization):
  s = uncertainty.ause(ERR_SQ, CONF, normalization=normalization)
  assert s.ause == pytest.approx(HAND[normalization], abs=1e-12)
  assert s.model[1] == pytest.approx({"none": 2.0, "pncnn": 1.0, "shared_max": 1.0}[normalization])


def test_ause_default_is_pncnn_and_equals_ause_pncnn():
  rng = np.random.default_rng(0)
  err_sq, conf = rng.gamma(1.0, 1.0, 500), rng.gamma(2.0, 1.0, 500)
  assert uncertainty.ause(err_sq, conf).ause == uncertainty.ause_pncnn(err_sq, conf).ause
  # the oracle starts at the full RMSE as the model does, so the shared maximum is the model curve's
  shared = uncertainty.ause(err_sq, conf, normalization="shared_max")
  raw = uncertainty.ause(err_sq, conf, normalization="none")
  np.testing.assert_allclose(shared.model, raw.model / raw.model.max())
  np.testing.assert_allclose(shared.oracle, raw.oracle / raw.model.max())


def test_accumulator_reports_every_normalisation():
  acc = uncertainty.UncertaintyAccumulator()
  pred, target = np.zeros((1, 1, 2, 1), np.float32), np.array([2.0, 1.0], np.float32).reshape(1, 1, 2, 1)
  acc.update(pred, target, np.array([1.0, 2.0], np.float32).reshape(1, 1, 2, 1))  # err^2 [4, 1]
  res = acc.result()
  for n, key in (("pncnn", "ause_pncnn"), ("shared_max", "ause_shared_max"), ("none", "ause_none")):
    assert res[key] == pytest.approx(uncertainty.ause(np.array([4.0, 1.0]), np.array([1.0, 2.0]), normalization=n).ause)


def test_ause_bad_normalization():
  with pytest.raises(ValueError, match="normalization='max'"):
    uncertainty.ause(ERR_SQ, CONF, normalization="max")
