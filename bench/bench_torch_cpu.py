"""The PyTorch pNCNN (bench/torch_pncnn.py) on this machine's CPU: the torch side of bench/bench_forward.py.

  /path/to/torch/python bench/bench_torch_cpu.py [--rows matmul,fwd_pncnn_b1,...] [--repeats 5]

Runs under any interpreter that has torch (torch is never a dependency of pncnn_jax; this file imports nothing
from the package). Each row runs in its own child process, so that its peak resident memory is its own, and
prints one JSON line: {"row", "seconds" (median), "all", "matmul_gflops" (the paired 4096^2 float32 matmuls),
"peak_rss_gb", "torch", "threads", "glibc_tunables"}. Every model call is paired with a torch matmul made just
before it, as bench/bench_forward.py pairs ours: this machine's matmul rate drifts.

bench/bench_forward.py runs it twice when a torch interpreter is given: with glibc's defaults, and "tuned" with
GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 (glibc keeps freed memory, which
saves PyTorch the page faults of re-allocating its activations every step).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

H, W = 352, 1216
MATMUL_N = 4096
ROWS = ("matmul", "fwd_pncnn_b1", "fwd_ncnn_conf_l1_b1", "train_pncnn_b4")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


def _batch(batch: int, seed: int = 0):
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  shape = (batch, 1, H, W)
  sparse = np.where(rng.random(shape) < 0.05, rng.uniform(2, 80, shape), 0).astype(np.float32)
  target = np.where(rng.random(shape) < 0.2, rng.uniform(2, 80, shape), 0).astype(np.float32)
  return sparse, target


def run_row(row: str, repeats: int) -> dict:
  """Times one row in this process: `repeats` (matmul, model call) pairs after two warm-up calls."""
  import torch  # pylint: disable=g-import-not-at-top
  import torch_pncnn  # pylint: disable=g-import-not-at-top

  torch.manual_seed(0)
  a = torch.randn(MATMUL_N, MATMUL_N)
  matmul = lambda: a @ a  # noqa: E731
  if row == "matmul":
    call = matmul
  elif row.startswith("fwd_"):
    model = torch_pncnn.build(row[4:-3]).eval()
    x = torch.from_numpy(_batch(1)[0])

    def call():
      with torch.no_grad():
        model(x)
  elif row == "train_pncnn_b4":
    model = torch_pncnn.build("pncnn").train()
    sparse, target = _batch(4)
    x, t = torch.from_numpy(sparse), torch.from_numpy(target)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8)

    def call():
      opt.zero_grad(set_to_none=True)
      depth, conf, _ = model(x)
      torch_pncnn.gaussian_nll(depth, conf, t).backward()
      opt.step()
  else:
    raise SystemExit(f"error: --rows: unknown row {row!r}; expected some of {','.join(ROWS)}")
  t0 = time.perf_counter()
  call()
  first = time.perf_counter() - t0
  call()
  times, rates = [], []
  for _ in range(repeats):
    t0 = time.perf_counter()
    matmul()
    rates.append(2 * MATMUL_N**3 / (time.perf_counter() - t0) / 1e9)
    t0 = time.perf_counter()
    call()
    times.append(time.perf_counter() - t0)
  return {"row": row, "seconds": statistics.median(times), "all": times, "first_call_s": first,
          "matmul_gflops": rates, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
          "torch": torch.__version__, "threads": torch.get_num_threads(),
          "glibc_tunables": os.environ.get("GLIBC_TUNABLES", "")}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated rows, some of {','.join(ROWS)}")
  p.add_argument("--repeats", type=int, default=5, help="timed (matmul, model) pairs per row")
  p.add_argument("--one_row", default="", help=argparse.SUPPRESS)  # the child process of one row
  args = p.parse_args(argv)
  if args.one_row:
    print(json.dumps(run_row(args.one_row, args.repeats)), flush=True)
    return 0
  for row in filter(None, args.rows.split(",")):
    if row not in ROWS:
      print(f"error: --rows: unknown row {row!r}; expected some of {','.join(ROWS)}", file=sys.stderr)
      return 2
    out = subprocess.run([sys.executable, __file__, "--one_row", row, "--repeats", str(args.repeats)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
      print(json.dumps({"row": row, "error": out.stderr.strip().splitlines()[-1:]}), flush=True)
      continue
    print(out.stdout.strip().splitlines()[-1], flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
