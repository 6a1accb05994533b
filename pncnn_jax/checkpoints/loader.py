"""The one checkpoint loader: any checkpoint -> variables, metadata and how to rebuild its model.

`load(checkpoint)` takes
  * 'best' / 'latest' with `workdir=`: that step of a training run (pncnn_jax.training.loop);
  * a training workdir (its `step`, 'best' falling back to 'latest'), one of its step directories, or a model-only
    checkpoint directory (`python -m pncnn_jax.convert`), all through `pncnn_jax.checkpoints.manager`;
  * an official `.pth.tar` (legacy torch format) or an `.npz` state dict
  (`pncnn_jax.checkpoints.convert.load_official`);
  * a shipped name, '<dataset>:<name>' (e.g. 'synthetic:pncnn_masked'): weights pncnn_jax trained itself
    (`pncnn_jax.pretrained`), rebuilt with the settings of the run that made them.
A checkpoint of an ensemble run (metadata `ensemble_size`) gives stacked variables (leaves (K, ...)).

Every checkpoint records what it was trained as (`config.identity`: dataset, variant, loss, input scaling; an
official .pth.tar through its args, `convert.official_identity`). `load(..., expect=...)` checks it against what
the caller uses it for (eval.py: the config; predict/export: --variant) and refuses a mismatch in one line
(`config.IdentityMismatchError`) unless `allow_mismatch`, the --allow_mismatch flag of the command lines.

The model is rebuilt with the settings stored with the checkpoint: the variant, the loss and the model settings
(`conv_precision`, `nconv_init`) of the config the run was trained with (`config.model_settings`, which also
reads configs saved before the `model` block). Official checkpoints get the model's defaults.
`predict`, `eval.py` (`evaluate.evaluate_checkpoint`) and `ensemble.members.load_ensemble` all load through here.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any

from pncnn_jax import from_config, pretrained
from pncnn_jax.checkpoints import convert, manager
from pncnn_jax.checkpoints import identity as identity_lib
from pncnn_jax.nn import models


@dataclasses.dataclass(frozen=True)
class Loaded:
  """A loaded checkpoint.

  Attributes:
    variables: {'params', 'batch_stats'?}, numpy or jax arrays; leaves (K, ...) for an ensemble.
    meta: the checkpoint's metadata (training: variant, loss, step, config, ...; official: `load_official`'s info;
      a shipped model: its manifest's variant, loss, config, step and `input_density`, the input density range it
      was trained on, or None).
    variant: the model variant (a key of `models.VARIANTS`).
    loss: the loss the model was trained with (decides its sigma, `losses.precision_of`).
    model_settings: `models.PNCNN` keyword arguments besides the variant's (e.g. conv_precision).
    identity: what the checkpoint says it was trained as ({dataset, variant, loss, input_scale}, None = unknown).
    identity_source: where `identity` comes from ('its metadata', 'its args', 'its file name').
  """

  variables: dict[str, Any]
  meta: dict[str, Any]
  variant: str
  loss: str
  model_settings: dict[str, Any]
  identity: dict[str, Any] = dataclasses.field(default_factory=dict)
  identity_source: str = "its metadata"

  @property
  def ensemble_size(self) -> int | None:
    return self.meta.get("ensemble_size")

  def build_model(self) -> models.PNCNN:
    """The model the variables belong to (one cached instance per setting)."""
    return from_config.build_model({"variant": self.variant, "model": self.model_settings})


def load(checkpoint: str | os.PathLike, *, workdir: str | os.PathLike | None = None, step: int | str = "best",
         variant: str | None = None, expect: dict[str, Any] | None = None, allow_mismatch: bool = False,
         against: str = "--config", allow_fallback: bool = False) -> Loaded:
  """Loads any pncnn_jax or official checkpoint (see the module docstring).

  Args:
    checkpoint: 'best' or 'latest' (of `workdir`), or a path.
    workdir: the training run for 'best' / 'latest'.
    step: for a workdir path: an int, 'latest' or 'best'.
    variant: the expected variant: checked against the checkpoint's (and passed to `load_official`).
    expect: the expected identity (`config.identity(config)`, any subset of its fields): checked against the
      checkpoint's, with `variant`.
    allow_mismatch: warn about a mismatch of `expect`/`variant` instead of refusing it (the variant of a
      pncnn_jax checkpoint must still have its weights' structure).
    against: what `expect` comes from, for the message ('--config', '--variant').
    allow_fallback: a training step that cannot be restored (a truncated file, garbled metadata) is replaced by
      the newest step that restores, with a warning; without it, a `CheckpointCorruptError` names both.

  Raises:
    FileNotFoundError for a missing path or a workdir without checkpoints; ValueError for a checkpoint of
    another variant or a file that is not a checkpoint (`convert.CheckpointFormatError`);
    `config.IdentityMismatchError` (a ValueError) for a checkpoint trained as something else than `expect`.
  """
  checkpoint = os.fspath(checkpoint)
  if pretrained.parse(checkpoint) is not None and not os.path.exists(checkpoint):
    variables, manifest = pretrained.load(checkpoint)
    meta = {"variant": manifest["variant"], "loss": manifest["config"].get("loss") or None,
            "config": manifest["config"], "step": manifest.get("step"), "pretrained": checkpoint,
            "input_density": manifest.get("input_density")}  # the range it was trained on; None: unknown
  elif checkpoint in ("best", "latest"):
    if not workdir:
      raise ValueError(f"--checkpoint={checkpoint} needs --workdir (the training run)")
    wd = pathlib.Path(workdir)
    if not (wd / manager.CHECKPOINT_SUBDIR).is_dir():
      raise FileNotFoundError(f"--checkpoint={checkpoint}: {wd} holds no checkpoints/ (train there first, or "
                              "pass --checkpoint=PATH)")
    variables, meta = manager.restore_variables(wd, step=checkpoint, allow_fallback=allow_fallback)
  else:
    path = pathlib.Path(checkpoint)
    if not path.exists():
      raise FileNotFoundError(f"--checkpoint={checkpoint}: no such file or directory")
    if path.is_file():
      variables, meta = convert.load_official(path, variant=variant)
    else:
      variables, meta = manager.restore_variables(path, step=step, allow_fallback=allow_fallback)
  if bad := manager.non_finite_leaves(variables):
    raise ValueError(f"--checkpoint={checkpoint}: {len(bad)} weight tensor(s) hold NaN or inf, e.g. {bad[0]} (a "
                     "diverged or corrupted model); refusing it")
  official = "identity" in meta  # convert.load_official's info
  identity = dict(meta["identity"]) if official else identity_lib.checkpoint_identity(meta)
  source = meta["identity_source"] if official else "its metadata"
  wanted = dict(expect or {})
  if variant is not None:
    wanted["variant"] = variant
  identity_lib.check_identity(identity, wanted, what=f"--checkpoint={checkpoint}", source=source, against=against,
                            allow_mismatch=allow_mismatch)
  stored = meta.get("variant")
  if variant is not None and stored is not None and stored != variant and not _same_weights(stored, variant):
    raise ValueError(f"--checkpoint={checkpoint} holds variant {stored!r}, whose weights do not fit {variant!r}")
  name = (variant if allow_mismatch else None) or stored or variant
  if name is None:
    raise ValueError(f"--checkpoint={checkpoint}: its metadata names no variant; pass the variant")
  if name not in from_config.VARIANTS:  # the depth variants and the extensions' (pncnn_jax.flow)
    raise ValueError(f"--checkpoint={checkpoint}: unknown variant {name!r}")
  run_config = meta.get("config") or {}
  loss = identity.get("loss") or from_config.VARIANTS[name][0].loss
  return Loaded(variables=variables, meta=meta, variant=name, loss=loss,
                model_settings=from_config.model_settings(run_config), identity=identity, identity_source=source)


def _same_weights(a: str, b: str) -> bool:
  """Whether variants `a` and `b` have the same parameter tree (e.g. ncnn_conf_l1 and ncnn_conf_l2): built by the
  same builder (a depth and a flow model never are), both with or without a confidence UNet, the same variance
  head. An unknown name is not the same."""
  if a not in from_config.VARIANTS or b not in from_config.VARIANTS:
    return False
  (va, build_a), (vb, build_b) = from_config.VARIANTS[a], from_config.VARIANTS[b]
  if build_a is not build_b:
    return False
  if va == vb:
    return True
  conf_a, conf_b = getattr(va, "conf_estimator", None), getattr(vb, "conf_estimator", None)
  return (conf_a is not None and conf_b is not None and (conf_a == "none") == (conf_b == "none")
          and getattr(va, "var_estimator", None) == getattr(vb, "var_estimator", None))
