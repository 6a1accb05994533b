r"""The demo behind `make demo`: the shipped models on fresh synthetic scenes, and a short training run.

  python -m pncnn_jax.demo --workdir demo_out [--scenes 32] [--train_steps 100] [--quick]

1. Evaluates every model shipped in `pncnn_jax/pretrained/synthetic/` (trained by `python -m
pncnn_jax.experiments.reproduce`)
   and the shipped 4-member pNCNN ensemble with its fusion rules on `--scenes` scenes that no run has seen (the
   synthetic 'test' split of scene seed 1; training, validation and docs/results/RESULTS.md use seed 0), and checks the
   paper's claims on them, as docs/results/RESULTS.md does.
2. Trains pNCNN (masked c0) for `--train_steps` steps of configs/synthetic.py, to show that training runs and
   what its first steps reach (machine-dependent: summation orders differ between CPUs).

Writes, under the workdir: results.md (the claims and tables), results.json, results/sparsification.png,
results/c0_histogram.png, results/panels.png, training_curves.png and the training run in train_pncnn_masked/.
About 6 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys
import time

from pncnn_jax.runtime import cli

CONFIG_FILE = cli.CONFIG_DIR / "synthetic.py"  # packaged: the demo runs from an installed package too
FRESH_SEED = 1  # scene seed of the demo's evaluation scenes (reproduce uses 0)
SHOWN = ("ncnn", "ncnn_conf_l1", "ncnn_conf_l1_masked", "ncnn_conf_l2", "ncnn_conf_l2_masked", "pncnn", "pncnn_masked",
         "pncnn_exp", "pncnn_exp_masked", "pncnn_beta_masked", "sparse_var_beta_detach_masked")


@functools.lru_cache(maxsize=None)
def fresh_scenes(crop: tuple[int, int], scenes: int) -> tuple[dict, ...]:
  """The demo's `scenes` fresh scenes at `crop`, in batches of 8, rendered once: every model's passes reuse them."""
  from pncnn_jax.experiments import evaluate_runs  # pylint: disable=g-import-not-at-top
  return tuple(evaluate_runs.scene_batches(crop, scenes, scene_seed=FRESH_SEED))


def evaluate_shipped(root: pathlib.Path, scenes: int) -> dict:
  """results.evaluate_model of each shipped model on the fresh scenes; the summary report.write takes."""
  import jax  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top

  from pncnn_jax import pretrained  # pylint: disable=g-import-not-at-top
  from pncnn_jax.experiments import evaluate_runs  # pylint: disable=g-import-not-at-top
  from pncnn_jax.experiments import runs as runs_lib  # pylint: disable=g-import-not-at-top
  (root / "eval").mkdir(parents=True, exist_ok=True)
  runs, manifests = {}, {}
  for name in [n for n in SHOWN if n in pretrained.available("synthetic")]:
    t0 = time.time()
    variables, manifest = pretrained.load(f"synthetic:{name}")
    manifests[name] = manifest
    config = ml_collections.ConfigDict(manifest["config"])
    crop = (config.data.eval_crop_height, config.data.eval_crop_width)
    runs[name] = evaluate_runs.evaluate_model(
        config, variables, lambda crop=crop: iter(fresh_scenes(crop, scenes)),
        panels_path=root / "eval" / f"{name}_panels.npz")
    runs[name].update({"name": name, "step": manifest["step"], "train_wall_s": manifest.get("train_wall_s")})
    m = runs[name]["metrics"]
    print(f"  {name:22s} MAE {m['mae']:7.1f} mm  RMSE {m['rmse']:7.1f} mm  "
          f"AUSE {runs[name]['uncertainty']['ause_pncnn']:.3f}  ({time.time() - t0:.0f} s)", flush=True)
  first = next(iter(manifests.values()), {})
  return {"scale": first.get("scale", "cpu"), "trained_at": runs_lib.describe_scales(runs),
          "recipe": first.get("recipe", {}), "runs": runs, "fusion": None,
          "not_finished": [n for n in SHOWN if n not in runs], "commit": first.get("commit"),
          "missing_note": ("Not shipped yet (their runs of `python -m pncnn_jax.experiments.reproduce` have not "
                           "finished)"),
          "date": time.strftime("%Y-%m-%d"), "devices": [str(d) for d in jax.devices()], "jax": jax.__version__,
          "scenes": f"{scenes} fresh scenes (synthetic test split, scene seed {FRESH_SEED})"}


def evaluate_shipped_fusion(scenes: int) -> dict | None:
  """Members and fusion rules of the shipped 4-run pNCNN ensemble (`runs_lib.ENSEMBLE`) on the fresh scenes, as
  results.evaluate_fusion measures them on the test scenes; None unless all four are shipped. `steps`: each member's
  training steps (the claim names unequal lengths)."""
  import ml_collections  # pylint: disable=g-import-not-at-top

  from pncnn_jax import pretrained  # pylint: disable=g-import-not-at-top
  from pncnn_jax.experiments import evaluate_runs  # pylint: disable=g-import-not-at-top
  from pncnn_jax.experiments import runs as runs_lib  # pylint: disable=g-import-not-at-top
  if not set(runs_lib.ENSEMBLE) <= set(pretrained.available("synthetic")):
    return None
  t0 = time.time()
  loaded = [pretrained.load(f"synthetic:{n}") for n in runs_lib.ENSEMBLE]
  config = ml_collections.ConfigDict(loaded[0][1]["config"])
  crop = (config.data.eval_crop_height, config.data.eval_crop_width)
  rows = evaluate_runs.fusion_rows(config, [v for v, _ in loaded], iter(fresh_scenes(crop, scenes)))
  print(f"  {'ensemble of ' + str(len(loaded)) + ' pncnn_masked seeds':22s} RMSE mean {rows['mean']['rmse']:.1f} mm, "
        f"MLE {rows['mle']['rmse']:.1f} mm  ({time.time() - t0:.0f} s)", flush=True)
  return {"members": list(runs_lib.ENSEMBLE), "steps": {n: m["step"] for n, (_, m) in zip(runs_lib.ENSEMBLE, loaded)},
          "rows": rows}


def train_short(root: pathlib.Path, steps: int) -> list[dict]:
  from pncnn_jax import from_config  # pylint: disable=g-import-not-at-top
  from pncnn_jax.training import loop  # pylint: disable=g-import-not-at-top
  cfg = from_config.load_config(f"{CONFIG_FILE}:pncnn")
  cfg.model.mask_input_confidence = True
  cfg.steps_per_epoch = max(1, steps // 4)
  cfg.num_epochs = max(1, steps // cfg.steps_per_epoch)
  cfg.lr_decay_epochs = cfg.num_epochs  # no decay in so few steps
  cfg.progress_bar = False
  wd = root / "train_pncnn_masked"
  loop.train_and_evaluate(cfg, wd)
  return [json.loads(x) for x in (wd / "metrics.jsonl").read_text().splitlines()]


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m pncnn_jax.demo", description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", default="demo_out", help="output directory")
  parser.add_argument("--scenes", type=int, default=32, help="fresh scenes to evaluate the shipped models on")
  parser.add_argument("--train_steps", type=int, default=100, help="steps of the short pNCNN training (0: none)")
  parser.add_argument("--quick", action="store_true", help="4 scenes, 4 training steps (smoke test)")
  args = parser.parse_args(argv)
  if args.scenes < 1 or args.train_steps < 0:
    print("error: --scenes must be >= 1 and --train_steps >= 0", file=sys.stderr)
    return 2
  if args.quick:
    args.scenes, args.train_steps = 4, 4

  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every file it writes at INFO
  from pncnn_jax import pretrained  # pylint: disable=g-import-not-at-top
  from pncnn_jax.experiments.pages import figures as pages_figures  # pylint: disable=g-import-not-at-top
  from pncnn_jax.experiments.pages import report  # pylint: disable=g-import-not-at-top

  if not pretrained.available("synthetic"):
    print(f"error: no shipped models in {pretrained.ROOT / 'synthetic'}", file=sys.stderr)
    return 2
  root = pathlib.Path(args.workdir).resolve()
  root.mkdir(parents=True, exist_ok=True)
  t_start = time.time()
  print(f"pncnn_jax demo: the shipped models on {args.scenes} fresh synthetic scenes", flush=True)
  summary = evaluate_shipped(root, args.scenes)
  summary["fusion"] = evaluate_shipped_fusion(args.scenes)
  intro = (f"The models shipped in `pncnn_jax/pretrained/synthetic/`, evaluated by `make demo` on {summary['scenes']}"
           ": scenes that no training, validation or docs/results/RESULTS.md run has seen. The claims are checked with "
           "the thresholds of docs/results/RESULTS.md. Each model was trained by "
           "`python -m pncnn_jax.experiments.reproduce` at "
           f"the scale its manifest names ({summary['trained_at']}).")
  report.write(summary, root / "results.md", root, intro=intro)
  if args.train_steps:
    print(f"pncnn_jax demo: training pNCNN (masked c0) for {args.train_steps} steps", flush=True)
    rows = train_short(root, args.train_steps)
    pages_figures.training_curves({"pncnn_masked (short run)": rows}, root / "training_curves.png")
  print((root / "results.md").read_text().split("## Accuracy")[0])
  print(f"total {time.time() - t_start:.0f} s; wrote {root}/results.md, results.json, results/*.png"
        + (", training_curves.png" if args.train_steps else ""))
  return 0


if __name__ == "__main__":
  from pncnn_jax.runtime import hostmem
  hostmem.reexec_with_hugepages()  # 2 MiB pages for XLA's per-step buffers (see pncnn_jax/runtime/hostmem.py)
  sys.exit(main())
