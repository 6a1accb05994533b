"""The figures of a results page (docs/results/RESULTS*.md): sparsification curves, c0 histograms, a qualitative panel,
and for the longer scale's page the validation curves at both lengths.

`pncnn_jax.experiments.pages.report` writes the text and calls `figures`; the numbers come from
`pncnn_jax.experiments.evaluate_runs` summaries.
"""

from __future__ import annotations

import pathlib
import textwrap
from typing import Any, Mapping, Sequence

import numpy as np

from pncnn_jax import losses, viz

PANEL_CAPTION = ("One held-out scene: input, ground truth, and for each model the prediction, its error, its "
                 "uncertainty and its input confidence.")
# The runs each figure shows, when the page has them: the qualitative panel (one row each) and the c0 histogram (the
# models with a learned c0 that the claims name, official and masked; at most four panels a row).
PANEL_RUNS = ("ncnn", "pncnn", "pncnn_masked", "pncnn_beta_masked", "sparse_var_beta_detach_masked")
HISTOGRAM_RUNS = ("ncnn_conf_l1", "ncnn_conf_l1_masked", "pncnn", "pncnn_exp", "pncnn_masked", "pncnn_beta_masked",
                  "sparse_var_beta_detach_masked")


def figures(runs: dict[str, Any], workdir: pathlib.Path, figdir: pathlib.Path, scenes: str, crop: tuple[int, int],
            main_order: Sequence[str], ablation_order: Sequence[str]) -> list[tuple[str, str]]:
  """Draws the page's figures into `figdir` and returns their (file name, caption) pairs.

  sparsification.png  every run's sparsification curve (pNCNN normalisation) in two panels: `main_order` (left;
                      its first name, the oracle-c0 NCNN, left out) and `ablation_order` (right; its first name, the
                      reference row of its table, drawn in black; a name of both orders is drawn here only), each
                      with the oracle of pncnn_masked.
  c0_histogram.png    the learned input confidence on disturbed vs clean input points, one panel per c0 model.
  panels.png          one held-out scene (input, truth; each model's prediction, error, uncertainty and c0), from
                      <workdir>/eval/<run>_panels.npz.
  Runs missing from `runs` (or their panels file) are left out; a figure with nothing to show is not drawn, except
  panels.png: when no run has its panels file here (every row carried from an earlier sitting), the panels.png
  already in `figdir` is kept and listed, with a caption saying so.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  out = []
  if runs:
    _sparsification(runs, figdir, scenes, main_order, ablation_order, plt)
    out.append(("sparsification.png", "Sparsification curves (pNCNN normalisation; lower is better; the area between "
                "a model's curve and the oracle is its AUSE): left the paper's models, right the pNCNN variants "
                "(ablations and our options) against `pncnn_masked`."))
  learned = [n for n in HISTOGRAM_RUNS if n in runs]
  if learned:
    cols = min(len(learned), 4)
    rows = -(-len(learned) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(learned):]:
      ax.axis("off")
    for ax, name in zip(axes.flat, learned):
      c = runs[name]["c0"]
      edges = np.asarray(c["hist_edges_log10"])
      for key, colour, label in (("hist_clean", "tab:blue", "clean"), ("hist_disturbed", "tab:red", "disturbed")):
        h = np.asarray(c[key], np.float64)
        ax.stairs(h / max(h.sum(), 1), edges, color=colour, label=f"{label} points", lw=1.5)
      ax.set_title(f"{name}\nAUROC {c['auroc']:.2f}", fontsize=9)
      ax.set_xlabel("log10 c0 (unitless)")
      ax.set_ylabel("fraction of points")
      ax.legend(fontsize=7)
    _suptitle(fig, f"Input confidence c0 at disturbed vs clean LiDAR points ({scenes}; the end bins hold all "
                   "values beyond them)", fontsize=10)
    fig.tight_layout()
    fig.savefig(figdir / "c0_histogram.png", dpi=110)
    plt.close(fig)
    out.append(("c0_histogram.png", "Distribution of the learned input confidence on disturbed and on clean "
                "input points (each histogram normalised to 1)."))
  panel = _panel(runs, workdir, figdir, plt, crop)
  if panel:
    out.append(panel)
  elif (figdir / "panels.png").exists():  # none of its runs evaluated here (rows carried): keep the drawn one
    out.append(("panels.png", PANEL_CAPTION + " Drawn when its runs were last evaluated: none of the runs it shows ("
                + ", ".join(f"`{n}`" for n in PANEL_RUNS) + ") was evaluated in the workdir that wrote this page, so "
                "the figure was kept, not redrawn."))
  return out


def _panel(runs, workdir, figdir, plt, crop):
  names = [n for n in PANEL_RUNS if n in runs and (workdir / "eval" / f"{n}_panels.npz").exists()]
  if not names:
    return None
  loaded = {n: dict(np.load(workdir / "eval" / f"{n}_panels.npz")) for n in names}
  ref = loaded[names[0]]
  sparse, target = ref["sparse_0"], ref["target_0"]
  vmax = float(np.percentile(target[target > 0], 99)) if (target > 0).any() else 80.0
  cols = 4
  fig, axes = plt.subplots(len(names) + 1, cols, figsize=(4.6 * cols, 1.9 * (len(names) + 1)), squeeze=False)

  def show(ax, img, title, cmap, label, vmin=None, vmax_=None, log=False):
    from matplotlib import colors  # pylint: disable=g-import-not-at-top
    if log and vmax_ < 10 * vmin:  # under a decade: a linear scale reads better
      log, label = False, label.replace(" (log)", "").replace(", log)", ")")
    norm = colors.LogNorm(vmin=vmin, vmax=vmax_) if log else None
    im = ax.imshow(img, cmap=cmap, norm=norm, vmin=None if log else vmin, vmax=None if log else vmax_,
                   interpolation="nearest")
    ax.set_title(title, fontsize=8)
    ax.set_xticks([]), ax.set_yticks([])
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02).set_label(label, fontsize=7)

  show(axes[0, 0], np.where(sparse > 0, sparse, np.nan), "input: sparse LiDAR depth", "turbo", "depth [m]", 0, vmax)
  show(axes[0, 1], np.where(target > 0, target, np.nan), "ground truth (semi-dense)", "turbo", "depth [m]", 0, vmax)
  axes[0, 2].axis("off"), axes[0, 3].axis("off")
  for i, n in enumerate(names, start=1):
    p = loaded[n]
    c0 = p["input_confidence_0"]
    show(axes[i, 0], p["depth_0"], f"{n}: prediction", "turbo", "depth [m]", 0, vmax)
    show(axes[i, 1], p["error_0"], f"{n}: |error| at ground truth", "magma", "error [m]", 0, 5)
    unc = p["uncertainty_0"]
    if runs[n]["loss"] in losses.PROBABILISTIC_LOSSES:
      show(axes[i, 2], unc, f"{n}: predicted sigma", "viridis", "sigma [m] (log)", max(float(np.nanmin(unc)), 1e-3),
           max(float(np.nanmax(unc)), 1e-2), log=True)
    else:
      show(axes[i, 2], np.maximum(unc, 1e-12), f"{n}: output confidence", "viridis", "confidence (unitless, log)",
           1e-6, 1.0, log=True)
    pts = sparse > 0
    show(axes[i, 3], np.where(pts, np.maximum(c0, 1e-6), np.nan), f"{n}: c0 at the input points",
         "viridis", "c0 (unitless, log)", 1e-3, max(float(np.nanmax(np.where(pts, c0, np.nan))), 1e-2), log=True)
  fig.suptitle(f"A held-out test scene ({crop[0]}x{crop[1]} centre crop)", fontsize=10)
  fig.tight_layout()
  fig.savefig(figdir / "panels.png", dpi=100)
  plt.close(fig)
  return ("panels.png", PANEL_CAPTION)


def _sparsification(runs: dict[str, Any], figdir: pathlib.Path, scenes: str, main_order: Sequence[str],
                    ablation_order: Sequence[str], plt: Any) -> None:
  """sparsification.png: two panels, the paper's models and the pNCNN variants, each against the same oracle."""
  first = next(iter(runs.values()))
  fr = np.asarray(first["sparsification"]["fractions"])
  oracle = (runs["pncnn_masked"] if "pncnn_masked" in runs else first)["sparsification"]["oracle"]
  ablations = tuple(n for n in ablation_order[1:] if n in runs)
  panels = [("the paper's models", tuple(n for n in main_order[1:] if n in runs and n not in ablation_order[1:]),
             None)]
  if ablations:
    panels.append(("pNCNN variants: ablations and options", ablations,
                   ablation_order[0] if ablation_order[0] in runs else None))
  fig, axes = plt.subplots(1, len(panels), figsize=(7.2 * len(panels), 6.2), squeeze=False, sharey=True)
  colours = plt.get_cmap("tab20").colors  # one colour per curve within a panel: dark shades first, then light
  for ax, (title, names, reference) in zip(axes[0], panels):
    if reference:
      ax.plot(fr, runs[reference]["sparsification"]["model"], color="k", lw=1.8, label=f"{reference} (reference)")
    for i, name in enumerate(names):
      ax.plot(fr, runs[name]["sparsification"]["model"], label=name, lw=1.3,
              color=colours[(2 * i) % 20 + (2 * i) // 20], linestyle="-" if i < 10 else "-.")
    ax.plot(fr, oracle, "k--", lw=1.5, label="oracle (pncnn_masked errors)")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("fraction of pixels removed (least confident first)")
    ax.grid(alpha=0.3)
    # below the axes: inside, it hid curves
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
  axes[0][0].set_ylabel("RMSE of the pixels kept (normalised, unitless)")
  _suptitle(fig, f"Sparsification curves on {scenes}\n" + viz.SPARSIFICATION_NOTES["pncnn"].replace("\n", " "),
            fontsize=9)
  fig.tight_layout()
  fig.savefig(figdir / "sparsification.png", dpi=110)
  plt.close(fig)


def val_curves(pairs: list[tuple[str, dict[str, Any], dict[str, Any]]], figdir: pathlib.Path,
               drops: tuple[int, int], labels: tuple[str, str], *, stem: str = "val_curves",
               title: str = "Validation curves at both lengths",
               what: str = "the retrained runs") -> list[tuple[str, str]]:
  """<stem>.png: for each (panel title, first run, second run) of `pairs` whose two results rows both have a
  validation curve, the validation RMSE and MAE [mm] (rows) over the training steps (columns: the pairs), the first
  run dashed; `drops` are the two recipes' lr-drop steps, `labels` the two runs' recipes. The axis ends at 1.5x the
  median, so that the first validations do not squash the rest. [] when no pair has both curves."""
  has = lambda e: bool((e.get("convergence") or {}).get("val_curve"))  # noqa: E731
  pairs = [p for p in pairs if has(p[1]) and has(p[2])]
  if not pairs:
    return []
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(2, len(pairs), figsize=(max(4.6 * len(pairs), 6.0), 6.6), squeeze=False)
  for j, (name, first, second) in enumerate(pairs):
    curves = [np.asarray(e["convergence"]["val_curve"], np.float64) for e in (first, second)]
    for i, metric in enumerate(("RMSE", "MAE")):
      ax = axes[i][j]
      for c, style, colour, label, drop in reversed(list(zip(curves, ("--", "-"), ("k", "tab:orange"), labels,
                                                                   drops))):  # dashed on top where they agree
        ax.plot(c[:, 0], c[:, 1 + i], style, color=colour, lw=1.4 if style == "-" else 1.1, label=label)
        ax.axvline(drop, color=colour, ls=":", lw=1)
      values = np.concatenate([c[:, 1 + i] for c in curves])
      ax.set_ylim(0.9 * values.min(), 1.5 * np.median(values))
      ax.set_xlabel("training step")
      ax.set_ylabel(f"validation {metric} [mm]")
      ax.grid(alpha=0.3)
      ax.set_title(name if i == 0 else "", fontsize=10)
    axes[0][j].legend(fontsize=7)
  _suptitle(fig, f"{title} (dotted: each recipe's lr drop x0.1)", fontsize=10)
  fig.tight_layout()
  fig.savefig(figdir / f"{stem}.png", dpi=110)
  plt.close(fig)
  return [(f"{stem}.png", f"Validation RMSE and MAE of {what}: {labels[0]} (dashed) and {labels[1]} (solid), on "
           "the validation scenes after every epoch; dotted lines mark each recipe's learning-rate drop.")]


def _suptitle(fig: Any, text: str, fontsize: float) -> None:
  """fig.suptitle with each line wrapped to the figure's width (a one-panel figure cut long titles off at both
  sides): about 1.9 characters per point of figure width per point of font size."""
  width = max(20, int(fig.get_figwidth() * 72 / (0.55 * fontsize)))
  fig.suptitle("\n".join(textwrap.fill(line, width) for line in text.split("\n")), fontsize=fontsize)


def training_curves(rows_by_model: Mapping[str, Sequence[Mapping[str, object]]], path,
                    key: str = "rmse") -> None:
  """training_curves.png of the demo: validation `key` against the step, one line per model (rows as in
  metrics.jsonl, split 'val')."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
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
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=110, format="png", bbox_inches="tight", pad_inches=0.1)
  plt.close(fig)
