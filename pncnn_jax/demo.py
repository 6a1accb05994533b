r"""The demo behind `make demo`: train pNCNN and the NCNN baseline on synthetic scenes, evaluate both.

  python -m pncnn_jax.demo --workdir demo_out [--variants pncnn,ncnn] [--quick]

Uses configs/synthetic.py (about 10 minutes in total on 2 CPU cores). Writes, under the workdir:
  <variant>/                   each training run (checkpoints, metrics.jsonl, config.json) and its evaluation
                               report <variant>/eval_best/ (results.json/csv/md, sparsification.png, panels.png)
  results.md, results.csv, results.json    the comparison table (validation scenes, best checkpoint)
  sparsification.png           both models' sparsification curves
  training_curves.png          validation RMSE per epoch
and prints the table. A rerun resumes / reuses finished runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import sys
import time

CONFIG_FILE = pathlib.Path(__file__).resolve().parents[1] / "configs" / "synthetic.py"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m pncnn_jax.demo", description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", default="demo_out", help="output directory")
  parser.add_argument("--variants", default="pncnn,ncnn", help="comma-separated model variants")
  parser.add_argument("--quick", action="store_true", help="a few steps only (smoke test)")
  args = parser.parse_args(argv)

  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every file it writes at INFO
  import jax  # pylint: disable=g-import-not-at-top
  from pncnn_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from pncnn_jax import evaluate, train, viz  # pylint: disable=g-import-not-at-top

  if not CONFIG_FILE.is_file():
    print(f"error: {CONFIG_FILE} not found (run the demo from a clone of the repository)", file=sys.stderr)
    return 2
  root = pathlib.Path(args.workdir).resolve()
  root.mkdir(parents=True, exist_ok=True)
  variants = [v for v in args.variants.split(",") if v]
  print(f"pncnn_jax demo: training {', '.join(variants)} on synthetic scenes; devices {jax.devices()}")
  t_start = time.time()
  rows, curves, histories, timings = {}, {}, {}, {}
  for variant in variants:
    cfg = config_lib.load_config(f"{CONFIG_FILE}:{variant}")
    if args.quick:
      cfg.steps_per_epoch, cfg.num_epochs, cfg.data.eval_synthetic_size = 2, 1, 4
    wd = root / variant
    t0 = time.time()
    train.train_and_evaluate(cfg, wd)
    t1 = time.time()
    res, _ = evaluate.evaluate_checkpoint(cfg, str(wd), "best", output_dir=str(wd / "eval_best"), progress=False)
    t2 = time.time()
    timings[variant] = {"train_s": round(t1 - t0, 1), "eval_s": round(t2 - t1, 1)}
    rows[variant] = res.summary() | timings[variant]
    curves[variant] = res.sparsification
    histories[variant] = [json.loads(x) for x in (wd / "metrics.jsonl").read_text().splitlines()]
  total = time.time() - t_start

  table = evaluate.format_table(rows, "kitti")
  (root / "results.md").write_text(
      "# pncnn_jax demo: synthetic validation scenes, best checkpoint\n\n" + table + "\n\n"
      + "\n".join(f"- {v}: train {t['train_s']} s, eval {t['eval_s']} s" for v, t in timings.items())
      + f"\n- total {total:.0f} s\n")
  keys = sorted({k for r in rows.values() for k in r})
  with open(root / "results.csv", "w", newline="", encoding="utf-8") as f:
    w = csv.writer(f)
    w.writerow(["variant"] + keys)
    for v, r in rows.items():
      w.writerow([v] + ["" if r.get(k) is None else r.get(k) for k in keys])
  (root / "results.json").write_text(json.dumps({"results": rows, "total_s": round(total, 1)}, indent=2) + "\n")
  viz.sparsification_plot(curves, root / "sparsification.png")
  viz.training_curves(histories, root / "training_curves.png")
  print(table)
  print(f"total {total:.0f} s; wrote {root}/results.md, results.csv, results.json, sparsification.png, "
        "training_curves.png and <variant>/eval_best/panels.png")
  return 0


if __name__ == "__main__":
  from pncnn_jax import hostmem
  hostmem.reexec_with_hugepages()  # 2 MiB pages for XLA's per-step buffers (see pncnn_jax/hostmem.py)
  sys.exit(main())
