"""Where a CPU pNCNN training step spends its time: per-operation durations from the jax profiler, by kind.

  taskset -c 0 python bench/profile_step.py [--batch 4 --height 352 --width 1216] [--top 25] [--json OUT.json]

Compiles the training step (Gaussian NLL, Adam, the trainer's options), runs it twice, traces a third call and sums
the durations of the compiled program's operations (XLA:CPU thunks) by kind: the library convolutions (forward and
input gradients), the dot products (the UNets' tiled weight gradients), each elementwise/reduction fusion kind (by
the HLO ops it fuses), copies and loops. Run it pinned to one core (`taskset -c 0`): the durations are then CPU
seconds. With several cores, concurrent operations overlap and an operation's duration also counts the time it
waited for a core. Results on this machine: docs/develop/benchmarks-log.md ("Where the step's time goes").
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import re
import sys
import tempfile
import time

_FUSION = re.compile(r"^\s*(?:ROOT )?%?(\S+) = (\S+) [\w-]+\(.*?calls=%?([\w.\-]+)", re.M)
_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_OP = re.compile(r"^\s*(?:ROOT )?%?\S+ = \S+ ([\w-]+)\(")
_SKIP = {"parameter", "constant", "bitcast", "broadcast"}


def op_kinds(hlo: str) -> dict[str, str]:
  """Instruction name -> kind, for the fusions of an optimised HLO module's text: 'convolution' or 'dot' when the
  fusion holds one, else 'fusion(op, op, ...)' with the (at most four, sorted) ops it fuses."""
  ops: dict[str, list[str]] = {}
  current = None
  for line in hlo.splitlines():
    m = _COMPUTATION.match(line)
    if m:
      current = ops.setdefault(m.group(1), [])
      continue
    m = _OP.match(line)
    if m and current is not None:
      current.append(m.group(1))
  kinds = {}
  for m in _FUSION.finditer(hlo):
    inner = ops.get(m.group(3), [])
    hit = next((k for k in ("convolution", "dot") if k in inner), None)
    kinds[m.group(1)] = hit or "fusion(" + ",".join(sorted(set(inner) - _SKIP)[:4]) + ")"
  return kinds


def summarise(events: dict[str, tuple[float, int]], kinds: dict[str, str]) -> list[tuple[str, float, int]]:
  """(kind, seconds, calls), largest first, from {thunk name: (seconds, calls)}; a thunk that is not a fusion is
  its own kind (its name without the numeric suffix)."""
  total: collections.Counter = collections.Counter()
  calls: collections.Counter = collections.Counter()
  for name, (seconds, n) in events.items():
    kind = kinds.get(name) or re.sub(r"\.\d+$", "", name)
    total[kind] += seconds
    calls[kind] += n
  return [(k, s, calls[k]) for k, s in total.most_common()]


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
  p.add_argument("--batch", type=int, default=4)
  p.add_argument("--height", type=int, default=352)
  p.add_argument("--width", type=int, default=1216)
  p.add_argument("--top", type=int, default=25, help="kinds to print")
  p.add_argument("--json", default="", help="also write the summary here")
  args = p.parse_args(argv)
  if min(args.batch, args.height, args.width) < 1:
    print("error: --batch, --height and --width must be positive", file=sys.stderr)
    return 2

  import jax  # pylint: disable=g-import-not-at-top
  from bench_levers import make_step  # pylint: disable=g-import-not-at-top  # the benchmarks' step and batch

  step, state, data = make_step({}, args.batch, args.height, args.width)
  compiled = step.lower(state, data).compile()
  kinds = op_kinds(compiled.as_text())
  for _ in range(2):
    state, m = compiled(state, data)
    jax.block_until_ready(m)
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir)
    t0 = time.perf_counter()
    state, m = compiled(state, data)
    jax.block_until_ready(m)
    wall = time.perf_counter() - t0
    jax.profiler.stop_trace()
    pb = sorted(pathlib.Path(trace_dir).rglob("*.xplane.pb"))[-1]
    profile = jax.profiler.ProfileData.from_file(str(pb))
  events: dict[str, list] = collections.defaultdict(lambda: [0.0, 0])
  for plane in profile.planes:
    for line in plane.lines:
      if not line.name.startswith("tf_XLAEigen"):  # XLA:CPU's worker threads run the program's operations
        continue
      for ev in line.events:
        if "::" in ev.name:  # the executor's own scopes (ThunkExecutor::..., SlinkyThreadPool::Await): waiting
          continue
        events[ev.name][0] += ev.duration_ns / 1e9
        events[ev.name][1] += 1
  rows = summarise({k: (v[0], v[1]) for k, v in events.items()}, kinds)
  total = sum(s for _, s, _ in rows)
  print(f"traced step: {wall:.2f} s wall; operations {total:.2f} s "
        f"({args.batch}x{args.height}x{args.width}, {jax.devices()[0].platform})")
  for kind, seconds, n in rows[:args.top]:
    print(f"{seconds:8.2f} s {100 * seconds / max(total, 1e-12):5.1f} %  x{n:<6} {kind}")
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps({"wall_s": wall, "ops_s": total, "rows": rows}, indent=1) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
