"""The training loop: `train_and_evaluate(config, workdir)`.

One jitted `train_step` (pncnn_jax.train_step), data-parallel over every device of every host: a 1-D
`Mesh(jax.devices(), ('data',))`, the global batch sharded `P('data')` (each host feeds its own shard of the data
through `jax.make_array_from_process_local_data`), the TrainState replicated `P()`. Under `jit` the loss and the
BatchNorm statistics are means over the global batch, so the result does not depend on the device count.

A run lives in its workdir:
  config.json                    the config it was started with (rewritten on every start)
  metrics.jsonl                  one JSON object per line: {"step", "split": "train" | "val", ...metrics}
  checkpoints/<step>/            orbax (pncnn_jax.checkpointing): the latest `max_to_keep` and the best by
                                 validation RMSE; metadata holds the variant, config and data-iterator position
  tensorboard/                   event files, when tensorboardX is installed

Rerunning the same command resumes exactly: parameters, optimizer and BatchNorm state, step (hence the learning
rate, a function of the step) and the position of the data iterator are restored from the latest checkpoint.
A non-finite loss or gradient stops the run with `FloatingPointError`; nothing is saved after it, so the last
checkpoint is the last good state.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import pathlib
import time
from typing import Any, Iterator, Mapping

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from pncnn_jax import checkpointing, data, evaluate, models
from pncnn_jax import train_step as ts

log = logging.getLogger(__name__)
TRAIN_KEYS = ("sparse", "target")  # what the train step consumes from a batch


# --------------------------------------------------------------------------------------------------------------
# Config helpers


def load_config(spec: str | os.PathLike) -> ml_collections.ConfigDict:
  """Loads `path/to/config.py[:arg]` as `--config` does (unlocked), e.g. 'configs/synthetic.py:pncnn'."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  path, _, arg = str(spec).partition(":")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"config file {path} does not exist")
  mod_spec = importlib.util.spec_from_file_location(f"_pncnn_config_{pathlib.Path(path).stem}", path)
  module = importlib.util.module_from_spec(mod_spec)
  mod_spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


def variant_loss(config: ml_collections.ConfigDict) -> str:
  """The loss a config trains with: `config.loss`, or the variant's published loss when empty."""
  if config.variant not in models.VARIANTS:
    raise ValueError(f"config.variant={config.variant!r} is not a model variant; choose one of "
                     f"{sorted(models.VARIANTS)}")
  return config.loss or models.VARIANTS[config.variant].loss


def build_model(config: ml_collections.ConfigDict) -> models.PNCNN:
  return models.build_model(config.variant, **model_settings(config))


def model_settings(config: ml_collections.ConfigDict) -> dict[str, str]:
  """The PNCNN fields a config sets besides the variant, as `models.build_model` keyword arguments. `precision`
  only where the config has it: configs saved before it existed get the model's default (float32)."""
  settings = {"nconv_init": config.nconv_init}
  if "precision" in config:
    settings["precision"] = config.precision
  return settings


def data_config(config: ml_collections.ConfigDict, kind: str, *, batch_size: int,
                num_epochs: int | None) -> dict[str, Any]:
  """The `pncnn_jax.data.make_iterator` config of the training ('train') or evaluation ('eval') stream of this
  host (its shard of the data; `batch_size` is per host)."""
  d = config.data
  if kind not in ("train", "eval"):
    raise ValueError(f"kind must be 'train' or 'eval', got {kind!r}")
  out = {
      "dataset": d.dataset,
      "split": d.train_split if kind == "train" else d.eval_split,
      "crop": d.train_crop if kind == "train" else d.eval_crop,
      "crop_height": d.train_crop_height if kind == "train" else d.eval_crop_height,
      "crop_width": d.train_crop_width if kind == "train" else d.eval_crop_width,
      "batch_size": batch_size,
      "seed": config.seed,
      "num_epochs": num_epochs,
      "shard_index": jax.process_index(),
      "shard_count": jax.process_count(),
      "data_dir": d.data_dir,
      "num_threads": d.num_threads,
      "nyu_num_samples": d.nyu_num_samples,
  }
  if d.dataset == "synthetic":
    out["synthetic_size"] = d.synthetic_size if kind == "train" else d.eval_synthetic_size
  if kind == "eval":
    out["shuffle"] = False
    out["drop_remainder"] = False
  return out


def steps_per_epoch(config: ml_collections.ConfigDict) -> int:
  """`config.steps_per_epoch`, or the number of full global batches in one pass over the training split."""
  if config.steps_per_epoch > 0:
    return int(config.steps_per_epoch)
  per_host = config.batch_size // jax.process_count()
  n = len(data.make_dataset(data_config(config, "train", batch_size=per_host, num_epochs=1)))
  if n == 0:
    raise ValueError(f"the training split {config.data.train_split!r} has fewer examples than one batch "
                     f"({config.batch_size})")
  return n


# --------------------------------------------------------------------------------------------------------------
# Devices


def make_mesh(devices=None) -> Mesh:
  """A 1-D data-parallel mesh over `devices` (default: all devices of all hosts)."""
  devices = jax.devices() if devices is None else list(devices)
  return Mesh(np.asarray(devices), ("data",))


def check_batch_size(batch_size: int, mesh: Mesh, what: str = "config.batch_size") -> None:
  """Raises ValueError unless the global batch splits evenly over the mesh's devices and the hosts."""
  n = mesh.devices.size
  if batch_size <= 0 or batch_size % n:
    raise ValueError(f"{what}={batch_size} is not divisible by the number of devices ({n}): the global batch is "
                     f"split evenly over the 'data' axis; use a multiple of {n}")
  if batch_size % jax.process_count():
    raise ValueError(f"{what}={batch_size} is not divisible by the number of hosts ({jax.process_count()})")


def shard_batch(batch: Mapping[str, np.ndarray], mesh: Mesh, keys=TRAIN_KEYS) -> dict[str, jax.Array]:
  """This host's part of a batch -> global arrays sharded over the mesh's 'data' axis."""
  sharding = NamedSharding(mesh, P("data"))
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(batch[k])) for k in keys}


def shard_batches(batches: list[Mapping[str, np.ndarray]], mesh: Mesh, keys=TRAIN_KEYS) -> dict[str, jax.Array]:
  """This host's parts of n batches -> global (n, B, ...) arrays, batch axis sharded over 'data'."""
  sharding = NamedSharding(mesh, P(None, "data"))
  return {k: jax.make_array_from_process_local_data(sharding, np.stack([np.asarray(b[k]) for b in batches]))
          for k in keys}


def replicate(tree: Any, mesh: Mesh) -> Any:
  return jax.device_put(tree, NamedSharding(mesh, P()))


# --------------------------------------------------------------------------------------------------------------
# State


@functools.lru_cache(maxsize=16)
def _model_and_optimizer(variant: str, lr: float, spe: int, decay_epochs: int, factor: float, **settings: str):
  """One (model, optimizer) per setting: the TrainState's static fields, so that equal settings reuse the jitted
  step in one process instead of recompiling it. `settings`: `model_settings(config)`."""
  model = models.build_model(variant, **settings)
  return model, ts.make_optimizer(ts.step_lr_schedule(lr, spe, decay_epochs, factor))


@functools.lru_cache(maxsize=16)
def _jitted_init(model: models.PNCNN):
  """`models.init_variables(model, key)` jitted once per model (it re-traces on every call)."""
  return jax.jit(lambda key: model.init(key, jnp.zeros((1, 16, 16, 1), jnp.float32), train=False))


def init_state(config: ml_collections.ConfigDict, image_hw: tuple[int, int], total_steps_per_epoch: int
               ) -> ts.TrainState:
  """The initial TrainState (params from `config.seed`, Adam with the StepLR schedule)."""
  model, tx = _model_and_optimizer(config.variant, config.learning_rate, total_steps_per_epoch,
                                   config.lr_decay_epochs, config.lr_decay_factor, **model_settings(config))
  del image_hw  # the variables do not depend on the image size
  with jax.threefry_partitionable(False):  # as models.init_variables, which gives the same variables
    variables = _jitted_init(model)(jax.random.key(config.seed))
  state = ts.create_train_state(model, variables, tx)
  return state.replace(step=jnp.zeros((), jnp.int32))  # an array, so that checkpoints have a fixed structure


def state_to_tree(state: ts.TrainState) -> dict[str, Any]:
  """What a checkpoint stores: a plain dict (step, params, opt_state, batch_stats if any)."""
  tree = {"step": state.step, "params": state.params, "opt_state": state.opt_state}
  if state.batch_stats:
    tree["batch_stats"] = state.batch_stats
  return tree


def tree_to_state(state: ts.TrainState, tree: Mapping[str, Any]) -> ts.TrainState:
  return state.replace(step=tree["step"], params=tree["params"], opt_state=tree["opt_state"],
                       batch_stats=tree.get("batch_stats", state.batch_stats))


# --------------------------------------------------------------------------------------------------------------
# Logging


class MetricWriter:
  """Appends metrics to `<workdir>/metrics.jsonl` and, when tensorboardX is installed, to TensorBoard."""

  def __init__(self, workdir: pathlib.Path, enabled: bool = True):
    self.path = workdir / "metrics.jsonl"
    self.enabled = enabled
    self._tb = None
    if enabled:
      try:
        from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
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


def _write_config(config: ml_collections.ConfigDict, workdir: pathlib.Path) -> None:
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


# --------------------------------------------------------------------------------------------------------------
# The loop


@functools.lru_cache(maxsize=16)
def make_train_steps(loss_name: str, mesh: Mesh):
  """`train_step.train_steps` (n steps per call) jitted for the mesh: state replicated (donated), batches
  sharded on 'data' along their batch axis (axis 1)."""
  replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P(None, "data"))
  return jax.jit(functools.partial(ts.train_steps, loss_name=loss_name),
                 in_shardings=(replicated, sharded), out_shardings=(replicated, replicated), donate_argnums=0)


def next_boundary(done: int, *, every: list[int], last: int) -> int:
  """The first step count after `done` at which the loop must stop between calls: a multiple of one of `every`
  (epoch length, validation/checkpoint intervals; <= 0 = unused) or `last`."""
  return min([last] + [(done // e + 1) * e for e in every if e > 0])


def steps_in_call(done: int, steps_per_call: int, boundary: int) -> int:
  """How many steps the next call runs after `done` steps: `steps_per_call`, unless the next `boundary` would
  fall inside the call; then single steps up to it, so that validations and checkpoints happen at exactly their
  steps and only two programs (1 and `steps_per_call` steps) are ever compiled."""
  return steps_per_call if boundary - done >= steps_per_call else 1


@functools.lru_cache(maxsize=16)
def make_train_step(loss_name: str, mesh: Mesh):
  """`train_step` jitted for the mesh: state replicated (donated), batch sharded on 'data'."""
  replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
  return jax.jit(functools.partial(ts.train_step, loss_name=loss_name),
                 in_shardings=(replicated, sharded), out_shardings=(replicated, replicated), donate_argnums=0)


@functools.lru_cache(maxsize=16)
def _eval_fn(variant: str, loss_name: str, metric_set: str, **settings: str):
  """One jitted eval function per model (reused across validations and runs in one process)."""
  return evaluate.make_eval_fn(models.build_model(variant, **settings), loss_name, metric_set)


def validate(config: ml_collections.ConfigDict, state: ts.TrainState, mesh: Mesh,
             eval_fn=None) -> evaluate.EvalResult:
  """Evaluates the state (eval mode) on the config's validation split (the first `num_eval_batches`)."""
  per_host = max(1, config.eval_batch_size // jax.process_count())
  batches = data.make_iterator(data_config(config, "eval", batch_size=per_host, num_epochs=1))
  return evaluate.run_evaluation(
      build_model(config), ts.variables_of(state), batches, loss_name=variant_loss(config),
      metric_set=config.metrics, mesh=mesh, max_batches=config.num_eval_batches, eval_fn=eval_fn)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | os.PathLike,
                       *, stop_after_steps: int | None = None) -> dict[str, Any]:
  """Trains `config` in `workdir` (resuming from its latest checkpoint), validating every epoch.

  Args:
    config: a config of configs/*.py.
    workdir: the run directory (created if missing).
    stop_after_steps: testing hook: return after this many steps of *this* call, as a kill would (no final save
      beyond the periodic ones).

  Returns:
    the last validation summary ({'step', 'val': {...}}), or {} if no validation ran.
  """
  workdir = pathlib.Path(os.path.abspath(os.fspath(workdir)))
  workdir.mkdir(parents=True, exist_ok=True)
  loss_name = variant_loss(config)
  mesh = make_mesh()
  check_batch_size(config.batch_size, mesh)
  is_main = jax.process_index() == 0
  if is_main:
    _write_config(config, workdir)

  per_host = config.batch_size // jax.process_count()
  spe = steps_per_epoch(config)
  total_steps = spe * config.num_epochs
  hw = (config.data.train_crop_height, config.data.train_crop_width)
  state = init_state(config, hw, spe)
  schedule = ts.step_lr_schedule(config.learning_rate, spe, config.lr_decay_epochs, config.lr_decay_factor)
  train_iter = data.make_iterator(data_config(config, "train", batch_size=per_host, num_epochs=None))

  ckpt = checkpointing.Checkpointer(workdir, max_to_keep=config.max_to_keep, keep_best=True, best_metric="rmse")
  writer = MetricWriter(workdir, enabled=is_main)
  replicated = NamedSharding(mesh, P())
  latest = ckpt.latest_step()
  if latest is not None:
    target = checkpointing.abstract_like(state_to_tree(state), replicated)
    tree, meta = ckpt.restore(latest, target=target)
    state = tree_to_state(state, tree)
    if meta.get("variant") != config.variant:
      raise ValueError(f"checkpoint {latest} in {workdir} is of variant {meta.get('variant')!r}, the config asks "
                       f"for {config.variant!r}")
    if meta.get("data_iterator") is not None:
      train_iter.set_state(meta["data_iterator"])
    log.info("resumed from step %d in %s", latest, workdir)
  else:
    state = replicate(state, mesh)
  start = int(state.step)
  step_fn = make_train_step(loss_name, mesh)
  eval_fn = _eval_fn(config.variant, loss_name, config.metrics, **model_settings(config))

  def metadata(step: int) -> dict[str, Any]:
    return {"variant": config.variant, "loss": loss_name, "step": step, "epoch": step / spe,
            "steps_per_epoch": spe, "data_iterator": train_iter.get_state(),
            "config": json.loads(config.to_json_best_effort())}

  summary: dict[str, Any] = {}
  bar = None
  if config.progress_bar and is_main:
    from tqdm.auto import tqdm  # pylint: disable=g-import-not-at-top
    bar = tqdm(total=total_steps, initial=start, unit="step", dynamic_ncols=True, desc=config.variant)
  window: list[dict[str, float]] = []
  t_window = time.perf_counter()
  per_call = config.get("steps_per_call", 1)
  if not isinstance(per_call, int) or per_call < 1:
    raise ValueError(f"config.steps_per_call must be a positive integer, got {per_call!r}")
  steps_fn = make_train_steps(loss_name, mesh) if per_call > 1 else None
  stop_at = total_steps if stop_after_steps is None else min(total_steps, start + stop_after_steps)
  every = [spe, config.eval_every_steps, config.checkpoint_every_steps]
  try:
    step = start
    while step < stop_at:
      n = steps_in_call(step, per_call, next_boundary(step, every=every, last=stop_at))
      if n == 1:
        state, m = step_fn(state, shard_batch(next(train_iter), mesh))
        per_step = [jax.device_get(m)]
      else:
        state, m = steps_fn(state, shard_batches([next(train_iter) for _ in range(n)], mesh))
        m = jax.device_get(m)
        per_step = [{k: v[i] for k, v in m.items()} for i in range(n)]
      for m in per_step:
        done = step + 1
        if not bool(m["is_finite"]):
          good = ckpt.latest_step()
          raise FloatingPointError(
              f"non-finite loss or gradient at step {done} (loss={float(m['loss'])}, grad_norm="
              f"{float(m['grad_norm'])}) of {config.variant} in {workdir}: stopping. The last good checkpoint is "
              f"step {good} (nothing was saved after it); lower config.learning_rate or check the data.")
        lr = float(schedule(step))
        window.append({k: float(v) for k, v in m.items() if k != "is_finite"} | {"lr": lr})
        if bar is not None:
          bar.update(1)
          bar.set_postfix(loss=f"{float(m['loss']):.4g}", rmse=f"{float(m['rmse']):.3g}", lr=f"{lr:.0e}")
        if done % config.log_every_steps == 0 or done == total_steps:
          dt = time.perf_counter() - t_window
          row = {k: float(np.mean([w[k] for w in window])) for k in window[0]}
          row.update(lr=lr, steps_per_sec=len(window) / dt, epoch=done / spe)
          writer.write(done, "train", row)
          window, t_window = [], time.perf_counter()
        step = done
      # Validation and checkpoints only after a call's last step: steps_in_call ends calls at their steps.
      is_epoch_end = done % spe == 0
      is_eval = is_epoch_end or (config.eval_every_steps > 0 and done % config.eval_every_steps == 0)
      if is_eval or done == total_steps:
        res = validate(config, state, mesh, eval_fn)
        val = res.summary()
        writer.write(done, "val", val)
        summary = {"step": done, "val": val}
        if bar is not None:
          bar.write(f"[{config.variant}] step {done}: val " + ", ".join(
              f"{k}={val[k]:.4g}" for k in ("mae", "rmse", "ause_pncnn") if isinstance(val.get(k), float)))
        if done not in ckpt.all_steps():
          ckpt.save(done, state_to_tree(state), metadata(done), metrics={"rmse": val["rmse"]}
                    if isinstance(val.get("rmse"), float) and math.isfinite(val["rmse"]) else None)
      elif config.checkpoint_every_steps > 0 and done % config.checkpoint_every_steps == 0:
        ckpt.save(done, state_to_tree(state), metadata(done))
  finally:
    if bar is not None:
      bar.close()
    ckpt.wait()
    ckpt.close()
    writer.close()
  return summary
