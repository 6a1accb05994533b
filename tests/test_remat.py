"""Rematerialised UNet blocks (models.PNCNN.remat) change memory only: the same parameters, loss, gradients and
updated state as without."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax import config as config_lib
from pncnn_jax import losses, models, train_step

VARIANT_LOSS = [("pncnn", "gaussian_nll"), ("ncnn_conf_l1", "masked_l1")]


def _batch(shape=(2, 32, 64, 1)):
  rng = np.random.default_rng(0)
  sparse = np.where(rng.random(shape) < 0.1, rng.uniform(2, 80, shape), 0).astype(np.float32)
  target = np.where(rng.random(shape) < 0.3, rng.uniform(2, 80, shape), 0).astype(np.float32)
  return {"sparse": jnp.asarray(sparse), "target": jnp.asarray(target)}


def _step(variant: str, loss_name: str, remat: bool):
  model = models.build_model(variant, remat=remat)
  variables = models.init_variables(model, jax.random.key(0))
  state = train_step.create_train_state(model, variables, train_step.make_optimizer(0.01))
  batch = _batch()
  (loss, _), grads = jax.jit(functools.partial(train_step.loss_and_grads, loss_name=loss_name))(
      state, state.params, batch)
  new_state, metrics = jax.jit(functools.partial(train_step.train_step, loss_name=loss_name))(state, batch)
  return variables, loss, grads, new_state, metrics


@pytest.mark.parametrize("variant,loss_name", VARIANT_LOSS)
def test_a_training_step_with_remat_equals_one_without_bitwise(variant, loss_name):
  assert loss_name in losses.LOSSES
  v0, loss0, g0, s0, m0 = _step(variant, loss_name, remat=False)
  v1, loss1, g1, s1, m1 = _step(variant, loss_name, remat=True)
  same = lambda a, b: jax.tree.all(jax.tree.map(lambda x, y: bool(np.array_equal(x, y)), a, b))  # noqa: E731
  assert jax.tree.structure(v0) == jax.tree.structure(v1)  # the same parameter names: checkpoints load either way
  assert same(v0, v1)
  assert float(loss0) == float(loss1)
  assert same(g0, g1)
  assert same((s0.params, s0.batch_stats, s0.opt_state), (s1.params, s1.batch_stats, s1.opt_state))
  assert same(m0, m1)
  assert np.abs(np.asarray(jax.tree.leaves(g0)[0])).max() > 0  # a real gradient


def test_remat_is_on_by_default_on_cpu_and_not_a_config_setting():
  assert models.PNCNN().remat is None  # None: on where the backend is the CPU (this test's), off on accelerators
  assert jax.default_backend() == "cpu"
  jaxpr = str(jax.make_jaxpr(lambda v, x: models.PNCNN().apply(v, x, train=True, mutable=["batch_stats"]))(
      models.init_variables(models.PNCNN(), jax.random.key(0)), jnp.ones((1, 16, 16, 1))))
  assert "remat" in jaxpr or "checkpoint" in jaxpr
  assert "remat" not in config_lib.model_settings(config_lib.load_config("configs/synthetic.py:pncnn"))
