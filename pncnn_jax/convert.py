"""Official pNCNN PyTorch checkpoints -> pncnn_jax variables, without torch (REFERENCE sections 9.1-9.3).

Two input formats are read, by the restricted readers of `pncnn_jax.torch_pickle` (nothing is executed): the
official legacy `torch.save` files (`checkpoint-9.pth.tar`) and `.npz` state dicts keyed by torch names (as in
../shared/reference/weights/). The variants an official checkpoint can hold follow from `models.VARIANTS`.

Name mapping (torch state_dict -> our NHWC variables; conv kernels OIHW -> HWIO by transpose(2, 3, 1, 0)):
  <est>.inc.conv.conv.{0,1,3,4}             -> params/<est>/inc/{conv0,bn0,conv1,bn1}
  <est>.down{1,2,3}.mpconv.1.conv.{0,1,3,4} -> params/<est>/down{1,2,3}/...
  <est>.up{2,3,4}.conv.conv.{0,1,3,4}       -> params/<est>/up{2,3,4}/...
  <est>.outc.conv.{weight,bias}             -> params/<est>/outc/{kernel,bias}
  BN weight, bias                           -> params/.../bn*/{scale,bias}
  BN running_mean, running_var              -> batch_stats/.../bn*/{mean,var}
  BN num_batches_tracked                    -> dropped (kept in the returned info)
  nconv.nconvK.{weight_p,bias}              -> params/nconv/nconvK/{kernel_p,bias}   (raw pre-softplus weight)
where <est> is conf_estimator or var_estimator.

CLI: python -m pncnn_jax.convert --input CKPT --output DIR [--variant NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from pncnn_jax import checkpointing, models
from pncnn_jax.torch_pickle import (CheckpointFormatError, TorchObject, to_plain, file_sha256,  # noqa: F401
                                   module_state_dict, read_npz_state_dict, read_torch_legacy)

# --------------------------------------------------------------------------------------------------------------
# The name table (REFERENCE 9.2).

UNET_BLOCKS = {  # our block name -> torch module path inside a UNet / UNetSP
    "inc": "inc.conv.conv",
    "down1": "down1.mpconv.1.conv",
    "down2": "down2.mpconv.1.conv",
    "down3": "down3.mpconv.1.conv",
    "up2": "up2.conv.conv",
    "up3": "up3.conv.conv",
    "up4": "up4.conv.conv",
}
# (in, out) channels of conv0 and conv1 of each block for the official 1 -> 1 UNet with m = 8 (REFERENCE 3.2).
UNET_CHANNELS = {
    "inc": ((1, 32), (32, 32)),
    "down1": ((32, 32), (32, 32)),
    "down2": ((32, 64), (64, 64)),
    "down3": ((64, 64), (64, 64)),
    "up2": ((128, 64), (64, 64)),
    "up3": ((96, 32), (32, 32)),
    "up4": ((64, 32), (32, 32)),
}
# NConvUNet: (C_out, C_in, k) of nconv1..7 (REFERENCE 2.1, 9.2).
NCONV_SHAPES = {1: (2, 1, 5), 2: (2, 2, 5), 3: (2, 2, 5), 4: (2, 4, 3), 5: (2, 4, 3), 6: (2, 4, 3), 7: (1, 2, 1)}

# args.loss of the official code -> our variant name.
VARIANT_BY_LOSS = {
    "masked_l1": "ncnn_conf_l1",
    "masked_l2": "ncnn_conf_l2",
    "masked_prob_loss": "pncnn",
    "masked_prob_exp_loss": "pncnn_exp",
}
# The shape of each variant we can load, from models.VARIANTS: (conf_estimator activation or None, var_estimator
# present). 'cout_depth' variants (a 2-channel var_estimator input) have no official counterpart.
_STRUCTURE = {name: (None if v.conf_estimator == "none" else v.conf_estimator, v.var_estimator != "none")
              for name, v in models.VARIANTS.items() if v.var_estimator != "cout_depth"}


class _Entry:
  """One state_dict entry: torch name, collection, path in the collection, kind and expected torch shape."""

  __slots__ = ("name", "collection", "path", "kind", "shape")

  def __init__(self, name, collection, path, kind, shape):
    self.name, self.collection, self.path, self.kind, self.shape = name, collection, path, kind, shape


def _unet_entries(prefix: str) -> list[_Entry]:
  out = []
  for block, torch_path in UNET_BLOCKS.items():
    for i, (conv, bn) in enumerate((("conv0", "bn0"), ("conv1", "bn1"))):
      cin, cout = UNET_CHANNELS[block][i]
      base = f"{prefix}.{torch_path}.{3 * i}"
      out.append(_Entry(f"{base}.weight", "params", (prefix, block, conv, "kernel"), "conv", (cout, cin, 3, 3)))
      out.append(_Entry(f"{base}.bias", "params", (prefix, block, conv, "bias"), "vector", (cout,)))
      base = f"{prefix}.{torch_path}.{3 * i + 1}"
      out.append(_Entry(f"{base}.weight", "params", (prefix, block, bn, "scale"), "vector", (cout,)))
      out.append(_Entry(f"{base}.bias", "params", (prefix, block, bn, "bias"), "vector", (cout,)))
      out.append(_Entry(f"{base}.running_mean", "batch_stats", (prefix, block, bn, "mean"), "vector", (cout,)))
      out.append(_Entry(f"{base}.running_var", "batch_stats", (prefix, block, bn, "var"), "vector", (cout,)))
      out.append(_Entry(f"{base}.num_batches_tracked", None, None, "count", ()))
  out.append(_Entry(f"{prefix}.outc.conv.weight", "params", (prefix, "outc", "kernel"), "conv", (1, 32, 1, 1)))
  out.append(_Entry(f"{prefix}.outc.conv.bias", "params", (prefix, "outc", "bias"), "vector", (1,)))
  return out


def _nconv_entries() -> list[_Entry]:
  out = []
  for k, (cout, cin, ks) in NCONV_SHAPES.items():  # torch registers bias before weight_p (REFERENCE 9.2)
    out.append(_Entry(f"nconv.nconv{k}.bias", "params", ("nconv", f"nconv{k}", "bias"), "vector", (cout,)))
    out.append(_Entry(f"nconv.nconv{k}.weight_p", "params", ("nconv", f"nconv{k}", "kernel_p"), "conv",
                      (cout, cin, ks, ks)))
  return out


def expected_entries(conf_estimator: bool, var_estimator: bool) -> list[_Entry]:
  """The state_dict entries, in torch order, of a model with or without each UNet estimator."""
  entries = _unet_entries("conf_estimator") if conf_estimator else []
  entries += _nconv_entries()
  if var_estimator:
    entries += _unet_entries("var_estimator")
  return entries


def _set(tree: dict, path: tuple[str, ...], value: Any) -> None:
  for p in path[:-1]:
    tree = tree.setdefault(p, {})
  tree[path[-1]] = value


def _get(tree: Mapping, path: tuple[str, ...]) -> Any:
  for p in path:
    tree = tree[p]
  return tree


# --------------------------------------------------------------------------------------------------------------
# state_dict <-> variables


def state_dict_to_variables(sd: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
  """Maps a torch state_dict of an official pNCNN-family network to our variables (NHWC / HWIO).

  Args:
    sd: torch name -> array (numpy or anything `np.asarray` takes), weights OIHW as in PyTorch.

  Returns:
    (variables, structure): variables = {'params': ..., 'batch_stats': ...} (no 'batch_stats' for NCNN without
    UNets), float32 numpy arrays; structure = {'conf_estimator': bool, 'var_estimator': bool,
    'num_batches_tracked': {torch BN name: int}}.

  Raises:
    ValueError naming the unknown keys, the missing keys, or the keys whose shapes or dtypes are wrong.
  """
  keys = set(sd)
  conf = any(k.startswith("conf_estimator.") for k in keys)
  var = any(k.startswith("var_estimator.") for k in keys)
  entries = expected_entries(conf, var)
  names = {e.name for e in entries}
  unknown = sorted(keys - names)
  missing = [e.name for e in entries if e.name not in keys]
  problems = []
  if unknown:
    problems.append(f"unknown keys {unknown}")
  if missing:
    problems.append(f"missing keys {missing}")
  if problems:
    raise ValueError(
        f"state_dict does not match the official network (conf_estimator={conf}, var_estimator={var}): "
        + "; ".join(problems))

  variables: dict[str, Any] = {}
  counts: dict[str, int] = {}
  bad = []
  for e in entries:
    a = np.asarray(sd[e.name])
    if tuple(a.shape) != e.shape:
      bad.append(f"{e.name}: shape {tuple(a.shape)}, expected {e.shape}")
      continue
    if e.kind == "count":
      if not np.issubdtype(a.dtype, np.integer):
        bad.append(f"{e.name}: dtype {a.dtype}, expected an integer")
        continue
      counts[e.name] = int(a)
      continue
    if not np.issubdtype(a.dtype, np.floating):
      bad.append(f"{e.name}: dtype {a.dtype}, expected floating point")
      continue
    a = a.astype(np.float32)
    if e.kind == "conv":
      a = np.ascontiguousarray(a.transpose(2, 3, 1, 0))  # OIHW -> HWIO
    _set(variables.setdefault(e.collection, {}), e.path, a)
  if bad:
    raise ValueError("state_dict entries with wrong shape or dtype: " + "; ".join(bad))
  return variables, {"conf_estimator": conf, "var_estimator": var, "num_batches_tracked": counts}


def variables_to_state_dict(
    variables: Mapping[str, Any], num_batches_tracked: int | Mapping[str, int] = 0
) -> dict[str, np.ndarray]:
  """The inverse of `state_dict_to_variables`: our variables -> a torch-named state_dict (OIHW, insertion order
  = torch order), loadable with `load_state_dict(strict=True)` by the official network.

  Args:
    variables: {'params': ..., 'batch_stats'?: ...} as produced by our models.
    num_batches_tracked: value of every BN `num_batches_tracked` (int), or a mapping torch name -> int.
  """
  params = variables.get("params")
  if params is None:
    raise ValueError(f"variables have no 'params' collection (collections: {sorted(variables)})")
  conf, var = "conf_estimator" in params, "var_estimator" in params
  extra = sorted(set(params) - {"conf_estimator", "var_estimator", "nconv"})
  if extra or "nconv" not in params:
    raise ValueError(f"params must hold nconv and optionally conf_estimator/var_estimator, got {sorted(params)}")
  sd: dict[str, np.ndarray] = {}
  for e in expected_entries(conf, var):
    if e.kind == "count":
      n = num_batches_tracked if isinstance(num_batches_tracked, int) else num_batches_tracked[e.name]
      sd[e.name] = np.asarray(n, np.int64)
      continue
    try:
      a = np.asarray(_get(variables[e.collection], e.path))
    except KeyError as err:
      raise ValueError(f"variables lack {e.collection}/{'/'.join(e.path)} (for {e.name})") from err
    if e.kind == "conv":
      a = a.transpose(3, 2, 0, 1)  # HWIO -> OIHW
    if tuple(a.shape) != e.shape:
      raise ValueError(f"{e.collection}/{'/'.join(e.path)}: shape {tuple(a.shape)} gives {e.name} of torch shape "
                       f"{tuple(a.shape)}, expected {e.shape}")
    sd[e.name] = np.ascontiguousarray(a, np.float32)
  return sd



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
    and, for .pth.tar, 'conf_estimator_class' and 'best_result'.
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
  if bad := checkpointing.non_finite_leaves(variables):  # poisoned weights would give all-zero depth, exit 0
    raise CheckpointFormatError(f"{src}: {len(bad)} weight tensor(s) hold NaN or inf, e.g. {bad[0]}; refusing them")
  return variables, info




def convert(input_path: str | os.PathLike, output_dir: str | os.PathLike, variant: str | None = None) -> dict:
  """Converts an official checkpoint into a pncnn_jax model checkpoint at `output_dir`; returns its metadata."""
  variables, info = load_official(input_path, variant)
  meta = {
      "variant": info["variant"],
      "variant_source": info["variant_source"],
      "source_file": os.path.abspath(input_path),
      "sha256": file_sha256(input_path),
      "epoch": info["epoch"],
      "dataset": info["dataset"],
      "format": info["format"],
      "num_batches_tracked": info["num_batches_tracked"],
      "converted_by": "pncnn_jax.convert",
  }
  checkpointing.save_variables(output_dir, variables, meta)
  return meta


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m pncnn_jax.convert", description=__doc__.splitlines()[0])
  parser.add_argument("--input", required=True, help="official .pth.tar (legacy torch format) or .npz state dict")
  parser.add_argument("--output", required=True, help="directory to write the pncnn_jax checkpoint to (new)")
  parser.add_argument("--variant", default=None, help="model variant (default: read from the checkpoint)")
  a = parser.parse_args(argv)
  try:
    meta = convert(a.input, a.output, a.variant)
  except (ValueError, FileNotFoundError, FileExistsError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  out = os.path.abspath(a.output)
  print(f"wrote {out}: variant {meta['variant']} ({meta['variant_source']}), dataset {meta['dataset']}, "
        f"epoch {meta['epoch']}, sha256 {meta['sha256'][:16]}")
  print(json.dumps(meta, indent=1, sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
