"""Layer numerics: golden parity of each NConv call, and properties that must hold by construction."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax.nn import layers, models

from conftest import GOLDEN, WEIGHTS, load_npz, nchw_to_nhwc


def _rand(key, shape, lo=0.0, hi=1.0):
  return jax.random.uniform(jax.random.key(key), shape, jnp.float32, lo, hi)


# ---------------------------------------------------------------------------------------------- golden


def test_softplus_matches_cached_effective_weights(shared_dir):
  """softplus_10(weight_p) equals the effective weight torch cached in the checkpoint (docs/SPEC.md §12)."""
  for name in ("kitti_ncnn_conf_l1", "nyu_ncnn_conf_l1", "kitti_pncnn_rand0"):
    sd = load_npz(WEIGHTS / f"{name}.npz")
    eff = load_npz(WEIGHTS / f"{name}__nconv_effective_weights.npz")
    for k in range(1, 8):
      got = np.asarray(layers.softplus_beta(jnp.asarray(sd[f"nconv.nconv{k}.weight_p"])))
      np.testing.assert_allclose(got, eff[f"nconv.nconv{k}.weight"], rtol=1e-6, atol=1e-30)


def test_each_nconv_call_matches_golden(shared_dir):
  """Feed each of the 11 NConv calls its golden inputs; compare with its golden outputs."""
  golden = load_npz(GOLDEN / "kitti_ncnn_conf_l1" / "small_64x96.npz")
  sd = load_npz(WEIGHTS / "kitti_ncnn_conf_l1.npz")
  keys = sorted({k.split("/")[2] for k in golden if k.startswith("dbg/nconv/")})
  for key in keys:
    layer = key.split("_")[1]
    w = layers.softplus_beta(jnp.asarray(sd[f"nconv.{layer}.weight_p"].transpose(2, 3, 1, 0)))
    b = jnp.asarray(sd[f"nconv.{layer}.bias"])
    g = {p: jnp.asarray(nchw_to_nhwc(golden[f"dbg/nconv/{key}/{p}"])) for p in ("in_x", "in_c", "out_x", "out_c")}
    x_out, c_out = layers.nconv(g["in_x"], g["in_c"], w, b)
    np.testing.assert_allclose(x_out, g["out_x"], atol=5e-4, err_msg=key)
    np.testing.assert_allclose(c_out, g["out_c"], rtol=1e-4, atol=1e-7, err_msg=key)


def test_downsample_and_upsample_match_golden_wiring(shared_dir):
  """The golden inputs of nconv2 at 1/2 scale are DS(nconv3 outputs at full scale) on an odd 75x125 frame,
  and nconv6's inputs are [NN(nconv5 out), nconv3 out]: checks DS, the NN index rule and the flipped cat."""
  golden = load_npz(GOLDEN / "kitti_ncnn_conf_l1" / "odd_75x125.npz")
  get = lambda key, p: jnp.asarray(nchw_to_nhwc(golden[f"dbg/nconv/{key}/{p}"]))  # noqa: E731
  x_ds, c_ds = layers.confidence_downsample(get("02_nconv3", "out_x"), get("02_nconv3", "out_c"))
  np.testing.assert_array_equal(x_ds, get("03_nconv2", "in_x"))
  np.testing.assert_array_equal(c_ds, get("03_nconv2", "in_c"))
  full = get("02_nconv3", "out_x")
  up = layers.nearest_upsample(get("08_nconv5", "out_x"), full.shape[1:3])
  np.testing.assert_array_equal(jnp.concatenate([up, full], -1), get("09_nconv6", "in_x"))


# ---------------------------------------------------------------------------------------------- properties


def test_zero_confidence_pixels_do_not_change_nconv():
  x, c = _rand(0, (2, 16, 20, 3), 0, 50), _rand(1, (2, 16, 20, 3))
  hole = _rand(2, c.shape) < 0.5
  c = jnp.where(hole, 0.0, c)
  w, b = _rand(3, (5, 5, 3, 4)), _rand(4, (4,))
  x2 = jnp.where(hole, _rand(5, x.shape, -1e3, 1e3), x)
  for a, b_ in zip(layers.nconv(x, c, w, b), layers.nconv(x2, c, w, b)):
    np.testing.assert_array_equal(a, b_)


def test_zero_confidence_pixels_do_not_change_nconvunet():
  """Through the whole NConvUNet (pooling, upsampling, 11 calls): data under c0 = 0 is never used."""
  model = models.NConvUNet()
  x = _rand(0, (2, 40, 56, 1), 1, 80)
  c = (_rand(1, x.shape) < 0.1).astype(jnp.float32) * _rand(2, x.shape)
  variables = model.init(jax.random.key(0), x, c)
  x2 = jnp.where(c == 0, _rand(3, x.shape, -500, 500), x)
  for a, b in zip(model.apply(variables, x, c), model.apply(variables, x2, c)):
    np.testing.assert_array_equal(a, b)


def test_nconv_is_a_normalised_average():
  """Constant data gives constant + bias everywhere (borders included); c_out is a weighted mean of c."""
  c = _rand(0, (1, 12, 14, 2))
  w, b = _rand(1, (3, 3, 2, 3)), jnp.array([0.5, -1.0, 2.0])
  x_out, c_out = layers.nconv(jnp.full(c.shape, 7.25), c, w, b)
  np.testing.assert_allclose(x_out, 7.25 + jnp.broadcast_to(b, x_out.shape), rtol=1e-6)
  assert float(c_out.max()) <= float(c.max()) * (1 + 1e-6)
  _, c_const = layers.nconv(x_out[..., :2], jnp.full(c.shape, 0.3), w, b)
  np.testing.assert_allclose(c_const[:, 1:-1, 1:-1], 0.3, rtol=1e-6)  # interior: exact average
  assert float(c_const[0, 0, 0, 0]) < 0.3  # border: zero padding lowers the confidence


def test_nconv_is_invariant_to_kernel_scale():
  """x_out and c_out do not change when W is scaled per output channel (docs/SPEC.md §2.1)."""
  x, c = _rand(0, (1, 9, 11, 2), 0, 10), _rand(1, (1, 9, 11, 2))
  w, b = _rand(2, (3, 3, 2, 2)), jnp.zeros(2)
  for a, b_ in zip(layers.nconv(x, c, w, b), layers.nconv(x, c, w * jnp.array([3.0, 0.01]).reshape(1, 1, 1, 2), b)):
    np.testing.assert_allclose(a, b_, rtol=1e-5)


def test_nconv_on_a_sharded_batch_moves_no_data_between_devices():
  """A batch split over devices (data parallelism) stays split through NConv and its gradient: the compiled
  program holds no collective (each row's numerator and denominator are convolved on the row's device)."""
  from jax.sharding import Mesh, NamedSharding, PartitionSpec  # pylint: disable=g-import-not-at-top
  assert jax.device_count() >= 2, "the suite runs on 2 host devices (tests/conftest.py)"
  mesh = Mesh(np.asarray(jax.devices()[:2]), ("data",))
  rows = NamedSharding(mesh, PartitionSpec("data"))
  x, c = _rand(0, (4, 16, 24, 2), 0, 10), _rand(1, (4, 16, 24, 2))
  w, b = _rand(2, (5, 5, 2, 2)), jnp.zeros(2)

  def loss(x, c):  # its gradient needs no reduction over the batch: any collective would be NConv's own
    x_out, c_out = layers.nconv(x, c, w, b)
    return jnp.sum(x_out * c_out)

  fwd_bwd = jax.jit(jax.grad(loss, argnums=(0, 1)), in_shardings=(rows, rows), out_shardings=(rows, rows))
  hlo = fwd_bwd.lower(x, c).compile().as_text()
  found = [op for op in ("collective-permute", "all-to-all", "all-gather", "all-reduce", "reduce-scatter")
           if f" {op}(" in hlo or f" {op}-start(" in hlo]
  assert not found, f"NConv on a batch sharded over 2 devices compiles to {found}"


def test_confidence_downsample_rule():
  c = jnp.array([[1, 3, 2, 2, 0], [3, 0, 2, 2, 9], [0, 0, 5, 1, 9]], jnp.float32)[None, :, :, None]
  x = jnp.arange(15, dtype=jnp.float32).reshape(1, 3, 5, 1)
  x_ds, c_ds = layers.confidence_downsample(x, c)
  assert x_ds.shape == (1, 1, 2, 1)  # odd last row and column dropped
  # window 0: max 3 first at (0,1) [not (1,0)]; window 1: all 2, first is (0,2)
  np.testing.assert_array_equal(x_ds[0, 0, :, 0], [1.0, 2.0])
  np.testing.assert_array_equal(c_ds[0, 0, :, 0], [0.75, 0.5])


def test_confidence_downsample_gradient_goes_to_the_selected_element_only():
  c = jnp.array([[2.0, 2.0], [1.0, 2.0]])[None, :, :, None]
  x = jnp.array([[5.0, 6.0], [7.0, 8.0]])[None, :, :, None]
  gx, gc = jax.grad(lambda x, c: jnp.sum(sum(layers.confidence_downsample(x, c))), argnums=(0, 1))(x, c)
  np.testing.assert_array_equal(gx[0, :, :, 0], [[1, 0], [0, 0]])
  np.testing.assert_array_equal(gc[0, :, :, 0], [[0.25, 0], [0, 0]])


def _first_max_scatter_reference(x: np.ndarray, g: np.ndarray) -> np.ndarray:
  """PyTorch max_pool2d(2, 2) backward: each window's gradient goes to its first maximum (row-major)."""
  out = np.zeros_like(x)
  bsz, h2, w2, ch = g.shape
  for b, i, j, k in np.ndindex(bsz, h2, w2, ch):
    win = x[b, 2 * i:2 * i + 2, 2 * j:2 * j + 2, k].reshape(-1)
    a = int(np.argmax(win))  # numpy's argmax returns the first maximum
    out[b, 2 * i + a // 2, 2 * j + a % 2, k] += g[b, i, j, k]
  return out


@pytest.mark.parametrize("shape", [(2, 7, 9, 3), (1, 8, 6, 2)])
def test_max_pool_values_and_first_max_gradient(shape):
  """Forward = window max (odd tails dropped); gradient = PyTorch's (first maximum only), with many ties."""
  x = np.round(np.asarray(_rand(0, shape, -2, 2))).astype(np.float32)  # integers in [-2, 2]: frequent ties
  x[0, :2, :2, 0] = 0.0  # an all-tied window, as after a ReLU
  h2, w2 = shape[1] // 2, shape[2] // 2
  want = x[:, :2 * h2, :2 * w2].reshape(shape[0], h2, 2, w2, 2, shape[3]).max(axis=(2, 4))
  y, vjp = jax.vjp(layers.max_pool_2x2, jnp.asarray(x))
  np.testing.assert_array_equal(np.asarray(y), want)
  g = np.asarray(_rand(1, want.shape, -1, 1))
  np.testing.assert_array_equal(np.asarray(vjp(jnp.asarray(g))[0]), _first_max_scatter_reference(x, g))


def test_max_pool_propagates_nan():
  x = jnp.array([[1.0, jnp.nan], [3.0, 2.0]])[None, :, :, None]
  y, vjp = jax.vjp(layers.max_pool_2x2, x)
  assert np.isnan(np.asarray(y)).all()
  np.testing.assert_array_equal(np.asarray(vjp(jnp.ones_like(y))[0])[0, :, :, 0], [[0, 1], [0, 0]])


def test_confidence_downsample_matches_the_window_rule_on_random_ties():
  """x and c taken at the first maximum of c in every window; gradients only there (docs/SPEC.md §3.1)."""
  c = np.round(np.asarray(_rand(2, (2, 9, 7, 2), 0, 3))).astype(np.float32)
  x = np.asarray(_rand(3, c.shape, -5, 5))
  (x_ds, c_ds), vjp = jax.vjp(layers.confidence_downsample, jnp.asarray(x), jnp.asarray(c))
  g = np.asarray(_rand(4, x_ds.shape, -1, 1))
  sel = _first_max_scatter_reference(c, np.ones_like(g))  # 1 at each window's selected element

  def window_sum(a):
    return a[:, :8, :6].reshape(2, 4, 2, 3, 2, 2).sum(axis=(2, 4))

  np.testing.assert_array_equal(np.asarray(c_ds) * 4, window_sum(c * sel))
  np.testing.assert_array_equal(np.asarray(x_ds), window_sum(x * sel))
  gx, gc = vjp((jnp.asarray(g), jnp.asarray(g)))
  np.testing.assert_array_equal(np.asarray(gx), _first_max_scatter_reference(c, g))
  np.testing.assert_array_equal(np.asarray(gc), _first_max_scatter_reference(c, g) / 4)


@pytest.mark.parametrize("n_in,n_out", [(9, 18), (9, 19), (10, 25), (7, 12), (4, 37)])
def test_nearest_index_rule(n_in, n_out):
  x = jnp.arange(n_in, dtype=jnp.float32).reshape(1, n_in, 1, 1)
  got = np.asarray(layers.nearest_upsample(x, (n_out, 1)))[0, :, 0, 0]
  scale = np.float32(n_in) / np.float32(n_out)
  want = [min(math.floor(np.float32(d) * scale), n_in - 1) for d in range(n_out)]
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_bilinear_align_corners(n):
  """Against the align_corners formula in float64: corners are preserved, src = dst (n-1)/(2n-1)."""
  x = np.asarray(_rand(0, (2, n, n + 3, 2), -5, 5), np.float64)

  def interp_1d(a, axis, m):
    out_n = 2 * m
    src = np.arange(out_n) * ((m - 1) / (out_n - 1) if out_n > 1 else 0.0)
    i0 = np.floor(src).astype(int)
    i1 = np.minimum(i0 + 1, m - 1)
    lam = (src - i0).reshape([-1 if d == axis else 1 for d in range(a.ndim)])
    return (1 - lam) * np.take(a, i0, axis) + lam * np.take(a, i1, axis)

  want = interp_1d(interp_1d(x, 1, n), 2, n + 3)
  got = np.asarray(layers.bilinear_upsample_x2(jnp.asarray(x, jnp.float32)))
  np.testing.assert_allclose(got, want, atol=2e-5)
  np.testing.assert_allclose(got[:, [0, -1]][:, :, [0, -1]], x[:, [0, -1]][:, :, [0, -1]], atol=1e-6)


def test_rank_checks_name_the_shape():
  with pytest.raises(ValueError, match=r"\(4, 4\)"):
    layers.confidence_downsample(jnp.zeros((4, 4)), jnp.zeros((4, 4)))
  with pytest.raises(ValueError, match="PNCNN.*\\(1, 8, 8, 2\\)"):
    models.build_model("pncnn").init(jax.random.key(0), jnp.zeros((1, 8, 8, 2)))


def test_batch_norm_running_stats_use_unbiased_variance():
  bn = layers.BatchNorm()
  x = _rand(0, (2, 3, 4, 5), -2, 3)
  variables = bn.init(jax.random.key(0), x, train=False)
  y, upd = bn.apply(variables, x, train=True, mutable=["batch_stats"])
  xs = np.asarray(x, np.float64).reshape(-1, 5)
  np.testing.assert_allclose(upd["batch_stats"]["mean"], 0.1 * xs.mean(0), rtol=1e-5)
  np.testing.assert_allclose(upd["batch_stats"]["var"], 0.9 + 0.1 * xs.var(0, ddof=1), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(y).reshape(-1, 5), (xs - xs.mean(0)) / np.sqrt(xs.var(0) + 1e-5),
                             atol=1e-4)


@pytest.mark.parametrize("init,lo,hi", [("published", 0.0693, 1.0 + 0.1120 + 1e-6)])
def test_published_init_range(init, lo, hi):
  """'p' init: kernel_p = softplus_10(bump + U[0,1)) lies in [softplus_10(0.0067), softplus_10(1.1120)]
  (3x3 bump max 0.1120)."""
  params = models.NConvUNet(weight_init=init).init(jax.random.key(0), jnp.zeros((1, 16, 16, 1)),
                                                   jnp.zeros((1, 16, 16, 1)))
  for k in range(1, 7):
    p = np.asarray(params["params"][f"nconv{k}"]["kernel_p"])
    assert lo <= p.min() and p.max() <= hi, (k, p.min(), p.max())
    np.testing.assert_allclose(params["params"][f"nconv{k}"]["bias"], 0.01, rtol=1e-7)
  p7 = np.asarray(params["params"]["nconv7"]["kernel_p"])  # kaiming: softplus_10(U(+-sqrt(6/2)))
  assert p7.min() >= 0 and p7.max() <= float(layers.softplus_beta(math.sqrt(3))) + 1e-6


def test_repo_init_is_kaiming_everywhere():
  params = models.NConvUNet(weight_init="repo").init(jax.random.key(1), jnp.zeros((1, 16, 16, 1)),
                                                     jnp.zeros((1, 16, 16, 1)))
  for k, fan_in in zip(range(1, 8), (25, 50, 50, 36, 36, 36, 2)):
    p = np.asarray(params["params"][f"nconv{k}"]["kernel_p"])
    assert p.max() <= float(layers.softplus_beta(math.sqrt(6 / fan_in))) + 1e-6
    if k < 7:  # softplus_10 of negative draws; the Poisson init never goes below 0.0693
      assert p.min() < 0.0693
