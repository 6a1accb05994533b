"""The Sparse-to-Dense baseline: parameter count, loss, MC-Dropout passes and their fused predictive variance, the
ensemble of one, the dropout key of the train step.

Fast on 2 cores: the parameters are counted with jax.eval_shape; the forward tests use a one-block-per-stage ResNet
(the same modules and dropout layers as ResNet-18, half the layers to compile) on a 1 x 32 x 64 input, with
variables drawn in numpy from eval_shape's shapes (no init program), and compile four small programs in all."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax import from_config, losses
from pncnn_jax.baselines import losses as baselines_losses
from pncnn_jax.baselines import model as baselines_model
from pncnn_jax.baselines import predictive
from pncnn_jax.ensemble import members
from pncnn_jax.nn import models
from pncnn_jax.training import step as training_step

LOSS = baselines_losses.LOSS_NAME


def test_parameter_count_without_compiling():
  assert baselines_model.param_count(baselines_model.SparseToDense()) == baselines_model.PARAMS_RESNET18 == 13_675_394
  resnet34 = baselines_model.SparseToDense(stage_blocks=baselines_model.RESNET34)
  assert baselines_model.param_count(resnet34) == baselines_model.PARAMS_RESNET34
  # the variants resolve through the core's registry (the extension loads on the miss)
  config = {"variant": "s2d_mcdropout", "model": {"mask_input_confidence": False, "nconv_init": "published"}}
  model = from_config.build_model(config)
  assert isinstance(model, baselines_model.SparseToDense) and model.dropout_rate == 0.5
  assert from_config.variant_loss(config) == LOSS and losses.is_probabilistic(LOSS)
  with pytest.raises(ValueError, match="mask_input_confidence"):
    baselines_model.build_baseline("s2d", mask_input_confidence=True)


def test_loss_by_hand():
  # two valid pixels: e = 1 m with s = log 4 (sigma^2 = 1/4) -> 4 - log 4; e = 0 with s = 0 -> 0; mean over |V| = 2
  pred = jnp.array([1.0, 2.0, 5.0]).reshape(1, 1, 3, 1)
  target = jnp.array([2.0, 2.0, 0.0]).reshape(1, 1, 3, 1)
  s = jnp.array([np.log(4.0), 0.0, 100.0]).reshape(1, 1, 3, 1)
  assert float(baselines_losses.gaussian_nll_logvar(pred, s, target)) == pytest.approx((4 - np.log(4.0)) / 2, rel=1e-6)
  assert losses.precision_of(np.array([np.log(4.0)]), LOSS)[0] == pytest.approx(4.0)


def test_predictive_variance_by_hand():
  # two passes: mu = 1 and 3 m, sigma^2 = 4 and 2 m^2 -> mean 2; var = (4 + 2)/2 + ((1-2)^2 + (3-2)^2)/2 = 3 + 1 = 4
  depth = jnp.array([1.0, 3.0]).reshape(2, 1, 1, 1, 1)
  precision = 1.0 / jnp.array([4.0, 2.0]).reshape(2, 1, 1, 1, 1)
  mean, var = predictive.predictive(depth, precision)
  assert float(mean.squeeze()) == pytest.approx(2.0) and float(var.squeeze()) == pytest.approx(4.0)


@pytest.fixture(scope="module")
def tiny():
  """An MC-Dropout network (one block per stage), random variables, and a 1 x 32 x 64 sparse input."""
  model = baselines_model.SparseToDense(stage_blocks=(1, 1, 1, 1), dropout_rate=baselines_model.DROPOUT_RATE)
  rng = np.random.default_rng(0)
  sparse = (rng.uniform(2, 40, (1, 32, 64, 1)) * (rng.uniform(size=(1, 32, 64, 1)) < 0.2)).astype(np.float32)
  shapes = jax.eval_shape(lambda k: model.init(k, jnp.zeros((1, 32, 64, 1))), jax.random.key(0))

  def draw(path, leaf):
    name = jax.tree_util.keystr(path)
    if "var" in name or "scale" in name:
      return jnp.asarray(rng.uniform(0.5, 1.5, leaf.shape), leaf.dtype)
    fan_in = int(np.prod(leaf.shape[:-1])) if leaf.ndim > 1 else 1
    return jnp.asarray(rng.normal(0.0, np.sqrt(1.0 / fan_in), leaf.shape), leaf.dtype)

  return model, jax.tree_util.tree_map_with_path(draw, shapes), jnp.asarray(sparse)


def test_m_passes_in_one_call_equal_m_separate_calls(tiny):
  model, variables, sparse = tiny
  keys = predictive.dropout_keys(0, 3)
  depth, prec = predictive.make_members_fn(model, LOSS, "mc_dropout")(variables, sparse, keys)
  one = jax.jit(lambda v, x, k: model.apply(v, x, stochastic=True, rngs={"dropout": k}))
  for m in range(3):
    out = one(variables, sparse, keys[m])
    np.testing.assert_allclose(depth[m], out.depth, rtol=1e-4, atol=1e-4)  # vmapped convolutions round apart
    np.testing.assert_allclose(prec[m], jnp.exp(out.confidence), rtol=1e-4)
  assert float(jnp.abs(depth[0] - depth[1]).max()) > 1e-3  # dropout is on at test time: the passes differ


def test_ensemble_of_one_equals_the_single_model(tiny):
  model, variables, sparse = tiny  # train=False without `stochastic`: the deterministic network
  stacked = members.stack_trees([variables])
  depth, prec = predictive.make_members_fn(model, LOSS, "ensemble")(stacked, sparse)
  mean, var = predictive.predictive(depth, prec)
  out = jax.jit(model.apply)(variables, sparse)
  np.testing.assert_allclose(mean, out.depth, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(1.0 / var, jnp.exp(out.confidence), rtol=1e-4)


class _Constant(nn.Module):
  """A stand-in member: its depth is its one parameter everywhere [m], its log-precision log(1/4) (variance 4 m^2)."""

  @nn.compact
  def __call__(self, sparse, train=False):
    d = self.param("depth", nn.initializers.zeros, ())
    full = lambda v: jnp.full(sparse.shape, v, jnp.float32)  # noqa: E731
    return models.ModelOutput(depth=full(d), confidence=full(np.log(0.25)), input_confidence=full(1.0),
                              nconv_confidence=full(1.0))


def test_the_predictive_evaluator_fuses_the_first_members():
  stacked = {"params": {"depth": jnp.asarray([1.0, 3.0, 8.0])}}  # three members: 1, 3 and 8 m everywhere
  target = np.full((1, 4, 4, 1), 2.0, np.float32)
  batches = [{"sparse": target, "target": target}]  # one image, padded to the 2 host devices
  result = predictive.PredictiveEvaluator(loss_name=LOSS, kind="ensemble", ms=(2, 1)).run(_Constant(), stacked,
                                                                                           batches)
  rows = result.rows
  assert list(rows) == ["1", "2"] and result.evaluator == "predictive" and rows["1"]["num_images"] == 1
  assert rows["1"]["mae"] == pytest.approx(1000.0)  # member 0 alone: 1 m off, in mm
  assert rows["2"]["mae"] == pytest.approx(0.0, abs=1e-3)  # the mean of 1 and 3 m
  assert rows["2"]["nll"] == pytest.approx(0.5 * np.log(2 * np.pi * 5.0))  # var 4 + 1 = 5, error 0
  assert result.table().splitlines()[0].startswith("| M | mae [mm] | rmse [mm] |")
  with pytest.raises(ValueError, match="fewer than M = 4"):
    predictive.PredictiveEvaluator(loss_name=LOSS, kind="ensemble", ms=(4,)).run(_Constant(), stacked, batches)


def test_train_state_draws_a_dropout_key_per_step(tiny):
  model, variables, sparse = tiny
  state = training_step.create_train_state(model, variables, learning_rate=1e-3, dropout_seed=3)
  assert state.dropout_key is not None and training_step.dropout_rngs(state.replace(dropout_key=None)) == {}
  k0, k1 = (training_step.dropout_rngs(state.replace(step=jnp.asarray(t)))["dropout"] for t in (0, 1))
  assert not np.array_equal(jax.random.key_data(k0), jax.random.key_data(k1))
  plain = training_step.create_train_state(baselines_model.build_baseline("s2d"), variables, learning_rate=1e-3)
  assert plain.dropout_key is None  # no dropout, no key: the other models' steps are unchanged
