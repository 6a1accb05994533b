"""The reproduction command end to end (smoke scale): resume, wall clock, shipping, errors; the accelerator script."""

import json
import re

import pytest

from pncnn_jax import pretrained
from pncnn_jax.experiments import carry_over, reproduce, runs

from conftest import REPO


def depth_summary(workdir, evaluate=True):
  """The depth task's summary at the smoke scale: its run table through the research wing's one runner."""
  from pncnn_jax.experiments import evaluate_runs, runner  # pylint: disable=g-import-not-at-top
  return runner.evaluate_all(workdir, evaluate_runs.table(workdir, "smoke", evaluate=evaluate), evaluate=evaluate)


def test_wall_clock_keeps_a_killed_sittings_time_and_adds_sittings(tmp_path):
  """wall_time.json is current while the run trains (a sitting killed with its machine keeps its time up to the
  last tick), and every sitting adds to it, however it ends."""
  import time  # pylint: disable=g-import-not-at-top
  path = tmp_path / "run" / "wall_time.json"
  with reproduce.WallClock(tmp_path / "run", every=0.05):
    time.sleep(0.3)
    during = json.loads(path.read_text())  # what a killed sitting leaves
  first = json.loads(path.read_text())
  assert during["sittings"] == first["sittings"] == 1 and 0.05 <= during["seconds"] <= first["seconds"]
  assert 0.3 <= first["seconds"] < 10
  assert 0.0 <= first["cpu_seconds"] < 0.25  # it slept: its CPU time is not its wall time
  with pytest.raises(RuntimeError):
    with reproduce.WallClock(tmp_path / "run", every=10.0):
      busy = time.process_time() + 0.2
      while time.process_time() < busy:  # this process's CPU time, whatever the machine's load
        pass
      raise RuntimeError("training failed")
  second = json.loads(path.read_text())
  assert second["sittings"] == 2 and 0.2 <= second["seconds"] - first["seconds"] < 10
  assert 0.2 <= second["cpu_seconds"] - first["cpu_seconds"] < 10
  assert sorted(p.name for p in path.parent.iterdir()) == ["wall_time.json"]  # no temporary file left


def test_unknown_run_name_is_a_one_line_error(capsys):
  assert reproduce.main(["--workdir", "/nonexistent/never", "--only", "pncnn_typo"]) == 2
  assert "unknown run(s) ['pncnn_typo']" in capsys.readouterr().err


def test_sensor_runs_write_their_own_summary_and_no_results_page(tmp_path, capsys):
  """The sensor-robust runs are evaluated apart (<workdir>/SENSOR_RUNS.json, which SENSORS.md reads): the results page
  of the paper's runs is neither written nor replaced; unfinished, they are listed as such."""
  wd, page = tmp_path / "wd", tmp_path / "docs" / "RESULTS.md"
  names = [r.name for r in runs.SENSOR_RUNS]
  assert reproduce.main(["--workdir", str(wd), "--scale", "smoke", "--only", ",".join(names), "--stage", "report",
                         "--results", str(page)]) == 0
  assert not page.exists() and not page.with_suffix(".json").exists()
  summary = json.loads((wd / reproduce.SENSOR_SUMMARY).read_text())
  assert summary["runs"] == {} and summary["not_finished"] == names and summary["fusion"] is None
  assert f"wrote {wd / reproduce.SENSOR_SUMMARY}" in capsys.readouterr().out


@pytest.mark.slow
def test_reproduce_end_to_end_resumes_and_ships(tmp_path, capsys, monkeypatch):
  wd, results_md, ship = tmp_path / "wd", tmp_path / "docs" / "RESULTS.md", tmp_path / "ship" / "synthetic"
  args = ["--workdir", str(wd), "--scale", "smoke", "--only", "ncnn,ncnn_conf_l1_masked", "--results",
          str(results_md)]
  assert reproduce.main(args + ["--stage", "train", "--jobs", "2"]) == 0  # each run in its own process
  out = capsys.readouterr().out
  for name in ("ncnn", "ncnn_conf_l1_masked"):
    assert runs.finished(wd, runs.RUNS_BY_NAME[name], "smoke")
    assert f"[{name}] training in its own process, log {wd / 'runs' / name / 'train.log'}" in out
    assert f"[{name}] finished" in out and (wd / "runs" / name / "train.log").stat().st_size > 0
  ckpt_mtime = max(p.stat().st_mtime for p in (wd / "runs" / "ncnn" / "checkpoints").rglob("*"))
  assert reproduce.main(args + ["--ship", str(ship)]) == 0  # training is skipped: both runs are finished
  assert max(p.stat().st_mtime for p in (wd / "runs" / "ncnn" / "checkpoints").rglob("*")) == ckpt_mtime
  text = results_md.read_text()
  assert "| `ncnn` | 481 |" in text and "| `ncnn_conf_l1_masked` | 334,498 |" in text
  summary = json.loads(results_md.with_suffix(".json").read_text())
  assert set(summary["runs"]) == {"ncnn", "ncnn_oracle_c0", "ncnn_conf_l1_masked"}
  assert [summary["runs"][n]["masked_c0"] for n in ("ncnn", "ncnn_oracle_c0", "ncnn_conf_l1_masked")] == [
      False, False, True]
  assert "pncnn" in summary["not_finished"]
  c0 = summary["runs"]["ncnn_conf_l1_masked"]["c0"]
  assert 0.0 <= c0["auroc"] <= 1.0 and c0["c0_mean_empty"] == 0.0  # masked: empty pixels carry no confidence
  claims = {c["claim"]: c["holds"] for c in summary["claims"]}
  assert claims["(a) NCNN-Conf (L1 and L2, masked c0) beats NCNN in MAE and RMSE"] is None  # needs L2 too
  for fig in ("sparsification.png", "c0_histogram.png", "panels.png"):
    assert (results_md.parent / "results" / fig).stat().st_size > 10_000
  assert "## Where the error lies: distance to the nearest disturbed input point" in text
  for name in ("ncnn", "ncnn_oracle_c0", "ncnn_conf_l1_masked"):
    e = summary["runs"][name]["error_by_disturbed_distance"]
    assert sum(e["share"]) == pytest.approx(1.0) and e["num_pixels"] > 0
    assert e["pooled_mae_mm"] == pytest.approx(sum(s * m for s, m in zip(e["share"], e["mae_mm"]) if s > 0))
    assert e["share"] == summary["runs"]["ncnn"]["error_by_disturbed_distance"]["share"]  # same scenes, same bins
  assert "disturbed_deleted" not in summary["runs"]["ncnn_oracle_c0"]  # its input has them deleted already
  assert summary["runs"]["ncnn"]["disturbed_deleted"]["metrics"]["mae"] == pytest.approx(
      summary["runs"]["ncnn_oracle_c0"]["metrics"]["mae"], rel=1e-6)  # the same evaluation, measured twice
  variables, manifest = pretrained.load("synthetic:ncnn_conf_l1_masked", root=ship.parent)
  assert manifest["mask_input_confidence"] is True and manifest["step"] == 6
  density = manifest["input_density"]  # measured on the run's own training stream: its 8 scenes
  assert density["examples"] == 8 and density["train_crop"]["size"] == [32, 64] and density["low"] < density["high"]
  assert (manifest["config"]["variant"] == "ncnn_conf_l1"
          and manifest["config"]["model"]["mask_input_confidence"] is True)
  import ml_collections

  from pncnn_jax.experiments import evaluate_runs
  again = evaluate_runs.check_metrics(ml_collections.ConfigDict(manifest["config"]), variables)
  for k in ("mae", "rmse", "ause_pncnn", "auroc_disturbed"):
    assert again[k] == pytest.approx(manifest["check"][k], rel=1e-5), k
  # --carry: a run finished in this workdir keeps its own row; an earlier sitting's row fills a run not trained here.
  prior = {**summary, "runs": {"ncnn": {**summary["runs"]["ncnn"], "metrics": {"mae": -1.0}},
                               "pncnn": {**summary["runs"]["ncnn_conf_l1_masked"], "step": 99}},
           "commit": "feedfacecafe", "date": "2026-01-02"}
  both = carry_over.add(depth_summary(wd, evaluate=False), prior, wd, "smoke", evaluate=False)
  assert both["runs"]["ncnn"] == summary["runs"]["ncnn"] and "carried_from" not in both["runs"]["ncnn"]
  assert both["runs"]["ncnn_oracle_c0"] == summary["runs"]["ncnn_oracle_c0"]  # this workdir's NCNN, its oracle
  assert both["runs"]["pncnn"]["step"] == 99 and both["runs"]["pncnn"]["carried_from"] == {
      "commit": "feedfacecafe", "date": "2026-01-02"}
  assert "pncnn" not in both["not_finished"] and "pncnn_masked" in both["not_finished"]
  # A scale meant for some runs only (paper.SCALE_RUNS) lists only those as not finished, with --carry too; a run
  # folder's provenance.txt reaches its row.
  (wd / "runs" / "ncnn" / "provenance.txt").write_text("Trained by hand.\n")
  with monkeypatch.context() as m:
    m.setitem(runs.SCALE_RUNS, "smoke", ("ncnn", "pncnn_masked"))
    own = depth_summary(wd, evaluate=False)
    assert own["not_finished"] == ["pncnn_masked"] and own["runs"]["ncnn"]["trained_by"] == "Trained by hand."
    assert carry_over.add(own, prior, wd, "smoke", evaluate=False)["not_finished"] == ["pncnn_masked"]
  (wd / "runs" / "ncnn" / "provenance.txt").unlink()
  # --carry on a machine without this workdir: the shipped runs are evaluated again from their weights, with the
  # earlier validation curves; the figures can show them.
  monkeypatch.setattr(pretrained, "ROOT", ship.parent)
  fresh = carry_over.add(depth_summary(tmp_path / "fresh"), summary, tmp_path / "fresh", "smoke")
  assert set(fresh["runs"]) == {"ncnn", "ncnn_oracle_c0", "ncnn_conf_l1_masked"}
  for name in ("ncnn", "ncnn_conf_l1_masked"):
    row, old = fresh["runs"][name], summary["runs"][name]
    assert row["weights_from"] == f"pncnn_jax/pretrained/synthetic/{name}.npz" and "carried_from" not in row
    assert row["convergence"] == old["convergence"] and row["curve_from"]["commit"] == summary["commit"]
    for k in ("mae", "rmse", "imae"):
      assert row["metrics"][k] == pytest.approx(old["metrics"][k], rel=1e-5), (name, k)
    assert (tmp_path / "fresh" / "eval" / f"{name}_panels.npz").exists()
  assert fresh["runs"]["ncnn_oracle_c0"]["metrics"]["mae"] == pytest.approx(
      summary["runs"]["ncnn_oracle_c0"]["metrics"]["mae"], rel=1e-5)
  assert carry_over.shipped_files("ncnn", "smoke", {**summary["runs"]["ncnn"], "step": 5}) is None  # another training
  # --ship with --only ships only the selected runs, though others are finished too.
  evaluate_runs.ship_weights(wd, "smoke", summary, tmp_path / "only", [runs.RUNS_BY_NAME["ncnn"]])
  assert sorted(p.name for p in (tmp_path / "only").iterdir()) == ["ncnn.json", "ncnn.npz"]


def test_accelerator_script_defaults_to_a_scale():
  """bench/accelerator_reproduce.sh passes its SCALE (default or given) to `--scale`: the default must be one."""
  script = (REPO / "bench" / "accelerator_reproduce.sh").read_text()
  default = re.search(r"^scale=\$\{2:-(\w+)\}", script, re.M)
  assert default, "bench/accelerator_reproduce.sh: no `scale=${2:-...}` line"
  assert default.group(1) in runs.SCALES, default.group(1)
