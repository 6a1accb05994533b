"""The results pages' explanations (pages.why, pages.distance): learning rate, clipping, the official NCNN-Conf,
the leak, the discussion, the variance-UNet ablation, where the error lies."""



from fake_runs import fake_run

from pncnn_jax.experiments import runs as runs_lib


def test_learning_rate_lines_compare_each_recipe_at_both_lrs(tmp_path):
  """The lower-lr runs beside the same recipes at the scale's lr: the table (every finished seed), and (d) and (b) for
  pNCNN at the lower lr against both references, by the claims' own thresholds; worked by hand. The figure of their
  validation curves is drawn when both runs of a pair have one."""
  from pncnn_jax.experiments.pages import report  # pylint: disable=g-import-not-at-top
  from pncnn_jax.experiments.pages import why as pages_why  # pylint: disable=g-import-not-at-top
  good, bad = (0.9, 0.85, 0.05, 1.0), (0.3, 0.4, 2.0, 1.0)  # auroc, within deciles, c0 disturbed, clean
  flat = {"convergence": {"flat": True, "rmse_change_last_30pct": 0.01}}
  runs = {"pncnn_masked": fake_run(700, 2800, 0.1, *bad),
          "pncnn_masked_seed1": fake_run(750, 2900, 0.1, *bad) | {"convergence": None},  # carried: no curve
          "ncnn_conf_l1_masked": fake_run(500, 2500, 0.2, *good) | flat}
  assert pages_why.learning_rate_lines(runs, 0.01) == []  # no lower-lr run yet
  runs["pncnn_masked_lr3e-3"] = fake_run(540, 2600, 0.06, *good) | {
      "convergence": {"flat": False, "rmse_change_last_30pct": -0.05}}
  lines = pages_why.learning_rate_lines(runs, 0.01)
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
  runs["ncnn_conf_l1_masked_lr3e-3"] = fake_run(480, 2500, 0.2, *good)
  lines = pages_why.learning_rate_lines(runs, 0.01)
  assert [ln.split(" | ")[0] for ln in lines if ln.startswith("| `")][-1] == "| `ncnn_conf_l1_masked_lr3e-3` (1)"
  assert ("against `ncnn_conf_l1_masked` (lr 0.01): (d) holds; MAE +12.5 % / RMSE +4.0 % against "
          "`ncnn_conf_l1_masked_lr3e-3` (lr 0.003): (d) does not hold; at lr 0.01") in lines[-1]
  # A second seed at the lower lr: (b) and (d) over both seeds; 600 / 500 = +20.0 %.
  runs["pncnn_masked_lr3e-3_seed1"] = fake_run(600, 2700, 0.06, *bad)
  lines = pages_why.learning_rate_lines(runs, 0.01)
  assert lines[-1].endswith("mean c0 disturbed / clean 0.05. Over its seeds 0-1: (b) holds for 1 of 2 (AUROC 0.90, "
                            "0.30); MAE +8.0 %, +20.0 % against `ncnn_conf_l1_masked`.")
  del runs["pncnn_masked_lr3e-3_seed1"]
  recipe = runs_lib.SCALES["long"]
  assert report.lr_curves(runs, recipe, tmp_path) == []  # pncnn_masked has no validation curve
  runs["pncnn_masked"]["convergence"] = {"val_curve": [[250, 3000.0, 800.0], [500, 2800.0, 700.0]]}
  runs["pncnn_masked_lr3e-3"]["convergence"]["val_curve"] = [[250, 2900.0, 700.0], [500, 2600.0, 550.0]]
  (name, caption), = report.lr_curves(runs, recipe, tmp_path)
  assert name == "lr_curves.png" and (tmp_path / name).stat().st_size > 10_000
  assert caption.startswith("Validation RMSE and MAE of the runs trained at a lower learning rate beside the same "
                            "recipe: lr 0.01 (dashed) and lr 0.003 (solid)")


def test_grad_clip_lines_count_claims_b_and_d_over_the_clipped_seeds():
  """The clipped runs beside the same recipe unclipped and the (d) reference, every finished seed; worked by hand."""
  from pncnn_jax.experiments.pages import why as pages_why  # pylint: disable=g-import-not-at-top
  good, bad = (0.9, 0.85, 0.05, 1.0), (0.3, 0.4, 2.0, 1.0)  # auroc, within deciles, c0 disturbed, clean
  flat = {"convergence": {"flat": True, "rmse_change_last_30pct": 0.01}}
  runs = {"pncnn_masked": fake_run(700, 2800, 0.1, *bad), "pncnn_masked_seed1": fake_run(750, 2900, 0.1, *bad),
          "ncnn_conf_l1_masked": fake_run(500, 2500, 0.2, *good) | flat}
  assert pages_why.grad_clip_lines(runs) == []  # no clipped run yet
  runs["pncnn_masked_clip10"] = fake_run(540, 2600, 0.06, *good) | flat
  lines = pages_why.grad_clip_lines(runs)
  assert [ln for ln in lines if ln.startswith("| `")] == [
      "| `pncnn_masked` (2) | none | 0.30, 0.30 | 0.40, 0.40 | 0 of 2 | 700, 750 | 2800, 2900 | 0.100, 0.100 | "
      "n/a, n/a |",
      "| `pncnn_masked_clip10` (1) | 10 | 0.90 | 0.85 | 1 of 1 | 540 | 2600 | 0.060 | yes |",
      "| `ncnn_conf_l1_masked` (1) | none | 0.90 | 0.85 | 1 of 1 | 500 | 2500 | 0.200 | yes |"]
  # 540 / 500 = +8.0 % and 2600 / 2500 = +4.0 %: within 10 %, (d) holds
  assert lines[-1] == ("- **(b) and clipping.** (b) holds for 1 of 1 clipped (seed 0; AUROC 0.90) against 0 of 2 "
                       "unclipped (seeds 0-1; AUROC 0.30, 0.30). Clipped, MAE +8.0 % against `ncnn_conf_l1_masked`: "
                       "(d) holds for 1 of 1.")
  runs["pncnn_masked_clip10_seed1"] = fake_run(600, 2700, 0.06, *bad)  # 600 / 500 = +20.0 %: (d) does not hold
  assert pages_why.grad_clip_lines(runs)[-1] == (
      "- **(b) and clipping.** (b) holds for 1 of 2 clipped (seeds 0-1; AUROC 0.90, 0.30) against 0 of 2 unclipped "
      "(seeds 0-1; AUROC 0.30, 0.30). Clipped, MAE +8.0 %, +20.0 % against `ncnn_conf_l1_masked`: (d) holds for 1 "
      "of 2.")


def test_why_section_explains_the_official_ncnn_conf_without_pncnn():
  """The 'why the official network fails' section speaks of the official NCNN-Conf runs (claim (a)) from their own
  numbers, also on a page without the pNCNN pair (the long page)."""
  from pncnn_jax.experiments.pages import why as pages_why  # pylint: disable=g-import-not-at-top
  c0 = {"c0_mean_empty": 0.0022, "empty_weight_share": 0.026, "c0_mean_clean": 0.915, "c0_mean_disturbed": 0.953,
        "auroc": 0.377, "auroc_depth_bins": 0.286}
  runs = {"ncnn": {"metrics": {"mae": 600.0, "rmse": 3000.0}},
          "ncnn_conf_l1": {"step": 5000, "metrics": {"mae": 525.0, "rmse": 3300.0}, "c0": c0}}
  text = pages_why.why(runs)
  assert text.startswith("The official NCNN-Conf has the same extra task")
  assert ("`ncnn_conf_l1` (5000 steps) gives the empty pixels mean c0 0.0022, 2.6 % of the input confidence NConv "
          "receives; its MAE / RMSE are 525 / 3300 mm (-12.5 % / +10.0 % against NCNN)") in text
  assert "0.915 on clean and 0.953 on disturbed points (AUROC 0.38, 0.29 within depth deciles)." in text
  assert "pncnn" not in text
  assert pages_why.why({"ncnn": runs["ncnn"]}).startswith("Needs the")


def test_why_section_says_when_the_leak_no_longer_explains_a_reversed_c0():
  """The official pNCNN's reversed c0 is put down to the empty pixels' leak only while that leak is open."""
  from pncnn_jax.experiments.pages import why as pages_why  # pylint: disable=g-import-not-at-top
  def run(share, disturbed, step):
    c0 = {"c0_mean_empty": 0.01, "empty_weight_share": share, "c0_mean_clean": 8.25, "c0_mean_disturbed": disturbed,
          "auroc": 0.18, "auroc_depth_bins": 0.32, "empty_fraction": 0.92, "mean_depth_disturbed_m": 49.0,
          "mean_depth_clean_m": 27.0, "c0_depth_rank_corr_clean": 0.75}
    return {"step": step, "metrics": {"mae": 815.0, "rmse": 3141.0}, "c0": c0}
  masked = run(0.0, 0.17, 5000) | {"c0": run(0.0, 0.17, 5000)["c0"] | {"c0_mean_clean": 1.1, "auroc": 0.91}}
  closed = pages_why.why_pncnn({"pncnn": run(0.0049, 12.6, 5000), "pncnn_masked": masked})
  assert "The empty pixels hold 0.49 % of all the input confidence" in closed
  assert "At 5000 steps the leak is nearly closed, yet c0 stays higher on the disturbed points, so" in closed
  open_ = pages_why.why_pncnn({"pncnn": run(0.22, 13.8, 1000), "pncnn_masked": masked})
  assert "The empty pixels hold 22 % of all" in open_ and "leak is nearly closed" not in open_
  assert "leak is nearly closed" not in pages_why.why_pncnn({"pncnn": run(0.0049, 4.0, 5000), "pncnn_masked": masked})


def test_discussion_follows_the_numbers_it_quotes():
  """The discussion's (b) and (c) paragraphs say 'better'/'worse' and 'less'/'no less' as their numbers read, and
  give the seed range only when every seed of the recipe is there."""
  from pncnn_jax.experiments.pages import why as pages_why  # pylint: disable=g-import-not-at-top
  def run(ause, auroc, bins):
    return {"uncertainty": {"ause_pncnn": ause}, "metrics": {"mae": 1.0, "rmse": 1.0},
            "c0": {"auroc": auroc, "auroc_depth_bins": bins, "c0_mean_clean": 0.9, "c0_mean_disturbed": 0.95}}
  runs = {"pncnn_masked": run(0.08, 0.91, 0.86), "ncnn_conf_l1_masked": run(0.51, 0.90, 0.84),
          "ncnn_conf_l1": run(0.33, 0.38, 0.29)}
  text = "\n".join(pages_why.discussion(runs))
  assert "AUSE 0.510 (worse than 0.330 for the official `ncnn_conf_l1`)" in text
  assert "separates the disturbed points no less sharply than NCNN-Conf's" in text and "ranges from" not in text
  runs["ncnn_conf_l1_masked"] = run(0.2, 0.92, 0.87)
  runs |= {f"pncnn_masked_seed{k}": run(0.1, a, 0.7) for k, a in ((1, 0.18), (2, 0.5), (3, 0.6))}
  text = "\n".join(pages_why.discussion(runs))
  assert "AUSE 0.200 (better than 0.330" in text and "separates the disturbed points less sharply" in text
  assert "over seeds 0-3 its AUROC ranges from 0.18 to 0.91" in text


def test_the_variance_unet_ablation_is_read_against_every_pncnn_seed():
  """The no_var_est paragraph gives (b) and (d) by the claims' own criteria and says the ablation supports the cause
  only when its c0 is more selective and its depth more accurate than in every pNCNN seed."""
  from pncnn_jax.experiments import claims  # pylint: disable=g-import-not-at-top
  ref = fake_run(500.0, 2600.0, 0.5, 0.9, 0.84, 0.01, 1.0)
  runs = {"ncnn_conf_l1_masked": ref, "pncnn_masked": fake_run(700.0, 3000.0, 0.07, 0.6, 0.6, 1.2, 1.5),
          "pncnn_masked_seed1": fake_run(750.0, 2860.0, 0.06, 0.81, 0.72, 0.3, 0.7)}
  assert claims.variance_unet_lines(runs) == []  # no ablation run: no paragraph
  runs["no_var_est_masked"] = fake_run(570.0, 2450.0, 0.056, 0.9, 0.78, 8.0, 1280.0)
  (text,) = claims.variance_unet_lines(runs)
  assert ("(b) does not hold and (d) does not hold: c0 AUROC 0.90 (0.78 within depth deciles), MAE +14.0 % and RMSE "
          "-5.8 % against `ncnn_conf_l1_masked`, AUSE 0.056; `pncnn_masked` over seeds 0-1: AUROC 0.60 to 0.81, MAE "
          "+40.0 % to +50.0 %, AUSE 0.060 to 0.070.") in text
  assert text.endswith("what the cause above predicts.")
  runs["laplace_masked"] = fake_run(690.0, 2900.0, 0.08, 0.7, 0.6, 1.0, 1.0)  # keeps the path, beats no seed
  assert claims.variance_unet_lines(runs)[0] == text
  runs["depth_pred_masked"] = fake_run(600.0, 2550.0, 0.04, 0.9, 0.76, 1.3, 4.4)  # keeps the path, beats them all
  assert claims.variance_unet_lines(runs)[0].endswith(
      "but so is `depth_pred_masked` (AUROC 0.90, MAE +20.0 %), which keeps that path: with one seed per run, a draw "
      "moves c0 as far as removing the path does (the pNCNN seeds' spread above), so this ablation does not single out "
      "the cause above.")
  runs["laplace_masked"] = fake_run(560.0, 2800.0, 0.08, 0.92, 0.85, 0.07, 0.9)
  assert "but so are `depth_pred_masked` (AUROC 0.90, MAE +20.0 %) and `laplace_masked` (AUROC 0.92, MAE +12.0 %), " \
         "which keep that path" in claims.variance_unet_lines(runs)[0]
  del runs["depth_pred_masked"], runs["laplace_masked"]
  runs["pncnn_masked_seed1"] = fake_run(540.0, 2500.0, 0.06, 0.95, 0.9, 0.1, 0.7)  # a seed at least as good
  assert claims.variance_unet_lines(runs)[0].endswith("so this ablation does not single out the cause above.")
  runs["no_var_est_masked"] = fake_run(520.0, 2500.0, 0.05, 0.96, 0.85, 0.1, 1.0)  # (b) and (d) by their criteria
  text = claims.variance_unet_lines(runs)[0]
  assert "(b) holds and (d) holds" in text and text.endswith("what the cause above predicts.")


def test_where_the_error_lies_splits_claim_d_gaps_over_the_bins():
  from pncnn_jax.experiments.pages import distance as pages_distance

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
  text = "\n".join(pages_distance.lines(runs, ("ncnn", "ncnn_conf_l1", "pncnn", "pncnn_exp")))
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
  assert pages_distance.lines({"ncnn": {"metrics": {}}}, ("ncnn",)) == []
  assert pages_distance.gap_sentence(runs, "pncnn", "ncnn_conf_l1") == (
      " Measured here (section 'Where the error lies'): `pncnn`'s pooled MAE is +355 mm against `ncnn_conf_l1`'s, "
      "+350 mm of it within 20 px of a disturbed point (+5 mm beyond), and +345 mm (97 %) remain with the disturbed "
      "points deleted from both inputs: mostly the depth network's, in the places where disturbances happen, not how "
      "c0 weighs the disturbed points.")
  assert pages_distance.gap_sentence(runs, "pncnn_exp", "ncnn_conf_l1") == ""  # no deleted pass, no sentence
