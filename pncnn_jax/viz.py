"""Figures: depth previews, qualitative panels, sparsification plots, training curves (matplotlib, Agg).

All functions take host numpy arrays, (H, W) in metres unless said otherwise, and write a PNG to `path` (a file
path, or a binary file object such as `io.BytesIO`, which is how the notebook shows them inline). Every image
has a colour bar labelled with its unit; values that span more than a decade (confidences, sigma) are shown on
a log scale, and the colour bar says so. Missing values (no measurement, no ground truth) are white; predicted
values that are not valid (no input support: `Completion.valid`) are hatched.
"""

from __future__ import annotations

import pathlib
from typing import IO, Mapping, Sequence

import numpy as np

LOG_MIN_SPAN = 10.0  # a log colour scale when the shown values span at least this ratio (one decade)
HATCH, HATCH_COLOR = "////", "0.45"  # how pixels without a valid prediction are drawn: grey diagonal lines


def _plt():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def _save(fig, path: str | pathlib.Path | IO[bytes], dpi: int = 110) -> None:
  if isinstance(path, (str, pathlib.Path)):
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=dpi, format="png", bbox_inches="tight", pad_inches=0.1)  # nothing clipped
  _plt().close(fig)


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


def value_range(values: np.ndarray, *, positive: bool = False, lo_pct: float = 1.0, hi_pct: float = 99.0
                ) -> tuple[float, float, bool]:
  """(vmin, vmax, log) for showing `values`: their lo/hi percentiles over the finite (and, for `positive`, > 0)
  values, and whether they span at least LOG_MIN_SPAN (then a log scale, which needs vmin > 0)."""
  v = np.asarray(values, np.float64)
  v = v[np.isfinite(v) & (v > 0 if positive else True)]
  if v.size == 0:
    return (1e-3, 1.0, False) if positive else (0.0, 1.0, False)
  lo, hi = float(np.percentile(v, lo_pct)), float(np.percentile(v, hi_pct))
  if hi <= lo:  # one value (e.g. a 0/1 validity mask): a linear scale from 0 (or around it)
    return (0.0, lo, False) if lo > 0 else (lo - 1.0, lo + 1.0, False)
  return lo, hi, lo > 0 and hi / lo >= LOG_MIN_SPAN


def show_image(ax, values: np.ndarray, *, cmap: str, label: str, vmin: float | None = None,
               vmax: float | None = None, log: bool = False, title: str | None = None, row_label: str | None = None,
               hatch: np.ndarray | None = None):
  """imshow of (H, W) `values` with a colour bar of the image's height labelled `label` (the unit; ', log scale'
  appended when `log`); NaN pixels are white, and values beyond [vmin, vmax] take the end colours (the bar's
  pointed ends). The pixels of the (H, W) bool `hatch` are shown white and hatched (`hatch_pixels`), whatever
  their value. Ticks are off; `row_label` goes to the left of the image."""
  from matplotlib import colormaps, colors  # pylint: disable=g-import-not-at-top
  from mpl_toolkits.axes_grid1 import make_axes_locatable  # pylint: disable=g-import-not-at-top
  cm = colormaps[cmap].with_extremes(bad="white")
  v = np.asarray(values, np.float64)
  if hatch is not None:
    v = np.where(hatch, np.nan, v)
  norm = colors.LogNorm(vmin=vmin, vmax=vmax, clip=True) if log else colors.Normalize(vmin=vmin, vmax=vmax)
  im = ax.imshow(np.where(v > 0, v, np.nan) if log else v, cmap=cm, norm=norm, interpolation="nearest")
  if hatch is not None:
    hatch_pixels(ax, hatch)
  ax.set_xticks([]), ax.set_yticks([])
  if title:
    ax.set_title(title, fontsize=8)
  if row_label:
    ax.set_ylabel(row_label, fontsize=8)
  shown = v[np.isfinite(v) & ((v > 0) if log else True)]
  below = shown.size and vmin is not None and shown.min() < vmin
  above = shown.size and vmax is not None and shown.max() > vmax
  extend = {(True, True): "both", (True, False): "min", (False, True): "max"}.get((bool(below), bool(above)), "neither")
  cax = make_axes_locatable(ax).append_axes("right", size="2.5%", pad=0.04)
  bar = ax.figure.colorbar(im, cax=cax, extend=extend)
  bar.set_label(label + (", log scale" if log else ""), fontsize=7)
  if log:  # plain numbers; within three decades ticks at 1, 2, 5 x 10^k, else one per decade
    from matplotlib import ticker  # pylint: disable=g-import-not-at-top
    few = vmax / vmin < 1e3
    bar.ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0) if few else (1.0,)))
    bar.ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    bar.ax.yaxis.set_minor_formatter(ticker.NullFormatter())
  bar.ax.tick_params(which="both", labelsize=6)
  return im


def hatch_pixels(ax, mask: np.ndarray) -> None:
  """Hatches the pixels of the (H, W) bool `mask` on an imshow axes (pixel centres at integers): grey diagonal
  lines (HATCH) over the region, its outline on the pixel edges; the axes limits are kept."""
  mask = np.asarray(mask, bool)
  if not mask.any():
    return
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  h, w = mask.shape
  limits = ax.get_xlim(), ax.get_ylim()
  # Each pixel as a 2x2 block of samples at its corners (+-0.49), so the 0.5 level runs along the pixel edges.
  fine = np.repeat(np.repeat(mask.astype(np.float64), 2, axis=0), 2, axis=1)
  xs = (np.arange(w)[:, None] + np.array([-0.49, 0.49])).ravel()
  ys = (np.arange(h)[:, None] + np.array([-0.49, 0.49])).ravel()
  with plt.rc_context({"hatch.color": HATCH_COLOR, "hatch.linewidth": 0.6}):
    ax.contourf(xs, ys, fine, levels=[0.5, 1.5], colors="none", hatches=[HATCH])
  ax.set_xlim(*limits[0])
  ax.set_ylim(*limits[1])


def uncertainty_view(sigma_m: np.ndarray | None, confidence: np.ndarray | None) -> dict:
  """`show_image` settings for a model's uncertainty: sigma [m] (magma, bright = uncertain), or for models without
  a calibrated sigma (NCNN-style) their output confidence (viridis, bright = confident, unitless), each on a log
  scale when it spans a decade or more (an NCNN output confidence spans ~1e-25..1)."""
  if sigma_m is not None:
    lo, hi, log = value_range(sigma_m, positive=True)
    return dict(values=sigma_m, cmap="magma", label="sigma [m]", vmin=lo, vmax=hi, log=log,
                title="uncertainty: predicted standard deviation sigma (bright = uncertain)")
  lo, hi, log = value_range(confidence, positive=True, hi_pct=100.0)
  c = np.asarray(confidence, np.float64)
  c = c[np.isfinite(c)]  # NaN: no value (not valid)
  span = f"{c.min():.1e} to {c.max():.2g}" if c.size else "empty"
  return dict(values=confidence, cmap="viridis", label="confidence (unitless)", vmin=lo, vmax=hi, log=log,
              title=f"output confidence, not a calibrated sigma (bright = confident; values {span})")


def save_depth_preview(depth_m: np.ndarray, path, *, sparse_m: np.ndarray | None = None,
                       sigma_m: np.ndarray | None = None, confidence: np.ndarray | None = None,
                       invalid: np.ndarray | None = None, title: str = "") -> None:
  """predict's preview: the sparse input (if given), the predicted depth (turbo, both from 0 to the 99th
  percentile of the input depths) and the uncertainty (`uncertainty_view`: sigma, or the output confidence), one
  row each, with colour bars in their units and `title` (the model and file) on top. The (H, W) bool `invalid`
  (default: the non-finite depths), the pixels without a valid prediction (`Completion.valid`), are hatched in
  the depth and uncertainty rows, never drawn in a colour of the scale."""
  plt = _plt()
  depth_m = np.asarray(depth_m, np.float64)
  h, w = depth_m.shape
  ref = sparse_m[sparse_m > 0] if sparse_m is not None and np.any(sparse_m > 0) else depth_m[depth_m > 0]
  dmax = float(np.percentile(ref, 99)) if ref.size else 1.0
  rows = [dict(values=np.where(sparse_m > 0, sparse_m, np.nan), cmap="turbo", label="depth [m]", vmin=0.0,
               vmax=dmax, title="input: sparse depth (white: no measurement)")] if sparse_m is not None else []
  invalid = ~np.isfinite(depth_m) if invalid is None else np.asarray(invalid, bool)
  note = f" (hatched: not valid, no input support; {100 * invalid.mean():.0f}% of pixels)" if invalid.any() else ""
  rows.append(dict(values=depth_m, cmap="turbo", label="depth [m]", vmin=0.0, vmax=dmax,
                   title="predicted depth" + note, hatch=invalid))
  if sigma_m is not None or confidence is not None:  # its colour range from the valid pixels
    hide = lambda a: None if a is None else np.where(invalid, np.nan, a)  # noqa: E731
    rows.append({**uncertainty_view(hide(sigma_m), hide(confidence)), "hatch": invalid})
  width = min(9.0, 4.0 * w / h)  # wide frames 9 in wide, square ones 4 in tall per row
  height = len(rows) * (0.9 * width * h / w + 0.45) + 0.4
  fig, axes = plt.subplots(len(rows), 1, figsize=(width + 0.9, height), squeeze=False)
  for ax, row in zip(axes[:, 0], rows):
    show_image(ax, **row)
  fig.suptitle(title, fontsize=9)
  fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / height))  # room for the title
  _save(fig, path)


PANEL_ROWS = (("sparse", "input depth\n(white: none)"), ("input_confidence", "input\nconfidence c0"),
              ("depth", "prediction"), ("uncertainty", "uncertainty"), ("error", "|error| at\nground truth"))
PANEL_COLUMNS = PANEL_ROWS  # the name of the notebooks and scripts written before the panels were transposed


def panels_figure(panels: Sequence[Mapping[str, np.ndarray]], path, uncertainty_label: str = "sigma [m]", *,
                  model_name: str = "", row_labels: Sequence[str] | None = None) -> None:
  """One column per image (titled by `row_labels`, default 'image i': the images are wide, so they sit side by
  side), one row per quantity, labelled on the left: input depth, input confidence c0, prediction, uncertainty
  (sigma [m] when `uncertainty_label` names sigma, else the uncalibrated output confidence) and absolute error at
  the ground-truth pixels; each with a colour bar in its unit; `model_name` in the title."""
  plt = _plt()
  h, w = panels[0]["depth"].shape
  width = min(7.0, 14.0 / len(panels), 3.2 * w / h)  # square frames at most 3.2 in tall per row
  height = len(PANEL_ROWS) * (0.85 * width * h / w + 0.35) + 0.6
  fig, axes = plt.subplots(len(PANEL_ROWS), len(panels), squeeze=False,
                           figsize=(len(panels) * (width + 0.9) + 0.6, height))
  has_sigma = "sigma" in uncertainty_label
  for c, p in enumerate(panels):
    t = np.asarray(p["target"], np.float64)
    dmax = float(np.percentile(t[t > 0], 99)) if np.any(t > 0) else float(np.max(p["depth"]))
    sparse = np.asarray(p["sparse"], np.float64)
    c0_lo, c0_hi, c0_log = value_range(p["input_confidence"], positive=True, hi_pct=100.0)
    unc = uncertainty_view(p["uncertainty"] if has_sigma else None, None if has_sigma else p["uncertainty"])
    err = np.asarray(p["error"], np.float64)
    views = {
        "sparse": dict(values=np.where(sparse > 0, sparse, np.nan), cmap="turbo", label="depth [m]", vmin=0.0,
                       vmax=dmax),
        "input_confidence": dict(values=p["input_confidence"], cmap="viridis", label="c0 (unitless)",
                                 vmin=c0_lo if c0_log else 0.0, vmax=c0_hi, log=c0_log),
        "depth": dict(values=p["depth"], cmap="turbo", label="depth [m]", vmin=0.0, vmax=dmax),
        "uncertainty": {k: v for k, v in unc.items() if k != "title"},
        "error": dict(values=err, cmap="inferno", label="|error| [m]", vmin=0.0,
                      vmax=max(float(np.nanpercentile(err, 99)), 1e-3) if np.isfinite(err).any() else 1.0),
    }
    name = row_labels[c] if row_labels is not None else f"image {c}"
    for r, (key, label) in enumerate(PANEL_ROWS):
      if key == "uncertainty":
        label = "sigma" if has_sigma else "output\nconfidence"
      show_image(axes[r, c], title=name if r == 0 else None, row_label=label if c == 0 else None, **views[key])
  fig.suptitle(f"{model_name}: input, prediction and uncertainty" if model_name else
               "input, prediction and uncertainty", fontsize=10)
  fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / height))
  _save(fig, path)


SPARSIFICATION_NOTES = {
    "pncnn": ("pNCNN normalisation: model curve / its own maximum,\noracle / its first value (RMSE of all pixels). "
              "A model curve\nstarts below 1 when removing pixels raises its RMSE."),
    "gustafsson": "Gustafsson et al. normalisation: both curves / their\nfirst value (RMSE of all pixels)",
}


def sparsification_plot(curves: Mapping[str, object], path, *, gustafsson: Mapping[str, object] | None = None,
                        title: str | None = None) -> None:
  """Sparsification curves (`metrics.Sparsification` per model name): model solid, oracle dashed, AUSE and the
  normalisation in the legend. `curves` are pNCNN-normalised; `gustafsson` (same names) adds a second panel with
  Gustafsson et al.'s normalisation, where both curves start at 1."""
  plt = _plt()
  sets = [("pncnn", curves)] + ([("gustafsson", gustafsson)] if gustafsson else [])
  fig, axes = plt.subplots(1, len(sets), figsize=(5.8 * len(sets), 4.4), squeeze=False)
  for ax, (norm, group) in zip(axes[0], sets):
    for i, (name, sp) in enumerate(group.items()):
      ax.plot(sp.fractions, sp.model, color=f"C{i}", label=f"{name}: model (AUSE {sp.ause:.3f})")
      ax.plot(sp.fractions, sp.oracle, color=f"C{i}", linestyle="--", alpha=0.7, label=f"{name}: oracle")
    ax.set_xlabel("fraction of pixels removed, least confident first (unitless)")
    ax.set_ylabel("RMSE of the pixels kept, normalised (unitless)")
    ax.set_xlim(0, 1)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    legend = ax.legend(fontsize=7, title=SPARSIFICATION_NOTES[norm], title_fontsize=7, loc="upper right")
    legend.get_title().set_multialignment("left")
  fig.suptitle(title or "Sparsification curves (lower is better; AUSE = area between model and oracle)",
               fontsize=9)
  fig.tight_layout()
  _save(fig, path)
