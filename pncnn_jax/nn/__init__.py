"""The networks: pure normalized-convolution numerics (NHWC) and the Flax modules that own their parameters.

  conv         `same_conv` on `lax.conv_general_dilated` (NHWC / HWIO), rank and kernel checks
  cpu_kernels  the CPU speed seam: unrolled-tap convolutions, tested against `conv.same_conv`
  layers       `nconv`, `confidence_downsample`, `nearest_upsample`, `NConv2D` (docs/SPEC.md §2)
  models       NConvUNet, the compact UNets, the pNCNN family (`VARIANTS`, `build_model`, `ModelOutput`)
  prng         the initialisation PRNG that reproduces the official code's first weights
"""

from pncnn_jax.nn.layers import NConv2D, confidence_downsample, nconv, nearest_upsample  # noqa: F401
from pncnn_jax.nn.models import (  # noqa: F401
                                 PNCNN,
                                 VARIANTS,
                                 ModelOutput,
                                 NConvUNet,
                                 UNet,
                                 Variant,
                                 build_model,
                                 count_params,
                                 init_variables,
)
