"""Optical-flow figures: the colour wheel of Baker et al. (Middlebury, IJCV 2011) and the flow panels (matplotlib).

Colour coding: the hue is the flow's direction, the saturation its magnitude relative to `max_px` (white = no
motion, full colour = max_px or more); beyond max_px colours are darkened. One `max_px` per figure, so that all
panels share the legend drawn with them.
"""

from __future__ import annotations

import pathlib
from typing import Mapping, Sequence

import numpy as np

from pncnn_jax import viz


def colour_wheel() -> np.ndarray:
  """The 55 hues of the Middlebury wheel, (55, 3) in [0, 1]: red-yellow 15, yellow-green 6, green-cyan 4,
  cyan-blue 11, blue-magenta 13, magenta-red 6."""
  segments = [(15, (1, 0, 0), (1, 1, 0)), (6, (1, 1, 0), (0, 1, 0)), (4, (0, 1, 0), (0, 1, 1)),
              (11, (0, 1, 1), (0, 0, 1)), (13, (0, 0, 1), (1, 0, 1)), (6, (1, 0, 1), (1, 0, 0))]
  rows = []
  for n, a, b in segments:
    t = np.arange(n)[:, None] / n
    rows.append((1 - t) * np.asarray(a, np.float64) + t * np.asarray(b, np.float64))
  return np.concatenate(rows)


def flow_to_rgb(flow: np.ndarray, max_px: float) -> np.ndarray:
  """(H, W, 2) flow [px] -> (H, W, 3) uint8 RGB (module docstring); non-finite flow is black."""
  flow = np.asarray(flow, np.float64)
  if flow.ndim != 3 or flow.shape[-1] != 2:
    raise ValueError(f"flow_to_rgb: expected (H, W, 2) flow, got {flow.shape}")
  bad = ~np.all(np.isfinite(flow), axis=-1)
  u, v = np.where(bad, 0.0, flow[..., 0]), np.where(bad, 0.0, flow[..., 1])
  wheel = colour_wheel()
  n = len(wheel)
  rad = np.hypot(u, v) / max(max_px, 1e-9)
  ang = np.arctan2(-v, -u) / np.pi  # in [-1, 1]
  fk = (ang + 1) / 2 * (n - 1)
  k0 = np.floor(fk).astype(np.int64) % n
  k1 = (k0 + 1) % n
  f = (fk - np.floor(fk))[..., None]
  col = (1 - f) * wheel[k0] + f * wheel[k1]
  r = rad[..., None]
  col = np.where(r <= 1, 1 - r * (1 - col), col * 0.75)
  rgb = (np.clip(col, 0, 1) * 255).astype(np.uint8)
  rgb[bad] = 0
  return rgb


def wheel_image(size: int = 101) -> np.ndarray:
  """The legend: a disk whose pixel at offset (dx, dy) from the centre has the colour of flow (dx, dy) with
  max_px = the radius; outside the disk white. (size, size, 3) uint8."""
  r = (size - 1) / 2
  yy, xx = np.mgrid[0:size, 0:size] - r
  rgb = flow_to_rgb(np.stack([xx, yy], -1), r)
  rgb[np.hypot(xx, yy) > r] = 255
  return rgb


def flow_panels(rows: Sequence[Mapping[str, np.ndarray]], path: str | pathlib.Path, *, title: str = "",
                uncertainty_label: str = "predicted sigma", uncertainty_unit: str = "px") -> None:
  """Two rows of panels per example. Top: the input tracks on the image (coloured as flow; failed tracks ringed
  red), the predicted flow, the ground truth. Bottom: the input confidence c0 of the tracks, the predicted
  uncertainty, the end-point error. A colour wheel legend in pixels; colour bars with units.

  Each row holds (H, W) or (H, W, k) arrays: image, sparse (H, W, 3), corrupted (H, W) bool, input_confidence,
  flow (H, W, 2), target (H, W, 3), uncertainty, epe.
  """
  plt = viz._plt()  # pylint: disable=protected-access
  h, w = rows[0]["image"].shape[:2]
  max_px = max(float(np.percentile(np.hypot(*r["target"][..., :2].reshape(-1, 2).T), 99)) for r in rows)
  max_px = max(int(round(max_px)), 1)
  tracks = [r["sparse"][..., 2] > 0 for r in rows]
  c0_hi = max(float(np.percentile(r["input_confidence"][t], 99)) if t.any() else 0.0 for r, t in zip(rows, tracks))
  epe_hi = max(float(np.nanpercentile(r["epe"], 99)) for r in rows)
  unc = np.concatenate([r["uncertainty"][np.isfinite(r["uncertainty"])].ravel() for r in rows])
  unc_lo, unc_hi = np.percentile(unc, [1, 99]) if unc.size else (0.0, 1.0)
  panel_w = 3.6
  fig, axes = plt.subplots(2 * len(rows), 4, figsize=(3 * panel_w + 1.6, 2 * len(rows) * (panel_w * h / w + 0.45)),
                           gridspec_kw={"width_ratios": [1, 1, 1, 0.42]}, squeeze=False)
  for i, (r, t) in enumerate(zip(rows, tracks)):
    rr, cc = np.nonzero(t)
    bad = r["corrupted"][rr, cc]
    top, bottom = axes[2 * i], axes[2 * i + 1]
    top[0].imshow(r["image"], cmap="gray", vmin=0, vmax=1)
    top[0].scatter(cc, rr, s=7, c=flow_to_rgb(r["sparse"][rr, cc, :2][None], max_px)[0] / 255.0, edgecolors="none")
    top[0].scatter(cc[bad], rr[bad], s=24, facecolors="none", edgecolors="red", linewidths=0.6)
    top[0].set_title(f"example {i + 1}: input tracks ({len(rr)}, {int(bad.sum())} failed, ringed red)", fontsize=8)
    top[1].imshow(flow_to_rgb(r["flow"], max_px))
    top[1].set_title("predicted flow", fontsize=8)
    top[2].imshow(flow_to_rgb(r["target"][..., :2], max_px))
    top[2].set_title("ground-truth flow", fontsize=8)
    bottom[0].imshow(r["image"], cmap="gray", vmin=0, vmax=1, alpha=0.45)
    sc = bottom[0].scatter(cc, rr, s=7, c=r["input_confidence"][rr, cc], cmap="viridis", vmin=0, vmax=c0_hi or 1.0)
    fig.colorbar(sc, ax=bottom[0], fraction=0.04, pad=0.02).set_label("c0", fontsize=7)
    bottom[0].set_title("input confidence c0 of the tracks", fontsize=8)
    im = bottom[1].imshow(r["uncertainty"], cmap="magma", vmin=unc_lo, vmax=unc_hi)
    fig.colorbar(im, ax=bottom[1], fraction=0.04, pad=0.02).set_label(uncertainty_unit, fontsize=7)
    bottom[1].set_title(f"{uncertainty_label} [{uncertainty_unit}]", fontsize=8)
    im = bottom[2].imshow(r["epe"], cmap="inferno", vmin=0, vmax=epe_hi)
    fig.colorbar(im, ax=bottom[2], fraction=0.04, pad=0.02).set_label("px", fontsize=7)
    bottom[2].set_title("end-point error [px]", fontsize=8)
    for ax in top[:3]:  # invisible colour bars: the same panel widths as the bottom row
      fig.colorbar(sc, ax=ax, fraction=0.04, pad=0.02).ax.set_visible(False)
    for ax in (*top, *bottom):
      ax.set_xticks([])
      ax.set_yticks([])
    top[3].axis("off")
    bottom[3].axis("off")
  leg = axes[0, 3]
  leg.axis("on")
  leg.imshow(wheel_image(), extent=(-max_px, max_px, max_px, -max_px))
  leg.set_xticks([-max_px, 0, max_px])
  leg.set_yticks([-max_px, 0, max_px])
  leg.tick_params(labelsize=6)
  leg.set_xlabel("u [px] (right)", fontsize=7)
  leg.set_ylabel("v [px] (down)", fontsize=7)
  leg.set_title("flow colour", fontsize=8)
  if title:
    fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=90)
  plt.close(fig)


def sparsification_figure(curves: Mapping[str, object], path: str | pathlib.Path) -> None:
  """AUSE on EPE: each model's curve (solid) and its oracle (dashed), mean EPE kept / mean EPE of all."""
  plt = viz._plt()  # pylint: disable=protected-access
  fig, ax = plt.subplots(figsize=(5.5, 4))
  for i, (name, sp) in enumerate(curves.items()):
    colour = f"C{i}"
    ax.plot(sp.fractions, sp.model, color=colour, label=f"{name} (AUSE {sp.ause:.3f})")
    ax.plot(sp.fractions, sp.oracle, color=colour, linestyle="--", linewidth=0.8)
  ax.set_xlabel("fraction of pixels removed (most uncertain first)")
  ax.set_ylabel("mean EPE of the rest / mean EPE of all")
  ax.set_title("sparsification on EPE (dashed: oracle)")
  ax.legend(fontsize=7)
  fig.tight_layout()
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=110)
  plt.close(fig)
