"""Figures: colour-mapped depth and uncertainty, qualitative panels, sparsification plots (matplotlib, Agg).

All functions take host numpy arrays, (H, W) in metres unless said otherwise, and write PNG files.
"""

from __future__ import annotations

import pathlib
from typing import Mapping, Sequence

import numpy as np


def _plt():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def colorize(values: np.ndarray, vmin: float | None = None, vmax: float | None = None, cmap: str = "turbo",
             invalid: np.ndarray | None = None) -> np.ndarray:
  """(H, W) values -> (H, W, 3) uint8 RGB with `cmap` over [vmin, vmax] (default: 1st/99th percentile of the
  finite values); pixels that are non-finite or in `invalid` are black."""
  from matplotlib import colormaps  # pylint: disable=g-import-not-at-top
  v = np.asarray(values, np.float64)
  if v.ndim != 2:
    raise ValueError(f"colorize: expected an (H, W) array, got shape {v.shape}")
  bad = ~np.isfinite(v) if invalid is None else (~np.isfinite(v) | np.asarray(invalid, bool))
  good = v[~bad]
  lo = vmin if vmin is not None else (float(np.percentile(good, 1)) if good.size else 0.0)
  hi = vmax if vmax is not None else (float(np.percentile(good, 99)) if good.size else 1.0)
  scaled = np.clip((np.where(bad, lo, v) - lo) / max(hi - lo, 1e-12), 0.0, 1.0)
  rgb = (colormaps[cmap](scaled)[..., :3] * 255).astype(np.uint8)
  rgb[bad] = 0
  return rgb


def save_depth_preview(depth_m: np.ndarray, path: str | pathlib.Path, uncertainty: np.ndarray | None = None,
                       max_depth_m: float = 80.0) -> None:
  """Writes a colour preview PNG: the depth (turbo, 0..max_depth_m) and, below it, the uncertainty (magma)."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  img = colorize(depth_m, 0.0, max_depth_m, "turbo", invalid=np.asarray(depth_m) <= 0)
  if uncertainty is not None:
    img = np.concatenate([img, colorize(uncertainty, cmap="magma")], axis=0)
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  Image.fromarray(img).save(path)


PANEL_COLUMNS = (("sparse", "input depth [m]"), ("input_confidence", "input confidence c0"),
                 ("depth", "prediction [m]"), ("uncertainty", "uncertainty"), ("error", "|error| [m]"))


def panels_figure(panels: Sequence[Mapping[str, np.ndarray]], path: str | pathlib.Path,
                  uncertainty_label: str = "sigma [m]") -> None:
  """One row per image: input, input confidence, prediction, uncertainty, absolute error (at ground truth)."""
  plt = _plt()
  rows = len(panels)
  h, w = panels[0]["depth"].shape
  fig, axes = plt.subplots(rows, len(PANEL_COLUMNS), figsize=(3.2 * len(PANEL_COLUMNS), 3.2 * rows * h / w + 0.6),
                           squeeze=False)
  for r, p in enumerate(panels):
    dmax = float(np.nanpercentile(np.where(p["target"] > 0, p["target"], np.nan), 99)) if np.any(
        p["target"] > 0) else float(np.max(p["depth"]))
    for c, (key, title) in enumerate(PANEL_COLUMNS):
      ax = axes[r, c]
      v = np.asarray(p[key], np.float64)
      if key == "sparse":
        img = colorize(v, 0.0, dmax, "turbo", invalid=v <= 0)
      elif key == "depth":
        img = colorize(v, 0.0, dmax, "turbo")
      elif key == "error":
        img = colorize(v, 0.0, None, "inferno")
      else:
        img = colorize(v, cmap="magma" if key == "uncertainty" else "viridis")
      ax.imshow(img, interpolation="nearest")
      ax.set_axis_off()
      if r == 0:
        ax.set_title(uncertainty_label if key == "uncertainty" else title, fontsize=9)
  fig.tight_layout()
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=110)
  plt.close(fig)


def sparsification_plot(curves: Mapping[str, object], path: str | pathlib.Path) -> None:
  """Sparsification curves (`metrics.Sparsification` per model name): oracle dashed, model solid, AUSE in the
  legend (REFERENCE.md 6.3 normalisation)."""
  plt = _plt()
  fig, ax = plt.subplots(figsize=(5.5, 4))
  for i, (name, sp) in enumerate(curves.items()):
    color = f"C{i}"
    ax.plot(sp.fractions, sp.model, color=color, label=f"{name} (AUSE {sp.ause:.3f})")
    ax.plot(sp.fractions, sp.oracle, color=color, linestyle="--", alpha=0.7, label=f"{name} oracle")
  ax.set_xlabel("fraction of pixels removed")
  ax.set_ylabel("normalised RMSE")
  ax.set_xlim(0, 1)
  ax.set_ylim(bottom=0)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=110)
  plt.close(fig)


def training_curves(rows_by_model: Mapping[str, Sequence[Mapping[str, object]]], path: str | pathlib.Path,
                    key: str = "rmse") -> None:
  """Validation `key` against the step, one line per model (rows as in metrics.jsonl, split 'val')."""
  plt = _plt()
  fig, ax = plt.subplots(figsize=(5.5, 4))
  for name, rows in rows_by_model.items():
    pts = [(r["step"], r[key]) for r in rows if r.get("split") == "val" and isinstance(r.get(key), (int, float))]
    if pts:
      ax.plot(*zip(*pts), marker="o", label=name)
  ax.set_xlabel("training step")
  unit = {"rmse": "RMSE [mm]", "mae": "MAE [mm]"}.get(key, key)
  ax.set_ylabel(f"validation {unit}")
  ax.set_title("Validation during training", fontsize=10)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
