"""The CPU section of bench/bench_forward.py: ratios against both official figures and PyTorch, peak memory in
every row, the best matmul of any framework as yardstick, and the plain list of where we are behind."""

import sys

from conftest import REPO  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
import bench_forward_report as report  # noqa: E402  pylint: disable=g-import-not-at-top


def _row(seconds, rss, gflop=100.0, mm=(200.0, 220.0)):
  return {"seconds": seconds, "all": [seconds * 0.98, seconds, seconds * 1.02], "first_call_s": 2 * seconds,
          "gflop": gflop, "gflops": gflop / seconds, "fraction_of_matmul": 0.5, "fraction_range": (0.4, 0.6),
          "matmul_gflops": list(mm), "peak_rss_gb": rss, "compile_s": 20.0, "compile_cpu_s": 19.0, "program_gb": 6.0}


def _results(torch=None):
  return {"rows": {"pncnn_forward_b1": _row(0.5, 1.0), "ncnn_conf_l1_forward_b1": _row(0.3, 0.8),
                   "pncnn_train_step_b4": _row(12.0, 9.0)},
          "torch": torch, "meta": {"cpu": "AMD EPYC", "cores": 2, "date": "2026-11-26", "load_at_end": 1.0}}


def test_ratios_against_both_official_figures_and_the_behind_list():
  text = report.render(_results())
  assert "| pNCNN forward, batch 1 [s] | 0.50 | 1.70-1.87 | 3.40-3.74x | 0.94-1.07 | 1.88-2.14x |" in text
  assert ("| pNCNN training step, batch 4, 1 per call [s] | 12.00 | 23.60-29.80 | 1.97-2.48x | 11.60-16.40 | "
          "0.97-1.37x |") in text
  assert "| peak RSS, training step [GB] | 9.00 | 8.35 | 0.93x | 11.00-11.80 | 1.22-1.31x |" in text
  late = report.behind(_results())
  assert late == ["pNCNN training step, batch 4, 1 per call: 12.00 s, slower than its fastest figure (11.60 s) of the "
                  "official code tuned (11.60-16.40 s)",
                  "peak memory of the training step (pncnn_train_step_b4): 9.00 GB against 8.35 GB for the official "
                  "code as shipped",
                  "first training step including compilation: 44.0 s against 28.0 s for the official code as shipped "
                  "(a restart with the persistent compilation cache skips the compilation)"]
  assert "torch was not available" in text and "jax (XLA)'s median, 210 GFLOP/s" in text


def test_the_yardstick_is_the_fastest_framework_and_torch_rows_are_compared():
  torch = {"plain": {"train_pncnn_b4": _row(10.0, 7.0, mm=(300.0, 320.0)) | {"row": "train_pncnn_b4"}},
           "tuned": {}}
  results = _results(torch)
  assert report.best_matmul(results) == ("torch (plain)", 310.0)
  text = report.render(results)
  assert "torch was not available" not in text
  late = report.behind(results)
  assert any("against 10.00 s for the PyTorch pNCNN on this machine (glibc default)" in x for x in late)
  assert "| 9.00 | 8.35 | 0.93x | 11.00-11.80 | 1.22-1.31x | 7.00 | 0.78x | - | - |" in text


def test_profile_step_groups_operations_by_kind():
  """bench/profile_step.py names each fusion by what it holds (a convolution or dot wins) and sums by kind."""
  import profile_step  # pylint: disable=g-import-not-at-top
  hlo = """HloModule m

%fused_conv (p0: f32[1,4,4,2], p1: f32[3,3,2,2]) -> f32[1,4,4,2] {
  %p0 = f32[1,4,4,2]{3,2,1,0} parameter(0)
  %p1 = f32[3,3,2,2]{3,2,1,0} parameter(1)
  ROOT %c = f32[1,4,4,2]{3,2,1,0} convolution(%p0, %p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}

%fused_bn (p0: f32[8], p1: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  %p1 = f32[8]{0} parameter(1)
  %k = f32[] constant(2)
  %b = f32[8]{0} broadcast(%k), dimensions={}
  %m = f32[8]{0} multiply(%p0, %b)
  ROOT %s = f32[8]{0} subtract(%m, %p1)
}

ENTRY %main (a: f32[1,4,4,2], w: f32[3,3,2,2], x: f32[8], y: f32[8]) -> f32[8] {
  %conv_fusion.1 = f32[1,4,4,2]{3,2,1,0} fusion(%a, %w), kind=kCustom, calls=%fused_conv
  ROOT %bn_fusion.7 = f32[8]{0} fusion(%x, %y), kind=kLoop, calls=%fused_bn
}
"""
  kinds = profile_step.op_kinds(hlo)
  assert kinds == {"conv_fusion.1": "convolution", "bn_fusion.7": "fusion(multiply,subtract)"}
  rows = profile_step.summarise({"conv_fusion.1": (2.0, 1), "bn_fusion.7": (0.5, 3), "while.3": (0.25, 1),
                                 "while.4": (0.25, 2)}, kinds)
  assert rows == [("convolution", 2.0, 1), ("fusion(multiply,subtract)", 0.5, 3), ("while", 0.5, 3)]
