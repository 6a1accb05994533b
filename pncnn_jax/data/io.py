"""File IO for depth maps: KITTI 16-bit PNGs (metres * 256) and NYU 16-bit PNGs (millimetres).

KITTI depth-completion PNGs (docs/SPEC.md §10.2) are single-channel 16-bit images whose raw
value v encodes depth d = v / 256 metres; v = 0 means "no measurement". NYU-Depth-v2 PNGs (the
sync_depth_*.png of the official toolbox exports) encode d = v / 1000 metres (millimetres).

Every reader checks that the file is a readable, complete, single-channel 16-bit PNG and raises
`DepthFileError` naming the file otherwise. Every writer checks the array it is handed (2-D,
finite, non-negative, representable in 16 bits) and raises `ValueError` naming the argument and file; the
array reader and the writers check layouts with the input contract (`pncnn_jax.data.input_contract`).
"""

from __future__ import annotations

import os
import pathlib
from typing import Union

import numpy as np
from PIL import Image

from pncnn_jax.data import input_contract

PathLike = Union[str, os.PathLike]

KITTI_DEPTH_SCALE = 256.0  # raw uint16 per metre (docs/SPEC.md §10.2)
NYU_DEPTH_SCALE = 1000.0  # raw uint16 per metre (millimetres)
KITTI_METRES_PER_UNIT = 1 / KITTI_DEPTH_SCALE  # metres per stored unit: what `--depth_scale` of predict means
MM_METRES_PER_UNIT = 1 / NYU_DEPTH_SCALE
_UINT16_MAX = np.iinfo(np.uint16).max
_16BIT_MODES = ("I;16", "I;16B", "I;16L", "I")


class DepthFileError(ValueError):
  """A depth file is unreadable, truncated, not 16-bit or of the wrong size."""


def read_png_uint16(path: PathLike) -> np.ndarray:
  """Reads a single-channel 16-bit PNG losslessly.

  Args:
    path: the PNG file.

  Returns:
    (H, W) uint16 array of the raw stored values.

  Raises:
    DepthFileError: naming `path` if it is missing, truncated/corrupt, not a PNG, not
      single-channel 16-bit, or (mode "I") holds values outside [0, 65535].
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise DepthFileError(f"{path}: depth file does not exist")
  try:
    with Image.open(path) as img:
      fmt, mode = img.format, img.mode
      if fmt != "PNG":
        raise DepthFileError(f"{path}: expected a 16-bit PNG depth map, found format {fmt!r}")
      if mode not in _16BIT_MODES:
        raise DepthFileError(
            f"{path}: expected a single-channel 16-bit PNG depth map, found PIL mode {mode!r} "
            "(8-bit or colour images are not depth maps)")
      img.load()  # Decodes the whole stream: a truncated file fails here.
      arr = np.asarray(img)
  except DepthFileError:
    raise
  except (OSError, SyntaxError, ValueError) as e:  # PIL raises these on truncated/corrupt data.
    detail = str(e).replace(repr(str(path)), "it").replace(str(path), "it")  # the path once, in front
    raise DepthFileError(f"{path}: truncated or corrupt PNG ({type(e).__name__}: {detail})") from e
  if arr.ndim != 2:
    raise DepthFileError(f"{path}: expected a single-channel depth map, got shape {arr.shape}")
  if arr.dtype != np.uint16:
    if arr.min(initial=0) < 0 or arr.max(initial=0) > _UINT16_MAX:
      raise DepthFileError(f"{path}: values outside the 16-bit range [0, 65535]")
    arr = arr.astype(np.uint16)
  return arr


def _check_depth_array(depth: np.ndarray, scale: float, name: str, path: PathLike) -> np.ndarray:
  """Validates a depth map in metres before it is quantised to uint16 (value = round(d * scale)): the input
  contract's layout and sign checks (`input_contract`), and no NaN or inf, which a 16-bit PNG cannot hold (its
  "no measurement" is 0: a caller writes NaN as 0 first, as predict does)."""
  frames, _ = input_contract.as_frames(depth, name=f"{name} for {path}",
                                       layouts=(input_contract.HW, input_contract.HW1))
  depth = frames[0].astype(np.float64)
  if not np.all(np.isfinite(depth)):
    raise ValueError(f"{name} for {path}: {int(np.sum(~np.isfinite(depth)))} non-finite values "
                     "(NaN/inf), which a 16-bit PNG cannot hold; use 0 for no measurement")
  input_contract.check_not_negative(depth, name=f"{name} for {path}")
  max_m = _UINT16_MAX / scale
  if np.any(np.round(depth * scale) > _UINT16_MAX):
    raise ValueError(f"{name} for {path}: depth {depth.max():.4g} m exceeds the format's "
                     f"maximum {max_m:.4g} m")
  return depth


def write_png_uint16(path: PathLike, raw: np.ndarray) -> None:
  """Writes an (H, W) uint16 array as a 16-bit greyscale PNG (lossless)."""
  raw = np.asarray(raw)
  if raw.ndim != 2 or raw.dtype != np.uint16:
    raise ValueError(f"raw for {path}: expected an (H, W) uint16 array, got {raw.dtype} {raw.shape}")
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  Image.fromarray(raw).save(path, format="PNG")


def _read_scaled(path: PathLike, scale: float, expected_shape) -> np.ndarray:
  raw = read_png_uint16(path)
  if expected_shape is not None and tuple(raw.shape) != tuple(expected_shape):
    raise DepthFileError(f"{path}: size {raw.shape[1]}x{raw.shape[0]} (WxH) does not match its pair's "
                         f"{expected_shape[1]}x{expected_shape[0]}")
  return raw.astype(np.float32) / np.float32(scale)


def read_kitti_depth(path: PathLike, expected_shape=None) -> np.ndarray:
  """Reads a KITTI depth PNG (velodyne_raw or groundtruth) as metres.

  Args:
    path: 16-bit PNG, metres = value / 256 (docs/SPEC.md §10.2).
    expected_shape: optional (H, W) the file must have (the size of its pair).

  Returns:
    (H, W) float32 depth in metres, 0 where there is no measurement. Exact: every uint16 / 256
    is representable in float32.
  """
  return _read_scaled(path, KITTI_DEPTH_SCALE, expected_shape)


def write_kitti_depth(path: PathLike, depth_m: np.ndarray) -> None:
  """Writes a depth map in metres as a KITTI 16-bit PNG, value = round(depth * 256).

  Args:
    path: output PNG path (parent folders are created).
    depth_m: (H, W) or (H, W, 1) depth in metres, >= 0, finite, <= 255.996 m; 0 = missing.
  """
  depth = _check_depth_array(depth_m, KITTI_DEPTH_SCALE, "depth_m", path)
  write_png_uint16(path, np.round(depth * KITTI_DEPTH_SCALE).astype(np.uint16))


def read_nyu_depth(path: PathLike, expected_shape=None) -> np.ndarray:
  """Reads an NYU-Depth-v2 millimetre PNG as (H, W) float32 metres (value / 1000; 0 = missing)."""
  return _read_scaled(path, NYU_DEPTH_SCALE, expected_shape)


def write_nyu_depth(path: PathLike, depth_m: np.ndarray) -> None:
  """Writes a depth map in metres as an NYU millimetre PNG, value = round(depth * 1000) (<= 65.535 m)."""
  depth = _check_depth_array(depth_m, NYU_DEPTH_SCALE, "depth_m", path)
  write_png_uint16(path, np.round(depth * NYU_DEPTH_SCALE).astype(np.uint16))


# --------------------------------------------------------------------------------------------------------------
# Any scale: 16-bit PNGs of `metres_per_unit`, and float arrays (.npy / .npz) in metres


def read_depth_png(path: PathLike, metres_per_unit: float) -> np.ndarray:
  """Reads a 16-bit PNG depth map whose stored value v means v * metres_per_unit metres (0 = missing).

  KITTI PNGs are metres_per_unit = 1/256 (`read_kitti_depth`), millimetre PNGs (ToF cameras, NYU exports) 0.001.
  Returns (H, W) float32 metres: the float64 product rounded once to float32 (exact for 1/256).
  """
  return (read_png_uint16(path).astype(np.float64) * float(metres_per_unit)).astype(np.float32)


def write_depth_png(path: PathLike, depth_m: np.ndarray, metres_per_unit: float) -> None:
  """Writes (H, W) depth in metres as a 16-bit PNG, value = round(depth / metres_per_unit) (<= 65535 units)."""
  scale = 1.0 / float(metres_per_unit)
  depth = _check_depth_array(depth_m, scale, "depth_m", path)
  write_png_uint16(path, np.round(depth * scale).astype(np.uint16))


NPZ_KEYS = ("sparse", "depth")  # the array an .npz holding several is read from, in this order
# The shapes a depth array file may have: one map, with or without its channel and batch axes of size 1.
ARRAY_LAYOUTS = (input_contract.HW, input_contract.HW1, input_contract.ONE_HW, input_contract.ONE_HW1)


def read_depth_array(path: PathLike) -> np.ndarray:
  """Reads a depth map stored as a numpy array: an .npy file, or an .npz holding one array (or several, one of
  them named 'sparse' or 'depth'). The values are returned as stored, as (H, W) float64; (H, W, 1), (1, H, W)
  and (1, H, W, 1) are squeezed (ARRAY_LAYOUTS). Raises DepthFileError naming the file for anything else (pickled
  objects included: they are never loaded; other shapes and dtypes with the input contract's message)."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise DepthFileError(f"{path}: depth file does not exist")
  with open(path, "rb") as f:
    magic = f.read(6)
  if magic != b"\x93NUMPY" and not magic.startswith(b"PK"):
    raise DepthFileError(f"{path}: not a numpy .npy or .npz file")
  try:
    loaded = np.load(path, allow_pickle=False)
    if isinstance(loaded, np.lib.npyio.NpzFile):
      with loaded:
        arr = _pick_npz_array(path, loaded)
    else:
      arr = loaded
  except DepthFileError:
    raise
  except (OSError, ValueError, EOFError) as e:
    what = "holds pickled Python objects, which are never loaded" if "pickle" in str(e) or "Object arr" in str(e) \
        else f"truncated or corrupt ({type(e).__name__}: {e})"
    raise DepthFileError(f"{path}: {what}") from e
  return _check_array(path, arr)


def _pick_npz_array(path: pathlib.Path, npz) -> np.ndarray:
  keys = list(npz.keys())
  key = next((k for k in NPZ_KEYS if k in keys), keys[0] if len(keys) == 1 else None)
  if key is None:
    raise DepthFileError(f"{path}: holds the arrays {keys}; expected one array, or one named "
                         f"{' or '.join(repr(k) for k in NPZ_KEYS)}")
  return npz[key]


def _check_array(path: pathlib.Path, arr: np.ndarray) -> np.ndarray:
  """The array of a depth file as (H, W) float64, the values as stored; its layout and dtype checked by the input
  contract's `as_frames` (one of ARRAY_LAYOUTS, real numbers, at least one pixel), as DepthFileError."""
  try:
    frames, _ = input_contract.as_frames(arr, name=str(path), layouts=ARRAY_LAYOUTS)
  except ValueError as e:
    raise DepthFileError(str(e)) from None
  return frames[0].astype(np.float64)
