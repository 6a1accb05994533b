"""Faster CPU implementations of the 'same' convolution, behind one seam: `nconv_conv` and `conv2d_same`.

XLA:CPU's library convolutions are tuned for wide channels; two places of pNCNN are far from that:
  * the 1-4 channel NConv layers: a fused sum of shifted, scaled slices ("taps") is 2-20x faster, forward and
    for the input gradient (`nconv_conv`, for layers with at most TAPS_MAX_CHANNEL_PAIRS channel pairs at float32
    precision);
  * the weight gradients of the wide UNet layers: kh*kw matrix products over tiles of rows
    (`_taps_weight_grad`, chosen on CPU by `lax.platform_dependent` for >= TAPS_WGRAD_MIN_CHANNELS input
    channels and >= TAPS_WGRAD_MIN_PIXELS pixels; other backends take the library gradient).
and the skip joins of the UNet decoder (`conv2d_same_inputs`): in eval mode one convolution per input, summed
(no full-size concatenation); in training one convolution of the concatenation, so that the tiled weight
gradient shares its shifted gradient tiles across both inputs.

Each computes `pncnn_jax.nn.conv.same_conv` (values and gradients, to float32 rounding: the summation order
differs); tests/nn/test_cpu_kernels.py ties each to it. Timings: docs/develop/benchmarks-log.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import export, lax

from pncnn_jax.nn.conv import NCONV_PRECISION, check_same_kernel
from pncnn_jax.nn.conv import same_conv as _lax_same_conv

Array = jax.Array

# ----------------------------------------------------------------------------------------------------------
# The NConv layers: fused-taps forward.

def _taps_same_conv(a: Array, w: Array) -> Array:
  """The same convolution as a sum of kh*kw*C_in*C_out shifted, scaled slices (float32 FMAs), one kernel row at a
  time.

    out[..., o] = sum_i ( sum_j sum_c a_pad[:, i:i+H, j:j+W, c] * w[i, j, c, o] )      i = 0 .. kh-1 in a loop

  For the 1-4 channel NConv layers this is 2-20x faster than a library convolution on CPU, where those are tuned
  for wide channels. The kernel rows run in a `fori_loop` (the row's kw*C_in*C_out slices unrolled, fused into one
  pass over the frame): unrolling all kh*kw*C_in*C_out slices compiled 1.5-2.4x slower (XLA:CPU, a 5x5 kernel
  unrolls 100 slices per 2-channel layer) and ran no faster (docs/develop/benchmarks-log.md, 'Cold start').
  """
  kh, kw, ci, co = w.shape
  _, h, wd, _ = a.shape
  ap = jnp.pad(a, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))

  def kernel_row(i, acc):
    rows = lax.dynamic_slice_in_dim(ap, i, h, axis=1)  # (B, H, W + kw - 1, C_in)
    wi = lax.dynamic_index_in_dim(w, i, 0, keepdims=False)  # (kw, C_in, C_out)
    outs = []
    for o in range(co):
      row_sum = None
      for j in range(kw):
        for c in range(ci):
          term = rows[:, :, j:j + wd, c] * wi[j, c, o]
          row_sum = term if row_sum is None else row_sum + term
      outs.append(row_sum)
    return acc + jnp.stack(outs, axis=-1)

  return lax.fori_loop(0, kh, kernel_row, jnp.zeros((*a.shape[:3], co), a.dtype))


@jax.custom_vjp
def _taps_conv_fast_fwd(a: Array, w: Array) -> Array:
  return _taps_same_conv(a, w)


def _taps_fwd(a, w):
  return _taps_same_conv(a, w), (a, w)


def _taps_bwd(res, g):
  # From TAPS_DGRAD_MIN_PIXELS pixels, dL/da is the same convolution of g with the kernel flipped in space and
  # transposed in channels (odd kernels, symmetric padding): fused taps again, 3-10x faster than the library's
  # input gradient for these 1-4 channel layers (4.6 % of a 352x1216 batch-4 pNCNN step,
  # docs/develop/benchmarks-log.md).
  # Below it the library's: the fused sum costs ~20 % more compile time in a small training program and gains
  # nothing measurable there. dL/dW (kh*kw*C_in*C_out whole-image sums) is always the library's.
  a, w = res
  if math.prod(a.shape[:3]) < TAPS_DGRAD_MIN_PIXELS:
    return jax.vjp(lambda a_, w_: _lax_same_conv(a_, w_, NCONV_PRECISION), a, w)[1](g)
  da = _taps_same_conv(g, jnp.transpose(w[::-1, ::-1], (0, 1, 3, 2)))
  dw = jax.vjp(lambda w_: _lax_same_conv(a, w_, NCONV_PRECISION), w)[1](g)[0]
  return da, dw


_taps_conv_fast_fwd.defvjp(_taps_fwd, _taps_bwd)

# Layers with at most this many (C_in * C_out) channel pairs use the fused-taps forward (all NConvUNet layers) ...
TAPS_MAX_CHANNEL_PAIRS = 8
# ... in frames of at least this many pixels (H*W of one image; an NConvUNet decides once for all its layers,
# `frame`). Below it the library convolution: the fused sum unrolls kh*kw*C_in*C_out slices, which XLA:CPU compiles
# slowly, while small frames gain little from it (NCNN's training step, batch 4 at 32x64: 6.0 s to compile and
# 11.7 ms a step with the taps, 2.9 s and 16.9 ms without; AMD EPYC, 2 cores, jax 0.12.0.1). Every recipe's
# training crop (64x320 and up) and evaluation frame is above it; so are KITTI and NYU frames. The size of one
# image, not of the batch: `jax.export` with a symbolic batch and jit at any batch size compile the same program.
TAPS_FWD_MIN_FRAME_PIXELS = 16384
# ... and, from this many pixels (B*H*W of the layer's input), the fused-taps input gradient.
TAPS_DGRAD_MIN_PIXELS = 65536

_frame_taps: contextvars.ContextVar[bool | None] = contextvars.ContextVar("pncnn_jax_frame_taps", default=None)


def _taps_for(height, width) -> bool:
  if export.is_symbolic_dim(height) or export.is_symbolic_dim(width):
    return True
  return height * width >= TAPS_FWD_MIN_FRAME_PIXELS


@contextlib.contextmanager
def frame(height, width):
  """Within it (at trace time), every `nconv_conv` takes the convolution path of a (height x width) frame: the fused
  taps from TAPS_FWD_MIN_FRAME_PIXELS pixels on, else the library's. NConvUNet wraps its layers in it, so that
  its downsampled scales follow the frame, not their own sizes."""
  token = _frame_taps.set(_taps_for(height, width))
  try:
    yield
  finally:
    _frame_taps.reset(token)


def nconv_conv(a: Array, w: Array, precision) -> Array:
  """Stride-1 cross-correlation with symmetric zero padding (kh-1)/2: (B,H,W,C_in) x HWIO -> (B,H,W,C_out).

  The fused-taps forward for narrow layers at float32 precision in large frames (`frame`; outside one, by this
  layer's own H*W), else the library convolution; both compute `conv.same_conv` to float32 rounding."""
  taps = _frame_taps.get()
  if taps is None:
    taps = _taps_for(a.shape[1], a.shape[2])
  if taps and w.shape[2] * w.shape[3] <= TAPS_MAX_CHANNEL_PAIRS and precision == NCONV_PRECISION:
    return _taps_conv_fast_fwd(a, w)
  return _lax_same_conv(a, w, precision)



# ----------------------------------------------------------------------------------------------------------
# Wide 'same' convolutions (the UNets) with a faster weight gradient on CPU.

# The tap-wise weight gradient is used on CPU for layers with at least this many input channels and pixels.
TAPS_WGRAD_MIN_CHANNELS = 16
TAPS_WGRAD_MIN_PIXELS = 65536


def _taps_weight_grad(x: Array, g: Array, kernel_size: tuple[int, int], precision, rows: int = 4) -> Array:
  """dL/dW of a stride-1 'same' cross-correlation as kh*kw matrix products per tile (HWIO result).

  dW[i, j] = sum_{b,h,w} x[b, h, w, :]^T g[b, h + p_h - i, w + p_w - j, :] (g zero-padded). The sum runs over
  tiles of `rows` image rows (a `fori_loop`). Each tile contributes, per tap and per image, one
  (C_out x rows*W) @ (rows*W x C_in) product over contiguous rows; the kh*kw shifted copies of g are tile-sized
  and stay in cache, and the batch stays a batch axis of the products, so a batch sharded over devices stays a
  sharded contraction (partial sums + all-reduce). The direct forms are slower on XLA:CPU: its weight-gradient
  convolution transposes both operands to channel-major layouts and contracts over only B; whole-image shifted
  copies of g cost kh*kw full-size writes (docs/develop/benchmarks-log.md).
  """
  kh, kw = kernel_size
  ph, pw = kh // 2, kw // 2
  b, h, w, ci = x.shape
  co = g.shape[-1]
  n_tiles = -(-h // rows)
  extra = n_tiles * rows - h  # zero rows: they add nothing
  xp = jnp.pad(x, ((0, 0), (0, extra), (0, 0), (0, 0)))
  gp = jnp.pad(g, ((0, 0), (ph, ph + extra), (pw, pw), (0, 0)))
  # Materialised once: otherwise XLA may fuse their producers (a concatenation, the BatchNorm backward) into
  # the per-tile products and recompute them for every tap.
  xp, gp = lax.optimization_barrier((xp, gp))

  def tile(t, acc):
    xt = lax.dynamic_slice_in_dim(xp, t * rows, rows, axis=1).reshape(b, rows * w, ci)
    gt = lax.dynamic_slice_in_dim(gp, t * rows, rows + 2 * ph, axis=1)
    taps = [jnp.einsum("bko,bkc->boc", gt[:, 2 * ph - i:2 * ph - i + rows, 2 * pw - j:2 * pw - j + w].reshape(
        b, rows * w, co), xt, precision=precision) for i in range(kh) for j in range(kw)]
    return acc + jnp.stack(taps, axis=1)

  acc = lax.fori_loop(0, n_tiles, tile, jnp.zeros((b, kh * kw, co, ci), jnp.float32)).sum(0)
  return jnp.transpose(acc, (0, 2, 1)).reshape(kh, kw, ci, co)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _conv_taps_wgrad(x: Array, w: Array, precision) -> Array:
  return _lax_same_conv(x, w, precision)


def _conv_taps_wgrad_fwd(x, w, precision):
  return _lax_same_conv(x, w, precision), (x, w)


def _conv_taps_wgrad_bwd(precision, res, g):
  x, w = res
  dx = jax.vjp(lambda a: _lax_same_conv(a, w, precision), x)[1](g)[0]
  library_dw = lambda x_, g_: jax.vjp(lambda k: _lax_same_conv(x_, k, precision), w)[1](g_)[0]  # noqa: E731
  taps_dw = lambda x_, g_: _taps_weight_grad(x_, g_, w.shape[:2], precision)  # noqa: E731
  return dx, lax.platform_dependent(x, g, cpu=taps_dw, default=library_dw)


_conv_taps_wgrad.defvjp(_conv_taps_wgrad_fwd, _conv_taps_wgrad_bwd)


def conv2d_same(x: Array, w: Array, precision=None) -> Array:
  """Stride-1 cross-correlation with symmetric zero padding k//2 (odd kernels): NHWC x HWIO -> NHWC.

  Same values and gradients as `lax.conv_general_dilated`; on CPU, wide layers (>= 16 input channels,
  >= 65,536 output pixels, all sizes concrete) take their weight gradient from `_taps_weight_grad`.
  """
  check_same_kernel("conv2d_same", x, w)
  ci = w.shape[2]
  # A symbolic size (`jax.export` with a symbolic batch) takes the library path: both paths compute the same
  # forward values, they differ only in how the CPU weight gradient is computed.
  if (ci >= TAPS_WGRAD_MIN_CHANNELS and not any(export.is_symbolic_dim(d) for d in x.shape[:3])
      and math.prod(x.shape[:3]) >= TAPS_WGRAD_MIN_PIXELS):
    return _conv_taps_wgrad(x, w, precision)
  return _lax_same_conv(x, w, precision)



def conv2d_same_inputs(xs: Sequence[Array], w: Array, precision=None, *, train: bool = False) -> Array:
  """`conv2d_same` of the channel concatenation of `xs` (the UNet skip joins), the kernel sliced per input.

  In eval mode one convolution per input, summed: no full-size concatenation (a copy written at memory speed,
  ~7 % of the CPU forward). In training one convolution of the concatenation: the tiled weight gradient then
  shares its shifted gradient tiles across the inputs (one loop per input costs ~10 % more per CPU step). The
  two orders sum differently, so the choice is kept per mode (training numerics as before the split).
  """
  if len(xs) == 1:
    return conv2d_same(xs[0], w, precision)
  if train:
    return conv2d_same(jnp.concatenate(list(xs), axis=-1), w, precision)
  offsets = np.cumsum([0] + [x.shape[-1] for x in xs])
  return sum(conv2d_same(x, w[:, :, a:b], precision) for x, a, b in zip(xs, offsets, offsets[1:]))
