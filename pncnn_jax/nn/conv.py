"""The reference 'same' convolution of pncnn_jax: `lax.conv_general_dilated`, its precision, shape checks (NHWC).

Every convolution of the networks computes `same_conv`: stride 1, symmetric zero padding k//2 (odd kernels),
cross-correlation as PyTorch's. The faster CPU implementations in `pncnn_jax.nn.cpu_kernels` are tested against it
(tests/nn/test_cpu_kernels.py): same values, same gradients, to float32 rounding.
"""

from __future__ import annotations

import jax
from jax import lax

Array = jax.Array

# The NConv convolutions always run at full float32 precision: TPUs and recent GPUs default to bf16/TF32
# passes, and the ratio conv(x*c)/conv(c) amplifies their rounding where the denominator is small.
NCONV_PRECISION = lax.Precision.HIGHEST
DIMS = ("NHWC", "HWIO", "NHWC")


def check_rank4(name: str, *arrays: Array) -> None:
  """Raises ValueError unless every array is rank 4 (NHWC), quoting the offending shape."""
  for a in arrays:
    if a.ndim != 4:
      raise ValueError(f"{name}: expected NHWC arrays of rank 4, got shape {tuple(a.shape)}")


def check_same_kernel(name: str, x: Array, w: Array) -> None:
  """Raises ValueError unless `w` is an HWIO kernel of odd sizes whose input channels fit NHWC `x`."""
  check_rank4(name, x)
  if w.ndim != 4 or w.shape[0] % 2 == 0 or w.shape[1] % 2 == 0 or x.shape[-1] != w.shape[2]:
    raise ValueError(f"{name}: kernel {tuple(w.shape)} (HWIO, odd sizes) does not fit input {tuple(x.shape)}")


def same_conv(a: Array, w: Array, precision=None) -> Array:
  """Stride-1 cross-correlation with symmetric zero padding k//2: (B, H, W, C_in) x HWIO -> (B, H, W, C_out)."""
  kh, kw = w.shape[:2]
  return lax.conv_general_dilated(a, w, (1, 1), ((kh // 2, kh // 2), (kw // 2, kw // 2)),
                                  dimension_numbers=DIMS, precision=precision)
