"""pncnn_jax.training.train: the `pncnn-train` command (train.py in a checkout), its --help without jax, and a
packaged config by name from any directory. What training does end to end: tests/test_commands.py."""

import json
import os
import subprocess
import sys

from conftest import REPO

HELP = """
import json, sys
sys.argv = ["pncnn-train", "--help"]
from pncnn_jax.training import train
try:
  train.main()
except SystemExit as e:
  status = e.code
print(json.dumps({"status": status, "heavy": sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "flax",
                  "optax", "orbax"))}))
"""


def _run(args, cwd):
  env = dict(os.environ, PYTHONPATH=str(REPO), PNCNN_NO_HUGEPAGES="1")
  return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                        check=False)


def test_help_lists_the_configs_and_imports_no_jax(tmp_path):
  """--help is the module's docstring and the configs, variants and fields (runtime.cli.CONFIG_HELP), for the
  console script too (its __main__ has no docstring), printed before jax or flax is imported."""
  r = _run(["-c", HELP], tmp_path)
  result = json.loads(r.stdout.strip().splitlines()[-1])
  assert result == {"status": 1, "heavy": []}, (result, r.stderr[-2000:])  # absl exits 1 after --help
  assert "Trains a pNCNN-family model: `pncnn-train --config kitti:pncnn --workdir DIR`." in r.stdout
  assert "configs/flow_synthetic.py      sparse optical flow" in r.stdout and "Variants: ncnn, " in r.stdout


def test_a_packaged_config_is_read_from_any_directory(tmp_path):
  """`python -m pncnn_jax.training.train` (the console script's module) in a folder without configs/: the docs'
  `--config configs/kitti.py:pncnn` reads the packaged config, which then asks for its data in one line."""
  data_dir = tmp_path / "kitti_tfds"
  r = _run(["-m", "pncnn_jax.training.train", "--config", "configs/kitti.py:pncnn", "--workdir", "wd",
            f"--config.data.data_dir={data_dir}"], tmp_path)
  assert r.returncode == 2, r.stderr[-3000:]
  lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith(("W", "I"))]
  assert lines == [f"error: data_dir {data_dir} does not exist; build it once (docs/DATA.md): python -m "
                   f"pncnn_jax.data.build kitti_depth --manual_dir KITTI_ROOT --data_dir {data_dir}"], r.stderr
  assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing created: no workdir, no data_dir
  r = _run(["-m", "pncnn_jax.training.train", "--config", "kitty:pncnn", "--workdir", "wd"], tmp_path)
  assert r.returncode == 2 and r.stderr.strip() == (
      "error: --config: kitty does not exist; the configs are configs/synthetic.py, configs/kitti.py, "
      "configs/nyu.py, configs/ensemble_synthetic.py, configs/flow_synthetic.py"), r.stderr
