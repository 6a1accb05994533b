"""The CPU kernels (pncnn_jax.nn.cpu_kernels) against the reference convolution (pncnn_jax.nn.conv.same_conv).

Each kernel computes what `conv.same_conv` computes, values and gradients, to float32 rounding (the summation
order differs): the fused-taps forward of the NConv layers, the tiled weight gradient of the wide UNet layers, the
platform dispatch of `conv2d_same`, and the skip-join convolution of several inputs (both modes).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax.nn import conv, cpu_kernels, layers, models

HI = jax.lax.Precision.HIGHEST


def _rand(key, shape, lo=0.0, hi=1.0):
  return jax.random.uniform(jax.random.key(key), shape, jnp.float32, lo, hi)


@pytest.mark.parametrize("taps_dgrad", [True, False])
@pytest.mark.parametrize("shape", [(5, 5, 1, 2), (5, 5, 2, 2), (3, 3, 4, 2), (1, 1, 2, 1)])
def test_fused_taps_forward_equals_the_reference(shape, taps_dgrad, monkeypatch):
  """The NConv layers' shapes (all of NConvUNet): the taps path is taken and agrees with lax, values and grads;
  the input gradient is the fused taps' from TAPS_DGRAD_MIN_PIXELS pixels on, the library's below."""
  assert shape[2] * shape[3] <= cpu_kernels.TAPS_MAX_CHANNEL_PAIRS
  monkeypatch.setattr(cpu_kernels, "TAPS_FWD_MIN_FRAME_PIXELS", 11 * 17)  # this size takes the taps forward
  monkeypatch.setattr(cpu_kernels, "TAPS_DGRAD_MIN_PIXELS", 0 if taps_dgrad else 3 * 11 * 17 + 1)
  a, w = _rand(0, (3, 11, 17, shape[2]), 0, 2), _rand(1, shape, 0, 1)
  y, vjp = jax.vjp(lambda a_, w_: cpu_kernels.nconv_conv(a_, w_, HI), a, w)
  y_ref, vjp_ref = jax.vjp(lambda a_, w_: conv.same_conv(a_, w_, HI), a, w)
  np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)
  g = _rand(2, y.shape, -1, 1)
  (da, dw), (da_ref, dw_ref) = vjp(g), vjp_ref(g)
  # dL/da: fused taps of g with the flipped, transposed kernel (its own sum order); dL/dW: the library's.
  np.testing.assert_allclose(da, da_ref, rtol=0, atol=1e-5 * float(jnp.max(jnp.abs(da_ref))))
  if taps_dgrad:
    assert float(jnp.max(jnp.abs(da - da_ref))) > 0 or shape[:2] == (1, 1)  # the taps path, not the library's
  else:
    np.testing.assert_array_equal(da, da_ref)
  np.testing.assert_array_equal(dw, dw_ref)


def test_small_frames_take_the_library_forward(monkeypatch):
  """Below TAPS_FWD_MIN_FRAME_PIXELS the library convolution, exactly; from it on the taps (their own sum order).
  Inside `frame` the frame decides, not the layer's own size; the batch size never does."""
  a, w = _rand(0, (2, 16, 32, 1), 0, 2), _rand(1, (5, 5, 1, 2), 0, 1)
  ref = conv.same_conv(a, w, HI)
  monkeypatch.setattr(cpu_kernels, "TAPS_FWD_MIN_FRAME_PIXELS", 16 * 32 + 1)
  np.testing.assert_array_equal(cpu_kernels.nconv_conv(a, w, HI), ref)
  with cpu_kernels.frame(32, 64):  # a 2x larger frame: this layer is one of its downsampled scales
    taps = cpu_kernels.nconv_conv(a, w, HI)
  assert not np.array_equal(taps, ref)
  np.testing.assert_allclose(taps, ref, rtol=1e-5, atol=1e-5)
  monkeypatch.setattr(cpu_kernels, "TAPS_FWD_MIN_FRAME_PIXELS", 16 * 32)
  np.testing.assert_array_equal(cpu_kernels.nconv_conv(a, w, HI), taps)
  np.testing.assert_array_equal(cpu_kernels.nconv_conv(a[:1], w, HI), taps[:1])  # batch 1: the same path
  with cpu_kernels.frame(8, 8):
    np.testing.assert_array_equal(cpu_kernels.nconv_conv(a, w, HI), ref)


def test_an_nconvunet_takes_one_path_at_all_scales(monkeypatch):
  """The frame decides for every layer of the network: its output equals the all-library network's exactly below
  the threshold, and differs (rounding) from it above, where the downsampled scales are smaller than the threshold."""
  net = models.NConvUNet()
  x = _rand(0, (1, 32, 32, 1), 0, 10)
  c = (x > 5).astype(jnp.float32)
  v = net.init(jax.random.key(0), x, c)
  monkeypatch.setattr(cpu_kernels, "TAPS_MAX_CHANNEL_PAIRS", 0)  # the library everywhere
  ref = net.apply(v, x, c)[0]
  monkeypatch.setattr(cpu_kernels, "TAPS_MAX_CHANNEL_PAIRS", 8)
  monkeypatch.setattr(cpu_kernels, "TAPS_FWD_MIN_FRAME_PIXELS", 32 * 32 + 1)
  np.testing.assert_array_equal(net.apply(v, x, c)[0], ref)
  monkeypatch.setattr(cpu_kernels, "TAPS_FWD_MIN_FRAME_PIXELS", 32 * 32)  # the 4x4 scale too, not only 32x32
  out = net.apply(v, x, c)[0]
  assert not np.array_equal(out, ref)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_wide_or_low_precision_nconv_takes_the_reference():
  a, w = _rand(0, (1, 8, 8, 4), 0, 2), _rand(1, (3, 3, 4, 4), 0, 1)  # 16 channel pairs
  np.testing.assert_array_equal(cpu_kernels.nconv_conv(a, w, HI), conv.same_conv(a, w, HI))
  w = _rand(1, (3, 3, 1, 2), 0, 1)
  np.testing.assert_array_equal(cpu_kernels.nconv_conv(a[..., :1], w, None), conv.same_conv(a[..., :1], w, None))


def test_skip_join_in_training_is_the_convolution_of_the_concatenation():
  """`conv2d_same_inputs(train=True)` is exactly conv2d_same of the concatenation (the training numerics)."""
  a, b = _rand(0, (2, 9, 13, 3), -1, 1), _rand(1, (2, 9, 13, 5), -1, 1)
  w = _rand(2, (3, 3, 8, 4), -0.1, 0.1)
  np.testing.assert_array_equal(cpu_kernels.conv2d_same_inputs((a, b), w, HI, train=True),
                                cpu_kernels.conv2d_same(jnp.concatenate([a, b], -1), w, HI))
  np.testing.assert_allclose(cpu_kernels.conv2d_same_inputs((a, b), w, HI, train=False),
                             conv.same_conv(jnp.concatenate([a, b], -1), w, HI), rtol=0, atol=1e-5)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_taps_weight_grad_equals_the_library_one(k):
  """9 rows = 2 tiles of 4 rows + 1 zero row; 2 images (a batch axis of the tile products)."""
  x, g = _rand(0, (2, 9, 13, 5), -1, 1), _rand(1, (2, 9, 13, 3), -1, 1)
  w = jnp.zeros((k, k, 5, 3))
  want = jax.vjp(lambda w_: conv.same_conv(x, w_, jax.lax.Precision.HIGHEST), w)[1](g)[0]
  got = cpu_kernels._taps_weight_grad(x, g, (k, k), jax.lax.Precision.HIGHEST)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv2d_same_values_and_gradients_on_the_taps_path():
  """A layer wide enough for the CPU tap-wise weight gradient: same outputs and gradients as lax."""
  x = _rand(0, (1, 128, 512, cpu_kernels.TAPS_WGRAD_MIN_CHANNELS), -1, 1)
  w = _rand(1, (3, 3, cpu_kernels.TAPS_WGRAD_MIN_CHANNELS, 4), -0.1, 0.1)
  g = _rand(2, (1, 128, 512, 4), -1, 1)
  hi = jax.lax.Precision.HIGHEST
  y, vjp = jax.vjp(lambda a, k: layers.conv2d_same(a, k, hi), x, w)
  y_ref, vjp_ref = jax.vjp(lambda a, k: conv.same_conv(a, k, hi), x, w)
  np.testing.assert_array_equal(y, y_ref)
  for got, want in zip(vjp(g), vjp_ref(g)):
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * float(jnp.max(jnp.abs(want))))
  with pytest.raises(ValueError, match=r"kernel \(2, 2, 16, 4\)"):
    layers.conv2d_same(x, jnp.zeros((2, 2, 16, 4)))


def test_conv_of_several_inputs_is_the_conv_of_their_concatenation():
  """models.Conv(a, b) (the UNet skip joins in eval mode): same parameters, outputs and gradients as on cat."""
  a, b = _rand(0, (2, 9, 13, 3), -1, 1), _rand(1, (2, 9, 13, 5), -1, 1)
  conv = models.Conv(4, 3, jax.lax.Precision.HIGHEST)
  v_cat = conv.init(jax.random.key(0), jnp.concatenate([a, b], -1))
  v_two = conv.init(jax.random.key(0), a, b)
  assert jax.tree.all(jax.tree.map(lambda p, q: bool(jnp.array_equal(p, q)), v_cat, v_two))
  f_cat = lambda v, a_, b_: conv.apply(v, jnp.concatenate([a_, b_], -1))  # noqa: E731
  f_two = lambda v, a_, b_: conv.apply(v, a_, b_)  # noqa: E731
  y, vjp = jax.vjp(f_two, v_two, a, b)
  y_ref, vjp_ref = jax.vjp(f_cat, v_cat, a, b)
  np.testing.assert_allclose(y, y_ref, rtol=0, atol=1e-5)
  g = _rand(2, y.shape, -1, 1)
  for got, want in zip(jax.tree.leaves(vjp(g)), jax.tree.leaves(vjp_ref(g))):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * float(jnp.max(jnp.abs(want))))
