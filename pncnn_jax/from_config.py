"""Config -> model, loss, data streams: the one place that reads a config's fields (configs/*.py).

A config (`ml_collections.ConfigDict`, or the plain dict stored as a run's config.json / checkpoint metadata) names
a `variant` (a key of `models.VARIANTS`), an optional `loss` override, the model settings `model` (keyword
arguments of `models.PNCNN` besides the variant's, big_vision style), the `data` block and the recipe. Configs
written before the `model` block kept `nconv_init` and `precision` (the UNet convolution precision, now
`conv_precision`) at the top level; `model_settings` reads those too, so old runs load as they were trained.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import ml_collections

from pncnn_jax import data, losses
from pncnn_jax.data import build as data_build
from pncnn_jax.nn import models
from pncnn_jax.runtime import registry
from pncnn_jax.runtime.registry import Registry

# the PNCNN fields a config may set
MODEL_FIELDS = ("nconv_init", "conv_precision", "unet_features", "mask_input_confidence", "detach_variance_input")
# steps_per_call=-1 (auto): two unrolled steps per call on CPU for frames of at least this many pixels (KITTI, NYU).
# There they save XLA:CPU re-faulting the step's working memory on every call (~10 % per KITTI-size step,
# docs/BENCHMARKS.md); small crops and other backends run one step per call.
AUTO_TWO_STEPS_MIN_PIXELS = 100_000


def load_config(spec: str | os.PathLike) -> ml_collections.ConfigDict:
  """Loads `path/to/config.py[:arg]` as `--config` does (unlocked), e.g. 'configs/synthetic.py:pncnn'."""
  path, _, arg = str(spec).partition(":")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"config file {path} does not exist")
  mod_spec = importlib.util.spec_from_file_location(f"_pncnn_config_{pathlib.Path(path).stem}", path)
  module = importlib.util.module_from_spec(mod_spec)
  mod_spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


# variant name -> (its models.Variant record, builder(variant, **settings) -> model): the depth variants, and what
# extensions register (pncnn_jax.flow: the sparse optical-flow variants, configs/flow_synthetic.py).
VARIANTS: Registry[tuple[models.Variant, Callable[..., Any]]] = Registry("model variant")


def register_variants(variants: Mapping[str, models.Variant], builder: Callable[..., Any]) -> None:
  """Registers named model variants and the function that builds them: `builder(variant, **model_settings)`."""
  for name, record in variants.items():
    VARIANTS.register(name, (record, builder))


register_variants(models.VARIANTS, models.build_model)


def variant_record(config: Mapping[str, Any]) -> models.Variant:
  """The `models.Variant` record of `config.variant`; ValueError naming the known variants otherwise."""
  variant = config.get("variant")
  if variant not in VARIANTS:
    raise ValueError(f"config.variant={variant!r} is not a model variant; choose one of {sorted(VARIANTS)}")
  return VARIANTS[variant][0]


def variant_loss(config: Mapping[str, Any]) -> str:
  """The loss a config trains with: `config.loss`, or the variant's published loss when empty."""
  name = config.get("loss") or variant_record(config).loss
  losses.get_loss(name)  # a clear error for an unknown loss
  return name


def model_settings(config: Mapping[str, Any]) -> dict[str, Any]:
  """The PNCNN fields a config sets besides the variant, as `models.build_model` keyword arguments.

  From `config.model`; for configs saved before it, from the top-level `nconv_init` and `precision` (the old name
  of `conv_precision`). A config without a precision (saved before it existed) gets the model's default.
  """
  model = config.get("model")
  if model is not None:
    settings = dict(model)
  else:  # a config saved before the `model` block
    settings = {k: config[k] for k in ("nconv_init",) if k in config}
    if "precision" in config:
      settings["conv_precision"] = config["precision"]
    if config.get("mask_input_confidence"):
      settings["mask_input_confidence"] = True
  bad = sorted(set(settings) - set(MODEL_FIELDS))
  if bad:
    raise ValueError(f"config.model: unknown model settings {bad}; expected some of {MODEL_FIELDS}")
  if "unet_features" in settings:
    settings["unet_features"] = tuple(settings["unet_features"])
  return settings


@functools.lru_cache(maxsize=32)
def _cached_model(variant: str, settings: tuple[tuple[str, Any], ...]) -> models.PNCNN:
  _, builder = VARIANTS.lookup(variant)
  return builder(variant, **dict(settings))


def build_model(config: Mapping[str, Any]) -> models.PNCNN:
  """The config's model, one instance per setting: `model.apply` is a static part of a TrainState, and bound
  methods of equal but distinct modules compare unequal, which would make jitted steps recompile."""
  return _cached_model(config["variant"], tuple(sorted(model_settings(config).items())))


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
  if data.pipeline.is_generated(d.dataset):  # rendered scenes: how many, and an optional cache
    out["synthetic_size"] = d.synthetic_size if kind == "train" else d.eval_synthetic_size
    if d.get("synthetic_cache_dir"):
      out["synthetic_cache_dir"] = d.synthetic_cache_dir
  if kind == "eval":
    out["shuffle"] = False
    out["drop_remainder"] = False
  return out


def eval_iterator(config: ml_collections.ConfigDict):
  """This host's batches of the config's evaluation split (one pass, in order; eval_batch_size per host)."""
  per_host = max(1, config.eval_batch_size // jax.process_count())
  return data.make_iterator(data_config(config, "eval", batch_size=per_host, num_epochs=1))


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


def steps_per_call(config: ml_collections.ConfigDict) -> int:
  """Optimisation steps per jitted call: `config.steps_per_call`, or for -1 the platform's choice (2 on CPU for
  frames of >= AUTO_TWO_STEPS_MIN_PIXELS pixels, else 1; ensembles 1)."""
  n = config.get("steps_per_call", 1)
  if n == -1:
    pixels = config.data.train_crop_height * config.data.train_crop_width
    big = pixels >= AUTO_TWO_STEPS_MIN_PIXELS
    return 2 if jax.default_backend() == "cpu" and big and "ensemble" not in config else 1
  if not isinstance(n, int) or isinstance(n, bool) or n < 1:
    raise ValueError(f"config.steps_per_call must be a positive integer or -1 (auto), got {n!r}")
  return n


def member_seeds(config: ml_collections.ConfigDict) -> list[int]:
  """An ensemble config's member seeds: `config.ensemble.seeds`, or seed + k for k < num_members."""
  e = config.ensemble
  seeds = list(e.seeds) if e.seeds else [int(config.seed) + k for k in range(int(e.num_members))]
  if len(seeds) != int(e.num_members) or len(set(seeds)) != len(seeds):
    raise ValueError(f"config.ensemble.seeds must be {e.num_members} distinct ints, got {seeds}")
  return seeds


class ConfigError(ValueError):
  """A config value out of range (`check_config`): the command lines print it in one line and exit with 2."""


# --------------------------------------------------------------------------------------------------------------
# The one table of config fields and their constraints (every field of configs/base.py and the ensemble block).

# The smallest crop a model can take: the NConvUNet halves the frame three times (scales 1/2, 1/4, 1/8), so a side
# of fewer than 8 pixels has no pixel left at scale 1/8.
MIN_CROP = 8
# `jax.lax.Precision` names a UNet convolution may use (nn.models.PNCNN.conv_precision).
CONV_PRECISIONS = ("default", "high", "highest")
# pncnn_jax.ensemble.fusion.FUSION_RULES, a layer above this one (tests/test_configs.py keeps them equal).
FUSION_RULES = ("mean", "weighted_mean", "max_confidence", "mle")


def _registry(index_name: str) -> Callable[[Any], Any]:
  """The names of the registry `runtime.registry.INDEX[index_name]` (a registry defined above this layer, e.g. the
  metric sets of pncnn_jax.evaluate); None (no check) when nothing has created it yet."""
  def names(_config):
    reg = registry.INDEX.get(index_name)
    return None if reg is None else sorted(reg)
  return names


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


_CROP = dict(kind="int", lo=MIN_CROP, note="the model halves the frame three times")
FIELDS: dict[str, Field] = {
    # model
    "variant": Field("str", choices=lambda _: sorted(VARIANTS)),
    "loss": Field("str", choices=lambda _: sorted(losses.LOSSES), also={"": "the variant's published loss"}),
    "model.nconv_init": Field("str", choices=("published", "repo")),
    "model.conv_precision": Field("str", choices=CONV_PRECISIONS),
    "model.mask_input_confidence": Field("bool"),
    "model.detach_variance_input": Field("bool"),
    "model.unet_features": Field("ints", lo=1, size=4),
    "seed": Field("int", lo=0),
    # data
    "data.dataset": Field("str", choices=lambda _: sorted(data.pipeline.DATASETS)),
    "data.data_dir": Field("str?"),
    "data.train_split": Field("str", choices=_splits, training=True),
    "data.train_crop": Field("str", choices=("none", "center", "bottom", "random"), training=True),
    "data.train_crop_height": Field(**_CROP, when=_crop_in_use("train"), training=True),
    "data.train_crop_width": Field(**_CROP, when=_crop_in_use("train"), training=True),
    "data.eval_split": Field("str", choices=_splits),
    "data.eval_crop": Field("str", choices=("none", "center", "bottom", "random")),
    "data.eval_crop_height": Field(**_CROP, when=_crop_in_use("eval")),
    "data.eval_crop_width": Field(**_CROP, when=_crop_in_use("eval")),
    "data.synthetic_size": Field("int", lo=1, when=_generated, training=True),
    "data.eval_synthetic_size": Field("int", lo=1, when=_generated),
    "data.synthetic_cache_dir": Field("str"),
    "data.nyu_num_samples": Field("int", lo=1),
    "data.num_threads": Field("int", lo=1),
    # evaluation
    "metrics": Field("str", choices=_registry("metric_sets")),
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
    "ensemble.train_member_map": Field("str", choices=("vmap", "map"), training=True),
    "ensemble.rules": Field("strs", choices=FUSION_RULES),
    "ensemble.select_rule": Field("str", choices=lambda c: tuple(c.ensemble.rules)),
    "ensemble.mle_variance": Field("float", lo=0, lo_open=True),
    "ensemble.mle_steps": Field("int", lo=1),
    "ensemble.mle_learning_rate": Field("float", lo=0, lo_open=True),
    "ensemble.calibration_split": Field("str"),
}
# Beside the table, check_config checks what spans fields: a crop against its dataset's frames
# (`data.smallest_frame`), ensemble.seeds against num_members, the calibration split against the evaluation split.


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
  anything is created or compiled: a `ConfigError` naming the field, its value and its allowed values otherwise.
  With `training=False` (eval.py) the training-only fields are not checked. Fields a config does not have (an old
  run's config.json) are skipped."""
  for path, f in FIELDS.items():
    if (f.training and not training) or (path.startswith("ensemble.") and "ensemble" not in config):
      continue
    value = _get(config, path)
    if value is _MISSING or (f.when is not None and not f.when(config)):
      continue
    if isinstance(value, list):
      value = tuple(value)
    if not f.accepts(value, config):
      raise ConfigError(f"config.{path}={value!r}: must be {f.rule(config)}")
  d = config.data

  def need(ok: bool, field: str, rule: str) -> None:
    if not ok:
      raise ConfigError(f"config.{field}={_get(config, field)!r}: must be {rule}")

  for kind in ("train", "eval") if training else ("eval",):
    if d.get(f"{kind}_crop", "none") != "none":
      frame = data.smallest_frame(d.dataset, d.get(f"{kind}_split"))
      for dim, limit in zip(("height", "width"), frame or ()):
        need(d.get(f"{kind}_crop_{dim}") <= limit, f"data.{kind}_crop_{dim}",
             f"<= {limit}: the {kind} crop {d[f'{kind}_crop_height']}x{d[f'{kind}_crop_width']} does not fit in the "
             f"{frame[0]}x{frame[1]} frames of {d.dataset}/{d.get(f'{kind}_split')}")
  if "ensemble" in config:
    e = config.ensemble
    need(not e.seeds or (len(e.seeds) == e.num_members and len(set(e.seeds)) == len(e.seeds)), "ensemble.seeds",
         f"() (seed + k) or {e.num_members} distinct integers (config.ensemble.num_members)")
    split = e.get("calibration_split", "")
    if split:  # calibrated fusion: scales fitted on a split the evaluation does not use
      splits = data.pipeline.splits(d.dataset)
      need(split in splits and split != d.eval_split, "ensemble.calibration_split",
           f"'' (off) or a split of {d.dataset} other than data.eval_split={d.eval_split!r} (one of "
           f"{[s for s in splits if s != d.eval_split]})")


def check_data(config: ml_collections.ConfigDict, *, training: bool = True) -> None:
  """The KITTI / NYU splits a run reads (the training split when `training`, and the evaluation split) are built in
  config.data.data_dir; else `data.build.DatasetNotFoundError`: one line naming what is missing, where it looked and
  the build command. Called before anything is created (TFDS would otherwise start building there). Synthetic
  scenes need nothing."""
  d = config.data
  if data.pipeline.is_generated(d.dataset):  # rendered on the fly
    return
  for split in ([d.train_split] if training else []) + [d.eval_split]:
    data_build.check_prepared(d.dataset, d.data_dir, split)
