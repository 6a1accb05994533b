"""The files of a run directory besides its checkpoints: config.json, metrics.jsonl, TensorBoard events, and the
markdown tables of its evaluations (`markdown_table`).

`write_config` writes the config a run starts with and refuses a workdir that holds a run of another variant;
`MetricWriter` appends one JSON object per line ({"step", "split", "time", ...metrics}) and mirrors the scalars to
TensorBoard when tensorboardX is installed. `WorkdirLock` makes a workdir one run's: an exclusive `flock` on the
workdir folder itself (the kernel drops it when the process ends, however it ends, so a dead run never blocks the
next), with `<workdir>/RUNNING` naming the holder (pid, host, start time) while it runs.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import math
import os
import pathlib
import socket
import time
from typing import Any, Mapping

import jax
import ml_collections
import numpy as np

log = logging.getLogger(__name__)

RUNNING_FILE = "RUNNING"


class WorkdirBusyError(ValueError):
  """Another training process holds the workdir (`WorkdirLock`): train.py prints it in one line, exit status 2."""


class WorkdirLock:
  """One training run per workdir: an exclusive, non-blocking `flock` on the workdir folder.

  `acquire()` takes it (or raises `WorkdirBusyError` naming the holder's pid and host from `<workdir>/RUNNING`) and
  writes RUNNING; `release()` removes RUNNING and drops the lock. The lock is on the folder, not on a file that could
  be replaced, and the kernel releases it when the process dies (SIGKILL included), so a stale RUNNING file of a
  dead run is simply overwritten. Readers (eval.py, predict) take no lock and are never blocked. On a file system
  without flock (some network mounts) the run goes on with a warning, unprotected. Usable as a context manager.
  """

  def __init__(self, workdir: str | os.PathLike):
    self.workdir = pathlib.Path(workdir)
    self.info = self.workdir / RUNNING_FILE
    self._fd: int | None = None

  def acquire(self) -> WorkdirLock:
    fd = os.open(self.workdir, os.O_RDONLY)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      os.close(fd)
      if e.errno in (errno.EWOULDBLOCK, errno.EACCES):
        raise WorkdirBusyError(f"--workdir {self.workdir} is in use by another training run ({self._holder()}); "
                               "wait for it to end or choose another --workdir") from None
      log.warning("%s: cannot lock the workdir (%s); two runs here would not be stopped", self.workdir, e)
      return self
    self._fd = fd
    try:
      self.info.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                       "started": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
    except OSError:
      self.release()
      raise
    return self

  def _holder(self) -> str:
    try:
      info = json.loads(self.info.read_text())
      return f"pid {info['pid']} on host {info['host']}, started {info['started']}"
    except (OSError, ValueError, KeyError, TypeError):
      return f"no readable {self.info}"

  def release(self) -> None:
    if self._fd is None:
      return
    try:
      self.info.unlink(missing_ok=True)
    except OSError:
      pass
    fcntl.flock(self._fd, fcntl.LOCK_UN)
    os.close(self._fd)
    self._fd = None

  def __enter__(self) -> WorkdirLock:
    return self.acquire()

  def __exit__(self, *exc) -> None:
    self.release()



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


def check_config_file(config: ml_collections.ConfigDict, workdir: pathlib.Path) -> bool:
  """Whether `<workdir>/config.json` differs from `config` (False when there is none); a ValueError naming the
  file if it holds a run of another variant. Reads only."""
  path = workdir / "config.json"
  new = json.loads(config.to_json_best_effort())
  if not path.exists():
    return False
  try:
    old = json.loads(path.read_text())
  except (json.JSONDecodeError, UnicodeDecodeError):
    old = None
  if not isinstance(old, dict) or old == new:
    return False
  if old.get("variant") != new.get("variant"):
    raise ValueError(f"{path} holds a run of variant {old.get('variant')!r}, but config.variant is "
                     f"{new.get('variant')!r}: use another --workdir")
  return True


def write_config(config: ml_collections.ConfigDict, workdir: pathlib.Path) -> None:
  """Writes `<workdir>/config.json`; a ValueError if it holds a run of another variant, a warning if it differs."""
  path = workdir / "config.json"
  if check_config_file(config, workdir):
    log.warning("config differs from the one in %s; resuming with the new config", path)
  new = json.loads(config.to_json_best_effort())
  path.write_text(json.dumps(new, indent=2, sort_keys=True) + "\n")


def check_writable(folder: str | os.PathLike) -> None:
  """An OSError naming the path when `folder` (existing or to be created) cannot be written: the first existing
  folder on its path is a file (ENOTDIR) or not writable (EACCES, EROFS)."""
  path = pathlib.Path(os.path.abspath(os.fspath(folder)))
  probe = path
  while not probe.exists() and probe != probe.parent:
    probe = probe.parent
  if not probe.is_dir():
    raise OSError(errno.ENOTDIR, f"{probe} is a file, not a folder", str(path))
  if hasattr(os, "statvfs") and os.statvfs(probe).f_flag & getattr(os, "ST_RDONLY", 1):  # before access(): it
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(probe))  # says EACCES on a read-only file system too
  if not os.access(probe, os.W_OK | os.X_OK):
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(probe))


def format_value(v: Any, digits: int = 4) -> str:
  """A table cell: floats to `digits` significant digits, integers and other values as they print, missing or
  NaN values as n/a."""
  if v is None or (isinstance(v, (float, np.floating)) and math.isnan(v)):
    return "n/a"
  if isinstance(v, (float, np.floating)):
    return f"{v:.{digits}g}"
  return str(v)


def markdown_table(rows: Mapping[str, Mapping[str, Any]], keys: list[str], units: Mapping[str, str],
                   header: str = "model") -> str:
  """A markdown table, one row per named result, one column per key (its unit in brackets where `units` has
  one); cells by `format_value`."""
  head = [header] + [f"{k} [{units[k]}]" if k in units else k for k in keys]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  lines += ["| " + " | ".join([name] + [format_value(r.get(k)) for k in keys]) + " |" for name, r in rows.items()]
  return "\n".join(lines)
