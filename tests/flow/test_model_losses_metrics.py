"""The multi-channel pNCNN for sparse flow: C-channel NConv, the flow model's structure, the flow losses and metrics.

Golden values are derived by hand next to each test (the official code has no flow model).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax import losses
from pncnn_jax.flow import losses as flow_losses
from pncnn_jax.flow import metrics as flow_metrics
from pncnn_jax.flow import model as flow_model
from pncnn_jax.nn import layers


def _same_corr(a, k):
  """Reference 'same' cross-correlation of one (B, H, W) channel with one (kh, kw) kernel, zero padding, numpy."""
  kh, kw = k.shape
  p = np.pad(a, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))
  out = np.zeros(a.shape, np.float64)
  for i in range(kh):
    for j in range(kw):
      out += k[i, j] * p[:, i:i + a.shape[1], j:j + a.shape[2]]
  return out


def test_nconv_with_several_channels_matches_a_per_channel_reference():
  # nconv with C_in = 3, C_out = 2: numerator and denominator are sums over the input channels of single-channel
  # correlations, x_out = num / (den + eps) + b, c_out = den / sum_{i,j,c} W[i, j, c, o] (pNCNN eq. 2).
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 9, 11, 3))
  c = rng.uniform(size=(2, 9, 11, 3)) * (rng.uniform(size=(2, 9, 11, 3)) < 0.5)
  w = rng.uniform(size=(5, 5, 3, 2))
  b = np.array([0.1, -0.2])
  x_out, c_out = layers.nconv(*(jnp.asarray(a, jnp.float32) for a in (x, c, w, b)))
  for o in range(2):
    num = sum(_same_corr(x[..., i] * c[..., i], w[:, :, i, o]) for i in range(3))
    den = sum(_same_corr(c[..., i], w[:, :, i, o]) for i in range(3))
    np.testing.assert_allclose(np.asarray(x_out)[..., o], num / (den + layers.NCONV_EPS) + b[o], rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(c_out)[..., o], den / w[..., o].sum(), rtol=2e-5, atol=1e-6)


def test_nconv_with_a_block_diagonal_kernel_is_independent_per_channel():
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(1, 8, 10, 2)), jnp.float32)
  c = jnp.asarray(rng.uniform(size=(1, 8, 10, 2)), jnp.float32)
  w = rng.uniform(size=(3, 3, 2, 2)).astype(np.float32)
  w[:, :, 0, 1] = w[:, :, 1, 0] = 0.0
  b = jnp.asarray([0.3, -0.4])
  x_out, c_out = layers.nconv(x, c, jnp.asarray(w), b)
  for k in range(2):
    xk, ck = layers.nconv(x[..., k:k + 1], c[..., k:k + 1], jnp.asarray(w[:, :, k:k + 1, k:k + 1]), b[k:k + 1])
    np.testing.assert_allclose(x_out[..., k:k + 1], xk, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(c_out[..., k:k + 1], ck, rtol=1e-6, atol=1e-7)


def _sparse_flow(key, shape=(2, 24, 40), density=0.2):
  k1, k2 = jax.random.split(key)
  m = (jax.random.uniform(k1, shape + (1,)) < density).astype(jnp.float32)
  f = 5.0 * jax.random.normal(k2, shape + (2,)) * m
  return jnp.concatenate([f, m], axis=-1)


def test_fold_and_unfold_are_inverse():
  x = jnp.arange(2 * 3 * 4 * 2, dtype=jnp.float32).reshape(2, 3, 4, 2)
  folded = flow_model.fold_channels(x)
  assert folded.shape == (4, 3, 4, 1)
  np.testing.assert_array_equal(folded[1, ..., 0], x[1, ..., 0])  # channel 0 of image 1
  np.testing.assert_array_equal(folded[2, ..., 0], x[0, ..., 1])  # channel 1 of image 0
  np.testing.assert_array_equal(flow_model.unfold_channels(folded, 2), x)


def test_flow_model_applies_one_nconv_network_to_each_component_with_the_shared_confidence():
  model = flow_model.build_flow_model("flow_ncnn_conf", unet_features=(4, 4, 8, 8))
  variables = flow_model.init_flow_variables(model, jax.random.key(0))
  sparse = _sparse_flow(jax.random.key(1))
  out = jax.jit(model.apply)(variables, sparse)
  assert out.flow.shape == (2, 24, 40, 2) and out.depth is out.flow
  assert out.confidence.shape == out.input_confidence.shape == out.nconv_confidence.shape == (2, 24, 40, 1)
  np.testing.assert_array_equal(out.confidence, out.nconv_confidence)  # no variance network: the NConv one
  m = sparse[..., 2:]
  assert float(jnp.max(jnp.where(m > 0, 0.0, out.input_confidence))) == 0.0  # c0 is zero off the tracks
  assert float(jnp.min(jnp.where(m > 0, out.input_confidence, 1.0))) > 0.0
  nconv = {"params": variables["params"]["nconv"]}
  from pncnn_jax.nn import models  # pylint: disable=g-import-not-at-top
  nconv_unet = jax.jit(models.NConvUNet().apply)
  for k in range(2):
    xk, ck = nconv_unet(nconv, sparse[..., k:k + 1], out.input_confidence)
    np.testing.assert_allclose(out.flow[..., k:k + 1], xk, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.nconv_confidence, ck, rtol=1e-6, atol=1e-7)


def test_binary_flow_model_commutes_with_rotating_the_vectors():
  # NConvUNet is affine in the data, out = A x + beta (normalized convolution keeps constants, so every layer's bias
  # adds up to beta = out(0)); with one scalar network per component A commutes with rotating all vectors by R:
  # out(R x) - beta = R (out(x) - beta).
  model = flow_model.build_flow_model("flow_ncnn")
  variables = flow_model.init_flow_variables(model, jax.random.key(2))
  sparse = _sparse_flow(jax.random.key(3))
  a = 0.7
  rot = jnp.asarray([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], jnp.float32)
  rotated = jnp.concatenate([sparse[..., :2] @ rot.T, sparse[..., 2:]], axis=-1)
  apply = jax.jit(model.apply)
  beta = apply(variables, sparse.at[..., :2].set(0.0)).flow
  out, out_rot = apply(variables, sparse).flow, apply(variables, rotated).flow
  np.testing.assert_allclose(out_rot - beta, (out - beta) @ rot.T, rtol=1e-4, atol=1e-4)


def test_flow_model_rejects_a_depth_shaped_input():
  model = flow_model.build_flow_model("flow_ncnn")
  variables = flow_model.init_flow_variables(model, jax.random.key(0))
  with pytest.raises(ValueError, match=r"expected sparse of shape \(B, H, W, 3\)"):
    model.apply(variables, jnp.zeros((1, 8, 8, 1)))
  with pytest.raises(ValueError, match="mask_input_confidence"):
    flow_model.build_flow_model("flow_pncnn", mask_input_confidence=True)


def test_anisotropic_variant_predicts_one_precision_per_component():
  model = flow_model.build_flow_model("flow_pncnn_aniso", unet_features=(4, 4, 8, 8))
  sparse = jax.ShapeDtypeStruct((2, 24, 40, 3), jnp.float32)
  variables = jax.eval_shape(model.init, jax.random.key(0), sparse)  # shapes only: nothing is compiled
  out = jax.eval_shape(model.apply, variables, sparse)
  assert out.flow.shape == (2, 24, 40, 2) and out.confidence.shape == (2, 24, 40, 2)
  assert variables["params"]["var_estimator"]["outc"]["kernel"].shape == (1, 1, 4, 2)


# --- losses --------------------------------------------------------------------------------------------------


def _one_pixel(err, valid=1.0):
  """pred 0 and target [err, valid] at one pixel, plus a second pixel that is invalid and holds NaN/inf."""
  pred = jnp.zeros((1, 1, 2, 2))
  target = jnp.asarray([[[[err[0], err[1], valid], [np.nan, np.inf, 0.0]]]], jnp.float32)
  return pred, target


def test_flow_nll_hand_values_isotropic_and_diagonal():
  pred, target = _one_pixel((3.0, 4.0))
  # isotropic c = 2: sum_k (c e_k^2 - log c) / 2 = (2 * 25 - 2 log 2) / 2 = 25 - log 2
  c = jnp.asarray([[[[2.0], [np.nan]]]])
  np.testing.assert_allclose(flow_losses.flow_nll(pred, c, target), 25 - math.log(2), rtol=1e-6)
  # diagonal c = (1, 4): (1 * 9 - log 1) / 2 + (4 * 16 - log 4) / 2
  c2 = jnp.asarray([[[[1.0, 4.0], [np.nan, np.nan]]]])
  np.testing.assert_allclose(flow_losses.flow_nll(pred, c2, target), 4.5 + 32 - math.log(4) / 2, rtol=1e-6)
  # = the 2-D Gaussian NLL minus log(2 pi): -log N(e; 0, I/c) = c |e|^2 / 2 - log(c) + log(2 pi)
  nll = 2.0 * 25 / 2 - math.log(2.0) + math.log(2 * math.pi)
  np.testing.assert_allclose(flow_losses.flow_nll(pred, c, target) + math.log(2 * math.pi), nll, rtol=1e-6)
  assert flow_metrics.gaussian_nll_2d(np.asarray(pred), np.asarray(c), np.asarray(target)) == pytest.approx(nll)


def test_flow_nll_is_minimal_at_c_equal_two_over_the_squared_error_and_ignores_invalid_pixels():
  pred, target = _one_pixel((3.0, 4.0))
  f = lambda c: flow_losses.flow_nll(pred, jnp.full((1, 1, 2, 1), c), target)  # noqa: E731
  g = jax.grad(f)(2.0 / 25.0)
  assert abs(float(g)) < 1e-4 and f(2.0 / 25.0) < f(0.1) and f(2.0 / 25.0) < f(0.06)
  grads = jax.grad(lambda p: flow_losses.flow_nll(p, jnp.ones((1, 1, 2, 1)), target))(pred)
  assert np.isfinite(np.asarray(grads)).all() and float(jnp.abs(grads[0, 0, 1]).max()) == 0.0


def test_flow_epe_loss_value_and_its_gradient_at_zero_error():
  pred, target = _one_pixel((3.0, 4.0))
  assert float(flow_losses.flow_epe(pred, target)) == pytest.approx(5.0)
  g = jax.grad(lambda p: flow_losses.flow_epe(p, target.at[..., :2].set(0.0)))(pred)
  assert np.isfinite(np.asarray(g)).all()
  empty = target.at[..., 2].set(0.0)
  assert float(flow_losses.flow_epe(pred, empty)) == 0.0


def test_flow_losses_are_in_the_registry_with_their_precision_rule():
  assert {"flow_epe", "flow_nll"} <= set(losses.LOSSES)
  assert losses.precision_of(np.array([2.0]), "flow_nll") == 2.0 and losses.precision_of(1.0, "flow_epe") is None
  with pytest.raises(ValueError, match=r"target \(B, H, W, C \+ 1\)"):
    flow_losses.flow_epe(jnp.zeros((1, 2, 2, 2)), jnp.zeros((1, 2, 2, 2)))


# --- metrics -------------------------------------------------------------------------------------------------


def test_flow_metrics_hand_values():
  # One 1x4 image. Ground truth (10, 0), (0, 0), (100, 0), (1, 0); predictions off by 5 (3-4-5), 0, 4 and 1 px, the
  # last pixel invalid. EPE over the valid three: 5, 0, 4 -> mean 3; RMS sqrt((25 + 0 + 16) / 3). Outliers: EPE > 3
  # and > 5 % of |gt|: pixel 0 (5 > 3, 5 > 0.5) yes, pixel 2 (4 > 3 but 4 < 5) no -> 1 of 3.
  target = np.array([[[[10, 0, 1], [0, 0, 1], [100, 0, 1], [1, 0, 0]]]], np.float64)
  pred = np.array([[[[13, 4], [0, 0], [104, 0], [2, 0]]]], np.float64)
  m = flow_metrics.flow_metrics(pred, target)
  assert m["epe"][0] == pytest.approx(3.0) and m["rmse"][0] == pytest.approx(math.sqrt(41 / 3))
  assert m["outliers"][0] == pytest.approx(100 / 3) and m["num_valid"][0] == 3


def test_ause_on_epe_hand_values():
  # EPE 1, 2, 3, 4 at fractions 0, 1/4, 1/2, 3/4 removed: the oracle keeps the smallest, means 2.5, 2, 1.5, 1 ->
  # 1, .8, .6, .4; an uncertainty in the reverse order keeps the largest: 2.5, 3, 3.5, 4 -> 1, 1.2, 1.4, 1.6.
  # AUSE = trapz(0, .4, .8, 1.2; dx = 1/4) = 0.45. A perfect ranking gives 0.
  fr = np.array([0.0, 0.25, 0.5, 0.75])
  epe = np.array([1.0, 2.0, 3.0, 4.0])
  assert flow_metrics.ause_epe(epe, epe, fr).ause == pytest.approx(0.0)
  sp = flow_metrics.ause_epe(epe, -epe, fr)
  assert sp.ause == pytest.approx(0.45)
  np.testing.assert_allclose(sp.oracle, [1, .8, .6, .4])
  np.testing.assert_allclose(sp.model, [1, 1.2, 1.4, 1.6])


def test_flow_uncertainty_is_the_predicted_rms_end_point_error():
  assert flow_metrics.flow_uncertainty(np.full((1, 1, 1, 1), 4.0))[0, 0, 0] == pytest.approx(math.sqrt(0.5))
  assert flow_metrics.flow_uncertainty(np.array([[[[1.0, 4.0]]]]))[0, 0, 0] == pytest.approx(math.sqrt(1.25))


def test_flow_accumulator_auroc_of_the_input_confidence_for_the_failures():
  # Four tracks; the two failed ones get the lowest c0 -> AUROC 1; per kind: one gross, one swap.
  target = np.zeros((1, 1, 5, 3))
  target[..., 2] = 1
  sparse = np.zeros((1, 1, 5, 3))
  sparse[0, 0, :4, 2] = 1
  c0 = np.array([0.9, 0.1, 0.8, 0.2, 0.0]).reshape(1, 1, 5, 1)
  corrupted = np.array([False, True, False, True, False]).reshape(1, 1, 5, 1)
  failure = np.array([0, 1, 0, 3, 0]).reshape(1, 1, 5, 1)
  acc = flow_metrics.FlowAccumulator()
  acc.update(np.zeros((1, 1, 5, 2)), target, np.zeros((1, 1, 5)), sparse, c0, corrupted, failure)
  r = acc.result(("none", "gross (x)", "aperture (y)", "swap (z)"))
  assert r["auroc_corrupted"] == 1.0 and r["auroc_gross"] == 1.0 and r["auroc_swap"] == 1.0
  assert math.isnan(r["auroc_aperture"]) and r["num_tracks"] == 4
  assert r["c0_corrupted"] == pytest.approx(0.15) and r["c0_clean"] == pytest.approx(0.85)
  assert r["corrupted_fraction"] == 0.5 and r["epe"] == 0.0 and r["nll"] is None
