"""The one checkpoint loader: any checkpoint -> variables, metadata and how to rebuild its model.

`load(checkpoint)` takes
  * 'best' / 'latest' with `workdir=`: that step of a training run (pncnn_jax.train);
  * a training workdir (its `step`, 'best' falling back to 'latest'), one of its step directories, or a model-only
    checkpoint directory (`python -m pncnn_jax.convert`), all through `pncnn_jax.checkpointing`;
  * an official `.pth.tar` (legacy torch format) or an `.npz` state dict (`pncnn_jax.convert.load_official`);
  * a shipped name, '<dataset>:<name>' (e.g. 'synthetic:pncnn_masked'): weights pncnn_jax trained itself
    (`pncnn_jax.pretrained`), rebuilt with the settings of the run that made them.
A checkpoint of an ensemble run (metadata `ensemble_size`) gives stacked variables (leaves (K, ...)).

The model is rebuilt with the settings stored with the checkpoint: the variant, the loss and the model settings
(`conv_precision`, `nconv_init`) of the config the run was trained with (`config.model_settings`, which also
reads configs saved before the `model` block). Official checkpoints get the model's defaults.
`predict`, `eval.py` (`evaluate.evaluate_checkpoint`) and `ensemble.load_ensemble` all load through here.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any

from pncnn_jax import checkpointing, convert, models, pretrained
from pncnn_jax import config as config_lib


@dataclasses.dataclass(frozen=True)
class Loaded:
  """A loaded checkpoint.

  Attributes:
    variables: {'params', 'batch_stats'?}, numpy or jax arrays; leaves (K, ...) for an ensemble.
    meta: the checkpoint's metadata (training: variant, loss, step, config, ...; official: `load_official`'s info).
    variant: the model variant (a key of `models.VARIANTS`).
    loss: the loss the model was trained with (decides its sigma, `losses.precision_of`).
    model_settings: `models.PNCNN` keyword arguments besides the variant's (e.g. conv_precision).
  """

  variables: dict[str, Any]
  meta: dict[str, Any]
  variant: str
  loss: str
  model_settings: dict[str, Any]

  @property
  def ensemble_size(self) -> int | None:
    return self.meta.get("ensemble_size")

  def build_model(self) -> models.PNCNN:
    """The model the variables belong to (one cached instance per setting)."""
    return config_lib.build_model({"variant": self.variant, "model": self.model_settings})


def load(checkpoint: str | os.PathLike, *, workdir: str | os.PathLike | None = None, step: int | str = "best",
         variant: str | None = None) -> Loaded:
  """Loads any pncnn_jax or official checkpoint (see the module docstring).

  Args:
    checkpoint: 'best' or 'latest' (of `workdir`), or a path.
    workdir: the training run for 'best' / 'latest'.
    step: for a workdir path: an int, 'latest' or 'best'.
    variant: the expected variant: checked against the checkpoint's (and passed to `load_official`).

  Raises:
    FileNotFoundError for a missing path or a workdir without checkpoints; ValueError for a checkpoint of
    another variant or a file that is not a checkpoint (`convert.CheckpointFormatError`).
  """
  checkpoint = os.fspath(checkpoint)
  if pretrained.parse(checkpoint) is not None and not os.path.exists(checkpoint):
    variables, manifest = pretrained.load(checkpoint)
    meta = {"variant": manifest["variant"], "loss": manifest["config"].get("loss") or None,
            "config": manifest["config"], "step": manifest.get("step"), "pretrained": checkpoint}
  elif checkpoint in ("best", "latest"):
    if not workdir:
      raise ValueError(f"--checkpoint={checkpoint} needs --workdir (the training run)")
    wd = pathlib.Path(workdir)
    if not (wd / checkpointing.CHECKPOINT_SUBDIR).is_dir():
      raise FileNotFoundError(f"--checkpoint={checkpoint}: {wd} holds no checkpoints/ (train there first, or "
                              "pass --checkpoint=PATH)")
    variables, meta = checkpointing.restore_variables(wd, step=checkpoint)
  else:
    path = pathlib.Path(checkpoint)
    if not path.exists():
      raise FileNotFoundError(f"--checkpoint={checkpoint}: no such file or directory")
    if path.is_file():
      variables, meta = convert.load_official(path, variant=variant)
    else:
      variables, meta = checkpointing.restore_variables(path, step=step)
  if bad := checkpointing.non_finite_leaves(variables):
    raise ValueError(f"--checkpoint={checkpoint}: {len(bad)} weight tensor(s) hold NaN or inf, e.g. {bad[0]} (a "
                     "diverged or corrupted model); refusing it")
  stored = meta.get("variant")
  if variant is not None and stored is not None and stored != variant:
    raise ValueError(f"--checkpoint={checkpoint} holds variant {stored!r}, not {variant!r}")
  name = stored or variant
  if name is None:
    raise ValueError(f"--checkpoint={checkpoint}: its metadata names no variant; pass the variant")
  if name not in models.VARIANTS:
    raise ValueError(f"--checkpoint={checkpoint}: unknown variant {name!r}")
  run_config = meta.get("config") or {}
  loss = meta.get("loss") or run_config.get("loss") or models.VARIANTS[name].loss
  return Loaded(variables=variables, meta=meta, variant=name, loss=loss,
                model_settings=config_lib.model_settings(run_config))
