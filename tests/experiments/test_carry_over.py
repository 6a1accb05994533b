"""Carrying an earlier sitting's rows into a page (pncnn_jax.experiments.carry_over)."""

import json

import pytest

from pncnn_jax.experiments import carry_over, reproduce
from pncnn_jax.experiments import runs as runs_lib

from conftest import REPO


def depth_summary(workdir, evaluate=True):
  """The depth task's summary at the smoke scale: its run table through the research wing's one runner."""
  from pncnn_jax.experiments import evaluate_runs, runner  # pylint: disable=g-import-not-at-top
  return runner.evaluate_all(workdir, evaluate_runs.table(workdir, "smoke", evaluate=evaluate), evaluate=evaluate)


def _carry_file(tmp_path, **changes):
  """An earlier sitting's results JSON at the smoke scale, with three real rows of docs/results/RESULTS_LONG.json."""
  long = json.loads((REPO / "docs" / "results" / "RESULTS_LONG.json").read_text())
  runs = {n: long["runs"][n] for n in ("ncnn", "ncnn_conf_l1", "ncnn_oracle_c0", "pncnn_masked")}
  runs["ncnn"] = {**runs["ncnn"], "weights_from": "pncnn_jax/pretrained/synthetic/ncnn.npz"}  # measured from weights
  runs["pncnn_masked"] = {**runs["pncnn_masked"], "eval_version": 1}  # measured differently: not carried
  prior = {"scale": "smoke", "recipe": runs_lib.SCALES["smoke"], "runs": runs, "fusion": None, "commit": "0123456789ab",
           "date": "2026-11-20", **changes}
  path = tmp_path / "prior.json"
  path.write_text(json.dumps(prior))
  return path


def test_carry_keeps_an_earlier_sittings_rows_and_names_them(tmp_path, capsys):
  """`reproduce --carry`: a sitting without the earlier workdir adds to the earlier results instead of replacing
  them; each carried row names the commit and date that measured it, also when carried again."""
  from pncnn_jax.experiments.pages import report
  prior = carry_over.read_carry(_carry_file(tmp_path), "smoke")
  summary = carry_over.add(depth_summary(tmp_path / "wd", evaluate=False), prior,
                           tmp_path / "wd", "smoke",
                           evaluate=False)  # nothing trained here
  assert list(summary["runs"]) == ["ncnn", "ncnn_conf_l1", "ncnn_oracle_c0"]
  assert "evaluated by version 1, today's is 2" in capsys.readouterr().out
  assert "pncnn_masked" in summary["not_finished"] and "ncnn" not in summary["not_finished"]
  for e in summary["runs"].values():
    assert e["carried_from"] == {"commit": "0123456789ab", "date": "2026-11-20"}
    assert "weights_from" not in e and "curve_from" not in e  # copied: no weights of this run are evaluated here
  page = tmp_path / "docs" / "RESULTS_SMOKE.md"
  report.write(summary, page, tmp_path / "wd")
  text = page.read_text()
  assert "`python -m pncnn_jax.experiments.reproduce --scale smoke --carry docs/results/RESULTS_SMOKE.json`" in text
  assert ("By the page they were copied from (its commit and date): commit 0123456789 (2026-11-20): `ncnn`, "
          "`ncnn_conf_l1`, `ncnn_oracle_c0`.") in text
  assert "| `ncnn_conf_l1` | 334,498 | 525.2 | 2553 |" in text
  assert "Trained in earlier sittings, evaluated here" not in text  # the earlier page measured weights; not this one
  assert ("- (b) the learned c0 of `ncnn_conf_l1` singles out the disturbed points: **does not hold**. AUROC 0.377"
          in text)  # the claims are judged on the carried rows too
  again = carry_over.add(depth_summary(tmp_path / "wd", evaluate=False),
                         carry_over.read_carry(page.with_suffix(".json"), "smoke"), tmp_path / "wd", "smoke",
                         evaluate=False)
  assert again["runs"]["ncnn"]["carried_from"]["commit"] == "0123456789ab"  # the sitting that measured it


def test_a_page_of_carried_rows_keeps_its_drawn_panel(tmp_path):
  from pncnn_jax.experiments.pages import figures as pages_figures
  from pncnn_jax.experiments.pages import report
  figdir, workdir = tmp_path / "figs", tmp_path / "wd"
  figdir.mkdir()
  args = (workdir, figdir, "4 scenes", (64, 320), report.MAIN_ORDER, report.ABLATION_ORDER)
  assert pages_figures.figures({}, *args) == []  # nothing evaluated here and nothing drawn before: no panel
  (figdir / "panels.png").write_bytes(b"drawn by an earlier sitting")
  [(name, caption)] = pages_figures.figures({}, *args)
  assert name == "panels.png" and caption.startswith(pages_figures.PANEL_CAPTION) and "kept, not redrawn" in caption
  assert "none of the runs it shows (`ncnn`, `pncnn`, `pncnn_masked`," in caption  # not 'none of the page's runs'
  assert (figdir / "panels.png").read_bytes() == b"drawn by an earlier sitting"


@pytest.mark.parametrize("changes,error", [
    ({"scale": "long"}, "its runs are of the 'long' scale, not 'smoke'"),
    ({"recipe": {**runs_lib.SCALES["smoke"], "batch_size": 3}}, "trained with another 'smoke' recipe"),
    ({"runs": None}, "not a results JSON of pncnn_jax.experiments.reproduce"),
])
def test_carry_of_another_recipe_is_a_one_line_error(tmp_path, capsys, changes, error):
  path = _carry_file(tmp_path, **changes)
  assert reproduce.main(["--workdir", str(tmp_path / "wd"), "--scale", "smoke", "--carry", str(path)]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"error: --carry={path}: ") and error in err and "Traceback" not in err
  assert not (tmp_path / "wd").exists()  # refused before anything was trained or written
  missing = tmp_path / "nope.json"
  assert reproduce.main(["--workdir", str(tmp_path / "wd"), "--scale", "smoke", "--carry", str(missing)]) == 2
  assert f"--carry={missing}: no such file" in capsys.readouterr().err
