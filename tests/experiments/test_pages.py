"""The results pages (pncnn_jax.experiments.pages.report): the flow section, the scale and longer sections, the
shipped models."""

import json

from pncnn_jax.experiments import runs as runs_lib

from conftest import REPO


def test_results_page_carries_the_flow_claims_and_table(tmp_path):
  """docs/results/RESULTS.md shows the flow experiment's claims, table and figure from RESULTS_FLOW.json beside it."""
  from pncnn_jax.experiments.flow import report as flow_report
  from pncnn_jax.experiments.pages import report

  assert report.flow_section(tmp_path / "RESULTS_FLOW.json") == []  # not run: nothing
  source = REPO / "docs" / "results" / "RESULTS_FLOW.json"
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
  """docs/results/RESULTS.md shows the runs of RESULTS_LONG.json beside it, each cell 'here -> long', and the long
  page's claims on those runs only; another page's figures go to their own folder."""
  from pncnn_jax.experiments.pages import report
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
  from pncnn_jax.experiments.pages import report
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
  assert [r.name for r in runs_lib.select("", "longer")] == ["ncnn_conf_l2", "pncnn_masked", "pncnn_exp"]
  assert runs_lib.select("", "long") == runs_lib.select("") == list(runs_lib.RUNS)
  assert [r.name for r in runs_lib.select("ncnn", "longer")] == ["ncnn"]
  assert all(n in runs_lib.RUNS_BY_NAME for names in runs_lib.SCALE_RUNS.values() for n in names)


def test_longer_page_is_about_its_runs_only(tmp_path):
  """docs/results/RESULTS_LONGER.md: the long page's claims with its runs in place (no 'not measured yet' claims of the
  runs it does not train), each run 5000 -> 10000, how a run was trained when its folder says so, and as not
  included only its own runs not finished; its figures start with the validation curves at both lengths."""
  from pncnn_jax.experiments.pages import figures as pages_figures
  from pncnn_jax.experiments.pages import report
  curve = lambda n, lo: [[s, lo + 1000 * 250 / s, lo / 4 + 100 * 250 / s] for s in range(250, n + 1, 250)]  # noqa
  short = lambda r, n, lo: r | {"step": n, "convergence": r["convergence"] | {"val_curve": curve(n, lo)}}  # noqa
  long = {"scale": "long", "date": "2026-11-27", "commit": "0123456789abcdef", "recipe": runs_lib.SCALES["long"],
          "runs": {"ncnn_conf_l1_masked": short(_table_run(500, 2600, 0.5, 0.1, 0.9, True), 5000, 2500),
                   "pncnn_masked": short(_table_run(700, 3000, 0.07, 0.2, 0.6, False), 5000, 2900),
                   "ncnn_conf_l2": short(_table_run(660, 2320, 0.56, 0.1, 0.8, False), 5000, 2200)}}
  (tmp_path / "RESULTS_LONG.json").write_text(json.dumps(long))
  runs = {"pncnn_masked": short(_table_run(540, 2700, 0.06, 0.1, 0.85, True), 10000, 2600)
          | {"trained_by": "Resumed from the long run's step-3500 checkpoint."},
          "ncnn_conf_l2": short(_table_run(600, 2250, 0.5, 0.1, 0.82, True), 10000, 2100)}
  summary = {"scale": "longer", "recipe": runs_lib.SCALES["longer"], "runs": runs, "fusion": None, "date": "2026-11-28",
             "commit": "fedcba9876543210", "jax": "0.12", "devices": ["cpu:0"], "scenes": "96 held-out test scenes",
             "not_finished": ["pncnn_exp"]}
  # a pair whose other run has no validation curve: nothing drawn
  assert pages_figures.val_curves([("x", runs["pncnn_masked"], {})], tmp_path, (4000, 8000), ("a", "b")) == []
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
  from pncnn_jax.experiments.pages import report
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
  assert runs_lib.describe_scales(["a"], root=tmp_path) == "`cpu` scale, 1000 steps: `a`"  # the demo's subset
  assert runs_lib.describe_scales(["c", "b"], root=tmp_path) == ("`cpu` scale, 1000 steps: `b`; "
                                                                   "`long` scale, 5000 steps: `c`")
