"""What each memory/speed lever does to a CPU pNCNN training step (batch 4, 352x1216): one row per process.

  python bench/bench_levers.py [--levers base,no_remat,...] [--repeats 3]          (prints one JSON line per row)
  python bench/bench_levers.py --paired base,both_before [--rounds 8]            (one process, alternating steps)
  python bench/bench_levers.py --xla_paths [--height 128 --width 384] [--rounds 5]
                               [--output docs/develop/benchmarks-log.md]

Each row starts a fresh process (its peak resident memory is its own) that compiles the step, runs it once and
then times `--repeats` steps, each after a 4096^2 float32 matmul (this machine's matmul rate drifts). Reported per
row: step time [s] (and the CPU seconds, user and system, of each step), the paired matmul rates, the XLA working
memory of the program (temporaries), peak RSS, and the final loss (the code levers must not change it beyond
float rounding). Levers (`LEVERS`): the default (`base`: remat on, state donated, glibc with 2 MiB pages) and one
change each: no rematerialisation, no buffer donation, glibc with 4 KiB pages, glibc tuned as the official code
was (keeps freed memory), jemalloc or tcmalloc (LD_PRELOAD, Debian/Ubuntu paths), settings that keep the freed
working memory mapped (one glibc arena; jemalloc retaining, without and with huge pages), skip joins as one convolution
per input, the NConv backward by autodiff of its fused taps, NConv numerator and denominator as two convolutions,
two XLA CPU flags, and the two kernels replaced on 2026-11-26 (evening), each put back alone and both together:
the UNet weight gradient on 2-row tiles with (C_in x K) @ (K x C_out) products on 32-channel blocks
(`wgrad_2row_tiles`) and the NConv input gradient by the library convolution (`nconv_library_dgrad`).
`--paired A,B` runs two code levers in one process instead, their steps alternating. Results on this machine:
docs/develop/benchmarks-log.md ("Levers").

`--xla_paths` (issue 42) measures XLA:CPU's library paths (`XLA_PATHS`: which XLA_FLAGS route convolutions and
dots to YNNPACK, oneDNN, XNNPACK or XLA's own Eigen/loop emitters), each with our CPU kernels (pncnn_jax/nn/
cpu_kernels.py) on and off: one long-lived process per configuration (XLA_FLAGS are read once per process), all
compiled first, one at a time, then timed in rounds, A B C ... A B C ..., so that the machine's drift and other
jobs hit every configuration alike; each time is reported as a ratio to the first configuration's ('default',
kernels on) in the same round. Per configuration it also records the library calls in the compiled programs
(`__ynn_fusion`, `__onednn_fusion`, `__xnn_fusion` custom fusions), whether its forward output equals the
baseline's bit for bit (else the largest difference) and the loss after the same steps. Writes the section between
`<!-- xla_paths:begin -->` and `<!-- xla_paths:end -->` of --output. See docs/develop/benchmarks-log.md ("XLA:CPU
library paths").
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
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from sections import command, write_section  # noqa: E402  (bench/ is the script's folder)

HUGE = "glibc.malloc.hugetlb=1"
TUNED = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
JEMALLOC_KEEP = "retain:true,dirty_decay_ms:-1,muzzy_decay_ms:-1"

# name -> (environment of the row's process, options of the row)
LEVERS = {
    "base": ({"GLIBC_TUNABLES": HUGE}, {}),
    "no_remat": ({"GLIBC_TUNABLES": HUGE}, {"remat": False}),
    "no_donation": ({"GLIBC_TUNABLES": HUGE}, {"donate": False}),
    "glibc_4k_pages": ({"GLIBC_TUNABLES": ""}, {}),
    "glibc_tuned": ({"GLIBC_TUNABLES": f"{HUGE}:{TUNED}"}, {}),
    "jemalloc": ({"GLIBC_TUNABLES": "", "LD_PRELOAD": JEMALLOC}, {}),
    "tcmalloc": ({"GLIBC_TUNABLES": "", "LD_PRELOAD": TCMALLOC}, {}),
    # Settings that keep the step's freed working memory mapped (no page faults on the next step), 2026-11-27:
    # one malloc arena for every thread (glibc serves a thread arena's multi-GB request only through mmap,
    # whatever mmap_max says), and jemalloc that never returns memory (without and with huge pages).
    "glibc_one_arena": ({"GLIBC_TUNABLES": f"{HUGE}:{TUNED}:glibc.malloc.arena_max=1"}, {}),
    "jemalloc_retain": ({"GLIBC_TUNABLES": "", "LD_PRELOAD": JEMALLOC,
                         "MALLOC_CONF": JEMALLOC_KEEP}, {}),
    "jemalloc_retain_thp": ({"GLIBC_TUNABLES": "", "LD_PRELOAD": JEMALLOC,
                             "MALLOC_CONF": f"{JEMALLOC_KEEP},thp:always,metadata_thp:always"}, {}),
    "skip_split": ({"GLIBC_TUNABLES": HUGE}, {"patch": "skip_split"}),
    "nconv_autodiff": ({"GLIBC_TUNABLES": HUGE}, {"patch": "nconv_autodiff"}),
    "nconv_two_convs": ({"GLIBC_TUNABLES": HUGE}, {"patch": "nconv_two_convs"}),
    "wgrad_2row_tiles": ({"GLIBC_TUNABLES": HUGE}, {"patch": "wgrad_2row_tiles"}),
    "nconv_library_dgrad": ({"GLIBC_TUNABLES": HUGE}, {"patch": "nconv_library_dgrad"}),
    "both_before": ({"GLIBC_TUNABLES": HUGE}, {"patch": "wgrad_2row_tiles,nconv_library_dgrad"}),
    "xla_sched_off": ({"GLIBC_TUNABLES": HUGE, "XLA_FLAGS": "--xla_cpu_enable_concurrency_optimized_scheduler=false"},
                      {}),
    "xla_vec512": ({"GLIBC_TUNABLES": HUGE, "XLA_FLAGS": "--xla_cpu_prefer_vector_width=512"}, {}),
}


# XLA:CPU library paths (issue 42). The flags this jaxlib (0.12.0.1) accepts: --xla_cpu_use_onednn,
# --xla_cpu_use_xnnpack and --xla_cpu_experimental_{onednn,xnn,ynn}_fusion_type (a comma-separated list of
# dot, eltwise, reduce, individual_dot, individual_convolution; an unknown value aborts the process). By default
# convolutions and dots are YNNPACK custom fusions; an empty YNN list leaves them to XLA's own emitters (Eigen).
# --xla_cpu_use_onednn=true or --xla_cpu_use_xnnpack=true alone change nothing in the compiled program; oneDNN
# fusions appear only with --xla_cpu_experimental_onednn_fusion_type, XNN fusions not at all in our programs.
_NO_YNN = "--xla_cpu_experimental_ynn_fusion_type="
XLA_PATHS = {
    "default": "",
    "eigen": _NO_YNN,
    "ynn_eltwise": "--xla_cpu_experimental_ynn_fusion_type=individual_convolution,individual_dot,eltwise",
    "onednn": f"{_NO_YNN} --xla_cpu_use_onednn=true "
              "--xla_cpu_experimental_onednn_fusion_type=dot,eltwise,individual_convolution",
    "xnnpack": f"{_NO_YNN} --xla_cpu_use_xnnpack=true "
               "--xla_cpu_experimental_xnn_fusion_type=dot,eltwise,individual_convolution",
}
LIBRARY_FUSIONS = ("__ynn_fusion", "__onednn_fusion", "__xnn_fusion")


def kernels_off() -> None:
  """Routes every convolution of the model to the library convolution (`conv.same_conv`): no fused NConv taps, no
  tiled UNet weight gradient, skip joins as one convolution of the concatenation. Call before tracing."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from pncnn_jax.nn import conv, cpu_kernels  # pylint: disable=g-import-not-at-top
  cpu_kernels.nconv_conv = lambda a, w, precision: conv.same_conv(a, w, precision)
  cpu_kernels.conv2d_same = lambda x, w, precision=None: conv.same_conv(x, w, precision)
  cpu_kernels.conv2d_same_inputs = (
      lambda xs, w, precision=None, *, train=False: conv.same_conv(jnp.concatenate(list(xs), axis=-1), w,
                                                                   precision))


def xla_path_child(name: str, kernels: bool, height: int, width: int, batch: int, outdir: str) -> None:
  """One configuration's process: compiles the forward (batch 1, eval) and the training step (`batch`), prints
  {"ready": ...}, then answers stdin commands 'fwd N' / 'step' (one JSON line with the time each) until 'quit'."""
  if not kernels:
    kernels_off()
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from pncnn_jax.nn import models  # pylint: disable=g-import-not-at-top
  step, state, data = make_step({}, batch, height, width)
  model = models.build_model("pncnn", remat=True)
  fwd = jax.jit(lambda v, x: model.apply(v, x, train=False))
  # A copy: the step donates (deletes) the state's buffers.
  variables = jax.tree.map(np.array, {"params": state.params, "batch_stats": state.batch_stats})
  x1 = data["sparse"][:1]
  t0 = time.perf_counter()
  fwd_c = fwd.lower(variables, x1).compile()
  step_c = step.lower(state, data).compile()
  compile_s = time.perf_counter() - t0
  text = fwd_c.as_text() + step_c.as_text()
  fusions = {k: len(re.findall(re.escape(k), text)) for k in LIBRARY_FUSIONS}
  out = fwd_c(variables, x1)
  np.save(os.path.join(outdir, f"{name}_{'on' if kernels else 'off'}.npy"),
          np.concatenate([np.asarray(out.depth), np.asarray(out.confidence)]))
  state, m = step_c(state, data)
  jax.block_until_ready(m)
  print(json.dumps({"ready": name, "compile_s": compile_s, "fusions": fusions}), flush=True)
  for line in sys.stdin:
    cmd = line.split()
    if not cmd or cmd[0] == "quit":
      break
    t0 = time.perf_counter()
    if cmd[0] == "fwd":
      for _ in range(int(cmd[1])):
        out = fwd_c(variables, x1)
        jax.block_until_ready(out)
      t = (time.perf_counter() - t0) / int(cmd[1])
    else:
      state, m = step_c(state, data)
      jax.block_until_ready(m)
      t = time.perf_counter() - t0
    print(json.dumps({"t": t}), flush=True)
  print(json.dumps({"loss": float(m["loss"]),
                    "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}), flush=True)


def _median(xs):
  xs = sorted(xs)
  n = len(xs)
  return (xs[n // 2] + xs[(n - 1) // 2]) / 2


def run_xla_paths(configs: list[tuple[str, bool]], rounds: int, fwd_calls: int, height: int, width: int,
                  batch: int, cache_dir: str | None = None) -> dict:
  """Starts one process per (XLA path, kernels on/off), compiles them one after the other, then times them in
  interleaved rounds; returns every time, the per-round ratios to configs[0], fusions, numerics and loads.
  With `cache_dir`, the processes share a persistent compilation cache there (a configuration compiled by an
  earlier run is loaded, not compiled: split runs that repeat the baseline compile it once)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  outdir = tempfile.mkdtemp(prefix="bench_xla_paths_")
  procs, info = {}, {}
  load = {"start": os.getloadavg()}
  try:
    for path, kernels in configs:
      key = f"{path}/{'on' if kernels else 'off'}"
      env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
      env.update({"GLIBC_TUNABLES": HUGE, "PYTHONUNBUFFERED": "1"})
      if XLA_PATHS[path]:
        env["XLA_FLAGS"] = XLA_PATHS[path]
      if cache_dir:
        env.update({"JAX_COMPILATION_CACHE_DIR": cache_dir, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})
      cmd = [sys.executable, __file__, "--xla_path_child", path, "--kernels", "on" if kernels else "off",
             f"--height={height}", f"--width={width}", f"--batch={batch}", "--outdir", outdir]
      procs[key] = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
      ready = _read_json(procs[key], key)
      info[key] = {"flags": XLA_PATHS[path], "compile_s": ready["compile_s"], "fusions": ready["fusions"],
                   "fwd_s": [], "step_s": []}
      print(json.dumps({key: info[key]}), file=sys.stderr, flush=True)
    load["timed_start"] = os.getloadavg()
    keys = list(procs)
    for r in range(rounds):
      for what in ("fwd", "step"):
        for key in (keys if r % 2 == 0 else keys[::-1]):  # A B C, C B A, ...: order effects cancel
          procs[key].stdin.write(f"fwd {fwd_calls}\n" if what == "fwd" else "step\n")
          procs[key].stdin.flush()
          info[key][f"{what}_s"].append(_read_json(procs[key], key)["t"])
      print(f"round {r + 1}/{rounds}, load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    load["end"] = os.getloadavg()
    for key, proc in procs.items():
      proc.stdin.write("quit\n")
      proc.stdin.flush()
      info[key].update(_read_json(proc, key))
      proc.wait(timeout=60)
    outputs = {key: np.load(os.path.join(outdir, key.replace("/", "_") + ".npy")) for key in keys}
    for key in keys:
      diff = np.abs(outputs[key].astype(np.float64) - outputs[keys[0]])
      info[key]["fwd_max_abs_diff"] = float(np.max(diff))
      info[key]["fwd_bitwise_equal"] = bool(np.array_equal(outputs[key], outputs[keys[0]]))
      for what in ("fwd", "step"):
        ratios = [a / b for a, b in zip(info[key][f"{what}_s"], info[keys[0]][f"{what}_s"])]
        info[key][f"{what}_ratio"] = ratios
        info[key][f"{what}_median_s"] = _median(info[key][f"{what}_s"])
        info[key][f"{what}_median_ratio"] = _median(ratios)
  finally:
    for proc in procs.values():
      if proc.poll() is None:
        proc.kill()
    shutil.rmtree(outdir, ignore_errors=True)
  return {"configs": info, "rounds": rounds, "fwd_calls": fwd_calls, "height": height, "width": width,
          "batch": batch, "load": load,
          "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
          "machine": f"{platform.machine()}, {os.cpu_count()} cores", "python": platform.python_version()}


def render_xla_paths(runs: list[dict]) -> str:
  """The markdown section of one or more `run_xla_paths` results (each run's ratios are to its own first row)."""
  lines = [
      "## XLA:CPU library paths, with our CPU kernels on and off (bench/bench_levers.py --xla_paths)",
      "",
      "pNCNN forward (batch 1, eval mode) and training step (Gaussian NLL, Adam) with each XLA:CPU library path "
      "(`XLA_PATHS` in bench/bench_levers.py, the XLA_FLAGS column) and our CPU kernels (pncnn_jax/nn/"
      "cpu_kernels.py) on or off (off: every convolution is the library's `conv.same_conv`). One process per "
      "configuration (XLA_FLAGS are read once per process), all compiled first, then interleaved rounds (A B C ..., "
      "then ... C B A); ratio = the configuration's time / its run's first row's time in the same round (median "
      "and range over the rounds; < 1: faster). Library fusions = the `__ynn_fusion` / `__onednn_fusion` / "
      "`__xnn_fusion` custom fusions in the compiled forward + step. Forward output and loss show whether a path "
      "changes the arithmetic.",
      "",
  ]
  for i, res in enumerate(runs, 1):
    ld = res["load"]
    lines.append(
        f"- run {i}: **measured under load**, {res['date']}, {res['machine']}, Python {res['python']}, jax "
        f"{res.get('jax', '?')}; frame {res['height']}x{res['width']}, step batch {res['batch']}, {res['rounds']} "
        f"rounds, forward timings the mean of {res['fwd_calls']} calls. Other jobs shared the machine: 1-minute load "
        f"average {ld['timed_start'][0]:.2f} when the timing began, {ld['end'][0]:.2f} at its end (5-minute "
        f"{ld['timed_start'][1]:.2f} and {ld['end'][1]:.2f}). Command: `{res.get('command', '-')}`.")
  lines += [
      "",
      "| run | XLA path | our CPU kernels | XLA_FLAGS | library fusions (ynn/onednn/xnn) | forward [ms] | forward "
      "ratio | step [s] | step ratio | forward output vs the run's first row | loss after the steps | compile [s] |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for i, res in enumerate(runs, 1):
    for key, r in res["configs"].items():
      path, kern = key.split("/")
      f = r["fusions"]
      eq = "bitwise equal" if r["fwd_bitwise_equal"] else f"max diff {r['fwd_max_abs_diff']:.1e}"
      fr, sr = r["fwd_ratio"], r["step_ratio"]
      lines.append(
          f"| {i} | `{path}` | {kern} | `{r['flags'] or '(none)'}` | {f['__ynn_fusion']}/{f['__onednn_fusion']}/"
          f"{f['__xnn_fusion']} | {r['fwd_median_s'] * 1e3:.1f} | {r['fwd_median_ratio']:.2f} ({min(fr):.2f}-"
          f"{max(fr):.2f}) | {r['step_median_s']:.2f} | {r['step_median_ratio']:.2f} ({min(sr):.2f}-{max(sr):.2f}) "
          f"| {eq} | {r['loss']:.4f} | {r['compile_s']:.1f} |")
  return "\n".join(lines)


def _read_json(proc, key: str) -> dict:
  line = proc.stdout.readline()
  if not line:
    raise RuntimeError(f"the {key} process ended early (exit status {proc.wait()})")
  return json.loads(line)


def _patch(name: str) -> None:
  """The code levers, applied in the row's process before anything is traced."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from pncnn_jax.nn import (
    cpu_kernels,  # pylint: disable=g-import-not-at-top
    layers,  # pylint: disable=g-import-not-at-top
  )
  if name == "skip_split":  # skip joins: one convolution per input, summed (no concatenation), in training too
    inputs = cpu_kernels.conv2d_same_inputs
    cpu_kernels.conv2d_same_inputs = lambda xs, w, precision=None, *, train=False: inputs(xs, w, precision)
  elif name == "nconv_autodiff":  # NConv backward: autodiff of the fused shifted multiply-adds
    cpu_kernels._taps_conv_fast_fwd = cpu_kernels._taps_same_conv  # pylint: disable=protected-access
  elif name == "nconv_two_convs":  # NConv: numerator and denominator apart (no [x*c; c] batch concatenation)
    def nconv(x, c, w, b, *, eps=layers.NCONV_EPS, conv_precision=layers.NCONV_PRECISION):
      num, den = cpu_kernels.nconv_conv(x * c, w, conv_precision), cpu_kernels.nconv_conv(c, w, conv_precision)
      ratio = layers._normalized_ratio(num, den, eps)  # pylint: disable=protected-access
      return ratio + b.reshape(1, 1, 1, -1), den / jnp.sum(w, axis=(0, 1, 2), keepdims=True)
    layers.nconv = nconv
  elif name == "wgrad_2row_tiles":  # the weight gradient before 2026-11-26 (evening): 2-row tiles of all images,
    from jax import lax  # pylint: disable=g-import-not-at-top
    # (C_in x K) @ (K x C_out) products on 32-channel blocks
    def wgrad(x, g, kernel_size, precision, rows=2):
      kh, kw = kernel_size
      ph, pw = kh // 2, kw // 2
      _, h, w, ci = x.shape
      n_tiles = -(-h // rows)
      extra = n_tiles * rows - h
      xp = jnp.pad(x, ((0, 0), (0, extra), (0, 0), (0, 0)))
      gp = jnp.pad(g, ((0, 0), (ph, ph + extra), (pw, pw), (0, 0)))
      xp, gp = lax.optimization_barrier((xp, gp))

      def tile(t, acc):
        xt = lax.dynamic_slice_in_dim(xp, t * rows, rows, axis=1)
        gt = lax.dynamic_slice_in_dim(gp, t * rows, rows + 2 * ph, axis=1)
        taps = [jnp.concatenate([jnp.einsum("bhwi,bhwo->io", xt[..., c:c + 32],
                                            gt[:, 2 * ph - i:2 * ph - i + rows, 2 * pw - j:2 * pw - j + w],
                                            precision=precision) for c in range(0, ci, 32)], axis=0)
                for i in range(kh) for j in range(kw)]
        return acc + jnp.stack(taps)
      acc = lax.fori_loop(0, n_tiles, tile, jnp.zeros((kh * kw, ci, g.shape[-1]), jnp.float32))
      return acc.reshape(kh, kw, ci, g.shape[-1])
    cpu_kernels._taps_weight_grad = wgrad  # pylint: disable=protected-access
  elif name == "nconv_library_dgrad":  # NConv input gradient by the library convolution (before 2026-11-26 evening)
    cpu_kernels.TAPS_DGRAD_MIN_PIXELS = sys.maxsize  # the library's below the threshold: now at every size
  elif name:
    raise SystemExit(f"error: unknown patch {name!r}")


def _apply_patches(name: str) -> None:
  """The lever's code patches (comma-separated in its 'patch' option), before anything is traced."""
  for patch in LEVERS[name][1].get("patch", "").split(","):
    _patch(patch)


def _lever_env(name: str) -> dict[str, str]:
  """This process's environment with the lever's allocator/XLA settings in place of ours."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("GLIBC_TUNABLES", "LD_PRELOAD", "XLA_FLAGS", "MALLOC_CONF")}
  env.update({k: v for k, v in LEVERS[name][0].items() if v})
  return env


def run_row(name: str, repeats: int, height: int, width: int, batch: int) -> dict:
  opts = LEVERS[name][1]
  _apply_patches(name)
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt

  step, state, data = make_step(opts, batch, height, width)
  t0 = time.perf_counter()
  compiled = step.lower(state, data).compile()
  out = {"lever": name, "compile_s": time.perf_counter() - t0,
         "temp_gb": compiled.memory_analysis().temp_size_in_bytes / 1e9}
  a = jax.random.normal(jax.random.key(1), (4096, 4096))
  mm = jax.jit(lambda x: x @ x)
  jax.block_until_ready(mm(a))
  t0 = time.perf_counter()
  state, m = compiled(state, data)
  jax.block_until_ready(m)
  out["first_s"] = time.perf_counter() - t0
  times, rates, user, system, faults = [], [], [], [], []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(mm(a))
    rates.append(2 * 4096**3 / 1e9 / (time.perf_counter() - t0))
    u0, s0, f0 = usage()
    t0 = time.perf_counter()
    state, m = compiled(state, data)
    jax.block_until_ready(m)
    times.append(time.perf_counter() - t0)
    u1, s1, f1 = usage()
    user.append(u1 - u0)
    system.append(s1 - s0)
    faults.append(f1 - f0)
  return out | {"step_s": times, "median_s": float(np.median(times)), "user_s": user, "sys_s": system,
                "page_faults": faults,
                "matmul_gflops": rates, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
                "loss": float(m["loss"]), "load": os.getloadavg()[0]}


def make_step(opts: dict, batch: int, height: int, width: int):
  """The row's jitted training step (trace it after the row's code patches), a fresh state and the batch."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from pncnn_jax.nn import models  # pylint: disable=g-import-not-at-top
  from pncnn_jax.training import step as training_step  # pylint: disable=g-import-not-at-top
  model = models.build_model("pncnn", remat=opts.get("remat", True))
  state = training_step.create_train_state(model, models.init_variables(model, jax.random.key(0)), learning_rate=0.01)
  rng = np.random.default_rng(0)
  shape = (batch, height, width, 1)
  sparse = np.where(rng.random(shape) < 0.05, rng.uniform(2, 80, shape), 0).astype(np.float32)
  target = np.where(rng.random(shape) < 0.2, rng.uniform(2, 80, shape), 0).astype(np.float32)
  data = {"sparse": jnp.asarray(sparse), "target": jnp.asarray(target)}
  step = jax.jit(functools.partial(training_step.train_step, loss_name="gaussian_nll"),
                 donate_argnums=(0,) if opts.get("donate", True) else ())
  return step, state, data


def run_paired(names: list[str], rounds: int, height: int, width: int, batch: int) -> dict:
  """Two code levers in one process, their steps alternating A, B, A, B, ...: drift of this machine's speed (other
  jobs, its own clock) hits both alike, so the per-round ratio B/A is steadier than two rows' medians. The first
  lever must have no code patch (patches cannot be undone) and both must share the environment (`main` checks)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  a_name, b_name = names
  compile_s = {}

  def compiled(name):
    step, state, data = make_step(LEVERS[name][1], batch, height, width)
    t0 = time.perf_counter()
    program = step.lower(state, data).compile()
    compile_s[name] = time.perf_counter() - t0
    return program, state, data

  progs = {a_name: compiled(a_name)}
  _apply_patches(b_name)
  progs[b_name] = compiled(b_name)
  states = {n: p[1] for n, p in progs.items()}
  times = {n: [] for n in progs}
  for r in range(rounds + 1):  # round 0 warms both up (first-call costs) and is not reported
    for n, (program, _, data) in progs.items():
      t0 = time.perf_counter()
      states[n], m = program(states[n], data)
      jax.block_until_ready(m)
      if r:
        times[n].append(time.perf_counter() - t0)
  ratio = [b / a for a, b in zip(times[a_name], times[b_name])]
  return {"paired": names, "compile_s": compile_s, "step_s": times,
          "median_s": {n: float(np.median(t)) for n, t in times.items()}, "ratio_b_over_a": ratio,
          "median_ratio": float(np.median(ratio)),
          "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, "load": os.getloadavg()[0]}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--levers", default=",".join(LEVERS), help=f"comma-separated, some of {','.join(LEVERS)}")
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--height", type=int, default=None, help="frame height (default 352; 128 with --xla_paths)")
  p.add_argument("--width", type=int, default=None, help="frame width (default 1216; 384 with --xla_paths)")
  p.add_argument("--batch", type=int, default=4)
  p.add_argument("--paired", default="", help="two levers A,B (A without code patch): one process, alternating steps")
  p.add_argument("--rounds", type=int, default=8, help="with --paired or --xla_paths: timed rounds")
  p.add_argument("--one", default="", help=argparse.SUPPRESS)
  p.add_argument("--xla_paths", action="store_true",
                 help="XLA:CPU library paths x our CPU kernels on/off, interleaved (default frame 128x384)")
  p.add_argument("--configs", default="",
                 help="with --xla_paths: comma-separated PATH/on|off (default: every path of XLA_PATHS, on and off); "
                      "the first is the baseline of the ratios")
  p.add_argument("--fwd_calls", type=int, default=5, help="with --xla_paths: forward calls per timing")
  p.add_argument("--output", type=pathlib.Path, default=None, help="with --xla_paths: markdown file for the section")
  p.add_argument("--json", type=pathlib.Path, default=None, help="with --xla_paths: also write the raw results")
  p.add_argument("--cache_dir", default=None,
                 help="with --xla_paths: a persistent compilation cache shared by the runs (compile [s] is then the "
                      "cache load for configurations compiled before)")
  p.add_argument("--render_only", default="",
                 help="with --xla_paths: comma-separated --json files of earlier runs to render as one section")
  p.add_argument("--xla_path_child", default="", help=argparse.SUPPRESS)
  p.add_argument("--kernels", default="on", choices=("on", "off"), help=argparse.SUPPRESS)
  p.add_argument("--outdir", default="", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  small = args.xla_paths or args.xla_path_child
  args.height = args.height or (128 if small else 352)
  args.width = args.width or (384 if small else 1216)
  if args.xla_path_child:
    xla_path_child(args.xla_path_child, args.kernels == "on", args.height, args.width, args.batch, args.outdir)
    return 0
  if args.xla_paths and args.render_only:
    runs = []
    for f in args.render_only.split(","):
      try:
        runs.append(json.loads(pathlib.Path(f).read_text()))
      except (OSError, ValueError) as e:
        print(f"error: --render_only {f}: {e}", file=sys.stderr)
        return 2
    body = render_xla_paths(runs)
    print(body)
    if args.output:
      write_section(args.output, "xla_paths", body)
    return 0
  if args.xla_paths:
    configs = []
    for item in filter(None, (args.configs or ",".join(f"{p_}/{k}" for k in ("on", "off")
                                                         for p_ in XLA_PATHS)).split(",")):
      path, _, kern = item.partition("/")
      if path not in XLA_PATHS or kern not in ("on", "off"):
        print(f"error: --configs: {item!r} is not PATH/on or PATH/off with PATH one of {','.join(XLA_PATHS)}",
              file=sys.stderr)
        return 2
      configs.append((path, kern == "on"))
    if args.rounds < 1 or args.fwd_calls < 1:
      print("error: --rounds and --fwd_calls must be >= 1", file=sys.stderr)
      return 2
    import jax  # pylint: disable=g-import-not-at-top
    res = run_xla_paths(configs, args.rounds, args.fwd_calls, args.height, args.width, args.batch,
                        args.cache_dir)
    res["jax"] = jax.__version__
    res["command"] = command("bench_levers.py", argv)
    body = render_xla_paths([res])
    print(body)
    if args.json:
      args.json.write_text(json.dumps(res, indent=1))
    if args.output:
      write_section(args.output, "xla_paths", body)
    return 0
  size = dict(height=args.height, width=args.width, batch=args.batch)
  if args.paired:
    names = args.paired.split(",")
    if len(names) != 2 or any(n not in LEVERS for n in names):
      print(f"error: --paired: expected two of {','.join(LEVERS)}, got {args.paired!r}", file=sys.stderr)
      return 2
    if LEVERS[names[0]][1].get("patch") or LEVERS[names[0]][0] != LEVERS[names[1]][0]:
      print(f"error: --paired={args.paired}: the first lever must have no code patch, and both the same "
            "environment", file=sys.stderr)
      return 2
    env = _lever_env(names[0])
    if os.environ.get("_BENCH_LEVERS_CHILD"):
      print(json.dumps(run_paired(names, args.rounds, **size)), flush=True)
      return 0
    env["_BENCH_LEVERS_CHILD"] = "1"
    return subprocess.call([sys.executable, __file__] + list(argv if argv is not None else sys.argv[1:]), env=env)
  if args.one:
    print(json.dumps(run_row(args.one, args.repeats, **size)), flush=True)
    return 0
  for name in filter(None, args.levers.split(",")):
    if name not in LEVERS:
      print(f"error: --levers: unknown lever {name!r}; expected some of {','.join(LEVERS)}", file=sys.stderr)
      return 2
    env = _lever_env(name)
    out = subprocess.run([sys.executable, __file__, "--one", name, f"--repeats={args.repeats}",
                          f"--height={args.height}", f"--width={args.width}", f"--batch={args.batch}"],
                         env=env, capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    print(lines[-1] if lines else json.dumps({"lever": name, "error": out.stderr.strip().splitlines()[-3:]}),
          flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
