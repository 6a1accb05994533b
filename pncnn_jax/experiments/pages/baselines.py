"""docs/results/RESULTS_BASELINES.md: pNCNN against MC-Dropout and deep ensembles (the paper's first experiment and
figure).

`write(summary, path)` writes the page, its JSON and its figure from a `pncnn_jax.experiments.baselines.evaluate_all`
summary. Only measured numbers appear: a run not finished (or a pNCNN-family model not available) is named in the
page's first section as not measured, its rows and points are left out and its claims read "not measured yet".
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from pncnn_jax import pretrained
from pncnn_jax.experiments import baselines as baselines_lib
from pncnn_jax.experiments import claims as claims_lib
from pncnn_jax.experiments import runs as runs_lib
from pncnn_jax.runtime.run_files import format_value as fmt

PAGE = "RESULTS_BASELINES.md"
FIGURE = "rmse_vs_ause.png"
AUSE_NAME = "pNCNN's normalisation (each curve by its own maximum, docs/SPEC.md §8.2a)"
HEADER = ("| model | M | MAE [mm] | RMSE [mm] | AUSE (pNCNN) | AUSE (shared max) | AUSE (none) [m] | AUCE | NLL | "
          "parameters | forward passes / frame | time / frame (x pNCNN) | peak memory (x pNCNN) |")


def figure_folder(path: pathlib.Path) -> str:
  """The figure's folder beside the page: its name in lower case (docs/results/results_baselines/)."""
  return path.stem.lower()


def _cost_cells(costs: dict[str, Any] | None, key: str) -> list[str]:
  if not costs or key not in costs or "pncnn" not in costs:
    return ["n/a", "n/a"]
  c, p = costs[key], costs["pncnn"]
  return [f"{c['seconds']:.3g} s ({c['seconds'] / p['seconds']:.3g} x)",
          f"{c['peak_bytes'] / 2**20:.4g} MiB ({c['peak_bytes'] / p['peak_bytes']:.3g} x)"]


def _cells(label: str, m: int | str, r: dict[str, Any], params: int, passes: int | str, costs, key) -> str:
  cells = [label, str(m), f"{r['mae']:.0f}", f"{r['rmse']:.0f}", fmt(r["ause_pncnn"]), fmt(r["ause_shared_max"]),
           fmt(r["ause_none"]), fmt(r.get("auce")), fmt(r.get("nll")), f"{params:,}", str(passes),
           *_cost_cells(costs, key)]
  return "| " + " | ".join(cells) + " |"


def table_lines(summary: dict[str, Any]) -> list[str]:
  """The comparison table: the pNCNN family, then MC-Dropout and the ensembles over M."""
  costs = summary.get("costs")
  lines = [HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
  for name, fam in summary["family"].items():
    lines.append(_cells(fam["label"], 1, fam["row"], fam["params"], 1, costs, "pncnn" if name == "pncnn" else None))
  for kind, label, m, r in baselines_lib.baseline_rows(summary):
    b = summary["baselines"][kind]
    params = b["params"] * (m if kind == "ensemble" else 1)
    lines.append(_cells(label.split(" M=")[0], m, r, params, m, costs, f"{kind} {m}"))
  return lines


def draw_figure(summary: dict[str, Any], path: pathlib.Path) -> bool:
  """RMSE [mm] against AUSE (pNCNN normalisation): MC-Dropout and the ensembles as curves over M (each point labelled
  with its M), the pNCNN family as labelled points. False (nothing drawn) when nothing is measured."""
  base, fam = baselines_lib.baseline_rows(summary), summary["family"]
  if not base and not fam:
    return False
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7.5, 5.0))
  for kind, label, color, marker in (("mc_dropout", "MC-Dropout (M passes)", "tab:blue", "o"),
                                     ("ensemble", "Deep ensemble (M members)", "tab:orange", "s")):
    pts = [(r["ause_pncnn"], r["rmse"], m) for k, _, m, r in base if k == kind]
    if not pts:
      continue
    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=label)
    for i, (x, y, m) in enumerate(pts):  # above and below in turn: the large M crowd together
      ax.annotate(f"M={m}", (x, y), textcoords="offset points", xytext=(4, 6) if i % 2 == 0 else (4, -12),
                  fontsize=8, color=color)
  for (name, f), marker in zip(fam.items(), ("*", "P", "D", "X")):
    r = f["row"]
    ax.plot([r["ause_pncnn"]], [r["rmse"]], linestyle="none", marker=marker, markersize=11, color="tab:green"
            if name != "ncnn_conf_l1" else "tab:gray", label=f["label"])
  ax.set_xlabel("AUSE, pNCNN normalisation (unitless; lower is better)")
  ax.set_ylabel("RMSE [mm] (lower is better)")
  ax.set_title(f"RMSE vs AUSE on {summary['scenes']} ({summary['scale']} recipe)", fontsize=10)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8, loc="center left")  # the empty middle: the baselines top, the pNCNNs bottom left
  fig.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return True


def _lr_lines(summary: dict[str, Any]) -> list[str]:
  lr = summary.get("learning_rate")
  if not lr:
    return ["The baselines' learning rate comes from the sweep runs (`runs.BASELINE_SWEEP`), not finished here.", ""]
  val = ", ".join(f"{n} {v:.0f} mm" for n, v in lr["val_rmse"].items())
  return [f"**Optimiser.** Adam (plain, no weight decay), lr {lr['learning_rate']:g} until the recipe's x0.1 drop: the "
          f"best of three learning rates on a short run (the recipe's first fifth of the steps at a constant rate), "
          f"judged on {lr['judged_on']}: {val}. Gustafsson et al.'s own setting (Adam, lr 1e-5, weight decay 5e-4, "
          "40000 steps of batch 4 at 352x352) is not used: it is tuned for 8x the steps of this recipe."
          + (" The best rate is the largest of the grid, so a larger one might do better still; the grid was not "
             "extended (one sweep, within the training budget)."
             if lr["learning_rate"] >= max(runs_lib.BASELINE_SWEEP_LRS) else ""), ""]


def write(summary: dict[str, Any], path: pathlib.Path) -> None:
  """Writes `path` (markdown), `path`.json and the figure under <path's folder>/`figure_folder(path)`/."""
  figsub = figure_folder(path)
  drawn = draw_figure(summary, path.parent / figsub / FIGURE)
  claims = baselines_lib.claims(summary)
  r = summary["recipe"]
  lines = ["# Results: pNCNN against MC-Dropout and deep ensembles", "",
           "The paper's first experiment on our synthetic benchmark: a single pNCNN against MC-Dropout and deep "
           "ensembles of a conventional network, the Sparse-to-Dense network (ResNet-18 encoder, up-projection decoder)"
           " with a Gaussian head trained with the Gaussian NLL, as Gustafsson et al. (CVPR-W 2020) evaluate it "
           "(`pncnn_jax.baselines`). **Depth-only input**: our benchmark is unguided, as pNCNN is; Gustafsson et al.'s "
           "and the paper's figures for these baselines are RGB-guided (and their network is a 26M-parameter ResNet-34 "
           "one), so only the comparison within this page is like for like. The encoder trains from scratch (no "
           "ImageNet weights offline).", "",
           f"Recipe ({summary['scale']}): {r['train_crop'][0]}x{r['train_crop'][1]} crops, batch {r['batch_size']}, "
           f"{r['steps_per_epoch'] * r['num_epochs']} steps, evaluated on {summary['scenes']} at "
           f"{r['eval_crop'][0]}x{r['eval_crop'][1]}, one seed per configuration. Commit {summary.get('commit')}, "
           f"{summary.get('date')}. Command: `python -m pncnn_jax.experiments.reproduce --workdir WORKDIR --scale "
           f"{summary['scale']} --only s2d_mcdropout,s2d_ensemble8 --jobs 2`.", ""]
  lines += _lr_lines(summary)
  if summary["missing"]:
    sizes = sorted(int(m) for m in summary["baselines"].get("ensemble", {}).get("rows", {}))
    waiting = [n for n in summary["missing"] if n in {r.name for r in runs_lib.BASELINE_MEMBERS}]
    lines += ["**Not measured yet:** " + ", ".join(f"`{n}`" for n in summary["missing"]) + ". Their rows, points and "
              "claims are left out below until they are trained and evaluated (the command above resumes)."
              + (f" The ensembles are measured for M = {', '.join(map(str, sizes))}; larger ones wait for these "
                 "members." if waiting and sizes else ""), ""]
  lines += ["## The claims", "",
            f"Thresholds fixed before any result: cost at most {baselines_lib.COST_FRACTION_MAX:g} x one "
            f"baseline pass. AUSE in {AUSE_NAME}.", ""]
  lines += [f"- {c}: {claims_lib.mark(ok)}." + (f" {nums}." if nums else "") for c, ok, nums in claims]
  lines += _cost_cause(summary.get("costs"))
  lines += ["", "## The table", "",
            "MAE and RMSE [mm] are means of per-image values; AUSE in the three normalisations of `uncertainty.ause` "
            "(pNCNN's, the paper's 0.053 is of this kind; one shared maximum, BayesRays-style; none, in metres), AUCE "
            "and NLL [nats] pool all valid pixels (NCNN-Conf has no calibrated sigma: AUSE only). MC-Dropout with M "
            "passes: the first M of 32 stochastic passes; ensembles: the first M of 8 members (member k from seed "
            "k on its own data order). Fused by one rule: mean of the means, mean of the aleatoric variances + "
            "variance of the means. Time and peak memory of one frame: "
            + _cost_note(summary.get("costs")), ""]
  table = table_lines(summary)
  lines += (table if len(table) > 2 else ["No configuration is measured yet."]) + [""]
  if drawn:
    lines += ["## RMSE against AUSE", "", f"![RMSE against AUSE]({figsub}/{FIGURE})", "",
              f"RMSE [mm] against AUSE in {AUSE_NAME}; lower left is better. MC-Dropout and the ensembles are "
              "curves over M, the pNCNN family points.", ""]
  lines += _train_time_lines(summary)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("\n".join(lines) + "\n")
  claims_json = [{"claim": c, "holds": ok, "numbers": nums} for c, ok, nums in claims]
  path.with_suffix(".json").write_text(json.dumps({**summary, "claims": claims_json}, indent=1,
                                                  default=pretrained.json_default) + "\n")


def _cost_cause(costs: dict[str, Any] | None) -> list[str]:
  """The cost claim split into time and memory, with the most likely cause of a miss."""
  one = [(costs or {}).get(k) for k in ("mc_dropout 1", "ensemble 1")]
  if not costs or not costs.get("pncnn") or not all(one):
    return []
  limit = baselines_lib.COST_FRACTION_MAX
  t = costs["pncnn"]["seconds"] / min(c["seconds"] for c in one)
  mem = costs["pncnn"]["peak_bytes"] / min(c["peak_bytes"] for c in one)
  if t <= limit and mem <= limit:
    return []
  h, w = costs["frame"]
  full, half = h * w * 32 * 4 / 2**20, (h // 2) * (w // 2) * 64 * 4 / 2**20
  flops = [c.get("flops") for c in (costs["pncnn"], *one)]
  work = (f" XLA counts {flops[0] / 1e9:.0f} GFLOP per frame for pNCNN against {min(flops[1:]) / 1e9:.0f} for one "
          "baseline pass:" if all(f and f == f for f in flops) else "")
  return ["", f"The cost claim splits: pNCNN's time per frame is {t:.2f} x one baseline pass "
          f"({'within' if t <= limit else 'above'} the threshold), its planned peak memory {mem:.2f} x "
          f"({'within' if mem <= limit else 'above'}). The most likely cause:{work} pNCNN's two compact UNets run "
          f"32-channel convolutions at the full {h}x{w} ({full:.0f} MiB per feature map), while the ResNet-18 halves "
          f"the resolution in its first convolution (64 channels at {h // 2}x{w // 2}: {half:.0f} MiB) and again in "
          "its max-pool, so with 1/20 of the parameters pNCNN does as much work per frame on a CPU. It still costs "
          "1/M of an M-pass baseline (the table's time column)."]


def _cost_note(costs: dict[str, Any] | None) -> str:
  if not costs:
    return "not measured yet."
  load = costs.get("load_average_1min_after")
  load = f" (1-minute load average {load:.1f} on this 2-core machine when it ended)" if load is not None else ""
  return (f"batch 1 at {costs['frame'][0]}x{costs['frame'][1]} on {costs['device']} ({costs['date']}), initial "
          f"weights, the median of {baselines_lib.TIMING_REPEATS} calls after compiling, in one process{load}; "
          "peak memory "
          "is XLA's "
          "planned peak of the compiled program (arguments + outputs + temporaries); MC-Dropout's M passes run as one "
          "vmapped call, an ensemble's members one after the other (`lax.map` on CPU).")


def _train_time_lines(summary: dict[str, Any]) -> list[str]:
  rows = [(b["name"] + (f" ({len(b['members'])} members, summed)" if b.get("members") else ""), b.get("train_wall_s"))
          for b in summary["baselines"].values()]
  if not rows:
    return []
  cells = ", ".join(f"{n} {s / 3600:.2f} h" if s else f"{n} unknown" for n, s in rows)
  return ["## Training time", "", f"Wall time of training on this machine (2 cores, shared with the other runs and "
          f"with other work, so a rough guide): {cells}.", ""]
