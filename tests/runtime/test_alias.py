"""The user-facing names that moved (pncnn_jax/runtime/alias.py) and the console scripts."""

import importlib
import subprocess
import sys
import tomllib

import pytest

from conftest import REPO

ALIASES = {"layers": "nn.layers", "predict": "inference.predict", "export": "inference.export",
           "convert": "checkpoints.convert", "demo": "experiments.demo", "loader": "checkpoints.loader"}


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_an_alias_is_the_module_itself(name):
  alias = importlib.import_module(f"pncnn_jax.{name}")
  assert alias is importlib.import_module(f"pncnn_jax.{ALIASES[name]}")


def test_the_design_cards_import_path():
  import pncnn_jax.layers  # noqa: F401  pylint: disable=g-import-not-at-top
  from pncnn_jax.layers import nconv  # pylint: disable=g-import-not-at-top
  from pncnn_jax.nn import layers  # pylint: disable=g-import-not-at-top
  assert nconv is layers.nconv


@pytest.mark.parametrize("name", ["predict", "export", "convert", "demo"])
def test_python_m_an_alias_runs_the_module(name):
  r = subprocess.run([sys.executable, "-m", f"pncnn_jax.{name}", "--help"], cwd=REPO, capture_output=True, text=True,
                     timeout=300, env={"JAX_PLATFORMS": "cpu", "PATH": ""})
  assert r.returncode == 0, r.stderr[-2000:]
  assert "usage:" in r.stdout.lower(), r.stdout[:500]


def test_console_scripts_name_existing_functions():
  scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
  assert {"pncnn-predict", "pncnn-export", "pncnn-convert", "pncnn-rosbag"} <= set(scripts)
  for target in scripts.values():
    module, _, func = target.partition(":")
    assert callable(getattr(importlib.import_module(module), func)), target


@pytest.mark.parametrize("script", ["pncnn-predict", "pncnn-rosbag"])
def test_a_console_script_runs_its_command_with_one_progress_flag(script):
  """What the installed script runs (its entry point, called as the generated wrapper calls it) answers --help
  and takes the one --progress auto|on|off of every command."""
  module, _, func = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"][script].partition(":")
  code = f"import sys; from {module} import {func}; sys.argv[0] = {script!r}; sys.exit({func}(['--help']))"
  r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                     env={"JAX_PLATFORMS": "cpu", "PATH": ""})
  assert r.returncode == 0, r.stderr[-2000:]
  assert "usage:" in r.stdout.lower() and "--progress {auto,on,off}" in r.stdout, r.stdout[:2000]


def test_the_package_door_is_lazy():
  """`import pncnn_jax` imports no jax; a public name imports its module when first used."""
  code = ("import sys, pncnn_jax; assert 'jax' not in sys.modules, 'jax imported'; "
          "f = pncnn_jax.build_model; assert 'jax' in sys.modules; "
          "from pncnn_jax.nn import models; assert f is models.build_model; print('ok')")
  r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                     env={"JAX_PLATFORMS": "cpu", "PATH": ""})
  assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
