"""Sparse input samplers (docs/SPEC.md §10.4) and crops (§10.3); pure numpy."""

from __future__ import annotations

import numpy as np


def uniform_sparsify(depth: np.ndarray, num_samples: int, rng: np.random.Generator) -> np.ndarray:
  """The 'uar' UniformSampling of sparse-to-dense / pNCNN on NYU (docs/SPEC.md §10.4).

  Keeps each pixel independently iff depth > 0 and U(0, 1) < num_samples / n_valid, so the number
  kept is Binomial(n_valid, num_samples / n_valid) with mean num_samples (not exactly N). The
  uniform field covers every pixel, so the draw depends only on `rng` and the image size.

  Args:
    depth: (H, W) or (H, W, 1) depth in metres, 0 = missing.
    num_samples: N > 0, the expected number of samples.
    rng: numpy Generator (seed it for reproducibility).

  Returns:
    float32 array of depth's shape: depth where sampled, 0 elsewhere.
  """
  if num_samples <= 0:
    raise ValueError(f"num_samples must be positive, got {num_samples}")
  depth = np.asarray(depth, np.float32)
  valid = depth > 0
  n_valid = int(valid.sum())
  u = rng.random(depth.shape, dtype=np.float32)
  if n_valid == 0:
    return np.zeros_like(depth)
  keep = valid & (u < np.float32(num_samples / n_valid))
  return np.where(keep, depth, np.float32(0.0))


def crop_offsets(height: int, width: int, crop_h: int, crop_w: int, mode: str,
                 rng: np.random.Generator | None = None) -> tuple[int, int]:
  """(top, left) of a crop_h x crop_w window in a height x width image.

  Modes (docs/SPEC.md §10.3):
    'center': torchvision CenterCrop of the reference: top = round((H - h) / 2),
      left = round((W - w) / 2) with Python's round-half-to-even (375x1242 -> 12, 13).
    'bottom': KITTI val_selection_cropped: the bottom h rows, centre columns as above.
    'random': uniform top and left from `rng`.
  """
  if crop_h > height or crop_w > width:
    raise ValueError(f"crop {crop_h}x{crop_w} is larger than the image {height}x{width}")
  if mode == "center":
    return round((height - crop_h) / 2), round((width - crop_w) / 2)
  if mode == "bottom":
    return height - crop_h, round((width - crop_w) / 2)
  if mode == "random":
    if rng is None:
      raise ValueError("crop mode 'random' needs an rng")
    return int(rng.integers(0, height - crop_h + 1)), int(rng.integers(0, width - crop_w + 1))
  raise ValueError(f"crop mode must be 'center', 'bottom', 'random' or 'none', got {mode!r}")


def crop_window(height: int, width: int, crop_h: int, crop_w: int, mode: str,
                rng: np.random.Generator | None = None) -> tuple[int, int, int, int] | None:
  """(top, left, crop_h, crop_w) of `crop_offsets`, or None for mode 'none' (the whole image)."""
  if mode == "none":
    return None
  top, left = crop_offsets(height, width, crop_h, crop_w, mode, rng)
  return top, left, crop_h, crop_w
