"""The reproduction command end to end (smoke scale), the scene cache, the c0 mask option, shipped-weight files."""

import json
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax import carry, models, paper, pretrained, reproduce
from pncnn_jax.data import make_iterator, synthetic_cache


def test_cached_scenes_equal_rendered_scenes(tmp_path):
  window = (144, 448, 64, 320)  # configs/synthetic.py's centre crop of the 352x1216 frame
  synthetic_cache.build(tmp_path / synthetic_cache.cache_name("train", 0, window), seed=0, stream=0, window=window,
                        size=3)
  cfg = dict(dataset="synthetic", split="train", crop="center", crop_height=64, crop_width=320, batch_size=1,
             synthetic_size=5, num_epochs=1, shuffle=False)
  plain, cached = list(make_iterator(cfg)), list(make_iterator(dict(cfg, synthetic_cache_dir=str(tmp_path))))
  assert len(plain) == len(cached) == 5  # scenes 3 and 4 are not cached: rendered as before
  for a, b in zip(plain, cached):
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  assert int((plain[0]["disturbed"]).sum()) > 0


def test_cache_rendered_by_several_processes_equals_one(tmp_path):
  window = (144, 448, 32, 64)
  one = synthetic_cache.build(tmp_path / "one", seed=0, stream=2, window=window, size=5)
  many = synthetic_cache.build(tmp_path / "many", seed=0, stream=2, window=window, size=5, workers=2, chunk=2)
  for k in ("sparse", "target", "dense", "disturbed"):
    a, b = np.load(one / f"{k}.npy"), np.load(many / f"{k}.npy")
    assert a.shape == (5, 32, 64, 1)
    np.testing.assert_array_equal(a, b, err_msg=k)
  assert np.load(many / "sparse.npy")[4].any()  # the last, odd-sized chunk was written
  assert json.loads((one / "meta.json").read_text()) == json.loads((many / "meta.json").read_text())


@pytest.mark.parametrize("other_seed", [0, 1])
def test_cache_finished_first_by_another_process(tmp_path, monkeypatch, other_seed):
  """Two runs started on one workdir render the same cache. The one renamed second keeps the first's (a directory
  cannot be renamed onto a full one) and leaves no temporary directory behind; a cache of other settings that
  appeared meanwhile is still refused."""
  path, window = tmp_path / "c", (144, 448, 16, 32)
  drain = synthetic_cache._drain

  def drain_while_another_finishes(*args):
    drain(*args)
    monkeypatch.setattr(synthetic_cache, "_drain", drain)
    other = synthetic_cache.build(tmp_path / "other", seed=other_seed, stream=0, window=window, size=2)
    other.rename(path)  # the other process's cache, renamed first

  monkeypatch.setattr(synthetic_cache, "_drain", drain_while_another_finishes)
  if other_seed:
    with pytest.raises(ValueError, match="other settings"):
      synthetic_cache.build(path, seed=0, stream=0, window=window, size=2)
  else:
    assert synthetic_cache.build(path, seed=0, stream=0, window=window, size=2) == path
    assert np.load(path / "sparse.npy")[1].any()
  assert synthetic_cache._drain is drain  # the other process did run
  assert [p.name for p in tmp_path.iterdir()] == ["c"]


def test_cache_of_other_settings_is_refused(tmp_path):
  path = tmp_path / "c"
  synthetic_cache.build(path, seed=0, stream=0, window=(0, 0, 16, 16), size=1)
  with pytest.raises(ValueError, match="other settings"):
    synthetic_cache.build(path, seed=1, stream=0, window=(0, 0, 16, 16), size=1)
  with pytest.raises(ValueError, match="not a synthetic scene cache"):
    synthetic_cache.SceneCache(tmp_path)


@pytest.mark.parametrize("variant", ["ncnn_conf_l1", "pncnn"])
def test_masked_input_confidence_is_zero_off_the_measurements(variant):
  x = np.zeros((1, 32, 48, 1), np.float32)
  rng = np.random.default_rng(0)
  pts = rng.random(x.shape) < 0.1
  x[pts] = rng.uniform(2.0, 60.0, int(pts.sum()))
  official, masked = models.build_model(variant), models.build_model(variant, mask_input_confidence=True)
  assert not official.mask_input_confidence  # the parity variants are unchanged
  variables = models.init_variables(official, jax.random.key(0))
  c0_off = np.asarray(official.apply(variables, jnp.asarray(x)).input_confidence)
  out = masked.apply(variables, jnp.asarray(x))  # same parameters: the mask adds none
  c0 = np.asarray(out.input_confidence)
  assert np.all(c0[~pts] == 0.0) and np.all(c0_off[~pts] > 0.0)
  np.testing.assert_array_equal(c0[pts], c0_off[pts])
  assert np.all(np.isfinite(np.asarray(out.depth)))


def test_detached_variance_input_changes_gradients_not_outputs():
  """detach_variance_input: the same outputs; a loss of the precision alone trains only the variance UNet, while
  the depth still trains NConv and c0."""
  x = np.zeros((2, 32, 48, 1), np.float32)
  rng = np.random.default_rng(1)
  pts = rng.random(x.shape) < 0.2
  x[pts] = rng.uniform(2.0, 60.0, int(pts.sum()))
  plain, detached = models.build_model("pncnn"), models.build_model("pncnn", detach_variance_input=True)
  variables = models.init_variables(plain, jax.random.key(0))
  for a, b in zip(*(jax.tree.leaves(m.apply(variables, jnp.asarray(x))) for m in (plain, detached)), strict=True):
    np.testing.assert_array_equal(a, b)

  def grads(model, of):
    def loss(params):
      out, _ = model.apply({**variables, "params": params}, jnp.asarray(x), train=True, mutable=["batch_stats"])
      return jnp.mean(getattr(out, of))
    return jax.grad(loss)(variables["params"])
  norm = lambda tree: float(sum(jnp.sum(jnp.abs(g)) for g in jax.tree.leaves(tree)))
  g_plain, g_det, g_depth = grads(plain, "confidence"), grads(detached, "confidence"), grads(detached, "depth")
  for module in ("conf_estimator", "nconv"):
    assert norm(g_plain[module]) > 0 and norm(g_det[module]) == 0.0 and norm(g_depth[module]) > 0
  np.testing.assert_allclose(norm(g_det["var_estimator"]), norm(g_plain["var_estimator"]), rtol=1e-6)
  assert paper.run_config(paper.RUNS_BY_NAME["pncnn_detach_masked"], "smoke").model.detach_variance_input is True
  assert paper.run_config(paper.RUNS_BY_NAME["pncnn_masked"], "smoke").model.detach_variance_input is False


def test_learning_rate_option_sets_only_the_lr_before_the_drop():
  plain, low = (paper.run_config(paper.RUNS_BY_NAME[n], "long") for n in ("pncnn_masked", "pncnn_masked_lr3e-3"))
  assert plain.learning_rate == paper.SCALES["long"]["learning_rate"] == 0.01 and low.learning_rate == 0.003
  # everything else is the reference recipe's: the same drop step, steps, crops, model and seed
  rest = lambda c: {k: v for k, v in c.to_dict().items() if k != "learning_rate"}  # noqa: E731
  assert rest(plain) == rest(low)
  ref = paper.run_config(paper.RUNS_BY_NAME["ncnn_conf_l1_masked_lr3e-3"], "long")
  assert ref.learning_rate == 0.003 and ref.model.mask_input_confidence and ref.variant == "ncnn_conf_l1"


def test_grad_clip_option_sets_only_the_clip_norm():
  plain, clipped = (paper.run_config(paper.RUNS_BY_NAME[n], "long") for n in ("pncnn_masked", "pncnn_masked_clip10"))
  assert plain.grad_clip_norm == 0.0 and clipped.grad_clip_norm == 10.0
  rest = lambda c: {k: v for k, v in c.to_dict().items() if k != "grad_clip_norm"}  # noqa: E731
  assert rest(plain) == rest(clipped)
  assert paper.run_config(paper.RUNS_BY_NAME["pncnn_masked_clip10_seed1"], "long").seed == 1


def test_pretrained_round_trip_and_errors(tmp_path):
  tree = {"params": {"a": {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}}, "batch_stats": {"m": np.ones(2)}}
  pretrained.save(tree, {"name": "x", "variant": "ncnn"}, tmp_path / "synthetic", "x")
  variables, manifest = pretrained.load("synthetic:x", root=tmp_path)
  np.testing.assert_array_equal(variables["params"]["a"]["w"], tree["params"]["a"]["w"])
  assert manifest["variant"] == "ncnn" and pretrained.available(root=tmp_path) == ["x"]
  with pytest.raises(ValueError, match="available: synthetic:x"):
    pretrained.load("synthetic:y", root=tmp_path)
  assert pretrained.parse("runs/x") is None and pretrained.parse("synthetic:../x") is None
  bad = {"params": {"w": np.array([1.0, np.nan], np.float32)}}
  with pytest.raises(ValueError, match="non-finite"):
    pretrained.save(bad, {}, tmp_path / "synthetic", "bad")


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
  with pytest.raises(RuntimeError):
    with reproduce.WallClock(tmp_path / "run", every=10.0):
      time.sleep(0.1)
      raise RuntimeError("training failed")
  second = json.loads(path.read_text())
  assert second["sittings"] == 2 and 0.1 <= second["seconds"] - first["seconds"] < 10
  assert sorted(p.name for p in path.parent.iterdir()) == ["wall_time.json"]  # no temporary file left


def test_unknown_run_name_is_a_one_line_error(capsys):
  assert reproduce.main(["--workdir", "/nonexistent/never", "--only", "pncnn_typo"]) == 2
  assert "unknown run(s) ['pncnn_typo']" in capsys.readouterr().err


@pytest.mark.slow
def test_reproduce_end_to_end_resumes_and_ships(tmp_path, capsys, monkeypatch):
  wd, results_md, ship = tmp_path / "wd", tmp_path / "docs" / "RESULTS.md", tmp_path / "ship" / "synthetic"
  args = ["--workdir", str(wd), "--scale", "smoke", "--only", "ncnn,ncnn_conf_l1_masked", "--results",
          str(results_md)]
  assert reproduce.main(args + ["--stage", "train", "--jobs", "2"]) == 0  # each run in its own process
  out = capsys.readouterr().out
  for name in ("ncnn", "ncnn_conf_l1_masked"):
    assert paper.finished(wd, paper.RUNS_BY_NAME[name], "smoke")
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
  assert (manifest["config"]["variant"] == "ncnn_conf_l1"
          and manifest["config"]["model"]["mask_input_confidence"] is True)
  import ml_collections
  from pncnn_jax import results
  again = results.check_metrics(ml_collections.ConfigDict(manifest["config"]), variables)
  for k in ("mae", "rmse", "ause_pncnn", "auroc_disturbed"):
    assert again[k] == pytest.approx(manifest["check"][k], rel=1e-5), k
  # --carry: a run finished in this workdir keeps its own row; an earlier sitting's row fills a run not trained here.
  prior = {**summary, "runs": {"ncnn": {**summary["runs"]["ncnn"], "metrics": {"mae": -1.0}},
                               "pncnn": {**summary["runs"]["ncnn_conf_l1_masked"], "step": 99}},
           "commit": "feedfacecafe", "date": "2026-01-02"}
  both = carry.add(results.evaluate_all(wd, "smoke", evaluate=False), prior, wd, "smoke", evaluate=False)
  assert both["runs"]["ncnn"] == summary["runs"]["ncnn"] and "carried_from" not in both["runs"]["ncnn"]
  assert both["runs"]["ncnn_oracle_c0"] == summary["runs"]["ncnn_oracle_c0"]  # this workdir's NCNN, its oracle
  assert both["runs"]["pncnn"]["step"] == 99 and both["runs"]["pncnn"]["carried_from"] == {
      "commit": "feedfacecafe", "date": "2026-01-02"}
  assert "pncnn" not in both["not_finished"] and "pncnn_masked" in both["not_finished"]
  # A scale meant for some runs only (paper.SCALE_RUNS) lists only those as not finished, with --carry too; a run
  # folder's provenance.txt reaches its row.
  (wd / "runs" / "ncnn" / "provenance.txt").write_text("Trained by hand.\n")
  with monkeypatch.context() as m:
    m.setitem(paper.SCALE_RUNS, "smoke", ("ncnn", "pncnn_masked"))
    own = results.evaluate_all(wd, "smoke", evaluate=False)
    assert own["not_finished"] == ["pncnn_masked"] and own["runs"]["ncnn"]["trained_by"] == "Trained by hand."
    assert carry.add(own, prior, wd, "smoke", evaluate=False)["not_finished"] == ["pncnn_masked"]
  (wd / "runs" / "ncnn" / "provenance.txt").unlink()
  # --carry on a machine without this workdir: the shipped runs are evaluated again from their weights, with the
  # earlier validation curves; the figures can show them.
  monkeypatch.setattr(pretrained, "ROOT", ship.parent)
  fresh = carry.add(results.evaluate_all(tmp_path / "fresh", "smoke"), summary, tmp_path / "fresh", "smoke")
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
  assert carry.shipped_files("ncnn", "smoke", {**summary["runs"]["ncnn"], "step": 5}) is None  # another training
  # --ship with --only ships only the selected runs, though others are finished too.
  results.ship_weights(wd, "smoke", summary, tmp_path / "only", [paper.RUNS_BY_NAME["ncnn"]])
  assert sorted(p.name for p in (tmp_path / "only").iterdir()) == ["ncnn.json", "ncnn.npz"]


def _carry_file(tmp_path, **changes):
  """An earlier sitting's results JSON at the smoke scale, with three real rows of docs/RESULTS_LONG.json."""
  from conftest import REPO
  long = json.loads((REPO / "docs" / "RESULTS_LONG.json").read_text())
  runs = {n: long["runs"][n] for n in ("ncnn", "ncnn_conf_l1", "ncnn_oracle_c0", "pncnn_masked")}
  runs["ncnn"] = {**runs["ncnn"], "weights_from": "pncnn_jax/pretrained/synthetic/ncnn.npz"}  # measured from weights
  runs["pncnn_masked"] = {**runs["pncnn_masked"], "eval_version": 1}  # measured differently: not carried
  prior = {"scale": "smoke", "recipe": paper.SCALES["smoke"], "runs": runs, "fusion": None, "commit": "0123456789ab",
           "date": "2026-11-20", **changes}
  path = tmp_path / "prior.json"
  path.write_text(json.dumps(prior))
  return path


def test_carry_keeps_an_earlier_sittings_rows_and_names_them(tmp_path, capsys):
  """`reproduce --carry`: a sitting without the earlier workdir adds to the earlier results instead of replacing
  them; each carried row names the commit and date that measured it, also when carried again."""
  from pncnn_jax import report, results
  prior = carry.read_carry(_carry_file(tmp_path), "smoke")
  summary = carry.add(results.evaluate_all(tmp_path / "wd", "smoke", evaluate=False), prior, tmp_path / "wd", "smoke",
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
  assert "`python -m pncnn_jax.reproduce --scale smoke --carry docs/RESULTS_SMOKE.json`" in text
  assert ("By the page they were copied from (its commit and date): commit 0123456789 (2026-11-20): `ncnn`, "
          "`ncnn_conf_l1`, `ncnn_oracle_c0`.") in text
  assert "| `ncnn_conf_l1` | 334,498 | 525.2 | 2553 |" in text
  assert "Trained in earlier sittings, evaluated here" not in text  # the earlier page measured weights; not this one
  assert ("- (b) the learned c0 of `ncnn_conf_l1` singles out the disturbed points: **does not hold**. AUROC 0.377"
          in text)  # the claims are judged on the carried rows too
  again = carry.add(results.evaluate_all(tmp_path / "wd", "smoke", evaluate=False),
                    carry.read_carry(page.with_suffix(".json"), "smoke"), tmp_path / "wd", "smoke", evaluate=False)
  assert again["runs"]["ncnn"]["carried_from"]["commit"] == "0123456789ab"  # the sitting that measured it


def test_a_page_of_carried_rows_keeps_its_drawn_panel(tmp_path):
  from pncnn_jax import report, report_figures
  figdir, workdir = tmp_path / "figs", tmp_path / "wd"
  figdir.mkdir()
  args = (workdir, figdir, "4 scenes", (64, 320), report.MAIN_ORDER, report.ABLATION_ORDER)
  assert report_figures.figures({}, *args) == []  # nothing evaluated here and nothing drawn before: no panel
  (figdir / "panels.png").write_bytes(b"drawn by an earlier sitting")
  [(name, caption)] = report_figures.figures({}, *args)
  assert name == "panels.png" and caption.startswith(report_figures.PANEL_CAPTION) and "kept, not redrawn" in caption
  assert "none of the runs it shows (`ncnn`, `pncnn`, `pncnn_masked`," in caption  # not 'none of the page's runs'
  assert (figdir / "panels.png").read_bytes() == b"drawn by an earlier sitting"


@pytest.mark.parametrize("changes,error", [
    ({"scale": "long"}, "its runs are of the 'long' scale, not 'smoke'"),
    ({"recipe": {**paper.SCALES["smoke"], "batch_size": 3}}, "trained with another 'smoke' recipe"),
    ({"runs": None}, "not a results JSON of pncnn_jax.reproduce"),
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


def test_results_page_carries_the_flow_claims_and_table(tmp_path):
  """docs/RESULTS.md shows the flow experiment's claims, table and figure from RESULTS_FLOW.json beside it."""
  from conftest import REPO
  from pncnn_jax import flow_report, report
  assert report.flow_section(tmp_path / "RESULTS_FLOW.json") == []  # not run: nothing
  source = REPO / "docs" / "RESULTS_FLOW.json"
  rows = json.loads(source.read_text())["rows"]
  lines = report.flow_section(source)
  assert lines[1] == "## Sparse optical-flow rectification (paper section 6)"
  claims = flow_report.claims(rows)
  assert claims and all(c in lines for c in claims) and any("(F1)" in c for c in claims)
  assert flow_report.table(rows) in lines and "`flow_pncnn`" in flow_report.table(rows)
  assert lines[-1] == "![flow_pncnn panels](results_flow/flow_pncnn_panels.png)"


def _table_run(mae, rmse, ause, nll, auroc, flat):
  return {"params": 668803, "step": 1000, "metrics": {"mae": mae, "rmse": rmse, "imae": 1.0, "irmse": 4.0},
          "uncertainty": {"ause_pncnn": ause, "ause_gustafsson": ause, "auce": 0.3, "nll": nll},
          "c0": {"auroc": auroc, "auroc_depth_bins": 0.8, "c0_mean_disturbed": 0.2, "c0_mean_clean": 0.5},
          "convergence": {"flat": flat, "rmse_change_last_30pct": None if flat else -0.031}}


def test_results_page_compares_the_runs_trained_longer(tmp_path):
  """docs/RESULTS.md shows the runs of RESULTS_LONG.json beside it, each cell 'here -> long', and the long page's
  claims on those runs only; another page's figures go to their own folder."""
  from pncnn_jax import report
  summary = {"runs": {"sv": _table_run(565.4, 2357, 0.0519, 0.233, 0.789, False),
                      "other": _table_run(1, 2, 0.1, 0.1, 0.5, True)}}
  assert report.scale_section(tmp_path / report.LONG_PAGE, summary) == []  # not written: nothing
  long = {"scale": "long", "date": "2026-11-27", "commit": "0123456789abcdef",
          "recipe": {"steps_per_epoch": 250, "num_epochs": 20, "lr_decay_epochs": 16, "test_scenes": 96},
          "runs": {"sv": _table_run(521.2, 2290, 0.047, 0.21, 0.83, True),
                   "only_long": _table_run(1, 1, 1, 1, 1, True)},
          "claims": [{"claim": "(b) the learned c0 of `sv` singles out", "holds": True, "numbers": "AUROC 0.83"},
                     {"claim": "(b) the learned c0 of `zz` singles out", "holds": False, "numbers": "AUROC 0.1"},
                     {"claim": "(c) `sv` AUSE below", "holds": None, "numbers": ""}]}  # not measured: left out
  (tmp_path / "RESULTS_LONG.json").write_text(json.dumps(long))
  lines = report.scale_section(tmp_path / report.LONG_PAGE, summary)  # reads RESULTS_LONG.json beside it
  assert lines[1] == "## Training 5000 steps (long scale)" and "[RESULTS_LONG.md](RESULTS_LONG.md)" in lines[3]
  rows = [ln for ln in lines if ln.startswith("| `")]
  # only runs on both pages
  assert rows == ["| `sv` | 565.4 -> 521.2 | 2357 -> 2290 | 0.0519 -> 0.047 | 0.233 -> 0.21 | 0.789 -> 0.83 | "
                  "0.8 -> 0.8 | 0.2 / 0.5 -> 0.2 / 0.5 | no (-3.1 %, still falling) -> yes |"]
  assert "- (b) the learned c0 of `sv` singles out: **holds**. AUROC 0.83." in lines
  rose = _table_run(1, 2, 0.1, 0.1, 0.5, False) | {"convergence": {"flat": False, "rmse_change_last_30pct": 0.084}}
  assert report._cells("r", rose)[-1] == "no (+8.4 %, rose: its best came earlier)"  # pylint: disable=protected-access
  assert not any("`zz`" in ln or "(c)" in ln for ln in lines)
  assert report.figure_folder(tmp_path / "RESULTS_LONG.md") == "results_long"
  assert report.figure_folder(tmp_path / "RESULTS.md") == report.figure_folder(tmp_path / "results.md") == "results"


def test_long_page_puts_the_runs_retrained_longer_into_its_claims(tmp_path):
  """The long page shows the runs of RESULTS_LONGER.json ('here -> longer') and its claims with those runs in place
  of their 5000-step versions, against its own references, naming the unequal lengths; the retrained run's other
  seeds (not retrained) leave its claims, and claims on no retrained run are not repeated."""
  from pncnn_jax import report
  summary = {"runs": {"ncnn_conf_l1_masked": _table_run(500, 2600, 0.5, 0.1, 0.9, True) | {"step": 5000},
                      "pncnn_masked": _table_run(700, 3000, 0.07, 0.2, 0.6, False) | {"step": 5000},
                      "pncnn_masked_seed1": _table_run(710, 3100, 0.07, 0.2, 0.3, True) | {"step": 5000}}}
  assert report.longer_section(tmp_path / report.LONGER_PAGE, summary) == []  # not written: nothing
  longer = {"scale": "longer", "date": "2026-11-29", "commit": "0123456789abcdef",
            "recipe": {"steps_per_epoch": 250, "num_epochs": 40, "lr_decay_epochs": 32, "test_scenes": 96},
            "runs": {"pncnn_masked": _table_run(540, 2700, 0.06, 0.1, 0.85, True) | {"step": 10000}},
            "claims": [{"claim": "(b) the learned c0 of `pncnn_masked` singles out", "holds": True, "numbers": ""}]}
  (tmp_path / "RESULTS_LONGER.json").write_text(json.dumps(longer))
  lines = report.longer_section(tmp_path / report.LONGER_PAGE, summary)
  assert lines[1] == "## Training 10000 steps (longer scale)"
  assert "[RESULTS_LONGER.md](RESULTS_LONGER.md)" in lines[3] and lines[3].endswith("then the longer run's.")
  assert [ln for ln in lines if ln.startswith("| `")] == [
      "| `pncnn_masked` | 700 -> 540 | 3000 -> 2700 | 0.07 -> 0.06 | 0.2 -> 0.1 | 0.6 -> 0.85 | 0.8 -> 0.8 | "
      "0.2 / 0.5 -> 0.2 / 0.5 | no (-3.1 %, still falling) -> yes |"]
  claims = [ln for ln in lines if ln.startswith("- (")]
  assert ("- (d) `pncnn_masked` within 10 % of `ncnn_conf_l1_masked` in MAE and RMSE: **holds**. MAE 540 vs 500 mm "
          "(+8.0 %), RMSE 2700 vs 2600 mm (+3.8 %); unequal training lengths: `pncnn_masked` 10000 steps, "
          "`ncnn_conf_l1_masked` 5000 steps.") in claims
  assert any(ln.startswith("- (b) the learned c0 of `pncnn_masked` singles out the disturbed points: **holds**")
             for ln in claims)
  assert any(ln.startswith("- (c) `pncnn_masked` AUSE") for ln in claims)
  assert len(claims) == 3  # (b), (c), (d) of pncnn_masked: not (b) of ncnn_conf_l1_masked, nor the longer page's own
  assert not any("seeds" in ln for ln in lines)  # seed 1 was not retrained: no spread over seeds 0-1


def test_longer_scale_trains_only_the_runs_it_is_for():
  """Without --only, the longer scale trains the runs of paper.SCALE_RUNS (not all 31 for 10000 steps); every other
  scale trains all; --only still picks any run."""
  from pncnn_jax import paper
  assert [r.name for r in paper.select("", "longer")] == ["ncnn_conf_l2", "pncnn_masked", "pncnn_exp"]
  assert paper.select("", "long") == paper.select("") == list(paper.RUNS)
  assert [r.name for r in paper.select("ncnn", "longer")] == ["ncnn"]
  assert all(n in paper.RUNS_BY_NAME for names in paper.SCALE_RUNS.values() for n in names)


def test_longer_page_is_about_its_runs_only(tmp_path):
  """docs/RESULTS_LONGER.md: the long page's claims with its runs in place (no 'not measured yet' claims of the
  runs it does not train), each run 5000 -> 10000, how a run was trained when its folder says so, and as not
  included only its own runs not finished; its figures start with the validation curves at both lengths."""
  from pncnn_jax import paper, report, report_figures
  curve = lambda n, lo: [[s, lo + 1000 * 250 / s, lo / 4 + 100 * 250 / s] for s in range(250, n + 1, 250)]  # noqa
  short = lambda r, n, lo: r | {"step": n, "convergence": r["convergence"] | {"val_curve": curve(n, lo)}}  # noqa
  long = {"scale": "long", "date": "2026-11-27", "commit": "0123456789abcdef", "recipe": paper.SCALES["long"],
          "runs": {"ncnn_conf_l1_masked": short(_table_run(500, 2600, 0.5, 0.1, 0.9, True), 5000, 2500),
                   "pncnn_masked": short(_table_run(700, 3000, 0.07, 0.2, 0.6, False), 5000, 2900),
                   "ncnn_conf_l2": short(_table_run(660, 2320, 0.56, 0.1, 0.8, False), 5000, 2200)}}
  (tmp_path / "RESULTS_LONG.json").write_text(json.dumps(long))
  runs = {"pncnn_masked": short(_table_run(540, 2700, 0.06, 0.1, 0.85, True), 10000, 2600)
          | {"trained_by": "Resumed from the long run's step-3500 checkpoint."},
          "ncnn_conf_l2": short(_table_run(600, 2250, 0.5, 0.1, 0.82, True), 10000, 2100)}
  summary = {"scale": "longer", "recipe": paper.SCALES["longer"], "runs": runs, "fusion": None, "date": "2026-11-28",
             "commit": "fedcba9876543210", "jax": "0.12", "devices": ["cpu:0"], "scenes": "96 held-out test scenes",
             "not_finished": ["pncnn_exp"]}
  # a pair whose other run has no validation curve: nothing drawn
  assert report_figures.val_curves([("x", runs["pncnn_masked"], {})], tmp_path, (4000, 8000), ("a", "b")) == []
  figdir = tmp_path / "results_longer"
  figdir.mkdir()
  lines = report.longer_page(summary, tmp_path / report.LONGER_PAGE, [("panels.png", "a panel")], figdir)
  assert (figdir / "val_curves.png").stat().st_size > 10_000
  text = "\n".join(lines)
  assert lines[0] == "# Results: the runs still falling at 5000 steps, trained 10000"
  assert "not measured yet" not in text and "Shipped weights" not in text
  assert "**How `pncnn_masked` was trained.** Resumed from the long run's step-3500 checkpoint." in lines
  claims = [ln for ln in lines if ln.startswith("- (")]
  assert "- (d) `pncnn_masked` within 10 % of `ncnn_conf_l1_masked` in MAE and RMSE: **holds**. MAE 540 vs 500 mm " \
         "(+8.0 %), RMSE 2700 vs 2600 mm (+3.8 %); unequal training lengths: `pncnn_masked` 10000 steps, " \
         "`ncnn_conf_l1_masked` 5000 steps." in claims
  assert not any("`ncnn_conf_l1_masked` singles out" in ln for ln in claims)  # about no retrained run
  rows = [ln for ln in lines if ln.startswith("| `pncnn_masked` | 700 -> 540 |")]
  assert len(rows) == 1 and rows[0].endswith("| no (-3.1 %, still falling) -> yes |")
  assert lines[-2] == "These runs have not reached their last step; rerun the command to continue them: `pncnn_exp`."
  figures = [ln for ln in lines if ln.startswith("![")]
  assert figures[0].split("\n")[0].endswith("(results_longer/val_curves.png)")  # first, then the page's others
  assert figures[1].split("\n")[0] == "![a panel](results_longer/panels.png)"


def test_results_page_names_the_scale_of_each_shipped_model(tmp_path):
  from pncnn_jax import report
  assert report.shipped_lines(tmp_path) == []  # nothing shipped: no line
  d = tmp_path / "synthetic"
  d.mkdir()
  for name, scale, step in (("b", "cpu", 1000), ("a", "cpu", 1000), ("c", "long", 5000)):
    (d / f"{name}.npz").write_bytes(b"")
    (d / f"{name}.json").write_text(json.dumps({"scale": scale, "step": step}))
  (d / "lonely.json").write_text("{}")  # no weights beside it: not shipped
  line = report.shipped_lines(tmp_path)[0]
  assert line.endswith("by the scale they were trained at: `cpu` scale, 1000 steps: `a`, `b`; "
                       "`long` scale, 5000 steps: `c`.")
  assert pretrained.describe_scales(["a"], root=tmp_path) == "`cpu` scale, 1000 steps: `a`"  # the demo's subset
  assert pretrained.describe_scales(["c", "b"], root=tmp_path) == ("`cpu` scale, 1000 steps: `b`; "
                                                                   "`long` scale, 5000 steps: `c`")


def _fake_run(mae, rmse, ause, auroc, auroc_bins, c0_dist, c0_clean):
  return {"metrics": {"mae": mae, "rmse": rmse}, "uncertainty": {"ause_pncnn": ause},
          "c0": {"auroc": auroc, "auroc_depth_bins": auroc_bins, "c0_mean_disturbed": c0_dist,
                 "c0_mean_clean": c0_clean}}


def test_learning_rate_lines_compare_each_recipe_at_both_lrs(tmp_path):
  """The lower-lr runs beside the same recipes at the scale's lr: the table (every finished seed), and (d) and (b) for
  pNCNN at the lower lr against both references, by the claims' own thresholds; worked by hand. The figure of their
  validation curves is drawn when both runs of a pair have one."""
  from pncnn_jax import report, report_why  # pylint: disable=g-import-not-at-top
  good, bad = (0.9, 0.85, 0.05, 1.0), (0.3, 0.4, 2.0, 1.0)  # auroc, within deciles, c0 disturbed, clean
  flat = {"convergence": {"flat": True, "rmse_change_last_30pct": 0.01}}
  runs = {"pncnn_masked": _fake_run(700, 2800, 0.1, *bad),
          "pncnn_masked_seed1": _fake_run(750, 2900, 0.1, *bad) | {"convergence": None},  # carried: no curve
          "ncnn_conf_l1_masked": _fake_run(500, 2500, 0.2, *good) | flat}
  assert report_why.learning_rate_lines(runs, 0.01) == []  # no lower-lr run yet
  runs["pncnn_masked_lr3e-3"] = _fake_run(540, 2600, 0.06, *good) | {
      "convergence": {"flat": False, "rmse_change_last_30pct": -0.05}}
  lines = report_why.learning_rate_lines(runs, 0.01)
  table = [ln for ln in lines if ln.startswith("| `")]
  assert table == ["| `pncnn_masked` (2) | 0.01 | 0.30, 0.30 | 0.40, 0.40 | 0 of 2 | 700, 750 | 2800, 2900 | "
                   "0.100, 0.100 | n/a, n/a |",
                   "| `pncnn_masked_lr3e-3` (1) | 0.003 | 0.90 | 0.85 | 1 of 1 | 540 | 2600 | 0.060 | no (-5.0 %, "
                   "still falling) |",
                   "| `ncnn_conf_l1_masked` (1) | 0.01 | 0.90 | 0.85 | 1 of 1 | 500 | 2500 | 0.200 | yes |"]
  # 540 / 500 = +8.0 %, 2600 / 2500 = +4.0 %: (d) holds; the seeds at lr 0.01: +40.0 %, +50.0 %
  assert lines[-1] == ("- **(d) and the learning rate.** At lr 0.003 `pncnn_masked_lr3e-3` is MAE +8.0 % / RMSE +4.0 % "
                       "against `ncnn_conf_l1_masked` (lr 0.01): (d) holds; at lr 0.01 `pncnn_masked` is MAE +40.0 %, "
                       "+50.0 % against `ncnn_conf_l1_masked` (seeds 0-1). (b) holds for `pncnn_masked_lr3e-3`: "
                       "AUROC 0.90, 0.85 within depth deciles, mean c0 disturbed / clean 0.05.")
  # The reference trained at the lower lr too: pNCNN is compared with both; 540 / 480 = +12.5 %: (d) does not hold.
  runs["ncnn_conf_l1_masked_lr3e-3"] = _fake_run(480, 2500, 0.2, *good)
  lines = report_why.learning_rate_lines(runs, 0.01)
  assert [ln.split(" | ")[0] for ln in lines if ln.startswith("| `")][-1] == "| `ncnn_conf_l1_masked_lr3e-3` (1)"
  assert ("against `ncnn_conf_l1_masked` (lr 0.01): (d) holds; MAE +12.5 % / RMSE +4.0 % against "
          "`ncnn_conf_l1_masked_lr3e-3` (lr 0.003): (d) does not hold; at lr 0.01") in lines[-1]
  # A second seed at the lower lr: (b) and (d) over both seeds; 600 / 500 = +20.0 %.
  runs["pncnn_masked_lr3e-3_seed1"] = _fake_run(600, 2700, 0.06, *bad)
  lines = report_why.learning_rate_lines(runs, 0.01)
  assert lines[-1].endswith("mean c0 disturbed / clean 0.05. Over its seeds 0-1: (b) holds for 1 of 2 (AUROC 0.90, "
                            "0.30); MAE +8.0 %, +20.0 % against `ncnn_conf_l1_masked`.")
  del runs["pncnn_masked_lr3e-3_seed1"]
  recipe = paper.SCALES["long"]
  assert report.lr_curves(runs, recipe, tmp_path) == []  # pncnn_masked has no validation curve
  runs["pncnn_masked"]["convergence"] = {"val_curve": [[250, 3000.0, 800.0], [500, 2800.0, 700.0]]}
  runs["pncnn_masked_lr3e-3"]["convergence"]["val_curve"] = [[250, 2900.0, 700.0], [500, 2600.0, 550.0]]
  (name, caption), = report.lr_curves(runs, recipe, tmp_path)
  assert name == "lr_curves.png" and (tmp_path / name).stat().st_size > 10_000
  assert caption.startswith("Validation RMSE and MAE of the runs trained at a lower learning rate beside the same "
                            "recipe: lr 0.01 (dashed) and lr 0.003 (solid)")


def test_grad_clip_lines_count_claims_b_and_d_over_the_clipped_seeds():
  """The clipped runs beside the same recipe unclipped and the (d) reference, every finished seed; worked by hand."""
  from pncnn_jax import report_why  # pylint: disable=g-import-not-at-top
  good, bad = (0.9, 0.85, 0.05, 1.0), (0.3, 0.4, 2.0, 1.0)  # auroc, within deciles, c0 disturbed, clean
  flat = {"convergence": {"flat": True, "rmse_change_last_30pct": 0.01}}
  runs = {"pncnn_masked": _fake_run(700, 2800, 0.1, *bad), "pncnn_masked_seed1": _fake_run(750, 2900, 0.1, *bad),
          "ncnn_conf_l1_masked": _fake_run(500, 2500, 0.2, *good) | flat}
  assert report_why.grad_clip_lines(runs) == []  # no clipped run yet
  runs["pncnn_masked_clip10"] = _fake_run(540, 2600, 0.06, *good) | flat
  lines = report_why.grad_clip_lines(runs)
  assert [ln for ln in lines if ln.startswith("| `")] == [
      "| `pncnn_masked` (2) | none | 0.30, 0.30 | 0.40, 0.40 | 0 of 2 | 700, 750 | 2800, 2900 | 0.100, 0.100 | "
      "n/a, n/a |",
      "| `pncnn_masked_clip10` (1) | 10 | 0.90 | 0.85 | 1 of 1 | 540 | 2600 | 0.060 | yes |",
      "| `ncnn_conf_l1_masked` (1) | none | 0.90 | 0.85 | 1 of 1 | 500 | 2500 | 0.200 | yes |"]
  # 540 / 500 = +8.0 % and 2600 / 2500 = +4.0 %: within 10 %, (d) holds
  assert lines[-1] == ("- **(b) and clipping.** (b) holds for 1 of 1 clipped (seed 0; AUROC 0.90) against 0 of 2 "
                       "unclipped (seeds 0-1; AUROC 0.30, 0.30). Clipped, MAE +8.0 % against `ncnn_conf_l1_masked`: "
                       "(d) holds for 1 of 1.")
  runs["pncnn_masked_clip10_seed1"] = _fake_run(600, 2700, 0.06, *bad)  # 600 / 500 = +20.0 %: (d) does not hold
  assert report_why.grad_clip_lines(runs)[-1] == (
      "- **(b) and clipping.** (b) holds for 1 of 2 clipped (seeds 0-1; AUROC 0.90, 0.30) against 0 of 2 unclipped "
      "(seeds 0-1; AUROC 0.30, 0.30). Clipped, MAE +8.0 %, +20.0 % against `ncnn_conf_l1_masked`: (d) holds for 1 "
      "of 2.")


def test_claims_name_unequal_training_lengths():
  """A claim comparing runs trained for different numbers of steps says so (the demo's shipped models mix scales);
  runs of one length, or without a step, get no note. The verdict itself is unchanged."""
  from pncnn_jax import claims  # pylint: disable=g-import-not-at-top
  runs = {"ncnn": _fake_run(650, 2800, 0.3, 0.5, 0.5, 1, 1) | {"step": 1000},
          "ncnn_conf_l1_masked": _fake_run(500, 2500, 0.2, 0.9, 0.85, 0.01, 0.2) | {"step": 1000},
          "ncnn_conf_l2_masked": _fake_run(600, 2400, 0.6, 0.6, 0.7, 0.2, 0.3) | {"step": 1000},
          "sparse_var_beta_detach_masked": _fake_run(510, 2300, 0.04, 0.88, 0.85, 0.2, 1.1) | {"step": 5000}}
  got = {c: (ok, nums) for c, ok, nums in claims.claims(runs, None)}
  d = got["(d) `sparse_var_beta_detach_masked` within 10 % of `ncnn_conf_l1_masked` in MAE and RMSE"]
  assert d == (True, "MAE 510 vs 500 mm (+2.0 %), RMSE 2300 vs 2500 mm (-8.0 %); unequal training lengths: "
               "`sparse_var_beta_detach_masked` 5000 steps, `ncnn_conf_l1_masked` 1000 steps")
  c = next(v for k, v in got.items() if k.startswith("(c) `sparse_var_beta_detach_masked`"))
  assert c[1].endswith("; unequal training lengths: `sparse_var_beta_detach_masked` 5000 steps, "
                       "`ncnn_conf_l1_masked` 1000 steps")
  a = got["(a) NCNN-Conf (L1 and L2, masked c0) beats NCNN in MAE and RMSE"]
  assert a[0] is True and "unequal" not in a[1] and "not below" not in a[1]
  runs["ncnn_conf_l2_masked"]["metrics"]["mae"] = 715.0  # a miss names the model, the metric and by how much
  a = dict((c, (ok, n)) for c, ok, n in claims.claims(runs, None))[
      "(a) NCNN-Conf (L1 and L2, masked c0) beats NCNN in MAE and RMSE"]
  assert a == (False, "NCNN: MAE 650 / RMSE 2800 mm; ncnn_conf_l1_masked: MAE 500 / RMSE 2500 mm; "
               "ncnn_conf_l2_masked: MAE 715 / RMSE 2400 mm (not below NCNN: ncnn_conf_l2_masked MAE +10.0 %)")
  del runs["ncnn"]["step"]
  runs["ncnn_conf_l2_masked"]["step"] = 5000
  assert "unequal" not in dict((c, n) for c, _, n in claims.claims(runs, None))[
      "(a) NCNN-Conf (L1 and L2, masked c0) beats NCNN in MAE and RMSE"]  # a step unknown: nothing to say


def test_fusion_claim_compares_the_best_confidence_rule_with_the_mean_and_names_mixed_lengths():
  """(e) holds when the best of weighted mean, max-confidence and MLE has a lower RMSE than the plain mean; a fusion
  table whose members were trained for different numbers of steps (the demo's shipped members) says so."""
  from pncnn_jax import claims  # pylint: disable=g-import-not-at-top
  title = "(e) confidence-based fusion beats the plain mean (4-member pNCNN ensemble, RMSE)"
  rows = {"mean": {"rmse": 2600.0}, "weighted_mean": {"rmse": 2610.0}, "max_confidence": {"rmse": 2590.4},
          "mle": {"rmse": 2700.0}}
  fusion = {"rows": rows, "steps": {"a": 5000, "b": 5000}}
  got = dict((c, (ok, n)) for c, ok, n in claims.claims({}, fusion))[title]
  assert got == (True, "RMSE [mm]: mean 2600, weighted_mean 2610, max_confidence 2590, mle 2700")
  rows["max_confidence"]["rmse"] = 2600.0  # a tie is not a win
  fusion["steps"] = {"a": 5000, "b": 1000}
  got = dict((c, (ok, n)) for c, ok, n in claims.claims({}, fusion))[title]
  assert got == (False, "RMSE [mm]: mean 2600, weighted_mean 2610, max_confidence 2600, mle 2700; "
                 "unequal training lengths: `a` 5000 steps, `b` 1000 steps")
  assert dict((c, ok) for c, ok, _ in claims.claims({}, None))[title] is None


def test_fusion_table_says_what_its_calibrated_rows_are():
  """The calibrated rows come with their scales and the RMSE each weighing rule moved by; claim (e) stays on the
  rules as trained; a table measured before calibration existed gets no paragraph."""
  from pncnn_jax import claims, report  # pylint: disable=g-import-not-at-top
  row = lambda rmse: {"mae": 1.0, "rmse": rmse}
  rows = {"mean": row(2685.0), "weighted_mean": row(2590.0), "max_confidence": row(2749.0), "mle": row(2736.0)}
  rows |= {"mean (calibrated)": row(2685.0), "weighted_mean (calibrated)": row(2574.0),
           "max_confidence (calibrated)": row(2704.0), "mle (calibrated)": row(2694.4)}
  fusion = {"rows": rows, "precision_scales": [1.114, 0.3, 1.01, 0.93], "calibrated_on": "the 32 validation scenes"}
  text = report._calibration_lines(fusion)[0]  # pylint: disable=protected-access
  assert "fitted by maximum likelihood on the 32 validation scenes" in text and "s = 1.11, 0.30, 1.01, 0.93." in text
  assert "(RMSE [mm] as trained -> calibrated: weighted_mean 2590 -> 2574, max_confidence 2749 -> 2704, mle 2736 -> " \
         "2694)" in text
  title = "(e) confidence-based fusion beats the plain mean (4-member pNCNN ensemble, RMSE)"
  rows["weighted_mean"] = row(2700.0)  # as trained, no rule beats the mean; calibrated ones would: (e) does not hold
  assert dict((c, ok) for c, ok, _ in claims.claims({}, fusion))[title] is False
  assert report._calibration_lines({"rows": rows}) == []  # pylint: disable=protected-access


def test_claims_carry_their_spread_over_seeds():
  """The pNCNN claims (b)-(d) say for how many of the 4 seeds of one recipe they hold; the seed table has the runs
  and their mean (sd). Worked by hand: the reference has AUSE 0.2, MAE 500, RMSE 2500."""
  from pncnn_jax import claims, results  # pylint: disable=g-import-not-at-top
  runs = {"ncnn_conf_l1_masked": _fake_run(500, 2500, 0.2, 0.9, 0.85, 0.01, 0.2),
          # seed 0: (b) no (within-decile 0.7), (c) no (0.11 > 0.1), (d) yes (+8 %, +4 %)
          "pncnn_masked": _fake_run(540, 2600, 0.11, 0.9, 0.7, 0.1, 1.0),
          "pncnn_masked_seed1": _fake_run(560, 2600, 0.05, 0.85, 0.82, 0.1, 1.0),   # (b) yes (c) yes (d) no
          "pncnn_masked_seed2": _fake_run(520, 2700, 0.09, 0.2, 0.3, 2.0, 1.0),     # (b) no (c) yes (d) yes (+4, +8 %)
          "pncnn_masked_seed3": _fake_run(510, 2550, 0.08, 0.81, 0.81, 0.5, 1.0)}   # (b) yes (c) yes (d) yes
  got = {c: (ok, nums) for c, ok, nums in claims.claims(runs, None)}
  b = got["(b) the learned c0 of `pncnn_masked` singles out the disturbed points"]
  c = got[f"(c) `pncnn_masked` AUSE clearly below `ncnn_conf_l1_masked`'s (ratio <= {results.AUSE_RATIO_MAX})"]
  d = got["(d) `pncnn_masked` within 10 % of `ncnn_conf_l1_masked` in MAE and RMSE"]
  assert (b[0], c[0], d[0]) == (False, False, True)  # the verdict is seed 0's, as before
  assert b[1].endswith("it holds for 2 of 4 (table 'Spread over seeds')")
  assert c[1].endswith("it holds for 3 of 4 (table 'Spread over seeds')")
  assert d[1].endswith("it holds for 3 of 4 (table 'Spread over seeds')")
  assert "over seeds" not in got["(b) the learned c0 of `ncnn_conf_l1_masked` singles out the disturbed points"][1]
  lines = claims.seed_lines(runs)
  assert lines[1].startswith("## Spread over seeds")
  rows = [ln for ln in lines if ln.startswith("| `pncnn_masked") and "mean (sd)" not in ln]
  assert len(rows) == 4 and rows[0].startswith("| `pncnn_masked` | 540 | 2600 | 0.11 | 0.9 | 0.7 | 0.1 |")
  assert lines[-2].startswith("| `pncnn_masked` seeds 0-3: mean (sd) | 532.5 (22.2) | 2612 (62.9) |")
  assert "AUROC of c0 spans 0.20-0.90 (1 of 4 below 0.5" in lines[-1] and "spans 0.050-0.110 against 0.200" in lines[-1]
  # A second recipe (beta-NLL, seeds 0-1) gets its own rows, mean and count once both of its runs are done.
  runs["pncnn_beta_masked"] = _fake_run(505, 2400, 0.12, 0.9, 0.85, 0.05, 1.0)  # (d) yes, (c) no
  assert "over seeds" not in claims.claims(runs, None)[-2][2]
  runs["pncnn_beta_masked_seed1"] = _fake_run(600, 2400, 0.09, 0.9, 0.85, 0.05, 1.0)  # (d) no (+20 %), (c) yes
  got = {c: (ok, nums) for c, ok, nums in claims.claims(runs, None)}
  d = got["(d) `pncnn_beta_masked` within 10 % of `ncnn_conf_l1_masked` in MAE and RMSE"]
  c = got[f"(c) `pncnn_beta_masked` AUSE clearly below `ncnn_conf_l1_masked`'s (ratio <= {results.AUSE_RATIO_MAX})"]
  assert d[0] is True and d[1].endswith(
      "over seeds 0-1 of the same recipe it holds for 1 of 2 (table 'Spread over seeds')")
  assert c[0] is False and c[1].endswith("it holds for 1 of 2 (table 'Spread over seeds')")  # no reference seeds
  runs["ncnn_conf_l1_masked_seed1"] = _fake_run(500, 2500, 0.3, 0.9, 0.85, 0.01, 0.2)
  runs["ncnn_conf_l1_masked_seed2"] = _fake_run(500, 2500, 0.4, 0.9, 0.85, 0.01, 0.2)
  c = {t: n for t, _, n in claims.claims(runs, None)}[
      f"(c) `pncnn_beta_masked` AUSE clearly below `ncnn_conf_l1_masked`'s (ratio <= {results.AUSE_RATIO_MAX})"]
  # (0.12+0.09)/2, (0.2+0.3+0.4)/3
  assert c.endswith("; means over seeds 0-1 and seeds 0-2: 0.105 vs 0.300 (ratio 0.35)")
  del runs["ncnn_conf_l1_masked_seed1"], runs["ncnn_conf_l1_masked_seed2"]
  lines = claims.seed_lines(runs)
  assert "(`pncnn_masked`, `pncnn_beta_masked`)" in lines[3]
  assert any(ln.startswith("| `pncnn_beta_masked` seeds 0-1: mean (sd) | 552.5 (67.2) | 2400 (0) |") for ln in lines)
  assert lines[-1].startswith("\n`pncnn_beta_masked`, seeds 0-1: the AUROC of c0 spans 0.90-0.90 (0 of 2 below 0.5")
  assert not any("laplace_masked" in c for c, *_ in claims.claims(runs, None))  # an option not run: no line
  del runs["pncnn_masked_seed3"], runs["pncnn_beta_masked_seed1"]  # a group is quoted with the seeds it has
  assert claims.seed_lines(runs)[-1].startswith("\n`pncnn_masked`, seeds 0-2: the AUROC of c0 spans")
  assert "over seeds 0-2 of the same recipe it holds for" in claims.claims(runs, None)[3][2]
  del runs["pncnn_masked_seed1"], runs["pncnn_masked_seed2"]  # seed 0 alone: no spread
  assert claims.seed_lines(runs) == [] and "over seeds" not in claims.claims(runs, None)[3][2]


def test_data_term_table_counts_claim_b_per_data_term_and_the_mae_gap():
  """Claim (b) counted over every seed of each recipe by its data term (absolute vs squared error), and the share of
  pNCNN's MAE gap to NCNN-Conf-L1 that the beta-NLL weights remove; worked by hand."""
  from pncnn_jax import claims, results  # pylint: disable=g-import-not-at-top
  good, bad = (0.9, 0.85, 0.05, 1.0), (0.3, 0.4, 2.0, 1.0)  # auroc, within deciles, c0 disturbed, clean
  runs = {"ncnn_conf_l1_masked": _fake_run(500, 2500, 0.2, *good),
          "ncnn_conf_l1_masked_seed1": _fake_run(510, 2500, 0.2, *good),
          "ncnn_conf_l1_masked_seed2": _fake_run(520, 2500, 0.2, *bad),
          "laplace_masked": _fake_run(550, 2600, 0.06, *good), "laplace_masked_seed1": _fake_run(560, 2600, 0.06, *bad),
          "laplace_masked_seed2": _fake_run(570, 2600, 0.06, *good),
          "ncnn_conf_l2_masked": _fake_run(600, 2400, 0.8, *bad),
          **{n: _fake_run(700, 2800, 0.1, *(good if i == 0 else bad))
             for i, n in enumerate(("pncnn_masked", "pncnn_masked_seed1", "pncnn_masked_seed2", "pncnn_masked_seed3"))},
          "pncnn_beta_masked": _fake_run(600, 2500, 0.05, *bad),
          "pncnn_beta_masked_seed1": _fake_run(620, 2500, 0.05, *bad)}
  lines = claims.data_term_lines(runs)
  table = [ln for ln in lines if ln.startswith("| `")]
  assert [ln.split(" | ")[0] for ln in table] == ["| `ncnn_conf_l1_masked` (3)", "| `laplace_masked` (3)",
                                                  "| `ncnn_conf_l2_masked` (1)", "| `pncnn_beta_masked` (2)",
                                                  "| `pncnn_masked` (4)"]  # pncnn_beta1_masked: not run
  assert "| 0.90, 0.30, 0.90 | 0.85, 0.40, 0.85 | 2 of 3 | 550, 560, 570 |" in table[1]
  assert "in 4 of 6 runs trained on an absolute error and in 1 of 7 runs trained on a squared error." in lines[-2]
  # gap 700 - 510 (mean of the 3 NCNN-Conf-L1 seeds) = 190 mm; beta mean 610 mm removes 90 / 190 = 47 %
  assert lines[-1].startswith("- **(d) and the NLL's precision weighting.** `pncnn_beta_masked` (mean MAE 610 mm) "
                              "removes 47 % of the MAE gap")
  # The L1-term options: a third kind of data term, counted on its own; their share of the gap (700 - 530) / 190.
  runs["pncnn_aux_masked"] = _fake_run(530, 2500, 0.06, *good)
  lines = claims.data_term_lines(runs)
  assert any(ln.startswith("| `pncnn_aux_masked` (1) | Gaussian NLL + L1 on mu | 2 c (mu - t) + sign(mu - t) | cout | "
                            "0.90 | 0.85 | 1 of 1 | 530 |") for ln in lines)
  assert lines[-3].endswith("in 4 of 6 runs trained on an absolute error, in 1 of 7 runs trained on a squared error "
                            "and in 1 of 1 runs trained on a squared error plus an absolute one (the L1 term on mu).")
  assert lines[-1].startswith("- **(d) and the L1 term on mu.** `pncnn_aux_masked` (mean MAE 530 mm) removes 89 % of")
  assert not any("aux" in c for c, *_ in claims.claims(runs, None))  # in the table only, not in the claim lines
  # Detached runs are counted on their own, not by their data term.
  runs["pncnn_detach_masked"] = _fake_run(650, 2500, 0.3, *good)
  lines = claims.data_term_lines(runs)
  assert any(ln.startswith("| `pncnn_detach_masked` (1) | Gaussian NLL (pNCNN) | 2 c (mu - t) | sg(cout) | 0.90 |")
             for ln in lines)
  assert "in 1 of 7 runs trained on a squared error and" in lines[-4]
  assert lines[-3] == ("- **(b) and the variance UNet's gradient.** With the variance UNet's input detached, c0 "
                       "singles out the disturbed points in 1 of 1 runs, and 0 of 1 give it reversed (AUROC < 0.5), "
                       "against 6 of 10 runs whose variance UNet trains c0 through cout.")  # reversed: laplace 1 of 3,
  # pncnn 3 of 4, beta 2 of 2, aux 0 of 1
  # The sparse_var option gets claim lines (b)-(d) once evaluated; (d) at +10.4 % MAE does not hold.
  runs["sparse_var_beta_detach_masked"] = _fake_run(552, 2400, 0.05, 0.79, 0.83, 0.49, 1.0)
  got = {c: (ok, n) for c, ok, n in claims.claims(runs, None)}
  b = got["(b) the learned c0 of `sparse_var_beta_detach_masked` singles out the disturbed points"]
  assert b[0] is False and b[1].startswith("AUROC 0.790, within depth deciles 0.830")
  d = got["(d) `sparse_var_beta_detach_masked` within 10 % of `ncnn_conf_l1_masked` in MAE and RMSE"]
  assert d == (False, "MAE 552 vs 500 mm (+10.4 %), RMSE 2400 vs 2500 mm (-4.0 %)")
  assert got[f"(c) `sparse_var_beta_detach_masked` AUSE clearly below `ncnn_conf_l1_masked`'s (ratio <= "
             f"{results.AUSE_RATIO_MAX})"][0] is True  # 0.05 / 0.2
  runs["sparse_var_beta_detach_masked_seed1"] = _fake_run(560, 2400, 0.06, *good)
  assert any(ln.startswith("- **(c) and the detached variance UNet.** AUSE (pNCNN) `pncnn_beta_masked` "
                           "0.050, 0.050; `sparse_var_beta_detach_masked` 0.050, 0.060. Detached,")
             for ln in claims.data_term_lines(runs))
  # A page where only some seeds are finished (the long scale): each recipe with the seeds it has; with no run whose
  # variance UNet trains c0, the detached count stands alone (was '0 of 0').
  part = {n: runs[n] for n in ("ncnn_conf_l1_masked", "ncnn_conf_l2_masked", "sparse_var_beta_detach_masked",
                               "sparse_var_beta_detach_masked_seed1")}
  lines = claims.data_term_lines(part)
  assert [ln.split(" | ")[0] for ln in lines if ln.startswith("| `")] == [
      "| `ncnn_conf_l1_masked` (1)", "| `ncnn_conf_l2_masked` (1)", "| `sparse_var_beta_detach_masked` (2)"]
  assert any(ln.endswith("in 1 of 2 runs, and 0 of 2 give it reversed (AUROC < 0.5).") for ln in lines)
  part |= {n: runs[n] for n in ("pncnn_masked", "pncnn_masked_seed2")}
  assert claims.data_term_lines(part)[-1].endswith("of the MAE gap between `pncnn_masked` (700 mm, seeds 0, 2) and "
                                                   "`ncnn_conf_l1_masked` (500 mm, seed 0).")
  assert claims.data_term_lines({"pncnn_masked": runs["pncnn_masked"]}) == []


def test_why_section_explains_the_official_ncnn_conf_without_pncnn():
  """The 'why the official network fails' section speaks of the official NCNN-Conf runs (claim (a)) from their own
  numbers, also on a page without the pNCNN pair (the long page)."""
  from pncnn_jax import report_why  # pylint: disable=g-import-not-at-top
  c0 = {"c0_mean_empty": 0.0022, "empty_weight_share": 0.026, "c0_mean_clean": 0.915, "c0_mean_disturbed": 0.953,
        "auroc": 0.377, "auroc_depth_bins": 0.286}
  runs = {"ncnn": {"metrics": {"mae": 600.0, "rmse": 3000.0}},
          "ncnn_conf_l1": {"step": 5000, "metrics": {"mae": 525.0, "rmse": 3300.0}, "c0": c0}}
  text = report_why.why(runs)
  assert text.startswith("The official NCNN-Conf has the same extra task")
  assert ("`ncnn_conf_l1` (5000 steps) gives the empty pixels mean c0 0.0022, 2.6 % of the input confidence NConv "
          "receives; its MAE / RMSE are 525 / 3300 mm (-12.5 % / +10.0 % against NCNN)") in text
  assert "0.915 on clean and 0.953 on disturbed points (AUROC 0.38, 0.29 within depth deciles)." in text
  assert "pncnn" not in text
  assert report_why.why({"ncnn": runs["ncnn"]}).startswith("Needs the")


def test_why_section_says_when_the_leak_no_longer_explains_a_reversed_c0():
  """The official pNCNN's reversed c0 is put down to the empty pixels' leak only while that leak is open."""
  from pncnn_jax import report_why  # pylint: disable=g-import-not-at-top
  def run(share, disturbed, step):
    c0 = {"c0_mean_empty": 0.01, "empty_weight_share": share, "c0_mean_clean": 8.25, "c0_mean_disturbed": disturbed,
          "auroc": 0.18, "auroc_depth_bins": 0.32, "empty_fraction": 0.92, "mean_depth_disturbed_m": 49.0,
          "mean_depth_clean_m": 27.0, "c0_depth_rank_corr_clean": 0.75}
    return {"step": step, "metrics": {"mae": 815.0, "rmse": 3141.0}, "c0": c0}
  masked = run(0.0, 0.17, 5000) | {"c0": run(0.0, 0.17, 5000)["c0"] | {"c0_mean_clean": 1.1, "auroc": 0.91}}
  closed = report_why.why_pncnn({"pncnn": run(0.0049, 12.6, 5000), "pncnn_masked": masked})
  assert "The empty pixels hold 0.49 % of all the input confidence" in closed
  assert "At 5000 steps the leak is nearly closed, yet c0 stays higher on the disturbed points, so" in closed
  open_ = report_why.why_pncnn({"pncnn": run(0.22, 13.8, 1000), "pncnn_masked": masked})
  assert "The empty pixels hold 22 % of all" in open_ and "leak is nearly closed" not in open_
  assert "leak is nearly closed" not in report_why.why_pncnn({"pncnn": run(0.0049, 4.0, 5000), "pncnn_masked": masked})


def test_discussion_follows_the_numbers_it_quotes():
  """The discussion's (b) and (c) paragraphs say 'better'/'worse' and 'less'/'no less' as their numbers read, and
  give the seed range only when every seed of the recipe is there."""
  from pncnn_jax import report_why  # pylint: disable=g-import-not-at-top
  def run(ause, auroc, bins):
    return {"uncertainty": {"ause_pncnn": ause}, "metrics": {"mae": 1.0, "rmse": 1.0},
            "c0": {"auroc": auroc, "auroc_depth_bins": bins, "c0_mean_clean": 0.9, "c0_mean_disturbed": 0.95}}
  runs = {"pncnn_masked": run(0.08, 0.91, 0.86), "ncnn_conf_l1_masked": run(0.51, 0.90, 0.84),
          "ncnn_conf_l1": run(0.33, 0.38, 0.29)}
  text = "\n".join(report_why.discussion(runs))
  assert "AUSE 0.510 (worse than 0.330 for the official `ncnn_conf_l1`)" in text
  assert "separates the disturbed points no less sharply than NCNN-Conf's" in text and "ranges from" not in text
  runs["ncnn_conf_l1_masked"] = run(0.2, 0.92, 0.87)
  runs |= {f"pncnn_masked_seed{k}": run(0.1, a, 0.7) for k, a in ((1, 0.18), (2, 0.5), (3, 0.6))}
  text = "\n".join(report_why.discussion(runs))
  assert "AUSE 0.200 (better than 0.330" in text and "separates the disturbed points less sharply" in text
  assert "over seeds 0-3 its AUROC ranges from 0.18 to 0.91" in text


def test_the_variance_unet_ablation_is_read_against_every_pncnn_seed():
  """The no_var_est paragraph gives (b) and (d) by the claims' own criteria and says the ablation supports the cause
  only when its c0 is more selective and its depth more accurate than in every pNCNN seed."""
  from pncnn_jax import claims  # pylint: disable=g-import-not-at-top
  ref = _fake_run(500.0, 2600.0, 0.5, 0.9, 0.84, 0.01, 1.0)
  runs = {"ncnn_conf_l1_masked": ref, "pncnn_masked": _fake_run(700.0, 3000.0, 0.07, 0.6, 0.6, 1.2, 1.5),
          "pncnn_masked_seed1": _fake_run(750.0, 2860.0, 0.06, 0.81, 0.72, 0.3, 0.7)}
  assert claims.variance_unet_lines(runs) == []  # no ablation run: no paragraph
  runs["no_var_est_masked"] = _fake_run(570.0, 2450.0, 0.056, 0.9, 0.78, 8.0, 1280.0)
  (text,) = claims.variance_unet_lines(runs)
  assert ("(b) does not hold and (d) does not hold: c0 AUROC 0.90 (0.78 within depth deciles), MAE +14.0 % and RMSE "
          "-5.8 % against `ncnn_conf_l1_masked`, AUSE 0.056; `pncnn_masked` over seeds 0-1: AUROC 0.60 to 0.81, MAE "
          "+40.0 % to +50.0 %, AUSE 0.060 to 0.070.") in text
  assert text.endswith("what the cause above predicts.")
  runs["laplace_masked"] = _fake_run(690.0, 2900.0, 0.08, 0.7, 0.6, 1.0, 1.0)  # keeps the path, beats no seed
  assert claims.variance_unet_lines(runs)[0] == text
  runs["depth_pred_masked"] = _fake_run(600.0, 2550.0, 0.04, 0.9, 0.76, 1.3, 4.4)  # keeps the path, beats them all
  assert claims.variance_unet_lines(runs)[0].endswith(
      "but so is `depth_pred_masked` (AUROC 0.90, MAE +20.0 %), which keeps that path: with one seed per run, a draw "
      "moves c0 as far as removing the path does (the pNCNN seeds' spread above), so this ablation does not single out "
      "the cause above.")
  runs["laplace_masked"] = _fake_run(560.0, 2800.0, 0.08, 0.92, 0.85, 0.07, 0.9)
  assert "but so are `depth_pred_masked` (AUROC 0.90, MAE +20.0 %) and `laplace_masked` (AUROC 0.92, MAE +12.0 %), " \
         "which keep that path" in claims.variance_unet_lines(runs)[0]
  del runs["depth_pred_masked"], runs["laplace_masked"]
  runs["pncnn_masked_seed1"] = _fake_run(540.0, 2500.0, 0.06, 0.95, 0.9, 0.1, 0.7)  # a seed at least as good
  assert claims.variance_unet_lines(runs)[0].endswith("so this ablation does not single out the cause above.")
  runs["no_var_est_masked"] = _fake_run(520.0, 2500.0, 0.05, 0.96, 0.85, 0.1, 1.0)  # (b) and (d) by their criteria
  text = claims.variance_unet_lines(runs)[0]
  assert "(b) holds and (d) holds" in text and text.endswith("what the cause above predicts.")


def test_where_the_error_lies_splits_claim_d_gaps_over_the_bins():
  from pncnn_jax import report_distance

  def dist(mae):
    share = [0.01, 0.04, 0.05, 0.2, 0.2, 0.5]
    return {"edges_px": [0.0, 1.0, 3.0, 5.0, 10.0, 20.0], "share": share, "mae_mm": mae, "rmse_mm": mae,
            "pooled_mae_mm": sum(s * m for s, m in zip(share, mae)), "num_pixels": 1000}

  def row(mae, deleted=None):
    return {"error_by_disturbed_distance": dist(mae),
            **({"disturbed_deleted": {"error_by_disturbed_distance": dist(deleted)}} if deleted else {})}

  runs = {"ncnn_conf_l1": row([9000.0, 5000.0, 2000.0, 800.0, 400.0, 200.0],
                              [8000.0, 5000.0, 2000.0, 800.0, 400.0, 200.0]),
          "pncnn": row([11000.0, 8000.0, 5000.0, 1000.0, 500.0, 210.0],
                       [9000.0, 8000.0, 5000.0, 1000.0, 500.0, 210.0]),
          "pncnn_exp": row([7000.0, 5000.0, 2000.0, 800.0, 400.0, 170.0]),
          "ncnn": {"metrics": {}}}  # a run measured before the table existed: left out
  text = "\n".join(report_distance.lines(runs, ("ncnn", "ncnn_conf_l1", "pncnn", "pncnn_exp")))
  assert "| share of pixels | 1.0 % | 4.0 % | 5.0 % | 20.0 % | 20.0 % | 50.0 % | 100 % | |" in text
  assert "| `pncnn` | 11000 | 8000 | 5000 | 1000 | 500 | 210 | 1085 | 1065 |" in text and "| `ncnn` |" not in text
  assert "| `pncnn_exp` | 7000 | 5000 | 2000 | 800 | 400 | 170 | 695 | n/a |" in text
  assert "| run | [0, 1) px | [1, 3) px | [3, 5) px | [5, 10) px | [10, 20) px | >= 20 px |" in text
  # gap 1085 - 730 = +355: +290 within 5 px (0.01*2000 + 0.04*3000 + 0.05*3000), +60 at 5-20 px, +5 at >= 20 px;
  # deleted: 1065 - 720 = +345 (+280 within 5 px), so +10 mm is how the two weigh the disturbed points.
  assert ("`pncnn` against `ncnn_conf_l1`: pooled MAE +355 mm (+290 mm closer than 5 px to a disturbed point, +60 mm "
          "at 5-20 px, +5 mm at 20 px or more); with the disturbed points deleted from both inputs +345 mm remain "
          "(+280 mm closer than 5 px to a disturbed point, +60 mm at 5-20 px, +5 mm at 20 px or more): the depth "
          "networks' part, and +10 mm is how the two weigh the disturbed points (keeping them changes `pncnn`'s "
          "pooled MAE by +20 mm and `ncnn_conf_l1`'s by +10 mm)") in text
  assert "`pncnn_exp` against `ncnn_conf_l1`: pooled MAE -35 mm (-20 mm closer" in text  # no deleted pass: one split
  assert report_distance.lines({"ncnn": {"metrics": {}}}, ("ncnn",)) == []
  assert report_distance.gap_sentence(runs, "pncnn", "ncnn_conf_l1") == (
      " Measured here (section 'Where the error lies'): `pncnn`'s pooled MAE is +355 mm against `ncnn_conf_l1`'s, "
      "+350 mm of it within 20 px of a disturbed point (+5 mm beyond), and +345 mm (97 %) remain with the disturbed "
      "points deleted from both inputs: mostly the depth network's, in the places where disturbances happen, not how "
      "c0 weighs the disturbed points.")
  assert report_distance.gap_sentence(runs, "pncnn_exp", "ncnn_conf_l1") == ""  # no deleted pass, no sentence


def test_accelerator_script_defaults_to_a_scale():
  """bench/accelerator_reproduce.sh passes its SCALE (default or given) to `--scale`: the default must be one."""
  script = (pathlib.Path(__file__).parents[1] / "bench" / "accelerator_reproduce.sh").read_text()
  default = re.search(r"^scale=\$\{2:-(\w+)\}", script, re.M)
  assert default, "bench/accelerator_reproduce.sh: no `scale=${2:-...}` line"
  assert default.group(1) in paper.SCALES, default.group(1)
