"""The evaluator protocol: one kind of evaluation per class, built by name, run by the one batch loop.

After big_vision's `evaluators/`: each kind of evaluation is an `Evaluator` subclass in its own module, registered
under a name (`register_evaluator`, the registry `EVALUATORS`) and built for a config by `evaluator_for(config)`.
An evaluator says what one batch contributes and how the contributions add up; it never loops over batches:

  prepare(model, v)      what it needs to know of the variables before the first batch (optional: the ensemble
                         fits its members' precision scales here)
  inputs(batch, i)       the batch's arrays it reads, each with the batch on axis 0 (checked: a one-line error
                         naming the batch)
  step(model)            the device function (variables, *inputs[k] for k in step_keys) -> outputs, every leaf
                         with the batch on axis 0 (jitted, one per model)
  start()                empty accumulators
  update(rows, out, i)   adds one batch on the host: its input rows and its outputs, padded rows dropped
  result()               the `Result`

`Evaluator.run(model, variables, batches, mesh=...)` is `evaluate_batches`, the one batch loop of the package:
every batch is zero-padded to a multiple of the device count and sharded over the mesh's 'data' axis
(`sharding.shard_padded`), the variables are replicated; with several hosts each passes its own batches (its rows
of every global batch), `sharding.synced` keeps the hosts in step until every host's batches ran out, and every
host's `update` sees the rows of all of them.

Every evaluator returns a `Result`: its rows of numbers (one per model, member, fusion rule or ensemble size; a flat
dict each, None where a quantity does not apply) with their units, its table (`Result.table`, `Result.csv_rows`)
and its files (`Result.write`: results.json, results.csv, results.md and the evaluator's figures).

The evaluators: 'depth' (`pncnn_jax.evaluate.depth`, the KITTI / NYU metric sets and the synthetic scenes'
disturbed points), 'ensemble' and 'ensemble_calibration' (`pncnn_jax.ensemble.members`, members and fusion rules),
'flow' (registered by the extension `pncnn_jax.flow`), 'predictive' (registered by `pncnn_jax.baselines`:
MC-Dropout and deep ensembles over M). A registry miss imports the modules that register them
(`runtime.registry.Registry` providers and extensions): the core never imports an extension.
"""

from __future__ import annotations

import abc
import csv
import dataclasses
import json
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import jax
import numpy as np
from jax.sharding import Mesh

from pncnn_jax import from_config
from pncnn_jax.checkpoints import loader
from pncnn_jax.evaluate import report
from pncnn_jax.runtime import run_files, sharding
from pncnn_jax.runtime.registry import Registry

# A figure of a result: draw(path, name) writes the file at `path` (a temporary name with the file's suffix).
Figure = Callable[[pathlib.Path, str], None]
# Model settings a checkpoint decides when it records them: what its weights were trained as (the input
# confidence mask) and their shapes (the UNet widths); the others (conv precision, ...) are the config's.
WEIGHT_SETTINGS = ("mask_input_confidence", "unet_features")


@dataclasses.dataclass
class Result:
  """What an evaluator measured, the one result type of every evaluation.

  Attributes:
    evaluator: the registry name of the evaluator that measured it.
    rows: {row name: flat dict of numbers (None: does not apply)}, one row per model, member, fusion rule or
      ensemble size, in order; the first is the summary's.
    units: the unit of each quantity that has one ({'mae': 'mm', ...}).
    columns: the table's columns in order (those that some row has are shown).
    header: the table's first column ('model', 'member / fusion', 'M').
    details: what it measured beyond the rows (curves, panels, pooled arrays), by name; also readable as
      attributes (`result.sparsification`, `result.panels`): each evaluator's docstring lists its own.
    report: JSON-able fields that results.json carries beside the rows (the curves' numbers, what the uncertainty
      is).
    figures: {key: (file name, draw or None)}: the evaluator's figures (None: not drawn this time, an earlier
      evaluation's file of that name is removed).
  """

  evaluator: str
  rows: dict[str, dict[str, Any]]
  units: Mapping[str, str]
  columns: Sequence[str]
  header: str = "model"
  details: dict[str, Any] = dataclasses.field(default_factory=dict)
  report: dict[str, Any] = dataclasses.field(default_factory=dict)
  figures: dict[str, tuple[str, Figure | None]] = dataclasses.field(default_factory=dict)

  def __getattr__(self, key: str) -> Any:
    details = self.__dict__.get("details") or {}
    if key in details:
      return details[key]
    raise AttributeError(f"this {self.__dict__.get('evaluator', '')} result has no {key!r}; its details: "
                         f"{', '.join(sorted(details)) or 'none'}")

  def summary(self, row: str | None = None) -> dict[str, Any]:
    """A flat JSON-able dict of the scalars of `row` (default: the first): what the training loop logs."""
    name = next(iter(self.rows)) if row is None else row
    return dict(self.rows[name])

  def named(self, name: str | None) -> dict[str, dict[str, Any]]:
    """The rows, the only row of a single-row result called `name` (a model's name: 'pncnn@best')."""
    if name is not None and len(self.rows) == 1:
      return {name: self.summary()}
    return dict(self.rows)

  def table(self, name: str | None = None) -> str:
    """The markdown table of the rows (`report.format_rows`), with units."""
    return report.format_rows(self.named(name), self.columns, self.units, self.header)

  def csv_rows(self, name: str | None = None) -> list[list[Any]]:
    """[['name', key, ...], [row name, value ('' for None), ...], ...]: every key of every row, in order."""
    rows = self.named(name)
    keys = list(dict.fromkeys(k for r in rows.values() for k in r))
    return [["name", *keys]] + [[n, *("" if r.get(k) is None else r.get(k) for k in keys)] for n, r in rows.items()]

  def write(self, outdir: str | os.PathLike, name: str, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Writes `<outdir>/results.{json,csv,md}` and the figures, each atomically; returns {key: path} (keys 'json',
    'csv', 'md' and those of `figures` drawn). results.json is strict JSON (`report.strict_json`): {name,
    evaluator, units, results (the summary), rows (when there are several), the report fields, `extra`}."""
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = {k: str(outdir / f"results.{k}") for k in ("json", "csv", "md")}
    payload = {"name": name, "evaluator": self.evaluator, "units": dict(self.units), "results": self.summary(),
               **({"rows": self.rows} if len(self.rows) > 1 else {}), **self.report, **(dict(extra) if extra else {})}
    text = json.dumps(report.strict_json(payload), indent=2, allow_nan=False) + "\n"
    run_files.atomic_write(paths["json"], lambda t: t.write_text(text))

    def write_csv(tmp):
      with open(tmp, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(self.csv_rows(name))

    run_files.atomic_write(paths["csv"], write_csv)
    table = self.table(name) + "\n"
    run_files.atomic_write(paths["md"], lambda t: t.write_text(table))
    for key, (file, draw) in self.figures.items():
      path = outdir / file
      if draw is None:
        path.unlink(missing_ok=True)  # an earlier evaluation's, not this one's
        continue
      run_files.atomic_write(path, lambda t, draw=draw: draw(t, name),
                             tmp=path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}"))
      paths[key] = str(path)
    return paths


@dataclasses.dataclass(frozen=True)
class LoadedModel:
  """A checkpoint ready to evaluate: the model, its variables (leaves (K, ...) for an ensemble), the checkpoint's
  metadata (its first member's for an ensemble) and what it says it was trained as."""

  model: Any
  variables: Any
  meta: dict[str, Any]
  identity: dict[str, Any]


class Evaluator(abc.ABC):
  """One kind of evaluation (module docstring). Subclasses set `step_keys`, `header` and `files` and define
  `step`, `start`, `update` and `result`; most also `inputs` and `from_config`.

  Class attributes:
    name: the registry name (`register_evaluator` sets it).
    header: the first column of its table.
    files: the figure files its results write (an output folder holding them holds reports).
    step_keys: the inputs the device step takes, in order.
  """

  name: ClassVar[str] = ""
  header: ClassVar[str] = "model"
  files: ClassVar[tuple[str, ...]] = ()
  step_keys: tuple[str, ...] = ("sparse",)

  @classmethod
  def from_config(cls, config, **settings) -> Evaluator:
    """This evaluation of a config's model (eval.py, the training loop's validation); `settings` override."""
    return cls(loss_name=from_config.variant_loss(config), **settings)

  def load(self, config, checkpoint: str, *, workdir: str | None = None, expect: Mapping[str, Any] | None = None,
           allow_mismatch: bool = False, allow_fallback: bool = False, against: str = "--config") -> LoadedModel:
    """The checkpoint a config is evaluated with, through the one loader (`checkpoints.loader.load`: identity and
    finite-weight checks, any kind of checkpoint): the config's model, with the WEIGHT_SETTINGS the checkpoint
    records."""
    ckpt = loader.load(checkpoint, workdir=workdir, variant=config.variant, expect=dict(expect or {}),
                       allow_mismatch=allow_mismatch, against=against, allow_fallback=allow_fallback)
    return LoadedModel(model_for(config, ckpt.model_settings), ckpt.variables, ckpt.meta, ckpt.identity)

  def prepare(self, model, variables: Any, mesh: Mesh) -> None:
    """Called once before `step` with the evaluation's model, variables and mesh (default: nothing to do)."""

  def inputs(self, batch: Mapping[str, Any], index: int) -> dict[str, np.ndarray]:
    """The arrays of `batch` this evaluation reads, each (B, ...): by default those of `step_keys`."""
    return {k: np.asarray(batch[k]) for k in self.step_keys}

  @abc.abstractmethod
  def step(self, model) -> Callable[..., Any]:
    """(variables, *inputs of step_keys) -> outputs, a pytree whose leaves have the batch on axis 0."""

  @abc.abstractmethod
  def start(self) -> None:
    """Empties the accumulators (called by `run` before the first batch)."""

  @abc.abstractmethod
  def update(self, rows: Mapping[str, np.ndarray], out: Any, index: int) -> None:
    """Adds batch `index`: `rows` are its inputs (every host's rows with several hosts; with one host also the
    batch's other entries, e.g. its image names), `out` the step's outputs on the host, padded rows dropped."""

  @abc.abstractmethod
  def result(self) -> Result:
    """The `Result` of the batches added since `start`."""

  def run(self, model, variables: Any, batches: Iterable[Mapping[str, Any]], *, mesh: Mesh | None = None,
          max_batches: int = -1, progress: bool = False) -> Result:
    """Evaluates `model` with `variables` on `batches` (this host's): `evaluate_batches`."""
    return evaluate_batches(self, model, variables, batches, mesh=mesh, max_batches=max_batches, progress=progress)


def evaluate_batches(evaluator: Evaluator, model, variables: Any, batches: Iterable[Mapping[str, Any]], *,
                     mesh: Mesh | None = None, max_batches: int = -1, progress: bool = False) -> Result:
  """The batch loop of every evaluation (module docstring).

  Args:
    evaluator: what to measure.
    model, variables: the network and its variables (replicated over the mesh).
    batches: an iterable of this host's batches (e.g. `pncnn_jax.data.make_iterator` of an eval split).
    mesh: device mesh (default: all devices).
    max_batches: stop after this many batches (-1: all).
    progress: show a tqdm bar.
  """
  mesh = sharding.make_mesh() if mesh is None else mesh
  evaluator.prepare(model, variables, mesh)
  step = evaluator.step(model)
  variables = sharding.replicate(variables, mesh)
  evaluator.start()
  it = iter(batches)
  if progress:
    from tqdm.auto import tqdm  # pylint: disable=g-import-not-at-top
    it = tqdm(it, unit="batch", desc=f"eval ({evaluator.name})", dynamic_ncols=True)
  for i, batch in enumerate(sharding.synced(it)):  # several hosts: until every host's batches ran out
    if 0 <= max_batches <= i:
      break
    arrays = evaluator.inputs(batch, i)
    placed, keep = sharding.shard_padded(list(arrays.values()), mesh)
    on_device = dict(zip(arrays, placed))
    out = sharding.to_host(step(variables, *(on_device[k] for k in evaluator.step_keys)))
    out = jax.tree.map(lambda a: np.asarray(a)[keep], out)
    if jax.process_count() > 1:  # every host's rows, each padded (keep says which hold data)
      rows = {k: np.asarray(sharding.to_host(a))[keep] for k, a in on_device.items()}
    else:
      rows = {**{k: v for k, v in batch.items() if k not in arrays}, **arrays}
    evaluator.update(rows, out, i)
  return evaluator.result()


EVALUATORS: Registry[type[Evaluator]] = Registry(
    "evaluator", providers=("pncnn_jax.evaluate.depth", "pncnn_jax.ensemble.members"))


def register_evaluator(name: str, evaluator: type[Evaluator]) -> type[Evaluator]:
  """Registers an `Evaluator` class under `name` (its module does it on import); returns the class."""
  if not (isinstance(evaluator, type) and issubclass(evaluator, Evaluator)):
    raise ValueError(f"evaluator {name!r}: expected an Evaluator subclass, got {evaluator!r}")
  EVALUATORS.register(name, evaluator)
  evaluator.name = name
  return evaluator


def get_evaluator(name: str) -> type[Evaluator]:
  """`EVALUATORS[name]`; a ValueError naming the registered evaluators otherwise."""
  return EVALUATORS.lookup(name)


def evaluator_name(config) -> str:
  """Which evaluator evaluates a config: 'ensemble' for a config with an `ensemble` block, else its metric set's
  (`MetricSet.evaluator`: 'depth' for kitti and nyu, 'flow' for flow)."""
  return "ensemble" if "ensemble" in config else get_metric_set(config.metrics).evaluator


def evaluator_for(config, **settings) -> Evaluator:
  """The evaluator of a config's evaluation, built from the config (`Evaluator.from_config`)."""
  return get_evaluator(evaluator_name(config)).from_config(config, **settings)


def model_for(config, checkpoint_settings: Mapping[str, Any]):
  """The config's model with the WEIGHT_SETTINGS that a checkpoint records (`loader.Loaded.model_settings`)."""
  settings = from_config.model_settings(config)
  settings.update({k: checkpoint_settings[k] for k in WEIGHT_SETTINGS if k in checkpoint_settings})
  if "mask_input_confidence" in settings:
    settings["mask_input_confidence"] = bool(settings["mask_input_confidence"])
  return from_config.build_model({"variant": config.variant, "model": settings})


@dataclasses.dataclass(frozen=True)
class MetricSet:
  """What a config's `metrics` name stands for.

  evaluator: the evaluator of its configs (`EVALUATORS`). per_image: `per_image(depth, target) -> {metric: (B,)
  array}` for a depth metric set (the 'depth' evaluator scores each image with it), None otherwise. units: the
  unit of each metric that has one ({'mae': 'mm', ...}), written next to the numbers (the validation rows of
  metrics.jsonl, the training log lines, the tables). columns: the order of a table's columns. train_units: those
  of the training batch errors (losses.get_batch_errors) of the models this set evaluates (the train rows of
  metrics.jsonl)."""
  evaluator: str = "depth"
  per_image: Callable[[jax.Array, jax.Array], dict[str, jax.Array]] | None = None
  units: Mapping[str, str] = dataclasses.field(default_factory=dict)
  columns: Sequence[str] = ()
  train_units: Mapping[str, str] = dataclasses.field(default_factory=lambda: {"mae": "m", "rmse": "m"})


METRIC_SETS: Registry[MetricSet] = Registry("metric set", providers=("pncnn_jax.evaluate.depth",))  # config.metrics


def register_metric_set(name: str, metric_set: MetricSet) -> None:
  """Registers a `config.metrics` name (the depth sets in `pncnn_jax.evaluate.depth`; extensions theirs on import)."""
  METRIC_SETS.register(name, metric_set)


def get_metric_set(name: str) -> MetricSet:
  """`METRIC_SETS[name]`; a ValueError naming the valid metric sets otherwise."""
  if name not in METRIC_SETS:
    raise ValueError(f"metrics must be one of {sorted(METRIC_SETS)}, got {name!r}")
  return METRIC_SETS[name]


def format_table(rows: Mapping[str, Mapping[str, Any]], metric_set: str = "kitti", *,
                 keys: Sequence[str] | None = None, header: str = "model") -> str:
  """A markdown table, one row per named result (a model, an ensemble member or a fusion rule), in the units of
  `metric_set`. `keys`: the columns (default: those of the metric set's `columns` that some row has)."""
  ms = get_metric_set(metric_set)
  return report.format_rows(rows, ms.columns if keys is None else keys, ms.units, header, only_present=keys is None)
