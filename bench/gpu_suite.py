"""The GPU suite's engine (bench/gpu_suite.sh runs it): pncnn_jax against the PyTorch pNCNN on one GPU, in one go.

  python bench/gpu_suite.py --out OUTDIR [--deadline_s 400] [--dry_run]

Rows (`ROWS`): the pNCNN forward (eval mode) at batch 1 and 8 at float32, TF32 and bfloat16; the training step
(Gaussian NLL, Adam, state fed back and donated as the trainer does) at batch 4 and 16 at float32 and TF32; each
in jax and in the PyTorch pNCNN (bench/torch_pncnn.py, written from docs/SPEC.md) at equal precision, eager and
with `torch.compile`; a 4-member ensemble forward (batch 1, float32) as one vmapped call (the program of
`ensemble.members.apply_ensemble(method='vmap')`) against 4 calls of the single model; peak device memory.

Precisions. float32: every convolution float32 (jax `conv_precision='highest'`, the package default; torch
`cudnn.allow_tf32=False`). tf32: the UNet convolutions may use TF32 (jax `conv_precision='default'`, the NConv
layers stay float32 as the package always keeps them; torch `allow_tf32=True` for every convolution). bfloat16:
mixed precision as torch's autocast: the UNet convolutions take bfloat16 inputs and accumulate in float32, the
NConv layers and everything else stay float32 (jax: `_bf16_convs`; torch: `torch.autocast(dtype=torch.bfloat16)`,
the NConv layers of bench/torch_pncnn.py opting out).

Processes, in order, each under the suite's deadline (a row that would start after it is written as skipped):
  jax   : builds every program, compiles them (`--compile_threads` at a time: XLA autotunes GPU convolutions by
          timing candidates, so more threads trade some of that accuracy for wall time), then times them. FLOPs
          per call are XLA's cost analysis of the lowered program (`Lowered.cost_analysis()['flops']`), so the
          fraction of the device's peak counts what the program computes.
  torch : eager rows, then `torch.compile` rows while time is left.
Each time is the median over `--repeats` timings of the mean of back-to-back calls, sized to take >= 0.1 s.

Writes OUTDIR/gpu_suite.json (every row, the device, versions, the deadline bookkeeping) and OUTDIR/gpu_suite.md
(one table). `--dry_run`: the same rows on the CPU with NCNN-Conf-L1 (one UNet) at 16x32 (batch 1 for both forward
rows, 2 for both training rows, one timing each; rows with identical programs compile once): what
tests/bench/test_gpu_suite.py runs; its times mean nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import functools
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing it
sys.path.insert(0, str(HERE))

H, W = 352, 1216
# (name, kind, batch, precision); kind: 'forward' | 'train'
ROWS = [
    ("fwd_b1_float32", "forward", 1, "float32"),
    ("fwd_b1_tf32", "forward", 1, "tf32"),
    ("fwd_b1_bfloat16", "forward", 1, "bfloat16"),
    ("fwd_b8_float32", "forward", 8, "float32"),
    ("fwd_b8_tf32", "forward", 8, "tf32"),
    ("fwd_b8_bfloat16", "forward", 8, "bfloat16"),
    ("train_b4_float32", "train", 4, "float32"),
    ("train_b4_tf32", "train", 4, "tf32"),
    ("train_b16_float32", "train", 16, "float32"),
    ("train_b16_tf32", "train", 16, "tf32"),
]
# --dry_run: smaller batches of the same rows; the two batch sizes of a kind and precision coincide, so that their
# programs are one program, compiled once (`jax_worker`): the dry run checks the rows' code, not their speed.
DRY_BATCH = {1: 1, 8: 1, 4: 2, 16: 2}
ENSEMBLE_K = 4

# Dense peak throughput [FLOP/s] per device kind (vendor data sheets; SXM parts unless named), by precision:
# float32 = the FP32 (non-tensor-core) rate, tf32 / bfloat16 = the dense tensor-core rate (no sparsity).
PEAK_FLOPS = {
    "H200": {"float32": 67e12, "tf32": 494.7e12, "bfloat16": 989.4e12},
    "H100 PCIe": {"float32": 51e12, "tf32": 378e12, "bfloat16": 756e12},
    "H100": {"float32": 67e12, "tf32": 494.7e12, "bfloat16": 989.4e12},
    "A100": {"float32": 19.5e12, "tf32": 156e12, "bfloat16": 312e12},
    "L40S": {"float32": 91.6e12, "tf32": 183e12, "bfloat16": 362e12},
    "L4": {"float32": 30.3e12, "tf32": 60e12, "bfloat16": 121e12},
    "A10": {"float32": 31.2e12, "tf32": 62.5e12, "bfloat16": 125e12},
}


def peak_flops(device_kind: str, precision: str) -> float | None:
  """The device's dense peak at `precision` from PEAK_FLOPS (the first key contained in its name), else None."""
  for key, peaks in PEAK_FLOPS.items():
    if key.lower() in device_kind.lower():
      return peaks[precision]
  return None


def _rng_batch(batch: int, h: int, w: int):
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(batch)
  shape = (batch, h, w, 1)
  sparse = np.where(rng.random(shape) < 0.05, rng.uniform(2, 80, shape), 0).astype(np.float32)
  target = np.where(rng.random(shape) < 0.2, rng.uniform(2, 80, shape), 0).astype(np.float32)
  return sparse, target


def _time(call, sync, min_s: float, repeats: int) -> tuple[float, list[float], int]:
  """(median seconds per call, every timing's per-call mean, calls per timing) after 2 warm-up calls."""
  call()
  call()
  sync()
  t0 = time.perf_counter()
  call()
  sync()
  one = max(time.perf_counter() - t0, 1e-6)
  calls = max(1, min(50, int(min_s / one)))
  per_call = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    for _ in range(calls):
      call()
    sync()
    per_call.append((time.perf_counter() - t0) / calls)
  return statistics.median(per_call), per_call, calls


class Deadline:
  """Seconds left until the suite's deadline (an absolute time.time() passed between processes)."""

  def __init__(self, at: float):
    self.at = at

  def left(self) -> float:
    return self.at - time.time()


# ------------------------------------------------------------------------------------------------------ jax


_BF16 = {"on": False}  # set while a bfloat16 row is traced (`_bf16_convs`)


def _bf16_convs() -> None:
  """The package's activations are float32 (docs/SPEC.md), so its 'bfloat16' forward is mixed precision, as torch's
  autocast: while `_BF16['on']`, every convolution below float32 precision (the UNets'; NConv layers always ask for
  float32) takes bfloat16 inputs and accumulates into float32 (`preferred_element_type`). Every module of the
  package that holds `conv.same_conv` (cpu_kernels, under another name) gets the wrapper."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jax import lax  # pylint: disable=g-import-not-at-top

  from pncnn_jax.nn import conv  # pylint: disable=g-import-not-at-top
  original = conv.same_conv

  def same_conv(a, w, precision=None):
    if not _BF16["on"] or precision in (lax.Precision.HIGHEST, "highest"):
      return original(a, w, precision)
    kh, kw = w.shape[:2]
    return lax.conv_general_dilated(a.astype(jnp.bfloat16), w.astype(jnp.bfloat16), (1, 1),
                                    ((kh // 2, kh // 2), (kw // 2, kw // 2)), dimension_numbers=conv.DIMS,
                                    preferred_element_type=jnp.float32)

  import pncnn_jax.nn.cpu_kernels  # noqa: F401  pylint: disable=g-import-not-at-top
  for mod in list(sys.modules.values()):  # every binding of the original (cpu_kernels imports it by another name)
    if getattr(mod, "__name__", "").startswith("pncnn_jax."):
      for attr, value in list(vars(mod).items()):
        if value is original:
          setattr(mod, attr, same_conv)


def jax_worker(args, emit) -> None:
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  _bf16_convs()
  from pncnn_jax.nn import models  # pylint: disable=g-import-not-at-top
  from pncnn_jax.training import step as training_step  # pylint: disable=g-import-not-at-top

  deadline = Deadline(args.deadline_at)
  dev = jax.devices()[0]
  emit("jax_info", {"jax": jax.__version__, "device": dev.device_kind, "platform": dev.platform})
  programs = {}
  for name, kind, batch, prec in _rows(args):
    model = models.build_model(args.variant, conv_precision="highest" if prec == "float32" else "default")
    variables = models.init_variables(model, jax.random.key(0))
    sparse, target = _rng_batch(batch, args.height, args.width)
    if kind == "forward":
      fn = jax.jit(functools.partial(model.apply, train=False))
      call_args = (variables, jnp.asarray(sparse))
    else:
      state = training_step.create_train_state(model, variables, learning_rate=0.01)
      fn = jax.jit(functools.partial(training_step.train_step, loss_name="gaussian_nll"), donate_argnums=0)
      call_args = (state, {"sparse": jnp.asarray(sparse), "target": jnp.asarray(target)})
    programs[name] = (fn, call_args, kind, prec)
  # The ensemble: K members (seeds 0..K-1) stacked, one vmapped forward (= apply_ensemble(method='vmap')).
  ens_model = models.build_model(args.variant, conv_precision="highest")
  members = [models.init_variables(ens_model, jax.random.key(s)) for s in range(ENSEMBLE_K)]
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *members)
  x1 = jnp.asarray(_rng_batch(1, args.height, args.width)[0])
  vmapped = jax.jit(jax.vmap(lambda v, x: ens_model.apply(v, x, train=False), in_axes=(0, None)))
  programs["ensemble4_vmap_float32"] = (vmapped, (stacked, x1), "ensemble", "float32")

  t0 = time.perf_counter()
  lowered = {}
  for name, (fn, call_args, _, prec) in programs.items():  # traced one at a time: _BF16 is read while tracing
    _BF16["on"] = prec == "bfloat16"
    lowered[name] = fn.lower(*call_args)
    _BF16["on"] = False

  def build(name):
    t1 = time.perf_counter()
    cost = lowered[name].cost_analysis() or {}
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost  # older jax: one dict per device
    compiled = lowered[name].compile()
    return name, compiled, time.perf_counter() - t1, float(cost.get("flops", 0.0))

  # Rows whose programs are identical (the dry run's batches, DRY_BATCH) share one compilation.
  texts = {name: lo.as_text() for name, lo in lowered.items()}
  first = {}
  for name, text in texts.items():
    first.setdefault(text, name)
  same_as = {name: first[text] for name, text in texts.items()}
  compiled, info = {}, {}
  with concurrent.futures.ThreadPoolExecutor(args.compile_threads) as pool:
    for name, c, secs, flops in pool.map(build, list(first.values())):
      compiled[name] = c
      mem = c.memory_analysis()
      gb = None if mem is None else (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
                                     - mem.alias_size_in_bytes) / 1e9
      info[name] = {"compile_s": secs, "flops": flops, "program_gb": gb}
  for name, source in same_as.items():
    compiled[name] = compiled[source]
    if source != name:  # its own arrays, in the pytree the program was compiled for (the model objects differ)
      fn, call_args, kind, prec = programs[name]
      call_args = jax.tree.unflatten(jax.tree.structure(programs[source][1]), jax.tree.leaves(call_args))
      programs[name] = (fn, call_args, kind, prec)
    info[name] = info[source] if source == name else dict(info[source], compile_s=0.0, same_program_as=source)
    emit(f"compiled_{name}", info[name])  # kept if the process is stopped at the deadline before timing
  emit("jax_compile", {"wall_s": time.perf_counter() - t0, "threads": args.compile_threads, "left_s": deadline.left(),
                       "programs": len(first)})
  for name, (fn, call_args, kind, _) in programs.items():
    if deadline.left() < args.row_budget_s:
      emit(name, {"framework": "jax", "skipped": "deadline"})
      continue
    c = compiled[name]
    box = {"args": list(call_args)}
    if kind == "train":
      def call(c=c, box=box):
        box["args"][0], box["out"] = c(*box["args"])
    else:
      def call(c=c, box=box):
        box["out"] = c(*box["args"])
    sec, all_t, calls = _time(call, lambda box=box: jax.block_until_ready(box["out"]), args.min_s, args.repeats)
    row = {"framework": "jax", "seconds": sec, "all": all_t, "calls": calls} | info[name]
    if kind == "forward":
      row["bf16_convolutions"] = lowered[name].as_text().count("bf16>")
    emit(name, row)
    if name == "ensemble4_vmap_float32":
      single = compiled["fwd_b1_float32"]
      member_vars = [jax.device_put(m) for m in members]
      box4 = {}

      def call4(box4=box4, single=single, member_vars=member_vars):
        box4["out"] = [single(v, x1) for v in member_vars]

      sec, all_t, calls = _time(call4, lambda: jax.block_until_ready(box4["out"]), args.min_s, args.repeats)
      emit("ensemble4_separate_float32", {"framework": "jax", "seconds": sec, "all": all_t, "calls": calls,
                                          "flops": ENSEMBLE_K * info["fwd_b1_float32"]["flops"]})
  stats = dev.memory_stats() or {}
  emit("jax_peak", {"peak_bytes_in_use_gb": stats.get("peak_bytes_in_use", 0) / 1e9})


def _rows(args):
  rows = []
  for name, kind, batch, prec in ROWS:
    b = DRY_BATCH[batch] if args.dry_run else batch
    rows.append((name, kind, b, prec))
  return rows


# ---------------------------------------------------------------------------------------------------- torch


def torch_worker(args, emit) -> None:
  import torch  # pylint: disable=g-import-not-at-top
  import torch_pncnn  # pylint: disable=g-import-not-at-top

  deadline = Deadline(args.deadline_at)
  cuda = torch.cuda.is_available() and not args.dry_run
  dev = torch.device("cuda" if cuda else "cpu")
  sync = torch.cuda.synchronize if cuda else (lambda: None)
  torch.backends.cudnn.benchmark = True
  emit("torch_info", {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version() if cuda else None,
                      "device": torch.cuda.get_device_name() if cuda else "cpu"})
  modes = ["eager"] + (["compile"] if not args.no_torch_compile else [])
  for mode in modes:
    for name, kind, batch, prec in _rows(args):
      key = f"torch_{mode}"
      if deadline.left() < args.row_budget_s * (3 if mode == "compile" else 1):
        emit(name, {"framework": key, "skipped": "deadline"})
        continue
      torch.backends.cudnn.allow_tf32 = prec == "tf32"
      torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
      torch.manual_seed(0)
      model = torch_pncnn.build(args.variant).to(dev)
      sparse, target = _rng_batch(batch, args.height, args.width)
      x = torch.from_numpy(sparse.transpose(0, 3, 1, 2).copy()).to(dev)
      t = torch.from_numpy(target.transpose(0, 3, 1, 2).copy()).to(dev)
      run = torch.compile(model) if mode == "compile" else model
      if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats()
      t0 = time.perf_counter()
      try:
        if kind == "forward":
          model.eval()

          # bfloat16: autocast (convolutions in bfloat16, float32 elsewhere); torch_pncnn's NConv layers leave it.
          def call(run=run, x=x, bf16=prec == "bfloat16"):
            with torch.no_grad(), torch.autocast(dev.type, torch.bfloat16, enabled=bf16):
              run(x)
        else:
          model.train()
          opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8)

          def call(run=run, x=x, t=t, opt=opt):
            opt.zero_grad(set_to_none=True)
            depth, conf, _ = run(x)
            torch_pncnn.gaussian_nll(depth, conf, t).backward()
            opt.step()
        call()
        sync()
        first_s = time.perf_counter() - t0
        sec, all_t, calls = _time(call, sync, args.min_s, args.repeats)
      except Exception as e:  # pylint: disable=broad-except  (torch.compile "where it works")
        emit(name, {"framework": key, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
        continue
      finally:
        del run
      emit(name, {"framework": key, "seconds": sec, "all": all_t, "calls": calls, "first_call_s": first_s,
                  "peak_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None})
      del model, x, t
      if cuda:
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------- report


def collect(jsonl: pathlib.Path) -> dict:
  res: dict = {}
  if not jsonl.exists():
    return res
  for line in jsonl.read_text().splitlines():
    row = json.loads(line)
    key, value = row["key"], row["value"]
    if isinstance(value, dict) and value.get("framework"):
      res.setdefault(key, {})[value["framework"]] = value
    else:
      res[key] = value
  return res


def _ms(row):
  return None if not row or "seconds" not in row else row["seconds"] * 1e3


def _cell(row, compiled=None) -> str:
  if not row:
    return "compiled, not timed" if compiled else "not run"
  if "skipped" in row:
    return f"skipped ({row['skipped']})"
  if "error" in row:
    return "failed"
  return f"{row['seconds'] * 1e3:.2f}"


def render(res: dict, meta: dict) -> str:
  device = res.get("jax_info", {}).get("device", "?")
  tinfo = res.get("torch_info")
  lines = [
      f"## GPU suite on {device} (bench/gpu_suite.sh)",
      "",
      f"Run {meta['date']}: {device}, host {meta['host']}; Python {meta['python']}, jax "
      f"{res.get('jax_info', {}).get('jax', '?')}, "
      + (f"torch {tinfo['torch']} (cuDNN {tinfo['cudnn']})" if tinfo else f"torch: {meta.get('torch_note', '-')}")
      + f". Model `{meta['variant']}` at {meta['height']}x{meta['width']}; suite wall time {meta['wall_s']:.0f} s "
      f"(deadline {meta['deadline_s']:.0f} s). Command: `{meta['command']}`."
      + (" **Dry run on the CPU: the times mean nothing.**" if meta["dry_run"] else ""),
      "",
      "Time = median over the timings of the mean of back-to-back calls, in ms per call and per frame (training: "
      "per step and per frame). GFLOP = XLA's cost analysis of the jax program; fraction of peak = that / time / "
      "the device's dense peak at the row's precision (PEAK_FLOPS in bench/gpu_suite.py). Ratio = torch time / jax "
      "time (> 1: pncnn_jax is faster). Memory: jax = the program's arguments + outputs + temporaries; torch = "
      "max_memory_allocated during the row.",
      "",
      "| what | precision | jax [ms] | jax [ms/frame] | GFLOP | fraction of peak | torch eager [ms] | ratio | "
      "torch.compile [ms] | ratio | jax memory [GB] | torch memory [GB] |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for name, kind, batch, prec in meta["rows"]:
    r = res.get(name, {})
    j, te, tc = r.get("jax"), r.get("torch_eager"), r.get("torch_compile")
    jm = _ms(j)
    peak = peak_flops(device, prec)
    frac = (f"{j['flops'] / (j['seconds']) / peak:.3f}" if jm and peak and j.get("flops") else "-")
    label = f"{'forward' if kind == 'forward' else 'training step'}, batch {batch}"

    def ratio(t, jm=jm):
      tm = _ms(t)
      return f"{tm / jm:.2f}" if tm and jm else "-"

    mem_t = te.get("peak_gb") if te else None
    per_frame = "-" if not jm else f"{jm / batch:.2f}"
    gflop = "-" if not j or not j.get("flops") else f"{j['flops'] / 1e9:.1f}"
    mem_j = "-" if not j or j.get("program_gb") is None else f"{j['program_gb']:.2f}"
    mem_t = "-" if mem_t is None else f"{mem_t:.2f}"
    jcell = _cell(j, res.get(f"compiled_{name}"))
    lines.append(f"| {label} | {prec} | {jcell} | {per_frame} | {gflop} | {frac} | {_cell(te)} | {ratio(te)} | "
                 f"{_cell(tc)} | {ratio(tc)} | {mem_j} | {mem_t} |")
  ev, es = res.get("ensemble4_vmap_float32", {}).get("jax"), res.get("ensemble4_separate_float32", {}).get("jax")
  if ev and es and "seconds" in ev and "seconds" in es:
    lines += ["", f"Ensemble of {ENSEMBLE_K} members, forward, batch 1, float32: one vmapped call "
              f"{ev['seconds'] * 1e3:.2f} ms, {ENSEMBLE_K} calls of the single model {es['seconds'] * 1e3:.2f} ms "
              f"(vmapped / separate = {ev['seconds'] / es['seconds']:.2f})."]
  else:
    lines += ["", f"Ensemble of {ENSEMBLE_K} members: not measured ({'skipped' if ev else 'not run'})."]
  peak = res.get("jax_peak", {}).get("peak_bytes_in_use_gb")
  peak = "-" if peak is None else f"{peak:.2f}"
  comp = res.get("jax_compile", {})
  lines += ["", f"Peak device memory of the jax process: {peak} GB. jax compiled "
            f"{comp.get('programs', len(ROWS) + 1)} programs in {comp.get('wall_s', float('nan')):.0f} s "
            f"({comp.get('threads', '?')} at a time)."]
  errors = [f"{n} ({fw}): {v['error']}" for n, d in res.items() if isinstance(d, dict)
            for fw, v in d.items() if isinstance(v, dict) and "error" in v]
  if errors:
    lines += ["", "Failed: " + "; ".join(errors) + "."]
  return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- main


def _spawn(worker: str, args, jsonl: pathlib.Path, timeout: float) -> int:
  cmd = [sys.executable, __file__, "--worker", worker, "--out", str(args.out), "--deadline_at", str(args.deadline_at),
         "--compile_threads", str(args.compile_threads), "--repeats", str(args.repeats), "--min_s", str(args.min_s),
         "--row_budget_s", str(args.row_budget_s)] + (["--dry_run"] if args.dry_run else []) + (
             ["--no_torch_compile"] if args.no_torch_compile else [])
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  if worker == "torch":
    env["CUDA_VISIBLE_DEVICES"] = env.get("CUDA_VISIBLE_DEVICES", "0")
  print("+", " ".join(cmd), flush=True)
  try:
    return subprocess.run(cmd, env=env, timeout=max(timeout, 1), check=False).returncode
  except subprocess.TimeoutExpired:
    print(f"{worker}: stopped at the suite's deadline", file=sys.stderr, flush=True)
    return 124


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", type=pathlib.Path, required=True, help="folder for gpu_suite.json and gpu_suite.md")
  p.add_argument("--deadline_s", type=float, default=400.0, help="seconds from now after which no row starts")
  p.add_argument("--compile_threads", type=int, default=4, help="jax programs compiled at once")
  p.add_argument("--repeats", type=int, default=5, help="timings per row")
  p.add_argument("--min_s", type=float, default=0.1, help="seconds of back-to-back calls per timing (at least)")
  p.add_argument("--row_budget_s", type=float, default=15.0, help="a row starts only with this much time left")
  p.add_argument("--no_torch_compile", action="store_true", help="torch eager rows only")
  p.add_argument("--dry_run", action="store_true", help="on the CPU, NCNN-Conf-L1 at 16x32, small batches (tests)")
  p.add_argument("--worker", choices=("jax", "torch"), help=argparse.SUPPRESS)
  p.add_argument("--deadline_at", type=float, default=None, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  args.variant, args.height, args.width = ("ncnn_conf_l1", 16, 32) if args.dry_run else ("pncnn", H, W)
  if args.dry_run:  # every row, however slow a loaded CPU compiles them: the test checks the rows, not the budget
    args.repeats, args.min_s, args.row_budget_s, args.deadline_s = 1, 0.0, 0.0, max(args.deadline_s, 3600.0)
  if args.compile_threads < 1 or args.repeats < 1:
    print("error: --compile_threads and --repeats must be >= 1", file=sys.stderr)
    return 2
  jsonl = args.out / "gpu_suite.jsonl"

  def emit(key, value):
    print(json.dumps({key: value})[:300], flush=True)
    with open(jsonl, "a") as f:
      f.write(json.dumps({"key": key, "value": value}) + "\n")

  if args.worker:
    (jax_worker if args.worker == "jax" else torch_worker)(args, emit)
    return 0
  if args.out.exists() and not args.out.is_dir():
    print(f"error: --out {args.out} is a file, not a folder", file=sys.stderr)
    return 2
  args.out.mkdir(parents=True, exist_ok=True)
  jsonl.unlink(missing_ok=True)
  t_start = time.time()
  args.deadline_at = t_start + args.deadline_s
  rc = {"jax": _spawn("jax", args, jsonl, args.deadline_at + 60 - time.time())}
  try:
    import importlib.util  # pylint: disable=g-import-not-at-top
    has_torch = importlib.util.find_spec("torch") is not None
  except (ImportError, ValueError):
    has_torch = False
  torch_note = "not installed: torch rows skipped"
  if has_torch:
    rc["torch"] = _spawn("torch", args, jsonl, args.deadline_at + 60 - time.time())
    torch_note = "" if rc["torch"] == 0 else f"the torch process failed (exit status {rc['torch']})"
  res = collect(jsonl)
  meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
          "host": f"{platform.machine()}, {os.cpu_count()} cores", "python": platform.python_version(),
          "variant": args.variant, "height": args.height, "width": args.width, "dry_run": args.dry_run,
          "deadline_s": args.deadline_s, "wall_s": time.time() - t_start, "torch_note": torch_note,
          "command": "bench/gpu_suite.sh " + (os.environ.get("GPU_SUITE_ARGS") or " ".join(
              argv if argv is not None else sys.argv[1:])),
          "rows": [list(r) for r in _rows(args)], "exit_status": rc}
  (args.out / "gpu_suite.json").write_text(json.dumps({"meta": meta, "results": res}, indent=1))
  body = render(res, meta)
  (args.out / "gpu_suite.md").write_text(body + "\n")
  print(body)
  return 0 if rc["jax"] == 0 else 1


if __name__ == "__main__":
  sys.exit(main())
