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
import math
import os
import pathlib
import sys
from collections.abc import Mapping
from typing import Any

import jax
import ml_collections

from pncnn_jax import data, flow, losses, models
from pncnn_jax.data import build as data_build

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


def variant_loss(config: Mapping[str, Any]) -> str:
  """The loss a config trains with: `config.loss`, or the variant's published loss when empty."""
  variant = config.get("variant")
  known = {**models.VARIANTS, **flow.FLOW_VARIANTS}  # depth, and sparse optical flow (configs/flow_synthetic.py)
  if variant not in known:
    raise ValueError(f"config.variant={variant!r} is not a model variant; choose one of {sorted(known)}")
  name = config.get("loss") or known[variant].loss
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
  if variant in flow.FLOW_VARIANTS:
    return flow.build_flow_model(variant, **dict(settings))
  return models.build_model(variant, **dict(settings))


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
  if d.dataset in ("synthetic", "flow_synthetic"):
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


def check_config(config: ml_collections.ConfigDict, *, training: bool = True) -> None:
  """Checks the ranges a run needs before it starts (ConfigError naming the field otherwise): learning_rate > 0
  and finite, grad_clip_norm >= 0, num_epochs >= 1 and batch_size >= 1 (training), eval_batch_size >= 1, crop
  sizes >= 1 for the crops in use and within the smallest frame of their split (`data.smallest_frame`)."""
  def need(ok: bool, field: str, rule: str) -> None:
    if not ok:
      value = config
      for k in field.split("."):
        value = value.get(k) if hasattr(value, "get") else None
      raise ConfigError(f"config.{field}={value!r}: must be {rule}")

  def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)

  d = config.data
  if training:
    lr = config.learning_rate
    need(isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0, "learning_rate", "a finite number > 0")
    clip = config.get("grad_clip_norm", 0.0)
    need(isinstance(clip, (int, float)) and math.isfinite(clip) and clip >= 0, "grad_clip_norm",
         "a finite number >= 0 (0: no clipping)")
    need(is_int(config.num_epochs) and config.num_epochs >= 1, "num_epochs", "an integer >= 1")
    need(is_int(config.batch_size) and config.batch_size >= 1, "batch_size", "an integer >= 1")
    need(is_int(config.steps_per_epoch) and (config.steps_per_epoch >= 1 or config.steps_per_epoch == -1),
         "steps_per_epoch", "an integer >= 1, or -1 (one pass over the split)")
  need(is_int(config.eval_batch_size) and config.eval_batch_size >= 1, "eval_batch_size", "an integer >= 1")
  for kind in ("train", "eval") if training else ("eval",):
    if d.get(f"{kind}_crop", "none") != "none":
      for dim in ("height", "width"):
        v = d.get(f"{kind}_crop_{dim}")
        need(is_int(v) and v >= 1, f"data.{kind}_crop_{dim}", f"an integer >= 1 (the {kind} crop is "
             f"{d.get(f'{kind}_crop')!r})")
      frame = data.smallest_frame(d.dataset, d.get(f"{kind}_split"))
      for dim, limit in zip(("height", "width"), frame or ()):
        need(d.get(f"{kind}_crop_{dim}") <= limit, f"data.{kind}_crop_{dim}",
             f"<= {limit}: the {kind} crop {d[f'{kind}_crop_height']}x{d[f'{kind}_crop_width']} does not fit in the "
             f"{frame[0]}x{frame[1]} frames of {d.dataset}/{d.get(f'{kind}_split')}")
  split = config.get("ensemble", {}).get("calibration_split", "")
  if split:  # calibrated fusion: scales fitted on a split the evaluation does not use
    splits = data.pipeline.SPLITS.get(d.dataset, ())
    need(split in splits and split != d.eval_split, "ensemble.calibration_split",
         f"'' (off) or a split of {d.dataset} other than data.eval_split={d.eval_split!r} (one of "
         f"{[s for s in splits if s != d.eval_split]})")


# --------------------------------------------------------------------------------------------------------------
# Checkpoint identity: what a model was trained as, recorded with every checkpoint and checked where it is used.

IDENTITY_FIELDS = ("dataset", "variant", "loss", "input_scale")
# Input units per metre of every pncnn_jax model: the networks take depth in metres, 0 = no measurement (the
# data pipeline decodes KITTI PNGs / 256 and NYU depth in metres).
INPUT_SCALE = 1.0
DATASET_ALIASES = {"nyudepthv2": "nyu_depth"}  # dataset names of the official args -> ours


def identity(config: Mapping[str, Any]) -> dict[str, Any]:
  """What a run of `config` trains, as recorded in its checkpoints' metadata: {dataset, variant, loss,
  input_scale}."""
  return {"dataset": config["data"]["dataset"], "variant": config["variant"], "loss": variant_loss(config),
          "input_scale": INPUT_SCALE}


def checkpoint_identity(meta: Mapping[str, Any]) -> dict[str, Any]:
  """The identity of a pncnn_jax checkpoint from its metadata (training step, converted model or shipped model);
  checkpoints written before the fields existed fall back to their stored config. Unknown fields are None."""
  run_config = meta.get("config") or {}
  dataset = meta.get("dataset") or (run_config.get("data") or {}).get("dataset")
  variant = meta.get("variant")
  loss = meta.get("loss") or run_config.get("loss") or (models.VARIANTS[variant].loss if variant in models.VARIANTS
                                                         else None)
  return {"dataset": DATASET_ALIASES.get(dataset, dataset), "variant": variant, "loss": loss,
          "input_scale": meta.get("input_scale", INPUT_SCALE)}


class IdentityMismatchError(ValueError):
  """A checkpoint trained as something else than what it is used for (`check_identity`)."""


def check_identity(found: Mapping[str, Any], expected: Mapping[str, Any], *, what: str, source: str,
                   against: str = "--config", remedy: str = "pass --allow_mismatch to use it anyway",
                   allow_mismatch: bool = False) -> list[str]:
  """Compares a checkpoint's identity with the expected one, field by field (fields unknown on either side are
  skipped); returns the differing fields.

  Raises IdentityMismatchError, one line naming `what` (e.g. '--checkpoint=PATH'), the differing fields on both
  sides, where the checkpoint's come from (`source`) and `remedy`. With `allow_mismatch`, prints that line as a
  warning on stderr instead.
  """
  fields = [k for k in IDENTITY_FIELDS
            if found.get(k) is not None and expected.get(k) is not None and found[k] != expected[k]]
  if fields:
    show = lambda d: ", ".join(f"{k} {d[k]!r}" for k in fields)  # noqa: E731
    text = f"{what} was trained as {show(found)} ({source}), but {against} asks for {show(expected)}"
    if not allow_mismatch:
      raise IdentityMismatchError(f"{text}; {remedy}")
    print(f"warning: {text}; using it anyway (--allow_mismatch)", file=sys.stderr)
  return fields


def check_data(config: ml_collections.ConfigDict, *, training: bool = True) -> None:
  """The KITTI / NYU splits a run reads (the training split when `training`, and the evaluation split) are built in
  config.data.data_dir; else `data.build.DatasetNotFoundError`: one line naming what is missing, where it looked and
  the build command. Called before anything is created (TFDS would otherwise start building there). Synthetic
  scenes need nothing."""
  d = config.data
  if d.dataset in data.pipeline.GENERATED:  # rendered on the fly
    return
  for split in ([d.train_split] if training else []) + [d.eval_split]:
    data_build.check_prepared(d.dataset, d.data_dir, split)


def apply_recipe(config: ml_collections.ConfigDict, recipe: Mapping[str, Any]) -> None:
  """Sets a reproduction recipe's fields on an unlocked config: batch_size, steps_per_epoch, num_epochs,
  lr_decay_epochs, learning_rate, train_crop / eval_crop (height, width), train_scenes / val_scenes (the synthetic
  scene counts); used by pncnn_jax.paper and pncnn_jax.flow_reproduce."""
  for key in ("batch_size", "steps_per_epoch", "num_epochs", "lr_decay_epochs", "learning_rate"):
    config[key] = recipe[key]
  config.data.train_crop_height, config.data.train_crop_width = recipe["train_crop"]
  config.data.eval_crop_height, config.data.eval_crop_width = recipe["eval_crop"]
  config.data.synthetic_size = recipe["train_scenes"]
  config.data.eval_synthetic_size = recipe["val_scenes"]
