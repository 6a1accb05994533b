"""The workarounds pncnn_jax needs around orbax, tensorstore and asyncio, in one private module beside
`pncnn_jax.checkpoints.manager` (their only user): each names the behaviour it works around, so that it can go
when orbax changes it.

  quiet_failed_restore     no "Event loop is closed" tracebacks from tensorstore after a failed restore
  disk_error, raising_disk_errors
                           tensorstore's write errors (a full disk, a read-only place) as the OSError they stand for
  DROP_ORBAX_ERRORS        orbax's own ERROR records of a failed background save (the save raises it anyway)
  describe_failure         the file and reason of a step that does not restore, from tensorstore's message
  StateHandler             StandardCheckpointHandler without replica-parallel saving (it compiles per array shape)
  quiet_read_only_notice   orbax's warning that a reader's directory is read-only
  coordinator_barriers     orbax's barriers as waits on the coordination service, not as gloo collective programs
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import os
import pathlib
import re

import jax
import orbax.checkpoint as ocp

_call_soon_threadsafe = asyncio.BaseEventLoop.call_soon_threadsafe


def _call_soon_threadsafe_unless_closed(loop, callback, *args, context=None):
  """`loop.call_soon_threadsafe`, but nothing (no RuntimeError) once the loop is closed: see `quiet_failed_restore`."""
  if loop.is_closed():
    return None
  return _call_soon_threadsafe(loop, callback, *args, context=context)


@contextlib.contextmanager
def quiet_failed_restore():
  """Around an orbax restore: no "RuntimeError: Event loop is closed" tracebacks when it fails.

  When one read of a restore fails (a truncated file), orbax raises and closes its event loop while tensorstore
  still completes the other reads; each late completion calls `call_soon_threadsafe` on the closed loop, and
  tensorstore prints the RuntimeError's traceback from its own thread, straight to the process's stderr: dozens of
  tracebacks before our one-line error, and asyncio logs "Task exception was never retrieved" for the abandoned
  reads. Within this context a completion for a closed loop is dropped instead (nothing awaits it any more) and
  the asyncio logger shows only critical records. After a failure both stay so for the rest of the process, since
  completions keep arriving after orbax has raised (the command ends with its one-line error soon after); after a
  success asyncio is as it was.
  """
  if asyncio.BaseEventLoop.call_soon_threadsafe is _call_soon_threadsafe_unless_closed:
    yield
    return
  asyncio_log = logging.getLogger("asyncio")  # "Task exception was never retrieved" of the abandoned reads
  level = asyncio_log.level
  asyncio.BaseEventLoop.call_soon_threadsafe = _call_soon_threadsafe_unless_closed
  asyncio_log.setLevel(logging.CRITICAL)
  yield  # an exception propagates from here and leaves both in place
  asyncio.BaseEventLoop.call_soon_threadsafe = _call_soon_threadsafe
  asyncio_log.setLevel(level)


_JSON_FILES = ("_CHECKPOINT_METADATA", "metadata", "_METADATA", "_sharding", "metrics", "process_0")


def disk_error(error: BaseException) -> OSError | None:
  """The OSError (errno, strerror, the file) a tensorstore/orbax write error stands for (a full disk: ENOSPC, a
  read-only place: EROFS / EACCES), or None. Their messages carry "[os_error_code='28']" and the file."""
  text = str(error)
  code = re.search(r"os_error_code='(\d+)'", text)
  if code is None:
    return None
  path = re.search(r'(?:Failed writing|local file|Error (?:writing|opening)[^"]*): "([^"]+)"', text) or re.search(
      r'"(/[^"]+)"', text)
  return OSError(int(code.group(1)), os.strerror(int(code.group(1))), path.group(1) if path else None)


class _DropOrbaxErrors(logging.Filter):
  """Drops orbax's own ERROR records (a traceback per failed background save): `manager.Checkpointer.save` and `wait`
  raise the error itself, which the command lines print in one line."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not (record.levelno >= logging.ERROR and "orbax" in record.pathname)


DROP_ORBAX_ERRORS = _DropOrbaxErrors()


def describe_failure(step_dir: pathlib.Path, error: BaseException) -> str:
  """'<file>: <reason>' for a step that failed to restore: the file tensorstore names (the last 'local file' of its
  message), else the first JSON file of the step that does not parse, else the error's first line."""
  text = str(error)
  files = list(re.finditer(r'local file "([^"]+)"', text))
  if files:
    reason = text[files[-1].end():].split(" [tensorstore_spec")[0].strip(" :") or text.splitlines()[0]
    return f"{files[-1].group(1)}: {reason} (truncated or corrupt)"
  for f in sorted(step_dir.rglob("*")) if step_dir.is_dir() else ():
    if f.is_file() and f.name in _JSON_FILES:
      try:
        json.loads(f.read_text())
      except (ValueError, UnicodeDecodeError) as e:
        return f"{f}: not valid JSON ({e})"
  first = (text.strip().splitlines() or [type(error).__name__])[0]
  return f"{step_dir}: {type(error).__name__}: {first[:300]}"


class StateHandler(ocp.StandardCheckpointHandler):
  """orbax's StandardCheckpointHandler (the same files, metadata and handler name), saving every jax.Array from one
  replica instead of replica-parallel.

  Replica-parallel saving, orbax's default on CPU and TPU (off on GPU), splits each replicated array among its
  devices: every array shape costs an eagerly compiled slice program on a process's first save (30 programs, ~1 s
  for an NCNN-Conf state on 2 host devices, then ~0.2 s a save), for states of a few MB where there is nothing to
  parallelise. tests/checkpoints/test_manager.py checks that a save compiles nothing and that stock orbax
  reads what this writes."""

  def __init__(self):
    super().__init__()
    arrays = copy.copy(ocp.type_handlers.get_type_handler(jax.Array))  # orbax's settings (metadata store, ...)
    arrays._use_replica_parallel = False  # pylint: disable=protected-access  (no public switch in orbax 0.12)
    registry = ocp.type_handlers.create_type_handler_registry(*(
        (ty, arrays if ty is jax.Array else ocp.type_handlers.get_type_handler(ty))
        for ty in ocp.type_handlers.supported_types()))
    # The PyTreeCheckpointHandler the parent builds (its default arguments), with this registry: the parent takes
    # no registry argument.
    self._impl = ocp.PyTreeCheckpointHandler(save_concurrent_gb=96, restore_concurrent_gb=96,
                                             type_handler_registry=registry)

  @classmethod
  def typestr(cls) -> str:
    return ocp.StandardCheckpointHandler.typestr()  # recorded in each step: readers need no pncnn_jax


@contextlib.contextmanager
def raising_disk_errors():
  """Re-raises an orbax/tensorstore write error that is a full disk or a read-only place as its OSError."""
  try:
    yield
  except Exception as e:  # noqa: BLE001 (tensorstore raises ValueError; orbax wraps some)
    err = disk_error(e)
    if err is None:
      raise
    raise err from None


@contextlib.contextmanager
def quiet_read_only_notice():
  """Drops orbax's 'Given directory is read only' warning: a reader opens a run read-only on purpose, and the
  command lines print one line per outcome."""
  logger = logging.getLogger("absl")
  drop = lambda record: not str(record.msg).startswith("Given directory is read only")  # noqa: E731
  logger.addFilter(drop)
  try:
    yield
  finally:
    logger.removeFilter(drop)


ORBAX_BARRIER_FLAG = "experimental_orbax_use_distributed_barrier"


def coordinator_barriers() -> None:
  """Makes orbax's barriers (those of save, restore and delete) wait on jax.distributed's coordination service
  instead of running a jax collective program (`multihost_utils.sync_global_devices`, orbax's default).

  On CPU such a program is a gloo collective on the same connections as the training step's, and XLA's gloo
  collectives carry no tag, so a barrier program and a step program must never overlap or run in another order in
  another process (orbax says as much of its collective barriers: "should not be called concurrently"). Through the
  coordination service a barrier is a key-value wait with a timeout, independent of the training's collectives, as
  orbax's background threads already wait. Needs the absl flags parsed (train.py and eval.py run under absl);
  elsewhere orbax keeps its default."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  if ORBAX_BARRIER_FLAG in flags.FLAGS and flags.FLAGS.is_parsed():
    flags.FLAGS[ORBAX_BARRIER_FLAG].value = True
