"""The markdown section of bench/bench_forward.py: tables, ratios against the official figures and PyTorch, and
the plain list of where pncnn_jax is behind. Pure functions of the results dict (tests/bench/test_bench_report.py)."""

from __future__ import annotations

import statistics

MATMUL_GFLOP = 2 * 4096**3 / 1e9
TUNED_GLIBC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"

# The official PyTorch code (its own repository, as shipped) on this machine kind: 2-core AMD EPYC VM, batch 4 at
# 352x1216 for the training step, medians of two rounds, measured side by side with ours on 2026-11-26 (issue 15).
# "tuned" = the same code with GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736.
OFFICIAL = {
    "date": "2026-11-26",
    "pncnn_forward_b1": {"shipped": (1.70, 1.87), "tuned": (0.94, 1.07)},
    "ncnn_conf_l1_forward_b1": {"shipped": (0.76, 0.95), "tuned": (0.42, 0.52)},
    "pncnn_train_step_b4": {"shipped": (23.6, 29.8), "tuned": (11.6, 16.4)},
    "peak_rss_train_gb": {"shipped": (8.35, 8.35), "tuned": (11.0, 11.8)},
    "first_call_train_s": {"shipped": (28.0, 28.0)},
}
TRAIN_ROWS = ("pncnn_train_step_b4", "pncnn_train_step_b4_x2")
COMPARED = (  # (our row, official key, torch row, label)
    ("pncnn_forward_b1", "pncnn_forward_b1", "fwd_pncnn_b1", "pNCNN forward, batch 1 [s]"),
    ("ncnn_conf_l1_forward_b1", "ncnn_conf_l1_forward_b1", "fwd_ncnn_conf_l1_b1", "NCNN-Conf forward, batch 1 [s]"),
    ("pncnn_train_step_b4", "pncnn_train_step_b4", "train_pncnn_b4", "pNCNN training step, batch 4, 1 per call [s]"),
    ("pncnn_train_step_b4_x2", "pncnn_train_step_b4", "train_pncnn_b4",
     "pNCNN training step, batch 4, 2 per call, per step [s]"),
)


def ratio_text(other, ours: float) -> str:
  """other / ours as 'a.aax' or 'a.aa-b.bbx' for a (low, high) range; > 1 means ours is faster (or smaller)."""
  if other is None or not ours:
    return "-"
  lo, hi = (other, other) if isinstance(other, (int, float)) else other
  return f"{lo / ours:.2f}x" if lo == hi else f"{lo / ours:.2f}-{hi / ours:.2f}x"


def _range(other) -> str:
  if other is None:
    return "-"
  lo, hi = (other, other) if isinstance(other, (int, float)) else other
  return f"{lo:.2f}" if lo == hi else f"{lo:.2f}-{hi:.2f}"


def matmul_rates(results: dict) -> dict[str, list[float]]:
  """Every paired 4096^2 float32 matmul rate of the run [GFLOP/s], per framework."""
  rates = {"jax (XLA)": [x for r in results["rows"].values() for x in r.get("matmul_gflops", [])]}
  torch = results.get("torch") or {}
  for mode, rows in torch.items():
    for r in rows.values():
      rates.setdefault(f"torch ({mode})", []).extend(r.get("matmul_gflops", []))
  return {k: v for k, v in rates.items() if v}


def best_matmul(results: dict) -> tuple[str, float]:
  """The framework with the fastest median matmul in this run, and that median [GFLOP/s]."""
  med = {k: statistics.median(v) for k, v in matmul_rates(results).items()}
  name = max(med, key=med.get)
  return name, med[name]


def behind(results: dict) -> list[str]:
  """Every comparison where pncnn_jax is slower (time) or larger (peak memory), in words."""
  rows, torch, official = results["rows"], results.get("torch") or {}, results.get("official", OFFICIAL)
  out = []
  for ours_key, off_key, torch_key, label in COMPARED:
    if ours_key not in rows:
      continue
    t = rows[ours_key]["seconds"]
    for which in ("shipped", "tuned"):
      lo, hi = official[off_key][which]
      if t > lo:
        worse = "slower than its whole range" if t > hi else f"slower than its fastest figure ({lo:.2f} s)"
        out.append(f"{label.split(' [')[0]}: {t:.2f} s, {worse} of the official code {which} ({lo:.2f}-{hi:.2f} s)")
    for mode, trows in torch.items():
      if torch_key in trows and t > trows[torch_key]["seconds"]:
        out.append(f"{label.split(' [')[0]}: {t:.2f} s against {trows[torch_key]['seconds']:.2f} s for the PyTorch "
                   f"pNCNN on this machine ({'glibc default' if mode == 'plain' else 'tuned glibc'})")
  for key in TRAIN_ROWS:
    if key in rows:
      gb = rows[key]["peak_rss_gb"]
      lo = official["peak_rss_train_gb"]["shipped"][0]
      if gb > lo:
        out.append(f"peak memory of the training step ({key}): {gb:.2f} GB against {lo:.2f} GB for the official "
                   "code as shipped")
      for mode, trows in torch.items():
        if "train_pncnn_b4" in trows and gb > trows["train_pncnn_b4"]["peak_rss_gb"]:
          out.append(f"peak memory of the training step ({key}): {gb:.2f} GB against "
                     f"{trows['train_pncnn_b4']['peak_rss_gb']:.2f} GB for the PyTorch pNCNN here ({mode})")
  train = rows.get("pncnn_train_step_b4")
  if train and "compile_s" in train:
    first = train["first_call_s"] + train["compile_s"]
    others = [("the official code as shipped", official["first_call_train_s"]["shipped"][0])]
    others += [(f"the PyTorch pNCNN here ({mode})", trows["train_pncnn_b4"]["first_call_s"])
               for mode, trows in torch.items() if "train_pncnn_b4" in trows]
    out += [f"first training step including compilation: {first:.1f} s against {s:.1f} s for {who} (a restart "
            "with the persistent compilation cache skips the compilation)" for who, s in others if first > s]
  return out


def render_cpu(results: dict, labels: dict[str, str]) -> str:
  meta, rows, torch = results.get("meta", {}), results["rows"], results.get("torch") or {}
  best_name, best = best_matmul(results)
  rates = matmul_rates(results)
  lines = [
      "## Forward and training step on CPU (bench/bench_forward.py)",
      "",
      f"Machine: {meta.get('cpu', 'CPU')}, {meta.get('cores')} cores. Python {meta.get('python')}, jax "
      f"{meta.get('jax')}. Date: {meta.get('date')}. Command: `python bench/bench_forward.py --output "
      "docs/develop/benchmarks-log.md"
      + (f" --torch_python {meta['torch_python']}`" if meta.get("torch_python") else "`")
      + f". Load average at the end: {meta.get('load_at_end', 0):.1f}.",
      "",
      "Each row ran in its own process (peak resident memory = that row's process), every call paired with a "
      "4096^2 float32 matmul made just before it; times are medians (range) of the timed calls. FLOPs are counted "
      "from the layer shapes (training step = 3x forward). 4096^2 float32 matmul, median (range) of every paired "
      "call [GFLOP/s]: " + "; ".join(f"{k} {statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})"
                                     for k, v in rates.items())
      + f". The yardstick 'best matmul' is {best_name}'s median, {best:.0f} GFLOP/s.",
      "",
      "| what | time [s], median (range) | first call [s] | GFLOP/s | fraction of our matmul, median (range) | "
      "fraction of the best matmul | peak RSS [GB] |",
      "|---|---|---|---|---|---|---|",
  ]
  for key, r in rows.items():
    lines.append(
        f"| {labels.get(key, key)} | {r['seconds']:.3f} ({min(r['all']):.3f}-{max(r['all']):.3f}) | "
        f"{r['first_call_s']:.1f} | {r['gflops']:.1f} | {r['fraction_of_matmul']:.2f} ({r['fraction_range'][0]:.2f}-"
        f"{r['fraction_range'][1]:.2f}) | {r['gflops'] / best:.2f} | {r['peak_rss_gb']:.2f} |")
  train = rows.get("pncnn_train_step_b4")
  if train:
    lines += ["", f"Compiling the 1-step training program took {train['compile_s']:.1f} s "
              f"({train['compile_cpu_s']:.1f} s of CPU) without the persistent compilation cache; its XLA working "
              f"memory is {train['program_gb']:.2f} GB (arguments + outputs + temporaries)."]
  off = results["official"]
  lines += ["", f"Against the official PyTorch code on this machine kind (measured {off['date']}, "
            "batch 4 at 352x1216 for the training step: as shipped, and tuned with GLIBC_TUNABLES="
            "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736) and against the PyTorch pNCNN "
            "(bench/torch_pncnn.py, written from the spec) run now on this machine, with glibc's defaults and tuned. "
            "Ratio = their time (or memory) / ours: > 1 means pncnn_jax is faster (or smaller).",
            "",
            "| what | ours | official shipped | ratio | official tuned | ratio | PyTorch here | ratio | "
            "PyTorch here, tuned | ratio |",
            "|---|---|---|---|---|---|---|---|---|---|"]
  for ours_key, off_key, torch_key, label in COMPARED:
    if ours_key not in rows:
      continue
    t = rows[ours_key]["seconds"]
    cells = [label, f"{t:.2f}"]
    for which in ("shipped", "tuned"):
      cells += [_range(off[off_key][which]), ratio_text(off[off_key][which], t)]
    for mode in ("plain", "tuned"):
      tr = torch.get(mode, {}).get(torch_key)
      cells += [f"{tr['seconds']:.2f}", ratio_text(tr["seconds"], t)] if tr else ["-", "-"]
    lines.append("| " + " | ".join(cells) + " |")
  for key in TRAIN_ROWS:
    if key not in rows:
      continue
    gb = rows[key]["peak_rss_gb"]
    cells = [f"peak RSS, training step{' (2 per call)' if key.endswith('x2') else ''} [GB]", f"{gb:.2f}"]
    for which in ("shipped", "tuned"):
      cells += [_range(off["peak_rss_train_gb"][which]), ratio_text(off["peak_rss_train_gb"][which], gb)]
    for mode in ("plain", "tuned"):
      tr = torch.get(mode, {}).get("train_pncnn_b4")
      cells += [f"{tr['peak_rss_gb']:.2f}", ratio_text(tr["peak_rss_gb"], gb)] if tr else ["-", "-"]
    lines.append("| " + " | ".join(cells) + " |")
  if train:
    first = train["first_call_s"] + train["compile_s"]
    tr = torch.get("plain", {}).get("train_pncnn_b4")
    shipped = off["first_call_train_s"]["shipped"]
    lines.append(f"| first training step incl. compile [s] | {first:.1f} | {_range(shipped)} | "
                 f"{ratio_text(shipped, first)} | - | - | "
                 + (f"{tr['first_call_s']:.1f} | {ratio_text(tr['first_call_s'], first)}" if tr else "- | -")
                 + " | - | - |")
  if not torch:
    lines += ["", "torch was not available to this run (no `--torch_python`, and this interpreter has no torch): "
              "the PyTorch columns are empty and the best matmul is ours."]
  late = behind(results)
  lines += ["", "**Where pncnn_jax is behind in this run:** " + ("; ".join(late) + "." if late else "nowhere.")]
  return "\n".join(lines)


def render_accelerator(results: dict, labels: dict[str, str]) -> str:
  meta = results.get("meta", {})
  lines = [f"## Forward and training step on {meta.get('device')}", "",
           f"Backend {meta.get('backend')}, python {meta.get('python')}, jax {meta.get('jax')}, {meta.get('date')}. "
           "Each row is the median of its timings, each of 20 back-to-back calls (after a warm-up call), paired with "
           "a 4096^2 float32 matmul timing made just before it.", "",
           "| what | time (s) | GFLOP | GFLOP/s | fraction of matmul rate, median (range) | program memory [GB] |",
           "|---|---|---|---|---|---|"]
  for key, r in results.items():
    if not isinstance(r, dict) or "fraction_of_matmul" not in r:
      continue
    lines.append(f"| {labels.get(key, key)} | {r['seconds']:.4f} | {r['gflop']:.1f} | {r['gflops']:.1f} | "
                 f"{r['fraction_of_matmul']:.2f} ({r['fraction_range'][0]:.2f}-{r['fraction_range'][1]:.2f}) | "
                 f"{r.get('program_gb') or 0:.2f} |")
  lines += ["", f"Peak device memory in use: {results.get('peak_device_gb', 0):.2f} GB."]
  return "\n".join(lines)


LABELS = {
    "pncnn_forward_b1": "pNCNN forward, 352x1216, batch 1",
    "ncnn_conf_l1_forward_b1": "NCNN-Conf forward, 352x1216, batch 1",
    "pncnn_forward_b1_fast": "pNCNN forward, UNets at precision='default' (TF32/bf16 passes)",
    "pncnn_train_step_b4": "pNCNN training step, 352x1216, batch 4 (fwd+bwd+Adam), 1 step per call",
    "pncnn_train_step_b4_x2": "the same step, 2 steps per call (`config.steps_per_call=2`), per step",
    "pncnn_train_step_b4_4k_pages": "the 1-step-per-call training step with 4 KiB pages (`PNCNN_NO_HUGEPAGES=1`)",
    "pncnn_train_step_b16": "pNCNN training step, 352x1216, batch 16",
    "pncnn_train_step_b16_fast": "pNCNN training step, batch 16, UNets at precision='default'",
}


def render(results: dict) -> str:
  """The section for a bench_forward.py results dict (CPU: 'rows'/'torch'/'meta'; accelerators: flat rows)."""
  if "rows" in results:
    return render_cpu(dict(results, official=results.get("official", OFFICIAL)), LABELS)
  return render_accelerator(results, LABELS)
