"""A PyTorch pNCNN written from docs/SPEC.md, for benchmarks only (bench/bench_gpu.py).

torch is never a dependency of pncnn_jax: this file imports nothing from the package and is not imported by it.
It is our own implementation of the published networks (not the official code), in the layout the official
checkpoints use (NCHW, the same state_dict names), so that

  * `load_state_dict(convert.variables_to_state_dict(jax_variables))` gives it exactly our weights, and
    bench/bench_gpu.py checks that both frameworks compute the same outputs, loss and gradients before timing;
  * the timings compare the same arithmetic: the 481-parameter NConvUNet (NConv = two convolutions of the
    softplus_10 weights, confidence-driven 2x2 downsampling, nearest upsampling) and the compact UNets
    (3x3 conv + BatchNorm + ReLU blocks, max-pool, bilinear x2 upsampling with align_corners=True).

The model returns (depth, confidence, c0), each (B, 1, H, W), as the official network's three output channels.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

NCONV_EPS = 1e-20


class NConv2d(nn.Module):
  """x_out = conv(x*c, W) / (conv(c, W) + eps) + b, c_out = conv(c, W) / sum(W), W = softplus_10(weight_p)."""

  def __init__(self, cin: int, cout: int, k: int, init: str = "poisson"):
    super().__init__()
    self.bias = nn.Parameter(torch.full((cout,), 0.01))
    w = torch.empty(cout, cin, k, k)
    if init == "poisson":  # Poisson(mu = k/2) bump (outer product of the pmf) + U[0, 1) noise
      mu = k / 2
      pmf = torch.tensor([math.exp(-mu) * mu**i / math.factorial(i) for i in range(k)])
      w = torch.outer(pmf, pmf).expand(cout, cin, k, k) + torch.rand(cout, cin, k, k)
    else:  # kaiming_uniform (a = 0, fan_in)
      bound = math.sqrt(6.0 / (cin * k * k))
      w.uniform_(-bound, bound)
    self.weight_p = nn.Parameter(F.softplus(w, beta=10))
    self.pad = k // 2

  def forward(self, x: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # Always float32, as pncnn_jax keeps its NConv layers (under torch.autocast too: bench/gpu_suite.py's bfloat16).
    with torch.autocast(x.device.type, enabled=False):
      x, c = x.float(), c.float()
      w = F.softplus(self.weight_p, beta=10)
      den = F.conv2d(c, w, padding=self.pad)
      num = F.conv2d(x * c, w, padding=self.pad)
      x_out = num / (den + NCONV_EPS) + self.bias.view(1, -1, 1, 1)
      c_out = den / w.sum(dim=(1, 2, 3)).view(1, -1, 1, 1)
    return x_out, c_out


def confidence_downsample(x: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
  """2x2 max-pool of c; x taken at the argmax; c divided by 4."""
  c_ds, idx = F.max_pool2d(c, 2, 2, return_indices=True)
  x_ds = x.flatten(2).gather(2, idx.flatten(2)).view_as(c_ds)
  return x_ds, c_ds / 4


class NConvUNet(nn.Module):
  """The 4-scale NConv encoder-decoder (nconv2 and nconv3 shared across scales), 481 parameters."""

  def __init__(self):
    super().__init__()
    self.nconv1 = NConv2d(1, 2, 5)
    self.nconv2 = NConv2d(2, 2, 5)
    self.nconv3 = NConv2d(2, 2, 5)
    self.nconv4 = NConv2d(4, 2, 3)
    self.nconv5 = NConv2d(4, 2, 3)
    self.nconv6 = NConv2d(4, 2, 3)
    self.nconv7 = NConv2d(2, 1, 1, init="kaiming")

  def forward(self, x0, c0):
    up = lambda a, like: F.interpolate(a, size=like.shape[-2:], mode="nearest")  # noqa: E731
    x1, c1 = self.nconv3(*self.nconv2(*self.nconv1(x0, c0)))
    x2, c2 = self.nconv3(*self.nconv2(*confidence_downsample(x1, c1)))
    x3, c3 = self.nconv2(*confidence_downsample(x2, c2))
    x4, c4 = self.nconv2(*confidence_downsample(x3, c3))
    x34, c34 = self.nconv4(torch.cat([x3, up(x4, x3)], 1), torch.cat([c3, up(c4, c3)], 1))
    x23, c23 = self.nconv5(torch.cat([x2, up(x34, x2)], 1), torch.cat([c2, up(c34, c2)], 1))
    xo, co = self.nconv6(torch.cat([up(x23, x0), x1], 1), torch.cat([up(c23, c0), c1], 1))  # upsampled first
    return self.nconv7(xo, co)


class _DoubleConv(nn.Module):
  def __init__(self, cin: int, cout: int):
    super().__init__()
    self.conv = nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                              nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

  def forward(self, x):
    return self.conv(x)


class _Down(nn.Module):
  def __init__(self, cin: int, cout: int):
    super().__init__()
    self.mpconv = nn.Sequential(nn.MaxPool2d(2), _DoubleConv(cin, cout))

  def forward(self, x):
    return self.mpconv(x)


class _Up(nn.Module):
  def __init__(self, cin: int, cout: int):
    super().__init__()
    self.conv = _DoubleConv(cin, cout)

  def forward(self, low, skip):
    low = F.interpolate(low, scale_factor=2, mode="bilinear", align_corners=True)
    dh, dw = skip.shape[2] - low.shape[2], skip.shape[3] - low.shape[3]
    if dh or dw:
      low = F.pad(low, (dw // 2, dw - dw // 2, dh // 2, dh - dh // 2))
    return self.conv(torch.cat([skip, low], 1))


class _OutConv(nn.Module):
  def __init__(self, cin: int, cout: int):
    super().__init__()
    self.conv = nn.Conv2d(cin, cout, 1)

  def forward(self, x):
    return self.conv(x)


class _Inconv(nn.Module):
  def __init__(self, cin: int, cout: int):
    super().__init__()
    self.conv = _DoubleConv(cin, cout)

  def forward(self, x):
    return self.conv(x)


class UNet(nn.Module):
  """The compact UNet (m = 8): 32-32-64-64 / 64-32-32 channels, 334,017 parameters; sigmoid or softplus head."""

  def __init__(self, activation: str):
    super().__init__()
    self.inc = _Inconv(1, 32)
    self.down1, self.down2, self.down3 = _Down(32, 32), _Down(32, 64), _Down(64, 64)
    self.up2, self.up3, self.up4 = _Up(128, 64), _Up(96, 32), _Up(64, 32)
    self.outc = _OutConv(32, 1)
    self.activation = activation

  def forward(self, x):
    x1 = self.inc(x)
    x2 = self.down1(x1)
    x3 = self.down2(x2)
    x4 = self.down3(x3)
    y = self.up4(self.up3(self.up2(x4, x3), x2), x1)
    y = self.outc(y)
    return torch.sigmoid(y) if self.activation == "sigmoid" else F.softplus(y)


class PNCNN(nn.Module):
  """pNCNN (conf='softplus', var=True), NCNN-Conf (conf='sigmoid', var=False) or NCNN (conf=None, var=False)."""

  def __init__(self, conf: str | None = "softplus", var: bool = True):
    super().__init__()
    self.conf_estimator = UNet(conf) if conf else None
    self.nconv = NConvUNet()
    self.var_estimator = UNet("softplus") if var else None

  def forward(self, sparse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x0 = sparse[:, :1]
    c0 = self.conf_estimator(x0) if self.conf_estimator is not None else (x0 > 0).float()
    xout, cout = self.nconv(x0, c0)
    conf = self.var_estimator(cout) if self.var_estimator is not None else cout
    return xout, conf, c0


def gaussian_nll(depth: torch.Tensor, precision: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
  """Mean over the pixels with target > 0 of c (t - mu)^2 - log(c + 1e-16)."""
  valid = target > 0
  per_pixel = precision * (target - depth) ** 2 - torch.log(precision + 1e-16)
  return per_pixel[valid].sum() / valid.sum().clamp(min=1)


def build(variant: str) -> PNCNN:
  """'pncnn' or 'ncnn_conf_l1' (the two networks the benchmark times)."""
  return {"pncnn": lambda: PNCNN("softplus", True), "ncnn_conf_l1": lambda: PNCNN("sigmoid", False)}[variant]()
