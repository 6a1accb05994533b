"""Rematerialised UNet blocks (models.PNCNN.remat) change memory only: the same parameters, loss, BatchNorm
statistics and train-mode prediction as without, bitwise, and the same gradients up to float32 rounding.

Why not bitwise gradients: the backward pass recomputes the blocks, and XLA:CPU may fuse (and so sum) the recomputed
arithmetic in another order. On the machine where remat was added the gradients came out bitwise equal; on an AMD
EPYC host with the same jax 0.12.0.1 they differ in the last bits (bound and measurements below). The biases of the
convolutions that feed a train-mode BatchNorm have an exact gradient of 0 (the batch mean cancels them), so theirs is
rounding noise on both sides, and Adam's first step turns that noise into +-lr: the updated parameters are not
compared (nor is the Adam update, which remat does not touch).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax import from_config, losses
from pncnn_jax.nn import models
from pncnn_jax.training import step as training_step

VARIANT_LOSS = [("pncnn", "gaussian_nll"), ("ncnn_conf_l1", "masked_l1")]


def _batch(shape=(2, 32, 64, 1)):
  rng = np.random.default_rng(0)
  sparse = np.where(rng.random(shape) < 0.1, rng.uniform(2, 80, shape), 0).astype(np.float32)
  target = np.where(rng.random(shape) < 0.3, rng.uniform(2, 80, shape), 0).astype(np.float32)
  return {"sparse": jnp.asarray(sparse), "target": jnp.asarray(target)}


def _step(variant: str, loss_name: str, remat: bool):
  model = models.build_model(variant, remat=remat)
  variables = models.init_variables(model, jax.random.key(0))
  state = training_step.create_train_state(model, variables, learning_rate=0.01)
  batch = _batch()
  (loss, (out, new_stats)), grads = jax.jit(functools.partial(training_step.loss_and_grads, loss_name=loss_name))(
      state, state.params, batch)  # the step's forward, loss and backward (the Adam update adds nothing remat touches)
  return variables, loss, grads, new_stats, out.depth


@pytest.mark.slow
@pytest.mark.parametrize("variant,loss_name", VARIANT_LOSS)
def test_a_training_step_with_remat_equals_one_without(variant, loss_name):
  assert loss_name in losses.LOSSES
  v0, loss0, g0, s0, d0 = _step(variant, loss_name, remat=False)
  v1, loss1, g1, s1, d1 = _step(variant, loss_name, remat=True)
  same = lambda a, b: jax.tree.all(jax.tree.map(lambda x, y: bool(np.array_equal(x, y)), a, b))  # noqa: E731
  assert jax.tree.structure(v0) == jax.tree.structure(v1)  # the same parameter names: checkpoints load either way
  assert same(v0, v1)
  assert float(loss0) == float(loss1)
  assert same(s0, s1)  # the BatchNorm statistics of the step
  assert same(d0, d1)  # the train-mode prediction
  # Rounding bound: a gradient element sums over the batch's n = B*H*W pixels; reordering such a sum moves it by
  # about sqrt(n) float32 ulps of the gradient's scale (random-walk rounding), here sqrt(4096) = 64 ulps of the
  # largest gradient element. Measured on the AMD EPYC host: 19 ulps (pncnn), 2 ulps (ncnn_conf_l1).
  scale = max(float(np.abs(np.asarray(g)).max()) for g in jax.tree.leaves(g0))
  ulps = np.sqrt(np.prod(_batch()["target"].shape)) * 2.0**-23 * scale
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g0), jax.tree.leaves(g1)):
    diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max()
    assert diff <= ulps, f"{jax.tree_util.keystr(path)}: {diff} > {ulps} (64 ulps of {scale})"
  assert np.abs(np.asarray(jax.tree.leaves(g0)[0])).max() > 0  # a real gradient


def test_remat_is_on_by_default_on_cpu_and_not_a_config_setting():
  assert models.PNCNN().remat is None  # None: on where the backend is the CPU (this test's), off on accelerators
  assert jax.default_backend() == "cpu"
  jaxpr = str(jax.make_jaxpr(lambda v, x: models.PNCNN().apply(v, x, train=True, mutable=["batch_stats"]))(
      models.init_variables(models.PNCNN(), jax.random.key(0)), jnp.ones((1, 16, 16, 1))))
  assert "remat" in jaxpr or "checkpoint" in jaxpr
  assert "remat" not in from_config.model_settings(from_config.load_config("configs/synthetic.py:pncnn"))
