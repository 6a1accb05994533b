"""Config -> model, loss, data streams: the one place that reads a config's fields (configs/*.py).

A config (`ml_collections.ConfigDict`, or the plain dict stored as a run's config.json / checkpoint metadata) names
a `variant` (a key of `models.VARIANTS`), an optional `loss` override, the model settings `model` (keyword
arguments of `models.PNCNN` besides the variant's, big_vision style), the `data` block and the recipe. Configs
written before the `model` block kept `nconv_init` and `precision` (the UNet convolution precision, now
`conv_precision`) at the top level; `model_settings` reads those too, so old runs load as they were trained.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import ml_collections

from pncnn_jax import data, losses
from pncnn_jax.data import build as data_build
from pncnn_jax.nn import models
from pncnn_jax.runtime import cli
from pncnn_jax.runtime.registry import Registry

# the PNCNN fields a config may set
MODEL_FIELDS = ("nconv_init", "conv_precision", "unet_features", "mask_input_confidence", "detach_variance_input")
# steps_per_call=-1 (auto): two unrolled steps per call on CPU for frames of at least this many pixels (KITTI, NYU).
# There they save XLA:CPU re-faulting the step's working memory on every call (~10 % per KITTI-size step,
# docs/develop/benchmarks-log.md); small crops and other backends run one step per call.
AUTO_TWO_STEPS_MIN_PIXELS = 100_000


def load_config(spec: str | os.PathLike) -> ml_collections.ConfigDict:
  """Loads `path/to/config.py[:arg]` as `--config` does (unlocked), e.g. 'configs/synthetic.py:pncnn', or a
  packaged config by name from any directory, e.g. 'synthetic:pncnn' (`runtime.cli.config_path`)."""
  path, _, arg = cli.config_path(spec).partition(":")
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
      "sensors": sensors_name(config, kind),
  }
  if data.pipeline.is_generated(d.dataset):  # rendered scenes: how many, and an optional cache
    out["synthetic_size"] = d.synthetic_size if kind == "train" else d.eval_synthetic_size
    if d.get("synthetic_cache_dir"):
      out["synthetic_cache_dir"] = d.synthetic_cache_dir
  if kind == "eval":
    out["shuffle"] = False
    out["drop_remainder"] = False
  return out


def sensors_name(config: Mapping[str, Any], kind: str) -> str:
  """The sensor or mixture of the training ('train') or evaluation ('eval') stream: `config.data.sensors.<kind>`
  ('' = the dataset's own sensor; configs written before the `sensors` block have none)."""
  block = config["data"].get("sensors") or {}
  return str(block.get(kind, "") or "")


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
  """A config value out of range (`pncnn_jax.training.config_fields.check_config`): the command lines print it in
  one line and exit with 2."""


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
