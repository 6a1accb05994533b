"""The paper's claims (a)-(e) checked on the reproduction's runs, and the spread of one recipe over seeds.

Each claim is checked against a threshold fixed in `pncnn_jax.results` before any result was seen; a claim that
does not hold is written as not holding, with its numbers (docs/RESULTS.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pncnn_jax import paper, results
from pncnn_jax.run_files import format_value as fmt


def claims(runs: dict[str, Any], fusion: dict[str, Any] | None) -> list[tuple[str, bool | None, str]]:
  """(claim, holds (None: not measured yet), the numbers) for claims (a)-(e)."""
  out: list[tuple[str, bool | None, str]] = []

  def have(*names):
    return all(n in runs for n in names)

  m = lambda n, k: runs[n]["metrics"][k]
  for forms in (("ncnn_conf_l1_masked", "ncnn_conf_l2_masked"), ("ncnn_conf_l1", "ncnn_conf_l2")):
    label = "masked c0" if forms[0].endswith("masked") else "official network"
    if have("ncnn", *forms):
      ok = all(m(f, k) < m("ncnn", k) for f in forms for k in ("mae", "rmse"))
      nums = "; ".join(f"{f}: MAE {m(f, 'mae'):.0f} / RMSE {m(f, 'rmse'):.0f} mm" for f in forms)
      out.append((f"(a) NCNN-Conf (L1 and L2, {label}) beats NCNN in MAE and RMSE", ok,
                  f"NCNN: MAE {m('ncnn', 'mae'):.0f} / RMSE {m('ncnn', 'rmse'):.0f} mm; {nums}"))
    else:
      out.append((f"(a) NCNN-Conf (L1 and L2, {label}) beats NCNN in MAE and RMSE", None,
                  f"not measured yet: needs {', '.join(('ncnn',) + forms)}"))
  for name in ("ncnn_conf_l1_masked", "pncnn_masked", "ncnn_conf_l1", "pncnn", "pncnn_beta_masked", "laplace_masked"):
    title = f"(b) the learned c0 of `{name}` singles out the disturbed points"
    if name not in runs:
      out.append((title, None, "not measured yet"))
      continue
    c = runs[name]["c0"]
    out.append((title, results.c0_singles_out(c), f"AUROC {c['auroc']:.3f}, within depth deciles {c['auroc_depth_bins']:.3f} (aim >= "
                f"{results.AUROC_AIM}); mean c0 disturbed {c['c0_mean_disturbed']:.3g} vs clean "
                f"{c['c0_mean_clean']:.3g} (ratio {c['c0_mean_disturbed'] / c['c0_mean_clean']:.2f}, aim <= "
                f"{results.C0_RATIO_MAX})" + _seeds_note(runs, name, lambda r: results.c0_singles_out(r["c0"]))))
  for p, conf in (("pncnn_masked", "ncnn_conf_l1_masked"), ("pncnn", "ncnn_conf_l1"),
                  ("pncnn_beta_masked", "ncnn_conf_l1_masked")):
    title = f"(c) `{p}` AUSE clearly below `{conf}`'s (ratio <= {results.AUSE_RATIO_MAX})"
    if have(p, conf):
      a, b = runs[p]["uncertainty"]["ause_pncnn"], runs[conf]["uncertainty"]["ause_pncnn"]
      out.append((title, results.ause_clearly_below(a, b), f"AUSE (pNCNN def.) {a:.3f} vs {b:.3f} (ratio "
                  f"{a / b:.2f}); the paper: 0.05 vs 0.31 on KITTI" + _seeds_note(
                      runs, p, lambda r: results.ause_clearly_below(r["uncertainty"]["ause_pncnn"], b))))
    else:
      out.append((title, None, "not measured yet"))
  for p, conf in (("pncnn_masked", "ncnn_conf_l1_masked"), ("pncnn_exp_masked", "ncnn_conf_l1_masked"),
                  ("pncnn", "ncnn_conf_l1"), ("pncnn_exp", "ncnn_conf_l1"), ("pncnn_beta_masked", "ncnn_conf_l1_masked")):
    title = f"(d) `{p}` within {100 * results.ACCURACY_TOLERANCE:.0f} % of `{conf}` in MAE and RMSE"
    if have(p, conf):
      rel = {k: m(p, k) / m(conf, k) - 1 for k in ("mae", "rmse")}
      ref = runs[conf]["metrics"]
      out.append((title, results.accuracy_close(runs[p]["metrics"], ref),
                  f"MAE {m(p, 'mae'):.0f} vs {m(conf, 'mae'):.0f} mm ({100 * rel['mae']:+.1f} %), RMSE "
                  f"{m(p, 'rmse'):.0f} vs {m(conf, 'rmse'):.0f} mm ({100 * rel['rmse']:+.1f} %)"
                  + _seeds_note(runs, p, lambda r: results.accuracy_close(r["metrics"], ref))))
    else:
      out.append((title, None, "not measured yet"))
  title = "(e) confidence-based fusion beats the plain mean (4-member pNCNN ensemble, RMSE)"
  if fusion:
    rows = fusion["rows"]
    best = min(("weighted_mean", "max_confidence", "mle"), key=lambda r: rows[r]["rmse"])
    out.append((title, rows[best]["rmse"] < rows["mean"]["rmse"],
                "RMSE [mm]: " + ", ".join(f"{r} {rows[r]['rmse']:.0f}" for r in
                                          ("mean", "weighted_mean", "max_confidence", "mle"))))
  else:
    out.append((title, None, "not measured yet: needs the four ensemble runs"))
  return out


def _seeds_note(runs: dict[str, Any], name: str, holds) -> str:
  """'; over seeds 0-3 … it holds for k of 4' where `name` keys a paper.SEED_GROUPS group whose runs are all done."""
  group = paper.SEED_GROUPS.get(name, ())
  if not group or not all(n in runs for n in group):
    return ""
  k = sum(bool(holds(runs[n])) for n in group)
  return (f"; over seeds 0-{len(group) - 1} of the same recipe it holds for {k} of {len(group)} "
          "(table 'Spread over seeds')")


def _seed_columns(runs: dict[str, Any], group: tuple[str, ...]) -> dict[str, list[float]]:
  m, u, c = ([runs[n][k] for n in group] for k in ("metrics", "uncertainty", "c0"))
  return {"MAE [mm]": [x["mae"] for x in m], "RMSE [mm]": [x["rmse"] for x in m],
          "AUSE (pNCNN)": [x["ause_pncnn"] for x in u], "AUROC c0": [x["auroc"] for x in c],
          "same, within depth deciles": [x["auroc_depth_bins"] for x in c],
          "c0 disturbed / clean": [x["c0_mean_disturbed"] / x["c0_mean_clean"] for x in c]}


def seed_lines(runs: dict[str, Any]) -> list[str]:
  """Each recipe of paper.SEED_GROUPS over its seeds (the groups whose runs are all done): the spread one run carries."""
  groups = {k: g for k, g in paper.SEED_GROUPS.items() if all(n in runs for n in g)}
  if not groups:
    return []
  cols = {k: _seed_columns(runs, g) for k, g in groups.items()}
  names = list(next(iter(cols.values())))
  lines = ["", "## Spread over seeds (pNCNN, masked c0: each recipe over its seeds)", "",
           "Runs of one recipe that differ only in the initialisation and data seed; the claims above use seed 0 "
           "(`" + "`, `".join(groups) + "`). This is how far one run's figures move with the seed.",
           "", "| run | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
  digits = [4, 4, 3, 3, 3, 3]  # mm to the unit, the rest to 3 significant digits
  for key, group in groups.items():
    lines += [f"| `{n}` | " + " | ".join(fmt(v[i], d) for v, d in zip(cols[key].values(), digits)) + " |"
              for i, n in enumerate(group)]
    lines.append(f"| `{key}` seeds 0-{len(group) - 1}: mean (sd) | " + " | ".join(
        f"{fmt(float(np.mean(v)), d)} ({fmt(float(np.std(v, ddof=1)), 3)})" for v, d in zip(cols[key].values(), digits))
        + " |")
  ref = runs.get("ncnn_conf_l1_masked")
  for key, group in groups.items():
    auroc, ause = cols[key]["AUROC c0"], cols[key]["AUSE (pNCNN)"]
    text = (f"\n`{key}`, seeds 0-{len(group) - 1}: the AUROC of c0 spans {min(auroc):.2f}-{max(auroc):.2f} "
            f"({sum(a < 0.5 for a in auroc)} below 0.5: that c0 trusts the disturbed points more than the clean ones); "
            f"AUSE spans {min(ause):.3f}-{max(ause):.3f}")
    if ref:
      text += f" against {ref['uncertainty']['ause_pncnn']:.3f} for `ncnn_conf_l1_masked` (one run, seed 0)"
    lines.append(text + ".")
  return lines


def mark(ok: bool | None) -> str:
  return {True: "**holds**", False: "**does not hold**", None: "not measured yet"}[ok]
