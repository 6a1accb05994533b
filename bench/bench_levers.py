"""What each memory/speed lever does to a CPU pNCNN training step (batch 4, 352x1216): one row per process.

  python bench/bench_levers.py [--levers base,no_remat,...] [--repeats 3]          (prints one JSON line per row)
  python bench/bench_levers.py --paired base,both_before [--rounds 8]            (one process, alternating steps)

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
docs/BENCHMARKS.md ("Levers").
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import time

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
  from pncnn_jax.training import step as train_step  # pylint: disable=g-import-not-at-top
  model = models.build_model("pncnn", remat=opts.get("remat", True))
  state = train_step.create_train_state(model, models.init_variables(model, jax.random.key(0)),
                                        train_step.make_optimizer(0.01))
  rng = np.random.default_rng(0)
  shape = (batch, height, width, 1)
  sparse = np.where(rng.random(shape) < 0.05, rng.uniform(2, 80, shape), 0).astype(np.float32)
  target = np.where(rng.random(shape) < 0.2, rng.uniform(2, 80, shape), 0).astype(np.float32)
  data = {"sparse": jnp.asarray(sparse), "target": jnp.asarray(target)}
  step = jax.jit(functools.partial(train_step.train_step, loss_name="gaussian_nll"),
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
  p.add_argument("--height", type=int, default=352)
  p.add_argument("--width", type=int, default=1216)
  p.add_argument("--batch", type=int, default=4)
  p.add_argument("--paired", default="", help="two levers A,B (A without code patch): one process, alternating steps")
  p.add_argument("--rounds", type=int, default=8, help="with --paired: timed A,B rounds")
  p.add_argument("--one", default="", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
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
