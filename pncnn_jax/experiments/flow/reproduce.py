r"""The sparse optical-flow experiment (paper section 6) on the synthetic flow benchmark, in one resumable command.

  python -m pncnn_jax.experiments.flow.reproduce --workdir /work/runs/flow [--stage all|train|evaluate|report]
                                     [--only flow_ncnn,flow_pncnn] [--results docs/results/RESULTS_FLOW.md]

It trains the flow models of `RUNS` with one recipe (`RECIPE`, sized for a 2-core CPU), evaluates them and the
baselines on held-out test scenes (the flow_synthetic 'test' split) and writes docs/results/RESULTS_FLOW.md, its JSON
and its figures (`pncnn_jax.experiments.flow.report`). Every run lives in `<workdir>/runs/<name>` and resumes when the
command is rerun (a kill loses at most the steps since the last checkpoint); finished runs are skipped. Each run's wall
and CPU time (all threads of the process) are added up over sittings in `<run>/time.json`.

Baselines, evaluated without training: `gaussian_nc`, normalized convolution of every track with a fixed Gaussian
applicability (its width chosen on the validation scenes), and `flow_ncnn_oracle`, the trained binary model fed
only the tracks that did not fail (what a perfect input confidence could give it).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time
from typing import Any, Sequence

import numpy as np

from pncnn_jax import from_config
from pncnn_jax.checkpoints import manager
from pncnn_jax.experiments import runs
from pncnn_jax.experiments.flow import report as flow_report
from pncnn_jax.flow import evaluate as flow_evaluate
from pncnn_jax.nn import models
from pncnn_jax.training import loop

RECIPE: dict[str, Any] = {
    "batch_size": 4,
    "steps_per_epoch": 100,
    "num_epochs": 8,
    "lr_decay_epochs": 7,  # x0.1 for the last epoch
    "learning_rate": 3e-3,
    "train_crop": (64, 192),  # random windows of the 176x608 frame
    "eval_crop": (96, 320),  # one random window per scene, fixed by the seed
    "train_scenes": 400,  # per epoch; a new window each time a scene comes round
    "val_scenes": 32,
    "test_scenes": 96,
    "seed": 0,
}
RUNS = ("flow_ncnn", "flow_ncnn_conf", "flow_pncnn")  # the default set; any FLOW_VARIANTS key works with --only
GAUSSIAN_SIGMAS_PX = (4.0, 8.0, 16.0, 32.0)  # the widths `gaussian_nc` chooses from on the validation scenes
FLAT_TOLERANCE = 0.02  # "converged": best val EPE of the last 30 % of the high-lr phase within 2 % of the best before


def run_config(variant: str):
  """configs/flow_synthetic.py:<variant> with the RECIPE."""
  r = RECIPE
  config = from_config.load_config(f"{runs.configs_dir() / 'flow_synthetic.py'}:{variant}")
  with config.unlocked():
    config.seed = r["seed"]
    runs.apply_recipe(config, r)
    config.progress_bar = False
    config.log_every_steps = 50
  return config


def total_steps() -> int:
  return RECIPE["steps_per_epoch"] * RECIPE["num_epochs"]


def run_dir(workdir: pathlib.Path, name: str) -> pathlib.Path:
  return workdir / "runs" / name


def finished(workdir: pathlib.Path, name: str) -> bool:
  """True when the run's metrics.jsonl has its final validation row."""
  path = run_dir(workdir, name) / "metrics.jsonl"
  if not path.exists():
    return False
  rows = [json.loads(line) for line in path.read_text().splitlines()]
  return any(r.get("split") == "val" and r.get("step") == total_steps() for r in rows)


def select(only: str) -> list[str]:
  from pncnn_jax.flow import model as flow_model  # pylint: disable=g-import-not-at-top
  names = [n for n in only.split(",") if n] if only else list(RUNS)
  unknown = [n for n in names if n not in flow_model.FLOW_VARIANTS]
  if unknown:
    raise ValueError(f"--only: unknown run(s) {unknown}; known: {', '.join(flow_model.FLOW_VARIANTS)}")
  return names


def train_runs(workdir: pathlib.Path, names: Sequence[str]) -> None:
  """Trains (or resumes) each run; adds the sitting's wall and CPU seconds and its steps to <run>/time.json (a
  sitting that is killed records nothing: `cpu_per_step` then extrapolates from the recorded ones)."""
  for name in names:
    if finished(workdir, name):
      print(f"[{name}] finished", flush=True)
      continue
    print(f"[{name}] training ({total_steps()} steps)", flush=True)
    wall, cpu = time.time(), time.process_time()
    rundir = run_dir(workdir, name)
    start = None
    if (rundir / manager.CHECKPOINT_SUBDIR).is_dir():
      reader = manager.Checkpointer(rundir, read_only=True)
      start = reader.latest_step()
      reader.close()
    loop.train_and_evaluate(run_config(name), rundir)
    path = rundir / "time.json"
    prior = json.loads(path.read_text()) if path.exists() else {"wall_s": 0.0, "cpu_s": 0.0, "sittings": 0}
    path.write_text(json.dumps({"wall_s": prior["wall_s"] + time.time() - wall,
                                "cpu_s": prior["cpu_s"] + time.process_time() - cpu,
                                "steps": prior.get("steps", 0) + total_steps() - (start or 0),
                                "sittings": prior["sittings"] + 1}) + "\n")


def convergence(rundir: pathlib.Path) -> dict[str, Any]:
  """The validation EPE curve and whether it is flat (FLAT_TOLERANCE; the same rule as the depth runs)."""
  rows = [json.loads(line) for line in (rundir / "metrics.jsonl").read_text().splitlines()]
  val = sorted({r["step"]: r for r in rows if r.get("split") == "val"}.values(), key=lambda r: r["step"])
  curve = [(r["step"], r["epe"], r.get("auroc_corrupted")) for r in val]
  decay = RECIPE["steps_per_epoch"] * RECIPE["lr_decay_epochs"]
  phase = [c for c in curve if c[0] <= decay]
  earlier = [c[1] for c in phase if c[0] <= 0.7 * decay]
  late = [c[1] for c in phase if c[0] > 0.7 * decay]
  change = (min(late) - min(earlier)) / min(earlier) if earlier and late else None
  return {"val_curve": curve, "epe_change_last_30pct": change,
          "flat": change is not None and abs(change) < FLAT_TOLERANCE}


def _batches(split: str, scenes: int) -> list[dict[str, np.ndarray]]:
  """The split's scenes as evaluation batches of 8, rendered once (the same windows for every model)."""
  config = run_config(RUNS[0])
  with config.unlocked():
    config.data.eval_split = split
    config.data.eval_synthetic_size = scenes
    config.eval_batch_size = 8
  return list(from_config.eval_iterator(config))


def _row(result: flow_evaluate.FlowEvalResult, **extra) -> dict[str, Any]:
  sp = result.sparsification
  return {**result.summary(), **extra, "sparsification": {"fractions": sp.fractions.tolist(),
                                                         "model": sp.model.tolist(), "oracle": sp.oracle.tolist()}}


def evaluate_all(workdir: pathlib.Path, names: Sequence[str]) -> dict[str, Any]:
  """Evaluates every finished run, the oracle and the Gaussian baseline on the test scenes; returns the summary
  that `flow_report.write` renders (also saved as <workdir>/eval/summary.json, with the panels as .npz)."""
  test = _batches("test", RECIPE["test_scenes"])
  val = _batches("val", RECIPE["val_scenes"])
  outdir = workdir / "eval"
  outdir.mkdir(parents=True, exist_ok=True)
  rows: dict[str, Any] = {}
  val_epe = {s: flow_evaluate.run_flow_evaluation(flow_evaluate.gaussian_nc_predictor(s, int(3 * s)), val,
                                                  loss_name="flow_epe").metrics["epe"] for s in GAUSSIAN_SIGMAS_PX}
  sigma = min(val_epe, key=val_epe.get)
  res = flow_evaluate.run_flow_evaluation(flow_evaluate.gaussian_nc_predictor(sigma, int(3 * sigma)), test,
                                          loss_name="flow_epe")
  rows["gaussian_nc"] = _row(res, kind="baseline", sigma_px=sigma, val_epe_by_sigma=val_epe, params=0)
  for name in names:
    if not finished(workdir, name):
      print(f"[{name}] not finished: not evaluated", flush=True)
      continue
    config = run_config(name)
    variables, meta = manager.restore_variables(run_dir(workdir, name), step="latest")
    model = from_config.build_model(config)
    predict = flow_evaluate.model_predictor(model, variables)
    res = flow_evaluate.run_flow_evaluation(predict, test, loss_name=from_config.variant_loss(config), num_panels=3)
    timing = run_dir(workdir, name) / "time.json"
    rows[name] = _row(res, kind="model", loss=from_config.variant_loss(config), step=meta.get("step"),
                      params=models.count_params(variables["params"]), convergence=convergence(run_dir(workdir, name)),
                      time=json.loads(timing.read_text()) if timing.exists() else None)
    np.savez_compressed(outdir / f"{name}_panels.npz",
                        **{f"{k}_{i}": v for i, p in enumerate(res.panels) for k, v in p.items()})
    if name == "flow_ncnn":
      res = flow_evaluate.run_flow_evaluation(flow_evaluate.oracle_predictor(predict), test, loss_name="flow_epe")
      rows["flow_ncnn_oracle"] = _row(res, kind="oracle", params=rows[name]["params"])
  summary = {"recipe": {k: list(v) if isinstance(v, tuple) else v for k, v in RECIPE.items()}, "rows": rows,
             "corrupted_fraction": rows["gaussian_nc"].get("corrupted_fraction"), "date": time.strftime("%Y-%m-%d"),
             "workdir": str(workdir)}
  (outdir / "summary.json").write_text(json.dumps(summary, indent=1, default=float) + "\n")
  return summary


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m pncnn_jax.experiments.flow.reproduce",
                                   description=__doc__.split("\n\n")[1],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", required=True, help="where runs and evaluations go (outside git)")
  parser.add_argument("--stage", default="all", choices=("all", "train", "evaluate", "report"))
  parser.add_argument("--only", default="", help=f"comma-separated runs (default: {','.join(RUNS)})")
  parser.add_argument("--results", default="docs/results/RESULTS_FLOW.md", help="the report to write (and its .json)")
  args = parser.parse_args(argv)
  workdir = pathlib.Path(os.path.abspath(args.workdir))
  try:
    names = select(args.only)
    if workdir.exists() and not workdir.is_dir():
      raise ValueError(f"--workdir={args.workdir} is a file, not a directory")
    if args.stage in ("all", "train"):
      train_runs(workdir, names)
    if args.stage in ("all", "evaluate"):
      summary = evaluate_all(workdir, names)
    if args.stage in ("all", "evaluate", "report"):
      if args.stage == "report":
        path = workdir / "eval" / "summary.json"
        if not path.exists():
          raise FileNotFoundError(f"{path}: run --stage evaluate first")
        summary = json.loads(path.read_text())
      flow_report.write(summary, pathlib.Path(args.results), workdir)
      print(f"wrote {args.results}", flush=True)
  except (ValueError, FileNotFoundError, FloatingPointError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
