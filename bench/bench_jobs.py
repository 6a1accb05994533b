"""Training throughput of `python -m pncnn_jax.experiments.reproduce --jobs N` on CPU: one run on all cores against N
runs at once (as `--jobs N` trains them), and against N runs at once each pinned to its own slice of the cores, measured
in one sitting.

  python bench/bench_jobs.py --output docs/develop/benchmarks-log.md [--runs ncnn_conf_l1,pncnn_masked] [--steps 120]
                             [--jobs 2]

For each run (its long-scale recipe: batch 4 of 64x320 crops, `runs.run_config`), a worker process compiles the
jitted training step of `pncnn_jax.training.loop`, runs 3 warm-up steps, then times `--steps` steps on one fixed batch
of a rendered synthetic scene (a step's cost does not depend on the values). Setting A: one worker, all cores.
Setting B: `--jobs` workers at once, each pinned (sched_setaffinity) to its own contiguous slice of the cores.
Setting C: as B, unpinned (each worker's thread pool spans all cores), which is what `--jobs` does. A total is the
sum of the workers' steps/s.
Run it on a quiet machine: other jobs take cores from either setting.

Writes the `jobs` section of the output file (bench_forward.write_section), and prints it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
PIN = "BENCH_JOBS_CORES"  # the cores a worker pins itself to, "0,1"


def core_slices(jobs: int) -> list[list[int]] | None:
  """Disjoint contiguous slices, as equal as can be, of this process's cores; None if they cannot be pinned."""
  if not hasattr(os, "sched_getaffinity"):
    return None
  cores = sorted(os.sched_getaffinity(0))
  if len(cores) < jobs:
    return None
  return [cores[i * len(cores) // jobs:(i + 1) * len(cores) // jobs] for i in range(jobs)]


def worker(run_name: str, steps: int, members: int = 0) -> dict[str, float]:
  """Steps per second of `run_name`'s training step in this process (pinned by its parent, if at all); with
  `members` K > 0, of its K-member ensemble trained as one vmapped step (each step trains K members)."""
  import dataclasses  # pylint: disable=g-import-not-at-top

  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from pncnn_jax import from_config  # pylint: disable=g-import-not-at-top
  from pncnn_jax.data import synthetic  # pylint: disable=g-import-not-at-top
  from pncnn_jax.experiments import runs  # pylint: disable=g-import-not-at-top
  from pncnn_jax.runtime import sharding  # pylint: disable=g-import-not-at-top
  from pncnn_jax.training import loop  # pylint: disable=g-import-not-at-top
  run = runs.RUNS_BY_NAME[run_name]
  cfg = runs.run_config(dataclasses.replace(run, members=members) if members else run, "long")
  h, w, b = cfg.data.train_crop_height, cfg.data.train_crop_width, cfg.batch_size
  full = synthetic.SyntheticConfig()  # centre-bottom windows of full frames, as the recipe's centre crops
  window = (full.height - h, (full.width - w) // 2, h, w)
  scenes = [synthetic.generate(0, i, full, window) for i in range(b)]
  batch = {"sparse": np.stack([s["sparse"] for s in scenes]).astype(np.float32),
           "target": np.stack([s["target"] for s in scenes]).astype(np.float32)}
  mesh = sharding.make_mesh()
  if members:
    batch = {k: np.stack([v] * members) for k, v in batch.items()}  # (K, B, H, W, 1)
    step = loop.make_ensemble_train_step(from_config.variant_loss(cfg), mesh)
    state = loop.init_ensemble_state(cfg, cfg.steps_per_epoch)
    batch = sharding.shard_batch(batch, mesh, batch_axis=1)
  else:
    step = loop.make_train_step(from_config.variant_loss(cfg), mesh)
    state = loop.init_state(cfg, cfg.steps_per_epoch)
    batch = sharding.shard_batch(batch, mesh)
  for _ in range(3):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  t = time.perf_counter()
  for _ in range(steps):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  return {"steps_per_sec": steps / (time.perf_counter() - t), "cores": len(os.sched_getaffinity(0))}


def _spawn(run_name: str, steps: int, cores: list[int] | None, members: int = 0) -> subprocess.Popen:
  env = dict(os.environ)
  if cores is not None:
    env[PIN] = ",".join(map(str, cores))
  return subprocess.Popen([sys.executable, __file__, "--worker", run_name, "--steps", str(steps),
                           "--members", str(members)], env=env,
                          stdout=subprocess.PIPE, text=True, cwd=REPO)


def _collect(procs: list[subprocess.Popen]) -> list[dict[str, float]]:
  out = []
  for p in procs:
    stdout, _ = p.communicate()
    if p.returncode != 0:
      raise SystemExit(f"a worker failed (exit {p.returncode})")
    out.append(json.loads(stdout.strip().splitlines()[-1]))
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--output", default="", help="a markdown file whose jobs section is replaced")
  parser.add_argument("--runs", default="ncnn_conf_l1,pncnn_masked",
                      help="comma-separated run names (pncnn_jax.experiments.runs)")
  parser.add_argument("--steps", type=int, default=120, help="timed steps per worker")
  parser.add_argument("--jobs", type=int, default=2, help="workers at once in settings B and C")
  parser.add_argument("--members", type=int, default=0, help="also time each run's K-member ensemble trained as "
                      "one vmapped step (setting V), against K single runs")
  parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.worker:
    if os.environ.get(PIN):
      os.sched_setaffinity(0, [int(c) for c in os.environ[PIN].split(",")])  # before JAX starts its threads
    print(json.dumps(worker(args.worker, args.steps, args.members)))
    return
  import jax  # pylint: disable=g-import-not-at-top
  slices = core_slices(args.jobs)
  if slices is None:
    raise SystemExit(f"cannot pin {args.jobs} workers here (no sched_setaffinity, or fewer cores than workers)")
  load, start = os.getloadavg()[0], datetime.datetime.now()
  rows = []
  for run in args.runs.split(","):
    (one,) = _collect([_spawn(run, args.steps, None)])
    cells = []
    for pin in (slices, [None] * args.jobs):
      many = _collect([_spawn(run, args.steps, cores) for cores in pin])
      total = sum(m["steps_per_sec"] for m in many)
      cells.append(" + ".join(f"{m['steps_per_sec']:.2f}" for m in many)
                   + f" = {total:.2f} ({total / one['steps_per_sec']:.2f}x)")
    if args.members:
      (vm,) = _collect([_spawn(run, args.steps, None, args.members)])
      member_steps = args.members * vm["steps_per_sec"]
      cells.append(f"{member_steps:.2f} ({member_steps / one['steps_per_sec']:.2f}x)")
    rows.append(f"| `{run}` | {one['steps_per_sec']:.2f} | " + " | ".join(cells) + " |")
    print(rows[-1], flush=True)
  section = "\n".join([
      "## Several runs at once on CPU: `reproduce --jobs` (bench/bench_jobs.py)", "",
      f"Run {start:%Y-%m-%d %H:%M} ({(datetime.datetime.now() - start).seconds // 60} min) on "
      f"{platform.machine()} `{platform.platform()}`, "
      f"{os.cpu_count()} CPU cores; python {platform.python_version()}, jax {jax.__version__}. Load average at start "
      f"{load:.1f}. Long-scale recipe (batch 4, 64x320 crops), {args.steps} timed steps per worker on one rendered "
      "batch. A: one run on all cores. B: "
      f"{args.jobs} runs at once, pinned to the core slices {' and '.join(str(s) for s in slices)}. C: the same "
      "runs at once, unpinned.", "",
      "| run | A: steps/s | B (pinned): steps/s per run = total (against A) | C (unpinned): the same |"
      + (f" V: {args.members} members vmapped, member-steps/s (against A) |" if args.members else ""),
      "|---|---|---|---|" + ("---|" if args.members else ""), *rows, "",
      "C / A is what `reproduce --jobs N` gains in training steps per second over training the runs one after "
      "another; B / A is what pinning each run to its own cores would give instead"
      + (f"; V / A is what training {args.members} ensemble members as one vmapped run gives (member-steps: one "
         f"step of it trains {args.members} members)." if args.members else ".")])
  print(section)
  if args.output:
    import bench_forward  # pylint: disable=g-import-not-at-top  (this script's folder is on sys.path)
    bench_forward.write_section(pathlib.Path(args.output), "jobs", section)


if __name__ == "__main__":
  main()
