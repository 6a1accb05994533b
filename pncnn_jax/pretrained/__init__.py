"""Weights trained by pncnn_jax itself, shipped with the package and loaded by name ('synthetic:pncnn_masked').

Each model is two files in `pncnn_jax/pretrained/<dataset>/`:

  <name>.npz   the variables, one array per leaf, keyed by the '/'-joined tree path
               ('params/nconv/nconv1/w_p', 'batch_stats/conf_estimator/inc/bn0/mean', ...), float32
  <name>.json  the manifest: how the weights were made (command, commit, recipe, steps, device, wall time),
               the run's full config (what `pncnn_jax.training.loop.build_model` needs), the metrics they reached
               and the input density they were trained on ('input_density': the range predict, the bag command
               and the Completer check each frame against; pncnn_jax.experiments.input_density)

`python -m pncnn_jax.experiments.reproduce --ship pncnn_jax/pretrained/synthetic` writes them (`save`); `load(spec)`
reads them back. Only weights that pncnn_jax trained are shipped here: the official checkpoints are GPLv3 and
stay outside the package.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Mapping

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent
DATASETS = ("synthetic",)


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
  out: dict[str, np.ndarray] = {}
  for k, v in tree.items():
    key = f"{prefix}/{k}" if prefix else str(k)
    if "/" in str(k):
      raise ValueError(f"pretrained: tree key {k!r} contains '/'")
    if isinstance(v, Mapping):
      out.update(_flatten(v, key))
    else:
      out[key] = np.asarray(v)
  return out


def _unflatten(flat: Mapping[str, np.ndarray]) -> dict[str, Any]:
  tree: dict[str, Any] = {}
  for key, v in flat.items():
    node = tree
    *parents, leaf = key.split("/")
    for p in parents:
      node = node.setdefault(p, {})
    node[leaf] = v
  return tree


def save(variables: Mapping[str, Any], manifest: Mapping[str, Any], directory: str | os.PathLike,
         name: str) -> tuple[pathlib.Path, pathlib.Path]:
  """Writes <directory>/<name>.npz and .json (each to a temporary name first, then renamed)."""
  d = pathlib.Path(directory)
  d.mkdir(parents=True, exist_ok=True)
  flat = _flatten(variables)
  bad = [k for k, v in flat.items() if not np.all(np.isfinite(v))]
  if bad:
    raise ValueError(f"pretrained.save({name}): non-finite values in {bad[:3]}")
  npz, js = d / f"{name}.npz", d / f"{name}.json"
  tmp = d / f".{name}.npz.tmp"
  with open(tmp, "wb") as f:
    np.savez(f, **flat)
  os.replace(tmp, npz)
  tmp = d / f".{name}.json.tmp"
  tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True, default=json_default) + "\n")
  os.replace(tmp, js)
  return npz, js


def update_manifest(directory: str | os.PathLike, name: str, fields: Mapping[str, Any]) -> pathlib.Path:
  """Adds (or replaces) top-level `fields` of <directory>/<name>.json, the rest as it was (written as `save` writes
  it, to a temporary name first, then renamed); the weights are not touched. E.g. a field measured after the
  model was shipped (`input_density`, pncnn_jax.experiments.input_density)."""
  js = pathlib.Path(directory) / f"{name}.json"
  if not js.is_file():
    raise FileNotFoundError(f"{js}: no such manifest")
  manifest = {**json.loads(js.read_text()), **fields}
  tmp = js.with_name(f".{name}.json.tmp")
  tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True, default=json_default) + "\n")
  os.replace(tmp, js)
  return js


def json_default(o: Any) -> Any:
  """json.dumps(default=...) for numpy scalars and arrays."""
  if isinstance(o, (np.floating, np.integer, np.bool_)):
    return o.item()
  if isinstance(o, np.ndarray):
    return o.tolist()
  raise TypeError(f"not JSON serialisable: {type(o)}")


def parse(spec: str) -> tuple[str, str] | None:
  """'synthetic:pncnn_masked' -> ('synthetic', 'pncnn_masked'); None for anything else (a path)."""
  dataset, sep, name = str(spec).partition(":")
  if not sep or dataset not in DATASETS or not name or "/" in name or os.sep in name:
    return None
  return dataset, name


def available(dataset: str = "synthetic", root: str | os.PathLike | None = None) -> list[str]:
  """Names shipped for `dataset` (those with both files)."""
  d = pathlib.Path(root or ROOT) / dataset
  return sorted(p.stem for p in d.glob("*.npz") if (d / f"{p.stem}.json").exists()) if d.is_dir() else []


def load(spec: str, root: str | os.PathLike | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
  """('synthetic:<name>') -> (variables {'params', 'batch_stats'?}, manifest); `root` replaces the package's
  folder (tests).

  Raises:
    ValueError: `spec` is not '<dataset>:<name>' or names no shipped model (the message lists them), or the
      weights are not finite.
  """
  parsed = parse(spec)
  if parsed is None:
    raise ValueError(f"{spec!r} is not a shipped model name; expected one of "
                     f"{', '.join(f'{d}:<name>' for d in DATASETS)}")
  dataset, name = parsed
  base = pathlib.Path(root or ROOT) / dataset
  npz, js = base / f"{name}.npz", base / f"{name}.json"
  if not npz.exists() or not js.exists():
    names = available(dataset, root)
    raise ValueError(f"no shipped model {spec!r}; available: "
                     f"{', '.join(f'{dataset}:{n}' for n in names) if names else 'none'}")
  return load_files(npz, js)


def load_files(npz: str | os.PathLike, js: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
  """(variables, manifest) of one `save`d pair of files, e.g. a run's final weights
  (pncnn_jax.experiments.reproduce)."""
  with np.load(npz) as z:
    flat = {k: z[k] for k in z.files}
  bad = [k for k, v in flat.items() if not np.all(np.isfinite(v))]
  if bad:
    raise ValueError(f"{npz}: non-finite weights in {bad[:3]}")
  return _unflatten(flat), json.loads(pathlib.Path(js).read_text())
