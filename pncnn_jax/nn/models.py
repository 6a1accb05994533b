"""The networks of pNCNN (Eldesokey et al., CVPR 2020) as Flax Linen modules (NHWC).

- `NConvUNet`: the 4-scale normalized-convolution encoder-decoder (7 NConv layers, 481 parameters, nconv2 and
  nconv3 shared across scales), docs/SPEC.md §4.1.
- `UNet`: the compact 4-level UNet with BatchNorm that estimates the input confidence (sigmoid or softplus
  head) and, in pNCNN, the output precision from the last NConv confidence, docs/SPEC.md §4.2.
- `PNCNN`: one configurable family covering NCNN, NCNN-Conf, pNCNN, pNCNN-Exp and the ablations; `VARIANTS`
  names the presets and `build_model(name)` builds one.

Outputs are a named `ModelOutput`, not the reference's anonymous (B, 3, H, W) channel stack.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct
from jax.ad_checkpoint import checkpoint_name

from pncnn_jax.data import input_contract
from pncnn_jax.nn import cpu_kernels, layers, prng
from pncnn_jax.nn.conv import check_rank4

Array = jax.Array


@struct.dataclass
class ModelOutput:
  """What every pNCNN-family model returns; each field is (B, H, W, 1) float32.

  Attributes:
    depth: predicted dense depth mu, metres (reference channel 0).
    confidence: the output confidence used for uncertainty (reference channel 1). For models with a variance
      estimator it is the estimated precision c = 1/sigma^2 (1/m^2); otherwise the propagated NConv
      confidence (unitless).
    input_confidence: c0, the input confidence given to the NConvUNet (reference channel 2).
    nconv_confidence: the NConvUNet output confidence (the variance estimator's input).
  """

  depth: Array
  confidence: Array
  input_confidence: Array
  nconv_confidence: Array

  def stack_nchw(self) -> Array:
    """The reference's (B, 3, H, W) layout [depth, confidence, input_confidence]."""
    return jnp.concatenate([self.depth, self.confidence, self.input_confidence], axis=-1).transpose(0, 3, 1, 2)


def _check_input(name: str, x: Array) -> None:
  """The input contract's layout check (`pncnn_jax.data.input_contract`): (B, H, W, 1) real numbers."""
  input_contract.check_layout(x.shape, x.dtype, name=name, layouts=(input_contract.BHW1,))


# --------------------------------------------------------------------------------------------------------------
# NConvUNet


class NConvUNet(nn.Module):
  """Multi-scale normalized-convolution network (docs/SPEC.md §4.1), 481 parameters for 1 -> 1 channels.

    scale 1:   (x1, c1)   = nconv3(nconv2(nconv1(x0, c0)))
    scale 1/2: (x2, c2)   = nconv3(nconv2(DS(x1, c1)))          nconv2, nconv3 shared
    scale 1/4: (x3, c3)   = nconv2(DS(x2, c2))                  nconv2 shared
    scale 1/8: (x4, c4)   = nconv2(DS(x3, c3))                  nconv2 shared
    (x34, c34) = nconv4([x3, NN(x4)])        (x23, c23) = nconv5([x2, NN(x34)])
    (xo, co)   = nconv6([NN(x23), x1])       <- upsampled first: the reference's flipped order
    (xout, cout) = nconv7(xo, co)

  DS is `layers.confidence_downsample`, NN is `layers.nearest_upsample` to the skip's exact size, and
  concatenations are applied identically to data and confidence. Every NConv output is sown into the
  'intermediates' collection as (in_x, in_c, out_x, out_c) under its call order, e.g. '03_nconv2'.

  Attributes:
    out_channels: channels of the output (1).
    num_channels: hidden width multiplier (hidden width = in_channels * num_channels = 2).
    weight_init: 'published' (Poisson + U[0,1) for nconv1-6, Kaiming for nconv7, as the shipped checkpoints) or
      'repo' (Kaiming for all seven layers, as the reference's current code).
  """

  out_channels: int = 1
  num_channels: int = 2
  weight_init: str = "published"

  @nn.compact
  def __call__(self, x0: Array, c0: Array) -> tuple[Array, Array]:
    check_rank4("NConvUNet", x0, c0)
    if self.weight_init not in NCONV_INITS:
      raise ValueError(f"NConvUNet: unknown weight_init {self.weight_init!r}; expected 'published' or 'repo'")
    hidden = x0.shape[-1] * self.num_channels
    body = "poisson" if self.weight_init == "published" else "kaiming"
    nconv1 = layers.NConv2D(hidden, 5, kernel_init=body, name="nconv1")
    nconv2 = layers.NConv2D(hidden, 5, kernel_init=body, name="nconv2")
    nconv3 = layers.NConv2D(hidden, 5, kernel_init=body, name="nconv3")
    nconv4 = layers.NConv2D(hidden, 3, kernel_init=body, name="nconv4")
    nconv5 = layers.NConv2D(hidden, 3, kernel_init=body, name="nconv5")
    nconv6 = layers.NConv2D(hidden, 3, kernel_init=body, name="nconv6")
    nconv7 = layers.NConv2D(self.out_channels, 1, kernel_init="kaiming", name="nconv7")
    calls = [0]

    def run(layer, x, c):
      out = layer(x, c)
      self.sow("intermediates", f"{calls[0]:02d}_{layer.name}", (x, c) + tuple(out))
      calls[0] += 1
      return out

    def cat(a, b):
      return jnp.concatenate([a, b], axis=-1)

    def up(a, like):
      return layers.nearest_upsample(a, like.shape[1:3])

    with cpu_kernels.frame(x0.shape[1], x0.shape[2]):  # one convolution path for all layers, by the frame's size
      x1, c1 = run(nconv3, *run(nconv2, *run(nconv1, x0, c0)))
      x2, c2 = run(nconv3, *run(nconv2, *layers.confidence_downsample(x1, c1)))
      x3, c3 = run(nconv2, *layers.confidence_downsample(x2, c2))
      x4, c4 = run(nconv2, *layers.confidence_downsample(x3, c3))
      x34, c34 = run(nconv4, cat(x3, up(x4, x3)), cat(c3, up(c4, c3)))
      x23, c23 = run(nconv5, cat(x2, up(x34, x2)), cat(c2, up(c34, c2)))
      xo, co = run(nconv6, cat(up(x23, x0), x1), cat(up(c23, c0), c1))
      return run(nconv7, xo, co)


# --------------------------------------------------------------------------------------------------------------
# Compact UNet


def _torch_bias_init(fan_in: int):
  bound = 1.0 / math.sqrt(fan_in)

  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)

  return init


# The name of every Conv output (before BatchNorm): the only values a rematerialised UNet block keeps.
CONV_OUTPUT = "unet_conv_output"


class Conv(nn.Module):
  """'Same' 2D convolution with bias, PyTorch's default init: W, b ~ U(+-1/sqrt(fan_in)) (docs/SPEC.md §4.2).

  Parameters `kernel` (HWIO) and `bias` exactly as nn.Conv's; the numerics are `layers.conv2d_same`. Called
  with several inputs, it convolves their channel concatenation (the UNet skip joins); how (one convolution
  per input, or one of the concatenation) is `cpu_kernels.conv2d_same_inputs`'s choice, by `train`.
  """

  features: int
  kernel_size: int
  conv_precision: Any = None

  @nn.compact
  def __call__(self, *xs: Array, train: bool = False) -> Array:
    k, ci = self.kernel_size, sum(x.shape[-1] for x in xs)
    kernel = self.param("kernel", nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform"),
                        (k, k, ci, self.features), jnp.float32)
    bias = self.param("bias", _torch_bias_init(k * k * ci), (self.features,), jnp.float32)
    out = cpu_kernels.conv2d_same_inputs(xs, kernel, self.conv_precision, train=train)
    return checkpoint_name(out + bias.reshape(1, 1, 1, -1), CONV_OUTPUT)


class DoubleConv(nn.Module):
  """(Conv3x3 -> BatchNorm -> ReLU) x 2 (docs/SPEC.md §4.2)."""

  features: int
  conv_precision: Any = None

  @nn.compact
  def __call__(self, x: Array | tuple[Array, ...], train: bool) -> Array:
    """x: (B, H, W, C) or a tuple of such arrays, read as their concatenation on the channel axis."""
    x = Conv(self.features, 3, self.conv_precision, name="conv0")(*(x if isinstance(x, tuple) else (x,)),
                                                                  train=train)
    x = jax.nn.relu(layers.BatchNorm(name="bn0")(x, train))
    x = Conv(self.features, 3, self.conv_precision, name="conv1")(x, train=train)
    return jax.nn.relu(layers.BatchNorm(name="bn1")(x, train))


UNET_ACTIVATIONS = {"sigmoid": jax.nn.sigmoid, "softplus": jax.nn.softplus, "none": lambda x: x}


class UNet(nn.Module):
  """The compact UNet of pNCNN: 4 levels, channels 32-32-64-64 / 64-32-32, 334,017 parameters for 1 -> 1.

    x1 = inc(x); x2 = down1(x1); x3 = down2(x2); x4 = down3(x3)           down = maxpool 2x2 + DoubleConv
    y = up2(x4, x3); y = up3(y, x2); y = up4(y, x1)                       up = bilinear x2 (align_corners),
    out = activation(outc(y))                                             zero-pad to skip, cat [skip, up]

  The input is raw (unnormalised) depth in metres or a raw confidence; BatchNorm absorbs the scale.
  Block outputs are sown into 'intermediates' as <block>_out (inc_out, down1_out, ..., outc_out, the latter
  before the activation).

  Attributes:
    features: widths of (inc, down1, down2, down3); the decoder mirrors them.
    out_features: output channels.
    activation: 'sigmoid' (NCNN-Conf c0), 'softplus' (pNCNN c0 and precision), or 'none'.
    conv_precision: convolution precision (None = backend default).
    remat: in training, rematerialise each DoubleConv block: the backward pass keeps only the convolution
      outputs (and the block inputs) and recomputes BatchNorm, ReLU and the skip-join concatenation from them
      (`nn.remat` with a names policy). Same parameters and values; less memory (docs/develop/benchmarks-log.md).
  """

  features: tuple[int, int, int, int] = (32, 32, 64, 64)
  out_features: int = 1
  activation: str = "sigmoid"
  conv_precision: Any = None
  remat: bool = False

  @nn.compact
  def __call__(self, x: Array, train: bool = False) -> Array:
    check_rank4("UNet", x)
    if self.activation not in UNET_ACTIVATIONS:
      raise ValueError(f"UNet: unknown activation {self.activation!r}; expected one of {sorted(UNET_ACTIVATIONS)}")
    f1, f2, f3, f4 = self.features
    p = self.conv_precision
    block_cls = DoubleConv
    if train and self.remat:
      block_cls = nn.remat(DoubleConv, static_argnums=(2,),
                           policy=jax.checkpoint_policies.save_only_these_names(CONV_OUTPUT))

    def block(name, feats, inp):
      out = block_cls(feats, p, name=name)(inp, train)
      self.sow("intermediates", f"{name}_out", out)
      return out

    def up(name, feats, low, skip):
      low = layers.pad_to(layers.bilinear_upsample_x2(low), skip.shape[1:3])
      return block(name, feats, (skip, low))  # cat([skip, low]) on the channels (Conv of several inputs)

    x1 = block("inc", f1, x)
    x2 = block("down1", f2, layers.max_pool_2x2(x1))
    x3 = block("down2", f3, layers.max_pool_2x2(x2))
    x4 = block("down3", f4, layers.max_pool_2x2(x3))
    y = up("up2", f3, x4, x3)
    y = up("up3", f2, y, x2)
    y = up("up4", f1, y, x1)
    y = Conv(self.out_features, 1, p, name="outc")(y, train=train)
    self.sow("intermediates", "outc_out", y)
    return UNET_ACTIVATIONS[self.activation](y)


# --------------------------------------------------------------------------------------------------------------
# The model family


NCONV_INITS = ("published", "repo")  # NConvUNet.weight_init (a config's model.nconv_init)
# `jax.lax.Precision` names a UNet convolution may use (PNCNN.conv_precision, a config's model.conv_precision).
CONV_PRECISIONS = ("default", "high", "highest")
CONF_ESTIMATORS = ("none", "sigmoid", "softplus")
VAR_ESTIMATORS = ("none", "cout", "cout_depth", "cout_sparse")


class PNCNN(nn.Module):
  """The pNCNN model family (paper sections 3-4; docs/SPEC.md §5).

    c0  = mask(x > 0)                            conf_estimator = 'none'     (NCNN, binary input confidence)
        = sigmoid(UNet(x)) | softplus(UNet(x))   conf_estimator = 'sigmoid' | 'softplus'
    (mu, cout) = NConvUNet(x, c0)
    c   = cout                                   var_estimator = 'none'
        = softplus(UNet(cout))                   var_estimator = 'cout'       (pNCNN: precision 1/sigma^2)
        = softplus(UNet([cout, mu]))             var_estimator = 'cout_depth' (ablation: also sees mu)
        = softplus(UNet([cout, x]))              var_estimator = 'cout_sparse' (ours: also sees the sparse input)

  c0 is not masked by the input validity (docs/SPEC.md §5) unless `mask_input_confidence` is set (our option,
  not the official network): then c0 <- c0 * [x > 0], so empty pixels carry exactly zero confidence into NConv.
  `detach_variance_input` (our option, training only) stops the gradient at the variance UNet's input.

  Attributes:
    conf_estimator: one of CONF_ESTIMATORS.
    var_estimator: one of VAR_ESTIMATORS.
    nconv_init: 'published' or 'repo' (see NConvUNet).
    unet_features: widths of the compact UNets.
    conv_precision: precision of the UNet convolutions, a `jax.lax.Precision` or its name (the NConv ones always
      run at float32 precision). 'highest' (the default) is float32 on every backend, so GPUs and TPUs give the
      official numbers; 'default' lets them use TF32/bf16 passes: about 2.5x faster on an H200, but the
      confidence UNet then moves single predictions by up to ~0.3 m (docs/develop/benchmarks-log.md). CPUs are float32
      either way.
    detach_variance_input: the variance UNet sees stop_gradient(cout) (and mu): the loss's precision term then trains
      only the variance UNet, and NConv and the confidence UNet learn only through the depth term, as in
      NCNN-Conf. The forward pass is unchanged (the same parameters and outputs). Our option, not the paper's.
    remat: rematerialise the UNet blocks in training (see `UNet.remat`): the same parameters and function, a
      smaller working memory for the backward pass. None (the default): on CPU only, where host memory is what
      limits the batch (3.4 GB less at 352x1216 batch 4, ~5 % slower); GPUs and TPUs keep the faster step.
  """

  conf_estimator: str = "softplus"
  var_estimator: str = "cout"
  nconv_init: str = "published"
  unet_features: tuple[int, int, int, int] = (32, 32, 64, 64)
  conv_precision: Any = "highest"
  mask_input_confidence: bool = False
  detach_variance_input: bool = False
  remat: bool | None = None

  @nn.compact
  def __call__(self, sparse: Array, train: bool = False) -> ModelOutput:
    """Args: sparse (B, H, W, 1) depth in metres, 0 = missing (NaN and +-inf too: read as 0, no measurement, the
    input contract's rule, `pncnn_jax.data.input_contract`; otherwise one NaN would spread through every
    convolution to the whole output); train selects BatchNorm batch statistics."""
    _check_input("PNCNN", sparse)
    if self.conf_estimator not in CONF_ESTIMATORS:
      raise ValueError(f"PNCNN: conf_estimator {self.conf_estimator!r} not in {CONF_ESTIMATORS}")
    if self.var_estimator not in VAR_ESTIMATORS:
      raise ValueError(f"PNCNN: var_estimator {self.var_estimator!r} not in {VAR_ESTIMATORS}")
    x0 = sparse.astype(jnp.float32)
    x0 = jnp.where(jnp.isfinite(x0), x0, 0.0)  # NaN / +-inf-coded missing data = no measurement
    remat = jax.default_backend() == "cpu" if self.remat is None else self.remat
    if self.conf_estimator == "none":
      c0 = (x0 > 0).astype(jnp.float32)
    else:
      c0 = UNet(self.unet_features, 1, self.conf_estimator, self.conv_precision, remat,
                name="conf_estimator")(x0, train)
      if self.mask_input_confidence:
        c0 = jnp.where(x0 > 0, c0, 0.0)
    xout, cout = NConvUNet(weight_init=self.nconv_init, name="nconv")(x0, c0)
    if self.var_estimator == "none":
      conf = cout
    else:
      if self.var_estimator == "cout":
        var_in = cout
      else:  # one concatenation, the one this model uses
        var_in = jnp.concatenate([cout, xout if self.var_estimator == "cout_depth" else x0], axis=-1)
      if self.detach_variance_input:
        var_in = jax.lax.stop_gradient(var_in)
      conf = UNet(self.unet_features, 1, "softplus", self.conv_precision, remat,
                  name="var_estimator")(var_in, train)
    return ModelOutput(depth=xout, confidence=conf, input_confidence=c0, nconv_confidence=cout)


@dataclasses.dataclass(frozen=True)
class Variant:
  """A named paper variant: the model fields and the loss it is trained with (see pncnn_jax.losses)."""

  conf_estimator: str
  var_estimator: str
  loss: str
  description: str

  def model_kwargs(self) -> dict[str, str]:
    return {"conf_estimator": self.conf_estimator, "var_estimator": self.var_estimator}


VARIANTS: dict[str, Variant] = {
    "ncnn": Variant("none", "none", "masked_l1", "NCNN: binary input confidence, 481 parameters"),
    "ncnn_conf_l1": Variant("sigmoid", "none", "masked_l1", "NCNN-Conf trained with L1"),
    "ncnn_conf_l2": Variant("sigmoid", "none", "masked_l2", "NCNN-Conf trained with L2"),
    "pncnn": Variant("softplus", "cout", "gaussian_nll", "pNCNN: conf + var estimation, Gaussian NLL"),
    "pncnn_exp": Variant("softplus", "cout", "gaussian_nll_exp", "pNCNN-Exp: exp in the NLL data term"),
    "no_conf_est": Variant("none", "cout", "gaussian_nll", "ablation: binary input confidence"),
    "no_var_est": Variant("softplus", "none", "gaussian_nll", "ablation: NConv cout used as the precision"),
    "depth_pred": Variant("softplus", "cout_depth", "gaussian_nll", "ablation: var-est also sees the prediction"),
    "laplace": Variant("softplus", "cout", "laplace_nll", "ablation: Laplace NLL"),
    "pncnn_beta": Variant("softplus", "cout", "gaussian_nll_beta",
                          "pNCNN trained with beta-NLL weights (our option, not the paper's)"),
    "sparse_var": Variant("softplus", "cout_sparse", "gaussian_nll",
                          "var-est also sees the sparse input (our option, not the paper's)"),
}


def build_model(variant: str, **overrides: Any) -> PNCNN:
  """Builds the model of a named variant (a key of VARIANTS); `overrides` set other PNCNN fields."""
  if variant not in VARIANTS:
    raise ValueError(f"unknown model variant {variant!r}; expected one of {sorted(VARIANTS)}")
  return PNCNN(**VARIANTS[variant].model_kwargs(), **overrides)


def init_variables(model: nn.Module, rng: Array, shape: tuple[int, int] = (16, 16)) -> dict[str, Any]:
  """Initial variables ({'params', 'batch_stats'?}) of `model`, traced on a (1, H, W, 1) dummy input.

  The variables do not depend on the input size, so a small one is used. The initialisation is jitted and
  draws its random numbers from `rng`'s data with `prng.INIT_PRNG`, threefry with the original
  (non-partitionable) counter layout, whatever `jax_threefry_partitionable` says (docs/SPEC.md §11.4): a seed
  gives the weights it always gave. It also compiles fast: on CPU, XLA compiles the partitionable variant about
  5x slower (about 1 s per parameter tensor), which made initialising pNCNN take ~20 s.
  """
  return jax.jit(lambda key: model.init(prng.init_key(key), jnp.zeros((1, *shape, 1), jnp.float32),
                                        train=False))(rng)


def count_params(params: Any) -> int:
  """Number of trainable scalars in a parameter tree."""
  return sum(int(p.size) for p in jax.tree.leaves(params))
