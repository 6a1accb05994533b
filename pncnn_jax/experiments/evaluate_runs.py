"""Evaluation of the reproduction runs on held-out scenes, the paper's claims, docs/results/RESULTS.md and its JSON.

Called by `python -m pncnn_jax.experiments.reproduce` (stages 'evaluate' and 'report'): `table(workdir, scale)` is
the depth task's run table for the research wing's one runner (`pncnn_jax.experiments.runner.evaluate_all`). Every
finished run of `runs_lib.RUNS` is evaluated once on the synthetic 'test' split (scene seeds that training and
validation never see) by the 'depth' evaluator (the ensemble by 'ensemble', `pncnn_jax.evaluate.protocol`) and the
result cached in `<workdir>/eval/<name>.json`; the report is then written from those files, so it can be
regenerated without evaluating again.

Per run it measures:
  accuracy     MAE, RMSE [mm], iMAE, iRMSE [1/km] (per-image means, KITTI conventions, pncnn_jax.metrics)
  uncertainty  AUSE in the pNCNN and the Gustafsson normalisation, AUCE and NLL (probabilistic losses only);
               NCNN and NCNN-Conf are ranked by their propagated output confidence
  c0           AUROC of the *low* input confidence (-c0) for the `disturbed` label over all input points, the
               same within depth deciles (the disturbed points are farther than the clean ones on average, so a
               c0 that merely grows with depth would look "reversed" overall), the mean c0 on disturbed and on
               clean points, and log10(c0) histograms of both
  convergence  the validation RMSE curve from metrics.jsonl (see `convergence`)
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any, Sequence

import jax
import numpy as np

from pncnn_jax import data, from_config, pretrained, uncertainty
from pncnn_jax.checkpoints import loader
from pncnn_jax.ensemble import members as ensemble_members
from pncnn_jax.evaluate import depth as evaluate_depth
from pncnn_jax.experiments import input_density, runner
from pncnn_jax.experiments import runs as runs_lib
from pncnn_jax.nn import models
from pncnn_jax.training import loop

# The claim thresholds, fixed before any result was seen (docs/results/RESULTS.md quotes them).
AUROC_AIM = 0.8  # (b): AUROC of low c0 for disturbed points, over all points and within depth bins
C0_RATIO_MAX = 0.5  # (b): mean c0 on disturbed points at most half the mean on clean points
AUSE_RATIO_MAX = 0.5  # (c): pNCNN AUSE at most half of NCNN-Conf's (the paper: 0.05 vs 0.31)
ACCURACY_TOLERANCE = 0.10  # (d): pNCNN MAE and RMSE within 10 % of NCNN-Conf-L1's (the paper: ~10 %)
HIST_BINS = np.linspace(-6.0, 3.0, 46)  # log10(c0) histogram edges


def c0_singles_out(c0: dict[str, Any]) -> bool:
  """Claim (b) for one run's c0 statistics: AUROC and within-depth-decile AUROC >= AUROC_AIM, and mean c0 on
  disturbed points <= C0_RATIO_MAX x the mean on clean points."""
  return (c0["auroc"] >= AUROC_AIM and c0["auroc_depth_bins"] >= AUROC_AIM
          and c0["c0_mean_disturbed"] <= C0_RATIO_MAX * c0["c0_mean_clean"])


def ause_clearly_below(ause: float, ause_ref: float) -> bool:
  """Claim (c): an AUSE at most AUSE_RATIO_MAX x the reference's."""
  return ause <= AUSE_RATIO_MAX * ause_ref


def accuracy_close(metrics: dict[str, float], ref: dict[str, float]) -> bool:
  """Claim (d): MAE and RMSE each at most ACCURACY_TOLERANCE above the reference's."""
  return all(metrics[k] / ref[k] - 1 <= ACCURACY_TOLERANCE for k in ("mae", "rmse"))


CHECK_SCENES = 8  # the shipped weights' manifests record their metrics on the first 8 validation scenes


def scene_batches(crop: tuple[int, int], size: int, *, split: str = "test", scene_seed: int = 0,
                  cache_dir: str | None = None, batch_size: int = 8):
  """The first `size` synthetic scenes of a split, centre-cropped to `crop` (rows, columns), in order."""
  return data.make_iterator(dict(dataset="synthetic", split=split, crop="center", crop_height=crop[0],
                                 crop_width=crop[1], batch_size=batch_size, synthetic_size=size,
                                 synthetic_seed=scene_seed, num_epochs=1, shuffle=False, drop_remainder=False,
                                 synthetic_cache_dir=cache_dir or None))


def heldout_batches(scale: str, cache_dir: str, batch_size: int = 8):
  """The held-out test scenes of the recipe."""
  s = runs_lib.SCALES[scale]
  return scene_batches(s["eval_crop"], s["test_scenes"], cache_dir=cache_dir, batch_size=batch_size)


def check_metrics(config, variables, cache_dir: str = "") -> dict[str, float]:
  """Metrics of `variables` on the first CHECK_SCENES validation scenes of `config`'s eval crop (what a shipped
  model's manifest records and tests/pretrained/test_pretrained.py re-measures)."""
  model = from_config.build_model(config)
  d = config.data
  batches = scene_batches((d.eval_crop_height, d.eval_crop_width), CHECK_SCENES, split="val", cache_dir=cache_dir,
                          batch_size=CHECK_SCENES)
  res = evaluate_depth.run_evaluation(model, variables, batches, loss_name=from_config.variant_loss(config))
  return {**res.metrics, **{k: v for k, v in res.uncertainty.items() if v is not None},
          **({"auroc_disturbed": res.auroc_disturbed} if res.auroc_disturbed is not None else {})}


def load_run(workdir: pathlib.Path, run: runs_lib.Run, scale: str,
             files: tuple[pathlib.Path, pathlib.Path] | None = None):
  """(config, model, final variables, checkpoint metadata) of a finished run: from its checkpoints, or from its
  final_weights files when the folder came without them (`runs_lib.write_final_weights`), or from `files` (its
  shipped weights, `shipped_files`)."""
  config = runs_lib.run_config(run, scale)
  if files is None and (runs_lib.run_dir(workdir, run) / "checkpoints").is_dir():
    loaded = loader.load(runs_lib.run_dir(workdir, run), step="latest", variant=run.variant)
    return config, from_config.build_model(config), loaded.variables, loaded.meta
  npz, js = files or runs_lib.final_weights(workdir, run)
  if not npz.exists():
    raise FileNotFoundError(f"{runs_lib.run_dir(workdir, run)}: neither checkpoints/ nor {npz.name}")
  variables, meta = pretrained.load_files(npz, js)
  if meta.get("variant") != run.variant:
    raise ValueError(f"{npz}: holds variant {meta.get('variant')!r}, not {run.variant!r}")
  return config, from_config.build_model(config), variables, meta


def c0_statistics(points: dict[str, Any]) -> dict[str, Any]:
  """AUROC of -c0 for `disturbed` (all input points; within input-depth deciles), mean c0 per class, histograms,
  from the input points an evaluation pooled (`DepthEvaluator(input_points=True)`: c0, depth [m] and label of
  every input point; the sum and count of c0 off the points, per batch)."""
  c0, dis, z = points["c0"].astype(np.float64), points["disturbed"], points["depth"]
  empty_sum, empty_n = 0.0, 0
  for batch_sum, batch_n in zip(points["c0_empty_sum"], points["num_empty"]):
    empty_sum, empty_n = empty_sum + batch_sum, empty_n + batch_n
  edges = np.quantile(z, np.linspace(0.0, 1.0, 11))
  bin_of = np.clip(np.searchsorted(edges, z, side="right") - 1, 0, 9)
  per_bin, weights = [], []
  for b in range(10):
    m = bin_of == b
    if dis[m].any() and (~dis[m]).any():
      per_bin.append(uncertainty.auroc(-c0[m], dis[m]))
      weights.append(int(dis[m].sum()))
  log_c0 = np.log10(np.maximum(c0, 1e-30))
  rank = lambda a: np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(np.float64)
  clean_rank_corr = float(np.corrcoef(rank(c0[~dis]), rank(z[~dis]))[0, 1]) if (~dis).sum() > 2 else float("nan")
  return {
      "auroc": uncertainty.auroc(-c0, dis),
      "auroc_depth_bins": float(np.average(per_bin, weights=weights)) if per_bin else float("nan"),
      "auroc_per_depth_bin": per_bin, "depth_bin_edges_m": edges.tolist(),
      "c0_mean_disturbed": float(c0[dis].mean()), "c0_mean_clean": float(c0[~dis].mean()),
      "c0_mean_empty": empty_sum / max(empty_n, 1), "empty_fraction": empty_n / max(empty_n + dis.size, 1),
      "empty_weight_share": empty_sum / max(empty_sum + float(c0.sum()), 1e-30),
      "c0_depth_rank_corr_clean": clean_rank_corr,
      "disturbed_fraction": float(dis.mean()), "num_points": int(dis.size),
      "mean_depth_disturbed_m": float(z[dis].mean()), "mean_depth_clean_m": float(z[~dis].mean()),
      "hist_edges_log10": HIST_BINS.tolist(),
      "hist_disturbed": np.histogram(np.clip(log_c0[dis], HIST_BINS[0], HIST_BINS[-1]), HIST_BINS)[0].tolist(),
      "hist_clean": np.histogram(np.clip(log_c0[~dis], HIST_BINS[0], HIST_BINS[-1]), HIST_BINS)[0].tolist(),
  }


def masked_c0(config) -> bool:
  """Whether the run's model zeroes c0 off the measurements (`config.model.mask_input_confidence`)."""
  return bool(from_config.model_settings(config).get("mask_input_confidence", False))


def evaluate_model(config, variables, batches_fn, *, panels_path: pathlib.Path | None = None,
                   deleted_pass: bool = True) -> dict[str, Any]:
  """Accuracy, uncertainty and c0 statistics of one model (`config` as in runs.run_config) on the scenes that
  `batches_fn()` yields, by the 'depth' evaluator: one pass (the c0 statistics from its input points), and on
  labelled scenes, with `deleted_pass`, a second pass with the disturbed input points deleted
  (`disturbed_deleted`, the accuracy of this depth network without them, pages/distance.py)."""
  model, loss = from_config.build_model(config), from_config.variant_loss(config)
  eval_fn = evaluate_depth.make_eval_fn(model, "kitti")  # one compilation for both passes
  with_c0 = models.VARIANTS[config.variant].conf_estimator != "none"
  res = evaluate_depth.DepthEvaluator(loss_name=loss, num_panels=2, error_by_distance=True, input_points=with_c0,
                                      eval_fn=eval_fn).run(model, variables, batches_fn())
  out = {"variant": config.variant, "masked_c0": masked_c0(config), "loss": loss,
         "params": models.count_params(variables["params"]), "metrics": res.metrics, "uncertainty": res.uncertainty,
         "sparsification": {"fractions": res.sparsification.fractions.tolist(),
                            "model": res.sparsification.model.tolist(),
                            "oracle": res.sparsification.oracle.tolist()}}
  if res.error_by_disturbed_distance is not None:
    out["error_by_disturbed_distance"] = res.error_by_disturbed_distance
    if deleted_pass:
      d = evaluate_depth.run_evaluation(model, variables, _without_disturbed(batches_fn()), loss_name=loss,
                                        eval_fn=eval_fn, error_by_distance=True)
      out["disturbed_deleted"] = {"metrics": {k: d.metrics[k] for k in ("mae", "rmse", "imae", "irmse")},
                                  "error_by_disturbed_distance": d.error_by_disturbed_distance}
  if with_c0:
    out["c0"] = c0_statistics(res.input_points)
  if panels_path is not None:
    np.savez_compressed(panels_path, **{f"{k}_{i}": v for i, p in enumerate(res.panels) for k, v in p.items()})
  return out


def evaluate_run(workdir: pathlib.Path, run: runs_lib.Run, scale: str, cache_dir: str,
                 files: tuple[pathlib.Path, pathlib.Path] | None = None) -> dict[str, Any]:
  """One finished run on the held-out test scenes (panels into <workdir>/eval/). With `files` (its shipped weights,
  pncnn_jax.experiments.carry_over) the run folder is not read: the caller supplies the convergence and training
  time."""
  print(f"[{run.name}] evaluating {'its shipped weights ' if files else ''}on "
        f"{runs_lib.SCALES[scale]['test_scenes']} test scenes", flush=True)
  config, _, variables, meta = load_run(workdir, run, scale, files)
  out = evaluate_model(config, variables, lambda: heldout_batches(scale, cache_dir),
                       panels_path=workdir / "eval" / f"{run.name}_panels.npz")
  out.update({"name": run.name, "seed": run.seed, "group": run.group, "step": meta.get("step")})
  if files is None:
    s = runs_lib.SCALES[scale]
    out["convergence"] = runner.convergence(runs_lib.run_dir(workdir, run), s["steps_per_epoch"] * s["lr_decay_epochs"])
    wall = runs_lib.run_dir(workdir, run) / "wall_time.json"
    out["train_wall_s"] = json.loads(wall.read_text())["seconds"] if wall.exists() else None
  return out


def _without_disturbed(batches):
  for b in batches:
    yield {**b, "sparse": np.where(b["disturbed"], np.float32(0.0), b["sparse"])}


def oracle_ncnn(workdir: pathlib.Path, scale: str, cache_dir: str, files=None) -> dict[str, Any]:
  """NCNN evaluated with its disturbed input points removed: a binary c0 that knew the labels."""
  run = runs_lib.RUNS_BY_NAME["ncnn"]
  config, _, variables, meta = load_run(workdir, run, scale, files)
  out = evaluate_model(config, variables, lambda: _without_disturbed(heldout_batches(scale, cache_dir)),
                       deleted_pass=False)  # its input has them deleted already
  out.update({"name": "ncnn_oracle_c0", "step": meta.get("step"), "group": "oracle"})
  return out


FUSION_KEYS = ("members", "rows", "precision_scales")  # what a fusion table of this code holds (cached ones too)


def evaluate_fusion(workdir: pathlib.Path, scale: str, cache_dir: str, files=None) -> dict[str, Any]:
  """Members and fusion rules of the 4-run pNCNN ensemble (`runs_lib.ENSEMBLE`) on the test scenes, as trained and
  calibrated (each member's precision scale fitted on the validation scenes, `ensemble_members.fit_precision_scales`);
  `files`: {member: shipped files} for members trained in an earlier sitting."""
  files = files or {}
  loaded = [load_run(workdir, runs_lib.RUNS_BY_NAME[n], scale, files.get(n)) for n in runs_lib.ENSEMBLE]
  config, members = loaded[0][0], [v for _, _, v, _ in loaded]
  s = runs_lib.SCALES[scale]
  scales = ensemble_members.fit_precision_scales(
      from_config.build_model(config), ensemble_members.stack_trees(members),
      scene_batches(s["eval_crop"], s["val_scenes"], split="val", cache_dir=cache_dir, batch_size=4),
      loss_name=from_config.variant_loss(config))
  rows = fusion_rows(config, members, heldout_batches(scale, cache_dir, 4), precision_scales=scales)
  return {"members": list(runs_lib.ENSEMBLE), "rows": rows, "precision_scales": scales.tolist(),
          "calibrated_on": f"the {s['val_scenes']} validation scenes"}


def fusion_rows(config, members: Sequence[Any], batches, precision_scales=None) -> dict[str, dict[str, float]]:
  """Every member and fusion rule (the 'ensemble' evaluator, `ensemble_members.EnsembleEvaluator`) of `members`
  (variables of runs trained with `config`, stacked here) on `batches`; with `precision_scales` the calibrated rows
  too."""
  evaluator = ensemble_members.EnsembleEvaluator(loss_name=from_config.variant_loss(config),
                                                 precision_scales=precision_scales)
  return evaluator.run(from_config.build_model(config), ensemble_members.stack_trees(list(members)), batches).rows


def flat_label(flat: bool, change: float | None) -> str:
  """The 'val curve flat' cell of a results table: yes, or no with the relative change of the best validation error
  over the last 30 % of the phase before the lr drop and which way it went (falling: more steps would help; rose:
  the best came earlier), n/a if the curve is too short to judge."""
  if flat:
    return "yes"
  if change is None:
    return "n/a"
  return f"no ({100 * change:+.1f} %, " + ("still falling)" if change < 0 else "rose: its best came earlier)")


def _last_checkpoint_time(workdir: pathlib.Path, run: runs_lib.Run) -> float:
  return runner.checkpoint_time(runs_lib.run_dir(workdir, run), runs_lib.final_weights(workdir, run)[0])


def table(workdir: pathlib.Path, scale: str, *, evaluate: bool = True,
          runs: Sequence[runs_lib.Run] | None = None) -> runner.Table:
  """The depth task's run table (`runner.Table`): every finished run of runs.RUNS, NCNN without its disturbed
  points (the headroom a perfect c0 would have) and the ensemble when its four runs are finished, each cached in
  <workdir>/eval/ until its run changes; the summary is what `pncnn_jax.experiments.pages.report.write` turns into
  docs/results/RESULTS.md (`pncnn_jax.experiments.carry_over` adds an earlier sitting's results of the runs not
  finished here). `evaluate`: whether this sitting evaluates (the oracle is only read otherwise). `runs`: other
  runs than the paper's (runs.SENSOR_RUNS): the finished ones of them alone, without the oracle and the ensemble."""
  cache_dir = runs_lib.build_caches(workdir, scale)
  paper = runs is None
  pool = runs_lib.RUNS if paper else tuple(runs)
  done = [r for r in pool if runs_lib.finished(workdir, r, scale)]
  missing = [r.name for r in (runs_lib.select("", scale) if paper else pool) if r not in done]  # of this scale's runs
  entries = [runner.Entry(run.name, lambda run=run: evaluate_run(workdir, run, scale, cache_dir),
                          _last_checkpoint_time(workdir, run)) for run in done]
  ncnn = runs_lib.RUNS_BY_NAME["ncnn"]
  oracle_measured = evaluate and ncnn in done
  if paper:
    entries.append(runner.Entry("ncnn_oracle_c0", (lambda: oracle_ncnn(workdir, scale, cache_dir))
                                if oracle_measured else None, _last_checkpoint_time(workdir, ncnn)))
  fusion = paper and all(runs_lib.finished(workdir, runs_lib.RUNS_BY_NAME[n], scale) for n in runs_lib.ENSEMBLE)
  if fusion:  # measured also in the report stage when a cached table is stale (its members changed)
    path = workdir / "eval" / "ensemble.json"
    newest = max(_last_checkpoint_time(workdir, runs_lib.RUNS_BY_NAME[n]) for n in runs_lib.ENSEMBLE)
    entries.append(runner.Entry("ensemble", lambda: evaluate_fusion(workdir, scale, cache_dir), newest, FUSION_KEYS,
                                evaluate=evaluate or path.exists()))

  def summarise(values: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    evals = {}
    for run in done:
      if values[run.name] is not None:
        evals[run.name] = values[run.name]
        if how := trained_by(workdir, run):
          evals[run.name] = {**evals[run.name], "trained_by": how}
    if values.get("ncnn_oracle_c0") is not None:
      evals["ncnn_oracle_c0"] = values["ncnn_oracle_c0"]
    return {"scale": scale, "recipe": runs_lib.SCALES[scale], "runs": evals, "fusion": values.get("ensemble"),
            "scenes": f"{runs_lib.SCALES[scale]['test_scenes']} held-out test scenes",
            "not_finished": missing, "commit": runner.git_commit(), "date": time.strftime("%Y-%m-%d"),
            "devices": [str(d) for d in jax.devices()], "jax": jax.__version__}

  return runner.Table(entries, summarise)


def trained_by(workdir: pathlib.Path, run: runs_lib.Run) -> str | None:
  """How a run was trained when one command does not say it (resumed across machines, started from another run's
  checkpoint): its folder's provenance.txt, written by hand; None without one."""
  path = runs_lib.run_dir(workdir, run) / "provenance.txt"
  return path.read_text().strip() if path.exists() else None


def ship_weights(workdir: pathlib.Path, scale: str, summary: dict[str, Any], directory: pathlib.Path,
                 runs: Sequence[runs_lib.Run] = runs_lib.RUNS) -> None:
  """Writes the final variables + manifest (`pncnn_jax.pretrained.save`) of each finished run of `runs`, the
  manifest with the input density its training stream had (`input_density.measure`)."""
  evals = summary["runs"]
  for run in [r for r in runs if runs_lib.finished(workdir, r, scale)]:
    config, _, variables, meta = load_run(workdir, run, scale)
    with config.unlocked():
      config.data.synthetic_cache_dir = ""
    val = [json.loads(line) for line in (runs_lib.run_dir(workdir, run) / "metrics.jsonl").read_text().splitlines()]
    last_val = [r for r in val if r.get("split") == "val"][-1]
    manifest = {
        "name": run.name, "variant": run.variant, "mask_input_confidence": run.masked, "seed": run.seed,
        "command": f"python -m pncnn_jax.experiments.reproduce --workdir WORKDIR --scale {scale} --only {run.name} "
                   f"--ship pncnn_jax/pretrained/synthetic",
        "commit": summary["commit"], "scale": scale, "recipe": runs_lib.recipe(run, scale), "step": meta.get("step"),
        "device": summary["devices"], "jax": summary["jax"], "evaluated_on": {"devices": summary["devices"],
                                                                            "jax": summary["jax"]},
        "train_wall_s": evals.get(run.name, {}).get(
            "train_wall_s"), "config": json.loads(config.to_json_best_effort()),
        "validation": {k: v for k, v in last_val.items() if k not in ("time", "split")},
        "test": {**evals.get(run.name, {}).get("metrics", {}), **evals.get(run.name, {}).get("uncertainty", {})},
    }
    trained_on = runs_lib.run_dir(workdir, run) / "device.json"  # the devices each training sitting ran on
    if trained_on.exists():
      sittings = json.loads(trained_on.read_text())
      manifest["trained_on"] = sittings
      manifest["device"] = sorted({d for s in sittings for d in s["devices"]})
      manifest["jax"] = sorted({s["jax"] for s in sittings})
    started = runs_lib.run_dir(workdir, run) / loop.INIT_FROM_FILE  # a fine-tuned run: the weights it started from
    if started.exists():
      manifest["init_from"] = json.loads(started.read_text())
    if how := trained_by(workdir, run):
      manifest["trained_by"] = how
    manifest["check"] = {"scenes": f"the first {CHECK_SCENES} validation scenes",
                         **check_metrics(config, variables)}
    manifest["input_density"] = input_density.measure(config)  # what predict and the bag command check frames by
    pretrained.save(variables, manifest, directory, run.name)
    print(f"[{run.name}] shipped to {directory}/{run.name}.npz", flush=True)
