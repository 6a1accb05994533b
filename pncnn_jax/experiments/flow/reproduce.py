r"""The sparse optical-flow experiment (paper section 6) on the synthetic flow benchmark, in one resumable command.

  python -m pncnn_jax.experiments.flow.reproduce --workdir /work/runs/flow [--stage all|train|evaluate|report]
                                     [--only flow_ncnn,flow_pncnn] [--results docs/results/RESULTS_FLOW.md]

It trains the flow models of `RUNS` with one recipe (`RECIPE`, sized for a 2-core CPU), evaluates them and the
baselines on held-out test scenes (the flow_synthetic 'test' split) and writes docs/results/RESULTS_FLOW.md, its JSON
and its figures (`pncnn_jax.experiments.flow.report`). The runs are a `runner.RunTable` (`RUN_TABLE`) and their
evaluation a `runner.Table` (`table`) of the research wing's one runner (`pncnn_jax.experiments.runner`), measured by
the 'flow' evaluator (`pncnn_jax.flow.evaluate.FlowEvaluator`) and cached in `<workdir>/eval/<name>.json` until the
run changes. Every run lives in `<workdir>/runs/<name>` and resumes when the command is rerun (a kill loses at most
the steps since the last checkpoint); finished runs are skipped. Each run's wall and CPU time (all threads of the
process) are added up over sittings in `<run>/time.json`.

Baselines, evaluated without training: `gaussian_nc`, normalized convolution of every track with a fixed Gaussian
applicability (its width chosen on the validation scenes), and `flow_ncnn_oracle`, the trained binary model fed
only the tracks that did not fail (what a perfect input confidence could give it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import sys
import time
from typing import Any, Sequence

import numpy as np

from pncnn_jax import from_config
from pncnn_jax.checkpoints import loader, manager
from pncnn_jax.experiments import runner, runs
from pncnn_jax.experiments.flow import report as flow_report
from pncnn_jax.flow import evaluate as flow_evaluate
from pncnn_jax.flow import model as flow_model
from pncnn_jax.nn import models

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


def _config(variant: str):
  """configs/flow_synthetic.py:<variant> with the RECIPE."""
  r = RECIPE
  config = from_config.load_config(f"{runs.configs_dir() / 'flow_synthetic.py'}:{variant}")
  with config.unlocked():
    config.seed = r["seed"]
    runs.apply_recipe(config, r)
    config.progress_bar = False
    config.log_every_steps = 50
  return config


RUN_TABLE = runner.RunTable(known=tuple(flow_model.FLOW_VARIANTS), default=RUNS, config=_config)


@contextlib.contextmanager
def _timed(rundir: pathlib.Path, table: runner.RunTable, name: str):
  """Adds a training sitting's wall and CPU seconds and its steps to <run>/time.json (a sitting that is killed
  records nothing: the report's `cpu_per_step` then extrapolates from the recorded ones)."""
  wall, cpu = time.time(), time.process_time()
  start = None
  if (rundir / manager.CHECKPOINT_SUBDIR).is_dir():
    reader = manager.Checkpointer(rundir, read_only=True)
    start = reader.latest_step()
    reader.close()
  yield
  path = rundir / "time.json"
  prior = json.loads(path.read_text()) if path.exists() else {"wall_s": 0.0, "cpu_s": 0.0, "sittings": 0}
  path.write_text(json.dumps({"wall_s": prior["wall_s"] + time.time() - wall,
                              "cpu_s": prior["cpu_s"] + time.process_time() - cpu,
                              "steps": prior.get("steps", 0) + table.total_steps(name) - (start or 0),
                              "sittings": prior["sittings"] + 1}) + "\n")


def _batches(split: str, scenes: int) -> list[dict[str, np.ndarray]]:
  """The split's scenes as evaluation batches of 8, rendered once (the same windows for every model)."""
  config = _config(RUNS[0])
  with config.unlocked():
    config.data.eval_split = split
    config.data.eval_synthetic_size = scenes
    config.eval_batch_size = 8
  return list(from_config.eval_iterator(config))


def _row(result, **extra) -> dict[str, Any]:
  """A page row: the result's numbers, `extra` and the sparsification curves."""
  sp = result.sparsification
  return {**result.summary(), **extra, "sparsification": {"fractions": sp.fractions.tolist(),
                                                         "model": sp.model.tolist(), "oracle": sp.oracle.tolist()}}


def table(workdir: pathlib.Path, names: Sequence[str]) -> runner.Table:
  """The flow task's run table (`runner.Table`): the Gaussian baseline (its width chosen on the validation scenes),
  every finished run of `names` and, after flow_ncnn, its oracle, each measured by the 'flow' evaluator on the test
  scenes (rendered once, when the first entry is measured) and cached until its run changes. The summary is what
  `flow_report.write` renders (also saved as <workdir>/eval/summary.json, with the panels as .npz)."""
  outdir = workdir / "eval"
  scenes: dict[str, list] = {}

  def batches(split):
    if split not in scenes:
      scenes[split] = _batches(split, RECIPE[f"{split}_scenes"])
    return scenes[split]

  def gaussian_nc():
    val_epe = {s: flow_evaluate.FlowEvaluator(loss_name="flow_epe").run(
        flow_evaluate.GaussianNC(s, int(3 * s)), {}, batches("val")).summary()["epe"] for s in GAUSSIAN_SIGMAS_PX}
    sigma = min(val_epe, key=val_epe.get)
    res = flow_evaluate.FlowEvaluator(loss_name="flow_epe").run(flow_evaluate.GaussianNC(sigma, int(3 * sigma)), {},
                                                                 batches("test"))
    return _row(res, kind="baseline", sigma_px=sigma, val_epe_by_sigma=val_epe, params=0)

  def model_row(name, oracle=False):
    config = _config(name)
    loaded = loader.load(RUN_TABLE.run_dir(workdir, name), step="latest", variant=name)
    loss = from_config.variant_loss(config)
    if oracle:
      res = flow_evaluate.FlowEvaluator(loss_name="flow_epe", oracle=True).run(
          from_config.build_model(config), loaded.variables, batches("test"))
      return _row(res, kind="oracle", params=models.count_params(loaded.variables["params"]))
    res = flow_evaluate.FlowEvaluator(loss_name=loss, num_panels=3).run(from_config.build_model(config),
                                                                         loaded.variables, batches("test"))
    rundir = RUN_TABLE.run_dir(workdir, name)
    timing = rundir / "time.json"
    np.savez_compressed(outdir / f"{name}_panels.npz",
                        **{f"{k}_{i}": v for i, p in enumerate(res.panels) for k, v in p.items()})
    return _row(res, kind="model", loss=loss, step=loaded.meta.get("step"),
                params=models.count_params(loaded.variables["params"]),
                convergence=runner.convergence(rundir, RUN_TABLE.decay_step(name), "epe", "auroc_corrupted"),
                time=json.loads(timing.read_text()) if timing.exists() else None)

  entries = [runner.Entry("gaussian_nc", gaussian_nc)]
  for name in names:
    if not RUN_TABLE.finished(workdir, name):
      print(f"[{name}] not finished: not evaluated", flush=True)
      continue
    changed = runner.checkpoint_time(RUN_TABLE.run_dir(workdir, name))
    entries.append(runner.Entry(name, lambda name=name: model_row(name), changed))
    if name == "flow_ncnn":
      entries.append(runner.Entry("flow_ncnn_oracle", lambda: model_row("flow_ncnn", oracle=True), changed))

  def summarise(values: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    rows = {k: {kk: vv for kk, vv in v.items() if kk != "eval_version"} for k, v in values.items() if v is not None}
    summary = {"recipe": {k: list(v) if isinstance(v, tuple) else v for k, v in RECIPE.items()}, "rows": rows,
               "corrupted_fraction": rows["gaussian_nc"].get("corrupted_fraction"),
               "date": time.strftime("%Y-%m-%d"), "workdir": str(workdir)}
    (outdir / "summary.json").write_text(json.dumps(summary, indent=1, default=float) + "\n")
    return summary

  return runner.Table(entries, summarise)


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
    names = RUN_TABLE.select(args.only)
    if workdir.exists() and not workdir.is_dir():
      raise ValueError(f"--workdir={args.workdir} is a file, not a directory")
    if args.stage in ("all", "train"):
      runner.train_runs(workdir, RUN_TABLE, names, sitting=_timed)
    if args.stage in ("all", "evaluate"):
      summary = runner.evaluate_all(workdir, table(workdir, names))
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
