"""The documentation stays inside the repository: nothing cites the reference notes kept beside it, every
pointer into docs/SPEC.md names a section that exists, the pages' figures are generated ones and their snippets are
tested ones. (`make docs`, run by `make test`, builds the site with --strict: links, anchors and the nav.)"""

import pathlib
import re
import subprocess

from conftest import REPO

SPEC = REPO / "docs" / "SPEC.md"
OUTSIDE = re.compile(r"REFERENCE\.md|REFERENCE\s+(?:sections?\s+)?\d|REFERENCE\s+(?:real|A\.)")  # "REFERENCE 9.2"
POINTER = re.compile(r"§(\d+(?:\.\d+)?)")


def _tracked_text_files() -> list[pathlib.Path]:
  try:
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.split()
    files = [REPO / n for n in names]
  except (OSError, subprocess.CalledProcessError):  # not a git checkout (e.g. an sdist)
    files = [p for p in REPO.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts]
  out = []
  for p in files:
    if p.is_file() and p.suffix in (".py", ".md", ".ipynb", ".toml", ".txt", ".cfg", ".json", "") and \
        p.stat().st_size < 2_000_000:
      out.append(p)
  return out


def test_nothing_cites_the_reference_notes_outside_the_repository():
  """Docs, docstrings, error messages, configs, tests and the notebook point to docs/SPEC.md instead."""
  this = pathlib.Path(__file__).resolve()
  offenders = []
  for p in _tracked_text_files():
    if p.resolve() == this:
      continue
    for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
      if OUTSIDE.search(line):
        offenders.append(f"{p.relative_to(REPO)}:{i}: {line.strip()[:100]}")
  assert not offenders, "cite docs/SPEC.md instead:\n" + "\n".join(offenders)


def test_spec_pointers_name_existing_sections():
  headings = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", SPEC.read_text(), re.M))
  assert {"1", "2.1", "8.2", "8.3", "13"} <= headings
  missing = []
  for p in _tracked_text_files():
    for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
      if "SPEC.md" in line or p == SPEC:
        missing += [f"{p.relative_to(REPO)}:{i}: §{n}" for n in POINTER.findall(line) if n not in headings]
  assert not missing, "no such section in docs/SPEC.md:\n" + "\n".join(missing)


def test_predict_page_quotes_the_shipped_ensembles_scales_from_the_long_page():
  """The precision scales docs/deploy/predict.md gives for `predict --precision_scales` are the ones
  docs/results/RESULTS_LONG.json fitted for the shipped ensemble (a retrained member changes them)."""
  import json  # pylint: disable=g-import-not-at-top
  scales = json.loads((REPO / "docs" / "results" / "RESULTS_LONG.json").read_text())["fusion"]["precision_scales"]
  page = (REPO / "docs" / "deploy" / "predict.md").read_text()
  quoted = re.search(r"for the shipped ensemble, `([0-9.,]+)`", page).group(1)
  assert quoted == ",".join(f"{s:.2f}" for s in scales)


def _pages() -> list[pathlib.Path]:
  return sorted((REPO / "docs").rglob("*.md"))


def test_docs_python_snippets_are_the_readmes():
  """A docs page shows only python snippets that tests/test_readme.py runs (the README's), except the export
  page, whose snippets need an exported model and are run by tests/inference/test_export.py."""
  tested = set(re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S))
  export_page = REPO / "docs" / "deploy" / "export.md"
  untested = [f"{p.relative_to(REPO)}: {block.splitlines()[0]}" for p in _pages() if p != export_page
              for block in re.findall(r"```python\n(.*?)```", p.read_text(), re.S) if block not in tested]
  assert not untested, "python snippets no test runs (reuse a README snippet):\n" + "\n".join(untested)


def test_figures_shown_are_generated_ones():
  """Every image the README or a docs page shows exists and is a figure the project generates (under docs/results/)."""
  bad = []
  for p in [REPO / "README.md", *_pages()]:
    for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", p.read_text()):
      path = (p.parent / target).resolve()
      generated = path.is_relative_to(REPO / "docs") and path.relative_to(REPO / "docs").parts[0].startswith("results")
      if not (path.is_file() and generated):
        bad.append(f"{p.relative_to(REPO)}: {target}")
  assert not bad, "images that are missing or not generated figures:\n" + "\n".join(bad)


def test_training_page_quotes_the_long_recipe_from_the_long_page():
  """What docs/guide/training.md says the long recipe reaches (after its two-minute run) is what
  docs/results/RESULTS_LONG.json measured: pncnn, and the recommended shipped model."""
  import json  # pylint: disable=g-import-not-at-top
  runs = json.loads((REPO / "docs" / "results" / "RESULTS_LONG.json").read_text())["runs"]
  page = (REPO / "docs" / "guide" / "training.md").read_text()
  m = re.search(r"long recipe .*? reaches MAE (\d+) mm, RMSE (\d+) mm, AUSE (\d+\.\d+) and\s+AUCE (\d+\.\d+) on (\d+) "
                r"held-out test scenes", page, re.S)
  r = runs["pncnn"]
  assert m and m.groups() == (f"{r['metrics']['mae']:.0f}", f"{r['metrics']['rmse']:.0f}",
                              f"{r['uncertainty']['ause_pncnn']:.3f}", f"{r['uncertainty']['auce']:.2f}",
                              str(r["metrics"]["num_images"])), m and m.groups()
  m = re.search(r"`sparse_var_beta_detach_masked` MAE (\d+) mm, RMSE (\d+) mm and AUSE (\d+\.\d+)", page)
  r = runs["sparse_var_beta_detach_masked"]
  assert m and m.groups() == (f"{r['metrics']['mae']:.0f}", f"{r['metrics']['rmse']:.0f}",
                              f"{r['uncertainty']['ause_pncnn']:.3f}"), m and m.groups()
