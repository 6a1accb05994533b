"""Ensemble speed and the fusion table on synthetic data, in one run.

  python bench/bench_ensemble.py --output docs/develop/benchmarks-log.md [--steps 300]
  python bench/bench_ensemble.py --speed [--methods separate,map,unroll] [--rounds 4]
                                 [--output docs/develop/benchmarks-log.md]

1. Inference at 352x1216, batch 1: K = 4 pNCNN members as one vmapped call (`ensemble_members.apply_ensemble`) versus
   4 calls of the single jitted model.
2. MLE fusion (`ensemble_members.fuse_mle`, 500 Adam steps, 4 starts per pixel) of the 4 trained members' outputs on a
   full 352x1216 synthetic frame.
3. A small ensemble of 4 trained by `loop.train_and_evaluate` on synthetic scenes (configs/ensemble_synthetic.py
   shortened to fit a CPU), evaluated per member and per fusion rule on the validation scenes.

Writes the section between `<!-- ensemble:begin -->` and `<!-- ensemble:end -->` of the output file.

`--speed` (issue 42) times only the inference of K = 4 members against one model's, in one process and
interleaved: every program is compiled first, then each round times one call of the single model and one of each
ensemble method (`ensemble_members.member_map`: 'map', 'unroll', 'vmap'; 'separate' = 4 calls of the single model), in
alternating order, and reports each as a ratio to the single model's time in the same round (the machine's
drift and other jobs hit all alike). It also checks every method's members against the single model's outputs.
Writes the section between `<!-- ensemble_speed:begin -->` and `<!-- ensemble_speed:end -->`.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import pathlib
import platform
import re
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from sections import write_section  # noqa: E402  (bench/ is the script's folder)

from pncnn_jax import data, evaluate, from_config
from pncnn_jax.ensemble import members as ensemble_members
from pncnn_jax.nn import models
from pncnn_jax.training import loop

REPO = pathlib.Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- ensemble:begin -->", "<!-- ensemble:end -->"


def timed(fn, *args, reps: int = 3) -> tuple[float, float]:
  """(first call incl. compilation, median of `reps` further calls) in seconds."""
  t = time.perf_counter()
  jax.block_until_ready(fn(*args))
  first = time.perf_counter() - t
  times = []
  for _ in range(reps):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t)
  return first, float(np.median(times))


def speed(methods: list[str], rounds: int, height: int, width: int, k: int = 4) -> dict:
  """Interleaved timing of one model's forward and K members' (see the module docstring); times in seconds."""
  model = models.build_model("pncnn")
  stacked = ensemble_members.init_ensemble(model, list(range(k)), (64, 96))
  members = ensemble_members.unstack_tree(stacked)
  frame = data.generate(0, 0, stream=1)
  top, left = frame["sparse"].shape[0] - height, (frame["sparse"].shape[1] - width) // 2
  sparse = jnp.asarray(frame["sparse"][None, top:, left:left + width], jnp.float32)
  single = jax.jit(lambda v, x: model.apply(v, x, train=False))
  load = {"start": os.getloadavg()}
  t0 = time.perf_counter()
  want = [jax.block_until_ready(single(v, sparse)) for v in members]
  compile_s = {"single": time.perf_counter() - t0}
  calls = {"single": lambda: single(members[0], sparse),
           "separate": lambda: [single(v, sparse) for v in members]}
  diff = {}
  for m in methods:
    if m == "separate":
      continue
    fn = jax.jit(functools.partial(ensemble_members.apply_ensemble, model, method=m))
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(stacked, sparse))
    compile_s[m] = time.perf_counter() - t0
    diff[m] = max(float(jnp.max(jnp.abs(getattr(out, f)[i] - getattr(want[i], f))))
                  for i in range(k) for f in ("depth", "confidence"))
    calls[m] = functools.partial(fn, stacked, sparse)
  names = ["single"] + methods
  times = {n: [] for n in names}
  jax.block_until_ready([calls[n]() for n in names])  # warm
  load["timed_start"] = os.getloadavg()
  for r in range(rounds):
    for n in (names if r % 2 == 0 else names[::-1]):
      t0 = time.perf_counter()
      jax.block_until_ready(calls[n]())
      times[n].append(time.perf_counter() - t0)
    print(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {times[n][-1]:.2f}s" for n in names) +
          f", load {os.getloadavg()[0]:.2f}", flush=True)
  load["end"] = os.getloadavg()
  ratios = {n: [a / b for a, b in zip(times[n], times["single"])] for n in names}
  return {"times": times, "ratios": ratios, "compile_s": compile_s, "max_abs_diff": diff, "load": load,
          "height": height, "width": width, "k": k, "rounds": rounds,
          "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def render_speed(res: dict, command: str) -> str:
  ld, k = res["load"], res["k"]
  labels = {"single": "one model (jitted `model.apply`)", "separate": f"{k} separate calls of the single model",
            "map": f"{k} members, `apply_ensemble(method='map')` (lax.map; the CPU default)",
            "unroll": f"{k} members, `apply_ensemble(method='unroll')` (one program, {k} copies)",
            "vmap": f"{k} members, `apply_ensemble(method='vmap')` (grouped convolutions)"}
  lines = [
      "## Ensemble inference against one model on CPU (bench/bench_ensemble.py --speed)",
      "",
      f"**Measured under load**, {res['date']}: {platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}; "
      f"1-minute load average {ld['timed_start'][0]:.2f} when the timing began and {ld['end'][0]:.2f} at its end "
      f"(5-minute {ld['timed_start'][1]:.2f} and {ld['end'][1]:.2f}): other jobs shared the machine, so only the "
      f"ratios compare. Command: `{command}`. pNCNN, eval mode, batch 1, {res['height']}x{res['width']} (a "
      f"synthetic frame's bottom-centre crop), {k} members with their own random initial weights; "
      f"{res['rounds']} rounds, each timing every row once (the order reversed every other round); ratio = the "
      "row's time / the single model's in the same round.",
      "",
      "| what | time [s], median (range) | ratio to one model, median (range) | first call incl. compile [s] "
      "(one model: its 4 first calls) | max abs diff to the single model's outputs |",
      "|---|---|---|---|---|",
  ]
  for n, t in res["times"].items():
    r = res["ratios"][n]
    d = res["max_abs_diff"].get(n)
    first = f"{res['compile_s'][n]:.1f}" if n in res["compile_s"] else "-"
    lines.append(f"| {labels[n]} | {np.median(t):.3f} ({min(t):.3f}-{max(t):.3f}) | {np.median(r):.2f} "
                 f"({min(r):.2f}-{max(r):.2f}) | {first} | "
                 f"{'-' if d is None else ('0 (bitwise)' if d == 0 else f'{d:.1e}')} |")
  return "\n".join(lines)


def bench_config(steps: int, workers: int):
  c = from_config.load_config(f"{REPO / 'configs' / 'ensemble_synthetic.py'}:pncnn")
  c.data.train_crop_height, c.data.train_crop_width = 64, 192
  c.data.synthetic_size = 4 * steps  # one epoch of `steps` batches of 4
  c.data.eval_synthetic_size = 16
  c.data.num_threads = workers
  c.num_epochs, c.lr_decay_epochs = 1, 1
  c.steps_per_epoch = steps
  c.log_every_steps, c.checkpoint_every_steps, c.progress_bar = 20, -1, False
  c.eval_batch_size, c.num_eval_batches = 4, -1
  return c


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--output", default=str(REPO / "docs" / "develop" / "benchmarks-log.md"))
  p.add_argument("--steps", type=int, default=60, help="training steps of the ensemble (batch 4 per member)")
  p.add_argument("--workdir", default=None, help="ensemble run directory (default: a temporary one)")
  p.add_argument("--speed", action="store_true", help="only the interleaved inference timing (issue 42)")
  p.add_argument("--methods", default="separate,map,unroll", help="with --speed: some of separate,map,unroll,vmap")
  p.add_argument("--rounds", type=int, default=4, help="with --speed: timed rounds")
  p.add_argument("--height", type=int, default=352, help="with --speed: frame rows")
  p.add_argument("--width", type=int, default=1216, help="with --speed: frame columns")
  p.add_argument("--json", default=None, help="with --speed: also write the raw results as JSON")
  args = p.parse_args(argv)
  if args.speed:
    methods = args.methods.split(",")
    bad = [m for m in methods if m not in ("separate", "map", "unroll", "vmap")]
    if bad or args.rounds < 1 or not (1 <= args.height <= 375 and 1 <= args.width <= 1242):
      print(f"error: --methods must be some of separate,map,unroll,vmap (got {bad or args.methods}), --rounds >= 1, "
            "--height <= 375 and --width <= 1242", file=sys.stderr)
      return 2
    res = speed(methods, args.rounds, args.height, args.width)
    command = "python bench/bench_ensemble.py " + " ".join(argv if argv is not None else sys.argv[1:])
    body = render_speed(res, command.strip())
    print(body)
    if args.json:
      pathlib.Path(args.json).write_text(json.dumps(res, indent=1))
    if "--output" in (argv if argv is not None else sys.argv):
      write_section(pathlib.Path(args.output), "ensemble_speed", body)
    return 0
  lines: list[str] = []
  load0 = os.getloadavg()[0]

  # 1. vmap vs separate calls.
  model = models.build_model("pncnn")
  stacked = ensemble_members.init_ensemble(model, [0, 1, 2, 3], (64, 96))
  members = ensemble_members.unstack_tree(stacked)
  frame = data.generate(0, 0, stream=1)
  sparse = jnp.asarray(frame["sparse"][None], jnp.float32)
  vm = jax.jit(functools.partial(ensemble_members.apply_ensemble, model, method="vmap"))
  lm = jax.jit(functools.partial(ensemble_members.apply_ensemble, model, method="map"))
  single = jax.jit(lambda v, x: model.apply(v, x, train=False))
  vm_first, vm_t = timed(lambda: vm(stacked, sparse))
  lm_first, lm_t = timed(lambda: lm(stacked, sparse))
  sep_first, sep_t = timed(lambda: [single(v, sparse) for v in members])
  print(f"vmap {vm_t:.2f}s, lax.map {lm_t:.2f}s, separate {sep_t:.2f}s", flush=True)

  # 3. train the ensemble (before 2, whose inputs are its outputs).
  config = bench_config(args.steps, 2)
  workdir = args.workdir or tempfile.mkdtemp(prefix="bench_ensemble_")
  t = time.perf_counter()
  rows = loop.train_and_evaluate(config, workdir)["rows"]
  train_s = time.perf_counter() - t
  print(evaluate.format_table(rows, header="member / fusion"), flush=True)

  # 2. MLE fusion of the trained members on one full frame.
  variables, _ = ensemble_members.load_ensemble(workdir, step="latest")
  out = lm(variables, sparse)
  prec = out.confidence
  mle = jax.jit(ensemble_members.fuse_mle)
  mle_first, mle_t = timed(lambda: mle(out.depth, prec))
  spread = float(jnp.mean(jnp.max(out.depth, 0) - jnp.min(out.depth, 0)))
  print(f"mle {mle_t:.2f}s", flush=True)

  d = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
  lines += [
      BEGIN,
      "## Ensembles (bench/bench_ensemble.py)",
      "",
      f"Run {d} on {platform.machine()} `{platform.processor() or platform.platform()}`, {os.cpu_count()} CPU "
      f"cores, {jax.default_backend()} backend ({len(jax.devices())} device(s)); python {platform.python_version()}, "
      f"jax {jax.__version__}. Load average at start {load0:.1f}: the machine was shared with other jobs, so "
      "times are upper bounds.",
      "",
      "### Speed (352x1216, batch 1, 4 pNCNN members, eval mode)",
      "",
      "| what | first call (incl. compile) [s] | steady state, median of 3 [s] |",
      "|---|---|---|",
      f"| 4 members, one vmapped call (`apply_ensemble`) | {vm_first:.2f} | {vm_t:.2f} |",
      f"| 4 members, one call looping with `lax.map` (`method='map'`, the CPU default) | {lm_first:.2f} | "
      f"{lm_t:.2f} |",
      f"| 4 separate calls of the jitted single model | {sep_first:.2f} | {sep_t:.2f} |",
      f"| MLE fusion of the 4 members' outputs, 500 Adam steps x 4 starts x 428,032 pixels | {mle_first:.2f} | "
      f"{mle_t:.2f} |",
      "",
      "vmap over the members' kernels makes XLA emit grouped convolutions (feature_group_count = K), which the "
      "CPU backend runs far slower than K plain convolutions; hence `member_map`'s 'auto' = lax.map on CPU and "
      "vmap on accelerators (not measured here: no accelerator). Training is the other way round: one pNCNN "
      "ensemble train step (K=4, batch 4, 64x192) took ~12 s vmapped but 100-140 s with lax.map on this CPU "
      "under load, so `ensemble_train_step` vmaps by default.",
      "",
      f"The MLE inputs are the trained members' outputs on synthetic val frame 0 (mean member spread "
      f"max-min {spread:.3f} m per pixel). MLE uses an analytic gradient with the K components unrolled, so XLA "
      "fuses each Adam step into one pass (the autodiff version through `logsumexp` took ~150 s here).",
      "",
      "### Fusion on synthetic data (paper Table 3)",
      "",
      f"4 pNCNN members (seeds 0-3), trained together by `loop.train_and_evaluate` (one jitted step over the stacked "
      f"state, members vmapped), each on its own random half of "
      f"{config.data.synthetic_size} training scenes, {args.steps} steps of batch 4 random 64x192 crops, Adam lr "
      f"0.01 (x0.1 after the first epoch's end, i.e. constant here); {train_s / 60:.1f} min for the whole ensemble "
      f"including compilation and evaluation. Evaluated on {config.data.eval_synthetic_size} validation scenes "
      f"(128x384 bottom crops). MAE/RMSE: means of per-image values [mm]; AUSE pooled over all valid pixels "
      "(pNCNN and Gustafsson definitions); AUCE of the Gaussian with the stated variance. Members rank by their "
      "own precision c; fused rows by 1/(expected squared error under the mixture) "
      "(`ensemble_members.fused_variance`: uniform weights for the mean, c-weights otherwise). MLE: v^2 = 0.1 m^2, 500 "
      "Adam steps.",
      "",
      evaluate.format_table(rows, header="member / fusion"),
      "",
  ]
  best = min(("weighted_mean", "max_confidence", "mle"), key=lambda r: rows[r]["rmse"])
  beats = [r for r in ("weighted_mean", "max_confidence", "mle") if rows[r]["rmse"] < rows["mean"]["rmse"]]
  lines += [
      f"Rules with a lower RMSE than the plain mean ({rows['mean']['rmse']:.1f} mm): "
      f"{', '.join(beats) if beats else 'none'}; best: {best} ({rows[best]['rmse']:.1f} mm). "
      f"Best single member RMSE: {min(rows[f'member {k}']['rmse'] for k in range(4)):.1f} mm.",
      END,
  ]
  section = "\n".join(lines)
  out_path = pathlib.Path(args.output)
  text = out_path.read_text() if out_path.exists() else "# Benchmark log\n"
  if BEGIN in text and END in text:
    text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: section, text, flags=re.S)
  else:
    text = text.rstrip("\n") + "\n\n" + section + "\n"
  out_path.parent.mkdir(parents=True, exist_ok=True)
  out_path.write_text(text)
  print(section)


if __name__ == "__main__":
  from pncnn_jax.runtime import hostmem  # pylint: disable=g-import-not-at-top
  hostmem.reexec_with_hugepages()  # 2 MiB pages for XLA's per-step buffers (see pncnn_jax/runtime/hostmem.py)
  sys.exit(main())
