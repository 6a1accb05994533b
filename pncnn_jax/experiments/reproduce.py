r"""The paper's experiments on the built-in synthetic benchmark, in one resumable command.

  python -m pncnn_jax.experiments.reproduce --workdir runs/paper [--scale cpu] [--stage all|train|evaluate|report]
                                [--only ncnn,pncnn_masked] [--ship pretrained/synthetic]

It trains every model of the paper (NCNN, NCNN-Conf L1/L2, pNCNN, pNCNN-Exp, the ablations and a 4-member
pNCNN ensemble) with one recipe (`pncnn_jax.experiments.runs.SCALES`), evaluates all of them on held-out test scenes
(the synthetic 'test' split: seeds that training and validation never see), and writes docs/results/RESULTS.md
(docs/results/RESULTS_LONG.md for `--scale long`; RESULTS.md then compares the runs of both scales) and its JSON
(`pncnn_jax.experiments.evaluate_runs`). `--scale longer` trains only the runs the long page marks as still falling
(`pncnn_jax.experiments.runs.SCALE_RUNS`), 2x longer, and writes docs/results/RESULTS_LONGER.md; the long page then
puts them in its claims. Every run lives in `<workdir>/runs/<name>` and resumes when the command is rerun, so the
command can be split over several sittings: stop it at any time (a kill loses at most the steps since the last
checkpoint) and rerun it to continue. Runs already finished are skipped.

Two forms of each model with a learned input confidence are trained (`pncnn_jax.experiments.runs.RUNS`):
  <variant>         the official network: c0 = UNet(x) at every pixel, also where there is no measurement.
  <variant>_masked  our option `mask_input_confidence`: c0 = UNet(x) * [x > 0]. Without it, the empty pixels
                    (~96 % of a LiDAR frame) keep a positive c0 and NConv averages their zeros into the
                    prediction, which training counters by raising c0 where that costs most: at far points,
                    the see-through ones among them (docs/results/RESULTS.md, "Why the official network fails here").
The parity variants are untouched: `mask_input_confidence` defaults to False.

`--ship DIR` writes the final weights of each finished run (of `--only`, when given) as DIR/<name>.npz plus
DIR/<name>.json (the manifest: command, commit, steps, device, time, recipe, the validation metrics it
reached and the input density range it was trained on, `pncnn_jax.experiments.input_density`), loadable by name
(`--checkpoint synthetic:<name>`).

The baselines of the paper's headline comparison (MC-Dropout and deep ensembles of a Sparse-to-Dense network,
`pncnn_jax.experiments.runs.BASELINES`) train only when named: `--only s2d_mcdropout,s2d_ensemble8` trains the
learning-rate sweep first (three short runs), then them, evaluates them beside the pNCNN family and writes
docs/results/RESULTS_BASELINES.md (`pncnn_jax.experiments.baselines`; at other scales
<workdir>/RESULTS_BASELINES.md). They are never shipped (`--ship` leaves them out: an ensemble of ResNet-18s is 440 MB).
The sensor-robust model's two runs (`pncnn_jax.experiments.runs.SENSOR_RUNS`, trained on a mixture of sensors) also
train only when named (`--only sparse_var_beta_detach_masked_lidar_mix,sparse_var_beta_detach_masked_lidar_mix_seed1`);
they are evaluated on the same held-out scenes into <workdir>/SENSOR_RUNS.json (no results page changes: their page is
docs/results/SENSORS.md, `pncnn_jax.experiments.sensors --runs_summary`) and shipped like the others.

`--jobs N` trains up to N runs at once, each in its own process (on a GPU each takes 0.9/N of its memory; the
processes share one compilation cache in <workdir>/jax_cache), and renders the scene caches with N processes.
Even on 2 CPU cores `--jobs 2` trains more steps per second in total than one run at a time: a small-crop step
does not keep both cores busy (docs/develop/benchmarks-log.md, bench/bench_jobs.py).
`--carry docs/results/RESULTS_<SCALE>.json` lets a sitting on a machine without the earlier workdir add to the
earlier sittings' results instead of replacing them: a run not finished in this workdir is evaluated from its shipped
weights when they are the run that file measured, and otherwise keeps its row from the file, marked with the commit
and date that measured it.
Every finished run also keeps its final weights as `<workdir>/runs/<name>/final_weights.{npz,json}` and the
devices it trained on in `device.json`: a run folder without its `checkpoints/` (a few MB) is enough to evaluate,
report and ship it on another machine, e.g. train on a GPU, evaluate on a CPU.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import platform
import subprocess
import sys
import threading
import time
from typing import Sequence

from pncnn_jax.experiments import baselines as baselines_lib
from pncnn_jax.experiments import carry_over, evaluate_runs, runner
from pncnn_jax.experiments import runs as runs_lib
from pncnn_jax.experiments.pages import baselines as pages_baselines
from pncnn_jax.experiments.pages import report
from pncnn_jax.experiments.runs import Run
from pncnn_jax.runtime import compile_cache
from pncnn_jax.training import loop

# The sensor-robust runs (runs.SENSOR_RUNS: --only sparse_var_beta_detach_masked_lidar_mix,...) are evaluated on
# the same held-out scenes as the paper's runs, into <workdir>/SENSOR_RUNS.json, which docs/results/SENSORS.md
# reads for their claims at 64 beams (`pncnn_jax.experiments.sensors --runs_summary`); no other page changes.
SENSOR_SUMMARY = "SENSOR_RUNS.json"

def train_runs(workdir: pathlib.Path, scale: str, runs: Sequence[Run], jobs: int = 1) -> None:
  """Trains (or resumes) each run, `jobs` at a time; finished runs are skipped. Baselines whose learning rate comes
  from the sweep (`runs_lib.BASELINE_LR_FROM_SWEEP`) get the sweep runs trained first."""
  if any(r.learning_rate == runs_lib.BASELINE_LR_FROM_SWEEP for r in runs):
    runs = [*(r for r in runs_lib.BASELINE_SWEEP if r not in runs), *runs]
  first = [r for r in runs if r.group == "baseline_sweep"]
  for phase in (first, [r for r in runs if r not in first]):  # the sweep before the runs that need its choice
    if phase:
      _train_phase(workdir, scale, phase, jobs)


def _train_phase(workdir: pathlib.Path, scale: str, runs: Sequence[Run], jobs: int) -> None:
  cache_dir = runs_lib.build_caches(workdir, scale, workers=jobs)
  todo = []
  for run in runs:
    if runs_lib.finished(workdir, run, scale):
      print(f"[{run.name}] finished", flush=True)
      if not runs_lib.is_baseline(run):  # a baseline's weights stay in its checkpoints (an ensemble of 8 is 440 MB)
        runs_lib.write_final_weights(workdir, run, scale)
    else:
      todo.append(run)
  if jobs > 1 and len(todo) > 1:
    _train_in_processes(workdir, scale, todo, jobs)
    return
  for run in todo:
    print(f"[{run.name}] training ({run.variant}, masked c0={run.masked}, seed {run.seed})", flush=True)
    with WallClock(runs_lib.run_dir(workdir, run)):
      loop.train_and_evaluate(runs_lib.run_config(run, scale, cache_dir, workdir), runs_lib.run_dir(workdir, run))
    _record_device(runs_lib.run_dir(workdir, run))
    if not runs_lib.is_baseline(run):
      runs_lib.write_final_weights(workdir, run, scale)


def _train_in_processes(workdir: pathlib.Path, scale: str, runs: Sequence[Run], jobs: int) -> None:
  """Each run in its own `--stage train --only NAME` process, `jobs` at a time; output in <run>/train.log."""
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{0.9 / jobs:.3f}")  # GPU memory per process
  env.setdefault("JAX_COMPILATION_CACHE_DIR", str(workdir / "jax_cache"))  # runs of one variant share programs

  def one(run: Run) -> int:
    rundir = runs_lib.run_dir(workdir, run)
    rundir.mkdir(parents=True, exist_ok=True)
    print(f"[{run.name}] training in its own process, log {rundir / 'train.log'}", flush=True)
    with open(rundir / "train.log", "a") as log:
      rc = subprocess.call([sys.executable, "-m", "pncnn_jax.experiments.reproduce", "--workdir", str(workdir),
                            "--scale", scale, "--stage", "train", "--only", run.name],
                           stdout=log, stderr=subprocess.STDOUT, env=env)
    print(f"[{run.name}] " + ("finished" if rc == 0 else f"failed (exit {rc}); see {rundir / 'train.log'}"),
          flush=True)
    return rc

  with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    failed = [r.name for r, rc in zip(runs, pool.map(one, runs)) if rc != 0]
  if failed:
    raise ValueError(f"training failed for {', '.join(failed)}: see their train.log; rerun to resume")


def _record_device(rundir: pathlib.Path) -> None:
  """<run>/device.json: what this sitting trained on (a run may span several sittings: one entry each)."""
  import jax  # pylint: disable=g-import-not-at-top
  path = rundir / "device.json"
  prior = json.loads(path.read_text()) if path.exists() else []
  prior.append({"devices": [d.device_kind for d in jax.devices()], "backend": jax.default_backend(),
                "jax": jax.__version__, "host": platform.node(), "date": time.strftime("%Y-%m-%d %H:%M")})
  path.write_text(json.dumps(prior, indent=1) + "\n")


class WallClock:
  """Adds this sitting's wall time and this process's CPU time (user + system, all its threads) to
  <run>/wall_time.json ({"seconds", "cpu_seconds", "sittings"}: a run may span several).

  The file is rewritten (atomically) every `every` seconds while the run trains, and at the end however it ends,
  so a sitting whose process is killed with its machine keeps its time up to the last tick.
  """

  def __init__(self, rundir: pathlib.Path, every: float = 60.0):
    self.path, self.every = rundir / "wall_time.json", every
    self._stop = threading.Event()

  def _write(self) -> None:
    value = {"seconds": self._prior["seconds"] + time.time() - self._t0,
             "cpu_seconds": self._prior.get("cpu_seconds", 0.0) + time.process_time() - self._cpu0,
             "sittings": self._prior["sittings"] + 1}
    tmp = self.path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value) + "\n")
    tmp.replace(self.path)

  def _tick(self) -> None:
    while not self._stop.wait(self.every):
      self._write()

  def __enter__(self) -> "WallClock":
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self._prior = json.loads(self.path.read_text()) if self.path.exists() else {"seconds": 0.0, "sittings": 0}
    self._t0, self._cpu0 = time.time(), time.process_time()
    self._thread = threading.Thread(target=self._tick, daemon=True)
    self._thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self._stop.set()
    self._thread.join()
    self._write()


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m pncnn_jax.experiments.reproduce",
                                   description=__doc__.split("\n\n")[1],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", required=True, help="where runs, caches and evaluations go (outside git)")
  parser.add_argument("--scale", default="cpu", choices=sorted(runs_lib.SCALES), help="the training recipe")
  parser.add_argument("--stage", default="all", choices=("all", "train", "evaluate", "report"))
  parser.add_argument("--only", default="", help="comma-separated run names (default: all, or the "
                      "scale's own in pncnn_jax.experiments.runs.SCALE_RUNS); see pncnn_jax.experiments.runs.RUNS")
  parser.add_argument("--results", default="", help="the report to write (and its .json); default "
                      "docs/results/RESULTS.md for the cpu scale, docs/results/RESULTS_<SCALE>.md for the others "
                      "(docs/results/RESULTS_LONG.md); when --only names baselines only "
                      "(pncnn_jax.experiments.runs.BASELINES), their page: default "
                      "docs/results/RESULTS_BASELINES.md for the long scale, <workdir>/RESULTS_BASELINES.md for the "
                      "others")
  parser.add_argument("--ship", default="", help="write finished runs' weights + manifests to this folder")
  parser.add_argument("--jobs", type=int, default=1, help="runs trained at once, each in its own process")
  parser.add_argument("--carry", default="", help="an earlier sitting's results JSON (e.g. "
                      "docs/results/RESULTS_LONG.json): a run not finished in this workdir is evaluated from its "
                      "shipped weights when they are the run that file measured, else keeps its row from it, marked "
                      "with the page's commit and date (for a machine that no longer has the earlier workdir)")
  args = parser.parse_args(argv)
  workdir = pathlib.Path(os.path.abspath(args.workdir))
  os.environ.setdefault(compile_cache.VARIABLE, str(workdir / compile_cache.SUBDIR))  # every run shares programs
  try:
    runs = runs_lib.select(args.only, args.scale)
    with_baselines = any(runs_lib.is_baseline(r) for r in runs)
    sensor_runs = [r for r in runs if runs_lib.is_sensor_run(r)]
    paper_runs = [r for r in runs if not runs_lib.is_baseline(r) and not runs_lib.is_sensor_run(r)]
    only_baselines = with_baselines and not paper_runs and not sensor_runs
    baseline_page = pathlib.Path(args.results) if (only_baselines and args.results) else (
        pathlib.Path(report.PAGES_DIR) / pages_baselines.PAGE if args.scale == "long"
        else workdir / pages_baselines.PAGE)
    if not args.results:
      args.results = f"{report.PAGES_DIR}/{report.page_name(args.scale)}"
    if workdir.exists() and not workdir.is_dir():
      raise ValueError(f"--workdir={args.workdir} is a file, not a directory")
    if args.jobs < 1:
      raise ValueError(f"--jobs={args.jobs}: must be at least 1")
    carry = carry_over.read_carry(pathlib.Path(args.carry), args.scale) if args.carry else None  # before training
    if args.stage in ("all", "train"):
      train_runs(workdir, args.scale, runs, args.jobs)
    if args.stage in ("all", "evaluate", "report") and with_baselines:
      evaluate = args.stage != "report"
      pages_baselines.write(runner.evaluate_all(workdir, baselines_lib.table(workdir, args.scale),
                                                evaluate=evaluate), baseline_page)
      print(f"wrote {baseline_page} and {baseline_page.with_suffix('.json')}", flush=True)
    if args.stage in ("all", "evaluate", "report") and sensor_runs:
      evaluate = args.stage != "report"
      sensors_summary = runner.evaluate_all(workdir, evaluate_runs.table(workdir, args.scale, evaluate=evaluate,
                                                                         runs=sensor_runs), evaluate=evaluate)
      path = workdir / SENSOR_SUMMARY
      path.write_text(json.dumps(sensors_summary, indent=1, default=float) + "\n")
      print(f"wrote {path} (docs/results/SENSORS.md takes it: python -m pncnn_jax.experiments.sensors --runs_summary "
            f"{path})", flush=True)
      if args.ship:
        evaluate_runs.ship_weights(workdir, args.scale, sensors_summary, pathlib.Path(args.ship), sensor_runs)
    if args.stage in ("all", "evaluate", "report") and paper_runs:
      evaluate = args.stage != "report"
      summary = runner.evaluate_all(workdir, evaluate_runs.table(workdir, args.scale, evaluate=evaluate),
                                    evaluate=evaluate)
      if carry is not None:
        summary = carry_over.add(summary, carry, workdir, args.scale, evaluate=args.stage != "report")
      report.write(summary, pathlib.Path(args.results), workdir)
      print(f"wrote {args.results} and {pathlib.Path(args.results).with_suffix('.json')}", flush=True)
      if args.ship:
        evaluate_runs.ship_weights(workdir, args.scale, summary, pathlib.Path(args.ship), paper_runs)
  except (ValueError, FileNotFoundError, FloatingPointError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
