"""The paper's headline comparison: pNCNN against MC-Dropout and deep ensembles of a conventional network.

`python -m pncnn_jax.experiments.reproduce --scale long --only s2d_mcdropout,s2d_ensemble8` trains the baselines of
`pncnn_jax.experiments.runs.BASELINES` (first the three short learning-rate sweep runs, whose best validation RMSE
fixes the baselines' learning rate, `runs.baseline_learning_rate`), evaluates them here (`table`, the task's run table
for the research wing's one runner, `pncnn_jax.experiments.runner.evaluate_all`) and writes
docs/results/RESULTS_BASELINES.md (`pncnn_jax.experiments.pages.baselines`). Every step resumes and caches its result
in `<workdir>/eval/`.

What it measures, on the held-out test scenes of the recipe (those of the pNCNN runs):
  MC-Dropout   s2d_mcdropout with M = 1, 2, 4, 8, 16, 32 stochastic passes (one vmapped call of 32 per frame; M
               uses the first M: the 'predictive' evaluator, `baselines.predictive.PredictiveEvaluator`)
  ensembles    the first M = 1, 2, 4, 8 of the member runs s2d_seed0..7 (`--only s2d_ensemble8` names them all);
               with fewer finished, the sizes they allow
  pNCNN family the official pNCNN, pNCNN-Exp, the recommended shipped pNCNN and NCNN-Conf-L1: this workdir's runs
               when finished, else their shipped weights when those were trained at this scale
with one evaluator for all of them (the 'predictive' one, M = 1 for a pNCNN): MAE, RMSE [mm], AUSE under the three
normalisations of `uncertainty.ause` (the tables and the figure report pNCNN's, named), AUCE, NLL. The cost of each
configuration (`measure_costs`): parameters, forward passes per frame, the time of one frame (352x1216 at the long
scale) and the planned peak memory of its compiled program (XLA's memory analysis: arguments + outputs +
temporaries), on this machine in one process, as ratios to pNCNN's.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from pncnn_jax import from_config, losses, pretrained
from pncnn_jax.baselines import losses as baselines_losses
from pncnn_jax.baselines import model as baselines_model
from pncnn_jax.baselines import predictive
from pncnn_jax.checkpoints import loader
from pncnn_jax.ensemble import members as ensemble_members
from pncnn_jax.experiments import evaluate_runs, runner
from pncnn_jax.experiments import runs as runs_lib
from pncnn_jax.nn import models

# The pNCNN family's points: (run name, label). The recommended model is pncnn_jax.inference.completer.RECOMMENDED.
FAMILY = (("pncnn", "pNCNN (official network)"), ("pncnn_exp", "pNCNN-Exp"),
          ("sparse_var_beta_detach_masked", "recommended shipped pNCNN"), ("ncnn_conf_l1", "NCNN-Conf-L1"))
MC_SEED = predictive.MC_SEED  # the dropout keys of the MC-Dropout evaluation: predictive.dropout_keys(MC_SEED, 32)
TIMING_FRAMES = {"long": (352, 1216), "longer": (352, 1216), "cpu": (352, 1216)}  # else the scale's eval crop
TIMING_REPEATS = 3  # the median of this many calls after the compiling one
# The claims' thresholds, fixed before any baseline result was seen.
COST_FRACTION_MAX = 0.2  # "a small fraction": pNCNN's time and peak memory per frame <= this x a single baseline pass
CLAIM_PNCNN = ("pncnn", "sparse_var_beta_detach_masked")  # the pNCNNs the claims are checked for


def timing_frame(scale: str) -> tuple[int, int]:
  """The frame the costs are measured at: KITTI's 352x1216, or the scale's evaluation crop for the small scales."""
  return TIMING_FRAMES.get(scale, tuple(runs_lib.SCALES[scale]["eval_crop"]))


def evaluate_mc_dropout(workdir: pathlib.Path, scale: str, cache_dir: str) -> dict[str, Any]:
  """s2d_mcdropout on the test scenes for every M of `predictive.MC_DROPOUT_M` (one frame per call)."""
  run = runs_lib.BASELINE_MC
  loaded = loader.load(runs_lib.run_dir(workdir, run), step="latest", variant=run.variant)
  config = runs_lib.run_config(run, scale)
  evaluator = predictive.PredictiveEvaluator(loss_name=from_config.variant_loss(config), kind="mc_dropout",
                                             ms=predictive.MC_DROPOUT_M, seed=MC_SEED)
  result = evaluator.run(from_config.build_model(config), loaded.variables,
                         evaluate_runs.heldout_batches(scale, cache_dir, batch_size=1))
  return {"name": run.name, "rows": result.rows, "step": loaded.meta.get("step"),
          "params": models.count_params(loaded.variables["params"]), "learning_rate": loaded.meta.get(
              "config", {}).get("learning_rate"), **_train_time(workdir, run)}


def finished_members(workdir: pathlib.Path, scale: str) -> list[runs_lib.Run]:
  """The leading finished runs of `runs_lib.BASELINE_MEMBERS` (an ensemble of M is the first M members)."""
  done = []
  for run in runs_lib.BASELINE_MEMBERS:
    if not runs_lib.finished(workdir, run, scale):
      break
    done.append(run)
  return done


def evaluate_ensembles(workdir: pathlib.Path, scale: str, cache_dir: str) -> dict[str, Any]:
  """The first M finished member runs on the test scenes, for every M of `predictive.ENSEMBLE_M` that many
  members allow."""
  members = finished_members(workdir, scale)
  ms = [m for m in predictive.ENSEMBLE_M if m <= len(members)]
  if not ms:
    raise ValueError(f"no ensemble member is finished in {workdir} ({runs_lib.BASELINE_MEMBERS[0].name} first)")
  members = members[:ms[-1]]
  variables, metas = ensemble_members.load_ensemble([runs_lib.run_dir(workdir, r) for r in members], step="latest")
  config = runs_lib.run_config(members[0], scale)
  evaluator = predictive.PredictiveEvaluator(loss_name=from_config.variant_loss(config), kind="ensemble", ms=ms)
  rows = evaluator.run(from_config.build_model(config), variables,
                       evaluate_runs.heldout_batches(scale, cache_dir, 2)).rows
  per_member = models.count_params(jax.tree.map(lambda a: a[0], variables["params"]))
  walls = [_train_time(workdir, r)["train_wall_s"] for r in members]
  return {"name": runs_lib.BASELINE_ENSEMBLE, "members": [r.name for r in members], "rows": rows,
          "step": metas[0].get("step"), "params": per_member,
          "learning_rate": metas[0].get("config", {}).get("learning_rate"),
          "train_wall_s": sum(walls) if all(w is not None for w in walls) else None}


def _train_time(workdir: pathlib.Path, run: runs_lib.Run) -> dict[str, Any]:
  path = runs_lib.run_dir(workdir, run) / "wall_time.json"
  return {"train_wall_s": json.loads(path.read_text())["seconds"] if path.exists() else None}


def family_source(workdir: pathlib.Path, scale: str, name: str) -> tuple[str, Any, Any, dict[str, Any]] | None:
  """(where, config, variables, meta) of a pNCNN-family model: this workdir's finished run, else its shipped
  weights when they were trained at `scale`; None when neither exists."""
  run = runs_lib.RUNS_BY_NAME[name]
  if runs_lib.finished(workdir, run, scale):
    config, _, variables, meta = evaluate_runs.load_run(workdir, run, scale)
    return f"run {name} of this workdir", config, variables, meta
  try:
    variables, manifest = pretrained.load(f"synthetic:{name}")
  except ValueError:
    return None
  if manifest.get("scale") != scale:
    return None
  return (f"shipped weights synthetic:{name} (commit {str(manifest.get('commit'))[:10]})", manifest["config"],
          variables, manifest)


def evaluate_family(workdir: pathlib.Path, scale: str, cache_dir: str, name: str) -> dict[str, Any] | None:
  """One pNCNN-family model with the baselines' evaluation code (M = 1), or None when it is not available."""
  src = family_source(workdir, scale, name)
  if src is None:
    return None
  where, config, variables, meta = src
  model, loss = from_config.build_model(config), from_config.variant_loss(config)
  evaluator = predictive.PredictiveEvaluator(loss_name=loss, kind="single", ms=(1,))
  row = evaluator.run(model, variables, evaluate_runs.heldout_batches(scale, cache_dir)).rows["1"]
  if not losses.is_probabilistic(loss):  # ranked by its NConv confidence: AUSE only
    row = {**row, "auce": None, "nll": None}
  return {"name": name, "source": where, "variant": config["variant"], "step": meta.get("step"), "row": row,
          "params": models.count_params(variables["params"])}


# ----------------------------------------------------------------------------------------------------------------
# Cost per frame


def _time(fn: Callable, *args) -> tuple[float, float, float]:
  """(median seconds of TIMING_REPEATS calls after the first, planned peak bytes of the compiled program, its
  floating-point operations by XLA's cost analysis)."""
  compiled = jax.jit(fn).lower(*args).compile()
  mem = compiled.memory_analysis()
  peak = float(mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
               - mem.alias_size_in_bytes) if mem is not None else float("nan")
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  flops = float((cost or {}).get("flops", float("nan")))
  jax.block_until_ready(compiled(*args))
  times = []
  for _ in range(TIMING_REPEATS):
    t = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    times.append(time.perf_counter() - t)
  return float(np.median(times)), peak, flops


def measure_costs(frame: tuple[int, int]) -> dict[str, Any]:
  """Seconds and planned peak bytes of one (1, H, W, 1) frame for pNCNN and every baseline configuration, with
  initial weights (the cost does not depend on their values). Keys 'pncnn', 'mc_dropout M', 'ensemble M'."""
  x = jnp.asarray(np.random.default_rng(0).uniform(0, 50, (1, *frame, 1)) * (np.random.default_rng(1).uniform(
      size=(1, *frame, 1)) < 0.05), jnp.float32)
  out: dict[str, Any] = {"frame": list(frame), "device": str(jax.devices()[0]), "date": time.strftime("%Y-%m-%d")}
  pn = models.build_model("pncnn")
  pv = models.init_variables(pn, jax.random.key(0))
  secs, peak, flops = _time(lambda v, x: pn.apply(v, x).depth, pv, x)
  out["pncnn"] = {"seconds": secs, "peak_bytes": peak, "flops": flops, "passes": 1,
                  "params": models.count_params(pv["params"])}
  mc, det = baselines_model.build_baseline("s2d_mcdropout"), baselines_model.build_baseline("s2d")
  sv = jax.jit(lambda k: det.init(k, jnp.zeros((1, 32, 64, 1), jnp.float32)))(jax.random.key(0))
  loss = baselines_losses.LOSS_NAME
  for m in predictive.MC_DROPOUT_M:
    keys = predictive.dropout_keys(MC_SEED, m)
    secs, peak, flops = _time(
        lambda v, x, k: predictive.predictive(*predictive.mc_dropout_members(mc, v, x, k, loss)), sv, x, keys)
    out[f"mc_dropout {m}"] = {"seconds": secs, "peak_bytes": peak, "flops": flops, "passes": m,
                              "params": baselines_model.PARAMS_RESNET18}
  for m in predictive.ENSEMBLE_M:
    stacked = ensemble_members.stack_trees([sv] * m)
    secs, peak, flops = _time(lambda v, x: predictive.predictive(*predictive.ensemble_members(det, v, x, loss)),
                              stacked, x)
    # the members run in a loop (lax.map on CPU), whose body XLA's cost analysis counts once: M x that
    out[f"ensemble {m}"] = {"seconds": secs, "peak_bytes": peak, "flops": flops * m, "passes": m,
                            "params": m * baselines_model.PARAMS_RESNET18}
  return out


# ----------------------------------------------------------------------------------------------------------------
# All of it


def table(workdir: pathlib.Path, scale: str) -> runner.Table:
  """The baselines' run table (`runner.Table`): the finished baseline runs, the available pNCNN-family models and
  the costs, each cached in <workdir>/eval/ until its run changes. The summary is what
  `pncnn_jax.experiments.pages.baselines.write` turns into the page; `missing` names what is not measured (runs not
  finished, family models not available)."""
  cache_dir = runs_lib.build_caches(workdir, scale)
  members = finished_members(workdir, scale)
  missing = [r.name for r in runs_lib.BASELINE_MEMBERS[len(members):]]
  entries, baselines = [], []  # baselines: (name, key, finished)
  for runs, name, key, compute in (([runs_lib.BASELINE_MC], runs_lib.BASELINE_MC.name, "mc_dropout",
                                    evaluate_mc_dropout),
                                   (members, runs_lib.BASELINE_ENSEMBLE, "ensemble", evaluate_ensembles)):
    done = bool(runs) and runs_lib.finished(workdir, runs[0], scale)
    baselines.append((name, key, done))
    if not done:
      continue
    entries.append(runner.Entry(name, lambda compute=compute: compute(workdir, scale, cache_dir),
                                max(evaluate_runs._last_checkpoint_time(workdir, r) for r in runs)))
  for name, _ in FAMILY:
    entries.append(runner.Entry(
        f"family_{name}", lambda name=name: evaluate_family(workdir, scale, cache_dir, name) or {"unavailable": True},
        evaluate_runs._last_checkpoint_time(workdir, runs_lib.RUNS_BY_NAME[name])))
  frame = timing_frame(scale)
  costs = f"baseline_costs_{frame[0]}x{frame[1]}"
  entries.append(runner.Entry(costs, lambda: measure_costs(frame)))

  def summarise(values: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    out: dict[str, Any] = {"scale": scale, "recipe": runs_lib.SCALES[scale], "baselines": {}, "family": {},
                           "missing": list(missing), "commit": runner.git_commit(), "date": time.strftime("%Y-%m-%d"),
                           "scenes": f"{runs_lib.SCALES[scale]['test_scenes']} held-out test scenes"}
    for name, key, done in baselines:
      if not done or values[name] is None:
        out["missing"].append(name)
      else:
        out["baselines"][key] = values[name]
    for name, label in FAMILY:
      value = values[f"family_{name}"]
      if value is None or value.get("unavailable"):
        out["missing"].append(name)
      else:
        out["family"][name] = {**value, "label": label}
    out["costs"] = values[costs]
    sweep = workdir / runs_lib.BASELINE_LR_FILE
    out["learning_rate"] = json.loads(sweep.read_text()) if sweep.exists() else None
    return out

  return runner.Table(entries, summarise)


# ----------------------------------------------------------------------------------------------------------------
# Claims


def baseline_rows(summary: dict[str, Any]) -> list[tuple[str, str, int, dict[str, float]]]:
  """(kind 'mc_dropout' | 'ensemble', label, M, metrics) of every measured baseline configuration."""
  rows = []
  for kind, label in (("mc_dropout", "MC-Dropout"), ("ensemble", "Ensemble")):
    b = summary["baselines"].get(kind)
    if b:
      rows += [(kind, f"{label} M={m}", int(m), r) for m, r in sorted(b["rows"].items(), key=lambda i: int(i[0]))]
  return rows


def claims(summary: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
  """(claim, holds (None: not measured yet), its numbers or what is missing) for the issue's three claims, for each
  pNCNN of CLAIM_PNCNN; AUSE in pNCNN's normalisation."""
  out: list[tuple[str, bool | None, str]] = []
  base = baseline_rows(summary)
  need = [n for n in ("s2d_mcdropout", "s2d_ensemble8") if n in summary["missing"]]
  costs = summary.get("costs") or {}
  for name in CLAIM_PNCNN:
    fam = summary["family"].get(name)
    label = dict(FAMILY)[name]
    titles = (f"{label}: AUSE (pNCNN normalisation) below every baseline's",
              f"{label}: RMSE below MC-Dropout's and the ensembles' (every M)",
              f"{label}: inference time and peak memory per frame at most {COST_FRACTION_MAX:g} x one baseline pass")
    if fam is None or need:
      missing = ", ".join(([name] if fam is None else []) + need)
      out += [(t, None, f"not evaluated yet: {missing}") for t in titles]
      continue
    p = fam["row"]
    worse = [f"{lab} {r['ause_pncnn']:.3f}" for _, lab, _, r in base if not p["ause_pncnn"] < r["ause_pncnn"]]
    best = min(base, key=lambda b: b[3]["ause_pncnn"])
    out.append((titles[0], not worse, f"pNCNN {p['ause_pncnn']:.3f}; best baseline {best[1]} "
                f"{best[3]['ause_pncnn']:.3f}" + (f"; not above pNCNN: {', '.join(worse)}" if worse else "")))
    worse = [f"{lab} {r['rmse']:.0f}" for _, lab, _, r in base if not p["rmse"] < r["rmse"]]
    best = min(base, key=lambda b: b[3]["rmse"])
    out.append((titles[1], not worse, f"pNCNN {p['rmse']:.0f} mm; best baseline {best[1]} {best[3]['rmse']:.0f} mm"
                + (f"; not above pNCNN: {', '.join(worse)}" if worse else "")))
    one = costs.get("mc_dropout 1"), costs.get("ensemble 1")
    if not costs.get("pncnn") or not all(one):
      out.append((titles[2], None, "It needs the cost measurement"))
      continue
    t = costs["pncnn"]["seconds"] / min(c["seconds"] for c in one)
    mem = costs["pncnn"]["peak_bytes"] / min(c["peak_bytes"] for c in one)
    largest = [f"{k} {costs['pncnn']['seconds'] / costs[k]['seconds']:.3g} x" for k in
               (f"mc_dropout {max(predictive.MC_DROPOUT_M)}", f"ensemble {max(predictive.ENSEMBLE_M)}") if k in costs]
    out.append((titles[2], t <= COST_FRACTION_MAX and mem <= COST_FRACTION_MAX,
                f"time {t:.3f} x, peak memory {mem:.3f} x one baseline pass at {costs['frame'][0]}x{costs['frame'][1]}"
                + (f"; time against {', '.join(largest)}" if largest else "")))
  return out
