"""Normalized convolution and the confidence-aware resampling of pNCNN, as pure JAX functions (NHWC).

Everything here is a pure function of arrays, testable alone; `NConv2D` and `BatchNorm` are thin Flax Linen
modules that only own parameters (and BatchNorm statistics) and call these functions. The convolutions are
`pncnn_jax.nn.conv.same_conv`, computed on CPU by the kernels of `pncnn_jax.nn.cpu_kernels`.

Conventions: activations are NHWC float32, kernels HWIO. Depth is in metres, confidences are non-negative
and unitless. Section numbers (§) refer to docs/SPEC.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pncnn_jax.nn import cpu_kernels
from pncnn_jax.nn.conv import NCONV_PRECISION, check_rank4
from pncnn_jax.nn.cpu_kernels import conv2d_same  # noqa: F401  (the UNet convolution; re-exported)

Array = jax.Array
NCONV_EPS = 1e-20  # added to the denominator (docs/SPEC.md §2.1); representable in float32, not in float16


def softplus_beta(x: Array, beta: float = 10.0, threshold: float = 20.0) -> Array:
  """PyTorch's `softplus(x, beta, threshold)`: (1/beta)*log(1+exp(beta*x)), and x where beta*x > threshold.

  With beta=10 this is the positivity map of the NConv weights (docs/SPEC.md §2.2): W = softplus_10(W_p).
  """
  bx = beta * x
  return jnp.where(bx > threshold, x, jax.nn.softplus(bx) / beta)


@jax.custom_jvp
def _normalized_ratio(num: Array, den: Array, eps: float) -> Array:
  """num / (den + eps), with the derivative written as d num/(den+eps) - ratio * d den/(den+eps).

  Autodiff of the plain quotient forms num/(den+eps)^2, which underflows in float32 where den ~ 0 (XLA flushes
  subnormals): (1e-20)^2 = 0 gives 0 * inf = NaN at pixels without confidence. This form stays finite and
  equals PyTorch's gradients there.
  """
  return num / (den + eps)


@_normalized_ratio.defjvp
def _normalized_ratio_jvp(primals, tangents):
  num, den, eps = primals
  d_num, d_den, _ = tangents
  inv = 1.0 / (den + eps)
  ratio = num * inv
  return ratio, (d_num - ratio * d_den) * inv


def nconv(
    x: Array,
    c: Array,
    w: Array,
    b: Array,
    *,
    eps: float = NCONV_EPS,
    conv_precision=NCONV_PRECISION,
) -> tuple[Array, Array]:
  """Normalized convolution (Knutsson & Westin; pNCNN eq. 2, docs/SPEC.md §2.1).

    D     = conv(c, W)                  denominator
    N     = conv(x * c, W)              numerator
    x_out = N / (D + eps) + b           bias on the data only
    c_out = D / sum(W)                  sum over (kh, kw, C_in) per output channel; no bias, no eps

  Stride 1, symmetric zero padding (kh-1)/2 ("same" size for odd kernels), cross-correlation as in PyTorch.

  Negative confidences are clamped to 0 (c <- max(c, 0), as `where(c < 0, 0, c)`: the gradient of every c >= 0 is
  untouched). With c >= 0 and W >= 0, x_out - b is a convex combination of the data (within their range); a negative
  confidence would put it outside (a negative weight), and it means nothing: a confidence is a non-negative weight.
  The clamp cannot raise inside a jitted program, and every confidence of the models (sigmoid, softplus, [x > 0],
  their NConv propagations) is >= 0 already, so their outputs do not change.

  Args:
    x: (B, H, W, C_in) data, e.g. depth in metres.
    c: (B, H, W, C_in) confidence; values < 0 count as 0.
    w: (kh, kw, C_in, C_out) non-negative effective weights (already through the positivity map).
    b: (C_out,) bias.
    eps: added to the denominator.
    conv_precision: convolution precision; float32 (HIGHEST) by default on every backend.

  Returns:
    (x_out, c_out), each (B, H, W, C_out).
  """
  check_rank4("nconv", x, c)
  if x.shape != c.shape:
    raise ValueError(f"nconv: data {tuple(x.shape)} and confidence {tuple(c.shape)} shapes differ")
  if w.ndim != 4 or w.shape[2] != x.shape[-1]:
    raise ValueError(f"nconv: kernel {tuple(w.shape)} does not fit input channels {x.shape[-1]}")
  c = jnp.where(c < 0, 0.0, c).astype(c.dtype)  # a confidence is a non-negative weight (see above)
  # One convolution for numerator and denominator: x*c and c interleaved along the batch, (B, 2, ...) ->
  # (2B, ...), so that each row's pair stays with the row. A batch split over devices stays split with no data
  # moved; [x*c; c] stacked block-wise would cross the split and move every activation between devices.
  both = cpu_kernels.nconv_conv(jnp.stack([x * c, c], axis=1).reshape(-1, *x.shape[1:]), w, conv_precision)
  both = both.reshape(x.shape[0], 2, *both.shape[1:])
  num, den = both[:, 0], both[:, 1]
  x_out = _normalized_ratio(num, den, eps) + b.reshape(1, 1, 1, -1)
  c_out = den / jnp.sum(w, axis=(0, 1, 2), keepdims=True)
  return x_out, c_out


def _quadrants_2x2(a: Array) -> list[Array]:
  """The four stride-2 phases of (B, H, W, C) in window order (0,0), (0,1), (1,0), (1,1); odd tails dropped."""
  h2, w2 = a.shape[1] // 2, a.shape[2] // 2
  return [a[:, i:2 * h2:2, j:2 * w2:2, :] for i in (0, 1) for j in (0, 1)]


def _first_max_select(keys: list[Array], *values: list[Array]) -> list[Array]:
  """Per 2x2 window, each of `values` at the position of the first maximum of `keys` (row-major, as PyTorch's
  max-pool; a NaN counts as the maximum). The choice is made on stop_gradient(keys), so gradients reach only
  the selected element. Everything is elementwise on the four phases: XLA fuses it into one loop forward and
  one backward (a reduce-window/argmax formulation costs an index scatter in the backward).
  """
  keys = [lax.stop_gradient(k) for k in keys]
  top = functools.reduce(jnp.maximum, keys)
  hit = [(k == top) | jnp.isnan(k) for k in keys[:3]]
  return [jnp.where(hit[0], v[0], jnp.where(hit[1], v[1], jnp.where(hit[2], v[2], v[3]))) for v in values]


def confidence_downsample(x: Array, c: Array) -> tuple[Array, Array]:
  """Confidence-driven 2x2 downsampling (docs/SPEC.md §3.1).

  In each 2x2 window (stride 2, floor: an odd last row/column is dropped) take the element of maximum
  confidence (first maximum in row-major order wins, as PyTorch's max-pool), return the data there and the
  confidence there divided by 4. Both are taken at the same position, so gradients flow only to the
  selected element, for c as for x.

  Args:
    x: (B, H, W, C) data.
    c: (B, H, W, C) confidence.

  Returns:
    (x_ds, c_ds), each (B, H//2, W//2, C).
  """
  check_rank4("confidence_downsample", x, c)
  if x.shape != c.shape:
    raise ValueError(f"confidence_downsample: x {tuple(x.shape)} and c {tuple(c.shape)} differ in shape")
  qc = _quadrants_2x2(c)
  x_ds, c_ds = _first_max_select(qc, _quadrants_2x2(x), qc)
  return x_ds, c_ds / 4


def _nearest_index(n_in: int, n_out: int) -> np.ndarray:
  """PyTorch's nearest rule: src = min(floor(dst * (in/out)), in - 1), scale in float32."""
  scale = np.float32(n_in) / np.float32(n_out)
  src = np.floor(np.arange(n_out, dtype=np.float32) * scale).astype(np.int64)
  return np.minimum(src, n_in - 1)


def nearest_upsample(x: Array, size: Sequence[int]) -> Array:
  """Nearest-neighbour resize to `size` = (H_out, W_out) with PyTorch's index rule (docs/SPEC.md §3.2).

  Not the half-pixel rule of `jax.image.resize`: src = min(floor(dst * in/out), in - 1). For an exact x2 it
  is a 2x2 repeat.

  Args:
    x: (B, H, W, C).
    size: (H_out, W_out).

  Returns:
    (B, H_out, W_out, C).
  """
  check_rank4("nearest_upsample", x)
  h_out, w_out = int(size[0]), int(size[1])
  _, h, w, _ = x.shape
  if h_out == 2 * h and w_out == 2 * w:
    return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
  x = jnp.take(x, _nearest_index(h, h_out), axis=1)
  return jnp.take(x, _nearest_index(w, w_out), axis=2)


def _align_corners_weights(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Indices and weights of PyTorch's bilinear x2 with align_corners=True, computed in float32."""
  n_out = 2 * n
  scale = np.float32(n - 1) / np.float32(n_out - 1) if n_out > 1 else np.float32(0)
  src = np.arange(n_out, dtype=np.float32) * scale
  i0 = src.astype(np.int64)  # truncation == floor for non-negative src
  i1 = np.where(i0 < n - 1, i0 + 1, i0)
  lam = (src - i0.astype(np.float32)).astype(np.float32)
  return i0, i1, (np.float32(1) - lam), lam


def _align_corners_x2_axis(x: Array, axis: int) -> Array:
  """Linear x2 interpolation (align_corners=True) along `axis` without gathers.

  Output 2m and 2m+1 only ever read inputs m-1, m, m+1, so each output parity is a fixed-coefficient sum of
  three shifted copies; the coefficients come from `_align_corners_weights` (the reference's float32 indices
  and weights), so the values equal the two-tap gather form exactly. Gradients are shifts too (no scatter).
  """
  n = x.shape[axis]
  i0, i1, w0, w1 = _align_corners_weights(n)
  m = np.arange(2 * n) // 2
  coef = np.zeros((3, 2 * n), np.float32)  # rows: weight of input m-1, m, m+1 for output o (m = o // 2)
  for idx, wt in ((i0, w0), (i1, w1)):
    slot = idx - m + 1
    if slot.min() < 0 or slot.max() > 2:
      raise AssertionError(f"align_corners x2 reads outside m-1..m+1 for n={n}")
    np.add.at(coef, (slot, np.arange(2 * n)), wt)
  pad = [(0, 0)] * x.ndim
  pad[axis] = (1, 1)
  xp = jnp.pad(x, pad)
  shifted = [lax.slice_in_dim(xp, k, k + n, axis=axis) for k in range(3)]  # x[m-1], x[m], x[m+1]
  shape = [1] * x.ndim
  shape[axis] = n
  parities = []
  for par in (0, 1):
    acc = None
    for k in range(3):
      c = coef[k, par::2]
      if not c.any():
        continue
      term = jnp.asarray(c.reshape(shape)) * shifted[k]
      acc = term if acc is None else acc + term
    parities.append(acc)
  out = jnp.stack(parities, axis=axis + 1)  # (..., n, 2, ...): output 2m + parity
  return out.reshape(x.shape[:axis] + (2 * n,) + x.shape[axis + 1:])


def bilinear_upsample_x2(x: Array) -> Array:
  """Bilinear x2 upsampling with align_corners=True (docs/SPEC.md §3.3); not `jax.image.resize` (half-pixel).

  out = (1-lh) * [(1-lw) a + lw b] + lh * [(1-lw) c + lw d], with src = dst * (n-1)/(2n-1): interpolated
  along the width first, then along the height, as the reference.

  Args:
    x: (B, H, W, C).

  Returns:
    (B, 2H, 2W, C).
  """
  check_rank4("bilinear_upsample_x2", x)
  return _align_corners_x2_axis(_align_corners_x2_axis(x, 2), 1)


def max_pool_2x2(x: Array) -> Array:
  """2x2 max-pool, stride 2, floor mode (odd tails dropped): (B, H, W, C) -> (B, H//2, W//2, C).

  The gradient goes to the first maximum of each window (row-major), as PyTorch's max_pool2d.
  """
  check_rank4("max_pool_2x2", x)
  q = _quadrants_2x2(x)
  return _first_max_select(q, q)[0]


def pad_to(x: Array, size: Sequence[int]) -> Array:
  """Zero-pads (B, h, w, C) to (B, H, W, C) as the reference UNet does: top/left = diff//2, rest bottom/right."""
  dh, dw = int(size[0]) - x.shape[1], int(size[1]) - x.shape[2]
  if dh == 0 and dw == 0:
    return x
  if dh < 0 or dw < 0:
    raise ValueError(f"pad_to: cannot pad {tuple(x.shape)} to smaller size {tuple(size)}")
  return jnp.pad(x, ((0, 0), (dh // 2, dh - dh // 2), (dw // 2, dw - dw // 2), (0, 0)))


# ----------------------------------------------------------------------------------------------------------
# Batch normalisation with PyTorch semantics (docs/SPEC.md §4.3).


def batch_norm(x: Array, mean: Array, var: Array, scale: Array, bias: Array, eps: float = 1e-5) -> Array:
  """y = (x - mean) / sqrt(var + eps) * scale + bias, per channel (last axis); statistics are (C,)."""
  as4 = lambda a: a.reshape(1, 1, 1, -1)  # noqa: E731
  return (x - as4(mean)) * as4(lax.rsqrt(var + eps) * scale) + as4(bias)


def batch_moments(x: Array) -> tuple[Array, Array, Array]:
  """Per-channel batch mean, biased variance (for normalising) and unbiased variance (for the running
  statistics, as PyTorch), over (B, H, W). Under a data-sharded `jit` these are global over all devices."""
  n = math.prod(x.shape[:-1])
  mean = jnp.mean(x, axis=(0, 1, 2))
  var = jnp.mean(jnp.square(x - mean.reshape(1, 1, 1, -1)), axis=(0, 1, 2))
  return mean, var, var * (n / max(n - 1, 1))


class BatchNorm(nn.Module):
  """BatchNorm2d with PyTorch semantics: running = (1 - momentum) * running + momentum * batch, where the
  running variance takes the *unbiased* batch variance (Flax's own BatchNorm uses the biased one).

  Parameters `scale`, `bias`; statistics `batch_stats/{mean, var}`. Input (B, H, W, C).
  """

  momentum: float = 0.1
  eps: float = 1e-5

  @nn.compact
  def __call__(self, x: Array, train: bool) -> Array:
    ch = x.shape[-1]
    scale = self.param("scale", nn.initializers.ones, (ch,), jnp.float32)
    bias = self.param("bias", nn.initializers.zeros, (ch,), jnp.float32)
    ra_mean = self.variable("batch_stats", "mean", lambda: jnp.zeros((ch,), jnp.float32))
    ra_var = self.variable("batch_stats", "var", lambda: jnp.ones((ch,), jnp.float32))
    if not train:
      return batch_norm(x, ra_mean.value, ra_var.value, scale, bias, self.eps)
    mean, var, var_unbiased = batch_moments(x)
    if not self.is_initializing():
      m = self.momentum
      ra_mean.value = (1 - m) * ra_mean.value + m * lax.stop_gradient(mean)
      ra_var.value = (1 - m) * ra_var.value + m * lax.stop_gradient(var_unbiased)
    return batch_norm(x, mean, var, scale, bias, self.eps)


# ----------------------------------------------------------------------------------------------------------
# NConv2D: the thin module.


def poisson_kernel_init(key: Array, shape: Sequence[int], dtype=jnp.float32) -> Array:
  """The published 'p' init (docs/SPEC.md §2.3): outer product of the Poisson pmf (mu = kh/2) at k = 0..kh-1,
  repeated over channels, plus independent U[0, 1) noise per element. Shape HWIO (kh, kw, C_in, C_out)."""
  kh, kw = int(shape[0]), int(shape[1])
  mu = kh / 2
  pmf = np.array([math.exp(-mu) * mu**k / math.factorial(k) for k in range(kh)], np.float64)
  pmf_w = np.array([math.exp(-mu) * mu**k / math.factorial(k) for k in range(kw)], np.float64)
  bump = np.outer(pmf, pmf_w).astype(np.float32)[:, :, None, None]
  return (jnp.asarray(bump, dtype) + jax.random.uniform(key, tuple(shape), dtype)).astype(dtype)


def kaiming_kernel_init(key: Array, shape: Sequence[int], dtype=jnp.float32) -> Array:
  """PyTorch `kaiming_uniform_` defaults (a=0, fan_in, gain sqrt 2): U(+-sqrt(6 / fan_in)), fan_in = kh*kw*C_in."""
  fan_in = int(shape[0]) * int(shape[1]) * int(shape[2])
  bound = math.sqrt(6.0 / fan_in)
  return jax.random.uniform(key, tuple(shape), dtype, -bound, bound)


NCONV_INITS = {"poisson": poisson_kernel_init, "kaiming": kaiming_kernel_init}


class NConv2D(nn.Module):
  """Normalized convolution layer: owns the raw kernel `kernel_p` (HWIO) and `bias`; W = softplus_10(kernel_p).

  As the reference, the raw parameter is initialised to softplus_10(w_init) and the map is applied again in
  the forward pass (so W at step 0 is softplus_10(softplus_10(w_init)), docs/SPEC.md §2.2).

  Attributes:
    features: C_out.
    kernel_size: odd square kernel size (5, 3 or 1 in pNCNN).
    kernel_init: 'poisson' (published, nconv1-6) or 'kaiming' (nconv7, and all layers in the repo's current code).
    beta: softplus sharpness of the positivity map.
  """

  features: int
  kernel_size: int
  kernel_init: str = "poisson"
  bias_init: float = 0.01
  beta: float = 10.0
  eps: float = NCONV_EPS

  @nn.compact
  def __call__(self, x: Array, c: Array) -> tuple[Array, Array]:
    check_rank4(f"NConv2D({self.name})", x, c)
    if self.kernel_init not in NCONV_INITS:
      raise ValueError(f"NConv2D: unknown kernel_init {self.kernel_init!r}; expected one of {sorted(NCONV_INITS)}")
    shape = (self.kernel_size, self.kernel_size, x.shape[-1], self.features)
    w_init = NCONV_INITS[self.kernel_init]
    kernel_p = self.param("kernel_p", lambda k, s: softplus_beta(w_init(k, s), self.beta), shape)
    bias = self.param("bias", nn.initializers.constant(self.bias_init), (self.features,), jnp.float32)
    return nconv(x, c, softplus_beta(kernel_p, self.beta), bias, eps=self.eps)
