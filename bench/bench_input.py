"""Input-pipeline throughput: KITTI 16-bit PNG pairs -> TFDS build -> grain pipeline (decode, crop, batch).

  python bench/bench_input.py [--pairs 48] [--batches 12] [--output docs/develop/benchmarks-log.md] [--json out.json]
  python bench/bench_input.py --tiny            (4 small pairs, a few batches: what tests/bench runs)

Steps, all in a temporary folder that is removed at the end (nothing is written elsewhere but --output/--json):

1. Writes a KITTI-layout tree (`kitti_depth.find_examples` reads it: train/<drive>/proj_depth/{velodyne_raw,
   groundtruth}/image_02/<frame>.png) of `--pairs` full-size 1242x375 16-bit PNG pairs: the input with ~5 % of
   the pixels set (LiDAR-like: the lower 2/3 of the frame, on 64 scan rows), the ground truth with ~20 %, depth
   [m] * 256 stored as uint16 as KITTI does, from a smooth depth field (road plane + noise), so that the files
   compress about as real KITTI files do (55 KB and 190 KB for the real pair in tests' kitti_depth_mini).
2. PNG decode rate of one pair (input + ground truth) with every decoder installed: PIL through
   `io.read_png_uint16` (the checked reader the builder and `predict` use) and PIL bare (`np.asarray(Image.open)`).
   pypng and imageio are tried if installed (they are not dependencies); OpenCV is never used.
3. The TFDS build (`python -m pncnn_jax.data.build kitti_depth`): PNG decode + zlib encode into ArrayRecord,
   frames per second.
4. The training pipeline (`data.make_iterator`: ArrayRecord read, zlib decode, uint16 -> metres, random 352x1216
   crop, batch of 4) in a fresh process per setting: pinned to one core with one reader thread, and on all cores
   with as many reader threads as cores; the synthetic pipeline (scenes rendered on the fly) the same way. Frames
   per second after the first batch (which includes start-up), over `--batches` batches.

Reported with the load average (os.getloadavg) before and after: on a shared machine the rates are lower bounds.
"Cores to keep one GPU busy" = the frame rate of the measured GPU training step (batch 4 in 41 ms on an H100 at
TF32, docs/develop/benchmarks-log.md: 97.6 frames/s) / frames per second of one core.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from sections import command, write_section  # noqa: E402  (bench/ is the script's folder)

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing it

KITTI_H, KITTI_W = 375, 1242
DRIVE = "2011_09_26_drive_0001_sync"
GPU_STEP_S, GPU_BATCH = 0.041, 4  # H100, TF32, 352x1216 (docs/develop/benchmarks-log.md, bench_gpu.py 2026-11-26)


def kitti_pair(rng: np.random.Generator, h: int = KITTI_H, w: int = KITTI_W) -> tuple[np.ndarray, np.ndarray]:
  """(input, ground truth) raw uint16 (H, W) maps, depth [m] * 256, 0 = missing; ~5 % and ~20 % of the pixels."""
  rows = np.arange(h, dtype=np.float64)[:, None]
  cols = np.arange(w, dtype=np.float64)[None, :]
  horizon = 0.35 * h
  below = np.maximum(rows - horizon, 1.0)
  depth = np.clip(1.65 * 720.0 / below, 2.0, 80.0) + 3.0 * np.sin(cols / 57.0 + rng.uniform(0, 6)) ** 2
  depth = depth + rng.normal(0.0, 0.05, (h, w))
  lidar_rows = np.zeros((h, 1), bool)
  lidar_rows[np.linspace(horizon * 0.8, h - 1, 64).astype(int)] = True
  sparse = lidar_rows & (rng.random((h, w)) < 5e-2 * h / 64)
  target = (rows > horizon * 0.8) & (rng.random((h, w)) < 0.2 * h / (h - horizon * 0.8))
  raw = np.round(np.clip(depth, 0, 255.99) * 256).astype(np.uint16)
  return np.where(sparse, raw, 0).astype(np.uint16), np.where(target, raw, 0).astype(np.uint16)


def write_tree(root: pathlib.Path, pairs: int, seed: int = 0, h: int = KITTI_H, w: int = KITTI_W) -> list[tuple]:
  """Writes `pairs` KITTI-layout PNG pairs under root/train; returns [(input path, ground-truth path)]."""
  from pncnn_jax.data import io  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  out = []
  base = root / "train" / DRIVE / "proj_depth"
  for i in range(pairs):
    sparse, target = kitti_pair(rng, h, w)
    a = base / "velodyne_raw" / "image_02" / f"{i:010d}.png"
    b = base / "groundtruth" / "image_02" / f"{i:010d}.png"
    io.write_png_uint16(a, sparse)
    io.write_png_uint16(b, target)
    out.append((a, b))
  return out


def _decoders() -> dict:
  """name -> function(path) -> (H, W) uint16, for every PNG decoder installed (OpenCV left out on purpose)."""
  from PIL import Image  # pylint: disable=g-import-not-at-top

  from pncnn_jax.data import io  # pylint: disable=g-import-not-at-top

  def pil_bare(p):
    with Image.open(p) as img:
      return np.asarray(img)

  out = {"PIL, io.read_png_uint16 (checked)": io.read_png_uint16, "PIL, bare": pil_bare}
  try:
    import png  # pylint: disable=g-import-not-at-top  (pypng)

    def pypng(p):
      w, h, rows, _ = png.Reader(filename=str(p)).read_flat()
      return np.asarray(rows, np.uint16).reshape(h, w)
    out["pypng"] = pypng
  except ImportError:
    pass
  try:
    import imageio.v3 as iio  # pylint: disable=g-import-not-at-top
    out["imageio"] = iio.imread
  except ImportError:
    pass
  return out


def decode_rates(files: list[tuple], min_s: float = 1.0) -> dict:
  """Pairs per second (wall) and CPU seconds per pair of each installed decoder on one thread (every decoder's
  output checked equal to PIL's)."""
  res = {}
  ref = [_decoders()["PIL, bare"](a) for a, _ in files[:2]]
  for name, fn in _decoders().items():
    for r, (a, _) in zip(ref, files[:2]):
      if not np.array_equal(fn(a), r):
        raise RuntimeError(f"decoder {name} does not reproduce PIL's values on {a}")
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while True:
      for a, b in files:
        fn(a)
        fn(b)
        n += 1
      if time.perf_counter() - t0 >= min_s:
        break
    res[name] = {"pairs_per_s": n / (time.perf_counter() - t0), "cpu_s_per_pair": (time.process_time() - c0) / n}
  return res


def _pipeline_child(kind: str, data_dir: str, threads: int, batches: int, batch: int, crop: tuple) -> dict:
  """Frames per second of `data.make_iterator` (this process, as pinned by its parent)."""
  from pncnn_jax import data  # pylint: disable=g-import-not-at-top
  cfg = {"batch_size": batch, "crop": "random", "crop_height": crop[0], "crop_width": crop[1],
         "num_epochs": None, "num_threads": threads, "split": "train"}
  cfg |= ({"dataset": "kitti_depth", "data_dir": data_dir} if kind == "kitti" else
          {"dataset": "synthetic", "synthetic_size": 10000})
  t0 = time.perf_counter()
  it = data.make_iterator(cfg)
  first = next(it)
  first_s = time.perf_counter() - t0
  assert first["sparse"].shape == (batch, *crop, 1), first["sparse"].shape
  c0, t0 = time.process_time(), time.perf_counter()
  for _ in range(batches):
    b = next(it)
  dt = time.perf_counter() - t0
  assert np.isfinite(b["sparse"]).all() and (b["target"] > 0).any()
  return {"frames_per_s": batches * batch / dt, "cpu_s_per_frame": (time.process_time() - c0) / (batches * batch),
          "first_batch_s": first_s}


def pipeline_rate(kind: str, data_dir: str, cores: list[int], threads: int, batches: int, batch: int,
                  crop: tuple) -> dict:
  """`_pipeline_child` in a fresh process pinned to `cores` (os.sched_setaffinity), `threads` reader threads."""
  code = ("import json, os, sys; sys.path.insert(0, sys.argv[1]); os.sched_setaffinity(0, json.loads(sys.argv[2]));"
          "import bench_input as b; print(json.dumps(b._pipeline_child(*json.loads(sys.argv[3]))))")
  args = [kind, data_dir, threads, batches, batch, list(crop)]
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", code, str(HERE), json.dumps(cores), json.dumps(args)],
                       capture_output=True, text=True, env=env, check=False)
  if out.returncode != 0:
    raise RuntimeError(f"the {kind} pipeline process failed: {out.stderr.strip()[-2000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1]) | {"cores": len(cores), "threads": threads}


def run(pairs: int, batches: int, batch: int, crop: tuple, frame: tuple, workdir: pathlib.Path) -> dict:
  from pncnn_jax.data import build  # pylint: disable=g-import-not-at-top
  res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
         "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "cores": len(_cores()),
         "python": platform.python_version(), "pairs": pairs, "frame": list(frame), "crop": list(crop),
         "batch": batch, "batches": batches, "load_start": os.getloadavg()}
  files = write_tree(workdir / "kitti", pairs, h=frame[0], w=frame[1])
  res["png_kb"] = {"input": np.mean([a.stat().st_size for a, _ in files]) / 1e3,
                   "ground_truth": np.mean([b.stat().st_size for _, b in files]) / 1e3}
  res["decode_pairs_per_s"] = decode_rates(files)
  t0 = time.perf_counter()
  build.build("kitti_depth", workdir / "kitti", workdir / "tfds")
  res["build_pairs_per_s"] = pairs / (time.perf_counter() - t0)
  cores = _cores()
  res["pipelines"] = {}
  for kind in ("kitti", "synthetic"):
    for name, cs, threads in (("one core", cores[:1], 1), ("all cores", cores, len(cores))):
      r = pipeline_rate(kind, str(workdir / "tfds"), cs, threads, batches, batch, crop)
      res["pipelines"][f"{kind}, {name}"] = r
      print(json.dumps({f"{kind}, {name}": r}), file=sys.stderr, flush=True)
  res["load_end"] = os.getloadavg()
  return res


def _cores() -> list[int]:
  return sorted(os.sched_getaffinity(0))


def render(res: dict, command: str) -> str:
  gpu_fps = GPU_BATCH / GPU_STEP_S
  k1, kall = res["pipelines"]["kitti, one core"], res["pipelines"]["kitti, all cores"]
  s1 = res["pipelines"]["synthetic, one core"]
  # A loaded machine gives a process a fraction of a core, so the wall rate understates a core; the CPU time per
  # frame does not (to first order): one free core delivers 1 / (CPU s per frame) frames per second.
  per_core = 1.0 / max(k1["cpu_s_per_frame"], 1e-9)
  need = math.ceil(gpu_fps / per_core)
  need_synthetic = math.ceil(gpu_fps * s1["cpu_s_per_frame"])
  h, w = res["frame"]
  lines = [
      "## Input pipeline (bench/bench_input.py)",
      "",
      f"**Measured under load**, {res['date']}: {res['machine']}, {res['cores']} cores, Python {res['python']}; "
      f"1-minute load average {res['load_start'][0]:.2f} at the start and {res['load_end'][0]:.2f} at the end "
      f"(5-minute {res['load_start'][1]:.2f} and {res['load_end'][1]:.2f}): other jobs shared the machine, so "
      f"these rates are lower bounds. Command: `{command}`. {res['pairs']} KITTI-layout pairs of {w}x{h} 16-bit "
      f"PNGs written by the script (input ~5 % of the pixels on 64 scan rows, ground truth ~20 %; "
      f"{res['png_kb']['input']:.0f} KB and {res['png_kb']['ground_truth']:.0f} KB per file on average, the real "
      "pair in tests' kitti_depth_mini: 55 and 190 KB).",
      "",
      "| stage | setting | frames (pairs) per second | CPU s per frame | first batch [s] |",
      "|---|---|---|---|---|",
  ]
  for name, r in res["decode_pairs_per_s"].items():
    r = r if isinstance(r, dict) else {"pairs_per_s": r}  # runs before 2026-11-29 07:20 UTC kept the wall rate only
    cpu = f"{r['cpu_s_per_pair']:.4f}" if "cpu_s_per_pair" in r else "-"
    lines.append(f"| PNG decode of a pair, one thread | {name} | {r['pairs_per_s']:.1f} | {cpu} | - |")
  lines.append(f"| TFDS build (`python -m pncnn_jax.data.build`: PNG decode + zlib encode), one process | - | "
               f"{res['build_pairs_per_s']:.1f} | - | - |")
  for name, r in res["pipelines"].items():
    kind, where = name.split(", ")
    what = ("KITTI pipeline (ArrayRecord read, zlib decode, metres, random crop, batch)" if kind == "kitti" else
            "synthetic pipeline (scenes rendered on the fly, random crop, batch)")
    lines.append(f"| {what} | {where} ({r['cores']} core(s), {r['threads']} reader thread(s)) | "
                 f"{r['frames_per_s']:.1f} | {r['cpu_s_per_frame']:.4f} | {r['first_batch_s']:.2f} |")
  lines += [
      "",
      f"Crop {res['crop'][0]}x{res['crop'][1]}, batch {res['batch']}, {res['batches']} timed batches after the "
      "first. CPU s per frame = the process's CPU time (all threads) per frame.",
      "",
      f"**Cores to keep one GPU busy.** The GPU training step measured on an H100 (batch {GPU_BATCH} in "
      f"{GPU_STEP_S * 1e3:.0f} ms at TF32) consumes {gpu_fps:.0f} frames/s. The KITTI pipeline spends "
      f"{k1['cpu_s_per_frame'] * 1e3:.1f} ms of CPU per frame on one core, i.e. one free core of this machine "
      f"delivers about {per_core:.0f} frames/s, so **{need} core(s)** (reader threads, `config.data.num_threads`) "
      f"keep that GPU fed from the prepared ArrayRecord files (measured here, shared: {k1['frames_per_s']:.1f} "
      f"frames/s on one core, {kall['frames_per_s']:.1f} on all {kall['cores']}). PNG decoding happens once, at "
      f"the build, not per training step. The synthetic pipeline renders every scene on the fly "
      f"({s1['cpu_s_per_frame'] * 1e3:.0f} ms of CPU per frame): it would need about {need_synthetic} cores, which "
      "is why `python -m pncnn_jax.experiments.reproduce` renders its scenes once into `synthetic_cache_dir`.",
  ]
  return "\n".join(lines)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--pairs", type=int, default=48, help="PNG pairs written and built")
  p.add_argument("--batches", type=int, default=12, help="timed batches per pipeline setting")
  p.add_argument("--batch", type=int, default=4, help="batch size")
  p.add_argument("--tiny", action="store_true", help="4 pairs of 64x160, 32x96 crops, 2 batches (the test)")
  p.add_argument("--output", type=pathlib.Path, default=None, help="markdown file to write the 'input' section into")
  p.add_argument("--json", type=pathlib.Path, default=None, help="also write the raw results as JSON")
  p.add_argument("--render_only", type=pathlib.Path, default=None, help="render the --json file of an earlier run")
  args = p.parse_args(argv)
  if args.render_only:
    try:
      res = json.loads(args.render_only.read_text())
    except (OSError, ValueError) as e:
      print(f"error: --render_only {args.render_only}: {e}", file=sys.stderr)
      return 2
    body = render(res, res.get("command", "python bench/bench_input.py"))
    print(body)
    if args.output:
      write_section(args.output, "input", body)
    return 0
  if min(args.pairs, args.batches, args.batch) < 1:
    print("error: --pairs, --batches and --batch must be >= 1", file=sys.stderr)
    return 2
  for name in ("output", "json"):
    path = getattr(args, name)
    if path is not None and not path.parent.is_dir():
      print(f"error: --{name} {path}: folder {path.parent} does not exist", file=sys.stderr)
      return 2
  frame, crop = ((64, 160), (32, 96)) if args.tiny else ((KITTI_H, KITTI_W), (352, 1216))
  if args.tiny:
    args.pairs, args.batches, args.batch = 4, 2, 2
  workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench_input_"))
  try:
    res = run(args.pairs, args.batches, args.batch, crop, frame, workdir)
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  res["command"] = command("bench_input.py", argv)
  body = render(res, res["command"])
  print(body)
  if args.json:
    args.json.write_text(json.dumps(res, indent=1))
  if args.output:
    write_section(args.output, "input", body)
  return 0


if __name__ == "__main__":
  sys.exit(main())
