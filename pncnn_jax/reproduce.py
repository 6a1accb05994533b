r"""The paper's experiments on the built-in synthetic benchmark, in one resumable command.

  python -m pncnn_jax.reproduce --workdir runs/paper [--scale cpu] [--stage all|train|evaluate|report]
                                [--only ncnn,pncnn_masked] [--ship pretrained/synthetic]

It trains every model of the paper (NCNN, NCNN-Conf L1/L2, pNCNN, pNCNN-Exp, the ablations and a 4-member
pNCNN ensemble) with one recipe (`pncnn_jax.paper.SCALES`), evaluates all of them on held-out test scenes (the synthetic
'test' split: seeds that training and validation never see), and writes docs/RESULTS.md and its JSON
(`pncnn_jax.results`). Every run lives in `<workdir>/runs/<name>` and resumes when the command is rerun, so the
command can be split over several sittings: stop it at any time (a kill loses at most the steps since the last
checkpoint) and rerun it to continue. Runs already finished are skipped.

Two forms of each model with a learned input confidence are trained (`pncnn_jax.paper.RUNS`):
  <variant>         the official network: c0 = UNet(x) at every pixel, also where there is no measurement.
  <variant>_masked  our option `mask_input_confidence`: c0 = UNet(x) * [x > 0]. Without it, the empty pixels
                    (~96 % of a LiDAR frame) keep a positive c0 and NConv averages their zeros into the
                    prediction, which training counters by raising c0 where that costs most: at far points,
                    the see-through ones among them (docs/RESULTS.md, "Why the official network fails here").
The parity variants are untouched: `mask_input_confidence` defaults to False.

`--ship DIR` writes each finished run's final weights as DIR/<name>.npz plus DIR/<name>.json (the manifest:
command, commit, steps, device, time, recipe and the validation metrics it reached), loadable by name
(`--checkpoint synthetic:<name>`).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time
from typing import Sequence

from pncnn_jax import paper, report, results, train
from pncnn_jax.paper import Run


def train_runs(workdir: pathlib.Path, scale: str, runs: Sequence[Run]) -> None:
  """Trains (or resumes) each run in order; finished runs are skipped."""
  cache_dir = paper.build_caches(workdir, scale)
  for run in runs:
    if paper.finished(workdir, run, scale):
      print(f"[{run.name}] finished", flush=True)
      continue
    print(f"[{run.name}] training ({run.variant}, masked c0={run.masked}, seed {run.seed})", flush=True)
    t0 = time.time()
    train.train_and_evaluate(paper.run_config(run, scale, cache_dir), paper.run_dir(workdir, run))
    _record_time(paper.run_dir(workdir, run), time.time() - t0)


def _record_time(rundir: pathlib.Path, seconds: float) -> None:
  """Adds this sitting's wall time to <run>/wall_time.json (a run may span several sittings)."""
  path = rundir / "wall_time.json"
  prior = json.loads(path.read_text()) if path.exists() else {"seconds": 0.0, "sittings": 0}
  prior = {"seconds": prior["seconds"] + seconds, "sittings": prior["sittings"] + 1}
  path.write_text(json.dumps(prior) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m pncnn_jax.reproduce", description=__doc__.split("\n\n")[1],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", required=True, help="where runs, caches and evaluations go (outside git)")
  parser.add_argument("--scale", default="cpu", choices=sorted(paper.SCALES), help="the training recipe")
  parser.add_argument("--stage", default="all", choices=("all", "train", "evaluate", "report"))
  parser.add_argument("--only", default="", help="comma-separated run names (default: all); see pncnn_jax.paper.RUNS")
  parser.add_argument("--results", default="docs/RESULTS.md", help="the report to write (and its .json)")
  parser.add_argument("--ship", default="", help="write finished runs' weights + manifests to this folder")
  args = parser.parse_args(argv)
  workdir = pathlib.Path(os.path.abspath(args.workdir))
  try:
    runs = paper.select(args.only)
    if workdir.exists() and not workdir.is_dir():
      raise ValueError(f"--workdir={args.workdir} is a file, not a directory")
    if args.stage in ("all", "train"):
      train_runs(workdir, args.scale, runs)
    if args.stage in ("all", "evaluate", "report"):
      summary = results.evaluate_all(workdir, args.scale, evaluate=args.stage != "report")
      report.write(summary, pathlib.Path(args.results), workdir)
      print(f"wrote {args.results} and {pathlib.Path(args.results).with_suffix('.json')}", flush=True)
      if args.ship:
        results.ship_weights(workdir, args.scale, summary, pathlib.Path(args.ship))
  except (ValueError, FileNotFoundError, FloatingPointError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
