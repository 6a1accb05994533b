"""The README's library snippets run as written (the export section's snippets are run by tests/test_export.py)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def _library_blocks() -> list[str]:
  text = (REPO / "README.md").read_text()
  before, _, rest = text.partition("## Export for deployment")
  after = rest.split("\n## ", 1)[1] if "\n## " in rest else ""
  return re.findall(r"```python\n(.*?)```", before + after, re.S)


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
