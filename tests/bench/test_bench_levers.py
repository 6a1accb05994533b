"""bench/bench_levers.py --xla_paths: the configurations, their errors and the merged section (no compilation)."""

import subprocess
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import bench_levers  # noqa: E402  pylint: disable=g-import-not-at-top


def _cfg(flags, fwd, step, equal=True):
  return {"flags": flags, "compile_s": 10.0, "fusions": {"__ynn_fusion": 4, "__onednn_fusion": 0, "__xnn_fusion": 0},
          "fwd_s": fwd, "step_s": step, "fwd_ratio": [a / b for a, b in zip(fwd, [0.1, 0.1])],
          "step_ratio": [a / b for a, b in zip(step, [1.0, 1.0])], "fwd_median_s": sum(fwd) / 2,
          "step_median_s": sum(step) / 2, "fwd_median_ratio": sum(fwd) / 0.2, "step_median_ratio": sum(step) / 2,
          "fwd_bitwise_equal": equal, "fwd_max_abs_diff": 0.0 if equal else 2e-6, "loss": 12.5, "peak_rss_gb": 1.0}


def _run(date, configs):
  return {"configs": configs, "rounds": 2, "fwd_calls": 5, "height": 128, "width": 384, "batch": 4,
          "load": {"start": [3.0, 2.0, 1.0], "timed_start": [4.0, 3.0, 2.0], "end": [5.0, 4.0, 3.0]}, "date": date,
          "machine": "x86_64, 2 cores", "python": "3.12", "jax": "0.12", "command": "python bench/bench_levers.py x"}


def test_every_path_is_a_flag_set_this_jaxlib_accepts_and_the_section_merges_runs():
  assert set(bench_levers.XLA_PATHS) >= {"default", "eigen", "onednn", "xnnpack"}
  assert all(f.startswith("--xla_cpu_") for flags in bench_levers.XLA_PATHS.values() for f in flags.split())
  runs = [_run("2026-11-29 07:00 UTC", {"default/on": _cfg("", [0.1, 0.1], [1.0, 1.0]),
                                        "eigen/off": _cfg("--xla_cpu_experimental_ynn_fusion_type=", [0.2, 0.2],
                                                          [1.5, 2.5], equal=False)}),
          _run("2026-11-29 07:30 UTC", {"default/on": _cfg("", [0.1, 0.1], [1.0, 1.0])})]
  text = bench_levers.render_xla_paths(runs)
  assert text.count("**measured under load**") == 2 and "load average 4.00 when the timing began" in text
  assert ("| 1 | `eigen` | off | `--xla_cpu_experimental_ynn_fusion_type=` | 4/0/0 | 200.0 | 2.00 (2.00-2.00) | "
          "2.00 | 2.00 (1.50-2.50) | max diff 2.0e-06 | 12.5000 | 10.0 |") in text
  assert "| 2 | `default` | on | `(none)` |" in text


def test_bad_configs_are_one_line_errors():
  out = subprocess.run([sys.executable, str(REPO / "bench" / "bench_levers.py"), "--xla_paths", "--configs",
                        "default/on,mkl/on"], capture_output=True, text=True, timeout=60, check=False)
  assert out.returncode == 2 and "'mkl/on'" in out.stderr and out.stderr.strip().count("\n") == 0
