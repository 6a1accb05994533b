"""Behaviour across sensors: the shipped models on the synthetic test scenes seen by other depth sensors.

The shipped models were trained on one simulated Velodyne HDL-64E (64 beams). This evaluates them, unchanged, on
the same held-out scenes (test split, centre crop of the long recipe's evaluation frame) with

  * `lidar64`: the training sensor (the reference row);
  * `lidar32`, `lidar16`: every 2nd / 4th laser of the HDL-64E (`SyntheticConfig.lidar_beams`): a 32- or 16-beam
    LiDAR with the same vertical field, mount, noise and dropouts;
  * `vo`: sparse points at visual-odometry density, VO_DENSITY (0.15 %) of the pixels drawn uniformly from the
    camera's visible surface within the LiDAR's range, with the LiDAR's range noise (no LiDAR/camera parallax, so
    no disturbed points);

against the same semi-dense ground truth (the 64-beam field's), and writes docs/results/SENSORS.md (+ .json): MAE, RMSE,
AUSE (pNCNN's normalisation), AUCE per model and sensor, and the input density. Regenerate with

  python -m pncnn_jax.experiments.sensors --output docs/results/SENSORS.md
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import numpy as np

from pncnn_jax import evaluate, losses
from pncnn_jax.checkpoints import loader
from pncnn_jax.data import sparsify, synthetic
from pncnn_jax.experiments import runs

SENSORS = ("lidar64", "lidar32", "lidar16", "vo")
VO_DENSITY = 0.0015  # visual odometry / SLAM feature points: ~0.1-0.2 % of the pixels
# The recommended shipped pNCNN and the official-form networks (their unmasked c0, the paper's models).
MODELS = ("sparse_var_beta_detach_masked", "pncnn", "pncnn_exp", "ncnn_conf_l1")
SCENE_SEED = 0
TEST_STREAM = 2  # the pipeline's test split (data.pipeline: train 0, val 1, test 2)


def sensor_batch(sensor: str, indices: Sequence[int], crop: tuple[int, int]) -> dict[str, np.ndarray]:
  """One NHWC batch of test scenes `indices` as `sensor` sees them, centre-cropped to `crop` (rows, columns)."""
  if sensor not in SENSORS:
    raise ValueError(f"sensor must be one of {', '.join(SENSORS)}, got {sensor!r}")
  beams = int(sensor[5:]) if sensor.startswith("lidar") else 64
  cfg = synthetic.SyntheticConfig(lidar_beams=beams)
  window = sparsify.crop_window(cfg.height, cfg.width, crop[0], crop[1], "center")
  examples = []
  for i in indices:
    ex = synthetic.generate(SCENE_SEED, i, cfg, window=window, stream=TEST_STREAM)
    if sensor == "vo":
      rng = np.random.default_rng((SCENE_SEED, TEST_STREAM, i, 7))
      dense = ex["dense"]
      pick = (rng.uniform(size=dense.shape) < VO_DENSITY) & (dense > 0) & (dense < cfg.max_range_m)
      noisy = dense + rng.normal(0.0, cfg.range_noise_m, dense.shape).astype(np.float32)
      ex["sparse"] = np.where(pick, np.maximum(noisy, 0.0), 0.0).astype(np.float32)
      ex["disturbed"] = np.zeros_like(ex["disturbed"])
    examples.append(ex)
  return {k: np.stack([e[k] for e in examples]) for k in ("sparse", "target", "disturbed")}


def batches(sensor: str, num_scenes: int, crop: tuple[int, int], batch_size: int) -> Iterator[dict[str, np.ndarray]]:
  for start in range(0, num_scenes, batch_size):
    yield sensor_batch(sensor, range(start, min(start + batch_size, num_scenes)), crop)


def evaluate_models(models: Sequence[str], sensors: Sequence[str], num_scenes: int, crop: tuple[int, int],
                    batch_size: int = 8) -> list[dict]:
  """One row per (model, sensor): density of the input, MAE/RMSE [mm], AUSE (pNCNN), AUCE (None without sigma)."""
  inputs = {s: list(batches(s, num_scenes, crop, batch_size)) for s in sensors}
  rows = []
  for name in models:
    loaded = loader.load(name if ":" in name else f"synthetic:{name}")
    model = loaded.build_model()
    eval_fn = evaluate.make_eval_fn(model, "kitti")
    for s in sensors:
      res = evaluate.run_evaluation(model, loaded.variables, inputs[s], loss_name=loaded.loss, eval_fn=eval_fn)
      density = float(np.mean([np.mean(b["sparse"] > 0) for b in inputs[s]]))
      rows.append({"model": name, "sensor": s, "density": density, "mae_mm": res.metrics["mae"],
                   "rmse_mm": res.metrics["rmse"], "ause": res.uncertainty.get("ause_pncnn"),
                   "auce": res.uncertainty.get("auce"),
                   "has_sigma": loaded.loss in losses.PROBABILISTIC_LOSSES, "num_images": res.metrics["num_images"]})
      print(json.dumps(rows[-1]), flush=True)
  return rows


def render(rows: list[dict], meta: dict) -> str:
  """docs/results/SENSORS.md: the table, per model, each sensor's figures and their ratio to the training sensor's."""
  def f(v, fmt):
    return "-" if v is None else format(v, fmt)

  ref = {r["model"]: r for r in rows if r["sensor"] == "lidar64"}
  lines = [
      "# Behaviour across sensors",
      "",
      "The shipped models were trained on one simulated 64-beam LiDAR. Here they run unchanged on the same held-out "
      f"synthetic scenes ({meta['num_scenes']} test scenes, centre {meta['crop'][0]}x{meta['crop'][1]} crops) seen "
      "by other sensors: every 2nd and every 4th laser of that LiDAR (a 32- and a 16-beam LiDAR with the same "
      f"vertical field), and sparse points at visual-odometry density ({VO_DENSITY:.2%} of the pixels, uniform over "
      "the visible surface, with the LiDAR's 2 cm range noise). The ground truth is the same for every sensor. MAE and "
      "RMSE in mm (means of per-image values); AUSE in pNCNN's normalisation (lower: sigma ranks the errors better; "
      "0 = the oracle's order); AUCE (lower: better calibrated); '-': the model has no sigma (NCNN-Conf-L1's AUSE "
      "ranks by its output confidence). In brackets: the ratio to the model's figure on its training sensor.",
      "",
      f"Regenerate: `{meta['command']}` ({meta['date']}, commit {meta['commit']}, {meta['seconds']:.0f} s on "
      f"{meta['machine']}).",
      "",
      "| model | sensor | input density | MAE [mm] | RMSE [mm] | AUSE | AUCE |",
      "|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    b = ref.get(r["model"])

    def ratio(k):
      if b is None or r["sensor"] == "lidar64" or r[k] is None or not b[k]:
        return ""
      return f" ({r[k] / b[k]:.2f}x)"

    lines.append(f"| {r['model']} | {r['sensor']} | {r['density']:.2%} | {r['mae_mm']:.0f}{ratio('mae_mm')} | "
                 f"{r['rmse_mm']:.0f}{ratio('rmse_mm')} | {f(r['ause'], '.3f')}{ratio('ause')} | "
                 f"{f(r['auce'], '.3f')}{ratio('auce')} |")
  lines += ["", "## What it says", ""] + summary(rows)
  return "\n".join(lines) + "\n"


def summary(rows: list[dict]) -> list[str]:
  """Measured statements per model: each sensor's MAE as a ratio to the training sensor's ('holds' within 1.5x)
  and its AUSE beside the training sensor's (does sigma still rank the errors as well)."""
  out = []
  ref = {r["model"]: r for r in rows if r["sensor"] == "lidar64"}
  for name in dict.fromkeys(r["model"] for r in rows):
    b = ref.get(name)
    if b is None:
      continue
    parts = []
    for r in rows:
      if r["model"] != name or r["sensor"] == "lidar64":
        continue
      holds = r["mae_mm"] <= 1.5 * b["mae_mm"]
      text = f"{r['sensor']}: MAE {r['mae_mm'] / b['mae_mm']:.2f}x ({'holds' if holds else 'breaks'})"
      if r["ause"] is not None and b["ause"] is not None:
        text += f", AUSE {r['ause']:.3f} against {b['ause']:.3f}"
      parts.append(text)
    out.append(f"- **{name}** (trained sensor: MAE {b['mae_mm']:.0f} mm): " + "; ".join(parts) + ".")
  out += ["", "'holds': the MAE is at most 1.5x the model's MAE on the sensor it was trained with (a threshold fixed "
          "before the run)."]
  return out


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--output", default="docs/results/SENSORS.md", help="the page (its .json beside it)")
  p.add_argument("--models", default=",".join(MODELS), help="shipped model names, comma-separated")
  p.add_argument("--sensors", default=",".join(SENSORS))
  p.add_argument("--num_scenes", type=int, default=32)
  p.add_argument("--crop", default="x".join(map(str, runs.SCALES["long"]["eval_crop"])), help="HxW")
  args = p.parse_args(argv)
  try:
    crop = tuple(int(v) for v in args.crop.split("x"))
    if len(crop) != 2 or min(crop) < 8:
      raise ValueError
  except ValueError:
    print(f"error: --crop {args.crop!r}: expected HxW, each >= 8", file=sys.stderr)
    return 2
  sensors = [s.strip() for s in args.sensors.split(",") if s.strip()]
  unknown = [s for s in sensors if s not in SENSORS]
  if unknown or args.num_scenes < 1:
    print(f"error: --sensors must be among {', '.join(SENSORS)} and --num_scenes >= 1", file=sys.stderr)
    return 2
  if "lidar64" not in sensors:
    sensors.insert(0, "lidar64")  # the reference row of every ratio
  t = time.time()
  rows = evaluate_models([m.strip() for m in args.models.split(",") if m.strip()], sensors, args.num_scenes, crop)
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False).stdout.strip() or "unknown"
  meta = {"date": time.strftime("%Y-%m-%d"), "commit": commit, "seconds": time.time() - t,
          "machine": f"{platform.machine()}, {os.cpu_count()} cores", "num_scenes": args.num_scenes,
          "crop": list(crop), "command": "python -m pncnn_jax.experiments.sensors "
          + " ".join(argv if argv is not None else sys.argv[1:])}
  out = pathlib.Path(args.output)
  out.write_text(render(rows, meta))
  out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
  print(f"wrote {out} and {out.with_suffix('.json')}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
