"""Multi-channel pNCNN for sparse optical flow (paper section 6, "sparse optical flow rectification"), NHWC.

A sparse flow field of C = 2 channels (u, v, in pixels) comes in with its track mask; dense flow, a per-pixel
precision and the learned input confidence come out. The network is the depth pNCNN with three decisions made
for vector data:

* **One input confidence per pixel, shared by the channels.** A KLT track is one match: when it fails (a
  homogeneous patch, an edge, a repeated pattern) both components of its vector are wrong together, so the
  confidence belongs to the track, not to u or v separately. The aperture problem does corrupt one direction
  more than the other, but that direction is the edge's, not an image axis, so a per-axis confidence could not
  express it either. The confidence UNet sees [u, v, mask] and returns one channel; c0 is masked by the tracks.
* **One NConvUNet applied to each component** (weights shared, channels folded into the batch). A normalized
  convolution with C_in = C_out = 2 would average u into v; applying the same non-negative filter to both
  components is a convolution of the vector field with a scalar kernel, which commutes with rotating every
  vector (up to the layers' scalar bias). With one c0 the propagated confidence is the same for u and v (it
  never depends on the data), so `nconv_confidence` is one channel.
* **An isotropic precision by default** (`var_estimator='isotropic'`): the variance UNet maps the NConv
  confidence to one precision c = 1/sigma^2 [1/px^2] per pixel, sigma being the standard deviation of each
  component. The loss is then the NLL of N(flow; mu, sigma^2 I), `flow_losses.flow_nll`, and ||e||^2 ~ 2 sigma^2,
  so sigma ranks pixels by their expected end-point error, which is what AUSE on EPE measures. The variance
  UNet's only input is the channel-shared NConv confidence, so it has nothing to tell u from v; the
  'per_channel' option (a diagonal covariance, two precisions) is there as an ablation.

The input is packed in one array so that the training loop's step (`model.apply(variables, batch['sparse'])`)
is the same as for depth: sparse (B, H, W, C + 1) = [u, v, mask] with mask 1 at a track and 0 elsewhere (a
zero vector is a valid measurement, so the mask cannot be the data > 0 test of depth).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from pncnn_jax.nn import models

Array = jax.Array
FLOW_CHANNELS = 2  # u (right), v (down), pixels


@struct.dataclass
class FlowOutput:
  """What a `FlowPNCNN` returns (NHWC float32).

  Attributes:
    flow: (B, H, W, C) dense flow, pixels (u right, v down).
    confidence: (B, H, W, 1) precision 1/sigma^2 [1/px^2] ('isotropic'), (B, H, W, C) one per channel
      ('per_channel'), or the propagated NConv confidence, unitless ('none').
    input_confidence: (B, H, W, 1) c0, the learned (or binary) confidence of each track; 0 off the tracks.
    nconv_confidence: (B, H, W, 1) the NConvUNet output confidence (the same for every channel).
  """

  flow: Array
  confidence: Array
  input_confidence: Array
  nconv_confidence: Array

  @property
  def depth(self) -> Array:
    """The prediction under the name the generic training step reads (`losses.get_batch_errors`, losses)."""
    return self.flow


def fold_channels(x: Array) -> Array:
  """(B, H, W, C) -> (C * B, H, W, 1): channel k of image b goes to row k * B + b."""
  b, h, w, c = x.shape
  return jnp.moveaxis(x, -1, 0).reshape(c * b, h, w, 1)


def unfold_channels(x: Array, channels: int) -> Array:
  """Inverse of `fold_channels`: (C * B, H, W, 1) -> (B, H, W, C)."""
  cb, h, w, _ = x.shape
  return jnp.moveaxis(x.reshape(channels, cb // channels, h, w), 0, -1)


CONF_ESTIMATORS = ("none", "sigmoid", "softplus")
VAR_ESTIMATORS = ("none", "isotropic", "per_channel")


class FlowPNCNN(nn.Module):
  """pNCNN for a C-channel sparse signal with a shared per-pixel confidence (module docstring).

    m   = [mask > 0]                          the tracks
    c0  = m                                   conf_estimator = 'none' (binary: interpolation of every track)
        = act(UNet([x, m])) * m               'sigmoid' | 'softplus' (learned, zero off the tracks)
    (mu_k, cout) = NConvUNet(x_k, c0)         for each channel k, one set of weights
    c   = cout | softplus(UNet(cout))         var_estimator = 'none' | 'isotropic' (1 channel), 'per_channel' (C)

  Attributes:
    conf_estimator: one of CONF_ESTIMATORS.
    var_estimator: one of VAR_ESTIMATORS.
    channels: C, the signal's channels (2 for optical flow).
    nconv_init: 'published' or 'repo' (see `models.NConvUNet`).
    unet_features: widths of the compact UNets; half the depth model's by default (2-channel input at
      64x192 crops; the benchmark trains on a CPU).
    conv_precision: precision of the UNet convolutions (see `models.PNCNN`).
  """

  conf_estimator: str = "softplus"
  var_estimator: str = "isotropic"
  channels: int = FLOW_CHANNELS
  nconv_init: str = "published"
  unet_features: tuple[int, int, int, int] = (16, 16, 32, 32)
  conv_precision: Any = "highest"

  @property
  def input_channels(self) -> int:
    """Channels of the packed input: the signal's C and the mask."""
    return self.channels + 1

  @nn.compact
  def __call__(self, sparse: Array, train: bool = False) -> FlowOutput:
    """Args: sparse (B, H, W, C + 1) = [signal (pixels for flow), mask (1 = track)]; train selects BatchNorm
    batch statistics."""
    if sparse.ndim != 4 or sparse.shape[-1] != self.input_channels:
      raise ValueError(f"FlowPNCNN: expected sparse of shape (B, H, W, {self.input_channels}) = [{self.channels} "
                       f"signal channels, track mask], got {tuple(sparse.shape)}")
    if self.conf_estimator not in CONF_ESTIMATORS:
      raise ValueError(f"FlowPNCNN: conf_estimator {self.conf_estimator!r} not in {CONF_ESTIMATORS}")
    if self.var_estimator not in VAR_ESTIMATORS:
      raise ValueError(f"FlowPNCNN: var_estimator {self.var_estimator!r} not in {VAR_ESTIMATORS}")
    sparse = sparse.astype(jnp.float32)
    m = (sparse[..., self.channels:] > 0).astype(jnp.float32)
    x0 = jnp.where(m > 0, sparse[..., :self.channels], 0.0)  # what lies off the tracks is ignored
    if self.conf_estimator == "none":
      c0 = m
    else:
      unet = models.UNet(self.unet_features, 1, self.conf_estimator, self.conv_precision, name="conf_estimator")
      c0 = unet(jnp.concatenate([x0, m], axis=-1), train) * m
    xs, cs = fold_channels(x0), jnp.tile(c0, (self.channels, 1, 1, 1))
    xout, cout = models.NConvUNet(weight_init=self.nconv_init, name="nconv")(xs, cs)
    flow = unfold_channels(xout, self.channels)
    cout = cout[:sparse.shape[0]]  # every channel's copy is the same: cout depends on c0 and the weights only
    if self.var_estimator == "none":
      conf = cout
    else:
      out_ch = 1 if self.var_estimator == "isotropic" else self.channels
      conf = models.UNet(self.unet_features, out_ch, "softplus", self.conv_precision, name="var_estimator")(cout, train)
    return FlowOutput(flow=flow, confidence=conf, input_confidence=c0, nconv_confidence=cout)


# A named flow model: its `FlowPNCNN` fields and the loss it trains with (`pncnn_jax.losses.LOSSES`); the same record as
# the depth variants'.
FlowVariant = models.Variant


FLOW_VARIANTS: dict[str, FlowVariant] = {
    "flow_ncnn": FlowVariant("none", "none", "flow_epe",
                             "binary confidence (every track trusted): learned NConv interpolation, EPE loss"),
    "flow_ncnn_conf": FlowVariant("sigmoid", "none", "flow_epe", "learned input confidence, EPE loss"),
    "flow_pncnn": FlowVariant("softplus", "isotropic", "flow_nll",
                              "pNCNN: learned input confidence + isotropic precision, 2-D Gaussian NLL"),
    "flow_pncnn_aniso": FlowVariant("softplus", "per_channel", "flow_nll",
                                    "ablation: one precision per channel (diagonal covariance)"),
}
MODEL_FIELDS = ("nconv_init", "conv_precision", "unet_features")  # what a flow config's `model` may set


def build_flow_model(variant: str, **overrides: Any) -> FlowPNCNN:
  """The `FlowPNCNN` of a named variant (a key of FLOW_VARIANTS); `overrides` set other fields (MODEL_FIELDS)."""
  if variant not in FLOW_VARIANTS:
    raise ValueError(f"unknown flow variant {variant!r}; expected one of {sorted(FLOW_VARIANTS)}")
  bad = sorted(set(overrides) - set(MODEL_FIELDS))
  if bad:
    raise ValueError(f"config.model: {bad} do not apply to the flow models (c0 is always zero off the tracks); "
                     f"they take some of {MODEL_FIELDS}")
  if "unet_features" in overrides:
    overrides["unet_features"] = tuple(overrides["unet_features"])
  return FlowPNCNN(**FLOW_VARIANTS[variant].model_kwargs(), **overrides)


def init_flow_variables(model: FlowPNCNN, rng: Array, shape: tuple[int, int] = (16, 16)) -> dict[str, Any]:
  """Initial variables of `model` (as `models.init_variables`, on a (1, H, W, C + 1) dummy input)."""
  with jax.threefry_partitionable(False):
    dummy = jnp.zeros((1, *shape, model.input_channels), jnp.float32)
    return jax.jit(lambda key: model.init(key, dummy, train=False))(rng)
