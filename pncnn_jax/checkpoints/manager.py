"""Checkpoints of pncnn_jax: the one module that talks to orbax.

Two kinds of checkpoint:
  * training runs: `Checkpointer(workdir)` keeps the latest `max_to_keep` steps AND the step with the lowest
    validation RMSE under `<workdir>/checkpoints/<step>/{state, meta, metrics}` (one orbax CheckpointManager
    with the preservation policy LatestN(max_to_keep) | BestN(rmse, n=1)).
  * model-only checkpoints (what `python -m pncnn_jax.convert` writes): `<dir>/{variables, meta}`, written by
    `save_variables` and read by `restore_variables`, which also takes a training workdir or step directory.

Atomicity: orbax writes every step into a temporary directory and renames it when complete, so a crash during a
save leaves at most a stray `<step>.orbax-checkpoint-tmp-*` directory; it is never listed as a step and is
removed when the next *writing* Checkpointer opens the run (`cleanup_tmp_directories`: the training process, at
its start). Readers (`restore_variables`, hence the loader, eval, predict) open the run with `read_only=True`,
which creates, deletes, moves and locks nothing: a running training's half-written step is left alone.

Failing soft: a step that cannot be restored (a truncated data file, garbled metadata) is a
`CheckpointCorruptError` naming the step, the file and the reason, and the newest step that does restore; with
`allow_fallback=True` (the --allow_fallback flag of train.py and eval.py; `loader.load(allow_fallback=True)`) that
step is restored instead, with a warning. A training that falls back moves the unrestorable later steps aside
(`<step>.unrestorable`), so that it can save those steps again. Readers restore only the model variables (`params`,
`batch_stats`), not the optimizer state.
"""

from __future__ import annotations

import logging
import math
import os
import pathlib
import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import preservation_policy as ocp_pp

from pncnn_jax.checkpoints import _orbax_workarounds
from pncnn_jax.runtime import run_files

PyTree = Any
CHECKPOINT_SUBDIR = "checkpoints"
STATE_ITEM, META_ITEM, VARIABLES_ITEM = "state", "meta", "variables"
MODEL_KEYS = ("params", "batch_stats")  # what a reader restores of a training state
log = logging.getLogger(__name__)


def step_folders(workdir: str | os.PathLike) -> list[int]:
  """The steps of `workdir`'s checkpoint folders (<workdir>/checkpoints/<step>), ascending, read from the file system
  alone: no orbax, nothing created, so cheap enough to ask before a run starts (will it resume, or start afresh?). A
  step being written has a temporary name and is not listed; one that was written but cannot be restored is
  (`Checkpointer.restore` says so)."""
  steps = pathlib.Path(workdir) / CHECKPOINT_SUBDIR
  return sorted(int(p.name) for p in steps.iterdir() if p.name.isdigit() and p.is_dir()) if steps.is_dir() else []


class CheckpointCorruptError(ValueError):
  """A checkpoint step that cannot be restored: the message names the step, the file, the reason and the newest
  intact step (the command lines print it in one line, exit status 2)."""


class CheckpointStructureError(ValueError):
  """A checkpoint that holds another model's tree (another variant or model setting): intact, but not this model's."""


def _abs_dir(path: str | os.PathLike, what: str) -> pathlib.Path:
  if path is None or str(path) == "":
    raise ValueError(f"{what}: empty path")
  return pathlib.Path(os.path.abspath(os.fspath(path)))


def _check_metadata(metadata: Any, what: str) -> dict[str, Any]:
  if metadata is None:
    return {}
  if not isinstance(metadata, Mapping):
    raise TypeError(f"{what}: metadata must be a JSON-serialisable dict, got {type(metadata).__name__}")
  return dict(metadata)


def _handler_registry() -> ocp.handlers.DefaultCheckpointHandlerRegistry:
  """The items of a training step and their handlers: STATE_ITEM a pytree of arrays (StandardSave/Restore),
  META_ITEM JSON. Registered up front (orbax's current API; `item_names=` is deprecated) so that a reader that
  has saved nothing can still read a step's tree metadata."""
  registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
  state, meta = _orbax_workarounds.StateHandler(), ocp.JsonCheckpointHandler()
  for item, handler, arg_types in ((STATE_ITEM, state, (ocp.args.StandardSave, ocp.args.StandardRestore)),
                                   (META_ITEM, meta, (ocp.args.JsonSave, ocp.args.JsonRestore))):
    for arg_type in arg_types:
      registry.add(item, arg_type, handler)
  registry.add(STATE_ITEM, ocp.args.PyTreeRestore, ocp.PyTreeCheckpointHandler())  # readers: the model keys only
  return registry


def _model_only_restore(saved_tree: PyTree, where: str) -> ocp.args.PyTreeRestore:
  """A partial restore of the model variables (MODEL_KEYS) of a saved training-state tree, onto the first local
  device: a reader does not read the optimizer state (2x the parameters for Adam)."""
  if not isinstance(saved_tree, Mapping) or "params" not in saved_tree:
    keys = sorted(saved_tree) if isinstance(saved_tree, Mapping) else type(saved_tree).__name__
    raise ValueError(f"{where}: the training state has no 'params' (found {keys})")
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  sub = {k: saved_tree[k] for k in MODEL_KEYS if saved_tree.get(k)}
  return ocp.args.PyTreeRestore(
      item=jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), sub),
      restore_args=jax.tree.map(lambda x: ocp.ArrayRestoreArgs(sharding=device), sub), partial_restore=True)


def _standard_restore(target: PyTree | None) -> ocp.args.StandardRestore:
  """Restores `target`; leaves without a usable sharding (None, or the saved one when it names devices this
  process does not have, e.g. a checkpoint of a multi-process run read by one process) go to the first local
  device."""
  return ocp.args.StandardRestore(target, fallback_sharding=jax.sharding.SingleDeviceSharding(jax.local_devices()[0]))


class Checkpointer:
  """Saves and restores a training run's state under `<workdir>/checkpoints`.

  Keeps the `max_to_keep` most recent steps and, when `keep_best`, also the step with the lowest validation
  `best_metric` (default 'rmse'; checkpoints saved without metrics only count as recent ones).

  Args:
    workdir: run directory (made absolute; created if missing).
    max_to_keep: number of most recent steps kept (>= 1).
    keep_best: also keep the best step by `best_metric` (lowest).
    best_metric: key of the `metrics` dict given to `save` that ranks steps (lower is better).
    async_save: write checkpoints in a background thread (call `wait()` before reading them elsewhere).
    read_only: a reader of someone else's run: no directory is created and no temporary folder removed (a
      training may be writing one); `save` is refused.
  """

  def __init__(self, workdir: str | os.PathLike, max_to_keep: int = 3, keep_best: bool = True,
               best_metric: str = "rmse", async_save: bool = True, read_only: bool = False):
    if not isinstance(max_to_keep, int) or max_to_keep < 1:
      raise ValueError(f"Checkpointer: max_to_keep must be an int >= 1, got {max_to_keep!r}")
    self.workdir = _abs_dir(workdir, "Checkpointer workdir")
    self.directory = self.workdir / CHECKPOINT_SUBDIR
    self.best_metric = best_metric
    policies: list[Any] = [ocp_pp.LatestN(n=max_to_keep)]
    if keep_best:
      policies.append(ocp_pp.BestN(get_metric_fn=self._metric, reverse=True, n=1,
                                   keep_checkpoints_without_metrics=False))
    options = ocp.CheckpointManagerOptions(
        best_fn=self._metric,  # records metrics with each step and defines best_step()
        best_mode="min",
        preservation_policy=ocp_pp.AnyPreservationPolicy(policies),
        create=not read_only,
        cleanup_tmp_directories=not read_only,
        read_only=read_only,
        save_interval_steps=0 if read_only else 1,  # orbax warns when a read-only manager keeps an interval
        enable_async_checkpointing=async_save and not read_only,
    )
    self.read_only = read_only
    if jax.process_count() > 1:  # a multi-process run: no barrier through gloo beside the training's collectives
      _orbax_workarounds.coordinator_barriers()
    if not read_only:
      logging.getLogger("absl").addFilter(_orbax_workarounds.DROP_ORBAX_ERRORS)  # once: filters are a set
    with _orbax_workarounds.quiet_read_only_notice():
      self._manager = ocp.CheckpointManager(self.directory, options=options, handler_registry=_handler_registry())

  def _metric(self, metrics: Mapping[str, Any]) -> float:
    return float(metrics[self.best_metric])

  def save(self, step: int, state: PyTree, metadata: Mapping[str, Any] | None = None,
           metrics: Mapping[str, Any] | None = None) -> None:
    """Saves `state` (a pytree of arrays) with JSON `metadata` at `step`; `metrics` (JSON, must hold a finite
    `best_metric`, e.g. validation RMSE) rank the step for `best_step()`."""
    step = int(step)
    if self.read_only:
      raise ValueError(f"Checkpointer.save(step={step}): {self.directory} was opened read-only")
    metadata = _check_metadata(metadata, f"Checkpointer.save(step={step})")
    if metrics is not None:
      value = metrics.get(self.best_metric) if isinstance(metrics, Mapping) else None
      if value is None or not math.isfinite(float(value)):
        raise ValueError(f"Checkpointer.save(step={step}): metrics must hold a finite {self.best_metric!r}, "
                         f"got {metrics!r}")
      metrics = {k: float(v) if hasattr(v, "__float__") else v for k, v in metrics.items()}
    if step in self.all_steps():
      raise ValueError(f"Checkpointer.save: step {step} already exists in {self.directory}")
    with _orbax_workarounds.raising_disk_errors():
      self._manager.save(
          step,
          args=ocp.args.Composite(**{STATE_ITEM: ocp.args.StandardSave(state),
                                     META_ITEM: ocp.args.JsonSave(metadata)}),
          metrics=metrics,
          force=True,
      )

  def all_steps(self) -> list[int]:
    """The complete (finalised) steps on disk, ascending."""
    return sorted(self._manager.all_steps())

  def latest_step(self) -> int | None:
    """The last complete step, or None."""
    return self._manager.latest_step()

  def best_step(self) -> int | None:
    """The saved step with the lowest `best_metric`, or None if no step was saved with metrics."""
    with_metrics = [s for s in self.all_steps() if self._manager.metrics(s) is not None]
    if not with_metrics:
      return None
    return min(with_metrics, key=lambda s: (self._metric(self._manager.metrics(s)), s))

  def metrics(self, step: int) -> dict[str, Any] | None:
    return self._manager.metrics(step)

  def _resolve(self, step: int | str) -> int:
    steps = self.all_steps()
    if step == "latest":
      resolved = self.latest_step()
    elif step == "best":
      resolved = self.best_step()
      if resolved is None and steps:
        raise ValueError(f"no checkpoint in {self.directory} was saved with metrics; cannot restore 'best'")
    elif isinstance(step, int):
      resolved = step
    else:
      raise ValueError(f"step must be an int, 'latest' or 'best', got {step!r}")
    if resolved is None or resolved not in steps:
      raise FileNotFoundError(f"no checkpoint for step {step!r} in {self.directory} (complete steps: {steps})")
    return resolved

  def restore(self, step: int | str = "latest", target: PyTree | None = None, *, allow_fallback: bool = False,
              model_only: bool = False) -> tuple[PyTree, dict[str, Any]]:
    """Restores (state, metadata) of `step` (an int, 'latest' or 'best').

    `target` gives the tree structure, dtypes and placement: concrete arrays or `jax.ShapeDtypeStruct`s with
    shardings (e.g. replicated `NamedSharding`); None restores the saved tree as saved. `model_only` restores only
    the model variables (MODEL_KEYS) of the saved tree, on the first local device (readers).

    A step that cannot be restored is a `CheckpointCorruptError` naming the file and the newest step that restores;
    with `allow_fallback`, that step's (state, metadata) instead, with a warning (metadata['step'] says which).
    """
    return self._with_fallback(self._resolve(step), lambda s: self._restore_step(s, target, model_only),
                               allow_fallback)

  def restore_metadata(self, step: int | str = "latest", *, allow_fallback: bool = False) -> dict[str, Any]:
    """The JSON metadata of `step` alone (variant, loss, dataset, config, ...), without reading the arrays; a step
    whose metadata cannot be read fails soft as in `restore`."""
    return self._with_fallback(self._resolve(step), self._restore_meta, allow_fallback)

  def _restore_meta(self, s: int) -> dict[str, Any]:
    try:
      with _orbax_workarounds.quiet_failed_restore():
        restored = self._manager.restore(s, args=ocp.args.Composite(**{META_ITEM: ocp.args.JsonRestore()}))
    except Exception as e:  # noqa: BLE001 (orbax, tensorstore and json raise many kinds)
      raise CheckpointCorruptError(_orbax_workarounds.describe_failure(self.directory / str(s), e)) from None
    return dict(restored[META_ITEM] or {})

  def _restore_step(self, s: int, target: PyTree | None, model_only: bool) -> tuple[PyTree, dict[str, Any]]:
    try:
      with _orbax_workarounds.quiet_failed_restore():  # item_metadata reads the OCDBT data files too
        if model_only:
          saved = self._manager.item_metadata(s)[STATE_ITEM]
          state_args = _model_only_restore(getattr(saved, "tree", saved), str(self.directory / str(s)))
        else:
          if target is not None:
            self._check_structure(s, target)
          state_args = _standard_restore(target)
        restored = self._manager.restore(
            s, args=ocp.args.Composite(**{STATE_ITEM: state_args, META_ITEM: ocp.args.JsonRestore()}))
    except (CheckpointStructureError, CheckpointCorruptError):
      raise
    except Exception as e:  # noqa: BLE001 (orbax, tensorstore and json raise many kinds)
      raise CheckpointCorruptError(_orbax_workarounds.describe_failure(self.directory / str(s), e)) from None
    return restored[STATE_ITEM], dict(restored[META_ITEM] or {})

  def _with_fallback(self, s: int, restore_one, allow_fallback: bool):
    """`restore_one(s)`, or on a CheckpointCorruptError the newest other step that restores (allow_fallback) or an
    error naming it."""
    try:
      return restore_one(s)
    except CheckpointCorruptError as e:
      reason = f"checkpoint step {s} in {self.directory} cannot be restored: {e}"
      for other in sorted((t for t in self.all_steps() if t != s), reverse=True):
        try:
          out = restore_one(other)
        except CheckpointCorruptError:
          continue
        if allow_fallback:
          log.warning("%s; using the newest intact step, %d, instead (--allow_fallback)", reason, other)
          return out
        raise CheckpointCorruptError(f"{reason}; the newest intact step is {other}: pass --allow_fallback to use it, "
                                     f"or remove {self.directory / str(s)}") from None
      raise CheckpointCorruptError(f"{reason}; no other step restores (steps: {self.all_steps()})") from None

  def set_aside(self, steps: list[int]) -> list[pathlib.Path]:
    """Renames step folders that cannot be restored to `<step>.unrestorable` (kept for inspection, no longer steps),
    so that a resumed training can save those steps again; returns the new paths."""
    if self.read_only:
      raise ValueError(f"Checkpointer.set_aside: {self.directory} was opened read-only")
    moved = []
    for step in steps:
      src = self.directory / str(step)
      dst = src.with_name(f"{step}.unrestorable")
      n = 1
      while dst.exists():
        dst, n = src.with_name(f"{step}.unrestorable{n}"), n + 1
      os.replace(src, dst)
      moved.append(dst)
    self._manager.reload()
    return moved

  def _check_structure(self, step: int, target: PyTree) -> None:
    """A one-line ValueError when the saved tree of `step` and `target` differ (orbax would print both trees)."""
    saved = self._manager.item_metadata(step)[STATE_ITEM]
    saved = getattr(saved, "tree", saved)
    if saved is None:
      return
    diff = structure_difference(saved, target)
    if diff:
      raise CheckpointStructureError(
          f"checkpoint {self.directory / str(step)} does not hold the model being restored: {diff} (a run of another "
          "variant or model setting; use another --workdir)")

  def wait(self) -> None:
    """Blocks until pending asynchronous saves are finalised on disk; a save that failed for want of room or
    permission is an OSError naming the file (`_orbax_workarounds.disk_error`)."""
    with _orbax_workarounds.raising_disk_errors():
      self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


# --------------------------------------------------------------------------------------------------------------
# Model-only checkpoints.


def save_variables(directory: str | os.PathLike, variables: PyTree, metadata: Mapping[str, Any] | None = None) -> str:
  """Writes model variables ({'params', 'batch_stats'?}) and JSON metadata to a new directory; returns its path.

  Raises FileExistsError if `directory` exists and is not empty.
  """
  path = _abs_dir(directory, "save_variables")
  if path.exists() and (not path.is_dir() or any(path.iterdir())):
    raise FileExistsError(f"save_variables: {path} already exists and is not an empty directory")
  if path.exists():
    path.rmdir()  # orbax creates it atomically
  metadata = _check_metadata(metadata, f"save_variables({path})")
  run_files.check_writable(path)  # an OSError naming the path, before orbax's own (a page of tensorstore text)
  with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as ckptr:
    ckptr.save(path, args=ocp.args.Composite(
        **{VARIABLES_ITEM: ocp.args.StandardSave(variables), META_ITEM: ocp.args.JsonSave(metadata)}))
  return str(path)


def _variables_from_state(state: Any, where: str) -> dict[str, Any]:
  if not isinstance(state, Mapping) or "params" not in state:
    keys = sorted(state) if isinstance(state, Mapping) else type(state).__name__
    raise ValueError(f"{where}: the training state has no 'params' (found {keys})")
  out = {"params": state["params"]}
  if state.get("batch_stats"):
    out["batch_stats"] = state["batch_stats"]
  return out


def restore_variables(path_or_dir: str | os.PathLike, step: int | str = "best", target: PyTree | None = None, *,
                      allow_fallback: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
  """Loads model variables and metadata from a model-only checkpoint, a training step directory, or a training
  workdir (its `step`: an int, 'latest' or 'best', falling back to 'latest' when no step has metrics).

  `target` (arrays or `jax.ShapeDtypeStruct`s with shardings, as for `Checkpointer.restore`) applies to
  model-only checkpoints; of a training state only 'params' and 'batch_stats' are read (not the optimizer state).
  A workdir's step that cannot be restored fails soft (`Checkpointer.restore`, `allow_fallback`).

  Returns:
    (variables, metadata): variables = {'params', 'batch_stats'?}.

  Raises:
    FileNotFoundError if the path does not exist; ValueError if it holds no pncnn_jax checkpoint;
    CheckpointCorruptError (a ValueError) for one that cannot be restored.
  """
  path = _abs_dir(path_or_dir, "restore_variables")
  if not path.exists():
    raise FileNotFoundError(f"checkpoint {path} does not exist")
  if not path.is_dir():
    raise ValueError(f"checkpoint {path} is a file; expected a pncnn_jax checkpoint directory (for official "
                     ".pth.tar/.npz files use pncnn_jax.checkpoints.loader.load or `python -m pncnn_jax.convert`)")
  if not os.access(path, os.R_OK | os.X_OK):
    raise PermissionError(f"checkpoint {path} is not readable")
  if (path / VARIABLES_ITEM).is_dir() or (path / STATE_ITEM).is_dir():  # a model-only checkpoint or a training step
    try:
      registry = _handler_registry()
      registry.add("metrics", ocp.args.JsonRestore, ocp.JsonCheckpointHandler())  # a training step's own item
      handler = ocp.CompositeCheckpointHandler(handler_registry=registry)
      with _orbax_workarounds.quiet_failed_restore(), ocp.Checkpointer(handler) as ckptr:
        if (path / VARIABLES_ITEM).is_dir():
          restored = ckptr.restore(path, args=ocp.args.Composite(
              **{VARIABLES_ITEM: _standard_restore(target), META_ITEM: ocp.args.JsonRestore()}))
          return dict(restored[VARIABLES_ITEM]), dict(restored[META_ITEM] or {})
        saved = ckptr.metadata(path).item_metadata[STATE_ITEM]
        restored = ckptr.restore(path, args=ocp.args.Composite(
            **{STATE_ITEM: _model_only_restore(getattr(saved, "tree", saved), str(path)),
               META_ITEM: ocp.args.JsonRestore()}))
    except Exception as e:  # noqa: BLE001 (orbax, tensorstore and json raise many kinds)
      if isinstance(e, ValueError) and "the training state has no 'params'" in str(e):
        raise
      why = _orbax_workarounds.describe_failure(path, e)
      raise CheckpointCorruptError(f"checkpoint {path} cannot be restored: {why}") from None
    return _variables_from_state(restored[STATE_ITEM], str(path)), dict(restored[META_ITEM] or {})
  workdir = path.parent if path.name == CHECKPOINT_SUBDIR else path
  if not (workdir / CHECKPOINT_SUBDIR).is_dir():
    raise ValueError(f"{path} is not a pncnn_jax checkpoint: expected {VARIABLES_ITEM}/ (model checkpoint), "
                     f"{STATE_ITEM}/ (a training step) or {CHECKPOINT_SUBDIR}/ (a training workdir)")
  ckpt = Checkpointer(workdir, async_save=False, read_only=True)  # a training may be writing here
  try:
    if step == "best" and ckpt.best_step() is None:
      step = "latest"
    state, meta = ckpt.restore(step, allow_fallback=allow_fallback, model_only=True)
  finally:
    ckpt.close()
  return _variables_from_state(state, str(path)), meta


def _leaf_paths(tree: PyTree) -> set[tuple[str, ...]]:
  """The leaves of a tree as name tuples ('params', 'conv', 'kernel'); dict keys, attributes and indices alike."""
  out = set()
  for path, _ in jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: x is None)[0]:
    names = re.findall(r"\['([^']*)'\]|\.(\w+)|\[(\d+)\]", jax.tree_util.keystr(path))
    out.add(tuple(next(n for n in group if n) for group in names))
  return out


def structure_difference(saved: PyTree, expected: PyTree, limit: int = 3) -> str:
  """'' when the two trees have the same leaf paths, else one line: the shortest subtrees only one of them has
  (e.g. "expected params/var_estimator, batch_stats/var_estimator, not in the checkpoint")."""
  a, b = _leaf_paths(saved), _leaf_paths(expected)
  if a == b:
    return ""

  def shortest(only: set, other: set) -> list[str]:
    prefixes = {p[:i] for p in other for i in range(1, len(p) + 1)}
    out = sorted({next(p[:i] for i in range(1, len(p) + 1) if p[:i] not in prefixes) for p in only})
    names = ["/".join(p) for p in out]
    return names[:limit] + ([f"... ({len(names)} in all)"] if len(names) > limit else [])

  parts = []
  if b - a:
    parts.append(f"expected {', '.join(shortest(b - a, a))}, not in the checkpoint")
  if a - b:
    parts.append(f"found {', '.join(shortest(a - b, b))}, not in the model")
  return "; ".join(parts)


def non_finite_leaves(tree: PyTree) -> list[str]:
  """The paths (e.g. "['params']['conv1']['w_p']") of the leaves of `tree` holding NaN or inf."""
  return [jax.tree_util.keystr(path) for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]
          if not np.isfinite(np.asarray(x)).all()]


def abstract_like(tree: PyTree, sharding: jax.sharding.Sharding | None = None) -> PyTree:
  """`jax.ShapeDtypeStruct`s of `tree`'s leaves, optionally all placed with `sharding` (a restore target)."""
  def leaf(x):
    dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
    return jax.ShapeDtypeStruct(np.shape(x), dtype, sharding=sharding)

  return jax.tree.map(leaf, tree)

