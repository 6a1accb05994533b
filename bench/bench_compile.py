"""Cold-start cost on CPU (issue 42): the first training step and the first forward of a new frame size, each in a
fresh process with no compilation cache, for the NConv forward as shipped (`rows`: the fused taps one kernel row
per loop iteration), fully unrolled (`unrolled`, the form before 2026-11-29) and the library convolution
(`library`), interleaved round by round. Also the whole `python -m pncnn_jax.predict` of one new-size frame.

  python bench/bench_compile.py --rounds 2 --output /tmp/compile.json

Reports wall and CPU seconds of lowering, compiling and the first and second call, the machine's load average at
each measurement, and peak RSS. Numbers for docs/develop/benchmarks-log.md ('Cold start').
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
KERNELS = ("rows", "unrolled", "library")
RECOMMENDED = "synthetic:sparse_var_beta_detach_masked"  # the Completer's and predict's default model


def _unrolled(a, w):
  """The fused-taps forward before 2026-11-29: every kh*kw*C_in*C_out slice unrolled (for comparison only)."""
  import jax.numpy as jnp
  kh, kw, ci, co = w.shape
  _, h, wd, _ = a.shape
  ap = jnp.pad(a, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
  outs = []
  for o in range(co):
    acc = None
    for i in range(kh):
      for j in range(kw):
        for c in range(ci):
          term = ap[:, i:i + h, j:j + wd, c] * w[i, j, c, o]
          acc = term if acc is None else acc + term
    outs.append(acc)
  return jnp.stack(outs, axis=-1)


def _set_kernel(kernel: str) -> None:
  from pncnn_jax.nn import cpu_kernels
  if kernel == "unrolled":
    cpu_kernels._taps_same_conv = _unrolled
  elif kernel == "library":
    cpu_kernels.TAPS_FWD_MIN_FRAME_PIXELS = 10 ** 12


def child(kernel: str, what: str, variant: str, batch: int, height: int, width: int) -> dict:
  """One measurement in this (fresh) process."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from pncnn_jax import from_config
  from pncnn_jax.training import step as training_step
  jax.config.update("jax_enable_compilation_cache", False)
  _set_kernel(kernel)
  config = from_config.load_config(f"configs/synthetic.py:{variant}")
  model = from_config.build_model(config)
  rng = np.random.default_rng(0)
  x = jnp.asarray(np.where(rng.random((batch, height, width, 1)) < 0.05,
                           rng.uniform(2.0, 80.0, (batch, height, width, 1)), 0.0), jnp.float32)
  variables = model.init(jax.random.key(0), x[:1])
  if what == "step":
    state = training_step.create_train_state(model, variables, learning_rate=0.01)
    args = (state, {"sparse": x, "target": x})
    loss = from_config.variant_loss(config)
    fn = jax.jit(lambda s, b: training_step.train_step(s, b, loss_name=loss))
  else:
    args = (variables, x)
    fn = jax.jit(lambda v, s: model.apply(v, s))
  clock = lambda: (time.perf_counter(), time.process_time())  # noqa: E731
  t0 = clock()
  lowered = fn.lower(*args)
  t1 = clock()
  compiled = lowered.compile()
  t2 = clock()
  jax.block_until_ready(compiled(*args))
  t3 = clock()
  jax.block_until_ready(compiled(*args))
  t4 = clock()
  wall = lambda a, b: round(b[0] - a[0], 3)  # noqa: E731
  cpu = lambda a, b: round(b[1] - a[1], 3)  # noqa: E731
  return {"kernel": kernel, "what": what, "variant": variant, "shape": [batch, height, width],
          "lower_s": wall(t0, t1), "compile_s": wall(t1, t2), "compile_cpu_s": cpu(t1, t2),
          "first_call_s": wall(t2, t3), "second_call_s": wall(t3, t4),
          "first_step_total_s": wall(t0, t3), "load1": round(os.getloadavg()[0], 2),
          "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 2)}


def predict_process(height: int, width: int, tmp: pathlib.Path) -> dict:
  """Wall time of `python -m pncnn_jax.predict` on one new-size frame, no compilation cache, whole process."""
  import numpy as np
  rng = np.random.default_rng(1)
  frame = np.where(rng.random((height, width)) < 0.05, rng.uniform(2.0, 80.0, (height, width)), 0.0)
  np.save(tmp / "frame.npy", frame.astype(np.float32))
  env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
  env.update(JAX_PLATFORMS="cpu", PNCNN_NO_COMPILATION_CACHE="1")
  t = time.perf_counter()
  cmd = [sys.executable, "-m", "pncnn_jax.predict", "--checkpoint", RECOMMENDED, "--input", str(tmp / "frame.npy"),
         "--output", str(tmp / f"out_{time.time_ns()}"), "--no_preview"]
  r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
  wall = time.perf_counter() - t
  if r.returncode != 0:
    raise RuntimeError(r.stderr[-2000:])
  return {"what": "predict_process", "shape": [height, width], "wall_s": round(wall, 2),
          "load1": round(os.getloadavg()[0], 2)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--kernels", default=",".join(KERNELS))
  parser.add_argument("--step", default="pncnn:4:352:1216", help="variant:batch:height:width of the training step")
  parser.add_argument("--forward", default="sparse_var:1:352:1216", help="variant:batch:height:width of the forward")
  parser.add_argument("--predict", default="376:1241", help="height:width of the predict frame ('' to skip)")
  parser.add_argument("--output", default="")
  parser.add_argument("--child", default="", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    kernel, what, variant, b, h, w = args.child.split(":")
    print(json.dumps(child(kernel, what, variant, int(b), int(h), int(w))))
    return 0
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for r in range(args.rounds):
      for kernel in args.kernels.split(","):
        for what, spec in (("step", args.step), ("forward", args.forward)):
          if not spec:
            continue
          out = subprocess.run([sys.executable, __file__, "--child", f"{kernel}:{what}:{spec}"], cwd=REPO,
                               env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True)
          if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
          rows.append({"round": r, **json.loads(out.stdout.strip().splitlines()[-1])})
          print(rows[-1], flush=True)
      if args.predict:
        h, w = (int(v) for v in args.predict.split(":"))
        rows.append({"round": r, **predict_process(h, w, pathlib.Path(tmp))})
        print(rows[-1], flush=True)
  import jax
  meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.processor() or platform.machine(),
          "cores": os.cpu_count(), "jax": jax.__version__, "python": platform.python_version()}
  if args.output:
    pathlib.Path(args.output).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
