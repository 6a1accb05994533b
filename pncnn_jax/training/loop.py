"""The training loop: `train_and_evaluate(config, workdir)`, for a single model and for an ensemble.

One jitted step (pncnn_jax.training.step), data-parallel over every device of every host (pncnn_jax.runtime.sharding):
the global batch sharded on the mesh axis 'data', the TrainState replicated. Under `jit` the loss and the BatchNorm
statistics are means over the global batch, so the mathematical result does not depend on the device count; the
floating-point one does: the order of the summations (per device, then across devices) changes with it, and
training amplifies those last-bit differences (1- and 2-device runs of the same config differ visibly after ~16
steps). A run is bit-reproducible on the same device count, platform and version.

A config with an `ensemble` block (configs/ensemble_synthetic.py) trains K members in the same loop: the state
carries a leading member axis, the step is `training_ensemble.ensemble_train_step` (the single-model step vmapped over
the members), and the batches come from `training_ensemble.MemberBatches` (member k on its own subset); validation
evaluates every member and fusion rule, and the best checkpoint is the one with the lowest validation RMSE of
`config.ensemble.select_rule`.

A run lives in its workdir:
  config.json                    the config it was started with (a run of another variant here is an error)
  RUNNING                        while a training runs: its pid, host and start (pncnn_jax.runtime.run_files:
                                 one run per workdir, a second train.py there stops at once, readers are not held)
  metrics.jsonl                  one JSON object per line: {"step", "split": "train" | "val", ...metrics, "units"}:
                                 "units" maps each metric that has a unit to it (train rows: the loss's batch
                                 errors, depth in metres; val rows: the metric set's units, KITTI in mm)
  checkpoints/<step>/            orbax (pncnn_jax.checkpoints.manager): the latest `max_to_keep` and the best by
                                 validation RMSE; metadata holds the variant, config and data position
  tensorboard/                   event files, when tensorboardX is installed
  ensemble_eval.{json,md}        ensembles: the final evaluation of every member and fusion rule

Rerunning the same command resumes exactly: parameters, optimizer and BatchNorm state, step (hence the learning
rate, a function of the step) and the position of the data stream are restored from the latest checkpoint. A
latest step that cannot be restored (a truncated file) stops the run with one line naming the file and the newest
intact step; `allow_fallback` (train.py --allow_fallback) resumes from that step instead, setting the later ones
aside (`<step>.unrestorable`). Rerunning a finished run changes nothing and says where its results are.
After every step the loss, the gradients (and their norm), the parameters (and their norm) and the BatchNorm
statistics are checked (`training_step.state_is_finite`); a failure, or non-finite validation predictions, stops the
run with `FloatingPointError` before anything is saved, so every checkpoint passes the check and the latest is the
last good state. A checkpoint that fails it (written by an older version) is refused on resume, with the steps to
resume from instead.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import pathlib
import re
import time
from collections.abc import Callable
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh

from pncnn_jax import data, from_config
from pncnn_jax.checkpoints import identity as identity_lib
from pncnn_jax.checkpoints import loader, manager
from pncnn_jax.ensemble import members as ensemble_members
from pncnn_jax.evaluate import protocol
from pncnn_jax.evaluate import report as evaluate_report
from pncnn_jax.nn import models, prng
from pncnn_jax.runtime import cli, compile_cache, run_files, sharding
from pncnn_jax.training import config_fields
from pncnn_jax.training import ensemble as training_ensemble
from pncnn_jax.training import step as training_step

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------------------
# State


def optimizer_settings(config: ml_collections.ConfigDict, steps_per_epoch: int) -> dict[str, Any]:
  """The optimizer settings of `config` (`training_step.create_train_state`'s keyword arguments): the StepLR
  schedule, lr = learning_rate * lr_decay_factor^(epoch // lr_decay_epochs), and the gradient clipping."""
  return {"learning_rate": float(config.learning_rate), "steps_per_epoch": int(steps_per_epoch),
          "decay_epochs": int(config.lr_decay_epochs), "gamma": float(config.lr_decay_factor),
          "clip_norm": float(config.get("grad_clip_norm", 0.0))}


INIT_FROM_FILE = "init_from.json"  # <workdir>/init_from.json: the weights a fine-tuning run started from


def load_init_source(config: ml_collections.ConfigDict, workdir: pathlib.Path) -> loader.Loaded | None:
  """The weights `config.init_from` names (fine-tuning), loaded through `checkpoints.loader` (a shipped name, a
  workdir, a step folder) when the run starts afresh; None without `init_from` or when `workdir` holds a checkpoint
  (a resumed run continues from its own). Called before anything is written: a source that does not load, or holds
  another variant or an ensemble, is a ValueError naming it."""
  source = str(config.get("init_from", ""))
  if not source or manager.step_folders(workdir):
    return None
  try:
    loaded = loader.load(source)
  except (OSError, ValueError, KeyError) as e:  # a missing or unreadable checkpoint, an unknown shipped name
    raise ValueError(f"config.init_from={source!r}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                     ) from None
  if loaded.variant != config.variant:
    raise ValueError(f"config.init_from={source!r} holds a {loaded.variant} model, not the config's "
                     f"{config.variant}: fine-tune from weights of the same variant")
  if "ensemble_size" in loaded.meta:
    raise ValueError(f"config.init_from={source!r} is an ensemble checkpoint: name one member's weights")
  return loaded


def init_from(config: ml_collections.ConfigDict, state: training_step.TrainState, loaded: loader.Loaded,
              workdir: pathlib.Path) -> training_step.TrainState:
  """`state` with the parameters and BatchNorm statistics of `loaded` (`load_init_source`); Adam's moments, the step
  and the schedule stay `state`'s (fresh). The parameter shapes must be the config's model's (a ValueError
  otherwise). Process 0 records the source in <workdir>/INIT_FROM_FILE ({'init_from', 'identity', 'step',
  'weights_sha256'})."""
  source = str(config.init_from)
  want = {"params": state.params, **({"batch_stats": state.batch_stats} if state.batch_stats else {})}
  # By path, not by tree structure: a checkpoint's dicts may be another mapping type than the model's.
  by_path = {jax.tree_util.keystr(p): np.asarray(a) for p, a in
             jax.tree_util.tree_flatten_with_path({k: loaded.variables[k] for k in want if k in loaded.variables})[0]}
  wanted = {jax.tree_util.keystr(p): np.shape(w) for p, w in jax.tree_util.tree_flatten_with_path(want)[0]}
  if {k: a.shape for k, a in by_path.items()} != wanted:
    raise ValueError(f"config.init_from={source!r}: its parameters do not match the {config.variant} model of this "
                     f"config (other model settings, e.g. config.model.unet_features?)")
  got = jax.tree_util.tree_map_with_path(lambda p, w: jnp.asarray(by_path[jax.tree_util.keystr(p)], w.dtype), want)
  if jax.process_index() == 0:
    record = {"init_from": source, "identity": loaded.identity, "step": loaded.meta.get("step"),
              "weights_sha256": run_files.weights_digest(loaded.variables)}
    run_files.atomic_write(workdir / INIT_FROM_FILE,
                           lambda tmp: tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8"))
  log.warning("fine-tuning: starting from the weights of %s (%s)", source, loaded.variant)
  return state.replace(params=got["params"], batch_stats=got.get("batch_stats", state.batch_stats))


@functools.lru_cache(maxsize=16)
def _jitted_init(model: models.PNCNN):
  """`models.init_variables(model, key)` jitted once per model (it re-traces on every call)."""
  shape = (1, 16, 16, getattr(model, "input_channels", 1))  # sparse depth: 1 channel; flow (pncnn_jax.flow): C + 1
  return jax.jit(lambda key: model.init(prng.init_key(key), jnp.zeros(shape, jnp.float32), train=False))


def init_state(config: ml_collections.ConfigDict, steps_per_epoch: int) -> training_step.TrainState:
  """The initial TrainState of a single model (params from `config.seed`, Adam with the StepLR schedule)."""
  model = from_config.build_model(config)
  variables = _jitted_init(model)(jax.random.key(config.seed))  # as models.init_variables (prng.INIT_PRNG)
  state = training_step.create_train_state(model, variables, dropout_seed=config.seed,
                                           **optimizer_settings(config, steps_per_epoch))
  return state.replace(step=jnp.zeros((), jnp.int32))  # an array, so that checkpoints have a fixed structure


def init_ensemble_state(config: ml_collections.ConfigDict, steps_per_epoch: int) -> training_step.TrainState:
  """The initial stacked TrainState of an ensemble: member k from seed `from_config.member_seeds(config)[k]`."""
  model = from_config.build_model(config)
  hw = (config.data.train_crop_height, config.data.train_crop_width)
  variables = ensemble_members.init_ensemble(model, from_config.member_seeds(config), hw)
  return training_ensemble.create_ensemble_state(model, variables, **optimizer_settings(config, steps_per_epoch))


# --------------------------------------------------------------------------------------------------------------
# Jitted steps


def _jit_step(fn: Callable, mesh: Mesh, batch_axis: int):
  """`fn(state, batch)` jitted for the mesh: state replicated (donated), batch sharded on 'data' on `batch_axis`."""
  rep = sharding.replicated(mesh)
  return jax.jit(fn, in_shardings=(rep, sharding.batch_sharding(mesh, batch_axis)), out_shardings=(rep, rep),
                 donate_argnums=0)


@functools.lru_cache(maxsize=16)
def make_train_step(loss_name: str, mesh: Mesh):
  """`train_step` jitted for the mesh: state replicated (donated), batch sharded on 'data'."""
  return _jit_step(functools.partial(training_step.train_step, loss_name=loss_name), mesh, 0)


@functools.lru_cache(maxsize=16)
def make_train_steps(loss_name: str, mesh: Mesh):
  """`training_step.train_steps` (n steps per call) jitted for the mesh: batches (n, B, ...) sharded along B."""
  return _jit_step(functools.partial(training_step.train_steps, loss_name=loss_name), mesh, 1)


@functools.lru_cache(maxsize=16)
def make_ensemble_train_step(loss_name: str, mesh: Mesh, method: str = "vmap"):
  """`training_ensemble.ensemble_train_step` jitted for the mesh: member batches (K, B, ...) sharded along B."""
  return _jit_step(functools.partial(training_ensemble.ensemble_train_step, loss_name=loss_name, method=method), mesh,
                   1)


def next_boundary(done: int, *, every: list[int], last: int) -> int:
  """The first step count after `done` at which the loop must stop between calls: a multiple of one of `every`
  (epoch length, validation/checkpoint intervals; <= 0 = unused) or `last`."""
  return min([last] + [(done // e + 1) * e for e in every if e > 0])


def steps_in_call(done: int, steps_per_call: int, boundary: int) -> int:
  """How many steps the next call runs after `done` steps: `steps_per_call`, unless the next `boundary` would
  fall inside the call; then single steps up to it, so that validations and checkpoints happen at exactly their
  steps and only two programs (1 and `steps_per_call` steps) are ever compiled."""
  return steps_per_call if boundary - done >= steps_per_call else 1


# --------------------------------------------------------------------------------------------------------------
# Validation


def validate(config: ml_collections.ConfigDict, state: training_step.TrainState, mesh: Mesh) -> protocol.Result:
  """Evaluates a state (eval mode; a single model or an ensemble's stacked members) on the config's validation
  split (the first `num_eval_batches`) with the config's evaluator (`protocol.evaluator_for`: depth, flow,
  ensemble, ...), without panels."""
  evaluator = protocol.evaluator_for(config, **({} if "ensemble" in config else {"num_panels": 0}))
  return evaluator.run(from_config.build_model(config), training_step.variables_of(state),
                       from_config.eval_iterator(config), mesh=mesh, max_batches=config.num_eval_batches)


# --------------------------------------------------------------------------------------------------------------
# What differs between a single model and an ensemble


@dataclasses.dataclass
class _Job:
  """The parts of a run the loop calls: `next_batch(n)` (the sharded batch of the next call of n steps),
  `step(n)` (its jitted step), `flat(m)` (one step's metrics as a flat dict of floats), `validate(state)`
  ((row for metrics.jsonl, the summary to return)), the checkpoint metadata `extra_meta()` and the restore
  check `on_restore(meta)`."""

  state: training_step.TrainState
  steps_per_call: int
  next_batch: Callable[[int], dict[str, jax.Array]]
  step: Callable[[int], Callable]
  flat: Callable[[Mapping[str, np.ndarray]], dict[str, float]]
  validate: Callable[[training_step.TrainState], tuple[dict[str, Any], dict[str, Any]]]
  extra_meta: Callable[[], dict[str, Any]]
  on_restore: Callable[[dict[str, Any], int], None]
  start_at: Callable[[int], None]


def _single_job(config, mesh: Mesh, spe: int, loss_name: str) -> _Job:
  per_host = config.batch_size // jax.process_count()
  train_iter = data.make_iterator(from_config.data_config(config, "train", batch_size=per_host, num_epochs=None))
  per_call = from_config.steps_per_call(config)

  def next_batch(n):
    if n == 1:
      return sharding.shard_batch(next(train_iter), mesh)
    return sharding.shard_batches([next(train_iter) for _ in range(n)], mesh)

  def validate_state(state):
    val = validate(config, state, mesh).summary()
    return val, {"val": val}

  def on_restore(meta, _):
    if meta.get("data_iterator") is not None:
      train_iter.set_state(meta["data_iterator"])

  return _Job(
      state=init_state(config, spe), steps_per_call=per_call, next_batch=next_batch,
      step=lambda n: make_train_step(loss_name, mesh) if n == 1 else make_train_steps(loss_name, mesh),
      flat=lambda m: {k: float(v) for k, v in m.items() if k not in ("is_finite", "lr")},
      validate=validate_state, extra_meta=lambda: {"data_iterator": train_iter.get_state()},
      on_restore=on_restore, start_at=lambda _: None)


def _ensemble_job(config, mesh: Mesh, spe: int, loss_name: str, workdir: pathlib.Path) -> _Job:
  e = config.ensemble
  seeds, fraction = from_config.member_seeds(config), float(e.subset_fraction)
  if from_config.steps_per_call(config) != 1:
    raise ValueError("config.steps_per_call: ensembles run one step per call (-1 or 1)")
  per_host = config.batch_size // jax.process_count()
  source = training_ensemble.MemberBatches(from_config.data_config(config, "train", batch_size=1, num_epochs=1), seeds,
                                  fraction, per_host)
  total = spe * int(config.num_epochs)
  it = {}

  def validate_state(state):
    rows = validate(config, state, mesh).rows
    return dict(rows[e.select_rule]), {"val": dict(rows[e.select_rule]), "rows": rows}

  def on_restore(meta, latest):
    if meta.get("ensemble_size") != len(seeds) or meta.get("seeds") != seeds:
      raise ValueError(f"{workdir}: checkpoint {latest} is an ensemble of {meta.get('variant')!r} with seeds "
                       f"{meta.get('seeds')}, the config asks for {config.variant!r} with seeds {seeds}")

  if e.select_rule not in e.rules:
    raise ValueError(f"config.ensemble.select_rule={e.select_rule!r} is not one of config.ensemble.rules {e.rules}")
  return _Job(
      state=init_ensemble_state(config, spe), steps_per_call=1,
      next_batch=lambda n: sharding.shard_batch(next(it["it"]), mesh, batch_axis=1),
      step=lambda n: make_ensemble_train_step(loss_name, mesh, e.get("train_member_map", "vmap")),
      flat=lambda m: {f"{k}_{j}": float(v[j]) for k, v in m.items() if k not in ("is_finite", "lr")
                      for j in range(len(seeds))},
      validate=validate_state,
      extra_meta=lambda: {"ensemble_size": len(seeds), "seeds": seeds, "subset_fraction": fraction},
      on_restore=on_restore, start_at=lambda start: it.update(it=source.iterator(start, total)))


# --------------------------------------------------------------------------------------------------------------
# The loop


# One program, not one eager dispatch (and one tiny compile) per leaf shape and operation: ~70 of them for pNCNN.
_state_is_finite = jax.jit(training_step.state_is_finite)


def _last_good(ckpt: manager.Checkpointer) -> str:
  """What a divergence message tells the user: the last good step and how to go on."""
  steps = ckpt.all_steps()
  if not steps:
    return "Nothing was saved; lower config.learning_rate and rerun."
  return (f"Nothing was saved after the last good checkpoint, step {steps[-1]}; a rerun resumes from it (and "
          f"diverges again unless config.learning_rate is lowered). To resume from an earlier step, remove the later "
          f"step folders under {ckpt.directory} (kept steps: {steps}).")


def _resume(ckpt: manager.Checkpointer, make_job: Callable[[], _Job], config, workdir: pathlib.Path,
            mesh: Mesh, allow_fallback: bool = False, source: loader.Loaded | None = None
            ) -> tuple[_Job, training_step.TrainState]:
  """(job, the latest checkpoint's state), once its metadata says it was trained as `config` says (checked before
  the job is built) and its values are finite; without a checkpoint, (job, the initial state replicated). A latest
  step that cannot be restored is a CheckpointCorruptError, or with `allow_fallback` the newest intact step is
  resumed from and the later ones set aside."""
  latest = ckpt.latest_step()
  if latest is not None:
    meta = ckpt.restore_metadata(latest, allow_fallback=allow_fallback)
    identity_lib.check_identity(identity_lib.checkpoint_identity(meta), identity_lib.identity(config),
                              what=f"checkpoint {latest} in {workdir}", source="its metadata",
                              remedy="use another --workdir")
  job = make_job()
  if latest is None:
    state = job.state if source is None else init_from(config, job.state, source, workdir)
    return job, sharding.replicate(state, mesh)
  target = manager.abstract_like(training_step.state_to_tree(job.state), sharding.replicated(mesh))
  tree, meta = ckpt.restore(latest, target=target, allow_fallback=allow_fallback)
  state = training_step.tree_to_state(job.state, tree)
  # The schedule's settings come from the config, as on a fresh start (a checkpoint holds them too).
  settings = sharding.replicate(jax.device_get(training_step.step_lr_settings(job.state.opt_state)), mesh)
  state = state.replace(opt_state=training_step.with_step_lr_settings(state.opt_state, settings))
  restored = int(np.ravel(np.asarray(jax.device_get(state.step)))[0])
  if restored != latest:  # --allow_fallback: the later steps cannot be restored; make room to save them again
    moved = ckpt.set_aside([s for s in ckpt.all_steps() if s > restored]) if jax.process_index() == 0 else []
    log.warning("resuming from step %d; set aside the step(s) that cannot be restored: %s", restored,
                ", ".join(map(str, moved)))
  if not bool(jax.device_get(_state_is_finite(state))):  # an ensemble: all members at once
    earlier = [s for s in ckpt.all_steps() if s < restored]
    raise FloatingPointError(
        f"checkpoint {restored} in {workdir} holds non-finite or overflowing parameters or BatchNorm statistics: the "
        f"run diverged before it was saved. To resume from an earlier step, remove {ckpt.directory / str(restored)}"
        + (f" (earlier steps: {earlier})" if earlier else " (no earlier step: use a new --workdir)")
        + " and lower config.learning_rate.")
  job.on_restore(meta, restored)
  log.warning("resumed from step %d in %s", restored, workdir)
  return job, state


# The units of a train row of metrics.jsonl (and of the progress bar), with the metric set's `train_units`: those
# of the loss's batch errors (losses.get_batch_errors: depth MAE and RMSE in metres, flow EPE in pixels), not the
# validation metrics' (KITTI: mm).
TRAIN_UNITS = {"steps_per_sec": "step/s", "epoch": "epoch"}


def row_units(keys, units: Mapping[str, str]) -> dict[str, str]:
  """{key: unit} for the `keys` whose name (less an ensemble member's '_<k>' suffix: 'rmse_1') has a unit."""
  out = {}
  for k in keys:
    base = re.sub(r"_\d+$", "", k)
    if base in units:
      out[k] = units[base]
  return out


def _finished(ckpt: manager.Checkpointer, config, workdir: pathlib.Path, total_steps: int
              ) -> dict[str, Any] | None:
  """For a run whose latest checkpoint is its last step: {'step', 'finished': True, 'val' (its last validation
  row of metrics.jsonl, if any), 'best_step', 'results' (where they are)}; else None."""
  latest = ckpt.latest_step()
  if latest is None or latest < total_steps:
    return None
  meta = ckpt.restore_metadata(latest)
  identity_lib.check_identity(identity_lib.checkpoint_identity(meta), identity_lib.identity(config),
                              what=f"checkpoint {latest} in {workdir}", source="its metadata",
                              remedy="use another --workdir")
  val, metrics_file = {}, workdir / "metrics.jsonl"
  if metrics_file.exists():
    for line in metrics_file.read_text(encoding="utf-8").splitlines():
      try:
        row = json.loads(line)
      except json.JSONDecodeError:
        continue
      if isinstance(row, dict) and row.get("split") == "val" and row.get("step") == latest:
        val = row
  results = [str(metrics_file)] + [str(p) for p in sorted(workdir.glob("ensemble_eval.*"))]
  return {"step": latest, "finished": True, "val": val, "best_step": ckpt.best_step(), "results": results}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | os.PathLike,
                       *, stop_after_steps: int | None = None, allow_fallback: bool = False,
                       allow_config_change: bool = False, progress: bool | None = None) -> dict[str, Any]:
  """Trains `config` in `workdir` (resuming from its latest checkpoint), validating every epoch.

  Args:
    config: a config of configs/*.py; with an `ensemble` block, K members are trained together.
    workdir: the run directory (created if missing). One training at a time: process 0 locks it
      (`run_files.WorkdirLock`; another holder is a `run_files.WorkdirBusyError`).
    stop_after_steps: testing hook: return after this many steps of *this* call, as a kill would (no final save
      beyond the periodic ones).
    allow_fallback: resume from the newest intact checkpoint when the latest cannot be restored (with a warning).
    allow_config_change: continue a run (finished or not) whose config.json holds other settings than `config`
      (the fields of `run_files.check_config_file`): it resumes from its latest checkpoint and trains on to the new
      config's last step with the new settings; the old config.json is kept as `config.until_step_<step>.json`.
      Without it such a rerun is a `run_files.ConfigChangedError` naming the fields, before anything is written.
    progress: draw a progress bar on stderr (process 0); None: when `config.progress_bar` is set and stderr is a
      terminal (train.py --progress auto|on|off).

  Returns:
    the last validation summary ({'step', 'val': {...}}, for an ensemble also 'rows': every member and fusion
    rule), or {} if no validation ran; for a run that had finished already, {'step', 'finished': True, 'val' (its
    last validation row), 'best_step', 'results' (the files holding them)}.
  """
  run_files.require_path(workdir, "--workdir")  # "" would be the current directory
  config_fields.check_config(config)  # ConfigError (a ValueError) before anything is created
  from_config.check_data(config)  # DatasetNotFoundError, likewise
  workdir = pathlib.Path(os.path.abspath(os.fspath(workdir)))
  if workdir.exists() and not workdir.is_dir():
    raise ValueError(f"--workdir {workdir} is a file, not a folder")
  run_files.check_config_file(config, workdir, config_fields.predating_values())  # another variant: nothing written
  source = load_init_source(config, workdir)  # a fine-tuning run's weights: a bad source writes nothing either
  created = not workdir.exists()
  workdir.mkdir(parents=True, exist_ok=True)
  lock = run_files.WorkdirLock(workdir) if jax.process_index() == 0 else None
  try:
    if lock is not None:
      lock.acquire()
  except run_files.WorkdirBusyError:
    raise
  except BaseException:
    if created:
      workdir.rmdir()
    raise
  try:
    if progress is None:
      progress = bool(config.progress_bar) and cli.progress_enabled("auto")
    return _train(config, workdir, stop_after_steps, allow_fallback, allow_config_change, progress, source)
  finally:
    if lock is not None:
      lock.release()


def _train(config: ml_collections.ConfigDict, workdir: pathlib.Path, stop_after_steps: int | None,
           allow_fallback: bool, allow_config_change: bool, progress: bool, source: loader.Loaded | None
           ) -> dict[str, Any]:
  loss_name = from_config.variant_loss(config)
  mesh = sharding.make_mesh()
  sharding.check_batch_size(config.batch_size, mesh)
  is_main = jax.process_index() == 0
  is_ensemble = "ensemble" in config

  spe = from_config.steps_per_epoch(config)
  total_steps = spe * config.num_epochs
  ckpt = manager.Checkpointer(workdir, max_to_keep=config.max_to_keep, keep_best=True, best_metric="rmse")
  try:
    done = _finished(ckpt, config, workdir, total_steps)
    if done is not None:
      run_files.check_config_change(config, workdir, step=done["step"], allow_change=allow_config_change,
                                    defaults=config_fields.predating_values())
      log.warning("the run in %s had finished already (step %d of %d): nothing to do", workdir, done["step"],
                  total_steps)
      ckpt.close()
      return done
    job, state = _resume(ckpt, lambda: (_ensemble_job(config, mesh, spe, loss_name, workdir) if is_ensemble
                                        else _single_job(config, mesh, spe, loss_name)), config, workdir, mesh,
                         allow_fallback, source)
  except BaseException:
    ckpt.close()  # no orbax thread left behind to print after the message
    raise
  start = int(np.ravel(np.asarray(state.step))[0])  # (K,) steps for an ensemble, all equal
  try:  # every process checks (one line, before anything is written); process 0 writes
    changed = run_files.check_config_change(config, workdir, step=start, allow_change=allow_config_change,
                                            defaults=config_fields.predating_values())
  except BaseException:
    ckpt.close()
    raise
  if is_main:  # once the checkpoints are known to be of this config: a refused run leaves the workdir as it was
    run_files.write_config(config, workdir, step=start, changed=changed)
  compile_cache.enable(workdir)  # <workdir>/jax_cache unless the user chose (pncnn_jax/runtime/compile_cache.py)
  writer = run_files.MetricWriter(workdir, enabled=is_main)
  writer.drop_after(start)  # rows a killed run wrote after its last checkpoint: the resumed run rewrites them
  per_call = job.steps_per_call
  stop_at = total_steps if stop_after_steps is None else min(total_steps, start + stop_after_steps)
  job.start_at(start)

  def metadata(step: int) -> dict[str, Any]:  # identity: dataset, variant, loss, input_scale
    return {**identity_lib.identity(config), "step": step, "epoch": step / spe, "steps_per_epoch": spe,
            **job.extra_meta(), "config": json.loads(config.to_json_best_effort())}

  summary: dict[str, Any] = {}
  val_units = protocol.get_metric_set(config.metrics).units
  train_units = {**TRAIN_UNITS, **protocol.get_metric_set(config.metrics).train_units}
  bar = None
  if progress and is_main:
    from tqdm.auto import tqdm  # pylint: disable=g-import-not-at-top
    bar = tqdm(total=total_steps, initial=start, unit="step", dynamic_ncols=True, desc=config.variant)
  window: list[dict[str, float]] = []
  t_window = time.perf_counter()
  every = [spe, config.eval_every_steps, config.checkpoint_every_steps]
  try:
    step = start
    while step < stop_at:
      n = steps_in_call(step, per_call, next_boundary(step, every=every, last=stop_at))
      state, m = job.step(n)(state, job.next_batch(n))
      m = jax.device_get(m)
      per_step = [m] if n == 1 else [{k: v[i] for k, v in m.items()} for i in range(n)]
      for m in per_step:
        done = step + 1
        if not np.all(m["is_finite"]):
          members = (f" in members {np.flatnonzero(~np.asarray(m['is_finite'])).tolist()}" if is_ensemble else "")
          raise FloatingPointError(
              f"the run diverged at step {done}{members}: non-finite loss, gradient, parameter or BatchNorm statistic "
              f"(loss={np.asarray(m['loss']).tolist()}, grad_norm={np.asarray(m['grad_norm']).tolist()}, "
              f"param_norm={np.asarray(m['param_norm']).tolist()}) of {config.variant} in {workdir}. "
              + _last_good(ckpt))
        lr = float(np.ravel(m["lr"])[0])  # the learning rate of this step (every member has the same)
        window.append(job.flat(m) | {"lr": lr})
        if bar is not None:
          bar.update(1)
          err = "epe" if "epe" in m else "rmse"
          bar.set_postfix_str(f"loss={float(np.mean(m['loss'])):.4g}, train {err}={float(np.mean(m[err])):.3g} "
                              f"{train_units[err]}, lr={lr:.0e}")
        if done % config.log_every_steps == 0 or done == total_steps:
          dt = time.perf_counter() - t_window
          row = {k: float(np.mean([w[k] for w in window])) for k in window[0]}
          row.update(lr=lr, steps_per_sec=len(window) / dt, epoch=done / spe)
          writer.write(done, "train", row, row_units(row, train_units))
          window, t_window = [], time.perf_counter()
        step = done
      # Validation and checkpoints only after a call's last step: steps_in_call ends calls at their steps.
      is_epoch_end = done % spe == 0
      is_eval = is_epoch_end or (config.eval_every_steps > 0 and done % config.eval_every_steps == 0)
      if is_eval or done == total_steps:
        try:
          val, summary = job.validate(state)
        except FloatingPointError as e:
          raise FloatingPointError(f"the run diverged at step {done} of {config.variant} in {workdir}: validation: "
                                   f"{e}. " + _last_good(ckpt)) from e
        summary = {"step": done, **summary}
        writer.write(done, "val", val, row_units(val, val_units))
        if bar is not None:
          bar.write(f"[{config.variant}] step {done}: val "
                    + evaluate_report.format_values(val, ("mae", "rmse", "epe", "ause_pncnn"), val_units))
        if done not in ckpt.all_steps():
          ckpt.save(done, training_step.state_to_tree(state), metadata(done), metrics={"rmse": val["rmse"]}
                    if isinstance(val.get("rmse"), float) and math.isfinite(val["rmse"]) else None)
      elif config.checkpoint_every_steps > 0 and done % config.checkpoint_every_steps == 0:
        ckpt.save(done, training_step.state_to_tree(state), metadata(done))
  finally:
    if bar is not None:
      bar.close()
    ckpt.wait()
    ckpt.close()
    writer.close()
  if is_ensemble and is_main and summary.get("step") == total_steps:
    ensemble_members.write_ensemble_eval(summary["rows"], workdir, config.metrics)
  return summary
