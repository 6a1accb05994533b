"""docs/results/RESULTS_FLOW.md: the sparse-flow experiment's claims, table and figures, from `flow_reproduce`'s
summary.

The claims (paper section 6, sparse optical flow rectification), each stated with its threshold:
  (F1) the learned input confidence singles out the failed tracks: AUROC of -c0 for the `corrupted` label
       >= AUROC_AIM and mean c0 of failed / good tracks <= C0_RATIO_AIM (the thresholds of the depth claim (b));
  (F2) the dense flow beats interpolation with binary confidence: lower EPE and outlier rate than the trained
       binary model (`flow_ncnn`) and than the Gaussian normalized convolution of every track;
  (F3) the predicted uncertainty ranks the errors: AUSE on EPE below the binary model's (which ranks by its
       propagated NConv confidence).
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any, Mapping

import numpy as np

from pncnn_jax.experiments import evaluate_runs
from pncnn_jax.flow import evaluate as flow_evaluate
from pncnn_jax.flow import metrics as flow_metrics
from pncnn_jax.flow import viz as flow_viz

AUROC_AIM = 0.8
C0_RATIO_AIM = 0.5
LEARNED = ("flow_pncnn", "flow_ncnn_conf", "flow_pncnn_aniso")
FIGURES = "results_flow"  # figures go to docs/results/results_flow/


def _f(v: Any, digits: int = 3) -> str:
  if v is None or (isinstance(v, float) and math.isnan(v)):
    return "n/a"
  return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def claims(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
  """The claim lines: each says holds / does not hold / not measured, with the numbers that decide it."""
  out = []
  for name in LEARNED:
    r = rows.get(name)
    if r is None:
      continue
    ratio = r["c0_corrupted"] / r["c0_clean"] if r.get("c0_clean") else float("nan")
    ok = r["auroc_corrupted"] >= AUROC_AIM and ratio <= C0_RATIO_AIM
    out.append(f"- (F1) the learned c0 of `{name}` singles out the failed tracks: "
               f"**{'holds' if ok else 'does not hold'}**."
               f" AUROC {r['auroc_corrupted']:.3f} (aim >= {AUROC_AIM}); by failure: gross {_f(r.get('auroc_gross'))}, "
               f"aperture {_f(r.get('auroc_aperture'))}, swap {_f(r.get('auroc_swap'))}, reflection "
               f"{_f(r.get('auroc_reflection'))}; mean c0 failed {r['c0_corrupted']:.3g} vs good {r['c0_clean']:.3g} "
               f"(ratio {ratio:.2f}, aim <= {C0_RATIO_AIM}).")
  base = {k: rows[k] for k in ("flow_ncnn", "gaussian_nc") if k in rows}
  for name in LEARNED:
    r = rows.get(name)
    if r is None or not base:
      continue
    ok = all(r["epe"] < b["epe"] and r["outliers"] < b["outliers"] for b in base.values())
    vs = "; ".join(f"`{k}` {b['epe']:.3f} px / {b['outliers']:.1f} %" for k, b in base.items())
    out.append(f"- (F2) `{name}` beats interpolation with binary confidence (EPE and outliers): "
               f"**{'holds' if ok else 'does not hold'}**. EPE {r['epe']:.3f} px, "
               f"outliers {r['outliers']:.1f} % vs {vs}.")
  if "flow_ncnn" in rows:
    for name in LEARNED:
      r = rows.get(name)
      if r is None or r.get("nll") is None:
        continue
      ok = r["ause_epe"] < rows["flow_ncnn"]["ause_epe"]
      out.append(f"- (F3) the uncertainty of `{name}` ranks its errors better than `flow_ncnn`'s NConv confidence "
                 f"(AUSE on EPE): **{'holds' if ok else 'does not hold'}**. {r['ause_epe']:.3f} vs "
                 f"{rows['flow_ncnn']['ause_epe']:.3f}.")
  return out


def table(rows: Mapping[str, Mapping[str, Any]]) -> str:
  head = ["row", "parameters", "EPE [px]", "RMS EPE [px]", "outliers [%]", "AUSE on EPE", "NLL [nats]",
          "AUROC low c0 vs failed", "mean c0 failed / good", "steps", "CPU [min]", "val curve flat"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name, r in rows.items():
    conv = r.get("convergence")
    flat = evaluate_runs.flat_label(conv["flat"], conv["epe_change_last_30pct"]) if conv else "n/a"
    c0 = (f"{r['c0_corrupted']:.3g} / {r['c0_clean']:.3g}" if r.get("auroc_corrupted") is not None
          and not math.isnan(r["auroc_corrupted"]) else "n/a")
    cpu = cpu_minutes({name: r}) if r.get("time") else None  # all steps
    lines.append("| " + " | ".join([
        f"`{name}`", f"{r.get('params', 0):,}", _f(r["epe"], 4), _f(r["rmse"], 4), _f(r["outliers"], 3),
        _f(r["ause_epe"]), _f(r.get("nll")), _f(r.get("auroc_corrupted")), c0, _f(r.get("step")),
        _f(cpu, 2) if cpu else "n/a", flat]) + " |")
  return "\n".join(lines)


def reading(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
  """What the numbers say, with the numbers: the cost of the failed tracks, what a learned c0 rejects, and the
  NLL-trained pNCNN's validation curve."""
  out = []
  ncnn, oracle, conf, pn = (rows.get(k) for k in ("flow_ncnn", "flow_ncnn_oracle", "flow_ncnn_conf", "flow_pncnn"))
  if ncnn and oracle:
    out.append(f"- **What the failed tracks cost.** Interpolating every track, "
               f"`flow_ncnn` reaches EPE {ncnn['epe']:.2f} "
               f"px; fed only the good tracks, the same weights reach {oracle['epe']:.2f} px (`flow_ncnn_oracle`): a "
               f"perfect input confidence could remove {100 * (1 - oracle['epe'] / ncnn['epe']):.0f} % of the error.")
  for name, r in (("flow_ncnn_conf", conf), ("flow_pncnn", pn)):
    if not r or r.get("auroc_gross") is None:
      continue
    out.append(f"- **What `{name}`'s c0 sees.** AUROC {r['auroc_corrupted']:.2f} overall: gross vectors "
               f"{_f(r['auroc_gross'], 2)} and swapped matches {_f(r['auroc_swap'], 2)} (far from their neighbours' "
               f"flow) against drift along edges {_f(r['auroc_aperture'], 2)} and reflections "
               f"{_f(r['auroc_reflection'], 2)} (a few pixels off, or another surface's plausible motion: they look "
               "like their neighbours, and only the flow field is seen).")
  if conf and pn and pn.get("convergence"):
    curve = pn["convergence"]["val_curve"]
    peak = max(curve, key=lambda c: c[2] if c[2] is not None else -1)
    out.append(
        f"- **Why the NLL-trained pNCNN rejects less than NCNN-Conf.** Its validation AUROC peaked at "
        f"{peak[2]:.2f} (step {peak[0]}) and ended at {curve[-1][2]:.2f}, while `flow_ncnn_conf` ended at "
        f"{conf['convergence']['val_curve'][-1][2]:.2f}. A likely reason: in pNCNN c0 has two jobs, weighting the "
        "tracks in the NConv average and shaping the NConv confidence, which is all the variance network sees. The "
        "NLL can pay for a failed track's error with a lower predicted precision around it instead of a lower c0, "
        "whereas the end-point-error loss pays every pixel's error in full, so only rejecting the track lowers it. "
        "The same weighting explains its flow: the NLL's gradient on the flow is the precision times the error, so "
        "where the network predicts a low precision (around failures, at motion edges) the flow is hardly trained. "
        "On the depth benchmark pNCNN's c0 likewise rejects less than NCNN-Conf's (docs/results/RESULTS.md, claim "
        "(b)). Its predicted "
        f"uncertainty ranks its errors {'better' if pn['ause_epe'] < conf['ause_epe'] else 'no better'} than "
        f"`flow_ncnn_conf`'s NConv confidence ranks its own (AUSE on EPE {pn['ause_epe']:.3f} against "
        f"{conf['ause_epe']:.3f}).")
  runs = {n: r for n, r in rows.items() if r.get("convergence")}
  if runs:
    flat = [n for n, r in runs.items() if r["convergence"]["flat"]]
    who = ("Every run meets" if len(flat) == len(runs) else "No run meets" if not flat else
           f"Only {', '.join(f'`{n}`' for n in flat)} meet{'s' if len(flat) == 1 else ''}")
    line = f"- **Convergence.** {who} the 2 % rule within the {cpu_minutes(rows):.0f} min of CPU they took together."
    if ncnn and conf and ncnn.get("convergence") and conf.get("convergence"):
      a = {c[0]: c[1] for c in conf["convergence"]["val_curve"]}
      b = {c[0]: c[1] for c in ncnn["convergence"]["val_curve"]}
      below = [s for s in a if s in b and a[s] < b[s]]
      line += (f" `flow_ncnn_conf`'s validation EPE is below `flow_ncnn`'s at {len(below)} of {len(a)} validation "
               "steps, so its lead does not hang on where training stopped.")
    out.append(line)
  return out


def cpu_minutes(rows: Mapping[str, Mapping[str, Any]]) -> float:
  """CPU minutes of all runs' training (`time.json`; a killed sitting extrapolated from the timed steps)."""
  total = 0.0
  for r in rows.values():
    t = r.get("time")
    if t:
      total += t["cpu_s"] / 60 * (r.get("step") or 0) / t.get("steps", r.get("step") or 1)
  return total


def curves_table(rows: Mapping[str, Mapping[str, Any]]) -> str:
  """Validation EPE [px] and AUROC of low c0 for the failed tracks at every validation step of every run."""
  runs = {n: {c[0]: c[1:] for c in r["convergence"]["val_curve"]} for n, r in rows.items() if r.get("convergence")}
  steps = sorted({s for curve in runs.values() for s in curve})
  lines = ["| step | " + " | ".join(f"`{n}` EPE / AUROC" for n in runs) + " |", "|" + "---|" * (len(runs) + 1)]
  for s in steps:
    cells = [f"{runs[n][s][0]:.3f} / {_f(runs[n][s][1])}" if s in runs[n] else "" for n in runs]
    lines.append(f"| {s} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def _figures(summary: Mapping[str, Any], docs: pathlib.Path, workdir: pathlib.Path) -> list[str]:
  figdir = docs / FIGURES
  figdir.mkdir(parents=True, exist_ok=True)
  lines = []
  curves = {name: flow_metrics.EpeSparsification(r["ause_epe"], np.asarray(r["sparsification"]["fractions"]),
                                                 np.asarray(r["sparsification"]["oracle"]),
                                                 np.asarray(r["sparsification"]["model"]))
            for name, r in summary["rows"].items() if r.get("kind") == "model"}
  if curves:
    flow_viz.sparsification_figure(curves, figdir / "sparsification.png")
    lines.append(f"![sparsification on EPE]({FIGURES}/sparsification.png)")
  for name in ("flow_pncnn", "flow_ncnn_conf", "flow_ncnn"):
    path = workdir / "eval" / f"{name}_panels.npz"
    if not path.exists():
      continue
    with np.load(path) as z:
      n = 1 + max(int(k.rsplit("_", 1)[1]) for k in z.files)
      panels = [{k.rsplit("_", 1)[0]: z[k] for k in z.files if k.endswith(f"_{i}")} for i in range(n)]
    label, unit = flow_evaluate.uncertainty_label(summary["rows"][name]["loss"])
    flow_viz.flow_panels(panels, figdir / f"{name}_panels.png", title=f"{name} on held-out test scenes",
                         uncertainty_label=label, uncertainty_unit=unit)
    lines.append(f"![{name} panels]({FIGURES}/{name}_panels.png)")
  return lines


def write(summary: Mapping[str, Any], path: pathlib.Path, workdir: pathlib.Path) -> None:
  """Writes `path` (markdown), `path` with .json and the figures under `path.parent / FIGURES`."""
  rows, r = summary["rows"], summary["recipe"]
  steps = r["steps_per_epoch"] * r["num_epochs"]
  md = [
      "# Results: sparse optical-flow rectification (paper section 6) on the synthetic flow benchmark",
      "",
      f"Generated by `python -m pncnn_jax.experiments.flow.reproduce --workdir {summary['workdir']}` on "
      f"{summary['date']}. "
      "Rerunning it continues the runs and regenerates this page.",
      "",
      "**Benchmark** (`pncnn_jax.flow.dataset`). Pairs of half-resolution street frames (176x608) with known "
      "camera and car motion; the ground truth is the exact dense flow. KLT-like tracks at bucketed Shi-Tomasi "
      "corners (about 1 % of the pixels) fail as KLT fails: gross random vectors on homogeneous texture, drift along "
      "edges, swapped matches on the facades' window grids, reflections on car paint. "
      f"{100 * summary['corrupted_fraction']:.0f} % of the test tracks failed; the networks see only the sparse flow "
      "and the track mask.",
      "",
      f"**Recipe.** Every model: Adam, lr {r['learning_rate']:g} then x0.1 after "
      f"{r['steps_per_epoch'] * r['lr_decay_epochs']} steps, {steps} steps of batch {r['batch_size']} on random "
      f"{r['train_crop'][0]}x{r['train_crop'][1]} windows; validation every {r['steps_per_epoch']} steps on "
      f"{r['val_scenes']} scenes. **Evaluation** of the final weights on {r['test_scenes']} held-out test scenes "
      f"(one {r['eval_crop'][0]}x{r['eval_crop'][1]} window each). EPE and outliers (EPE > 3 px and > 5 % of the "
      "true flow) are per-image means; AUSE on EPE pools the pixels (mean EPE curves, normalised by the mean EPE of "
      "all); AUROC is of a *low* c0 for the failed tracks, over all tracks. **Convergence**: a run counts as "
      "converged when the best validation EPE of the last 30 % of its high-lr phase is within 2 % of the best before "
      "it (the last column). **CPU** is the training process's CPU time (all its threads, validations included); "
      "the steps of a sitting that was killed are counted at the rate of the timed ones.",
      "",
      "## The claims",
      "",
      *claims(rows),
      "",
      "## Reading the results",
      "",
      *reading(rows),
      "",
      "## Accuracy, uncertainty and the learned confidence",
      "",
      "`gaussian_nc`: normalized convolution of every track with a fixed Gaussian "
      f"(sigma {rows['gaussian_nc']['sigma_px']:g} px, the best on the validation scenes), no learning. "
      "`flow_ncnn_oracle`: the trained binary model fed only the tracks that did not fail.",
      "",
      table(rows),
      "",
      "## Validation curves",
      "",
      "EPE [px] / AUROC of a low c0 for the failed tracks on the validation scenes, during training.",
      "",
      curves_table(rows),
      "",
      "## Figures",
      "",
      *_figures(summary, path.parent, workdir),
      "",
  ]
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("\n".join(md))
  slim = {**summary, "rows": {k: {kk: vv for kk, vv in v.items() if kk != "sparsification"} for k, v in rows.items()}}
  path.with_suffix(".json").write_text(json.dumps(slim, indent=1, default=float) + "\n")
