"""Official pNCNN PyTorch checkpoints -> pncnn_jax variables, without torch (docs/SPEC.md §12).

Two input formats are read, by the restricted readers of `pncnn_jax.checkpoints.torch_pickle` (nothing is executed): the
official legacy `torch.save` files (`checkpoint-9.pth.tar`) and `.npz` state dicts keyed by torch names (as in
../shared/reference/weights/). The variants an official checkpoint can hold follow from `models.VARIANTS`.

The torch name table and the state_dict <-> variables mapping are `pncnn_jax.checkpoints.torch_names`.

CLI: python -m pncnn_jax.convert --input CKPT --output DIR [--variant NAME]
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys
import zipfile
from collections.abc import Mapping
from typing import Any

from pncnn_jax.checkpoints import identity as identity_lib
from pncnn_jax.checkpoints import manager
from pncnn_jax.checkpoints.torch_names import (  # noqa: F401
  NCONV_SHAPES,
  UNET_BLOCKS,
  UNET_CHANNELS,
  expected_entries,
  state_dict_to_variables,
  variables_to_state_dict,
)
from pncnn_jax.checkpoints.torch_pickle import (  # noqa: F401
  CheckpointFormatError,
  TorchObject,
  file_sha256,
  module_state_dict,
  read_npz_state_dict,
  read_torch_legacy,
  to_plain,
)
from pncnn_jax.nn import models
from pncnn_jax.runtime import cli

# args.loss of the official code -> our variant name, and our loss name.
VARIANT_BY_LOSS = {
    "masked_l1": "ncnn_conf_l1",
    "masked_l2": "ncnn_conf_l2",
    "masked_prob_loss": "pncnn",
    "masked_prob_exp_loss": "pncnn_exp",
}
LOSS_BY_OFFICIAL_LOSS = {official: models.VARIANTS[v].loss for official, v in VARIANT_BY_LOSS.items()}
# The shape of each variant we can load, from models.VARIANTS: (conf_estimator activation or None, var_estimator
# present). 'cout_depth' and 'cout_sparse' variants (a 2-channel var_estimator input) have no official counterpart.
_STRUCTURE = {name: (None if v.conf_estimator == "none" else v.conf_estimator, v.var_estimator != "none")
              for name, v in models.VARIANTS.items() if v.var_estimator not in ("cout_depth", "cout_sparse")}


# --------------------------------------------------------------------------------------------------------------
# Variant detection and the public loaders.


def _check_variant(variant: str, conf_act: str | None, var: bool, source: str) -> None:
  if variant not in _STRUCTURE:
    raise ValueError(f"{source}: variant {variant!r} cannot be loaded from an official checkpoint; "
                     f"expected one of {sorted(_STRUCTURE)}")
  want_conf, want_var = _STRUCTURE[variant]
  has_conf = conf_act is not None
  if (want_conf is not None) != has_conf or want_var != var:
    raise ValueError(f"{source}: variant {variant!r} needs conf_estimator={want_conf is not None}, "
                     f"var_estimator={want_var}, but the weights have conf_estimator={has_conf}, var_estimator={var}")
  if conf_act not in (None, "?") and want_conf != conf_act:
    raise ValueError(f"{source}: variant {variant!r} uses a {want_conf} confidence UNet, but the checkpoint's "
                     f"conf_estimator is a {conf_act} UNet")


def _default_variant(conf: bool, var: bool, stem: str) -> tuple[str, str]:
  """Variant of an .npz state dict, which does not say sigmoid vs softplus or the loss: the longest variant name
  in the file name that fits the keys, else the official network with that structure."""
  fits = [v for v, (c, w) in _STRUCTURE.items() if (c is not None) == conf and w == var]
  named = sorted((v for v in fits if re.search(rf"(^|_){re.escape(v)}(_|$)", stem)), key=len, reverse=True)
  if named:
    return named[0], "file name"
  default = {(True, False): "ncnn_conf_l1", (True, True): "pncnn", (False, False): "ncnn", (False, True): "no_conf_est"}
  return default[(conf, var)], "weights structure (sigmoid vs softplus and the loss are not in an .npz)"


def _dataset_name(args: Mapping[str, Any] | None, stem: str) -> str | None:
  if args and args.get("dataset"):
    return str(args["dataset"])
  for prefix, name in (("kitti", "kitti_depth"), ("nyu", "nyudepthv2")):
    if stem.startswith(prefix):
      return name
  return None


def official_identity(args: Mapping[str, Any] | None, variant: str, variant_source: str,
                      stem: str) -> tuple[dict[str, Any], str]:
  """(identity, where it comes from) of an official checkpoint (`identity_lib.IDENTITY_FIELDS`): from its args
  (dataset, loss, norm_factor) for a .pth.tar; for an .npz, which has none, the dataset from the file name and the
  variant and loss only when the file name names the variant. Unknown fields are None."""
  if args:
    dataset = identity_lib.DATASET_ALIASES.get(args.get("dataset"), args.get("dataset"))
    loss = args.get("loss")
    scale = 256.0 / float(args["norm_factor"]) if args.get("norm_factor") else None  # PNG / norm_factor, in metres
    return ({"dataset": dataset, "variant": VARIANT_BY_LOSS.get(loss), "loss": LOSS_BY_OFFICIAL_LOSS.get(loss),
             "input_scale": scale}, "its args")
  dataset = _dataset_name(None, stem)
  named = variant_source == "file name"
  return ({"dataset": identity_lib.DATASET_ALIASES.get(dataset, dataset), "variant": variant if named else None,
           "loss": models.VARIANTS[variant].loss if named else None, "input_scale": None}, "its file name")


def load_official(path: str | os.PathLike, variant: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
  """Loads an official checkpoint (.pth.tar, legacy torch format) or an .npz state dict as our variables.

  Args:
    path: the file.
    variant: our variant name (a key of `models.VARIANTS`); checked against the checkpoint. By default it is
      read from the checkpoint (conf_estimator class UNet = sigmoid / UNetSP = softplus, var_estimator present,
      args.loss), or for an .npz from the file name / the weights structure.

  Returns:
    (variables, info): variables = {'params', 'batch_stats'?} of float32 numpy arrays (NHWC/HWIO); info has
    'variant', 'variant_source', 'dataset', 'epoch', 'args' (dict or None), 'format', 'num_batches_tracked'
    and, for .pth.tar, 'conf_estimator_class' and 'best_result'; 'identity' (what the checkpoint says it was trained
    as, `official_identity`; a given `variant` does not change it) and 'identity_source'.
  """
  path = pathlib.Path(path)
  src = str(path)
  if not path.is_file():
    raise FileNotFoundError(f"checkpoint {src} does not exist or is not a file")
  with open(path, "rb") as fh:
    head = fh.read(4)
  stem = path.name.split(".")[0]
  info: dict[str, Any] = {"source": src, "epoch": None, "args": None}
  if head == b"PK\x03\x04":
    with zipfile.ZipFile(path) as zf:
      names = zf.namelist()
    if any(n.endswith("data.pkl") for n in names):
      read_torch_legacy(path)  # raises the zip-format error
    if not names or not all(n.endswith(".npy") for n in names):
      raise CheckpointFormatError(f"{src} is a zip archive but neither an .npz state dict nor a torch checkpoint "
                                  f"(members {names[:5]})")
    sd = read_npz_state_dict(path)
    info["format"] = "npz"
    conf_act = "?"
  else:
    obj = read_torch_legacy(path)
    if not isinstance(obj, dict) or not isinstance(obj.get("model"), TorchObject):
      raise CheckpointFormatError(f"{src}: expected a dict with a pickled 'model' module, got "
                                  f"{type(obj).__name__} with keys {sorted(obj) if isinstance(obj, dict) else '-'}")
    model = obj["model"]
    sd = module_state_dict(model)
    args = to_plain(obj.get("args")) if obj.get("args") is not None else None
    if isinstance(args, dict) and (args.get("train_disp") or args.get("modality", "d") != "d"):
      raise CheckpointFormatError(f"{src}: trained on modality={args.get('modality')!r}, train_disp="
                                  f"{args.get('train_disp')!r}; only depth input (modality 'd', no disparity) is "
                                  "supported")
    info.update(format="torch_legacy", epoch=obj.get("epoch"), args=args, model_class=model.torch_class)
    best = obj.get("best_result")
    if isinstance(best, TorchObject):
      info["best_result"] = to_plain(best)
    modules = vars(model).get("_modules") or {}
    conf_mod = modules.get("conf_estimator")
    conf_act = None
    if conf_mod is not None:
      cls = conf_mod.torch_class.rsplit(".", 1)[-1]
      info["conf_estimator_class"] = conf_mod.torch_class
      conf_act = {"UNet": "sigmoid", "UNetSP": "softplus"}.get(cls)
      if conf_act is None:
        raise CheckpointFormatError(f"{src}: unknown conf_estimator class {conf_mod.torch_class}")
  variables, structure = state_dict_to_variables(sd)
  conf, var = structure["conf_estimator"], structure["var_estimator"]
  info["num_batches_tracked"] = structure["num_batches_tracked"]
  if conf_act == "?" and not conf:
    conf_act = None
  if variant is not None:
    info["variant_source"] = "given"
  elif info["format"] == "npz":
    variant, info["variant_source"] = _default_variant(conf, var, stem)
  elif not conf and not var:
    variant, info["variant_source"] = "ncnn", "weights structure"
  else:
    loss = (info["args"] or {}).get("loss")
    if loss not in VARIANT_BY_LOSS:
      raise ValueError(f"{src}: cannot tell the variant from args.loss={loss!r} (known: {sorted(VARIANT_BY_LOSS)}); "
                       "pass variant=")
    variant, info["variant_source"] = VARIANT_BY_LOSS[loss], "args.loss"
  _check_variant(variant, conf_act, var, src)
  info["variant"] = variant
  info["dataset"] = _dataset_name(info["args"], stem)
  info["identity"], info["identity_source"] = official_identity(info["args"], variant, info["variant_source"], stem)
  if bad := manager.non_finite_leaves(variables):  # poisoned weights would give all-zero depth, exit 0
    raise CheckpointFormatError(f"{src}: {len(bad)} weight tensor(s) hold NaN or inf, e.g. {bad[0]}; refusing them")
  return variables, info


def convert(input_path: str | os.PathLike, output_dir: str | os.PathLike, variant: str | None = None, *,
            allow_mismatch: bool = False) -> dict:
  """Converts an official checkpoint into a pncnn_jax model checkpoint at `output_dir`; returns its metadata.

  A `variant` that contradicts the checkpoint's args (its loss) is refused (`config.IdentityMismatchError`)
  unless `allow_mismatch`. The metadata records the identity the weights were trained with (dataset, loss,
  input_scale from the args) next to the variant they are stored as, so that a later use is checked too.
  """
  variables, info = load_official(input_path, variant)
  ident = info["identity"]
  if variant is not None:
    identity_lib.check_identity(ident, {"variant": variant}, what=f"--input {input_path}",
                                source=info["identity_source"], against="--variant", allow_mismatch=allow_mismatch)
  meta = {
      "variant": info["variant"],
      "variant_source": info["variant_source"],
      "loss": ident["loss"] or models.VARIANTS[info["variant"]].loss,
      "input_scale": ident["input_scale"] or identity_lib.INPUT_SCALE,
      "source_file": os.path.abspath(input_path),
      "sha256": file_sha256(input_path),
      "epoch": info["epoch"],
      "dataset": info["dataset"],
      "format": info["format"],
      "num_batches_tracked": info["num_batches_tracked"],
      "converted_by": "pncnn_jax.convert",
  }
  manager.save_variables(output_dir, variables, meta)
  return meta


def main(argv: list[str] | None = None) -> int:
  parser = cli.ArgumentParser(prog="python -m pncnn_jax.convert", description=__doc__.splitlines()[0])
  parser.add_argument("--input", required=True, help="official .pth.tar (legacy torch format) or .npz state dict")
  parser.add_argument("--output", required=True, help="directory to write the pncnn_jax checkpoint to (new)")
  parser.add_argument("--variant", default=None, help="model variant (default: read from the checkpoint)")
  parser.add_argument("--allow_mismatch", action="store_true",
                      help="store the weights as --variant even where the checkpoint's args say another variant")
  a = parser.parse_args(argv)
  try:
    meta = convert(a.input, a.output, a.variant, allow_mismatch=a.allow_mismatch)
  except (ValueError, FileNotFoundError, FileExistsError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  except OSError as e:  # a read-only or full output folder
    print(f"error: cannot write {e.filename or a.output}: {e.strerror or e}", file=sys.stderr)
    return 1
  out = os.path.abspath(a.output)
  print(f"wrote {out}: variant {meta['variant']} ({meta['variant_source']}), dataset {meta['dataset']}, "
        f"epoch {meta['epoch']}, sha256 {meta['sha256'][:16]}")
  print(json.dumps(meta, indent=1, sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
