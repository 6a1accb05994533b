"""KITTI-layout PNG pairs (e.g. ../shared/data/kitti_depth_mini) as evaluation batches, without TFDS (eval.py
--pairs_dir)."""

from __future__ import annotations

import pathlib

import numpy as np

from pncnn_jax.data import io as data_io
from pncnn_jax.data import sparsify


def kitti_pairs(root: str | pathlib.Path) -> list[tuple[pathlib.Path, pathlib.Path]]:
  """(velodyne_raw PNG, groundtruth PNG) pairs under a KITTI depth-completion tree (docs/SPEC.md §10.1)."""
  root = pathlib.Path(root)
  if not root.is_dir():
    raise FileNotFoundError(f"--pairs_dir {root} is not a directory")
  pairs = []
  for s in sorted(root.glob("**/proj_depth/velodyne_raw/**/*.png")):
    parts = list(s.parts)
    i = len(parts) - 1 - parts[::-1].index("velodyne_raw")
    g = pathlib.Path(*parts[:i], "groundtruth", *parts[i + 1:])
    if not g.is_file():
      raise FileNotFoundError(f"{s}: no ground truth at {g}")
    pairs.append((s, g))
  if not pairs:
    raise FileNotFoundError(f"no */proj_depth/velodyne_raw/*/*.png under {root}")
  return pairs


def kitti_pair_batches(root: str | pathlib.Path, crop_hw: tuple[int, int] = (352, 1216)):
  """Yields batches of one image: the bottom `crop_hw` rows, centred columns (val_selection_cropped style)."""
  for s, g in kitti_pairs(root):
    sparse = data_io.read_kitti_depth(s)
    target = data_io.read_kitti_depth(g, expected_shape=sparse.shape)
    top, left = sparsify.crop_offsets(*sparse.shape, *crop_hw, "bottom")
    win = np.s_[top:top + crop_hw[0], left:left + crop_hw[1]]
    name = str(s.relative_to(root))
    yield {"sparse": sparse[win][None, ..., None], "target": target[win][None, ..., None],
           "name": np.asarray([name])}
