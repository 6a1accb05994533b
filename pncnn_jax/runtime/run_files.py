"""The files of a run directory besides its checkpoints: config.json, metrics.jsonl, TensorBoard events, and the
markdown tables of its evaluations (`markdown_table`).

`write_config` writes the config a run starts with and refuses a workdir that holds a run of another variant, or of
other settings (`config_differences` names the fields) unless the change is allowed; `MetricWriter` appends one JSON
object per line ({"step", "split", "time", ...metrics}) and mirrors the scalars to TensorBoard when tensorboardX is
installed. `WorkdirLock` makes a folder one writer's: an exclusive `flock` on the folder itself (the kernel drops it
when the process ends, however it ends, so a dead run never blocks the next), with `<folder>/RUNNING` naming the
holder (what it is, pid, host, start time) while it runs. train.py locks its workdir; predict, eval.py and the bag
command lock their output folder, and record which model wrote it in `<folder>/pncnn_writer.json` (`claim_output`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import math
import os
import pathlib
import socket
import time
from typing import Any, Callable, Mapping

import jax
import ml_collections
import numpy as np

log = logging.getLogger(__name__)

RUNNING_FILE = "RUNNING"


def atomic_write(path: str | os.PathLike, write: Callable[[pathlib.Path], Any], tmp: pathlib.Path | None = None
                 ) -> pathlib.Path:
  """Calls write(tmp) on a temporary name beside `path` (default `.<name>.<pid>.tmp`) and renames it to `path`
  (atomic on one file system): a file under its name is always complete, and a link planted under that name is
  replaced, never written through. The temporary file is removed if anything fails; the error propagates."""
  path = pathlib.Path(path)
  tmp = tmp or path.with_name(f".{path.name}.{os.getpid()}.tmp")
  try:
    write(tmp)
    os.replace(tmp, path)
  finally:
    with contextlib.suppress(OSError):
      tmp.unlink(missing_ok=True)
  return path


class WorkdirBusyError(ValueError):
  """Another process holds the folder (`WorkdirLock`): the commands print it in one line, exit status 2."""


class WorkdirLock:
  """One writer per folder: an exclusive, non-blocking `flock` on the folder (a training workdir, an output folder).

  `acquire()` takes it (or raises `WorkdirBusyError` naming the holder, its pid and host from `<folder>/RUNNING`)
  and writes RUNNING; `release()` removes RUNNING and drops the lock. The lock is on the folder, not on a file that
  could be replaced, and the kernel releases it when the process dies (SIGKILL included), so a stale RUNNING file of
  a dead run is simply overwritten. Readers (eval.py and predict reading a workdir) take no lock on what they read
  and are never blocked. On a file system without flock (some network mounts) the run goes on with a warning,
  unprotected. Usable as a context manager. `flag` names the folder in messages (`--workdir`, `--output`); `what`
  is the holder, written into RUNNING for the message a second writer gets ('training run', 'predict run', ...).
  """

  def __init__(self, workdir: str | os.PathLike, *, flag: str = "--workdir", what: str = "training run"):
    self.workdir = pathlib.Path(workdir)
    self.info = self.workdir / RUNNING_FILE
    self.flag, self.what = flag, what
    self._fd: int | None = None

  def acquire(self) -> WorkdirLock:
    fd = os.open(self.workdir, os.O_RDONLY)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      os.close(fd)
      if e.errno in (errno.EWOULDBLOCK, errno.EACCES):
        raise WorkdirBusyError(f"{self.flag} {self.workdir} is in use by another {self._holder()}; wait for it to "
                               f"end or choose another {self.flag}") from None
      log.warning("%s: cannot lock the workdir (%s); two runs here would not be stopped", self.workdir, e)
      return self
    self._fd = fd
    info = json.dumps({"what": self.what, "pid": os.getpid(), "host": socket.gethostname(),
                       "started": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n"
    try:
      atomic_write(self.info, lambda t: t.write_text(info))
    except OSError:
      self.release()
      raise
    return self

  def _holder(self) -> str:
    """'<what> (pid P on host H, started T)' of the holder, from RUNNING (the lock's own `what` if it says none)."""
    try:
      info = json.loads(self.info.read_text())
      return (f"{info.get('what', self.what)} (pid {info['pid']} on host {info['host']}, started "
              f"{info['started']})")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
      return f"{self.what} (no readable {self.info})"

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

  def write(self, step: int, split: str, values: Mapping[str, Any], units: Mapping[str, str] | None = None) -> None:
    """Appends {"step", "split", "time" [s since the epoch], **values, "units": {key: unit}}: `units` names the unit
    of each value that has one (a unitless value, and every value of a row written before units were, has none)."""
    if not self.enabled:
      return
    row = {"step": int(step), "split": split, "time": round(time.time(), 3)}
    row.update({k: _jsonable(v) for k, v in values.items()})
    if units:
      row["units"] = {k: units[k] for k in values if k in units}
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


# Fields that change how a run is watched or kept, not what it trains: a resume may change them freely.
BOOKKEEPING_FIELDS = ("progress_bar", "log_every_steps", "checkpoint_every_steps", "max_to_keep", "num_panels",
                      "eval_batch_size", "data.num_threads")


class ConfigChangedError(ValueError):
  """A rerun of a run with other settings than its config.json (`write_config`): one line naming the fields."""


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
  """The dotted names of the fields whose values differ between two nested dicts (`data.train_crop_height`), a
  field present in one only included; sorted."""
  names = []
  for key in sorted(set(old) | set(new)):
    a, b, name = old.get(key), new.get(key), f"{prefix}{key}"
    if isinstance(a, Mapping) and isinstance(b, Mapping):
      names += config_differences(a, b, f"{name}.")
    elif key not in old or key not in new or a != b:
      names.append(name)
  return names


def _lookup(tree: Mapping[str, Any], name: str, absent: Any = "(none)") -> Any:
  for part in name.split("."):
    tree = tree.get(part, absent) if isinstance(tree, Mapping) else absent
  return tree


def describe_differences(old: Mapping[str, Any], new: Mapping[str, Any], names: list[str], limit: int = 4) -> str:
  """'a.b: 1 -> 2, c: 'x' -> 'y'' for the first `limit` of `names`, then 'and N more'."""
  parts = [f"{n}: {_lookup(old, n)!r} -> {_lookup(new, n)!r}" for n in names[:limit]]
  return ", ".join(parts) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _read_json(path: pathlib.Path) -> Any:
  try:
    return json.loads(path.read_text())
  except (OSError, json.JSONDecodeError, UnicodeDecodeError):
    return None


def _changed_fields(old: Any, new: Mapping[str, Any], path: pathlib.Path,
                    defaults: Mapping[str, Any] | None = None) -> list[str]:
  """The differing fields but the bookkeeping ones, and but those the run's config.json predates (absent there)
  whose new value is their default in `defaults`: the run was trained as that default (a field added later)."""
  if not isinstance(old, dict) or old == new:
    return []
  if old.get("variant") != new.get("variant"):
    raise ValueError(f"{path} holds a run of variant {old.get('variant')!r}, but config.variant is "
                     f"{new.get('variant')!r}: use another --workdir")
  missing = object()

  def added_at_default(name):
    return (_lookup(old, name, missing) is missing and defaults is not None
            and _lookup(defaults, name, missing) == _lookup(new, name, missing) is not missing)

  return [n for n in config_differences(old, new) if n not in BOOKKEEPING_FIELDS and not added_at_default(n)]


def check_config_file(config: ml_collections.ConfigDict, workdir: pathlib.Path,
                      defaults: Mapping[str, Any] | None = None) -> list[str]:
  """The fields in which `<workdir>/config.json` differs from `config` (`config_differences`, the
  BOOKKEEPING_FIELDS left out, and the fields the file predates at the value `defaults` gives them; empty
  when there is no readable file); a ValueError naming the file if it holds a run of another variant. Reads only."""
  path = workdir / "config.json"
  return _changed_fields(_read_json(path), json.loads(config.to_json_best_effort()), path, defaults)


def check_config_change(config: ml_collections.ConfigDict, workdir: pathlib.Path, *, step: int,
                        allow_change: bool = False, defaults: Mapping[str, Any] | None = None) -> str:
  """Reading only: '' when `<workdir>/config.json` holds these settings (or there is no checkpoint yet, `step` 0),
  else the fields that differ as 'name: old -> new, ...' if `allow_change` (pass it to `write_config`), and a
  ConfigChangedError naming them if not (a ValueError for a run of another variant). A field the file predates
  (added to the configs after the run was written) is no change when its value is the one `defaults` (a nested
  dict, `training.config_fields.predating_values()`) says such a run was trained as."""
  path = workdir / "config.json"
  old, new = _read_json(path), json.loads(config.to_json_best_effort())
  changed = _changed_fields(old, new, path, defaults)
  if not changed or step <= 0:
    return ""
  what = describe_differences(old, new, changed)
  if not allow_change:
    raise ConfigChangedError(f"{path} holds the settings this run was trained with until step {step}, and "
                             f"{len(changed)} field(s) differ: {what}; pass --allow_config_change to continue it with "
                             "the new settings, or use another --workdir")
  return what


def write_config(config: ml_collections.ConfigDict, workdir: pathlib.Path, *, step: int = 0, changed: str = ""
                 ) -> None:
  """Writes `<workdir>/config.json` (atomically), after `check_config_change` allowed it. `changed` is what that
  check returned: the run continues from `step` with other settings (train.py --allow_config_change), and the
  config it was trained with until then is kept as `config.until_step_<step>.json`. Before the first checkpoint
  nothing was trained: the new config replaces the old."""
  path = workdir / "config.json"
  if changed:
    kept = workdir / f"config.until_step_{step}.json"
    os.replace(path, kept)
    log.warning("continuing the run from step %d with other settings (%s); the earlier config is kept as %s", step,
                changed, kept)
  text = json.dumps(json.loads(config.to_json_best_effort()), indent=2, sort_keys=True) + "\n"
  atomic_write(path, lambda t: t.write_text(text))


WRITER_FILE = "pncnn_writer.json"  # in an output folder: which command and model wrote it (`claim_output`)


def weights_digest(variables: Any) -> str:
  """sha256 (hex) of a tree of arrays: every leaf's path, dtype, shape and bytes, in the tree's order. Two
  checkpoints of the same weights have the same digest, whatever they were loaded from."""
  h = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(variables)[0]:
    a = np.ascontiguousarray(jax.device_get(leaf))
    h.update(f"{jax.tree_util.keystr(path)}|{a.dtype.str}|{a.shape}|".encode())
    h.update(a.tobytes())
  return h.hexdigest()


class OutputOwnedError(ValueError):
  """An output folder holds what another model or other settings wrote (`claim_output`)."""


def read_writer(folder: str | os.PathLike) -> dict[str, Any] | None:
  """The record of `<folder>/pncnn_writer.json`, or None when there is none (or it cannot be read)."""
  record = _read_json(pathlib.Path(folder) / WRITER_FILE)
  return record if isinstance(record, dict) else None


def write_writer(folder: str | os.PathLike, record: Mapping[str, Any]) -> None:
  """Writes `<folder>/pncnn_writer.json` atomically (a temporary name, then a rename), with the time."""
  text = json.dumps({**record, "written": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=2, sort_keys=True) + "\n"
  atomic_write(pathlib.Path(folder) / WRITER_FILE, lambda t: t.write_text(text))


def claim_output(folder: str | os.PathLike, record: Mapping[str, Any], *, flag: str = "--output",
                 overwrite: bool = False, has_outputs: bool = True) -> str | None:
  """Makes a (locked) output folder `record`'s: {'command', 'checkpoint' (for messages), 'model' and 'settings'
  (compared)}. A folder without a record and without outputs (`has_outputs` False), or with the same command, model
  and settings, is claimed; otherwise OutputOwnedError, one line naming the file, the fields that differ and the
  way out, unless `overwrite`: then the new record replaces the old, and the description of what was replaced is
  returned (None when nothing was). Writes the record atomically."""
  folder = pathlib.Path(folder)
  old = read_writer(folder)
  keys = ("command", "model", "settings")
  if old is None and not has_outputs:
    write_writer(folder, record)
    return None
  if old is not None and all(old.get(k) == record.get(k) for k in keys):
    if old != {**record, "written": old.get("written")}:
      write_writer(folder, record)
    return None
  if old is None:
    what = f"outputs without a record of the model that wrote them (no {folder / WRITER_FILE})"
  else:
    fields = config_differences({k: old.get(k) for k in keys}, {k: record.get(k) for k in keys})
    what = (f"the outputs of {old.get('command')} with checkpoint {old.get('checkpoint')!r} "
            f"({folder / WRITER_FILE}; differs in {', '.join(fields)})")
  if not overwrite:
    raise OutputOwnedError(f"{flag} {folder} holds {what}; pass --overwrite to replace them, or choose another "
                           f"{flag}")
  write_writer(folder, record)
  return what


def require_path(value: str | os.PathLike | None, flag: str) -> None:
  """A ValueError naming `flag` when a path was given empty (`--output ""`, `--workdir $UNSET`), which every path
  function would read as the current directory. None (not given) passes."""
  if value is not None and not os.fspath(value).strip():
    raise ValueError(f"{flag} is empty (an unset shell variable?); name the folder or file")


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
