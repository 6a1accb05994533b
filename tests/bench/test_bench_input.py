"""bench/bench_input.py in its tiny mode: writes a KITTI-layout tree, builds it, runs both pipelines, reports."""

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import bench_input  # noqa: E402  pylint: disable=g-import-not-at-top


def test_kitti_pair_has_kitti_densities_and_encoding():
  sparse, target = bench_input.kitti_pair(np.random.default_rng(0))
  assert sparse.shape == target.shape == (375, 1242) and sparse.dtype == target.dtype == np.uint16
  assert 0.04 < (sparse > 0).mean() < 0.06 and 0.17 < (target > 0).mean() < 0.23
  depth = target[target > 0] / 256.0  # KITTI: metres * 256
  assert depth.min() >= 2.0 and depth.max() <= 84.0


@pytest.mark.slow
def test_tiny_run_writes_the_table_and_json(tmp_path):
  md, js = tmp_path / "BENCH.md", tmp_path / "input.json"
  md.write_text("# Benchmarks\n\nkept\n")
  out = subprocess.run([sys.executable, str(REPO / "bench" / "bench_input.py"), "--tiny", "--output", str(md),
                        "--json", str(js)], capture_output=True, text=True, timeout=600, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  res = json.loads(js.read_text())
  assert set(res["pipelines"]) == {"kitti, one core", "kitti, all cores", "synthetic, one core",
                                   "synthetic, all cores"}
  assert all(r["frames_per_s"] > 0 for r in res["pipelines"].values())
  assert res["pipelines"]["kitti, one core"]["cores"] == 1
  assert "PIL, io.read_png_uint16 (checked)" in res["decode_pairs_per_s"] and res["build_pairs_per_s"] > 0
  text = md.read_text()
  assert text.startswith("# Benchmarks\n\nkept\n") and "<!-- input:begin -->" in text
  assert "Cores to keep one GPU busy" in text and "Measured under load" in text
  assert not list(tmp_path.glob("bench_input_*"))  # the temporary tree is removed


def test_bad_arguments_are_one_line_errors(tmp_path):
  out = subprocess.run([sys.executable, str(REPO / "bench" / "bench_input.py"), "--pairs", "0"],
                       capture_output=True, text=True, timeout=120, check=False)
  assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "--pairs" in out.stderr
  out = subprocess.run([sys.executable, str(REPO / "bench" / "bench_input.py"), "--tiny", "--json",
                        str(tmp_path / "missing" / "x.json")], capture_output=True, text=True, timeout=120, check=False)
  assert out.returncode == 2 and "missing" in out.stderr and "Traceback" not in out.stderr
