"""The README is a short front door whose library snippets run as written (the export snippets live on
docs/deploy/export.md and are run by tests/inference/test_export.py)."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO  # noqa: E402

README = REPO / "README.md"
MAX_LINES = 200  # the front door; findings and reference material live on the docs pages
SECTIONS = ("## Install", "## Set-up: two commands", "## Complete your own depth maps", "## Train, evaluate, export",
            "## Models", "## Results", "## Layout", "## Citation")


def _library_blocks() -> list[str]:
  return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_is_a_front_door():
  text = README.read_text()
  assert len(text.splitlines()) <= MAX_LINES, f"README.md has {len(text.splitlines())} lines (at most {MAX_LINES})"
  missing = [s for s in SECTIONS if f"\n{s}\n" not in text]
  assert not missing, f"README.md lacks the sections {missing}"
  assert "make demo" in text and "make test" in text


def test_readme_has_library_snippets():
  assert len(_library_blocks()) >= 2


@pytest.mark.parametrize("index", range(len(_library_blocks())))
def test_readme_snippet_runs_as_written(index, tmp_path):
  block = _library_blocks()[index]
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  r = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                     timeout=600)
  assert r.returncode == 0, f"README snippet {index} failed:\n{block}\n--- stderr ---\n{r.stderr[-3000:]}"
  assert r.stdout.strip(), "the snippet printed nothing"
  assert list(tmp_path.iterdir()) == [], "the snippet wrote files"
