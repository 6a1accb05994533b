"""pncnn_jax against a PyTorch pNCNN on the same GPU: forward, training step, ensembles, peak memory.

  python bench/bench_gpu.py --output docs/develop/benchmarks-log.md [--quick]

Needs a CUDA GPU, jax with its CUDA plugin and torch (benchmark only: torch is never a dependency of pncnn_jax).
The PyTorch network is bench/torch_pncnn.py, written from docs/SPEC.md in the official layout. Steps:

1. check  (one process, both frameworks): the torch model loads our weights (`convert.variables_to_state_dict`)
   and must reproduce our eval- and train-mode outputs, the Gaussian NLL and every gradient at float32
   (torch: TF32 off; jax: conv_precision='highest') before anything is timed.
2. jax    (own process): every program is compiled first (in parallel threads; the wall time is reported), then
   timed: `repeats` timings of `calls` back-to-back calls each (the state of a training step is fed back, donated,
   as in the trainer), median per call.
3. torch  (own process): the same rows in eager mode (cudnn.benchmark on, Adam foreach), timed the same way.

Precision rows: 'float32' = every convolution float32 (jax 'highest'; torch cudnn.allow_tf32=False), 'tf32' = the
UNet convolutions may use TF32 (jax conv_precision='default', NConv stays float32; torch cudnn.allow_tf32=True,
its default, for every convolution). Memory: torch's max_memory_allocated per row (reset before it); jax's
compiled memory analysis per program (arguments + outputs + temporaries - aliased) and the process's peak bytes
in use. Writes the section between `<!-- gpu:begin -->` and `<!-- gpu:end -->` of the output file, and every
row as JSON to --json.
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
import statistics
import subprocess
import sys
import time

from sections import write_section  # noqa: E402  (bench/ is the script's folder)

H, W = 352, 1216
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing it
sys.path.insert(0, str(HERE))

# (name, kind, variant, batch, height, width, precision)
ROWS = [
    ("fwd_pncnn_b1_f32", "forward", "pncnn", 1, H, W, "float32"),
    ("fwd_pncnn_b1_tf32", "forward", "pncnn", 1, H, W, "tf32"),
    ("train_pncnn_b4_f32", "train", "pncnn", 4, H, W, "float32"),
    ("train_pncnn_b4_tf32", "train", "pncnn", 4, H, W, "tf32"),
    ("train_pncnn_b16_f32", "train", "pncnn", 16, H, W, "float32"),
    ("train_pncnn_b16_tf32", "train", "pncnn", 16, H, W, "tf32"),
    # The training shape of the synthetic reproduction (pncnn_jax.experiments.runs.SCALES, batch 4 of 64x320 crops).
    ("train_pncnn_b4_64x320_f32", "train", "pncnn", 4, 64, 320, "float32"),
]
QUICK = {"fwd_pncnn_b1_f32", "train_pncnn_b4_f32"}


def _batch(rng, batch: int, h: int, w: int):
  import numpy as np
  shape = (batch, h, w, 1)
  sparse = np.where(rng.random(shape) < 0.05, rng.uniform(2, 80, shape), 0).astype(np.float32)
  target = np.where(rng.random(shape) < 0.2, rng.uniform(2, 80, shape), 0).astype(np.float32)
  return sparse, target


def flops(kind: str, variant: str, batch: int, h: int, w: int) -> float:
  sys.path.insert(0, str(HERE))
  from bench_forward import model_flops  # pylint: disable=g-import-not-at-top
  f = batch * model_flops(variant, h, w)
  return 3 * f if kind == "train" else f


def _time(call, sync, calls: int, repeats: int) -> tuple[float, list[float]]:
  """Median over `repeats` of the mean time per call of `calls` back-to-back calls (after 3 warm-up calls)."""
  for _ in range(3):
    call()
  sync()
  per_call = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    for _ in range(calls):
      call()
    sync()
    per_call.append((time.perf_counter() - t0) / calls)
  return statistics.median(per_call), per_call


# --------------------------------------------------------------------------------------------------------------
# jax


def jax_worker(rows, calls: int, repeats: int, emit) -> None:
  import jax
  import jax.numpy as jnp
  import numpy as np

  from pncnn_jax.ensemble import members as ensemble_members
  from pncnn_jax.nn import models
  from pncnn_jax.training import step as training_step

  rng = np.random.default_rng(0)
  programs = {}
  for name, kind, variant, batch, h, w, prec in rows:
    model = models.build_model(variant, conv_precision="highest" if prec == "float32" else "default")
    variables = models.init_variables(model, jax.random.key(0))
    sparse, target = _batch(rng, batch, h, w)
    if kind == "forward":
      fn = jax.jit(functools.partial(model.apply, train=False))
      args = (variables, jnp.asarray(sparse))
    else:
      state = training_step.create_train_state(model, variables, learning_rate=0.01)
      fn = jax.jit(functools.partial(training_step.train_step, loss_name="gaussian_nll"), donate_argnums=0)
      args = (state, {"sparse": jnp.asarray(sparse), "target": jnp.asarray(target)})
    programs[name] = (fn, args, kind)
  # The ensemble rows: 4 pNCNN members, eval mode, batch 1, one vmapped call vs 4 calls of the single model.
  ens_model = models.build_model("pncnn")
  members = ensemble_members.init_ensemble(ens_model, seeds=[0, 1, 2, 3])
  x1 = jnp.asarray(_batch(rng, 1, H, W)[0])
  if len(rows) > len(QUICK):
    programs["ensemble4_vmap_f32"] = (jax.jit(functools.partial(ensemble_members.apply_ensemble, ens_model,
                                                                method="vmap")),
                                      (members, x1), "ensemble")
  compiled, compile_s = {}, {}

  def build(name):
    fn, args, _ = programs[name]
    t0 = time.perf_counter()
    c = fn.lower(*args).compile()
    return name, c, time.perf_counter() - t0

  # One program at a time: XLA autotunes the GPU convolutions while compiling, by timing candidates on the device.
  t0 = time.perf_counter()
  for name in programs:
    _, compiled[name], compile_s[name] = build(name)
    print(f"compiled {name} in {compile_s[name]:.1f} s", flush=True)
  emit("jax_compile", {"wall_s": time.perf_counter() - t0, "per_program_s": compile_s})
  single_members = ensemble_members.unstack_tree(members)
  for name, (fn, args, kind) in programs.items():
    c = compiled[name]
    mem = c.memory_analysis()
    mem_gb = None if mem is None else (mem.argument_size_in_bytes + mem.output_size_in_bytes
                                       + mem.temp_size_in_bytes - mem.alias_size_in_bytes) / 1e9
    if kind == "train":
      box = {"state": args[0]}

      def call(c=c, box=box, batch=args[1]):
        box["state"], box["m"] = c(box["state"], batch)

      sync = lambda box=box: jax.block_until_ready(box["m"]["loss"])  # noqa: E731
    else:
      box = {}

      def call(c=c, box=box, args=args):
        box["out"] = c(*args)

      sync = lambda box=box: jax.block_until_ready(box["out"])  # noqa: E731
    t, all_t = _time(call, sync, calls, repeats)
    emit(name, {"framework": "jax", "seconds": t, "all": all_t, "program_gb": mem_gb})
    if name == "ensemble4_vmap_f32":
      box = {}

      single = compiled["fwd_pncnn_b1_f32"]  # the same model, precision and input shape

      def call4(box=box, single=single):
        box["out"] = [single(v, x1) for v in single_members]

      t, all_t = _time(call4, lambda: jax.block_until_ready(box["out"]), calls, repeats)
      emit("ensemble4_separate_f32", {"framework": "jax", "seconds": t, "all": all_t})
  stats = jax.devices()[0].memory_stats() or {}
  emit("jax_peak", {"peak_bytes_in_use_gb": stats.get("peak_bytes_in_use", 0) / 1e9,
                    "device": jax.devices()[0].device_kind, "jax": jax.__version__})


# --------------------------------------------------------------------------------------------------------------
# torch


def torch_worker(rows, calls: int, repeats: int, emit) -> None:
  import numpy as np
  import torch
  import torch_pncnn

  torch.backends.cudnn.benchmark = True
  rng = np.random.default_rng(0)
  dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
  cuda = dev.type == "cuda"
  sync = torch.cuda.synchronize if cuda else (lambda: None)
  for name, kind, variant, batch, h, w, prec in rows:
    torch.backends.cudnn.allow_tf32 = prec == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    torch.manual_seed(0)
    model = torch_pncnn.build(variant).to(dev)
    sparse, target = _batch(rng, batch, h, w)
    x = torch.from_numpy(sparse.transpose(0, 3, 1, 2).copy()).to(dev)
    t = torch.from_numpy(target.transpose(0, 3, 1, 2).copy()).to(dev)
    sync()
    if cuda:
      torch.cuda.reset_peak_memory_stats()
    if kind == "forward":
      model.eval()

      def call(model=model, x=x):
        with torch.no_grad():
          model(x)
    else:
      model.train()
      opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8)

      def call(model=model, x=x, t=t, opt=opt):
        opt.zero_grad(set_to_none=True)
        depth, conf, _ = model(x)
        torch_pncnn.gaussian_nll(depth, conf, t).backward()
        opt.step()
    sec, all_t = _time(call, sync, calls, repeats)
    emit(name, {"framework": "torch", "seconds": sec, "all": all_t,
                "peak_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None})
    del model, x, t
    if cuda:
      torch.cuda.empty_cache()
  emit("torch_info", {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                      "device": torch.cuda.get_device_name() if cuda else "cpu"})


# --------------------------------------------------------------------------------------------------------------
# check: the torch network computes our function


def check_worker(emit, platform_name: str = "gpu") -> None:
  """Our pNCNN vs the torch network with the same weights, at float32: outputs, loss, gradients."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import torch
  import torch_pncnn

  from pncnn_jax import losses
  from pncnn_jax.checkpoints import convert
  from pncnn_jax.nn import models

  torch.backends.cudnn.allow_tf32 = False
  torch.backends.cuda.matmul.allow_tf32 = False
  dev = torch.device("cuda" if platform_name == "gpu" else "cpu")
  # A trained pNCNN (the shipped `synthetic:pncnn`, the official network form) on two synthetic scenes: random
  # weights give gradients so ill-conditioned that float32 runs of one framework differ by percents.
  from pncnn_jax.checkpoints import loader  # pylint: disable=g-import-not-at-top
  from pncnn_jax.data import synthetic  # pylint: disable=g-import-not-at-top
  scenes = [synthetic.generate(0, i, window=(144, 448, 64, 320), stream=1) for i in range(2)]
  sparse = np.stack([s["sparse"] for s in scenes]).astype(np.float32)
  target = np.stack([s["target"] for s in scenes]).astype(np.float32)
  model = models.build_model("pncnn", conv_precision="highest")
  variables = loader.load("synthetic:pncnn").variables
  tm = torch_pncnn.build("pncnn").to(dev)
  tm.load_state_dict({k: torch.from_numpy(np.asarray(v))
                      for k, v in convert.variables_to_state_dict(variables).items()},
                     strict=True)
  x = torch.from_numpy(sparse.transpose(0, 3, 1, 2).copy()).to(dev)
  t = torch.from_numpy(target.transpose(0, 3, 1, 2).copy()).to(dev)
  res = {}

  def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))

  tm.eval()
  with torch.no_grad():
    d_t, c_t, c0_t = (a.cpu().numpy().transpose(0, 2, 3, 1) for a in tm(x))
  out = model.apply(variables, jnp.asarray(sparse), train=False)
  res["eval_depth_max_abs_m"] = float(np.max(np.abs(np.asarray(out.depth) - d_t)))
  res["eval_confidence_rel"] = rel(out.confidence, c_t)
  res["eval_c0_rel"] = rel(out.input_confidence, c0_t)

  tm.train()
  d, c, _ = tm(x)
  loss_t = torch_pncnn.gaussian_nll(d, c, t)
  loss_t.backward()

  def objective(p):
    o, _ = model.apply({"params": p, "batch_stats": variables["batch_stats"]}, jnp.asarray(sparse), train=True,
                       mutable=["batch_stats"])
    return losses.get_loss("gaussian_nll")(o, jnp.asarray(target))

  loss_j, grads = jax.value_and_grad(objective)(variables["params"])
  res["train_loss_jax"], res["train_loss_torch"] = float(loss_j), float(loss_t.detach())
  gsd = convert.variables_to_state_dict({"params": grads, "batch_stats": variables["batch_stats"]})
  # The gradients at this random init are ill-conditioned (float32 runs of the same network differ by percents in
  # some tensors), so both float32 gradients are held against a float64 run of the torch network: per tensor,
  # e = max |g - g64| / max |g64|, and ours must stay within 3x torch's own float32 error or within 1e-2
  # (the tolerance tests/training/test_train_step_golden.py holds our gradients to against the official ones). The
  # biases of the convolutions that feed a train-mode BatchNorm are left out: their exact gradient is 0 (the batch
  # mean cancels them), so every run gives rounding noise there.
  import copy  # pylint: disable=g-import-not-at-top
  t64 = copy.deepcopy(tm).cpu().double()
  t64.zero_grad(set_to_none=True)
  d64, c64, _ = t64(x.cpu().double())
  torch_pncnn.gaussian_nll(d64, c64, t.cpu().double()).backward()
  g64 = {k: p.grad.numpy() for k, p in t64.named_parameters()}
  worst = {"tensor": "", "jax": 0.0, "torch_float32": 0.0, "ratio": 0.0}
  for k, p in tm.named_parameters():
    if re.search(r"\.conv\.[03]\.bias$", k) or k == "nconv.nconv7.weight_p":
      continue  # nconv7: two weights whose NConv output is scale-invariant, so sum_i w_i dL/dw_i = 0: noise-level
    scale = max(float(np.max(np.abs(g64[k]))), 1e-30)
    e_j = float(np.max(np.abs(np.asarray(gsd[k], np.float64) - g64[k]))) / scale
    e_t = float(np.max(np.abs(p.grad.cpu().numpy().astype(np.float64) - g64[k]))) / scale
    ratio = e_j / max(3 * e_t, 1e-2)
    if ratio > worst["ratio"]:
      worst = {"tensor": k, "jax": e_j, "torch_float32": e_t, "ratio": ratio}
  res["grad_worst"] = worst
  ok = (res["eval_depth_max_abs_m"] < 5e-3 and res["eval_confidence_rel"] < 1e-3 and res["eval_c0_rel"] < 1e-3
        and abs(res["train_loss_jax"] - res["train_loss_torch"]) <= 1e-4 * max(1.0, abs(res["train_loss_torch"]))
        and worst["ratio"] <= 1)
  res["ok"] = bool(ok)
  emit("check", res)
  if not ok:
    raise SystemExit(f"the torch baseline does not compute our function: {json.dumps(res)}")


# --------------------------------------------------------------------------------------------------------------
# orchestration and the report


def _spawn(worker: str, args, jsonl: pathlib.Path) -> int:
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  if worker in ("torch", "check"):
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # jax shares the device with torch in 'check'
  cmd = ([sys.executable, __file__, "--worker", worker, "--calls", str(args.calls), "--repeats", str(args.repeats),
          "--json", str(jsonl)] + (["--quick"] if args.quick else []) + (["--smoke"] if args.smoke else [])
         + (["--rows", args.rows] if args.rows else []))
  print("+", " ".join(cmd), flush=True)
  return subprocess.call(cmd, env=env)


def render(res: dict, rows=None) -> str:
  rows = ROWS if rows is None else rows
  jax_info, torch_info = res.get("jax_peak", {}), res.get("torch_info", {})
  lines = [
      f"## pncnn_jax against a PyTorch pNCNN on {jax_info.get('device', '?')} (bench/bench_gpu.py)",
      "",
      f"Run {datetime.date.today().isoformat()}: {jax_info.get('device', '?')}, "
      f"host {platform.processor() or platform.machine()} "
      f"({os.cpu_count()} cores); Python {platform.python_version()}, jax {jax_info.get('jax', '?')}, "
      f"torch {torch_info.get('torch', '?')} (cuDNN {torch_info.get('cudnn', '?')}). "
      "Command: `python bench/bench_gpu.py --output docs/develop/benchmarks-log.md`.",
      "",
      "The PyTorch network (bench/torch_pncnn.py) is ours, written from docs/SPEC.md in the official layout, eager "
      "mode, cudnn.benchmark on, Adam (foreach). Before timing, it loaded our weights and reproduced our outputs, "
      "Gaussian NLL and gradients at float32: " + _check_line(res.get("check")),
      "",
      "Each time is the median over the repeats of the mean of back-to-back calls (training steps feed their state "
      "back, as a training loop). float32 = every convolution float32 (jax `conv_precision='highest'`, the default; "
      "torch `cudnn.allow_tf32=False`); tf32 = UNet convolutions may use TF32 (jax `conv_precision='default'`, NConv "
      "layers stay float32; torch `cudnn.allow_tf32=True`, its default, for every convolution). Ratio = torch time / "
      "jax time (> 1: pncnn_jax is faster; for training steps it is the throughput ratio). Memory: torch = "
      "max_memory_allocated during the row; jax = the compiled program's arguments + outputs + temporaries.",
      "",
      "| what | precision | jax [ms] | torch [ms] | ratio | jax TFLOP/s | jax memory [GB] | torch memory [GB] |",
      "|---|---|---|---|---|---|---|---|",
  ]
  for name, kind, variant, batch, h, w, prec in rows:
    j, t = res.get(name, {}).get("jax"), res.get(name, {}).get("torch")
    if not j and not t:
      continue
    label = f"{'training step' if kind == 'train' else 'forward'} {variant}, batch {batch}, {h}x{w}"
    jt = j["seconds"] * 1e3 if j else None
    tt = t["seconds"] * 1e3 if t else None
    ratio = f"{tt / jt:.2f}" if jt and tt else "-"
    tflops = f"{flops(kind, variant, batch, h, w) / (jt / 1e3) / 1e12:.1f}" if jt else "-"
    jm = f"{j['program_gb']:.2f}" if j and j.get("program_gb") is not None else "-"
    tm = f"{t['peak_gb']:.2f}" if t and t.get("peak_gb") is not None else "-"
    lines.append(f"| {label} | {prec} | {_f(jt)} | {_f(tt)} | {ratio} | {tflops} | {jm} | {tm} |")
  e_v, e_s = res.get("ensemble4_vmap_f32", {}).get("jax"), res.get("ensemble4_separate_f32", {}).get("jax")
  if e_v and e_s:
    lines += ["", f"4-member pNCNN ensemble, forward, batch 1, {H}x{W}, float32: one vmapped call "
              f"{e_v['seconds'] * 1e3:.2f} ms, 4 separate calls of the single model {e_s['seconds'] * 1e3:.2f} ms "
              f"(vmap {e_s['seconds'] / e_v['seconds']:.2f}x the throughput)."]
  comp = res.get("jax_compile")
  if comp:
    lines += ["", f"jax compile: {len(comp['per_program_s'])} programs in {comp['wall_s']:.1f} s, one at a time; "
              f"the slowest {max(comp['per_program_s'].values()):.1f} s. Peak device memory of the jax process: "
              f"{jax_info.get('peak_bytes_in_use_gb', 0):.2f} GB."]
  return "\n".join(lines)


def _f(x):
  return "-" if x is None else f"{x:.2f}"


def _check_line(check) -> str:
  if not check:
    return "not run."
  return (f"depth max |diff| {check['eval_depth_max_abs_m']:.1e} m, "
          f"confidence rel. {check['eval_confidence_rel']:.1e}, "
          f"c0 rel. {check['eval_c0_rel']:.1e}, loss {check['train_loss_jax']:.6f} vs {check['train_loss_torch']:.6f}, "
          f"gradients against a float64 run: worst tensor {check['grad_worst']['tensor']}, max error "
          f"{check['grad_worst']['jax']:.1e} of its max (torch float32: {check['grad_worst']['torch_float32']:.1e}).")


def collect(jsonl: pathlib.Path) -> dict:
  res: dict = {}
  for line in jsonl.read_text().splitlines():
    row = json.loads(line)
    key, value = row["key"], row["value"]
    if isinstance(value, dict) and value.get("framework"):
      res.setdefault(key, {})[value["framework"]] = value
    else:
      res[key] = value
  return res


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--output", type=pathlib.Path, help="markdown file to write the 'gpu' section into")
  p.add_argument("--json", type=pathlib.Path, default=pathlib.Path("bench_gpu.jsonl"), help="raw rows (JSON lines)")
  p.add_argument("--calls", type=int, default=10, help="back-to-back calls per timing")
  p.add_argument("--repeats", type=int, default=5, help="timings per row")
  p.add_argument("--quick", action="store_true", help="two rows only")
  p.add_argument("--rows", default="", help="comma-separated row names (default: all)")
  p.add_argument("--smoke", action="store_true", help="every row at 32x64, on any device (tests this script)")
  p.add_argument("--worker", choices=("jax", "torch", "check", "check_cpu"), help=argparse.SUPPRESS)
  p.add_argument("--skip", default="", help="comma-separated steps to skip: check,jax,torch")
  p.add_argument("--render_only", action="store_true", help="write the section from an existing --json")
  args = p.parse_args(argv)
  rows = [r for r in ROWS if not args.quick or r[0] in QUICK]
  if args.rows:
    rows = [r for r in rows if r[0] in args.rows.split(",")]
  if args.smoke:
    global H, W  # pylint: disable=global-statement
    H, W = 32, 64
    rows = [r[:4] + (32, 64) + r[6:] for r in rows]

  def emit(key, value):
    print(json.dumps({key: value})[:400], flush=True)
    with open(args.json, "a") as f:
      f.write(json.dumps({"key": key, "value": value}) + "\n")

  if args.worker == "jax":
    jax_worker(rows, args.calls, args.repeats, emit)
    return 0
  if args.worker == "torch":
    torch_worker(rows, args.calls, args.repeats, emit)
    return 0
  if args.worker in ("check", "check_cpu"):
    check_worker(emit, "gpu" if args.worker == "check" else "cpu")
    return 0
  if not args.render_only:
    args.json.unlink(missing_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    for worker in ("check", "jax", "torch"):
      if worker not in skip and _spawn(worker, args, args.json) != 0:
        print(f"error: the {worker} step failed (see above)", file=sys.stderr)
        if worker == "check":
          return 1
  body = render(collect(args.json), rows)
  print(body)
  if args.output:
    write_section(args.output, "gpu", body)
  return 0


if __name__ == "__main__":
  sys.exit(main())
