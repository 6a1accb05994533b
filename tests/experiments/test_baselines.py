"""The baseline comparison's wiring: its runs and configs, the learning-rate sweep's choice, the training order, the
claims and the page (from a made-up summary: nothing is trained or compiled here)."""

import json

import pytest

from pncnn_jax import from_config
from pncnn_jax.experiments import baselines as baselines_lib
from pncnn_jax.experiments import reproduce
from pncnn_jax.experiments import runs as runs_lib
from pncnn_jax.experiments.pages import baselines as pages_baselines


def test_baseline_runs_and_their_configs(tmp_path):
  assert runs_lib.select("", "long") == list(runs_lib.RUNS)  # a plain reproduce never trains the baselines
  members = [f"s2d_seed{k}" for k in range(8)]  # the ensemble's members are runs of their own
  assert [r.name for r in runs_lib.select("s2d_mcdropout,s2d_ensemble8")] == ["s2d_mcdropout", *members]
  assert [r.name for r in runs_lib.select("s2d_seed1,s2d_ensemble8")] == ["s2d_seed1", "s2d_seed0", *members[2:]]
  mc = runs_lib.run_config(runs_lib.BASELINE_MC, "long")
  assert from_config.build_model(mc).dropout_rate == 0.5 and from_config.variant_loss(mc) == "gaussian_nll_logvar"
  assert (mc.batch_size, mc.data.train_crop_height, mc.data.train_crop_width) == (4, 64, 320)
  for k, run in enumerate(runs_lib.BASELINE_MEMBERS):  # member k: seed k (its init and data order), all scenes
    member = runs_lib.run_config(run, "long")
    assert member.seed == k and member.variant == "s2d" and "ensemble" not in member
    assert from_config.build_model(member).dropout_rate == 0.0
  sweep = runs_lib.run_config(runs_lib.BASELINE_SWEEP[0], "long")
  assert sweep.learning_rate == 1e-3 and sweep.num_epochs == 4 and sweep.lr_decay_epochs > sweep.num_epochs
  with pytest.raises(ValueError, match="train them first"):
    runs_lib.run_config(runs_lib.BASELINE_MC, "long", workdir=tmp_path)


def _finish(workdir, run, scale, rmse):
  r = runs_lib.recipe(run, scale)
  d = runs_lib.run_dir(workdir, run)
  d.mkdir(parents=True)
  (d / "metrics.jsonl").write_text(json.dumps({"split": "val", "step": r["steps_per_epoch"] * r["num_epochs"],
                                               "rmse": rmse}) + "\n")


def test_the_sweep_picks_the_lowest_validation_rmse(tmp_path):
  for run, rmse in zip(runs_lib.BASELINE_SWEEP, (3000.0, 2500.0, 2700.0)):
    _finish(tmp_path, run, "smoke", rmse)
  choice = runs_lib.baseline_learning_rate(tmp_path, "smoke")
  assert choice["learning_rate"] == 3e-4 and json.loads((tmp_path / runs_lib.BASELINE_LR_FILE).read_text()) == choice
  assert runs_lib.run_config(runs_lib.BASELINE_MEMBERS[5], "smoke", workdir=tmp_path).learning_rate == 3e-4


def test_the_sweep_trains_before_the_runs_that_need_it(tmp_path, monkeypatch):
  phases = []
  monkeypatch.setattr(reproduce, "_train_phase", lambda wd, scale, runs, jobs: phases.append([r.name for r in runs]))
  reproduce.train_runs(tmp_path, "smoke", runs_lib.select("s2d_ensemble8"), jobs=2)
  assert phases == [[r.name for r in runs_lib.BASELINE_SWEEP], [r.name for r in runs_lib.BASELINE_MEMBERS]]


def test_an_ensemble_is_its_leading_finished_members(tmp_path):
  assert baselines_lib.finished_members(tmp_path, "smoke") == []
  for k in (0, 1, 3):  # seed 2 not finished: the ensemble is seeds 0 and 1
    _finish(tmp_path, runs_lib.BASELINE_MEMBERS[k], "smoke", 1000.0)
  assert [r.name for r in baselines_lib.finished_members(tmp_path, "smoke")] == ["s2d_seed0", "s2d_seed1"]


def _row(rmse, ause):
  return {"mae": rmse / 2, "rmse": rmse, "ause_pncnn": ause, "ause_shared_max": ause * 1.1, "ause_none": ause * 3,
          "ause_gustafsson": ause, "auce": 0.1, "nll": 2.0, "num_images": 4}


def fake_summary(missing=()):
  costs = {"frame": [352, 1216], "device": "cpu", "date": "2026-11-29",
           "pncnn": {"seconds": 0.1, "peak_bytes": 1e8, "passes": 1}}
  costs.update({f"mc_dropout {m}": {"seconds": 1.0 * m, "peak_bytes": 1e9 * m, "passes": m} for m in (1, 2)})
  costs.update({f"ensemble {m}": {"seconds": 1.0 * m, "peak_bytes": 1e9, "passes": m} for m in (1, 2)})
  s = {"scale": "long", "recipe": runs_lib.SCALES["long"], "scenes": "96 held-out test scenes", "commit": "abc",
       "date": "2026-11-29", "missing": list(missing), "costs": costs, "learning_rate": None,
       "baselines": {"mc_dropout": {"name": "s2d_mcdropout", "params": 13_675_394, "train_wall_s": 3600.0,
                                    "rows": {"1": _row(3000, 0.30), "2": _row(2900, 0.20)}},
                     "ensemble": {"name": "s2d_ensemble8", "params": 13_675_394, "train_wall_s": 7200.0,
                                  "rows": {"1": _row(2950, 0.25), "2": _row(2800, 0.15)}}},
       "family": {"pncnn": {"label": "pNCNN (official network)", "params": 668_515, "row": _row(2850, 0.10)},
                  "sparse_var_beta_detach_masked": {"label": "recommended shipped pNCNN", "params": 668_803,
                                                    "row": _row(2700, 0.12)}}}
  return s


def test_claims_hold_or_not_with_their_numbers():
  got = {c: (ok, nums) for c, ok, nums in baselines_lib.claims(fake_summary())}
  ause = got["pNCNN (official network): AUSE (pNCNN normalisation) below every baseline's"]
  assert ause[0] is True and "best baseline Ensemble M=2 0.150" in ause[1]
  rmse = got["pNCNN (official network): RMSE below MC-Dropout's and the ensembles' (every M)"]
  assert rmse[0] is False and "not above pNCNN: Ensemble 2800" in rmse[1].replace("M=2 ", "")
  cost = got["pNCNN (official network): inference time and peak memory per frame at most 0.2 x one baseline pass"]
  assert cost[0] is True and "time 0.100 x, peak memory 0.100 x" in cost[1]
  missing = baselines_lib.claims(fake_summary(missing=["s2d_ensemble8"]))
  assert all(ok is None and "s2d_ensemble8" in nums for _, ok, nums in missing)


def test_page_names_what_is_missing_and_draws_the_figure(tmp_path):
  path = tmp_path / "RESULTS_BASELINES.md"
  pages_baselines.write(fake_summary(), path)
  text = path.read_text()
  assert "| MC-Dropout | 2 | 1450 | 2900 | 0.2 | 0.22 | 0.6 |" in text and "(10 x)" in text
  assert "AUSE (pNCNN normalisation" in text and "Not measured yet" not in text
  assert (tmp_path / "results_baselines" / pages_baselines.FIGURE).stat().st_size > 10_000
  assert json.loads(path.with_suffix(".json").read_text())["claims"][0]["holds"] is True
  empty = {**fake_summary(missing=["s2d_mcdropout", "s2d_ensemble8", "pncnn"]), "baselines": {}, "family": {},
           "costs": None}
  pages_baselines.write(empty, tmp_path / "empty" / "RESULTS_BASELINES.md")
  text = (tmp_path / "empty" / "RESULTS_BASELINES.md").read_text()
  assert "**Not measured yet:** `s2d_mcdropout`, `s2d_ensemble8`, `pncnn`" in text
  assert "| MC-Dropout" not in text and not (tmp_path / "empty" / "results_baselines").exists()


def test_page_splits_a_failed_cost_claim_and_says_when_the_rate_is_the_grids_largest(tmp_path):
  s = fake_summary()
  s["costs"]["pncnn"] = {"seconds": 0.15, "peak_bytes": 2.3e9, "passes": 1, "flops": 54e9}
  for k in ("mc_dropout 1", "ensemble 1"):
    s["costs"][k]["flops"] = 53e9
  s["costs"]["load_average_1min_after"] = 1.25
  s["learning_rate"] = {"learning_rate": 1e-3, "judged_on": "the final validation RMSE",
                        "val_rmse": {"s2d_lr1e-3": 8152.0, "s2d_lr3e-4": 11081.0, "s2d_lr1e-4": 13474.0}}
  path = tmp_path / "RESULTS_BASELINES.md"
  pages_baselines.write(s, path)
  text = path.read_text()
  assert ("The cost claim splits: pNCNN's time per frame is 0.15 x one baseline pass (within the threshold), its "
          "planned peak memory 2.30 x (above). The most likely cause: XLA counts 54 GFLOP per frame for pNCNN against "
          "53 for one baseline pass:") in text
  assert "32-channel convolutions at the full 352x1216 (52 MiB per feature map)" in text
  assert "The best rate is the largest of the grid" in text and "(1-minute load average 1.2 on" in text
  s["learning_rate"] = {**s["learning_rate"], "learning_rate": 3e-4}
  s["costs"]["pncnn"]["peak_bytes"] = 1e8
  pages_baselines.write(s, path)
  text = path.read_text()
  assert "The best rate is the largest" not in text and "The cost claim splits" not in text


def test_page_says_which_ensemble_sizes_wait_for_members(tmp_path):
  s = fake_summary(missing=["s2d_seed2", "s2d_seed3"])
  s["baselines"]["ensemble"]["members"] = ["s2d_seed0", "s2d_seed1"]
  path = tmp_path / "RESULTS_BASELINES.md"
  pages_baselines.write(s, path)
  text = path.read_text()
  assert "The ensembles are measured for M = 1, 2; larger ones wait for these members." in text
  assert "s2d_ensemble8 (2 members, summed) 2.00 h" in text
