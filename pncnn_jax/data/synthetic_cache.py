"""A disk cache of rendered synthetic scenes: `generate()` memoised per (seed, stream, window), exactly.

Rendering a 64x320 window costs ~0.1-0.2 s of CPU (ray casting in numpy), about as much as a pNCNN training
step at that size on 2 cores, and a long run renders every scene several times (every epoch, every model). A
cache holds the first `size` scenes of one split at one fixed window (the 'center' crop the synthetic configs
train and validate on) as memory-mapped `.npy` arrays, so a run reads them instead of ray casting.

Exactness: `generate` is deterministic and a window renders exactly the corresponding crop of the full frame,
so a cached example is bit-identical to a rendered one (tests/data/test_synthetic.py asserts it). A run
trained with a cache equals the same run without one.

Layout of a cache directory (written to `<dir>.tmp-<pid>` first, then renamed: a crash never leaves a
half-written cache under the final name; two processes writing the same cache both end with the one that was
renamed first):

  meta.json                       seed, stream, window, size, the SyntheticConfig fields (resolved: the LiDAR preset's
                                  azimuth step and beams written out), format version
  sparse.npy target.npy dense.npy (size, h, w, 1) float32 metres
  disturbed.npy                   (size, h, w, 1) bool
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
from typing import Optional

import numpy as np

from pncnn_jax.data import synthetic

FORMAT = 1
_FLOAT_FIELDS = ("sparse", "target", "dense")
_FIELDS = _FLOAT_FIELDS + ("disturbed",)


def _meta(seed: int, stream: int, window: tuple[int, int, int, int], size: int,
          config: synthetic.SyntheticConfig) -> dict:
  return {"format": FORMAT, "seed": int(seed), "stream": int(stream), "window": [int(v) for v in window],
          "size": int(size), "synthetic_config": dataclasses.asdict(config.resolved())}


def _saved_config(meta: dict) -> synthetic.SyntheticConfig:
  """The resolved SyntheticConfig a cache was rendered with. A field added to SyntheticConfig later (lidar,
  lidar_beams) reads as its default in an older cache; an older cache's azimuth_step_deg 0.175 and lidar_beams 64
  are the hdl64 preset's, so it resolves to the default config as it did."""
  fields = {f.name for f in dataclasses.fields(synthetic.SyntheticConfig)}
  saved = meta.get("synthetic_config") or {}
  unknown = sorted(set(saved) - fields)
  if unknown:
    raise ValueError(f"SyntheticConfig fields {unknown} of another generator version")
  return synthetic.SyntheticConfig(**saved).resolved()


def _same_settings(have: dict, want: dict) -> bool:
  """Whether two metas describe the same cache (the SyntheticConfigs compared resolved)."""
  strip = lambda m: {k: v for k, v in m.items() if k != "synthetic_config"}  # noqa: E731
  try:
    return strip(have) == strip(want) and _saved_config(have) == _saved_config(want)
  except (TypeError, ValueError):
    return False


def build(path: str | os.PathLike, *, seed: int, stream: int, window: tuple[int, int, int, int], size: int,
          config: Optional[synthetic.SyntheticConfig] = None, progress: bool = False,
          workers: int = 1, chunk: int = 64) -> pathlib.Path:
  """Renders scenes 0..size-1 of (seed, stream) at `window` into the cache directory `path`.

  `workers` > 1 renders in that many processes, `chunk` scenes per task, each writing its own scenes into the shared
  memory-mapped arrays (every scene is a deterministic function of its index, so the cache is the same either way).

  Returns `path`. If `path` already holds a cache of exactly these settings it is kept as it is; a cache of
  other settings is an error (delete it or choose another path).
  """
  path = pathlib.Path(path)
  cfg = config or synthetic.SyntheticConfig()
  want = _meta(seed, stream, window, size, cfg)
  if path.exists():
    return _existing(path, want)
  tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  _, _, h, w = window
  arrays = {k: np.lib.format.open_memmap(tmp / f"{k}.npy", mode="w+", shape=(size, h, w, 1),
                                         dtype=bool if k == "disturbed" else np.float32) for k in _FIELDS}
  for a in arrays.values():
    a.flush()
  del arrays
  chunks = [(str(tmp), seed, stream, tuple(window), cfg, lo, min(lo + chunk, size)) for lo in range(0, size, chunk)]
  if workers > 1 and len(chunks) > 1:
    import multiprocessing  # pylint: disable=g-import-not-at-top
    with multiprocessing.get_context("spawn").Pool(min(workers, len(chunks))) as pool:
      done = pool.imap_unordered(_render_chunk, chunks)
      _drain(done, len(chunks), progress, path.name)
  else:
    _drain(map(_render_chunk, chunks), len(chunks), progress, path.name)
  (tmp / "meta.json").write_text(json.dumps(want, indent=1) + "\n")
  try:
    os.replace(tmp, path)
  except OSError:
    if not path.exists():
      raise
    # Another process (a second run started on the same workdir) finished the same cache first: keep its copy.
    shutil.rmtree(tmp, ignore_errors=True)
    return _existing(path, want)
  return path


def _existing(path: pathlib.Path, want: dict) -> pathlib.Path:
  """`path` when the cache there has the settings `want`; otherwise a ValueError naming both."""
  have = _read_meta(path)
  if not _same_settings(have, want):
    raise ValueError(f"{path}: holds a synthetic cache of other settings ({have}); expected {want}")
  return path


def _render_chunk(task) -> int:
  """Renders scenes lo..hi-1 into the memory-mapped arrays of the cache being written at `tmp`."""
  tmp, seed, stream, window, cfg, lo, hi = task
  arrays = {k: np.load(pathlib.Path(tmp) / f"{k}.npy", mmap_mode="r+") for k in _FIELDS}
  for i in range(lo, hi):
    ex = synthetic.generate(seed, i, cfg, window=window, stream=stream)
    for k in _FIELDS:
      arrays[k][i] = ex[k]
  for a in arrays.values():
    a.flush()
  return hi - lo


def _drain(done, total: int, progress: bool, name: str) -> None:
  if progress:
    import tqdm  # pylint: disable=g-import-not-at-top
    done = tqdm.tqdm(done, total=total, desc=f"rendering {name} (tasks)", leave=False)
  for _ in done:
    pass


def _read_meta(path: pathlib.Path) -> dict:
  try:
    return json.loads((path / "meta.json").read_text())
  except (OSError, ValueError) as e:
    raise ValueError(f"{path}: not a synthetic scene cache (meta.json unreadable: {e})") from e


def cache_name(split: str, seed: int, window: tuple[int, int, int, int]) -> str:
  """The directory name of a split's cache under a `synthetic_cache_dir`: e.g. 'train_s0_144x448x64x320'."""
  return f"{split}_s{int(seed)}_" + "x".join(str(int(v)) for v in window)


class SceneCache:
  """Read side: `lookup(seed, stream, index, window)` -> the example dict, or None if not cached."""

  def __init__(self, path: str | os.PathLike, config: Optional[synthetic.SyntheticConfig] = None):
    self.path = pathlib.Path(path)
    meta = _read_meta(self.path)
    cfg = (config or synthetic.SyntheticConfig()).resolved()
    try:
      same = meta.get("format") == FORMAT and _saved_config(meta) == cfg
    except (TypeError, ValueError):
      same = False
    if not same:
      raise ValueError(f"{self.path}: cache of another generator version or SyntheticConfig; rebuild it")
    self.seed, self.stream, self.size = meta["seed"], meta["stream"], meta["size"]
    self.window = tuple(meta["window"])
    self._arrays = {k: np.load(self.path / f"{k}.npy", mmap_mode="r") for k in _FIELDS}

  def lookup(self, seed: int, stream: int, index: int, window) -> Optional[dict[str, np.ndarray]]:
    if (seed, stream) != (self.seed, self.stream) or not 0 <= index < self.size:
      return None
    if window is None or tuple(window) != self.window:
      return None
    ex = {k: np.array(self._arrays[k][index]) for k in _FIELDS}
    ex["valid"] = ex["target"] > 0
    ex["name"] = np.int64(index)
    return ex
