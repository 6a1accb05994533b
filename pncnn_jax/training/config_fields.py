"""The one table of config fields and their constraints (every field of configs/base.py and the ensemble block),
and `check_config`, which train.py, eval.py and the training loop run before anything is created or compiled.

It sits above what it validates, so every allowed value comes from where it is defined: the variants, losses,
datasets and metric sets from their registries (extensions included), the crop modes from the data pipeline, the
NConv inits and convolution precisions from the models, the fusion rules and training member maps from the ensemble
code. A field's rule is also the error message: `config.<field>=<value>: must be <rule>`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import ml_collections

from pncnn_jax import data, evaluate, from_config, losses
from pncnn_jax.ensemble import fusion
from pncnn_jax.ensemble import members as ensemble_members
from pncnn_jax.nn import models
from pncnn_jax.runtime.cli import first_line

# The smallest crop a model can take: the NConvUNet halves the frame three times (scales 1/2, 1/4, 1/8), so a side
# of fewer than 8 pixels has no pixel left at scale 1/8.
MIN_CROP = 8

UNSET = object()  # Field.before of the fields every config.json has


def _names(reg) -> Callable[[Any], list[str]]:
  """The names of a registry when a config is checked (listing it loads the extensions: theirs are included)."""
  return lambda _config: sorted(reg)


@dataclasses.dataclass(frozen=True)
class Field:
  """The constraint of one config field.

  Attributes:
    kind: 'int', 'float' (an int is accepted), 'bool', 'str', 'str?' (a string or None), 'strs' (a non-empty
      tuple of strings) or 'ints' (a tuple of ints >= `lo`, `size` long unless None; () allowed when `size` is None).
    lo, hi: inclusive bounds (None: unbounded); `lo_open` / `hi_open` make them exclusive.
    also: extra values allowed beside the range, with their meaning, e.g. {-1: 'the whole split'}.
    choices: the allowed values, or a function config -> allowed values (registries; None: not checked).
    when: a function config -> whether the field is used (e.g. only for generated datasets); default always.
    training: only checked for training (`check_config(training=True)`).
    size: the length of an 'ints' tuple.
    note: appended to the message in brackets.
    before: for a field added to the configs after runs were written with them: the value such a run (its
      config.json without the field) was trained as; resuming it with that value is no change of settings
      (`predating_values`). UNSET for the fields every config.json has.
  """

  kind: str
  lo: float | None = None
  hi: float | None = None
  lo_open: bool = False
  hi_open: bool = False
  also: Mapping[Any, str] = dataclasses.field(default_factory=dict)
  choices: Any = None
  when: Callable[[Any], bool] | None = None
  training: bool = False
  size: int | None = None
  note: str = ""
  before: Any = dataclasses.field(default_factory=lambda: UNSET)

  def rule(self, config) -> str:
    """The allowed values, as the error message states them."""
    choices = self.choices(config) if callable(self.choices) else self.choices
    if choices is not None:
      text = ("a non-empty tuple of some of " if self.kind == "strs" else "one of ") + ", ".join(
          repr(c) for c in choices)
    else:
      noun = {"int": "an integer", "float": "a finite number", "bool": "True or False", "str": "a string",
              "str?": "a string or None", "strs": "a non-empty tuple of strings",
              "ints": f"a tuple of {self.size or 'any number of'} integers"}[self.kind]
      if self.lo is not None and self.hi is not None:
        text = (f"{noun} in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}")
      elif self.lo is not None:
        text = f"{noun} {'>' if self.lo_open else '>='} {self.lo:g}"
      elif self.hi is not None:
        text = f"{noun} {'<' if self.hi_open else '<='} {self.hi:g}"
      else:
        text = noun
    return (text + "".join(f", or {v!r} ({meaning})" for v, meaning in self.also.items())
            + (f" ({self.note})" if self.note else ""))

  def accepts(self, value, config) -> bool:
    if any(value == k and type(value) is type(k) for k in self.also):  # type: True is not 1
      return True
    choices = self.choices(config) if callable(self.choices) else self.choices
    if self.kind == "strs":
      return (isinstance(value, (tuple, list)) and len(value) > 0 and all(isinstance(v, str) for v in value)
              and (choices is None or all(v in choices for v in value)))
    if choices is not None and self.kind != "ints":
      return any(value == c and type(value) is type(c) for c in choices)
    if self.kind == "bool":
      return isinstance(value, bool)
    if self.kind in ("str", "str?"):
      return isinstance(value, str) or (value is None and self.kind == "str?")
    if self.kind == "ints":
      values = tuple(value) if isinstance(value, (tuple, list)) else None
      return (values is not None and (self.size is None or len(values) == self.size)
              and all(_is_int(v) and (self.lo is None or v >= self.lo) for v in values))
    if self.kind == "int" and not _is_int(value):
      return False
    if self.kind == "float" and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                     and math.isfinite(value)):
      return False
    return self._in_range(value)

  def _in_range(self, v) -> bool:
    if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
      return False
    return self.hi is None or (v < self.hi if self.hi_open else v <= self.hi)


def _is_int(v) -> bool:
  return isinstance(v, int) and not isinstance(v, bool)


def _generated(config) -> bool:
  return data.pipeline.is_generated(config.data.dataset)


def _crop_in_use(kind: str) -> Callable[[Any], bool]:
  return lambda config: config.data.get(f"{kind}_crop", "none") != "none"


def _splits(config):
  return data.pipeline.splits(config.data.dataset) or None


def _sensor_names(_config) -> list[str]:
  """The sensors and sensor mixtures of pncnn_jax.data.sensors (extensions' included)."""
  return data.sensors.names()


_CROP = dict(kind="int", lo=MIN_CROP, note="the model halves the frame three times")
FIELDS: dict[str, Field] = {
    # model
    "variant": Field("str", choices=_names(from_config.VARIANTS)),
    "loss": Field("str", choices=_names(losses.LOSSES), also={"": "the variant's published loss"}),
    "model.nconv_init": Field("str", choices=models.NCONV_INITS),
    "model.conv_precision": Field("str", choices=models.CONV_PRECISIONS),
    "model.mask_input_confidence": Field("bool"),
    "model.detach_variance_input": Field("bool"),
    "model.unet_features": Field("ints", lo=1, size=4),
    "seed": Field("int", lo=0),
    "init_from": Field("str", note="'' = from scratch", training=True, before=""),
    # data
    "data.dataset": Field("str", choices=_names(data.pipeline.DATASETS)),
    "data.data_dir": Field("str?"),
    "data.train_split": Field("str", choices=_splits, training=True),
    "data.train_crop": Field("str", choices=data.pipeline.CROPS, training=True),
    "data.train_crop_height": Field(**_CROP, when=_crop_in_use("train"), training=True),
    "data.train_crop_width": Field(**_CROP, when=_crop_in_use("train"), training=True),
    "data.eval_split": Field("str", choices=_splits),
    "data.eval_crop": Field("str", choices=data.pipeline.CROPS),
    "data.eval_crop_height": Field(**_CROP, when=_crop_in_use("eval")),
    "data.eval_crop_width": Field(**_CROP, when=_crop_in_use("eval")),
    "data.synthetic_size": Field("int", lo=1, when=_generated, training=True),
    "data.eval_synthetic_size": Field("int", lo=1, when=_generated),
    "data.synthetic_cache_dir": Field("str"),
    "data.nyu_num_samples": Field("int", lo=1),
    "data.num_threads": Field("int", lo=1),
    "data.sensors.train": Field("str", choices=_sensor_names, also={"": "the dataset's own sensor"}, training=True,
                                before=""),
    "data.sensors.eval": Field("str", choices=_sensor_names, also={"": "the dataset's own sensor"}, before=""),
    # evaluation
    "metrics": Field("str", choices=_names(evaluate.METRIC_SETS)),
    "eval_batch_size": Field("int", lo=1),
    "num_eval_batches": Field("int", lo=1, also={-1: "the whole split"}),
    "num_panels": Field("int", lo=0),
    # recipe
    "batch_size": Field("int", lo=1, training=True),
    "num_epochs": Field("int", lo=1, training=True),
    "steps_per_epoch": Field("int", lo=1, also={-1: "one pass over the split"}, training=True),
    "learning_rate": Field("float", lo=0, lo_open=True, training=True),
    "lr_decay_epochs": Field("int", lo=1, training=True),
    "lr_decay_factor": Field("float", lo=0, hi=1, lo_open=True, training=True),
    "grad_clip_norm": Field("float", lo=0, note="0: no clipping", training=True),
    "eval_every_steps": Field("int", lo=1, also={-1: "at the end of each epoch only"}, training=True),
    "steps_per_call": Field("int", lo=1, also={-1: "the platform's choice"}, training=True),
    "log_every_steps": Field("int", lo=1, training=True),
    "checkpoint_every_steps": Field("int", lo=1, also={-1: "after each validation only"}, training=True),
    "max_to_keep": Field("int", lo=1, training=True),
    "progress_bar": Field("bool", training=True),
    # ensembles (configs/ensemble_synthetic.py)
    "ensemble.num_members": Field("int", lo=1),
    "ensemble.seeds": Field("ints", lo=0),
    "ensemble.subset_fraction": Field("float", lo=0, hi=1, lo_open=True),
    "ensemble.train_member_map": Field("str", choices=ensemble_members.TRAINING_MEMBER_MAPS, training=True),
    "ensemble.rules": Field("strs", choices=fusion.FUSION_RULES),
    "ensemble.select_rule": Field("str", choices=lambda c: tuple(c.ensemble.rules)),
    "ensemble.mle_variance": Field("float", lo=0, lo_open=True),
    "ensemble.mle_steps": Field("int", lo=1),
    "ensemble.mle_learning_rate": Field("float", lo=0, lo_open=True),
    "ensemble.calibration_split": Field("str"),
}
# Beside the table, check_config checks what spans fields: a crop against its dataset's frames
# (`data.smallest_frame`), a sensor mixture against its dataset (`data.pipeline.check_sensors`: NYU has no lasers),
# ensemble.seeds against num_members, the calibration split against the evaluation split.


def predating_values() -> dict[str, Any]:
  """{field: value} as a nested dict for the fields added to the configs after runs were written (`Field.before`):
  what a run whose config.json lacks them was trained as (`runtime.run_files.check_config_change(defaults=)`)."""
  out: dict[str, Any] = {}
  for path, f in FIELDS.items():
    if f.before is UNSET:
      continue
    *parents, last = path.split(".")
    node = out
    for p in parents:
      node = node.setdefault(p, {})
    node[last] = f.before
  return out


def _get(config, path: str):
  value = config
  for k in path.split("."):
    if not hasattr(value, "get") or k not in value:
      return _MISSING
    value = value[k]
  return value


_MISSING = object()


def check_config(config: ml_collections.ConfigDict, *, training: bool = True) -> None:
  """Checks every field of `config` against `FIELDS` (and the crops against their dataset's frames), before
  anything is created or compiled: a `from_config.ConfigError` naming the field, its value and its allowed values
  otherwise. With `training=False` (eval.py) the training-only fields are not checked. Fields a config does not have
  (an old run's config.json) are skipped."""
  for path, f in FIELDS.items():
    if (f.training and not training) or (path.startswith("ensemble.") and "ensemble" not in config):
      continue
    value = _get(config, path)
    if value is _MISSING or (f.when is not None and not f.when(config)):
      continue
    if isinstance(value, list):
      value = tuple(value)
    if not f.accepts(value, config):
      raise from_config.ConfigError(f"config.{path}={value!r}: must be {f.rule(config)}")
  d = config.data

  def need(ok: bool, field: str, rule: str) -> None:
    if not ok:
      raise from_config.ConfigError(f"config.{field}={_get(config, field)!r}: must be {rule}")

  for kind in ("train", "eval") if training else ("eval",):
    if d.get(f"{kind}_crop", "none") != "none":
      frame = data.smallest_frame(d.dataset, d.get(f"{kind}_split"))
      for dim, limit in zip(("height", "width"), frame or ()):
        need(d.get(f"{kind}_crop_{dim}") <= limit, f"data.{kind}_crop_{dim}",
             f"<= {limit}: the {kind} crop {d[f'{kind}_crop_height']}x{d[f'{kind}_crop_width']} does not fit in the "
             f"{frame[0]}x{frame[1]} frames of {d.dataset}/{d.get(f'{kind}_split')}")
  for kind in ("train", "eval") if training else ("eval",):
    name = _get(config, f"data.sensors.{kind}")
    if isinstance(name, str) and name:
      try:
        data.pipeline.check_sensors(name, d.dataset)
      except ValueError as e:
        raise from_config.ConfigError(f"config.data.sensors.{kind}={name!r}: {first_line(e)}") from None
  if "ensemble" in config:
    e = config.ensemble
    if training:
      need(not config.get("init_from", ""), "init_from", "'' for an ensemble (its members start from their seeds)")
    need(not e.seeds or (len(e.seeds) == e.num_members and len(set(e.seeds)) == len(e.seeds)), "ensemble.seeds",
         f"() (seed + k) or {e.num_members} distinct integers (config.ensemble.num_members)")
    split = e.get("calibration_split", "")
    if split:  # calibrated fusion: scales fitted on a split the evaluation does not use
      splits = data.pipeline.splits(d.dataset)
      need(split in splits and split != d.eval_split, "ensemble.calibration_split",
           f"'' (off) or a split of {d.dataset} other than data.eval_split={d.eval_split!r} (one of "
           f"{[s for s in splits if s != d.eval_split]})")
