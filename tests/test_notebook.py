"""The Colab notebook (notebooks/pncnn_jax_colab.ipynb) executes end to end on CPU in short mode.

The notebook is run with nbclient in a fresh kernel of this interpreter (a kernelspec written to a temporary
directory, so that no other `python3` kernel on the machine is picked up), from the repository root, with
PNCNN_NOTEBOOK_SHORT=1 (tiny crops, 3 training steps) and two forced host devices (the data-parallel path).
Checked: no cell fails; the figures and metric tables appear in the cells that make them; the synthetic
evaluation report is complete and finite; the official KITTI NCNN-Conf-L1 checkpoint on the two real KITTI
frames reproduces the official metrics in golden/real/ (so the notebook's checkpoint, frames and crop are the
reference ones).
"""

import json
import math
import os
import pathlib
import sys

import numpy as np
import pytest

from pncnn_jax import pretrained

from conftest import GOLDEN, REPO, SHARED, TEST_XLA_FLAGS, load_npz

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = REPO / "notebooks" / "pncnn_jax_colab.ipynb"
KERNEL = "pncnn-jax-test"


def _cells_by_tag(nb) -> dict[str, object]:
  out = {}
  for c in nb.cells:
    for t in c.get("metadata", {}).get("tags", []):
      out[t] = c
  return out


def _kernel_manager(tmp_path: pathlib.Path):
  """A KernelManager for a kernelspec that runs this interpreter (the venv's), whatever else is installed."""
  from jupyter_client.kernelspec import KernelSpecManager
  from jupyter_client.manager import KernelManager
  kdir = tmp_path / "kernels" / KERNEL
  kdir.mkdir(parents=True)
  (kdir / "kernel.json").write_text(json.dumps({
      "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
      "display_name": "pncnn_jax test", "language": "python"}))
  ksm = KernelSpecManager(kernel_dirs=[str(kdir.parent)], ensure_native_kernel=False)
  return KernelManager(kernel_name=KERNEL, kernel_spec_manager=ksm)


def _execute(tmp_path: pathlib.Path, env_extra: dict[str, str], keep_tags=None, skip_tags=(), timeout=600):
  """Executes the notebook (or only its cells up to and including the tags in `keep_tags`, without those tagged
  `skip_tags`) from the repo root."""
  nb = nbformat.read(NOTEBOOK, as_version=4)
  if keep_tags is not None:
    last = max(i for i, c in enumerate(nb.cells) if set(c.get("metadata", {}).get("tags", [])) & set(keep_tags))
    nb.cells = nb.cells[:last + 1]
  nb.cells = [c for c in nb.cells if not set(c.get("metadata", {}).get("tags", [])) & set(skip_tags)]
  env = dict(os.environ)
  env.update({
      "PNCNN_NOTEBOOK_SHORT": "1",
      "PNCNN_SHARED": str(SHARED),
      "PNCNN_NOTEBOOK_OUT": str(tmp_path / "out"),
      "XLA_FLAGS": TEST_XLA_FLAGS,
      "JAX_PLATFORMS": "cpu",
      # The test suite's persistent compilation cache (tests/conftest.py): reruns skip most compiling.
      "JAX_COMPILATION_CACHE_DIR": str(REPO / ".jax_cache"),
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.5",
      "MPLBACKEND": "Agg",
  })
  env.update(env_extra)
  km = _kernel_manager(tmp_path)
  client = nbclient.NotebookClient(nb, km=km, timeout=timeout, allow_errors=False,
                                   resources={"metadata": {"path": str(REPO)}})
  try:
    client.execute(env=env)
  except nbclient.exceptions.CellExecutionError as e:  # show the failing cell's traceback in the report
    pytest.fail(f"notebook cell failed:\n{e}")
  return nb


def _outputs(cell, mime: str) -> list:
  return [o["data"][mime] for o in cell.get("outputs", []) if o.get("output_type") in ("display_data",
                                                                                      "execute_result")
          and mime in o.get("data", {})]


def _text(cell) -> str:
  return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_committed_notebook_is_clean_and_colab_cells_are_guarded():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  for i, c in enumerate(nb.cells):
    if c.cell_type == "code":
      assert not c.outputs and c.execution_count is None, f"cell {i} has outputs: clear them before committing"
  tags = _cells_by_tag(nb)
  for t in ("parameters", "install", "colab", "data", "train", "metrics_table", "figures", "official_metrics"):
    assert t in tags, f"no cell tagged {t!r}"
  # Colab-only commands (shell escapes, Drive) live only in the guarded cell, under `if IN_COLAB:`.
  for i, c in enumerate(nb.cells):
    if c.cell_type != "code":
      continue
    src = c.source
    colab_only = any(line.lstrip().startswith("!") for line in src.splitlines()) or "google.colab import" in src
    if colab_only:
      assert c is tags["colab"] and src.lstrip().startswith("if IN_COLAB:"), f"cell {i} runs Colab-only code unguarded"
  params = tags["parameters"].source
  assert "REPO_URL = " in params and "IN_COLAB = 'google.colab' in sys.modules" in params
  assert "jax_default_matmul_precision', 'float32'" in "".join(c.source for c in nb.cells)


@pytest.mark.slow
def test_notebook_runs_in_short_mode(tmp_path):
  nb = _execute(tmp_path, {})
  tags = _cells_by_tag(nb)
  out = tmp_path / "out"

  # Figures: the data example, the training curves, the panels + sparsification plot, and the same for part 2.
  for tag, n in (("data_example", 1), ("train", 1), ("figures", 2), ("official_figures", 2)):
    pngs = _outputs(tags[tag], "image/png")
    assert len(pngs) == n, f"cell {tag!r}: expected {n} figure(s), got {len(pngs)}"
  # Metric tables (markdown) with the KITTI units.
  for tag in ("metrics_table", "official_metrics"):
    tables = _outputs(tags[tag], "text/markdown")
    assert tables and "| model |" in tables[0] and "mae [mm]" in tables[0] and "ause_pncnn" in tables[0], tag

  # Synthetic run: short mode trained 3 steps, validated once, and wrote a complete, finite report.
  run = out / "synthetic_pncnn"
  rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in rows if r["split"] == "val"] == [3]
  assert sum(r["split"] == "train" for r in rows) == 3
  report = json.loads((run / "eval_best" / "results.json").read_text())
  res = report["results"]
  assert res["num_images"] == 4
  for k in ("mae", "rmse", "ause_pncnn", "ause_gustafsson", "auce", "auroc_disturbed"):
    assert isinstance(res[k], float) and math.isfinite(res[k]), (k, res[k])
  for f in ("sparsification.png", "panels.png", "results.md", "results.csv"):
    assert (run / "eval_best" / f).is_file(), f

  # Part 2: the official checkpoint on the real frames reproduces the official metrics (golden/real).
  official = json.loads((out / "official_metrics.json").read_text())
  assert official["variant"] == "ncnn_conf_l1"
  frames = official["frames"]
  assert len(frames) == 2, sorted(frames)
  for cam in ("image_02", "image_03"):
    (row,) = [r for name, r in frames.items() if f"/{cam}/" in name]
    g = load_npz(GOLDEN / "real" / f"torch_kitti_{cam}__kitti_ncnn_conf_l1.npz")
    for k in ("mae", "rmse", "imae", "irmse", "absrel", "delta1"):
      np.testing.assert_allclose(row[k], g[f"metric/{k}"], rtol=1e-5, err_msg=f"{cam} {k}")
    np.testing.assert_allclose(row["ause_pncnn"], g["ause"], atol=1e-6, err_msg=f"{cam} AUSE")
    assert row["num_pixels"] == int(np.sum(g["target"] > 0))
    assert row["auce"] is None and row["nll"] is None  # NCNN-Conf has no calibrated sigma


def test_notebook_kitti_option_builds_tfds_from_a_folder(tmp_path):
  """The KITTI option (off by default): the data cells build the TFDS dataset from a KITTI-layout folder (here
  the two real frames of ../shared) and show a validation example; training is not run."""
  frames = SHARED / "data" / "kitti_depth_mini"
  nb = _execute(tmp_path, {"PNCNN_KITTI_DIR": str(frames), "PNCNN_KITTI_TFDS_DIR": str(tmp_path / "tfds")},
                keep_tags=("data_example",), timeout=300)
  tags = _cells_by_tag(nb)
  text = _text(tags["data"])
  assert "'train': 2" in text, text  # the two velodyne_raw/groundtruth pairs
  assert "kitti_depth / pncnn" in text, text
  assert len(_outputs(tags["data_example"], "image/png")) == 1
  ex_text = _text(tags["data_example"])
  assert "64x128" in ex_text and "2011_09_26_drive_0001_sync/image_0" in ex_text, ex_text
  assert (tmp_path / "tfds" / "kitti_depth").is_dir()


def test_install_cell_installs_the_checkout(tmp_path):
  """The install cell, as CI runs it in the checkout: pip builds and installs the checkout itself (offline, no
  dependencies, into a temporary folder), so a broken install cell or packaging fails here."""
  site = tmp_path / "site"
  nb = _execute(tmp_path, {"PNCNN_NOTEBOOK_INSTALL": "1",
                           "PNCNN_PIP_ARGS": f"--no-deps --no-build-isolation --no-index --target {site}"},
                keep_tags=("install",), timeout=300)
  assert f"installed pncnn_jax from {REPO}" in _text(_cells_by_tag(nb)["install"])
  # every folder of the package is installed (setuptools finds subpackages by their __init__.py), the shipped
  # weights with them, and the user aliases
  folders = sorted(str(p.parent.relative_to(REPO)) for p in (REPO / "pncnn_jax").rglob("__init__.py"))
  assert len(folders) >= 12, folders
  for f in [*(f"{d}/__init__.py" for d in folders), "pncnn_jax/export.py", "pncnn_jax/predict.py",
            "pncnn_jax/nn/models.py", "pncnn_jax/pretrained/synthetic/pncnn_masked.npz"]:
    assert (site / f).is_file(), f


def _install_fn():
  """`install_pncnn` as defined by the committed install cell (its call is guarded: nothing runs here)."""
  nb = nbformat.read(NOTEBOOK, as_version=4)
  ns = {"IN_COLAB": False, "os": os, "sys": sys, "pathlib": pathlib}
  env = {k: v for k, v in os.environ.items() if k != "PNCNN_NOTEBOOK_INSTALL"}
  old = dict(os.environ)
  os.environ.clear()
  os.environ.update(env)
  try:
    exec(_cells_by_tag(nb)["install"].source, ns)  # noqa: S102
  finally:
    os.environ.clear()
    os.environ.update(old)
  return ns["install_pncnn"]


def test_install_cell_fails_loudly_on_placeholder_or_unreachable_url(tmp_path):
  install = _install_fn()
  with pytest.raises(ValueError, match=r"REPO_URL='https://github.com/<org>/pncnn_jax' is a placeholder"):
    install("https://github.com/<org>/pncnn_jax", tmp_path / "clone")
  with pytest.raises(RuntimeError, match=r"cloning REPO_URL='file:///nonexistent/pncnn_jax.git'.*failed"):
    install("file:///nonexistent/pncnn_jax.git", tmp_path / "clone")
  assert not (tmp_path / "clone" / "configs").exists()


@pytest.mark.slow
def test_notebook_part2_without_uploads_uses_synthetic_scenes(tmp_path):
  """Nothing uploaded (no official checkpoint, no KITTI frames): part 2 runs the shipped synthetic pNCNN
  (`pncnn_jax.pretrained`, 'synthetic:pncnn_masked') on synthetic scenes. Part 1's training and evaluation cells
  are left out: the test above runs them, and part 2 needs part 1's model only in a package that ships none."""
  assert "pncnn_masked" in pretrained.available("synthetic")
  nb = _execute(tmp_path, {"PNCNN_OFFICIAL_CHECKPOINT": str(tmp_path / "missing.pth.tar"),
                           "PNCNN_KITTI_FRAMES": str(tmp_path / "missing_frames")},
                skip_tags=("train", "metrics_table", "figures"))
  tags = _cells_by_tag(nb)
  assert "train" not in tags
  report = json.loads((tmp_path / "out" / "official_metrics.json").read_text())
  assert report["official"] is False and report["variant"] == "pncnn"
  assert report["checkpoint"] == "synthetic:pncnn_masked"
  assert len(report["frames"]) == 4
  for row in report["frames"].values():
    for k in ("mae", "rmse", "ause_pncnn", "auce"):
      assert isinstance(row[k], float) and math.isfinite(row[k]), (k, row[k])
  assert len(_outputs(tags["official_figures"], "image/png")) == 2
  assert "does not exist: using" in _text(tags["official_load"])
