"""The files of a run directory besides its checkpoints: config.json, metrics.jsonl, TensorBoard events, and the
markdown tables of its evaluations (`markdown_table`).

`write_config` writes the config a run starts with and refuses a workdir that holds a run of another variant;
`MetricWriter` appends one JSON object per line ({"step", "split", "time", ...metrics}) and mirrors the scalars to
TensorBoard when tensorboardX is installed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pathlib
import time
from typing import Any, Mapping

import jax
import ml_collections
import numpy as np

log = logging.getLogger(__name__)



class MetricWriter:
  """Appends metrics to `<workdir>/metrics.jsonl` and, when tensorboardX is installed, to TensorBoard."""

  def __init__(self, workdir: pathlib.Path, enabled: bool = True):
    self.path = workdir / "metrics.jsonl"
    self.enabled = enabled
    self._tb = None
    if enabled:
      try:
        from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top  (optional)
        self._tb = SummaryWriter(str(workdir / "tensorboard"))
      except ImportError:
        pass

  def drop_after(self, step: int) -> int:
    """Removes the rows of steps after `step` (those a killed run wrote after its last checkpoint, which the
    resumed run writes again), atomically: the kept rows go to a temporary file that replaces the old one.
    Lines that are not JSON rows (a line cut by the kill) are dropped too. Returns the number of lines dropped."""
    if not self.enabled or not self.path.exists():
      return 0
    lines = self.path.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if _row_step(line) is not None and _row_step(line) <= step]
    if len(kept) == len(lines):
      return 0
    tmp = self.path.with_name(self.path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    os.replace(tmp, self.path)
    log.warning("%s: dropped %d row(s) after step %d (written after the last checkpoint)", self.path,
                len(lines) - len(kept), step)
    return len(lines) - len(kept)

  def write(self, step: int, split: str, values: Mapping[str, Any]) -> None:
    if not self.enabled:
      return
    row = {"step": int(step), "split": split, "time": round(time.time(), 3)}
    row.update({k: _jsonable(v) for k, v in values.items()})
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps(row) + "\n")
    if self._tb is not None:
      for k, v in values.items():
        if isinstance(v, (int, float)) and math.isfinite(v):
          self._tb.add_scalar(f"{split}/{k}", v, int(step))
      self._tb.flush()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()


def _row_step(line: str) -> int | None:
  """The step of a metrics.jsonl row, or None for a line that is not a row."""
  try:
    row = json.loads(line)
  except json.JSONDecodeError:
    return None
  return row.get("step") if isinstance(row, dict) and isinstance(row.get("step"), int) else None


def _jsonable(v: Any) -> Any:
  if isinstance(v, (np.generic, jax.Array)):
    v = np.asarray(v).item()
  if isinstance(v, float) and not math.isfinite(v):
    return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
  return v


def write_config(config: ml_collections.ConfigDict, workdir: pathlib.Path) -> None:
  """Writes `<workdir>/config.json`; a ValueError if it holds a run of another variant, a warning if it differs."""
  path = workdir / "config.json"
  new = json.loads(config.to_json_best_effort())
  if path.exists():
    try:
      old = json.loads(path.read_text())
    except json.JSONDecodeError:
      old = None
    if old is not None and old != new:
      if old.get("variant") != new.get("variant"):
        raise ValueError(f"{workdir} holds a run of variant {old.get('variant')!r}, but config.variant is "
                         f"{new.get('variant')!r}: use another --workdir")
      log.warning("config differs from the one in %s; resuming with the new config", path)
  path.write_text(json.dumps(new, indent=2, sort_keys=True) + "\n")


def format_value(v: Any, digits: int = 4) -> str:
  """A table cell: floats to `digits` significant digits, integers and other values as they print, missing or
  NaN values as n/a."""
  if v is None or (isinstance(v, (float, np.floating)) and math.isnan(v)):
    return "n/a"
  if isinstance(v, (float, np.floating)):
    return f"{v:.{digits}g}"
  return str(v)


def flat_label(flat: bool, change: float | None) -> str:
  """The 'val curve flat' cell of a results table: yes, or no with the relative change of the best validation error
  over the last 30 % of the phase before the lr drop and which way it went (falling: more steps would help; rose:
  the best came earlier), n/a if the curve is too short to judge."""
  if flat:
    return "yes"
  if change is None:
    return "n/a"
  return f"no ({100 * change:+.1f} %, " + ("still falling)" if change < 0 else "rose: its best came earlier)")


def markdown_table(rows: Mapping[str, Mapping[str, Any]], keys: list[str], units: Mapping[str, str],
                   header: str = "model") -> str:
  """A markdown table, one row per named result, one column per key (its unit in brackets where `units` has
  one); cells by `format_value`."""
  head = [header] + [f"{k} [{units[k]}]" if k in units else k for k in keys]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  lines += ["| " + " | ".join([name] + [format_value(r.get(k)) for k in keys]) + " |" for name, r in rows.items()]
  return "\n".join(lines)
