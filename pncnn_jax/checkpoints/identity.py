"""Checkpoint identity: what a model was trained as, recorded with every checkpoint and checked where it is used.

A pncnn_jax checkpoint (a training step, a converted official model, a shipped model) carries {dataset, variant,
loss, input_scale} in its metadata; `check_identity` compares it with what a command is asked to do.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from pncnn_jax import from_config

IDENTITY_FIELDS = ("dataset", "variant", "loss", "input_scale")
# Input units per metre of every pncnn_jax model: the networks take depth in metres, 0 = no measurement (the
# data pipeline decodes KITTI PNGs / 256 and NYU depth in metres).
INPUT_SCALE = 1.0
DATASET_ALIASES = {"nyudepthv2": "nyu_depth"}  # dataset names of the official args -> ours


def identity(config: Mapping[str, Any]) -> dict[str, Any]:
  """What a run of `config` trains, as recorded in its checkpoints' metadata: {dataset, variant, loss,
  input_scale}."""
  return {"dataset": config["data"]["dataset"], "variant": config["variant"], "loss": from_config.variant_loss(config),
          "input_scale": INPUT_SCALE}


def checkpoint_identity(meta: Mapping[str, Any]) -> dict[str, Any]:
  """The identity of a pncnn_jax checkpoint from its metadata (training step, converted model or shipped model);
  checkpoints written before the fields existed fall back to their stored config. Unknown fields are None."""
  run_config = meta.get("config") or {}
  dataset = meta.get("dataset") or (run_config.get("data") or {}).get("dataset")
  variant = meta.get("variant")
  loss = meta.get("loss") or run_config.get("loss") or (  # else the variant's, of any task (`from_config.VARIANTS`)
      from_config.VARIANTS[variant][0].loss if variant is not None and variant in from_config.VARIANTS else None)
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
