"""The wheel: what `pip install .` puts on a machine holds the configs and the commands, and they work there.

The wheel is built offline (`pip wheel --no-deps --no-build-isolation --no-index`) from a copy of the package
sources, so that the build writes nothing into the checkout, then unpacked into a folder that alone is on
PYTHONPATH, and run from a folder without a checkout.
"""

import configparser
import os
import pathlib
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

from conftest import REPO

SOURCES = ("pyproject.toml", "README.md", "pncnn_jax")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
  src = tmp_path_factory.mktemp("src")
  for name in SOURCES:
    if (REPO / name).is_dir():
      shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
      shutil.copy2(REPO / name, src / name)
  out = tmp_path_factory.mktemp("wheel")
  r = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "--no-index",
                      "-q", "-w", str(out)], cwd=src, capture_output=True, text=True, timeout=600, check=False)
  assert r.returncode == 0, r.stderr[-3000:]
  (whl,) = out.glob("pncnn_jax-*.whl")
  return whl


@pytest.mark.slow
def test_the_wheel_holds_the_configs_and_the_commands(wheel):
  names = set(zipfile.ZipFile(wheel).namelist())
  configs = sorted(p.name for p in (REPO / "pncnn_jax" / "configs").glob("*.py"))
  assert "base.py" in configs and "kitti.py" in configs
  missing = [f"pncnn_jax/configs/{c}" for c in configs if f"pncnn_jax/configs/{c}" not in names]
  assert not missing, f"configs not in the wheel: {missing}"
  assert not any(n.startswith("configs/") for n in names)  # the checkout's doors stay in the checkout
  (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
  ep = configparser.ConfigParser()
  ep.read_string(zipfile.ZipFile(wheel).read(entry_points).decode())
  declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
  assert dict(ep["console_scripts"]) == declared
  assert declared["pncnn-train"] == "pncnn_jax.training.train:main"


@pytest.mark.slow
def test_pncnn_train_runs_from_the_wheel_in_any_directory(wheel, tmp_path):
  """The installed `pncnn-train` entry point, resolved by importlib.metadata from the unpacked wheel alone, in a
  folder without configs/: --help lists the configs, and `--config kitti:pncnn` reads the packaged config (which
  then asks for its data in one line)."""
  site, cwd = tmp_path / "site", tmp_path / "elsewhere"
  zipfile.ZipFile(wheel).extractall(site)
  cwd.mkdir()
  script = ("import sys\nfrom importlib import metadata\n"
            "(ep,) = [e for e in metadata.entry_points(group='console_scripts') if e.name == 'pncnn-train']\n"
            "main = ep.load()\nimport pncnn_jax\nprint('from', pncnn_jax.__file__, flush=True)\n"
            "sys.argv = ['pncnn-train', *sys.argv[1:]]\nmain()\n")
  env = dict(os.environ, PYTHONPATH=str(site), PNCNN_NO_HUGEPAGES="1")

  def run(*args):
    return subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, check=False)

  r = run("--help")
  assert f"from {site}/pncnn_jax/__init__.py" in r.stdout, r.stdout[:500] + r.stderr[-2000:]
  assert r.returncode == 1 and "configs/kitti.py               KITTI depth completion" in r.stdout, r.stderr[-2000:]
  data_dir = tmp_path / "kitti_tfds"
  r = run("--config", "kitti:pncnn", "--workdir", "wd", f"--config.data.data_dir={data_dir}")
  assert r.returncode == 2, r.stderr[-3000:]
  assert f"error: data_dir {data_dir} does not exist; build it once (docs/DATA.md)" in r.stderr, r.stderr[-3000:]
  assert list(cwd.iterdir()) == []
