"""The files of a run directory besides its checkpoints: config.json, metrics.jsonl and TensorBoard events.

`write_config` writes the config a run starts with and refuses a workdir that holds a run of another variant;
`MetricWriter` appends one JSON object per line ({"step", "split", "time", ...metrics}) and mirrors the scalars to
TensorBoard when tensorboardX is installed.
"""

from __future__ import annotations

import json
import logging
import math
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
