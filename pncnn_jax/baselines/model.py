"""The Sparse-to-Dense baseline with a Gaussian head (Ma & Karaman, ICRA 2018; Gustafsson et al., CVPR-W 2020), NHWC.

A conventional dense network for the paper's headline comparison: a single pNCNN against MC-Dropout and deep
ensembles of this network. Depth-only input (our benchmark is unguided, as pNCNN is; Gustafsson et al.'s figures are
RGB-guided), no pretrained weights (no ImageNet weights are available offline: the encoder trains from scratch).

    x (B, H, W, 1) sparse depth [m], 0 = no measurement
    stem      conv 7x7/2 (1 -> 64), BN, ReLU, max-pool 3x3/2                              H/4
    encoder   ResNet basic-block stages (64, 128, 256, 512), strides (1, 2, 2, 2)         H/4 ... H/32
              [dropout after stage 3 and stage 4]
    bottleneck conv 1x1 (512 -> 256), BN                                                  H/32
              [dropout]
    decoder   4 up-projections (Laina et al.) 256 -> 128 -> 64 -> 32 -> 16, each x2        H/2
              [dropout on the input of up-projections 2, 3 and 4]
    head      two convs 3x3 (16 -> 1): m and v = log sigma^2; bilinear x2 to (H, W)
    mu = MEAN_SCALE m [m],   s = -v = -log sigma^2 (the log-precision, log of [1/m^2])

**Dropout where Gustafsson et al. put it** (evaluating_bdl, depthCompletion/model_mcdropout.py): elementwise,
p = 0.5, on the outputs of the two deepest ResNet stages, on the bottleneck, and on the input of every decoder layer
after it; never on the stem, the first two stages or the head's input. Their decoder has five layers (transposed
convolutions with skips), Ma's up-projection decoder four, so they have seven dropout layers and we six. It is
active in training and, for MC-Dropout, at test time (`stochastic=True`, BatchNorm on its running statistics, as
their `F.dropout(..., training=True)` under `model.eval()`); `train=False` alone is the deterministic network.

**The Gaussian head.** The network predicts the mean and the log-variance; the loss is Gustafsson's `MaskedL2Gauss`,
the Gaussian NLL mean_V [exp(-log sigma^2) (t - mu)^2 + log sigma^2] (`baselines.losses`). `ModelOutput.confidence`
carries s = -log sigma^2, so that it grows with the trust as every confidence of the library, and its precision rule
is exp(s) (the loss `gaussian_nll_logvar`). Their heads start at ~1e-3 (normal init) and their mean is 100 x the raw
output; ours: the log-variance head starts at ~1e-3 as theirs (sigma = 1 m), the mean head LeCun-initialised (fan-in,
so its raw output is of order 1), scaled by MEAN_SCALE = 10 (the scenes' depths are of order 10 m).

**Parameters.** With ResNet-18 stages (2, 2, 2, 2) the network has `PARAMS_RESNET18` = 13,675,394 trainable
parameters; with ResNet-34 stages (3, 4, 6, 3) 23,783,554 (tests/baselines/test_model.py counts both without
compiling). The 26M the paper quotes for Gustafsson's networks are of a different network: Ma et al.'s
self-supervised DepthCompletionNet (ICRA 2019) with a ResNet-34 encoder at full resolution, RGB and depth inputs and a
transposed-convolution decoder with skips. We keep a ResNet-18 encoder and Ma's up-projection decoder
(ICRA 2018), half the parameters: its training cost (the stem reduces to 1/4 resolution first) is what the CPU bound of
the comparison allows; the parameter ratio to pNCNN's 670k is reported as measured, not as the paper's 26M.
"""

from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from pncnn_jax.data import input_contract
from pncnn_jax.nn import models

Array = jax.Array
MEAN_SCALE = 10.0  # mu = MEAN_SCALE * the head's first channel [m]
DROPOUT_RATE = 0.5  # Gustafsson et al.'s p
RESNET18 = (2, 2, 2, 2)
RESNET34 = (3, 4, 6, 3)
PARAMS_RESNET18 = 13_675_394  # tested in tests/baselines/test_model.py
PARAMS_RESNET34 = 23_783_554
STAGE_WIDTHS = (64, 128, 256, 512)
DECODER_WIDTHS = (128, 64, 32, 16)

_he = nn.initializers.variance_scaling(2.0, "fan_out", "normal")  # torchvision ResNet and Ma's decoder


def _conv(features: int, kernel: int, stride: int = 1, name: str | None = None) -> nn.Conv:
  return nn.Conv(features, (kernel, kernel), (stride, stride), padding=kernel // 2, use_bias=False,
                 kernel_init=_he, name=name)


def _bn(train: bool, name: str | None = None) -> nn.BatchNorm:
  return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, name=name)  # torch momentum 0.1


class BasicBlock(nn.Module):
  """ResNet basic block: relu(BN(conv3x3(relu(BN(conv3x3/stride(x))))) + shortcut(x)); the shortcut is a
  1x1/stride convolution with BN when the shape changes. (B, H, W, C_in) -> (B, H/stride, W/stride, features)."""

  features: int
  stride: int = 1

  @nn.compact
  def __call__(self, x: Array, train: bool) -> Array:
    y = nn.relu(_bn(train)(_conv(self.features, 3, self.stride)(x)))
    y = _bn(train)(_conv(self.features, 3)(y))
    if self.stride != 1 or x.shape[-1] != self.features:
      x = _bn(train)(_conv(self.features, 1, self.stride)(x))
    return nn.relu(y + x)


def unpool2x(x: Array) -> Array:
  """Ma et al.'s Unpool: (B, H, W, C) -> (B, 2H, 2W, C), x at the top-left of each 2x2 cell, zeros elsewhere."""
  return jax.lax.pad(x, jnp.zeros((), x.dtype), ((0, 0, 0), (0, 1, 1), (0, 1, 1), (0, 0, 0)))


class UpProj(nn.Module):
  """Up-projection (Laina et al., 3DV 2016; Ma et al.'s `UpProj`): u = unpool2x(x);
  relu(BN(conv3x3(relu(BN(conv5x5(u))))) + BN(conv5x5'(u))). (B, H, W, C) -> (B, 2H, 2W, features)."""

  features: int

  @nn.compact
  def __call__(self, x: Array, train: bool) -> Array:
    u = unpool2x(x)
    upper = nn.relu(_bn(train)(_conv(self.features, 5)(u)))
    upper = _bn(train)(_conv(self.features, 3)(upper))
    lower = _bn(train)(_conv(self.features, 5)(u))
    return nn.relu(upper + lower)


class SparseToDense(nn.Module):
  """ResNet encoder + up-projection decoder + Gaussian head (module docstring).

  Attributes:
    stage_blocks: basic blocks per ResNet stage: RESNET18 (default) or RESNET34.
    dropout_rate: p of the six dropout layers; 0 = none (the ensemble members, as Gustafsson's `model.py`).
  """

  stage_blocks: Sequence[int] = RESNET18
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, sparse: Array, train: bool = False, stochastic: bool = False) -> models.ModelOutput:
    """Args: sparse (B, H, W, 1) depth [m], 0 = missing; train: BatchNorm batch statistics and dropout on;
    stochastic: dropout on with BatchNorm's running statistics (MC-Dropout at test time; needs a 'dropout' rng).

    Returns: `models.ModelOutput`: depth mu [m], confidence s = -log sigma^2 (precision exp(s) [1/m^2]),
    input_confidence the binary [x > 0], nconv_confidence ones (there is no NConv), each (B, H, W, 1)."""
    input_contract.check_layout(sparse.shape, sparse.dtype, name="SparseToDense", layouts=(input_contract.BHW1,))
    x = sparse.astype(jnp.float32)
    drop = nn.Dropout(self.dropout_rate, deterministic=not (train or stochastic) or self.dropout_rate == 0)
    h, w = x.shape[1:3]
    y = nn.relu(_bn(train, "bn1")(_conv(64, 7, 2, "conv1")(x)))
    y = nn.max_pool(y, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
    for stage, (blocks, width) in enumerate(zip(self.stage_blocks, STAGE_WIDTHS)):
      for b in range(blocks):
        y = BasicBlock(width, 2 if (stage > 0 and b == 0) else 1, name=f"layer{stage + 1}_{b}")(y, train)
      if stage >= 2:
        y = drop(y)
    y = drop(_bn(train, "bn2")(_conv(STAGE_WIDTHS[-1] // 2, 1, name="conv2")(y)))
    for i, width in enumerate(DECODER_WIDTHS):
      if i > 0:
        y = drop(y)
      y = UpProj(width, name=f"up{i + 1}")(y, train)
    # Two 3x3 convolutions with bias, as Gustafsson et al.'s two heads. The log-variance head starts near 0 (their init:
    # normal, std 1e-3; zero bias), so sigma = 1 m at the start and the first losses are the squared errors.
    m = nn.Conv(1, (3, 3), padding=1, kernel_init=nn.initializers.lecun_normal(), name="head_mean")(y)
    s = nn.Conv(1, (3, 3), padding=1, kernel_init=nn.initializers.normal(1e-3), name="head_logvar")(y)
    y = jax.image.resize(jnp.concatenate([m, -s], axis=-1), (y.shape[0], h, w, 2), "bilinear")
    mean, log_precision = MEAN_SCALE * y[..., :1], y[..., 1:]
    valid = (x > 0).astype(jnp.float32)
    return models.ModelOutput(depth=mean, confidence=log_precision, input_confidence=valid,
                              nconv_confidence=jnp.ones_like(valid))


# The variants a config names (`from_config.VARIANTS`): the deterministic network trained alone or as ensemble
# members, and the MC-Dropout network. conf/var estimator fields are those of `models.Variant`: 'none', as the
# baseline has no input-confidence network (so the c0 statistics are skipped).
BASELINE_VARIANTS: dict[str, models.Variant] = {
    "s2d": models.Variant("none", "none", "gaussian_nll_logvar",
                          "Sparse-to-Dense (ResNet-18 + UpProj) with a Gaussian head; deep-ensemble member"),
    "s2d_mcdropout": models.Variant("none", "none", "gaussian_nll_logvar",
                                    "Sparse-to-Dense with a Gaussian head and dropout p=0.5 (MC-Dropout)"),
}
# The core's model settings (configs' `model` block) the baseline accepts at their neutral values only.
_NEUTRAL = {"mask_input_confidence": False, "detach_variance_input": False}
_IGNORED = ("nconv_init", "conv_precision", "unet_features")  # PNCNN settings that do not apply (no NConv, no UNet)


def build_baseline(variant: str, **settings: Any) -> SparseToDense:
  """The `SparseToDense` of a named variant (BASELINE_VARIANTS); `settings` from a config's `model` block: the
  PNCNN-only ones are ignored, mask_input_confidence / detach_variance_input must be False."""
  if variant not in BASELINE_VARIANTS:
    raise ValueError(f"unknown baseline variant {variant!r}; expected one of {sorted(BASELINE_VARIANTS)}")
  bad = sorted(k for k, v in settings.items() if k not in _IGNORED and _NEUTRAL.get(k, object()) != v)
  if bad:
    raise ValueError(f"config.model: {bad} do not apply to the Sparse-to-Dense baseline (it has no input "
                     f"confidence); leave them False")
  return SparseToDense(dropout_rate=DROPOUT_RATE if variant == "s2d_mcdropout" else 0.0)


def param_count(model: SparseToDense, shape: tuple[int, int] = (32, 64)) -> int:
  """Trainable parameters of `model`, from `jax.eval_shape` of its init (nothing is compiled or run)."""
  shapes = jax.eval_shape(lambda k: model.init(k, jnp.zeros((1, *shape, 1), jnp.float32)), jax.random.key(0))
  return models.count_params(shapes["params"])
