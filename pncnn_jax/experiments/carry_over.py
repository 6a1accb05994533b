"""An earlier sitting's results added to this sitting's (`python -m pncnn_jax.experiments.reproduce --carry`).

A sitting whose machine no longer has the workdir of the earlier ones passes their results JSON (what
`pncnn_jax.experiments.pages.report.write` wrote, e.g. docs/results/RESULTS_LONG.json) for the runs not finished in this
workdir:
  - a run whose weights are shipped (pncnn_jax/pretrained/synthetic/) and are the very run the earlier row measured
    (`shipped_files`) is evaluated again here from them, its validation curve taken from the earlier results
    (row key `weights_from`); so are NCNN's oracle row and the fusion table when NCNN / all four members are;
  - any other run keeps the row measured then, marked `carried_from` (commit and date of the page it came from).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np

from pncnn_jax import pretrained
from pncnn_jax.experiments import evaluate_runs, runner, runs


def shipped_files(name: str, scale: str, row: dict[str, Any],
                  root: pathlib.Path | None = None) -> tuple[pathlib.Path, pathlib.Path] | None:
  """The shipped weights (pncnn_jax/pretrained/synthetic/<name>.{npz,json}) of the very run that `row` (an earlier
  sitting's evaluation) measured: same name, scale and step, and the manifest's test MAE and RMSE are the row's
  (both were written from one evaluation). None when nothing is shipped under that name, or another training is."""
  base = (root or pretrained.ROOT) / "synthetic"
  npz, js = base / f"{name}.npz", base / f"{name}.json"
  if not (npz.exists() and js.exists()):
    return None
  m = json.loads(js.read_text())
  test = m.get("test") or {}
  same = (m.get("name") == name and m.get("scale") == scale and m.get("step") == row.get("step")
          and all(isinstance(test.get(k), (int, float)) and np.isclose(test[k], row["metrics"][k], rtol=1e-6, atol=0)
                  for k in ("mae", "rmse")))
  return (npz, js) if same else None


SHIPPED = "pncnn_jax/pretrained/synthetic"  # how a row names the shipped weights it was measured from


def _remeasure(workdir: pathlib.Path, run: runs.Run, scale: str, cache_dir: str,
               files: tuple[pathlib.Path, pathlib.Path], row: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
  """results.evaluate_run from a run's shipped weights; its validation curve and training time are the earlier
  sitting's (`curve_from`)."""
  return {**evaluate_runs.evaluate_run(workdir, run, scale, cache_dir, files),
          "convergence": row.get("convergence"), "train_wall_s": row.get("train_wall_s"),
          "weights_from": f"{SHIPPED}/{files[0].name}",
          "curve_from": row.get("curve_from") or row.get("carried_from") or source}


def _copied(row: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
  """An earlier row as it was, marked with the page that measured it (kept when copied again). A row that page
  measured from shipped weights loses its `weights_from`: the weights shipped under that name now are another run's."""
  kept = {k: v for k, v in row.items() if k not in ("weights_from", "curve_from")}
  return {**kept, "carried_from": row.get("carried_from") or source}


def _here(path: pathlib.Path, fresh_after: float, compute, evaluate: bool, require=()) -> dict[str, Any] | None:
  """What this workdir measures at `path` (evaluate) or measured there before (report only); None if neither."""
  return runner.read_or_measure(path, fresh_after, compute, evaluate=evaluate, require=require)


def read_carry(path: pathlib.Path, scale: str) -> dict[str, Any]:
  """An earlier sitting's results JSON (what `report.write` wrote, e.g. docs/results/RESULTS_LONG.json), checked to hold
  runs of `scale` trained with today's recipe of that scale."""
  try:
    prior = json.loads(path.read_text())
  except FileNotFoundError:
    raise FileNotFoundError(f"--carry={path}: no such file") from None
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"--carry={path}: not a results JSON ({e})") from None
  if not isinstance(prior, dict) or not isinstance(prior.get("runs"), dict) or "scale" not in prior:
    raise ValueError(f"--carry={path}: not a results JSON of pncnn_jax.experiments.reproduce (no 'scale' and 'runs')")
  if prior["scale"] != scale:
    raise ValueError(f"--carry={path}: its runs are of the {prior['scale']!r} scale, not {scale!r}")
  recipe = json.loads(json.dumps(runs.SCALES[scale]))  # tuples as the JSON holds them
  if prior.get("recipe") != recipe:
    raise ValueError(f"--carry={path}: its runs were trained with another {scale!r} recipe ({prior.get('recipe')}) "
                     f"than today's ({recipe})")
  return prior


def _add(evals: dict[str, Any], fusion: dict[str, Any] | None, prior: dict[str, Any], workdir: pathlib.Path,
         scale: str, cache_dir: str, evaluate: bool) -> dict[str, Any] | None:
  """Adds to `evals` the runs of `prior` that this workdir has not finished. A run whose shipped weights are the
  ones `prior` measured (`shipped_files`) is evaluated again here from them (with evaluate=True; cached in
  <workdir>/eval/ like the others), its row marked `weights_from`; any other is copied, marked `carried_from`
  (the commit and date of the sitting that measured it). Returns the fusion table: measured here when its four
  members are, else `prior`'s when none of them was trained here."""
  source = {"commit": prior.get("commit"), "date": prior.get("date")}
  shipped: dict[str, tuple[pathlib.Path, pathlib.Path]] = {}
  for name in [n for n in prior["runs"] if n in runs.RUNS_BY_NAME and n not in evals]:
    e = prior["runs"][name]
    if e.get("eval_version") != runner.EVAL_VERSION:
      print(f"[{name}] not carried from the earlier results: evaluated by version {e.get('eval_version')}, "
            f"today's is {runner.EVAL_VERSION}", flush=True)
      continue
    files = shipped_files(name, scale, e)
    compute = lambda run=runs.RUNS_BY_NAME[name], files=files, e=e: _remeasure(  # noqa: E731
        workdir, run, scale, cache_dir, files, e, source)
    row = _here(workdir / "eval" / f"{name}.json", files[0].stat().st_mtime, compute, evaluate) if files else None
    if row is not None:
      shipped[name] = files
    evals[name] = row if row is not None else _copied(e, source)
  oracle = prior["runs"].get("ncnn_oracle_c0")
  if "ncnn" in shipped:  # NCNN measured here from its shipped weights: the oracle too
    row = _here(workdir / "eval" / "ncnn_oracle_c0.json", shipped["ncnn"][0].stat().st_mtime,
                lambda: {**evaluate_runs.oracle_ncnn(workdir, scale, cache_dir, shipped["ncnn"]),
                         "weights_from": f"{SHIPPED}/ncnn.npz"}, evaluate)
    if row is not None:
      evals["ncnn_oracle_c0"] = row
  if ("ncnn_oracle_c0" not in evals and ("ncnn" in shipped or "carried_from" in evals.get("ncnn", {})) and oracle
      and oracle.get("eval_version") == runner.EVAL_VERSION):
    evals["ncnn_oracle_c0"] = _copied(oracle, source)
  if fusion is None and not any(runs.finished(workdir, runs.RUNS_BY_NAME[n], scale) for n in runs.ENSEMBLE):
    if all(n in shipped for n in runs.ENSEMBLE):
      fusion = _here(workdir / "eval" / "ensemble.json", max(shipped[n][0].stat().st_mtime for n in runs.ENSEMBLE),
                     lambda: {**evaluate_runs.evaluate_fusion(workdir, scale, cache_dir, shipped),
                              "weights_from": SHIPPED},
                     evaluate, evaluate_runs.FUSION_KEYS)
    if fusion is None and prior.get("fusion") and prior["fusion"].get("eval_version") == runner.EVAL_VERSION:
      fusion = _copied(prior["fusion"], source)
  return fusion


def add(summary: dict[str, Any], prior: dict[str, Any], workdir: pathlib.Path, scale: str, *,
        evaluate: bool = True) -> dict[str, Any]:
  """`summary` (`runner.evaluate_all` of `evaluate_runs.table`) with the runs of `prior` (read_carry) that this
  workdir has not finished."""
  cache_dir = runs.build_caches(workdir, scale)  # rendered already by evaluate_all: returns at once
  evals = dict(summary["runs"])
  fusion = _add(evals, summary["fusion"], prior, workdir, scale, cache_dir, evaluate)
  order = [r.name for r in runs.RUNS] + ["ncnn_oracle_c0"]
  evals = {n: evals[n] for n in order if n in evals}
  return {**summary, "runs": evals, "fusion": fusion,
          "not_finished": [r.name for r in runs.select("", scale) if r.name not in evals]}
