"""The section 'Where the error lies' of docs/results/RESULTS.md: each model's error binned by the distance to the
nearest disturbed input point (`metrics.ErrorByDistance`, measured by `evaluate_runs.evaluate_model`), and claim
(d)'s accuracy gaps split into two parts.

A model can lose accuracy near the disturbed points in two ways: its input confidence trusts them, and NConv spreads
their wrong depths; or its depth network is weaker in the places where disturbances happen (depth edges, thin and
far structures), whatever it does with the disturbed points. `evaluate_runs.evaluate_model` also evaluates each model
with the disturbed points deleted from its input (for NCNN: what a perfect binary input confidence would give). The gap
that remains between two models with the points deleted is their depth networks'; the rest of the gap is what
keeping the disturbed points does for each (its input confidence, and what it learned to make of them).
"""

from __future__ import annotations

import math
from typing import Any

from pncnn_jax.experiments import claims as claims_lib

NEAR_PX = 5.0  # 'near a disturbed point': closer than this many pixels
FAR_PX = 20.0  # 'far from every disturbed point': at least this many pixels (the last bin of DISTANCE_EDGES_PX)

KEY = "error_by_disturbed_distance"


def _labels(edges: list[float]) -> list[str]:
  return [f"[{lo:g}, {hi:g}) px" if hi != math.inf else f">= {lo:g} px"
          for lo, hi in zip(edges, edges[1:] + [math.inf])]


def _parts(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, float, float]:
  """The pooled-MAE difference a - b [mm] split over the bins: (closer than NEAR_PX, between, at FAR_PX or more)."""
  edges = a["edges_px"] + [math.inf]
  parts = [0.0, 0.0, 0.0]
  for lo, hi, s, x, y in zip(edges, edges[1:], a["share"], a["mae_mm"], b["mae_mm"]):
    if s > 0:
      parts[0 if hi <= NEAR_PX else 2 if lo >= FAR_PX else 1] += s * (x - y)
  return parts[0], parts[1], parts[2]


def _pair(runs: dict[str, Any], p: str, conf: str):
  """(`p`'s bins, `conf`'s, and both with the disturbed points deleted: None, None without that pass)."""
  deleted = [runs[n].get("disturbed_deleted", {}).get(KEY) for n in (p, conf)]
  return (runs[p][KEY], runs[conf][KEY], *(deleted if all(deleted) else (None, None)))


def _gap(a: dict[str, Any], b: dict[str, Any]) -> float:
  return a["pooled_mae_mm"] - b["pooled_mae_mm"]


def _gap_text(p: str, conf: str, runs: dict[str, Any]) -> str:
  a, b, da, db = _pair(runs, p, conf)
  gap = _gap(a, b)
  text = f"`{p}` against `{conf}`: pooled MAE {gap:+.0f} mm ({_split(a, b)})"
  if da is not None:
    kept = _gap(da, db)
    text += (f"; with the disturbed points deleted from both inputs {kept:+.0f} mm remain ({_split(da, db)}): the "
             f"depth networks' part, and {gap - kept:+.0f} mm is how the two weigh the disturbed points (keeping them "
             f"changes `{p}`'s pooled MAE by {_gap(a, da):+.0f} mm and `{conf}`'s by {_gap(b, db):+.0f} mm)")
  return text


def _split(a: dict[str, Any], b: dict[str, Any]) -> str:
  near, mid, far = _parts(a, b)
  return (f"{near:+.0f} mm closer than {NEAR_PX:g} px to a disturbed point, {mid:+.0f} mm at {NEAR_PX:g}-{FAR_PX:g} "
          f"px, {far:+.0f} mm at {FAR_PX:g} px or more")


def lines(runs: dict[str, Any], order: tuple[str, ...]) -> list[str]:
  """The section's markdown lines (nothing where no run of `order` has the measurement)."""
  have = [n for n in order if KEY in runs.get(n, {})]
  if not have:
    return []
  share = runs[have[0]][KEY]["share"]
  labels = _labels(runs[have[0]][KEY]["edges_px"])
  out = ["", "## Where the error lies: distance to the nearest disturbed input point", "",
         "MAE [mm] pooled over the valid ground-truth pixels of the test scenes, binned by each pixel's Euclidean "
         "distance to the nearest disturbed input point (0 px: the disturbed point itself). The pooled MAE weighs "
         "every pixel equally (the tables above average per image first). The last column evaluates the same "
         "model with the disturbed points deleted from its input. For `ncnn` that is what a perfect binary input "
         "confidence would give (the `ncnn_oracle_c0` row). A learned model was trained with the disturbed points "
         "present: where it is worse without them, it either makes use of them or suffers from an input sparser "
         "than in training, and this evaluation cannot tell which.", "",
         "| run | " + " | ".join(labels) + " | pooled MAE [mm] | same, disturbed points deleted |",
         "|" + "---|" * (len(labels) + 3),
         "| share of pixels | " + " | ".join(f"{100 * s:.1f} %" for s in share) + " | 100 % | |"]
  for n in have:
    e = runs[n][KEY]
    deleted = runs[n].get("disturbed_deleted", {}).get(KEY)
    out.append(f"| `{n}` | " + " | ".join("n/a" if math.isnan(v) else f"{v:.0f}" for v in e["mae_mm"])
               + f" | {e['pooled_mae_mm']:.0f} | " + (f"{deleted['pooled_mae_mm']:.0f}" if deleted else "n/a") + " |")
  gaps = [_gap_text(p, conf, runs) for p, conf in claims_lib.D_PAIRS
          if KEY in runs.get(p, {}) and KEY in runs.get(conf, {})]
  if gaps:
    out += ["", "Claim (d)'s accuracy gaps, split over the bins (the parts add up to the gap): " + "; ".join(gaps)
            + ". The part that remains with the disturbed points deleted does not depend on how either model weighs "
            "them: it is the depth networks' (the network and the loss it was trained with). The rest is what keeping "
            "the disturbed points does for each model: its input confidence, and what it has learned to make of them."]
  return out


def gap_sentence(runs: dict[str, Any], p: str, conf: str) -> str:
  """One sentence on where `p`'s pooled-MAE gap to `conf` lies ('' without both measurements)."""
  if not all(KEY in runs.get(n, {}) for n in (p, conf)):
    return ""
  a, b, da, db = _pair(runs, p, conf)
  gap = _gap(a, b)
  if da is None or gap <= 0:
    return ""
  kept, far = _gap(da, db), _parts(a, b)[2]
  reading = ("mostly the depth network's, in the places where disturbances happen, not how c0 weighs the disturbed "
             "points" if kept > gap / 2 else "mostly what keeping the disturbed points does, not the depth network")
  return (f" Measured here (section 'Where the error lies'): `{p}`'s pooled MAE is {gap:+.0f} mm against `{conf}`'s, "
          f"{gap - far:+.0f} mm of it within {FAR_PX:g} px of a disturbed point ({far:+.0f} mm beyond), and "
          f"{kept:+.0f} mm ({100 * kept / gap:.0f} %) remain with the disturbed points deleted from both inputs: "
          f"{reading}.")
