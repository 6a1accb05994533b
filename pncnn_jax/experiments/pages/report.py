"""docs/results/RESULTS.md, its JSON and its figures, from the summary that `pncnn_jax.experiments.evaluate_runs`
measured.

The claims of the paper are checked here, each against a threshold fixed in `pncnn_jax.experiments.evaluate_runs` before
any result was seen; a claim that does not hold is written as not holding, with its numbers.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Sequence

from pncnn_jax import pretrained
from pncnn_jax.ensemble import members as ensemble_members
from pncnn_jax.experiments import claims as claims_lib
from pncnn_jax.experiments import evaluate_runs, runner
from pncnn_jax.experiments import runs as runs_lib
from pncnn_jax.experiments.flow import report as flow_report
from pncnn_jax.experiments.pages import distance as pages_distance
from pncnn_jax.experiments.pages import figures as pages_figures
from pncnn_jax.experiments.pages import why as pages_why
from pncnn_jax.runtime.run_files import format_value as _f

MAIN_ORDER = ("ncnn_oracle_c0", "ncnn", "ncnn_conf_l1", "ncnn_conf_l1_masked", "ncnn_conf_l2", "ncnn_conf_l2_masked",
              "pncnn", "pncnn_masked", "pncnn_exp", "pncnn_exp_masked", "pncnn_beta_masked",
              "sparse_var_beta_detach_masked")
ABLATION_ORDER = ("pncnn_masked", "no_conf_est", "no_var_est_masked", "depth_pred_masked", "laplace_masked",
                  "pncnn_beta_masked", "pncnn_beta1_masked", "pncnn_aux_masked", "pncnn_beta_aux_masked",
                  "pncnn_detach_masked", "pncnn_beta_detach_masked", "sparse_var_beta_detach_masked",
                  "sparse_var_laplace_detach_masked", "pncnn_masked_lr3e-3", "pncnn_masked_clip10")


def _row(name: str, e: dict[str, Any]) -> str:
  return "| " + " | ".join(_cells(name, e)) + " |"


def _cells(name: str, e: dict[str, Any]) -> list[str]:
  """One run's cells of the results tables, in `HEADER`'s order."""
  m, u, c = e["metrics"], e["uncertainty"], e.get("c0")
  conv = e.get("convergence") or {"flat": False, "rmse_change_last_30pct": None}
  flat = evaluate_runs.flat_label(conv["flat"], conv["rmse_change_last_30pct"])
  return [f"`{name}`", f"{e['params']:,}", _f(m["mae"]), _f(m["rmse"]), _f(m["imae"]), _f(m["irmse"]),
           _f(u["ause_pncnn"], 3), _f(u["ause_gustafsson"], 3), _f(u["auce"], 3), _f(u["nll"], 3),
           _f(c["auroc"], 3) if c else "0.5 (binary)", _f(c["auroc_depth_bins"], 3) if c else "0.5 (binary)",
           f"{_f(c['c0_mean_disturbed'], 3)} / {_f(c['c0_mean_clean'], 3)}" if c else "1 / 1",
           str(e.get("step")), flat]


HEADER = ("| run | parameters | MAE [mm] | RMSE [mm] | iMAE [1/km] | iRMSE [1/km] | AUSE (pNCNN) | AUSE (Gustafsson) | "
          "AUCE | NLL | AUROC low c0 vs disturbed | same, within depth deciles | mean c0 disturbed / clean | steps | "
          "val curve flat |\n|" + "---|" * 15)


def write(summary: dict[str, Any], path: pathlib.Path, workdir: pathlib.Path, *, intro: str | None = None) -> None:
  """Writes `path` (markdown), `path`.json and the figures under <path's folder>/`figure_folder(path)`/; `intro`
  replaces the paragraphs on the recipe (the demo's page)."""
  runs, fusion = summary["runs"], summary["fusion"]
  figsub = figure_folder(path)
  figdir = path.parent / figsub
  figdir.mkdir(parents=True, exist_ok=True)
  figures = pages_figures.figures(runs, workdir, figdir, summary["scenes"],
                                    tuple(summary["recipe"].get("eval_crop", (128, 384))), MAIN_ORDER, ABLATION_ORDER)
  claims = claims_lib.claims(runs, fusion)
  recipe = summary["recipe"]
  if path.name != LONGER_PAGE:  # the longer page trains no lower-lr run
    figures += lr_curves(runs, recipe, figdir)
  head = ["# Results: the paper's claims on the synthetic benchmark, with our own training", ""]
  if intro is not None:
    lines = head + [intro, ""]
  elif path.name == LONGER_PAGE:  # a page about its few runs, without the claims of the runs it does not train
    lines = longer_page(summary, path, figures, figdir)
  else:
    lines = head + _recipe_lines(summary, recipe)
  if intro is not None or path.name != LONGER_PAGE:
    lines += ["## The claims", ""]
    lines += [_claim_line(*c) for c in claims]
    lines += _tables(runs, fusion, figures, summary, figsub)
  if intro is None and path.name == MAIN_PAGE:
    lines += scale_section(path.parent / LONG_PAGE, summary)
    lines += flow_section(path.parent / "RESULTS_FLOW.json")
  if intro is None and path.name == LONG_PAGE:  # the runs retrained longer because they had not converged
    lines += longer_section(path.parent / LONGER_PAGE, summary)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("\n".join(lines) + "\n")
  claims_json = [{"claim": c, "holds": ok, "numbers": nums} for c, ok, nums in claims]
  path.with_suffix(".json").write_text(json.dumps({**summary, "claims": claims_json}, indent=1,
                                                  default=pretrained.json_default) + "\n")


PAGES_DIR = "docs/results"  # where the results pages are written by default (from the repository root)
MAIN_PAGE = "RESULTS.md"  # the cpu-scale page; the other scales' pages sit beside it
LONG_PAGE = "RESULTS_LONG.md"
LONGER_PAGE = "RESULTS_LONGER.md"  # the 'longer' scale: the long page's runs that were still falling, 2x longer


def page_name(scale: str) -> str:
  """The results page of a scale: RESULTS.md for the cpu scale, RESULTS_<SCALE>.md for the others."""
  return MAIN_PAGE if scale == "cpu" else f"RESULTS_{scale.upper()}.md"


def figure_folder(path: pathlib.Path) -> str:
  """The figures' folder beside `path`: `results` for docs/results/RESULTS.md (docs/results/results/, and the demo's
  results.md), else the page's own name in lower case (docs/results/RESULTS_LONG.md -> docs/results/results_long/), so
  that two pages never share figures."""
  return "results" if path.stem.lower() == "results" else path.stem.lower()


_SCALE_COLUMNS = ("MAE [mm]", "RMSE [mm]", "AUSE (pNCNN)", "NLL", "AUROC low c0 vs disturbed",
                  "same, within depth deciles", "mean c0 disturbed / clean", "val curve flat")  # of HEADER


def scale_section(long_page: pathlib.Path, summary: dict[str, Any]) -> list[str]:
  """The runs of another scale's page (`long_page`, read from its .json) against the same runs here, with that page's
  claims on them: what training longer changes; nothing when it has not been written."""
  other = _read_page(long_page)
  lines = _scale_table(other, long_page.name, summary)
  names = [n for n in other["runs"] if n in summary["runs"]]
  kept = [c for c in other.get("claims", []) if c["holds"] is not None  # measured, and on these runs
          and _on_runs(c["claim"], c["numbers"], names)]
  if lines and kept:
    steps = other["recipe"]["steps_per_epoch"] * other["recipe"]["num_epochs"]
    lines += ["", f"The claims on that page ({steps} steps):", ""]
    lines += [_claim_line(c["claim"], c["holds"], c["numbers"]) for c in kept]
  return lines


def longer_section(longer_page_: pathlib.Path, summary: dict[str, Any]) -> list[str]:
  """scale_section's table of the 'longer' page (the runs of this page that had not converged, retrained 2x longer),
  then this page's claims with those runs in place of their shorter versions (`_with_retrained`). Nothing when that
  page is not written."""
  longer = _read_page(longer_page_)
  lines = _scale_table(longer, longer_page_.name, summary)
  if not lines:
    return []
  mixed = _with_retrained(summary["runs"], longer["runs"])
  if mixed:
    lines += ["", "This page's claims with the retrained runs in their place (every other run as above):", ""]
    lines += [_claim_line(*c) for c in mixed]
  return lines


def _with_retrained(runs: dict[str, Any], retrained_runs: dict[str, Any]) -> list[tuple[str, bool, str]]:
  """The claims of `runs` with those of `retrained_runs` in place of their shorter versions, measured and about a
  retrained run: the references and every other run stay as they are (a converged reference would not move), and
  the other seeds of a retrained run are left out (they were not retrained); each such claim names the unequal
  training lengths."""
  retrained = [n for n in retrained_runs if n in runs]
  others = {m for n in retrained for m in runs_lib.SEED_GROUPS.get(n, ()) if m != n}
  merged = {n: r for n, r in runs.items() if n not in others} | {n: retrained_runs[n] for n in retrained}
  return [c for c in claims_lib.claims(merged, None) if c[1] is not None and _on_runs(c[0], c[2], retrained)]


def lr_curves(runs: dict[str, Any], recipe: dict[str, Any], figdir: pathlib.Path) -> list[tuple[str, str]]:
  """lr_curves.png: each run of runs.LR_PAIRS beside the same recipe at the scale's lr (`recipe`); [] when no pair
  is in `runs`."""
  drop = recipe["steps_per_epoch"] * recipe["lr_decay_epochs"]
  pairs = [(low, runs[ref], runs[low]) for low, ref in runs_lib.LR_PAIRS if low in runs and ref in runs]
  lows = ", ".join(sorted({f"{runs_lib.RUNS_BY_NAME[low].learning_rate:g}" for low, *_ in pairs}))
  return pages_figures.val_curves(pairs, figdir, (drop, drop), (f"lr {recipe['learning_rate']:g}", f"lr {lows}"),
                                  stem="lr_curves", title="Validation curves at two learning rates",
                                  what="the runs trained at a lower learning rate beside the same recipe")


def longer_page(summary: dict[str, Any], path: pathlib.Path, figures: list[tuple[str, str]],
                figdir: pathlib.Path) -> list[str]:
  """docs/results/RESULTS_LONGER.md: the runs of runs.SCALE_RUNS['longer'] (still falling at the long page's length)
  trained 2x longer, against their long-page versions (the long page's JSON beside `path`): the claims with them in
  place, each run's change, their full rows, where their error lies, the figures (`figures`, after the validation
  curves at both lengths that this draws into `figdir`) and which of them are not finished (`not_finished`,
  results.evaluate_all: of the scale's own runs)."""
  runs, recipe = summary["runs"], summary["recipe"]
  long = _read_page(path.parent / LONG_PAGE)
  steps = lambda r: r["steps_per_epoch"] * r["num_epochs"]  # noqa: E731
  short = steps(long["recipe"]) if long["runs"] else None
  if short:
    drop = lambda r: r["steps_per_epoch"] * r["lr_decay_epochs"]  # noqa: E731
    pairs = [(n, long["runs"][n], e) for n, e in runs.items() if n in long["runs"]]
    figures = pages_figures.val_curves(pairs, figdir, (drop(long["recipe"]), drop(recipe)),
                                       (f"{short} steps", f"{steps(recipe)} steps")) + figures
  title = f"the runs still falling at {short} steps, trained {steps(recipe)}" if short else "the longer scale"
  lines = [f"# Results: {title}", "", *_recipe_lines(summary, recipe, other_pages=False),
           f"**Why this page.** [{LONG_PAGE}]({LONG_PAGE}) counts a run as converged by the rule above; the runs it "
           f"marks as still falling ({', '.join(f'`{n}`' for n in runs_lib.SCALE_RUNS['longer'])}) are trained here "
           "again with its recipe made twice as long (the same recipe up to its lr drop), and put in place of their "
           f"shorter versions in its claims (every other run as it is there). [{LONG_PAGE}]({LONG_PAGE}) repeats "
           "this page's table and claims in its section on this scale.", ""]
  for n, e in runs.items():
    lines += [f"**How `{n}` was trained.** {e['trained_by']}", ""] if e.get("trained_by") else []
  names = [n for n in runs if n in long["runs"]]
  if names:
    lines += ["## The claims with these runs in place", "",
              f"[{LONG_PAGE}]({LONG_PAGE})'s claims on these runs, with this page's runs in place of their "
              f"{short}-step versions:", ""]
    lines += [_claim_line(*c) for c in _with_retrained(long["runs"], runs)] or ["None of its claims is about "
                                                                               "these runs."]
    lines += ["", f"## {short} -> {steps(recipe)} steps", "",
              f"Each cell gives the {short}-step run's value ({LONG_PAGE}), then this page's.", "",
              *_pair_table(long["runs"], runs, names)]
  lines += ["", "## Accuracy and uncertainty", "", HEADER]
  lines += [_row(n, runs[n]) for n in MAIN_ORDER if n in runs]
  lines += pages_distance.lines(runs, MAIN_ORDER)
  lines += ["", "## Figures", ""] + [f"![{t}]({figdir.name}/{f})\n\n{t}\n" for f, t in figures]
  return lines + _not_included(summary)


def _read_page(page: pathlib.Path) -> dict[str, Any]:
  """The summary JSON beside another page (`page`.json), or one without runs when it has not been written."""
  path = page.with_suffix(".json")
  return json.loads(path.read_text()) if path.exists() else {"runs": {}}


def _on_runs(claim: str, numbers: str, names: Sequence[str]) -> bool:
  """Whether a claim line is about one of `names`: named in its title or giving that run's numbers."""
  return any(f"`{n}`" in claim or f"{n}:" in numbers for n in names)


def _scale_table(other: dict[str, Any], page_name_: str, summary: dict[str, Any]) -> list[str]:
  """The heading and the table 'here -> there' of the runs on both pages; [] when they share none."""
  names = [n for n in other["runs"] if n in summary["runs"]]
  if not names:
    return []
  recipe = other["recipe"]
  steps = recipe["steps_per_epoch"] * recipe["num_epochs"]
  return ["", f"## Training {steps} steps ({other['scale']} scale)", "",
          f"From [{page_name_}]({page_name_}) ({other['date']}, commit {str(other['commit'])[:10]}): "
          f"the runs trained with the same recipe for {steps} steps (lr x0.1 after "
          f"{recipe['steps_per_epoch'] * recipe['lr_decay_epochs']}), evaluated on the same "
          f"{recipe['test_scenes']} test scenes. Each cell gives this page's value, then the "
          f"{other['scale']} run's.", "", *_pair_table(summary["runs"], other["runs"], names)]


def _pair_table(before: dict[str, Any], after: dict[str, Any], names: Sequence[str]) -> list[str]:
  """A table of `names`, each cell 'before's value -> after's' in the columns _SCALE_COLUMNS of HEADER."""
  lines = ["| run | " + " | ".join(_SCALE_COLUMNS) + " |", "|" + "---|" * (len(_SCALE_COLUMNS) + 1)]
  picked = [HEADER.split("\n")[0].strip("| ").split(" | ").index(c) for c in _SCALE_COLUMNS]
  cells = lambda e: [_cells("", e)[i] for i in picked]  # noqa: E731
  for n in names:
    lines.append(f"| `{n}` | " + " | ".join(f"{a} -> {b}" for a, b in zip(cells(before[n]), cells(after[n]))) + " |")
  return lines


def _claim_line(claim: str, ok: bool | None, numbers: str) -> str:
  return f"- {claim}: {claims_lib.mark(ok)}." + (f" {numbers}." if numbers else "")


FLOW_LINK = ("The paper's other sparse problem, sparse optical-flow rectification with a multi-channel pNCNN, is at "
             "the end of this page, in full in [RESULTS_FLOW.md](RESULTS_FLOW.md) "
             "(`python -m pncnn_jax.experiments.flow.reproduce`).")


def flow_section(flow_json: pathlib.Path) -> list[str]:
  """The flow experiment's claims, table and figure (from `flow_report`'s RESULTS_FLOW.json beside this page), or
  nothing when it has not been run."""
  if not flow_json.exists():
    return []
  summary = json.loads(flow_json.read_text())
  rows = summary["rows"]
  lines = ["", "## Sparse optical-flow rectification (paper section 6)", "",
           f"From [RESULTS_FLOW.md](RESULTS_FLOW.md) ({summary['date']}): a multi-channel pNCNN (u, v with one shared "
           "confidence) on the synthetic sparse-flow benchmark, KLT-like tracks of which "
           f"{100 * summary['corrupted_fraction']:.0f} % failed (labelled). Why each claim holds or not, the recipe "
           "and the validation curves are there.", "", *flow_report.claims(rows), "", flow_report.table(rows), ""]
  figure = flow_json.parent / flow_report.FIGURES / "flow_pncnn_panels.png"
  if figure.exists():
    lines.append(f"![flow_pncnn panels]({flow_report.FIGURES}/flow_pncnn_panels.png)")
  return lines


def carried_lines(summary: dict[str, Any]) -> list[str]:
  """Which rows come from earlier sittings (`reproduce --carry`): evaluated here from shipped weights, or copied
  as the sitting (commit, date) that measured them wrote them."""
  entries = [(f"`{n}`", e) for n, e in summary["runs"].items()]
  if summary.get("fusion"):
    entries.append(("the fusion table", summary["fusion"]))
  by_source: dict[tuple[str, str], list[str]] = {}
  for label, e in entries:
    if "carried_from" in e:
      src = e["carried_from"]
      by_source.setdefault((str(src.get("date")), str(src.get("commit"))[:10]), []).append(label)
  remeasured = [label for label, e in entries if "weights_from" in e]
  lines = []
  if remeasured:
    lines += [f"**Trained in earlier sittings, evaluated here.** {', '.join(remeasured)}: this workdir does not hold "
              "these runs; their shipped weights (`pncnn_jax/pretrained/synthetic/`, the very runs the earlier "
              "page measured) were evaluated here, and their validation curves (the last column) come from the "
              "earlier page (`--carry`).", ""]
  if by_source:
    parts = [f"commit {c} ({d}): {', '.join(names)}" for (d, c), names in sorted(by_source.items())]
    lines += [f"**Carried over from earlier sittings.** These rows were measured by an earlier sitting whose workdir "
              "this machine no longer has, and no shipped weights of the same runs exist (`--carry`; same recipe, "
              f"same evaluation). By the page they were copied from (its commit and date): {'; '.join(parts)}. The "
              "qualitative panel shows only runs evaluated here (when none was, it is the one drawn before, kept).", ""]
  return lines


def _recipe_lines(summary: dict[str, Any], recipe: dict[str, Any], *, other_pages: bool = True) -> list[str]:
  """The generating command, the carried rows, the recipe and the convergence rule; with other_pages, the shipped
  weights and the flow experiment too."""
  carried = carried_lines(summary)
  carry = f" --carry {PAGES_DIR}/{pathlib.Path(page_name(summary['scale'])).with_suffix('.json')}" if carried else ""
  return [
      f"Generated by `python -m pncnn_jax.experiments.reproduce --scale {summary['scale']}{carry}` on "
      f"{summary['date']} "
      f"(commit {str(summary['commit'])[:10]}, jax {summary['jax']}, devices {', '.join(summary['devices'])}). "
      "Rerunning the command continues the runs and regenerates this page.",
      "",
      *carried,
      f"**Recipe ({summary['scale']} scale).** Every model: Adam, lr {recipe['learning_rate']} then x0.1 after "
      f"{recipe['steps_per_epoch'] * recipe['lr_decay_epochs']} steps, "
      f"{recipe['steps_per_epoch'] * recipe['num_epochs']}"
      f" steps of batch {recipe['batch_size']} on {recipe['train_crop'][0]}x{recipe['train_crop'][1]} centre crops of "
      f"{recipe['train_scenes']} training scenes; validation every {recipe['steps_per_epoch']} steps on "
      f"{recipe['val_scenes']} scenes. **Evaluation** of the final weights on {recipe['test_scenes']} held-out test "
      f"scenes (scene seeds of the 'test' split, never seen in training or validation), "
      f"{recipe['eval_crop'][0]}x{recipe['eval_crop'][1]} centre crops. KITTI conventions: per-image means, mm and "
      "1/km. AUSE pools all valid pixels. AUROC is of the *low* input confidence for the `disturbed` label "
      "(LiDAR points more than 1 m off the camera-visible surface), over all input points and within deciles of "
      "the input depth.",
      "",
      "**Convergence.** A run counts as converged when the best validation RMSE of the last 30 % of its phase "
      f"before the lr drop is within {100 * runner.FLAT_TOLERANCE:.0f} % of the best before it (the best, "
      "so that "
      "one diverged validation does not decide; the lr drop then only polishes); the last column says so, or gives "
      "the change: a curve still falling wants more steps, one that rose had its best earlier (longer training will "
      "not help).",
      "",
      *(shipped_lines() + [FLOW_LINK, ""] if other_pages else []),
  ]


def shipped_lines(root: pathlib.Path | None = None) -> list[str]:
  """Which scale each shipped model (pncnn_jax/pretrained/synthetic/) was trained at."""
  text = runs_lib.describe_scales(root=root)
  return [f"**Shipped weights** (`pncnn_jax/pretrained/synthetic/`, loadable as `synthetic:<name>`), by the scale "
          f"they were trained at: {text}.", ""] if text else []


def _tables(runs, fusion, figures, summary, figsub: str = "results") -> list[str]:
  lines = ["", "## Accuracy and uncertainty", "",
            "`_masked` = our `mask_input_confidence` option (c0 zero where there is no measurement); the other "
            "rows are the official networks. NCNN and NCNN-Conf have no calibrated sigma: their AUSE ranks pixels "
            "by the propagated output confidence, and AUCE/NLL are n/a. `ncnn_oracle_c0` is the trained NCNN "
            "evaluated with its disturbed input points deleted: what a perfect input confidence could gain over "
            "NCNN on this benchmark (a bound for claim (a)).", "", HEADER]
  lines += [_row(n, runs[n]) for n in MAIN_ORDER if n in runs]
  lines += ["", "## Ablations (pNCNN with masked c0 as the reference row)", "",
            "The paper's ablations (`no_conf_est`, `no_var_est`, `depth_pred`, `laplace`), then our options, each one "
            "change to pNCNN: `beta` = beta-NLL weights (beta 0.5; `beta1`: beta 1), `aux` = an L1 term on mu "
            "added to the NLL, `detach` = the variance UNet's input detached (its loss trains only itself), "
            "`sparse_var` = a variance UNet that sees the sparse input beside cout, `lr3e-3` = lr 0.003 before the "
            "drop instead of the scale's, `clip10` = each gradient clipped to global L2 norm 10 before Adam "
            "(both recipe changes, not model changes). AUCE and NLL score every row's sigma as a Gaussian's; for "
            "`laplace` sigma is its Laplace's standard deviation (sqrt(2) b), so those "
            "two columns do not score it by its own Laplace likelihood (AUSE, a ranking, does not depend on the "
            "shape).", "", HEADER]
  lines += [_row(n, runs[n]) for n in ABLATION_ORDER if n in runs]
  lines += ["", "## Fusion of a 4-member pNCNN ensemble (masked c0, seeds 0-3)", ""]
  if fusion:
    lines += _calibration_lines(fusion)
    lines += ["| member / rule | MAE [mm] | RMSE [mm] | AUSE (pNCNN) | AUSE (Gustafsson) | AUCE | NLL |",
              "|---|---|---|---|---|---|---|"]
    for name, r in fusion["rows"].items():
      lines.append(f"| {name} | {_f(r['mae'])} | {_f(r['rmse'])} | {_f(r['ause_pncnn'], 3)} | "
                   f"{_f(r['ause_gustafsson'], 3)} | {_f(r['auce'], 3)} | {_f(r['nll'], 3)} |")
  else:
    lines.append("Not measured yet: the four member runs are not all finished.")
  lines += claims_lib.seed_lines(runs)
  lines += pages_distance.lines(runs, MAIN_ORDER)
  lines += ["", "## Why the official network fails at this scale", "", pages_why.why(runs), ""]
  lines += ["## The claims that do not hold, and why", "", *pages_why.discussion(runs),
            *claims_lib.variance_unet_lines(runs),
            *claims_lib.data_term_lines(runs),
            *pages_why.learning_rate_lines(runs, summary["recipe"]["learning_rate"]),
            *pages_why.grad_clip_lines(runs), "",
            "## Figures", ""]
  lines += [f"![{t}]({figsub}/{f})\n\n{t}\n" for f, t in figures]
  return lines + _not_included(summary)


def _not_included(summary: dict[str, Any]) -> list[str]:
  """The section naming the runs of the page's scale that are not on it (`not_finished`), if any."""
  if not summary.get("not_finished"):
    return []
  note = summary.get("missing_note", "These runs have not reached their last step; rerun the command to continue them")
  return ["## Not included", "", note + ": " + ", ".join(f"`{n}`" for n in summary["not_finished"]) + ".", ""]


def _calibration_lines(fusion: dict[str, Any]) -> list[str]:
  """What the '(calibrated)' rows of the fusion table are, with the fitted scales and what they changed."""
  scales = fusion.get("precision_scales")
  if not scales:
    return []
  rows, cal = fusion["rows"], ensemble_members.CALIBRATED
  moved = [f"{r} {rows[r]['rmse']:.0f} -> {rows[r + cal]['rmse']:.0f}"
           for r in ("weighted_mean", "max_confidence", "mle") if r in rows and r + cal in rows]
  return [f"Rows marked *(calibrated)* fuse each member's precision times a scale s_k fitted by maximum likelihood on "
          f"{fusion.get('calibrated_on', 'the validation scenes')} (`ensemble_members.fit_precision_scales`: s_k = N / "
          f"sum c_k (t - mu_k)^2; s_k < 1: the member claims more precision than it earns): s = "
          + ", ".join(f"{v:.2f}" for v in scales) + ". The members' depths do not change, their NLL and AUCE do; "
          "the rules that weigh or pick members fuse other depths (RMSE [mm] as trained -> calibrated: "
          + ", ".join(moved) + "). Claim (e) uses the confidences as trained, as the paper fuses them.", ""]
