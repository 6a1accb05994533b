"""Forward and training-step speed and memory of pNCNN, against the machine's matmul rate, the official code and
PyTorch on the same machine, in one run.

  python bench/bench_forward.py --output docs/develop/benchmarks-log.md [--torch_python /path/to/python-with-torch]
  (make bench)

Times, at 352x1216 (the KITTI crop): the pNCNN and NCNN-Conf forward (batch 1, eval mode), a pNCNN training step
(batch 4, forward + backward + Adam; one and two steps per call; with `--rows`, also one per call without huge
pages), and a 4096x4096 float32 matmul. FLOPs are counted from the layer shapes (2 * H * W * kh * kw * C_in * C_out per
convolution; NConv layers count two convolutions), so the "fraction of matmul rate" is model FLOP/s over matmul
FLOP/s. On CPU every row runs in its own process (its peak resident memory is its own row's) and every model call
is paired with a matmul call made just before it.

Comparisons (CPU): the official PyTorch code's figures for this machine kind as the issue tracker recorded them
(`OFFICIAL`: as shipped, and "tuned" with glibc keeping its freed memory), and, when an interpreter with torch is
available (`--torch_python`, default: this one if it imports torch), bench/torch_pncnn.py (our PyTorch pNCNN,
written from the spec) run here and now by bench/bench_torch_cpu.py, with glibc's defaults and tuned. The yardstick
for "fraction of the best matmul" is the faster of the two frameworks' 4096^2 float32 matmuls in this run.
Writes the section between `<!-- forward:begin -->` and `<!-- forward:end -->` (CPU) or
`<!-- forward_<backend>:begin -->` of the output file.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from pncnn_jax.nn import models
from pncnn_jax.runtime import hostmem
from pncnn_jax.training import step as training_step

H, W = 352, 1216
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_forward_report import OFFICIAL, TUNED_GLIBC, render  # noqa: E402  pylint: disable=g-import-not-at-top
from sections import write_section  # noqa: E402  (bench/ is the script's folder)


def unet_flops(h: int, w: int, cin: int = 1, feats=(32, 32, 64, 64)) -> int:
  """FLOPs of the compact UNet forward (convolutions only) at h x w."""
  f1, f2, f3, f4 = feats
  conv = lambda hw, i, o, k=3: 2 * hw * k * k * i * o  # noqa: E731
  hw = [(h >> s) * (w >> s) for s in range(4)]
  total = conv(hw[0], cin, f1) + conv(hw[0], f1, f1)
  total += conv(hw[1], f1, f2) + conv(hw[1], f2, f2)
  total += conv(hw[2], f2, f3) + conv(hw[2], f3, f3)
  total += conv(hw[3], f3, f4) + conv(hw[3], f4, f4)
  total += conv(hw[2], f4 + f3, f3) + conv(hw[2], f3, f3)
  total += conv(hw[1], f3 + f2, f2) + conv(hw[1], f2, f2)
  total += conv(hw[0], f2 + f1, f1) + conv(hw[0], f1, f1)
  return total + conv(hw[0], f1, 1, 1)


def nconv_unet_flops(h: int, w: int) -> int:
  """FLOPs of the NConvUNet (11 NConv calls, each two convolutions: numerator and denominator)."""
  conv = lambda hw, i, o, k: 2 * 2 * hw * k * k * i * o  # noqa: E731
  hw = [(h >> s) * (w >> s) for s in range(4)]
  total = conv(hw[0], 1, 2, 5) + 2 * conv(hw[0], 2, 2, 5)
  total += 2 * conv(hw[1], 2, 2, 5) + conv(hw[2], 2, 2, 5) + conv(hw[3], 2, 2, 5)
  total += conv(hw[2], 4, 2, 3) + conv(hw[1], 4, 2, 3) + conv(hw[0], 4, 2, 3) + conv(hw[0], 2, 1, 1)
  return total


def model_flops(variant: str, h: int = H, w: int = W) -> int:
  v = models.VARIANTS[variant]
  total = nconv_unet_flops(h, w)
  total += unet_flops(h, w) if v.conf_estimator != "none" else 0
  total += unet_flops(h, w, 1 if v.var_estimator == "cout" else 2) if v.var_estimator != "none" else 0
  return total


MATMUL_N = 4096
MATMUL_GFLOP = 2 * MATMUL_N**3 / 1e9


def on_cpu() -> bool:
  return jax.default_backend() == "cpu"


class Paired:
  """Times a function in pairs with the 4096^2 matmul, so each ratio compares calls made back to back.

  The matmul rate of this machine drifts between runs and within one (133-185 GFLOP/s seen in one process), so
  a single matmul timing at the start is a poor yardstick for a model timed minutes later. Each repeat times
  one matmul call and then one model call; the reported fraction is the median of the per-pair ratios.
  """

  def __init__(self):
    self.a = jax.random.normal(jax.random.key(0), (MATMUL_N, MATMUL_N), jnp.float32)
    self.mm = jax.jit(lambda a, b: a @ b)
    jax.block_until_ready(self.mm(self.a, self.a))
    self.matmul_seconds: list[float] = []
    # On an accelerator one call takes milliseconds: time 20 back-to-back calls (dispatch overlapped, as in a
    # training loop) and divide.
    self.calls = 1 if on_cpu() else 20

  def _time(self, fn, *args) -> float:
    t0 = time.perf_counter()
    for _ in range(self.calls - 1):
      fn(*args)
    jax.block_until_ready(fn(*args))
    return (time.perf_counter() - t0) / self.calls

  def __call__(self, fn, args, gflop: float, repeats: int) -> dict:
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))  # compile and warm up
    first = time.perf_counter() - t0
    times, ratios, rates = [], [], []
    for _ in range(repeats):
      t_mm = self._time(self.mm, self.a, self.a)
      t = self._time(fn, *args)
      self.matmul_seconds.append(t_mm)
      times.append(t)
      rates.append(MATMUL_GFLOP / t_mm)
      ratios.append((gflop / t) / (MATMUL_GFLOP / t_mm))
    t = float(np.median(times))
    return {"seconds": t, "all": times, "first_call_s": first, "gflop": gflop, "gflops": gflop / t,
            "fraction_of_matmul": float(np.median(ratios)), "fraction_range": (float(min(ratios)), float(max(ratios))),
            "matmul_gflops": rates}

  def matmul(self) -> dict:
    t = float(np.median(self.matmul_seconds))
    rates = [MATMUL_GFLOP / x for x in self.matmul_seconds]
    return {"seconds": t, "gflop": MATMUL_GFLOP, "gflops": MATMUL_GFLOP / t, "range": (min(rates), max(rates)),
            "matmul_gflops": rates}


def peak_rss_gb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def hugepages_on() -> bool:
  return hostmem.TUNABLE + "=1" in os.environ.get("GLIBC_TUNABLES", "")


def train_gflop(batch: int) -> float:
  return 3 * batch * model_flops("pncnn") / 1e9  # backward ~ 2x forward


def _program_gb(compiled) -> float | None:
  mem = compiled.memory_analysis()
  if mem is None:
    return None
  return (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
          - mem.alias_size_in_bytes) / 1e9


def time_train_step(rng: np.random.Generator, paired: Paired, repeats: int, batch: int = 4, steps_per_call: int = 1,
                    **model_kw) -> dict:
  """pNCNN training steps (Gaussian NLL, Adam) at 352x1216, paired with matmuls: one step per call, or
  `steps_per_call` steps per call (`training_step.train_steps`, as the trainer with config.steps_per_call) with the
  time and FLOPs reported per step. The state is donated and fed back, as the trainer does."""
  model = models.build_model("pncnn", **model_kw)
  variables = models.init_variables(model, jax.random.key(0))
  state = training_step.create_train_state(model, variables, learning_rate=0.01)
  shape = (batch, H, W, 1)
  sparse = np.where(rng.random(shape) < 0.05, rng.uniform(2, 80, shape), 0).astype(np.float32)
  target = np.where(rng.random(shape) < 0.2, rng.uniform(2, 80, shape), 0).astype(np.float32)
  data = {"sparse": jnp.asarray(sparse), "target": jnp.asarray(target)}
  fn = training_step.train_step if steps_per_call == 1 else training_step.train_steps
  if steps_per_call > 1:
    data = {k: jnp.stack([v] * steps_per_call) for k, v in data.items()}
  step = jax.jit(functools.partial(fn, loss_name="gaussian_nll"), donate_argnums=0)
  t0, cpu0 = time.perf_counter(), time.process_time()
  compiled = step.lower(state, data).compile()
  compile_s, compile_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
  box = {"state": state}

  def call(batch):
    box["state"], m = compiled(box["state"], batch)
    return m["loss"]

  r = paired(call, (data,), train_gflop(batch) * steps_per_call, repeats)
  return r | {"seconds": r["seconds"] / steps_per_call, "all": [t / steps_per_call for t in r["all"]],
              "gflop": r["gflop"] / steps_per_call, "compile_s": compile_s, "compile_cpu_s": compile_cpu_s,
              "program_gb": _program_gb(compiled)}


def time_forward(rng: np.random.Generator, paired: Paired, repeats: int, variant: str, **model_kw) -> dict:
  sparse1 = np.where(rng.random((1, H, W, 1)) < 0.05, rng.uniform(2, 80, (1, H, W, 1)), 0).astype(np.float32)
  model = models.build_model(variant, **model_kw)
  variables = models.init_variables(model, jax.random.key(0))
  fwd = jax.jit(functools.partial(model.apply, train=False))
  x = jnp.asarray(sparse1)
  t0 = time.perf_counter()
  compiled = fwd.lower(variables, x).compile()
  compile_s = time.perf_counter() - t0
  return paired(compiled, (variables, x), model_flops(variant) / 1e9, repeats) | {
      "compile_s": compile_s, "program_gb": _program_gb(compiled)}


# The CPU rows, each run in its own process (`--row NAME`): name -> (label, function of (rng, paired, repeats)).
CPU_ROWS = {
    "pncnn_forward_b1": ("pNCNN forward, 352x1216, batch 1", lambda r, p, n: time_forward(r, p, n, "pncnn")),
    "ncnn_conf_l1_forward_b1": ("NCNN-Conf forward, 352x1216, batch 1",
                                lambda r, p, n: time_forward(r, p, n, "ncnn_conf_l1")),
    "pncnn_train_step_b4": ("pNCNN training step, 352x1216, batch 4 (fwd+bwd+Adam), 1 step per call",
                            lambda r, p, n: time_train_step(r, p, n)),
    "pncnn_train_step_b4_x2": ("the same step, 2 steps per call (`config.steps_per_call=2`), per step",
                               lambda r, p, n: time_train_step(r, p, n, steps_per_call=2)),
    "pncnn_train_step_b4_4k_pages": ("the 1-step-per-call training step with 4 KiB pages (`PNCNN_NO_HUGEPAGES=1`)",
                                     lambda r, p, n: time_train_step(r, p, n)),
}


# The 4 KiB-pages row is opt-in (`--rows`): bench/bench_levers.py compares the allocators.
DEFAULT_ROWS = [name for name in CPU_ROWS if not name.endswith("_4k_pages")]


def run_row(name: str, repeats: int) -> dict:
  """One CPU row in this process, with the matmuls paired to it and this process's peak resident memory."""
  paired = Paired()
  row = CPU_ROWS[name][1](np.random.default_rng(0), paired, repeats)
  return row | {"peak_rss_gb": peak_rss_gb(), "glibc_tunables": os.environ.get("GLIBC_TUNABLES", "")}


def _child(args: list[str], env: dict[str, str] | None = None) -> dict:
  out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=False)
  if out.returncode != 0:
    raise SystemExit(f"error: {' '.join(args)} failed:\n{out.stderr[-3000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def _torch_rows(torch_python: str, repeats: int) -> dict:
  """bench/bench_torch_cpu.py under `torch_python`, with glibc's defaults and tuned: {'plain': {...}, 'tuned': ...}."""
  res = {}
  for mode in ("plain", "tuned"):
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if mode == "tuned":
      env["GLIBC_TUNABLES"] = TUNED_GLIBC
    out = subprocess.run([torch_python, str(HERE / "bench_torch_cpu.py"), "--repeats", str(repeats)], env=env,
                         capture_output=True, text=True, check=False)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    res[mode] = {r["row"]: r for r in rows if "error" not in r}
    print(json.dumps({f"torch_{mode}": res[mode]})[:2000], file=sys.stderr, flush=True)
  return res


def find_torch_python(arg: str | None) -> str | None:
  """The interpreter to run the torch rows with: --torch_python, else this one if it has torch, else None."""
  if arg:
    return arg
  probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, check=False)
  return sys.executable if probe.returncode == 0 else None


def run_cpu(repeats: int, torch_python: str | None, rows: list[str]) -> dict:
  results: dict = {"rows": {}, "torch": None}
  for name in rows:
    # No persistent compilation cache: the compile and first-call figures are those of a cold start.
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    if name.endswith("_4k_pages"):  # without huge pages: own process (see pncnn_jax/runtime/hostmem.py)
      env.pop("GLIBC_TUNABLES", None)
      env[hostmem.OPT_OUT] = "1"
    results["rows"][name] = _child([__file__, "--row", name, f"--repeats={repeats}"], env)
    print(json.dumps({name: results["rows"][name]}), file=sys.stderr, flush=True)
  if torch_python:
    results["torch"] = _torch_rows(torch_python, repeats)
  return results


def run_accelerator(repeats: int) -> dict:
  """Accelerators: every row in this process (20 back-to-back calls per timing)."""
  results, paired, rng = {}, Paired(), np.random.default_rng(0)
  for variant in ("pncnn", "ncnn_conf_l1"):
    results[f"{variant}_forward_b1"] = time_forward(rng, paired, repeats, variant)
  results["pncnn_forward_b1_fast"] = time_forward(rng, paired, repeats, "pncnn", conv_precision="default")
  results["pncnn_train_step_b4"] = time_train_step(rng, paired, repeats)
  results["pncnn_train_step_b16"] = time_train_step(rng, paired, repeats, batch=16)
  results["pncnn_train_step_b16_fast"] = time_train_step(rng, paired, repeats, batch=16, conv_precision="default")
  results["matmul"] = paired.matmul()
  stats = jax.devices()[0].memory_stats() or {}
  results["peak_device_gb"] = stats.get("peak_bytes_in_use", 0) / 1e9
  return results


def cpu_name() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
  except (OSError, StopIteration):
    return platform.processor() or platform.machine()


def section_name() -> str:
  """The BENCHMARKS.md section this run writes: `forward` on CPU, `forward_<backend>` else."""
  return "forward" if on_cpu() else f"forward_{jax.default_backend()}"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--output", type=pathlib.Path, default=None, help="markdown file to write the section into")
  parser.add_argument("--repeats", type=int, default=5, help="timed (matmul, model) pairs per row")
  parser.add_argument("--torch_python", default=None,
                      help="a Python interpreter with torch for the PyTorch rows (default: this one, if it has torch)")
  parser.add_argument("--rows", default=",".join(DEFAULT_ROWS),
                      help=f"CPU: comma-separated rows to run, some of {','.join(CPU_ROWS)}")
  parser.add_argument("--json", type=pathlib.Path, default=None, help="also write the raw results as JSON")
  parser.add_argument("--render_only", type=pathlib.Path, default=None, help="render a --json file of an earlier run")
  parser.add_argument("--row", default="", help=argparse.SUPPRESS)  # the child process of one CPU row
  args = parser.parse_args(argv)
  if args.row:
    print(json.dumps(run_row(args.row, args.repeats)))
    return 0
  if args.render_only:
    results = json.loads(args.render_only.read_text())
    results.setdefault("official", OFFICIAL)
  elif on_cpu():
    rows = [r for r in args.rows.split(",") if r]
    unknown = sorted(set(rows) - set(CPU_ROWS))
    if unknown:
      print(f"error: --rows: unknown rows {unknown}; expected some of {sorted(CPU_ROWS)}", file=sys.stderr)
      return 2
    torch_python = find_torch_python(args.torch_python)
    results = run_cpu(args.repeats, torch_python, rows)
    results["meta"] = {"torch_python": torch_python}
    results["official"] = OFFICIAL
  else:
    results = run_accelerator(args.repeats)
  results.setdefault("meta", {}).update(
      cpu=cpu_name(), date=datetime.date.today().isoformat(), python=platform.python_version(), jax=jax.__version__,
      backend=jax.default_backend(), device=jax.devices()[0].device_kind, cores=os.cpu_count(),
      load_at_end=os.getloadavg()[0] if hasattr(os, "getloadavg") else None)
  if args.json:
    args.json.write_text(json.dumps(results, indent=1))
  body = render(results)
  print(body)
  if args.output:
    write_section(args.output, section_name() if not args.render_only else "forward", body)
  return 0


if __name__ == "__main__":
  hostmem.reexec_with_hugepages()  # 2 MiB pages for XLA's per-step buffers (see pncnn_jax/runtime/hostmem.py)
  sys.exit(main())
