"""The section 'Where the error lies' of docs/RESULTS.md: each model's error binned by the distance to the nearest
disturbed input point (`metrics.ErrorByDistance`, measured by `results.evaluate_model`), and claim (d)'s accuracy
gaps split over those bins.

A model whose c0 trusts a disturbed point spreads that point's wrong depth over the pixels NConv fills from it; a
model that is less accurate everywhere (a weaker depth network, a loss that learns less from hard pixels) is worse
far from disturbed points too. The split tells the two apart.
"""

from __future__ import annotations

import math
from typing import Any

from pncnn_jax import claims as claims_lib

NEAR_PX = 5.0  # 'near a disturbed point': closer than this many pixels
FAR_PX = 20.0  # 'far from every disturbed point': at least this many pixels (the last bin of DISTANCE_EDGES_PX)

KEY = "error_by_disturbed_distance"


def _labels(edges: list[float]) -> list[str]:
  return [f"[{lo:g}, {hi:g}) px" if hi != math.inf else f">= {lo:g} px"
          for lo, hi in zip(edges, edges[1:] + [math.inf])]


def _part(e: dict[str, Any], ref: dict[str, Any], keep) -> float:
  """The part of the pooled-MAE difference e - ref [mm] in the bins whose (lo, hi) `keep` accepts."""
  edges = e["edges_px"] + [math.inf]
  return sum(s * (a - b) for lo, hi, s, a, b in zip(edges, edges[1:], e["share"], e["mae_mm"], ref["mae_mm"])
             if keep(lo, hi) and s > 0)


def lines(runs: dict[str, Any], order: tuple[str, ...]) -> list[str]:
  """The section's markdown lines (nothing where no run of `order` has the measurement)."""
  have = [n for n in order if KEY in runs.get(n, {})]
  if not have:
    return []
  edges = runs[have[0]][KEY]["edges_px"]
  share = runs[have[0]][KEY]["share"]
  labels = _labels(edges)
  out = ["", "## Where the error lies: distance to the nearest disturbed input point", "",
         "MAE [mm] pooled over the valid ground-truth pixels of the test scenes, binned by each pixel's Euclidean "
         "distance to the nearest disturbed input point (0 px: the disturbed point itself). The pooled MAE weighs "
         "every pixel equally (the tables above average per image first). The shares of pixels are the same for "
         "every model (the scenes are).", "",
         "| run | " + " | ".join(labels) + " | pooled MAE [mm] |", "|" + "---|" * (len(labels) + 2),
         "| share of pixels | " + " | ".join(f"{100 * s:.1f} %" for s in share) + " | 100 % |"]
  for n in have:
    e = runs[n][KEY]
    out.append(f"| `{n}` | " + " | ".join("n/a" if math.isnan(v) else f"{v:.0f}" for v in e["mae_mm"])
               + f" | {e['pooled_mae_mm']:.0f} |")
  gaps = []
  for p, conf in claims_lib.D_PAIRS:
    if KEY not in runs.get(p, {}) or KEY not in runs.get(conf, {}):
      continue
    a, b = runs[p][KEY], runs[conf][KEY]
    gap = a["pooled_mae_mm"] - b["pooled_mae_mm"]
    near = _part(a, b, lambda lo, hi: hi <= NEAR_PX)
    far = _part(a, b, lambda lo, hi: lo >= FAR_PX)
    near_share = sum(s for hi, s in zip(edges[1:] + [math.inf], share) if hi <= NEAR_PX)
    far_share = sum(s for lo, s in zip(edges, share) if lo >= FAR_PX)
    far_a = sum(s * v for lo, s, v in zip(edges, a["share"], a["mae_mm"]) if lo >= FAR_PX) / max(far_share, 1e-12)
    far_b = sum(s * v for lo, s, v in zip(edges, b["share"], b["mae_mm"]) if lo >= FAR_PX) / max(far_share, 1e-12)
    gaps.append(f"`{p}` against `{conf}`: pooled MAE {gap:+.0f} mm; {near:+.0f} mm of it from the "
                f"{100 * near_share:.1f} % of pixels closer than {NEAR_PX:g} px to a disturbed point, {far:+.0f} mm "
                f"from the {100 * far_share:.0f} % at {FAR_PX:g} px or more (there {far_a:.0f} against {far_b:.0f} mm)")
  if gaps:
    out += ["", "Claim (d)'s accuracy gaps, split over the bins (the bins' parts add up to the gap): "
            + "; ".join(gaps) + ". A gap made near the disturbed points is the input confidence's doing (claim (b)): "
            "NConv spreads a trusted wrong depth over the pixels it fills from it. A gap far from them is the depth "
            "network's or its loss's."]
  return out
