"""bench/gpu_suite.sh --dry_run: every row of the suite runs on the CPU and lands in the JSON and the table."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import gpu_suite  # noqa: E402  pylint: disable=g-import-not-at-top


@pytest.mark.slow
def test_dry_run_writes_every_row(tmp_path):
  out_dir = tmp_path / "suite"
  env = dict(os.environ, PYTHON=sys.executable, GPU_SUITE_CACHE=str(tmp_path / "cache"))
  out = subprocess.run(["bash", str(REPO / "bench" / "gpu_suite.sh"), str(out_dir), "--dry_run",
                        "--no_torch_compile"], capture_output=True, text=True, timeout=900, env=env, check=False)
  assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
  res = json.loads((out_dir / "gpu_suite.json").read_text())
  meta, rows = res["meta"], res["results"]
  assert meta["dry_run"] and [r[0] for r in meta["rows"]] == [r[0] for r in gpu_suite.ROWS]
  for name, kind, _, prec in gpu_suite.ROWS:
    j = rows[name]["jax"]
    assert j["seconds"] > 0 and j["flops"] > 0 and j["program_gb"] > 0, name
    if kind == "forward":
      assert (j["bf16_convolutions"] > 0) == (prec == "bfloat16"), name
  assert rows["ensemble4_vmap_float32"]["jax"]["seconds"] > 0
  assert rows["ensemble4_separate_float32"]["jax"]["seconds"] > 0
  has_torch = importlib.util.find_spec("torch") is not None
  assert all(("torch_eager" in rows[n]) == has_torch for n, *_ in gpu_suite.ROWS)
  table = (out_dir / "gpu_suite.md").read_text()
  assert table.count("\n| forward, batch ") == 6 and table.count("\n| training step, batch ") == 4
  assert "Dry run on the CPU" in table and "Ensemble of 4 members, forward, batch 1, float32: one vmapped" in table
  if not has_torch:
    assert "torch: not installed" in table
  assert (tmp_path / "cache" / "jax").is_dir()  # the persistent compilation cache


def test_peak_table_and_report_of_skipped_rows():
  assert gpu_suite.peak_flops("NVIDIA H100 80GB HBM3", "tf32") == 494.7e12
  assert gpu_suite.peak_flops("NVIDIA H100 PCIe", "float32") == 51e12
  assert gpu_suite.peak_flops("cpu", "float32") is None
  meta = {"date": "d", "host": "h", "python": "3", "variant": "pncnn", "height": 352, "width": 1216,
          "dry_run": False, "deadline_s": 420, "wall_s": 400, "command": "c", "torch_note": "x",
          "rows": [list(r) for r in gpu_suite.ROWS]}
  res = {"jax_info": {"device": "NVIDIA H200", "jax": "0"},
         "fwd_b1_float32": {"jax": {"seconds": 0.01, "flops": 1.34e11, "program_gb": 0.3},
                            "torch_eager": {"seconds": 0.02, "peak_gb": 2.0},
                            "torch_compile": {"error": "boom"}},
         "train_b16_tf32": {"jax": {"skipped": "deadline"}}}
  text = gpu_suite.render(res, meta)
  assert ("| forward, batch 1 | float32 | 10.00 | 10.00 | 134.0 | 0.200 | 20.00 | 2.00 | failed | - | 0.30 | 2.00 |"
          in text)
  assert "| training step, batch 16 | tf32 | skipped (deadline) |" in text
  assert "Failed: fwd_b1_float32 (torch_compile): boom." in text
