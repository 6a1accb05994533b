"""Losses: parity with the official loss classes (golden files) and derivations (docs/SPEC.md §6)."""

import functools
import math
import statistics

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax import losses

from conftest import GOLDEN, load_npz, nchw_to_nhwc

RTOL = 1e-5  # reference/README.md: losses and metrics 1e-5 relative for a float32 port

# Official class -> (our registry name, function on (mu, c, t)).
CLASSES = {
    "MaskedL1Loss": ("masked_l1", lambda mu, c, t: losses.masked_l1(mu, t)),
    "MaskedL2Loss": ("masked_l2", lambda mu, c, t: losses.masked_l2(mu, t)),
    "MaskedProbLoss": ("gaussian_nll", losses.gaussian_nll),
    "MaskedProbExpLoss": ("gaussian_nll_exp", losses.gaussian_nll_exp),
}
METRICS_FILES = ["kitti_ncnn_conf_l1__kitti4_f01", "kitti_pncnn_rand0__kitti4_f01",
                 "nyu_ncnn_conf_l1__nyu_480x640"]
REAL_FILES = [f"torch_kitti_image_0{i}__kitti_ncnn_conf_l{j}" for i in (2, 3) for j in (1, 2)]
TRAIN_STEP_FILES = ["kitti_ncnn_conf_l1__MaskedL1Loss__b2_64x96",
                    "kitti_ncnn_conf_l2__MaskedL2Loss__b2_64x96",
                    "kitti_pncnn_rand0__MaskedProbLoss__b2_64x96",
                    "kitti_pncnn_exp_rand1__MaskedProbExpLoss__b2_64x96"]


@flax.struct.dataclass
class FakeOutput:
  """Stand-in for models.ModelOutput (same fields), built from golden NCHW `out` arrays."""

  depth: jax.Array
  confidence: jax.Array
  input_confidence: jax.Array
  nconv_confidence: jax.Array


def make_output(out_nchw: np.ndarray) -> FakeOutput:
  o = jnp.asarray(nchw_to_nhwc(out_nchw).astype(np.float32))
  return FakeOutput(o[..., 0:1], o[..., 1:2], o[..., 2:3], o[..., 1:2])


@functools.lru_cache(maxsize=None)
def golden(relpath: str) -> dict:
  return load_npz(GOLDEN / relpath)


@pytest.fixture(autouse=True)
def _needs_shared(shared_dir):
  del shared_dir


@pytest.mark.parametrize("cls", sorted(CLASSES))
@pytest.mark.parametrize("relpath", [f"metrics/{f}.npz" for f in METRICS_FILES]
                         + [f"real/{f}.npz" for f in REAL_FILES])
def test_loss_matches_official_class(relpath, cls):
  g = golden(relpath)
  out, target = make_output(g["out"]), jnp.asarray(nchw_to_nhwc(g["target"]))
  name, fn = CLASSES[cls]
  want = float(g[f"loss/{cls}"])
  np.testing.assert_allclose(float(fn(out.depth, out.confidence, target)), want, rtol=RTOL)
  np.testing.assert_allclose(float(losses.get_loss(name)(out, target)), want, rtol=RTOL)


@pytest.mark.parametrize("fname", TRAIN_STEP_FILES)
def test_loss_matches_train_step_golden(fname):
  """`loss` of one official training step, recomputed from the stored train-mode output."""
  g = golden(f"train_step/{fname}.npz")
  name = CLASSES[fname.split("__")[1]][0]
  loss_fn = jax.jit(losses.get_loss(name))
  got = loss_fn(make_output(g["out_train"]), jnp.asarray(nchw_to_nhwc(g["target"])))
  assert got.shape == () and got.dtype == jnp.float32
  np.testing.assert_allclose(float(got), float(g["loss"]), rtol=RTOL)


def _small_case():
  """1x2x2x1: pred 1,2,3,4; target 0 (invalid),1,5,4; errors on V: -1, 2, 0."""
  pred = jnp.array([1.0, 2.0, 3.0, 4.0]).reshape(1, 2, 2, 1)
  target = jnp.array([0.0, 1.0, 5.0, 4.0]).reshape(1, 2, 2, 1)
  return pred, target


def test_l1_l2_normalisation_by_hand():
  pred, target = _small_case()
  # Official: divide by all 4 pixels, not by the 3 valid ones.
  np.testing.assert_allclose(losses.masked_l1(pred, target), (1 + 2 + 0) / 4, rtol=1e-7)
  np.testing.assert_allclose(losses.masked_l2(pred, target), (1 + 4 + 0) / 4, rtol=1e-7)


def test_gaussian_nll_is_twice_the_nll_minus_log_2pi():
  """c e^2 - log c = 2 NLL(e; sigma^2 = 1/c) - log 2 pi, averaged over V (docs/SPEC.md §6)."""
  rng = np.random.default_rng(0)
  mu = rng.uniform(1, 50, (2, 3, 5, 1)).astype(np.float32)
  t = (mu + rng.normal(0, 2, mu.shape)).astype(np.float32) * (rng.random(mu.shape) > 0.4)
  c = rng.uniform(0.05, 3, mu.shape).astype(np.float32)
  v = t > 0
  nll = [-math.log(statistics.NormalDist(float(m), 1 / math.sqrt(float(p))).pdf(float(y)))
         for m, p, y in zip(mu[v], c[v], t[v])]
  want = np.mean(2 * np.array(nll) - math.log(2 * math.pi))
  np.testing.assert_allclose(losses.gaussian_nll(mu, c, t), want, rtol=1e-5)


def test_laplace_nll_is_the_laplace_nll_minus_log_2():
  rng = np.random.default_rng(1)
  mu = rng.uniform(1, 50, (2, 4, 4, 1)).astype(np.float32)
  t = (mu + rng.laplace(0, 1, mu.shape)).astype(np.float32) * (rng.random(mu.shape) > 0.3)
  c = rng.uniform(0.1, 3, mu.shape).astype(np.float32)
  v = t > 0
  b = 1 / c[v].astype(np.float64)
  nll = np.log(2 * b) + np.abs(t[v] - mu[v].astype(np.float64)) / b  # Laplace(mu, b) NLL
  np.testing.assert_allclose(losses.laplace_nll(mu, c, t), np.mean(nll - math.log(2)), rtol=1e-5)


@pytest.mark.parametrize("name,optimum", [
    ("gaussian_nll", lambda e: 1 / e**2),  # d/dc (c e^2 - log c) = 0
    ("gaussian_nll_beta", lambda e: 1 / e**2),  # the weight is a constant under the gradient: same optimum
    ("gaussian_nll_l1", lambda e: 1 / e**2),  # the L1 term does not depend on c
    ("laplace_nll", lambda e: 1 / abs(e)),  # d/dc (c|e| - log c) = 0
])
def test_per_pixel_minimiser_over_c(name, optimum):
  fn = getattr(losses, name)
  e = 0.37
  mu, t = jnp.full((1, 1, 1, 1), 10.0), jnp.full((1, 1, 1, 1), 10.0 + e)
  c_star = optimum(e)
  g = jax.grad(lambda c: fn(mu, c, t))(jnp.full((1, 1, 1, 1), c_star))
  np.testing.assert_allclose(g, 0.0, atol=1e-4)
  if name == "gaussian_nll_beta":
    return  # its value is not minimised there (the weight is part of it); its training fixed point is
  cs = c_star * np.array([0.5, 0.9, 1.0, 1.1, 2.0])
  vals = [float(fn(mu, jnp.full((1, 1, 1, 1), c), t)) for c in cs]
  assert np.argmin(vals) == 2
  if name == "laplace_nll":
    np.testing.assert_allclose(vals[2], 1 + math.log(abs(e)), rtol=1e-4)


def test_gaussian_nll_exp_per_pixel_optimum():
  """The pNCNN-Exp optimum satisfies c exp(c) = 1/e^2 (docs/SPEC.md §6): zero gradient there."""
  c_star = 0.8
  e = 1 / math.sqrt(c_star * math.exp(c_star))
  mu, t = jnp.full((1, 1, 1, 1), 5.0), jnp.full((1, 1, 1, 1), 5.0 + e)
  g = jax.grad(lambda c: losses.gaussian_nll_exp(mu, c, t))(jnp.full((1, 1, 1, 1), c_star))
  np.testing.assert_allclose(g, 0.0, atol=1e-5)


def test_gaussian_nll_beta_weights_each_pixel_by_sigma_to_the_2_beta():
  """beta-NLL: the value is the mean of c^-beta (c e^2 - log c); beta = 0 is the pNCNN loss; for beta = 1 the
  gradient on mu is the L2 loss's, 2 (mu - t) / |V|, whatever the precision; the weight carries no gradient."""
  rng = np.random.default_rng(2)
  mu = rng.uniform(1, 50, (2, 5, 5, 1)).astype(np.float32)
  t = (mu + rng.normal(0, 2, mu.shape)).astype(np.float32) * (rng.random(mu.shape) > 0.4)
  c = rng.uniform(0.05, 3, mu.shape).astype(np.float32)
  v = t > 0
  e, cv = (t[v] - mu[v]).astype(np.float64), c[v].astype(np.float64)
  for beta in (0.5, 1.0):
    want = np.mean(cv ** -beta * (cv * e**2 - np.log(cv)))
    np.testing.assert_allclose(losses.gaussian_nll_beta(mu, c, t, beta), want, rtol=1e-5)
  assert float(losses.gaussian_nll_beta(mu, c, t, 0.0)) == float(losses.gaussian_nll(mu, c, t))
  g_mu, g_c = jax.grad(lambda m, p: losses.gaussian_nll_beta(m, p, t, 1.0), argnums=(0, 1))(mu, c)
  np.testing.assert_allclose(np.asarray(g_mu)[v], 2 * (mu[v] - t[v]) / v.sum(), rtol=1e-4)
  np.testing.assert_array_equal(np.asarray(g_mu)[~v], 0.0)
  # d/dc of the term with the weight held fixed: c^-beta (e^2 - 1/c).
  np.testing.assert_allclose(np.asarray(g_c)[v], cv ** -1.0 * (e**2 - 1 / cv) / v.sum(), rtol=1e-4)
  with pytest.raises(ValueError, match="gaussian_nll_beta: beta must be >= 0, got -0.5"):
    losses.gaussian_nll_beta(mu, c, t, -0.5)


def test_gaussian_nll_l1_adds_an_l1_term_on_mu_that_ignores_the_precision():
  """NLL (plain or beta-NLL) + w |t - mu|, averaged over V; w = 0 gives the NLL bit for bit; the gradient on mu is
  the NLL's plus w sign(mu - t) / |V| at every valid pixel, also where c is tiny; c's gradient is the NLL's."""
  rng = np.random.default_rng(3)
  mu = rng.uniform(1, 50, (2, 5, 5, 1)).astype(np.float32)
  t = (mu + rng.normal(0, 2, mu.shape)).astype(np.float32) * (rng.random(mu.shape) > 0.4)
  c = rng.uniform(0.05, 3, mu.shape).astype(np.float32)
  c[0, 0, :3] = 1e-6  # pixels the precision has given up on
  v = t > 0
  e, cv = (t[v] - mu[v]).astype(np.float64), c[v].astype(np.float64)
  for beta, w in ((0.0, 1.0), (0.5, 1.0), (0.5, 0.3)):
    want = np.mean(cv ** -beta * (cv * e**2 - np.log(cv)) + w * np.abs(e))
    np.testing.assert_allclose(losses.gaussian_nll_l1(mu, c, t, beta, w), want, rtol=1e-5)
  assert float(losses.gaussian_nll_l1(mu, c, t, 0.0, 0.0)) == float(losses.gaussian_nll(mu, c, t))
  assert float(losses.gaussian_nll_l1(mu, c, t, 0.5, 0.0)) == float(losses.gaussian_nll_beta(mu, c, t, 0.5))
  w = 0.7
  for beta, nll in ((0.0, losses.gaussian_nll), (0.5, lambda m, p, t: losses.gaussian_nll_beta(m, p, t, 0.5))):
    g_mu, g_c = jax.grad(lambda m, p: losses.gaussian_nll_l1(m, p, t, beta, w), argnums=(0, 1))(mu, c)
    n_mu, n_c = jax.grad(nll, argnums=(0, 1))(mu, c, t)
    np.testing.assert_allclose(np.asarray(g_mu - n_mu)[v], w * np.sign(mu[v] - t[v]) / v.sum(), rtol=1e-4, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(g_mu)[~v], 0.0)
    np.testing.assert_allclose(g_c, n_c, rtol=1e-5)
  with pytest.raises(ValueError, match="gaussian_nll_l1: weight must be >= 0, got -1"):
    losses.gaussian_nll_l1(mu, c, t, 0.0, -1)
  with pytest.raises(ValueError, match="gaussian_nll_l1: beta must be >= 0, got -0.5"):
    losses.gaussian_nll_l1(mu, c, t, -0.5)


ALL_FNS = ["masked_l1", "masked_l2", "gaussian_nll", "gaussian_nll_beta", "gaussian_nll_l1", "gaussian_nll_exp",
           "laplace_nll"]


def _call(name, pred, c, target):
  fn = getattr(losses, name)
  return fn(pred, target) if name.startswith("masked_") else fn(pred, c, target)


@pytest.mark.parametrize("name", ALL_FNS)
def test_empty_valid_set_gives_zero_and_zero_grads(name):
  pred = jnp.full((2, 3, 4, 1), 7.0)
  c = jnp.full((2, 3, 4, 1), 0.5)
  target = jnp.zeros((2, 3, 4, 1))
  val, grads = jax.value_and_grad(lambda p, c: _call(name, p, c, target), argnums=(0, 1))(pred, c)
  assert float(val) == 0.0
  for g in grads:
    np.testing.assert_array_equal(g, 0.0)


@pytest.mark.parametrize("name", ALL_FNS)
def test_invalid_pixels_cannot_leak_inf_or_nan(name):
  """inf/NaN predictions or confidences where target == 0 change neither value nor gradient."""
  pred, target = _small_case()
  c = jnp.array([0.3, 0.5, 2.0, 1.5]).reshape(1, 2, 2, 1)
  bad_pred = pred.at[0, 0, 0, 0].set(jnp.nan)
  bad_c = c.at[0, 0, 0, 0].set(jnp.inf)
  f = jax.value_and_grad(lambda p, c: _call(name, p, c, target), argnums=(0, 1))
  (v1, g1), (v2, g2) = f(pred, c), f(bad_pred, bad_c)
  assert np.isfinite(float(v2))
  np.testing.assert_array_equal(v1, v2)
  for a, b in zip(g1, g2):
    np.testing.assert_array_equal(a, b)


def test_registry_and_get_loss():
  assert set(losses.LOSSES) == {"masked_l1", "masked_l2", "gaussian_nll", "gaussian_nll_beta", "gaussian_nll_beta1",
                                "gaussian_nll_l1", "gaussian_nll_beta_l1",
                                "gaussian_nll_exp", "laplace_nll",
                                "flow_epe", "flow_nll",  # flow: pncnn_jax.flow.losses
                                "gaussian_nll_logvar"}  # the dense baselines: pncnn_jax.baselines.losses
  with pytest.raises(ValueError, match="unknown loss 'l3'.*gaussian_nll.*masked_l1"):
    losses.get_loss("l3")
  # The probabilistic losses use out.confidence, not input_confidence.
  pred, target = _small_case()
  c = jnp.array([0.3, 0.5, 2.0, 1.5]).reshape(1, 2, 2, 1)
  out = FakeOutput(pred, c, jnp.full_like(c, 9.0), jnp.full_like(c, 9.0))
  for name in ("gaussian_nll", "gaussian_nll_beta", "gaussian_nll_l1", "gaussian_nll_exp", "laplace_nll"):
    assert float(losses.get_loss(name)(out, target)) == float(_call(name, pred, c, target))
  assert float(losses.get_loss("gaussian_nll_beta1")(out, target)) == float(
      losses.gaussian_nll_beta(pred, c, target, beta=1.0))
  assert float(losses.get_loss("gaussian_nll_beta_l1")(out, target)) == float(
      losses.gaussian_nll_l1(pred, c, target, beta=losses.NLL_BETA, weight=losses.AUX_L1_WEIGHT))


def test_bad_shapes_are_named():
  x = jnp.ones((2, 8, 8, 1))
  with pytest.raises(ValueError, match=r"masked_l1: `target` must be \(B, H, W, 1\).*\(2, 8, 8\)"):
    losses.masked_l1(x, jnp.ones((2, 8, 8)))
  with pytest.raises(ValueError, match="gaussian_nll: all inputs must have the same shape"):
    losses.gaussian_nll(x, jnp.ones((2, 8, 4, 1)), x)


def test_each_loss_declares_its_precision_rule():
  """1/sigma^2 of the distribution each loss fits: c (Gaussian), exp(c) (the Exp data term), c^2/2 (Laplace with
  b = 1/c: variance 2 b^2); none for L1/L2. numpy in float64, jax in its own dtype."""
  assert set(losses.PRECISION_RULES) == set(losses.LOSSES)
  core = ("gaussian_nll", "gaussian_nll_beta", "gaussian_nll_beta1", "gaussian_nll_l1", "gaussian_nll_beta_l1",
          "gaussian_nll_exp", "laplace_nll")
  assert losses.PROBABILISTIC_LOSSES[:len(core)] == core  # the core's, in registration order
  # then the extensions' (flow, the dense baselines), in the order a process happened to import them
  assert sorted(losses.PROBABILISTIC_LOSSES[len(core):]) == ["flow_nll", "gaussian_nll_logvar"]
  c = np.array([0.5, 2.0, 30.0], np.float32)
  for name, want in (("gaussian_nll", c), ("gaussian_nll_beta", c), ("gaussian_nll_beta1", c), ("gaussian_nll_l1", c),
                     ("gaussian_nll_beta_l1", c), ("gaussian_nll_exp", np.exp(c.astype(np.float64))),
                     ("laplace_nll", c.astype(np.float64) ** 2 / 2),
                     ("gaussian_nll_logvar", np.exp(c.astype(np.float64)))):  # c = log precision = -log variance
    got = losses.precision_of(c, name)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-15)
    got_jax = losses.precision_of(jnp.asarray(c), name)
    assert isinstance(got_jax, jax.Array) and got_jax.dtype == jnp.float32
    np.testing.assert_allclose(got_jax, want, rtol=1e-6)
  assert losses.precision_of(c, "masked_l1") is None and losses.precision_of(c, "masked_l2") is None
  with pytest.raises(ValueError, match="unknown loss 'l3'"):
    losses.precision_of(c, "l3")
