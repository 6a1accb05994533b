"""The paper's claims (a)-(e) checked on the reproduction's runs, and the spread of one recipe over seeds.

Each claim is checked against a threshold fixed in `pncnn_jax.experiments.evaluate_runs` before any result was seen; a
claim that does not hold is written as not holding, with its numbers (docs/results/RESULTS.md).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pncnn_jax import losses
from pncnn_jax.experiments import evaluate_runs
from pncnn_jax.experiments import runs as runs_lib
from pncnn_jax.runtime.run_files import format_value as fmt

# Our options beyond the paper's models: their claim lines appear only when they were evaluated (the demo, e.g.,
# shows a subset of the runs), never as "not measured yet".
# The other options are compared in the objective table only (`data_term_lines`).
# The sensor-robust models (runs.SENSOR_RUNS, seed 0 of each recipe: from scratch, fine-tuned), whose claims
# docs/results/SENSORS.md states (experiments.sensors).
SENSOR_ROBUST = ("sparse_var_beta_detach_masked_lidar_mix", "sparse_var_beta_detach_masked_lidar_mix_ft")
OPTIONAL = ("pncnn_beta_masked", "laplace_masked", "sparse_var_beta_detach_masked", *SENSOR_ROBUST)
# Claim (d)'s pairs: (probabilistic model, the NCNN-Conf it must stay close to in accuracy).
D_PAIRS = (("pncnn_masked", "ncnn_conf_l1_masked"), ("pncnn_exp_masked", "ncnn_conf_l1_masked"),
           ("pncnn", "ncnn_conf_l1"), ("pncnn_exp", "ncnn_conf_l1"), ("pncnn_beta_masked", "ncnn_conf_l1_masked"),
           ("sparse_var_beta_detach_masked", "ncnn_conf_l1_masked"),
           *((name, "ncnn_conf_l1_masked") for name in SENSOR_ROBUST))


def claims(runs: dict[str, Any], fusion: dict[str, Any] | None) -> list[tuple[str, bool | None, str]]:
  """(claim, holds (None: not measured yet), the numbers or what is missing ('' if nothing to add)) for (a)-(e)."""
  out: list[tuple[str, bool | None, str]] = []

  def have(*names):
    return all(n in runs for n in names)

  m = lambda n, k: runs[n]["metrics"][k]
  for forms in (("ncnn_conf_l1_masked", "ncnn_conf_l2_masked"), ("ncnn_conf_l1", "ncnn_conf_l2")):
    label = "masked c0" if forms[0].endswith("masked") else "official network"
    if have("ncnn", *forms):
      misses = [f"{f} {k.upper()} {100 * (m(f, k) / m('ncnn', k) - 1):+.1f} %" for f in forms for k in ("mae", "rmse")
                if not m(f, k) < m("ncnn", k)]
      nums = "; ".join(f"{f}: MAE {m(f, 'mae'):.0f} / RMSE {m(f, 'rmse'):.0f} mm" for f in forms)
      out.append((f"(a) NCNN-Conf (L1 and L2, {label}) beats NCNN in MAE and RMSE", not misses,
                  f"NCNN: MAE {m('ncnn', 'mae'):.0f} / RMSE {m('ncnn', 'rmse'):.0f} mm; {nums}"
                  + (f" (not below NCNN: {', '.join(misses)})" if misses else "")
                  + _lengths_note(runs, "ncnn", *forms)))
    else:
      out.append((f"(a) NCNN-Conf (L1 and L2, {label}) beats NCNN in MAE and RMSE", None,
                  f"It needs {', '.join(('ncnn',) + forms)}"))
  for name in ("ncnn_conf_l1_masked", "pncnn_masked", "ncnn_conf_l1", "pncnn", "pncnn_beta_masked", "laplace_masked",
               "sparse_var_beta_detach_masked", *SENSOR_ROBUST):
    title = f"(b) the learned c0 of `{name}` singles out the disturbed points"
    if name not in runs:
      if name not in OPTIONAL:
        out.append((title, None, ""))
      continue
    c = runs[name]["c0"]
    out.append((title, evaluate_runs.c0_singles_out(c),
                f"AUROC {c['auroc']:.3f}, within depth deciles {c['auroc_depth_bins']:.3f} (aim >= "
                f"{evaluate_runs.AUROC_AIM}); mean c0 disturbed {c['c0_mean_disturbed']:.3g} vs clean "
                f"{c['c0_mean_clean']:.3g} (ratio {c['c0_mean_disturbed'] / c['c0_mean_clean']:.2f}, aim <= "
                f"{evaluate_runs.C0_RATIO_MAX})" + _seeds_note(runs, name,
                                                               lambda r: evaluate_runs.c0_singles_out(r["c0"]))))
  for p, conf in (("pncnn_masked", "ncnn_conf_l1_masked"), ("pncnn", "ncnn_conf_l1"),
                  ("pncnn_beta_masked", "ncnn_conf_l1_masked"),
                  ("sparse_var_beta_detach_masked", "ncnn_conf_l1_masked"),
                  *((name, "ncnn_conf_l1_masked") for name in SENSOR_ROBUST)):
    title = f"(c) `{p}` AUSE clearly below `{conf}`'s (ratio <= {evaluate_runs.AUSE_RATIO_MAX})"
    if have(p, conf):
      a, b = runs[p]["uncertainty"]["ause_pncnn"], runs[conf]["uncertainty"]["ause_pncnn"]
      out.append((title, evaluate_runs.ause_clearly_below(a, b), f"AUSE (pNCNN def.) {a:.3f} vs {b:.3f} (ratio "
                  f"{a / b:.2f}); the paper: 0.05 vs 0.31 on KITTI" + _seeds_note(
                      runs, p, lambda r: evaluate_runs.ause_clearly_below(r["uncertainty"]["ause_pncnn"], b))
                  + _group_means_note(runs, p, conf, lambda r: r["uncertainty"]["ause_pncnn"])
                  + _lengths_note(runs, p, conf)))
    elif p not in OPTIONAL:
      out.append((title, None, ""))
  for p, conf in D_PAIRS:
    title = f"(d) `{p}` within {100 * evaluate_runs.ACCURACY_TOLERANCE:.0f} % of `{conf}` in MAE and RMSE"
    if have(p, conf):
      rel = {k: m(p, k) / m(conf, k) - 1 for k in ("mae", "rmse")}
      ref = runs[conf]["metrics"]
      out.append((title, evaluate_runs.accuracy_close(runs[p]["metrics"], ref),
                  f"MAE {m(p, 'mae'):.0f} vs {m(conf, 'mae'):.0f} mm ({100 * rel['mae']:+.1f} %), RMSE "
                  f"{m(p, 'rmse'):.0f} vs {m(conf, 'rmse'):.0f} mm ({100 * rel['rmse']:+.1f} %)"
                  + _seeds_note(runs, p, lambda r: evaluate_runs.accuracy_close(r["metrics"], ref))
                  + _lengths_note(runs, p, conf)))
    elif p not in OPTIONAL:
      out.append((title, None, ""))
  title = "(e) confidence-based fusion beats the plain mean (4-member pNCNN ensemble, RMSE)"
  if fusion:
    rows = fusion["rows"]
    best = min(("weighted_mean", "max_confidence", "mle"), key=lambda r: rows[r]["rmse"])
    out.append((title, rows[best]["rmse"] < rows["mean"]["rmse"],
                "RMSE [mm]: " + ", ".join(f"{r} {rows[r]['rmse']:.0f}" for r in
                                          ("mean", "weighted_mean", "max_confidence", "mle"))
                + _steps_note(fusion.get("steps") or {})))  # the demo's shipped members: each one's steps
  else:
    out.append((title, None, "It needs the four ensemble runs"))
  return out


def done_group(runs: dict[str, Any], name: str) -> tuple[str, ...]:
  """The finished runs of `name`'s recipe over its seeds (runs.SEED_GROUPS), in seed order, when its seed-0 run and
  at least one other are in `runs`; () otherwise. A group is quoted with the seeds it has (`seed_list`): a retrained
  run is another draw (docs/reproducing/findings.md), so two seeds say more than one."""
  group = tuple(n for n in runs_lib.SEED_GROUPS.get(name, ()) if n in runs)
  return group if len(group) >= 2 and group[0] == name else ()


def _lengths_note(runs: dict[str, Any], *names: str) -> str:
  """'; unequal training lengths: `a` 5000 steps, `b` 1000' when the compared runs were trained for different numbers
  of steps (the demo's shipped models can mix scales; a reproduction page never does), else ''."""
  return _steps_note({n: runs[n].get("step") for n in names})


def _steps_note(steps: dict[str, Any]) -> str:
  """_lengths_note of {run: its training steps}."""
  if None in steps.values() or len(set(steps.values())) < 2:
    return ""
  return "; unequal training lengths: " + ", ".join(f"`{n}` {s} steps" for n, s in steps.items())


def seed_list(names: tuple[str, ...]) -> str:
  """'seed 0', 'seeds 0-3' or 'seeds 0, 2': the seeds of the named runs."""
  seeds = sorted(runs_lib.RUNS_BY_NAME[n].seed for n in names)
  if len(seeds) == 1:
    return f"seed {seeds[0]}"
  return f"seeds {seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else (
      "seeds " + ", ".join(map(str, seeds)))


def _seeds_note(runs: dict[str, Any], name: str, holds) -> str:
  """'; over seeds 0-3 … it holds for k of 4' where `name` keys a runs.SEED_GROUPS group with seeds done
  (done_group)."""
  group = done_group(runs, name)
  if not group:
    return ""
  k = sum(bool(holds(runs[n])) for n in group)
  return (f"; over {seed_list(group)} of the same recipe it holds for {k} of {len(group)} "
          "(table 'Spread over seeds')")


def _seed_columns(runs: dict[str, Any], group: tuple[str, ...]) -> dict[str, list[float]]:
  m, u, c = ([runs[n][k] for n in group] for k in ("metrics", "uncertainty", "c0"))
  return {"MAE [mm]": [x["mae"] for x in m], "RMSE [mm]": [x["rmse"] for x in m],
          "AUSE (pNCNN)": [x["ause_pncnn"] for x in u], "AUROC c0": [x["auroc"] for x in c],
          "same, within depth deciles": [x["auroc_depth_bins"] for x in c],
          "c0 disturbed / clean": [x["c0_mean_disturbed"] / x["c0_mean_clean"] for x in c]}


def _group_means_note(runs: dict[str, Any], name: str, ref: str, value) -> str:
  """'; means over seeds: a vs b (ratio)' when both runs key runs.SEED_GROUPS groups with seeds done (done_group)."""
  groups = [done_group(runs, n) for n in (name, ref)]
  if not all(groups):
    return ""
  a, b = (float(np.mean([value(runs[n]) for n in g])) for g in groups)
  return (f"; means over {seed_list(groups[0])} and {seed_list(groups[1])}: {a:.3f} vs {b:.3f} "
          f"(ratio {a / b:.2f})")


def seed_lines(runs: dict[str, Any]) -> list[str]:
  """Each recipe of runs.SEED_GROUPS over its finished seeds (done_group): the spread one run carries."""
  groups = {k: g for k in runs_lib.SEED_GROUPS if (g := done_group(runs, k))}
  if not groups:
    return []
  cols = {k: _seed_columns(runs, g) for k, g in groups.items()}
  names = list(next(iter(cols.values())))
  lines = ["", "## Spread over seeds (masked c0: each recipe over its seeds)", "",
           "Runs of one recipe that differ only in the initialisation and data seed; the claims above use seed 0 "
           "(`" + "`, `".join(groups) + "`). This is how far one run's figures move with the seed.",
           "", "| run | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
  digits = [4, 4, 3, 3, 3, 3]  # mm to the unit, the rest to 3 significant digits
  for key, group in groups.items():
    lines += [f"| `{n}` | " + " | ".join(fmt(v[i], d) for v, d in zip(cols[key].values(), digits)) + " |"
              for i, n in enumerate(group)]
    lines.append(f"| `{key}` {seed_list(group)}: mean (sd) | " + " | ".join(
        f"{fmt(float(np.mean(v)), d)} ({fmt(float(np.std(v, ddof=1)), 3)})" for v, d in zip(cols[key].values(), digits))
        + " |")
  ref = "ncnn_conf_l1_masked"
  for key, group in groups.items():
    auroc, ause = cols[key]["AUROC c0"], cols[key]["AUSE (pNCNN)"]
    text = (f"\n`{key}`, {seed_list(group)}: the AUROC of c0 spans {min(auroc):.2f}-{max(auroc):.2f} "
            f"({sum(a < 0.5 for a in auroc)} of {len(auroc)} below 0.5, i.e. with a c0 that trusts the disturbed "
            "points more than the clean ones); "
            f"AUSE spans {min(ause):.3f}-{max(ause):.3f}")
    if key != ref and ref in groups:
      r = cols[ref]["AUSE (pNCNN)"]
      text += f" against {min(r):.3f}-{max(r):.3f} for `{ref}` ({seed_list(groups[ref])})"
    elif key != ref and ref in runs:
      text += f" against {runs[ref]['uncertainty']['ause_pncnn']:.3f} for `{ref}` (one run, seed 0)"
    lines.append(text + ".")
  return lines


class Term(NamedTuple):
  """One recipe of claim (b)'s comparison: its seed-0 run (with all the seeds of runs.SEED_GROUPS), its data term,
  the gradient that gives the prediction mu at one pixel (c = the predicted precision or inverse Laplace scale),
  the kind of error it is made of, what the variance UNet sees (sg = stop-gradient; '-' = no variance UNet) and,
  for our options, what they change against the plain NLL (the share of the MAE gap they remove, claim (d))."""
  run: str
  data_term: str
  grad: str
  kind: str  # 'absolute' | 'squared' | 'both'
  var_input: str
  gap_cause: str = ""

  @property
  def detached(self) -> bool:
    return self.var_input.startswith("sg(")


_W = f"{losses.AUX_L1_WEIGHT:g} " if losses.AUX_L1_WEIGHT != 1 else ""
_BETA = (f"Gaussian NLL, beta-NLL weights, beta = {losses.NLL_BETA}", f"2 c^{1 - losses.NLL_BETA:g} (mu - t)")
DATA_TERMS = (
    Term("ncnn_conf_l1_masked", "L1 (NCNN-Conf-L1)", "sign(mu - t)", "absolute", "-"),
    Term("laplace_masked", "Laplace NLL", "c sign(mu - t)", "absolute", "cout"),
    Term("ncnn_conf_l2_masked", "L2 (NCNN-Conf-L2)", "2 (mu - t)", "squared", "-"),
    Term("pncnn_beta1_masked", "Gaussian NLL, beta-NLL weights, beta = 1", "2 (mu - t)", "squared", "cout",
         "the NLL's precision weighting"),
    Term("pncnn_beta_masked", *_BETA, "squared", "cout", "the NLL's precision weighting"),
    Term("pncnn_masked", "Gaussian NLL (pNCNN)", "2 c (mu - t)", "squared", "cout"),
    Term("pncnn_aux_masked", f"Gaussian NLL + {_W}L1 on mu", f"2 c (mu - t) + {_W}sign(mu - t)", "both", "cout",
         "the L1 term on mu"),
    Term("pncnn_beta_aux_masked", f"{_BETA[0]}, + {_W}L1 on mu", f"{_BETA[1]} + {_W}sign(mu - t)", "both", "cout",
         "the beta-NLL weights and the L1 term"),
    Term("pncnn_detach_masked", "Gaussian NLL (pNCNN)", "2 c (mu - t)", "squared", "sg(cout)"),
    Term("pncnn_beta_detach_masked", *_BETA, "squared", "sg(cout)",
         "the beta-NLL weights with the variance UNet detached"),
    Term("sparse_var_beta_detach_masked", *_BETA, "squared", "sg([cout, x])",
         "the beta-NLL weights with the variance UNet detached"),
    Term("sparse_var_laplace_detach_masked", "Laplace NLL", "c sign(mu - t)", "absolute", "sg([cout, x])",
         "the Laplace NLL with the variance UNet detached"),
)
_KINDS = (("absolute", "an absolute error"), ("squared", "a squared error"),
          ("both", "a squared error plus an absolute one (the L1 term on mu)"))


SEED_COLUMNS = "AUROC c0 | same, within depth deciles | (b) holds | MAE [mm] | RMSE [mm] | AUSE (pNCNN)"


def b_count(rs: list[dict[str, Any]]) -> str:
  """'k of n': for how many of the results rows `rs` claim (b) holds (results.c0_singles_out)."""
  return f"{sum(bool(evaluate_runs.c0_singles_out(r['c0'])) for r in rs)} of {len(rs)}"


def seed_cells(rs: list[dict[str, Any]]) -> str:
  """A recipe's SEED_COLUMNS cells over its finished seeds `rs` (results rows): each value per seed, comma-separated,
  and for how many of them claim (b) holds."""
  per_seed = lambda f, d: ", ".join(f"{f(r):.{d}f}" for r in rs)  # noqa: E731  (d decimals)
  return " | ".join([per_seed(lambda r: r["c0"]["auroc"], 2), per_seed(lambda r: r["c0"]["auroc_depth_bins"], 2),
                     b_count(rs),
                     per_seed(lambda r: r["metrics"]["mae"], 0), per_seed(lambda r: r["metrics"]["rmse"], 0),
                     per_seed(lambda r: r["uncertainty"]["ause_pncnn"], 3)])


def data_term_lines(runs: dict[str, Any]) -> list[str]:
  """Claims (b) and (d) against the objective each masked-c0 model is trained with (its data term, and whether the
  variance UNet's gradient reaches NConv and c0), over all seeds of each recipe."""
  groups = {t.run: tuple(n for n in runs_lib.SEED_GROUPS.get(t.run, (t.run,)) if n in runs) for t in DATA_TERMS}
  rows = [(t, [runs[n] for n in groups[t.run]]) for t in DATA_TERMS if groups[t.run]]
  if len(rows) < 2:
    return []
  lines = ["",
           "**What the training objective does to c0 and to accuracy** (masked c0; every finished seed of each recipe; "
           f"claim (b) needs AUROC and the within-decile AUROC >= {evaluate_runs.AUROC_AIM} and c0 disturbed / "
           f"clean <= {evaluate_runs.C0_RATIO_MAX}; sg = stop-gradient: the variance UNet's loss no longer trains "
           "NConv and c0):", "",
           f"| run (seeds) | data term | its gradient on mu | variance UNet sees | {SEED_COLUMNS} |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for t, rs in rows:
    lines.append(f"| `{t.run}` ({len(rs)}) | {t.data_term} | {t.grad} | {t.var_input} | {seed_cells(rs)} |")
  counts = []
  for kind, words in _KINDS:
    rs = [r for t, group in rows if t.kind == kind and not t.detached for r in group]
    if rs:
      counts.append(f"in {b_count(rs)} runs trained on {words}")
  detached = [r for t, group in rows if t.detached for r in group]
  lines += ["", "- **(b) and the data term.** c0 singles out the disturbed points " + ", ".join(counts[:-1])
            + (" and " if len(counts) > 1 else "") + counts[-1] + "."]
  if detached:
    reversed_ = lambda rs: sum(r["c0"]["auroc"] < 0.5 for r in rs)
    open_ = [r for t, group in rows if t.var_input == "cout" for r in group]
    lines.append(f"- **(b) and the variance UNet's gradient.** With the variance UNet's input detached, c0 singles "
                 f"out the disturbed points in {b_count(detached)} runs, and {reversed_(detached)} of {len(detached)} "
                 "give it reversed (AUROC < 0.5)"
                 + (f", against {reversed_(open_)} of {len(open_)} runs whose variance UNet trains c0 through cout."
                    if open_ else "."))
    ause = {t.run: [r["uncertainty"]["ause_pncnn"] for r in rs] for t, rs in rows}
    have = [k for k in ("pncnn_beta_masked", "pncnn_beta_detach_masked", "sparse_var_beta_detach_masked") if k in ause]
    if len(have) > 1:
      lines.append("- **(c) and the detached variance UNet.** AUSE (pNCNN) " + "; ".join(
          f"`{k}` {', '.join(f'{v:.3f}' for v in ause[k])}" for k in have) + ". Detached, a variance UNet that sees "
          "only cout loses what c0 told it about the errors; one that also sees the sparse input finds the "
          "disturbed points itself.")
  mae = {t.run: float(np.mean([r["metrics"]["mae"] for r in rs])) for t, rs in rows}
  if {"pncnn_masked", "ncnn_conf_l1_masked"} <= set(mae):
    gap = mae["pncnn_masked"] - mae["ncnn_conf_l1_masked"]
    for t in DATA_TERMS:
      k = t.run
      if t.gap_cause and k in mae and gap > 0:
        lines.append(f"- **(d) and {t.gap_cause}.** `{k}` (mean MAE {mae[k]:.0f} mm) removes "
                     f"{100 * (mae['pncnn_masked'] - mae[k]) / gap:.0f} % of the MAE gap between `pncnn_masked` "
                     f"({mae['pncnn_masked']:.0f} mm, {seed_list(groups['pncnn_masked'])}) and "
                     f"`ncnn_conf_l1_masked` ({mae['ncnn_conf_l1_masked']:.0f} mm, "
                     f"{seed_list(groups['ncnn_conf_l1_masked'])}).")
  return lines


# The paper's other ablations that keep the variance UNet on cout, not detached: its loss still reaches c0 through
# cout (`depth_pred`: the UNet also sees the prediction; `laplace`: another NLL). The control for the cause.
PATH_KEPT = ("depth_pred_masked", "laplace_masked")


def variance_unet_lines(runs: dict[str, Any]) -> list[str]:
  """The paper's ablation without the variance UNet (`no_var_est_masked`: the NConv output confidence is the
  precision) against every finished seed of masked pNCNN, on claims (b)-(d): the test of the cause the (b) paragraph
  gives (the variance UNet's loss reaching c0 through cout). The ablations of PATH_KEPT are the control: where one of
  them beats every seed as well, the path is not what sets it apart. [] unless both runs and `ncnn_conf_l1_masked`
  exist."""
  ref = "ncnn_conf_l1_masked"
  if not all(n in runs for n in ("no_var_est_masked", "pncnn_masked", ref)):
    return []
  group = done_group(runs, "pncnn_masked") or ("pncnn_masked",)
  a, r = runs["no_var_est_masked"], runs[ref]
  rel = lambda run, k: run["metrics"][k] / r["metrics"][k] - 1  # noqa: E731

  def seeds(value, form) -> str:
    lo, hi = min(value(runs[n]) for n in group), max(value(runs[n]) for n in group)
    return form(lo) if len(group) == 1 else f"{form(lo)} to {form(hi)}"

  pct, two, three = (lambda v: f"{100 * v:+.1f} %"), (lambda v: f"{v:.2f}"), (lambda v: f"{v:.3f}")
  auroc, mae, ause = (lambda x: x["c0"]["auroc"]), (lambda x: rel(x, "mae")), (lambda x: x["uncertainty"]["ause_pncnn"])
  beats = lambda x: (auroc(x) > max(auroc(runs[n]) for n in group)  # noqa: E731
                     and mae(x) < min(mae(runs[n]) for n in group))
  control = [n for n in PATH_KEPT if n in runs and beats(runs[n])]
  text = (f"- **Without the variance UNet** (`no_var_est_masked`, the paper's ablation, masked c0) (b) "
          f"{'holds' if evaluate_runs.c0_singles_out(a['c0']) else 'does not hold'} and (d) "
          f"{'holds' if evaluate_runs.accuracy_close(a['metrics'], r['metrics']) else 'does not hold'}: c0 AUROC "
          f"{auroc(a):.2f} ({a['c0']['auroc_depth_bins']:.2f} within depth deciles), MAE {pct(mae(a))} and RMSE "
          f"{pct(rel(a, 'rmse'))} against `{ref}`, AUSE {ause(a):.3f}; `pncnn_masked` over {seed_list(group)}: AUROC "
          f"{seeds(auroc, two)}, MAE {seeds(mae, pct)}, AUSE {seeds(ause, three)}. ")
  if beats(a) and not control:
    text += ("Its c0 is more selective and its depth more accurate than in every pNCNN run, without the variance "
             "UNet's loss reaching c0 through cout: what the cause above predicts.")
  elif beats(a):
    text += ("Its c0 is more selective and its depth more accurate than in every pNCNN run, without the variance "
             f"UNet's loss reaching c0 through cout, but so {'is' if len(control) == 1 else 'are'} "
             + " and ".join(f"`{n}` (AUROC {auroc(runs[n]):.2f}, MAE {pct(mae(runs[n]))})" for n in control)
             + f", which keep{'s' if len(control) == 1 else ''} that path: with one seed per run, a draw moves c0 "
             "as far as removing the path does (the pNCNN seeds' spread above), so this ablation does not single out "
             "the cause above.")
  else:
    text += ("Removing the variance UNet does not make c0 more selective and the depth more accurate than in every "
             "pNCNN run here, so this ablation does not single out the cause above.")
  return [text]


def mark(ok: bool | None) -> str:
  return {True: "**holds**", False: "**does not hold**", None: "not measured yet"}[ok]
