"""The official network's torch state_dict names <-> our variables (docs/SPEC.md §12); numpy only.

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

`pncnn_jax.checkpoints.convert` reads the official files and uses this table; it re-exports the names below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

# --------------------------------------------------------------------------------------------------------------
# The name table (docs/SPEC.md §12).

UNET_BLOCKS = {  # our block name -> torch module path inside a UNet / UNetSP
    "inc": "inc.conv.conv",
    "down1": "down1.mpconv.1.conv",
    "down2": "down2.mpconv.1.conv",
    "down3": "down3.mpconv.1.conv",
    "up2": "up2.conv.conv",
    "up3": "up3.conv.conv",
    "up4": "up4.conv.conv",
}
# (in, out) channels of conv0 and conv1 of each block for the official 1 -> 1 UNet with m = 8 (docs/SPEC.md §4.2).
UNET_CHANNELS = {
    "inc": ((1, 32), (32, 32)),
    "down1": ((32, 32), (32, 32)),
    "down2": ((32, 64), (64, 64)),
    "down3": ((64, 64), (64, 64)),
    "up2": ((128, 64), (64, 64)),
    "up3": ((96, 32), (32, 32)),
    "up4": ((64, 32), (32, 32)),
}
# NConvUNet: (C_out, C_in, k) of nconv1..7 (docs/SPEC.md §4.1, §12).
NCONV_SHAPES = {1: (2, 1, 5), 2: (2, 2, 5), 3: (2, 2, 5), 4: (2, 4, 3), 5: (2, 4, 3), 6: (2, 4, 3), 7: (1, 2, 1)}

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
  for k, (cout, cin, ks) in NCONV_SHAPES.items():  # torch registers bias before weight_p (docs/SPEC.md §12)
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
