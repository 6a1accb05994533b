"""The claims' verdicts and tables (pncnn_jax.experiments.claims): lengths, fusion, spread over seeds, data terms."""





from fake_runs import fake_run


def test_claims_name_unequal_training_lengths():
  """A claim comparing runs trained for different numbers of steps says so (the demo's shipped models mix scales);
  runs of one length, or without a step, get no note. The verdict itself is unchanged."""
  from pncnn_jax.experiments import claims  # pylint: disable=g-import-not-at-top
  runs = {"ncnn": fake_run(650, 2800, 0.3, 0.5, 0.5, 1, 1) | {"step": 1000},
          "ncnn_conf_l1_masked": fake_run(500, 2500, 0.2, 0.9, 0.85, 0.01, 0.2) | {"step": 1000},
          "ncnn_conf_l2_masked": fake_run(600, 2400, 0.6, 0.6, 0.7, 0.2, 0.3) | {"step": 1000},
          "sparse_var_beta_detach_masked": fake_run(510, 2300, 0.04, 0.88, 0.85, 0.2, 1.1) | {"step": 5000}}
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
  from pncnn_jax.experiments import claims  # pylint: disable=g-import-not-at-top
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
  from pncnn_jax.experiments import claims  # pylint: disable=g-import-not-at-top
  from pncnn_jax.experiments.pages import report  # pylint: disable=g-import-not-at-top
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
  from pncnn_jax.experiments import (
    claims,  # pylint: disable=g-import-not-at-top
    evaluate_runs,  # pylint: disable=g-import-not-at-top
  )
  runs = {"ncnn_conf_l1_masked": fake_run(500, 2500, 0.2, 0.9, 0.85, 0.01, 0.2),
          # seed 0: (b) no (within-decile 0.7), (c) no (0.11 > 0.1), (d) yes (+8 %, +4 %)
          "pncnn_masked": fake_run(540, 2600, 0.11, 0.9, 0.7, 0.1, 1.0),
          "pncnn_masked_seed1": fake_run(560, 2600, 0.05, 0.85, 0.82, 0.1, 1.0),   # (b) yes (c) yes (d) no
          "pncnn_masked_seed2": fake_run(520, 2700, 0.09, 0.2, 0.3, 2.0, 1.0),     # (b) no (c) yes (d) yes (+4, +8 %)
          "pncnn_masked_seed3": fake_run(510, 2550, 0.08, 0.81, 0.81, 0.5, 1.0)}   # (b) yes (c) yes (d) yes
  got = {c: (ok, nums) for c, ok, nums in claims.claims(runs, None)}
  b = got["(b) the learned c0 of `pncnn_masked` singles out the disturbed points"]
  c = got[f"(c) `pncnn_masked` AUSE clearly below `ncnn_conf_l1_masked`'s (ratio <= {evaluate_runs.AUSE_RATIO_MAX})"]
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
  runs["pncnn_beta_masked"] = fake_run(505, 2400, 0.12, 0.9, 0.85, 0.05, 1.0)  # (d) yes, (c) no
  assert "over seeds" not in claims.claims(runs, None)[-2][2]
  runs["pncnn_beta_masked_seed1"] = fake_run(600, 2400, 0.09, 0.9, 0.85, 0.05, 1.0)  # (d) no (+20 %), (c) yes
  got = {c: (ok, nums) for c, ok, nums in claims.claims(runs, None)}
  d = got["(d) `pncnn_beta_masked` within 10 % of `ncnn_conf_l1_masked` in MAE and RMSE"]
  c = got["(c) `pncnn_beta_masked` AUSE clearly below `ncnn_conf_l1_masked`'s "
          f"(ratio <= {evaluate_runs.AUSE_RATIO_MAX})"]
  assert d[0] is True and d[1].endswith(
      "over seeds 0-1 of the same recipe it holds for 1 of 2 (table 'Spread over seeds')")
  assert c[0] is False and c[1].endswith("it holds for 1 of 2 (table 'Spread over seeds')")  # no reference seeds
  runs["ncnn_conf_l1_masked_seed1"] = fake_run(500, 2500, 0.3, 0.9, 0.85, 0.01, 0.2)
  runs["ncnn_conf_l1_masked_seed2"] = fake_run(500, 2500, 0.4, 0.9, 0.85, 0.01, 0.2)
  c = {t: n for t, _, n in claims.claims(runs, None)}[
      f"(c) `pncnn_beta_masked` AUSE clearly below `ncnn_conf_l1_masked`'s (ratio <= {evaluate_runs.AUSE_RATIO_MAX})"]
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
  from pncnn_jax.experiments import (
    claims,  # pylint: disable=g-import-not-at-top
    evaluate_runs,  # pylint: disable=g-import-not-at-top
  )
  good, bad = (0.9, 0.85, 0.05, 1.0), (0.3, 0.4, 2.0, 1.0)  # auroc, within deciles, c0 disturbed, clean
  runs = {"ncnn_conf_l1_masked": fake_run(500, 2500, 0.2, *good),
          "ncnn_conf_l1_masked_seed1": fake_run(510, 2500, 0.2, *good),
          "ncnn_conf_l1_masked_seed2": fake_run(520, 2500, 0.2, *bad),
          "laplace_masked": fake_run(550, 2600, 0.06, *good), "laplace_masked_seed1": fake_run(560, 2600, 0.06, *bad),
          "laplace_masked_seed2": fake_run(570, 2600, 0.06, *good),
          "ncnn_conf_l2_masked": fake_run(600, 2400, 0.8, *bad),
          **{n: fake_run(700, 2800, 0.1, *(good if i == 0 else bad))
             for i, n in enumerate(("pncnn_masked", "pncnn_masked_seed1", "pncnn_masked_seed2", "pncnn_masked_seed3"))},
          "pncnn_beta_masked": fake_run(600, 2500, 0.05, *bad),
          "pncnn_beta_masked_seed1": fake_run(620, 2500, 0.05, *bad)}
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
  runs["pncnn_aux_masked"] = fake_run(530, 2500, 0.06, *good)
  lines = claims.data_term_lines(runs)
  assert any(ln.startswith("| `pncnn_aux_masked` (1) | Gaussian NLL + L1 on mu | 2 c (mu - t) + sign(mu - t) | cout | "
                            "0.90 | 0.85 | 1 of 1 | 530 |") for ln in lines)
  assert lines[-3].endswith("in 4 of 6 runs trained on an absolute error, in 1 of 7 runs trained on a squared error "
                            "and in 1 of 1 runs trained on a squared error plus an absolute one (the L1 term on mu).")
  assert lines[-1].startswith("- **(d) and the L1 term on mu.** `pncnn_aux_masked` (mean MAE 530 mm) removes 89 % of")
  assert not any("aux" in c for c, *_ in claims.claims(runs, None))  # in the table only, not in the claim lines
  # Detached runs are counted on their own, not by their data term.
  runs["pncnn_detach_masked"] = fake_run(650, 2500, 0.3, *good)
  lines = claims.data_term_lines(runs)
  assert any(ln.startswith("| `pncnn_detach_masked` (1) | Gaussian NLL (pNCNN) | 2 c (mu - t) | sg(cout) | 0.90 |")
             for ln in lines)
  assert "in 1 of 7 runs trained on a squared error and" in lines[-4]
  assert lines[-3] == ("- **(b) and the variance UNet's gradient.** With the variance UNet's input detached, c0 "
                       "singles out the disturbed points in 1 of 1 runs, and 0 of 1 give it reversed (AUROC < 0.5), "
                       "against 6 of 10 runs whose variance UNet trains c0 through cout.")  # reversed: laplace 1 of 3,
  # pncnn 3 of 4, beta 2 of 2, aux 0 of 1
  # The sparse_var option gets claim lines (b)-(d) once evaluated; (d) at +10.4 % MAE does not hold.
  runs["sparse_var_beta_detach_masked"] = fake_run(552, 2400, 0.05, 0.79, 0.83, 0.49, 1.0)
  got = {c: (ok, n) for c, ok, n in claims.claims(runs, None)}
  b = got["(b) the learned c0 of `sparse_var_beta_detach_masked` singles out the disturbed points"]
  assert b[0] is False and b[1].startswith("AUROC 0.790, within depth deciles 0.830")
  d = got["(d) `sparse_var_beta_detach_masked` within 10 % of `ncnn_conf_l1_masked` in MAE and RMSE"]
  assert d == (False, "MAE 552 vs 500 mm (+10.4 %), RMSE 2400 vs 2500 mm (-4.0 %)")
  assert got[f"(c) `sparse_var_beta_detach_masked` AUSE clearly below `ncnn_conf_l1_masked`'s (ratio <= "
             f"{evaluate_runs.AUSE_RATIO_MAX})"][0] is True  # 0.05 / 0.2
  runs["sparse_var_beta_detach_masked_seed1"] = fake_run(560, 2400, 0.06, *good)
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
