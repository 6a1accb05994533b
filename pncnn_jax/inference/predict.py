r"""Depth completion with uncertainty on your own sparse depth maps or point clouds.

  python -m pncnn_jax.predict [--checkpoint PATH] --input FILE_OR_DIR --output DIR [--input_format auto]
      [--depth_scale M] [--output_format same] [--variant NAME] [--no_preview] [--overwrite] [--fill_unsupported]
  python -m pncnn_jax.predict [--checkpoint PATH] --points SCAN_OR_DIR --calib CALIB [--camera 02] --output DIR

Input formats (`--input_format`; a directory is searched recursively for the format's files, following
symlinked folders; dangling links are named and skipped):
  kitti_png   16-bit PNG, KITTI depth completion: metres = value / 256 (--depth_scale 0.00390625)
  mm_png      16-bit PNG in millimetres, as ToF cameras and NYU-Depth-v2 exports write: metres = value / 1000
              (--depth_scale 0.001)
  npy         float array (H, W) or (H, W, 1) in metres (--depth_scale 1) as .npy, or .npz holding one array (or
              one named 'sparse' or 'depth'); NaN and +-inf mean no measurement, as 0 does
  auto        (default) by suffix: .npy/.npz are npy, .png are kitti_png. Millimetre PNGs need mm_png: the two
              PNG formats cannot be told apart from the file.
0 means no measurement in every format. `--depth_scale` (metres per stored unit) replaces the format's scale,
e.g. 0.0001 for PNGs in tenths of a millimetre, or 0.001 for .npy arrays in millimetres. Each file is printed
with the format, scale and depth range it was read as. Every input is checked against the input contract
(pncnn_jax.data.input_contract, the same checks and one-line messages as the Completer and the bag command):
negative depths, depths beyond 1000 m or a median under 5 cm (a wrong --input_format or --depth_scale: the line
says what the numbers look like) and a frame without any measurement are refused; measurements beyond the depth
range the model was trained on (100 m for the shipped synthetic models) get a warning naming the file.
--points reads LiDAR point clouds instead (.bin KITTI Velodyne scans, .npy (N, 3|4) in metres) and projects them
into camera --camera of --calib (a KITTI date folder or a YAML / JSON file; pncnn_jax.data.points); a scan whose
ranges are not metres (beyond 1000 m, or a median under 5 cm) is refused the same way.

For every input it writes, under the same relative name in DIR:
  <name>.png or <name>.npy  the completed depth, >= 0 (negative network outputs are clamped to 0 and counted on
                           the file's line) where it is valid, and "no value" elsewhere: NaN in .npy, 0 in PNGs
                           (their formats' "no measurement"); in `--output_format`: 'same' (default: the input's
                           format and unit; an .npy read with --depth_scale 0.001 is written in millimetres; point
                           clouds: npy metres), kitti_png, mm_png (PNGs clip at the format's largest depth, 255.996 m
                           and 65.535 m, with a warning) or npy (float32 (H, W) metres); each file's line names the
                           unit
  <name>_sigma.npy         float32 (H, W) predicted standard deviation in metres, whatever the depth's unit (models
                           trained with a probabilistic loss; see pncnn_jax.inference.completer), or
  <name>_confidence.npy    float32 (H, W) the output confidence (unitless), for NCNN-style models without a sigma;
                           either is NaN where the depth is not valid
  <name>_valid.png         8-bit PNG, 255 where the depth is valid, 0 where it is not (`Completion.valid`, below)
  <name>_preview.png       a figure: the input, the depth and the uncertainty, with colour bars in their units,
                           the pixels that are not valid hatched (not with --no_preview)
Valid pixels are those with input support (a measurement within 8 pixels) whose network depth is not negative;
elsewhere (e.g. the rows above a LiDAR) the network extrapolates. --fill_unsupported writes the network's value
there too (depth clamped at 0, sigma as predicted: every pixel a number, as before), and <name>_valid.png still
marks them.
Any image size works: the input is zero-padded at the bottom and right to a multiple of 8 (--pad_multiple) and
the outputs are cropped back. Padding has zero input confidence, but NConv spreads confidence into it, so
predictions within a few pixels of the bottom/right border differ slightly from --pad_multiple 1, which runs
the network at the image's own size exactly as the reference does (it handles any size).
Every output is written under a temporary name and renamed when complete, so a file under its normal name is never
truncated. DIR is one run's at a time: a second predict (or eval.py, or bag command) on it stops at once with one
line naming the first (a `flock` on DIR, with DIR/RUNNING naming the holder while it runs), and
DIR/pncnn_writer.json records the model (its weights' sha256) and the settings that wrote it. An input whose outputs
all exist is skipped (an interrupted run is rerun by repeating the command; --overwrite redoes them); a rerun with
another model or other settings (another --checkpoint, --variant, --fill_unsupported, --pad_multiple, --fusion,
--precision_scales), or into a folder of outputs without that record, is refused with one line naming the fields
that differ, before anything is written: --overwrite redoes every input with the new model (outputs of inputs that
are not part of the new run stay, and are counted in a warning). An empty --input, --output or --points ("" from an
unset shell variable) is refused; no output is written through a symlinked folder that leads out of DIR; a DIR
inside the --input folder that an earlier predict wrote (it has pncnn_writer.json) is not read as input. Frames
stream one at a time (memory does not grow with their number), with a progress bar (rate, time left) on stderr when
it is a terminal, and a summary line on stdout at the end.
Each file's line states its input density (the share of pixels holding a measurement within the rows spanned by
measurements, pncnn_jax.data.input_contract.input_density); a frame outside the density range the model was trained
on (a shipped model's manifest records it: 6.0-10.3 % for the synthetic 64-beam LiDAR of the shipped models) gets one
warning line ("expect larger errors"), and the summary counts them; models without such a record (official
.pth.tar, training runs) state the density only. DIR/pncnn_summary.json records each completed input's density and
whether it lies in that range (docs/deploy/sensors.md: which model for which sensor).
Files that cannot be read or predicted are reported by name and skipped; the exit status is 1 if any file failed.
An output that cannot be written (a full disk, a read-only place) stops the run with one line naming it, exit
status 1. An --output folder that would overwrite an input (the input folder itself, the folder of an input
file, or any output file landing on an input) is refused with exit status 2 before anything is written.

PATH is a pncnn_jax checkpoint (a training workdir -> its best step, a step directory, or a converted model
directory), a shipped model ('synthetic:pncnn_masked') or an official `.pth.tar` / `.npz`; the variant is read
from it unless --variant is given.

An ensemble: several PATHs separated by commas (members of one model trained with a probabilistic loss, e.g.
synthetic:pncnn_masked,synthetic:pncnn_masked_seed1,synthetic:pncnn_masked_seed2,synthetic:pncnn_masked_seed3) are
run together and fused per pixel by --fusion (default weighted_mean: the precision-weighted mean; also mean,
max_confidence, mle); <name>_sigma.npy is then the fused sigma, sqrt of the expected squared error under the members'
mixture (docs/SPEC.md §9). --precision_scales s_1,...,s_K multiplies each member's precision first (calibrated
fusion, e.g. the scales `pncnn_jax.ensemble.members.fit_precision_scales` fitted on validation data).

Every frame goes through `pncnn_jax.Completer` (pncnn_jax.inference.completer), the Python API of the same
computation.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import json
import os
import pathlib
import signal
import sys
import time
import warnings
from typing import Any, Callable

import numpy as np
from tqdm import tqdm

from pncnn_jax import viz
from pncnn_jax.data import input_contract, io
from pncnn_jax.ensemble import fusion
from pncnn_jax.inference import completer as completer_lib
from pncnn_jax.nn import models
from pncnn_jax.runtime import cli, run_files

MULTIPLE = completer_lib.MULTIPLE  # three 2x2 poolings


def pad_to_multiple(depth_hw: np.ndarray, multiple: int = MULTIPLE) -> np.ndarray:
  """Zero-pads an (H, W) map at the bottom and right to multiples of `multiple`."""
  h, w = depth_hw.shape
  return np.pad(depth_hw, ((0, -h % multiple), (0, -w % multiple)))


def predict_array(model: models.PNCNN, variables: dict[str, Any], sparse_hw: np.ndarray, *,
                  multiple: int = MULTIPLE, name: str = "input") -> models.ModelOutput:
  """The raw network fields of one (H, W) sparse depth map [m] of any size, as (H, W) numpy arrays.

  The low-level route under `pncnn_jax.Completer` (which most callers want: depth clamped at 0, sigma in metres):
  it runs `Completer.forward`, so the two agree exactly. `depth` is not clamped here and `confidence` is the
  model's own (the precision 1/sigma^2 [1/m^2] for pNCNN, the NConv confidence for NCNN). The input passes the
  Completer's checks, the input contract (`pncnn_jax.data.input_contract.check_sparse_depth`, layout (H, W)):
  0, NaN and +-inf are no measurement (one NaN would otherwise spread through every NConv and make the whole
  prediction NaN), and a negative depth, depths that are not metres or a map without any measurement are a
  ValueError naming `name`. Maps smaller than MULTIPLE (8) pixels, which the three 2x2 poolings cannot take at
  their own size, are zero-padded to 8.
  """
  if multiple < 1:
    raise ValueError(f"pad multiple must be >= 1, got {multiple}")
  sparse = input_contract.check_sparse_depth(sparse_hw, name=name, layouts=(input_contract.HW,))
  raw = completer_lib.Completer(model, variables, loss=None, multiple=multiple).forward(sparse)
  return models.ModelOutput(raw["depth"][0], raw["confidence"][0], raw["input_confidence"][0],
                            raw["output_confidence"][0])


# name: (suffixes, metres per stored unit, what it is)
FORMATS = {
    "kitti_png": ((".png",), io.KITTI_METRES_PER_UNIT, "16-bit PNG, metres = value / 256 (KITTI)"),
    "mm_png": ((".png",), io.MM_METRES_PER_UNIT, "16-bit PNG in millimetres (ToF, NYU)"),
    "npy": ((".npy", ".npz"), 1.0, "float array in metres (.npy / .npz)"),
}
INPUT_FORMATS = ("auto", *FORMATS)
OUTPUT_FORMATS = ("same", *FORMATS)
OUTPUT_SUFFIXES = (".png", ".npy", "_sigma.npy", "_confidence.npy", "_valid.png", "_preview.png")


def format_of(path: pathlib.Path, input_format: str) -> str:
  """The format a file is read as: `input_format`, or for 'auto' the suffix's (.png: kitti_png, .npy/.npz: npy).
  Raises ValueError naming the file if its suffix does not fit the format."""
  suffix = path.suffix.lower()
  if input_format == "auto":
    found = next((f for f, (sfx, _, _) in FORMATS.items() if suffix in sfx), None)
    if found is None:
      raise ValueError(f"{path}: unknown depth file type {suffix!r}; expected .png, .npy or .npz")
    return found
  if suffix not in FORMATS[input_format][0]:
    raise ValueError(f"{path}: --input_format {input_format} reads {'/'.join(FORMATS[input_format][0])} files, not "
                     f"{suffix or 'files without a suffix'} (use --input_format auto)")
  return input_format


def read_input(path: pathlib.Path, input_format: str = "auto", depth_scale: float | None = None
               ) -> tuple[np.ndarray, str, float]:
  """(sparse depth (H, W) float32 [m], format, metres per stored unit) of one input file.

  The stored values times `depth_scale` (default: the format's) are metres, checked against the input contract
  (`pncnn_jax.data.input_contract.check_sparse_depth`): 0, NaN and +-inf are no measurement (0 in the result).
  Raises DepthFileError / ValueError naming the file for an unreadable file, negative depths, depths that only a
  wrong format or scale explains (beyond 1000 m, or a median under 5 cm; the message says which --input_format and
  --depth_scale it was read with) or a frame without any measurement.
  """
  fmt = format_of(path, input_format)
  scale = FORMATS[fmt][1] if depth_scale is None else float(depth_scale)
  raw = io.read_depth_array(path) if fmt == "npy" else io.read_png_uint16(path)
  hint = (f"read as {fmt} at {scale:g} m per stored unit: wrong --input_format or --depth_scale? "
          "(kitti_png: value / 256 m, mm_png: value / 1000 m, npy: metres)")
  depth = input_contract.check_sparse_depth(raw.astype(np.float64) * scale, name=str(path),
                                            layouts=(input_contract.HW,), hint=hint)
  return depth[0], fmt, scale


TMP_MARK = ".pncnn-tmp"  # in the temporary names outputs are written under before their rename (never inputs)


def _walk_files(root: pathlib.Path, warn: Callable[[str], None], exclude: pathlib.Path | None = None
                ) -> list[pathlib.Path]:
  """Every file under `root`, following symlinked folders (each real folder once: a link back up a tree is a
  loop, named and not followed), except under `exclude` (the output folder); dangling links are named and
  skipped."""
  seen = {os.path.realpath(root)}
  skip = os.path.realpath(exclude) if exclude is not None else None
  found = []
  for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
    for d in sorted(dirnames):
      full = pathlib.Path(dirpath) / d
      real = os.path.realpath(full)
      if real == skip:  # predict's own outputs are not inputs
        dirnames.remove(d)
        continue
      if real in seen:
        warn(f"{full}: a symlinked folder already searched (a loop, or a second link to it); not followed")
        dirnames.remove(d)
      seen.add(real)
    for f in filenames:
      full = pathlib.Path(dirpath) / f
      if full.is_file():
        found.append(full)
      elif full.is_symlink() and not full.exists():
        warn(f"{full}: a dangling link (its target {os.readlink(full)} does not exist); skipped")
  return sorted(found)


def input_files(path: pathlib.Path, input_format: str = "auto", *, suffixes: set[str] | None = None,
                warn: Callable[[str], None] | None = None, flag: str = "--input",
                exclude: pathlib.Path | None = None) -> list[tuple[pathlib.Path, pathlib.Path]]:
  """(file, name relative to the input root) pairs: the file itself, or every file of the format (or of
  `suffixes`) under a folder, following symlinked folders (outputs of an earlier run, *_preview.png, *_valid.png,
  *_sigma.npy, *_confidence.npy, and predict's temporary files, excepted; nothing under the folder `exclude`, the
  output folder when it lies inside). Dangling links and symlink loops are reported through `warn` (default: a
  line on stderr). Two inputs that would write the same outputs (a.png and a.npy) are
  a ValueError. Messages name `flag`, the command-line flag `path` came from."""
  warn = warn or (lambda m: print(f"warning: {m}", file=sys.stderr))
  if path.is_file():
    return [(path, pathlib.Path(path.name))]
  if path.is_symlink() and not path.exists():
    raise FileNotFoundError(f"{flag} {path}: a dangling link (its target {os.readlink(path)} does not exist)")
  if not path.is_dir():
    raise FileNotFoundError(f"{flag} {path}: no such file or directory")
  if suffixes is None:
    suffixes = {s for f, (sfx, _, _) in FORMATS.items() if input_format in ("auto", f) for s in sfx}
  skip = ("_preview.png", "_valid.png", "_sigma.npy", "_confidence.npy")
  files = [p for p in _walk_files(path, warn, exclude)
           if p.suffix.lower() in suffixes and not p.name.endswith(skip) and TMP_MARK not in p.name]
  if not files:
    raise FileNotFoundError(f"{flag} {path}: no {'/'.join(sorted(suffixes))} files in this directory"
                            + (f" (--input_format {input_format})" if flag == "--input" else ""))
  pairs = [(p, p.relative_to(path)) for p in files]
  stems: dict[pathlib.Path, pathlib.Path] = {}
  for src, rel in pairs:
    other = stems.setdefault(rel.with_suffix(""), src)
    if other != src:
      raise ValueError(f"{flag} {path}: {other.name} and {src.name} would write the same outputs; keep one of "
                       "them, or pass --input_format to pick one kind")
  return pairs


def check_output(files: list[tuple[pathlib.Path, pathlib.Path]], input_path: pathlib.Path,
                 output_dir: pathlib.Path) -> None:
  """Raises ValueError (naming --output) if writing the outputs of `files` under `output_dir` could overwrite an
  input: `output_dir` is the input folder or the folder of an input file, or an output file is an input file; or
  if an output's folder is reached through a symlink that leads out of `output_dir` (a write the user never
  named)."""
  real = lambda p: pathlib.Path(os.path.realpath(p))  # noqa: E731  (symlinks and '..' resolved)
  out = real(output_dir)
  for _, rel in files:
    folder = output_dir / rel.parent
    if not real(folder).is_relative_to(out):
      link = next((p for p in (output_dir / q for q in reversed(list(rel.parents)[:-1])) if p.is_symlink()), folder)
      raise ValueError(f"--output {output_dir}: {link} is a symlink to {os.path.realpath(link)}, outside --output; "
                       "predict does not write through it (remove the link or choose another --output)")
  inputs = {real(src) for src, _ in files}
  folders = {p.parent for p in inputs} | ({real(input_path)} if input_path.is_dir() else set())
  if out in folders:
    raise ValueError(f"--output {output_dir} is the folder of the input files: predictions would overwrite them; "
                     "choose another folder")
  for _, rel in files:
    for suffix in OUTPUT_SUFFIXES:
      dst = real(out / f"{rel.with_suffix('')}{suffix}")
      if dst in inputs:
        raise ValueError(f"--output {output_dir} would overwrite the input {dst}; choose another folder")


class WriteError(OSError):
  """An output could not be written (full disk, read-only place, ...): the message names the output path."""


def atomic_write(path: pathlib.Path, write: Callable[[pathlib.Path], None]) -> pathlib.Path:
  """Calls write(tmp) on a temporary name beside `path` (hidden, with TMP_MARK, same suffix) and renames it to
  `path` (atomic on one file system): a file under its normal name is always complete, so an interrupted or
  failed run leaves no truncated output, and a rerun can trust what exists. On failure the temporary file is
  removed and WriteError names `path`."""
  try:
    return run_files.atomic_write(path, write, path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}{path.suffix}"))
  except OSError as e:
    raise WriteError(e.errno, f"cannot write {path}: {e.strerror or e}") from None


def _save_npy(path: pathlib.Path, array: np.ndarray) -> pathlib.Path:
  def write(tmp):
    with open(tmp, "wb") as f:
      np.save(f, array)
  return atomic_write(path, write)


def write_depth(stem: pathlib.Path, depth_m: np.ndarray, fmt: str, scale: float,
                warn: Callable[[str], None] | None = None) -> pathlib.Path:
  """Writes the completed depth [m] as `fmt` at `scale` metres per stored unit (PNGs: value = round(depth /
  scale), clipped to [0, 65535 * scale] with a warning through `warn` when a depth is beyond it, NaN (no value)
  written as 0, the formats' "no measurement"; npy: float32 depth / scale, NaN kept, so scale 1 is metres and
  0.001 millimetres), atomically (`atomic_write`); returns the file."""
  warn = warn or (lambda m: print(f"warning: {m}", file=sys.stderr))
  depth = np.clip(np.asarray(depth_m, np.float64), 0.0, None)  # NaN stays NaN
  if fmt == "npy":
    return _save_npy(stem.with_suffix(".npy"), (depth / np.float64(scale)).astype(np.float32))
  depth = np.nan_to_num(depth, nan=0.0)
  path = stem.with_suffix(".png")
  top = 65535 * scale
  if (far := int((depth > top).sum())):
    warn(f"{path}: {far} predicted depth(s) beyond {fmt}'s largest, {top:.6g} m, clipped to it")
  return atomic_write(path, lambda tmp: io.write_depth_png(tmp, np.clip(depth, 0.0, top), scale))


def write_mask_png(path: pathlib.Path, mask_hw: np.ndarray) -> None:
  """Writes an (H, W) bool mask as an 8-bit greyscale PNG: 255 = True, 0 = False."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  Image.fromarray(np.where(mask_hw, np.uint8(255), np.uint8(0))).save(path, format="PNG")


def output_paths(stem: pathlib.Path, fmt: str, has_sigma: bool, preview: bool) -> list[pathlib.Path]:
  """The files one input writes: the depth (`fmt`), the sigma or the output confidence, the valid mask, the
  preview."""
  paths = [stem.with_suffix(".npy" if fmt == "npy" else ".png"),
           pathlib.Path(f"{stem}_sigma.npy" if has_sigma else f"{stem}_confidence.npy"),
           pathlib.Path(f"{stem}_valid.png")]
  return paths + ([pathlib.Path(f"{stem}_preview.png")] if preview else [])


def _unit(scale: float) -> str:
  return {1.0: "m", 0.001: "mm", 1 / 256: "1/256 m"}.get(scale, f"{scale:g} m")


def _predict_one(completer: completer_lib.Completer, sparse: np.ndarray, src: pathlib.Path, fmt: str,
                 scale: float, stem: pathlib.Path, *, output_format: str, preview: bool,
                 warn: Callable[[str], None]) -> tuple[str, dict[str, Any]]:
  """Completes one read input and writes its outputs (module doc); returns the line printed for it and its record
  in SUMMARY_FILE ({input_density, density_in_range}). A frame outside the input density the model was trained
  on gets one warning line (the Completer's `InputDensityWarning`)."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out = completer(sparse, name=str(src))
  for w in caught:
    warn(str(w.message))
  out_fmt = fmt if output_format == "same" else output_format
  out_scale = scale if output_format == "same" else FORMATS[out_fmt][1]
  try:
    stem.parent.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise WriteError(e.errno, f"cannot write {e.filename or stem.parent}: {e.strerror or e}") from None
  valid = out.valid
  confidence = out.output_confidence if completer.fill_unsupported else np.where(valid, out.output_confidence,
                                                                                 np.float32(np.nan))
  if out.sigma is not None:
    _save_npy(pathlib.Path(f"{stem}_sigma.npy"), out.sigma)
  else:
    _save_npy(pathlib.Path(f"{stem}_confidence.npy"), confidence)
  atomic_write(pathlib.Path(f"{stem}_valid.png"), lambda tmp: write_mask_png(tmp, valid))
  if preview:
    atomic_write(pathlib.Path(f"{stem}_preview.png"), lambda tmp: viz.save_depth_preview(
        out.depth, tmp, sparse_m=sparse, sigma_m=out.sigma, confidence=None if out.sigma is not None else confidence,
        invalid=~valid, title=f"model {completer.name}, file {src.name}"))
  written = write_depth(stem, out.depth, out_fmt, out_scale, warn)  # last: the other outputs exist before it
  measured = sparse[sparse > 0]
  notes = [f"{int(out.clamped.sum())} negative depth(s) clamped to 0"] if out.clamped.any() else []
  if not out.support.all():
    notes.append(f"{100 * (1 - out.support.mean()):.0f}% of pixels without input support")
  if not valid.all():
    how = ("kept (--fill_unsupported)" if completer.fill_unsupported
           else f"written as {'NaN' if out_fmt == 'npy' else 0}")
    notes.append(f"{100 * (1 - valid.mean()):.0f}% not valid, {how}")
  line = (f"{src} ({fmt}, {scale:g} m per unit, input {measured.min():.3g}-{measured.max():.3g} m, input density "
          f"{completer_lib.density_text(out.input_density)} %) -> {written} "
          f"(depth in {_unit(out_scale)}{', sigma in m' if out.sigma is not None else ''})"
          + (f" [{'; '.join(notes)}]" if notes else ""))
  return line, {"input_density": out.input_density, "density_in_range": out.density_in_range}


def _check_output_dir(output_dir: str) -> None:
  out_root = pathlib.Path(output_dir)
  if out_root.exists() and not out_root.is_dir():
    raise ValueError(f"--output {output_dir} is a file, not a folder")
  base = next(p for p in (out_root.absolute(), *out_root.absolute().parents) if p.exists())  # what mkdir starts from
  if not base.is_dir() or not os.access(base, os.W_OK | os.X_OK):
    raise ValueError(f"--output {output_dir} cannot be created or written: {base} is "
                     + ("a file" if not base.is_dir() else "not writable"))
  if os.access(base, os.W_OK) and _read_only_mount(base):
    raise ValueError(f"--output {output_dir} cannot be created or written: {base} is on a read-only file system")


def _read_only_mount(path: pathlib.Path) -> bool:
  try:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
  except (OSError, AttributeError):
    return False


def predict_files(checkpoint: str, input_path: str | None, output_dir: str, variant: str | None = None,
                  multiple: int = MULTIPLE, allow_mismatch: bool = False, *, input_format: str = "auto",
                  depth_scale: float | None = None, output_format: str = "same", fusion_rule: str | None = None,
                  precision_scales: list[float] | None = None, points: str | None = None, calib: str | None = None,
                  camera: str = "02", preview: bool = True, overwrite: bool = False,
                  progress: bool | None = None, allow_fallback: bool = False,
                  fill_unsupported: bool = False) -> list[str]:
  """Predicts every input file; returns the messages of the files that failed (empty: all succeeded).

  `checkpoint`: one checkpoint, or several separated by commas (an ensemble, fused by `fusion_rule`, default
  'weighted_mean', after multiplying member k's precision by `precision_scales[k]`). `points` and `calib`
  replace `input_path`: a point-cloud file (or a folder of them) projected into `camera` of the calibration
  (`pncnn_jax.data.points.sparse_depth_from_files`); their outputs are float32 metres (npy) unless
  `output_format` says otherwise. `allow_fallback`: a checkpoint step that cannot be restored falls back to its
  run's newest intact step, with a warning (`Completer.from_checkpoint`). `fill_unsupported`: the depth and sigma
  keep the network's values where they are not valid (module doc) instead of NaN (0 in PNGs).

  Streams: one frame at a time is read, completed and written, so memory does not grow with the number of
  files; a progress bar (tqdm, on stderr; `progress` None: only on a terminal) shows the rate and the time
  left, and a summary line ends the run. Outputs are written atomically (`atomic_write`), so an input whose
  outputs all exist was finished: a rerun skips it unless `overwrite`.

  Raises ValueError before reading the checkpoint if the outputs could overwrite an input (`check_output`), a
  setting is out of range or the output cannot be written; WriteError (one line naming the path) when an
  output cannot be written during the run (full disk, read-only place), after the finished files. One file that
  fails otherwise (unreadable, no measurement, unpredictable) is reported on stderr and skipped.
  """
  for value, flag in ((output_dir, "--output"), (input_path, "--input"), (points, "--points"), (calib, "--calib")):
    run_files.require_path(value, flag)  # "" would be the current directory
  names = [n.strip() for n in str(checkpoint).split(",")]
  if not all(names):
    raise ValueError(f"--checkpoint {checkpoint!r}: an empty name between commas")
  if len(names) == 1 and (fusion_rule is not None or precision_scales is not None):
    raise ValueError("--fusion and --precision_scales need an ensemble: several --checkpoint paths separated by "
                     "commas")
  if fusion_rule is not None and fusion_rule not in fusion.FUSION_RULES:
    raise ValueError(f"--fusion {fusion_rule!r} is not one of {', '.join(fusion.FUSION_RULES)}")
  if precision_scales is not None and len(precision_scales) != len(names):
    raise ValueError(f"--precision_scales has {len(precision_scales)} values for {len(names)} checkpoints")
  if precision_scales is not None and not all(np.isfinite(v) and v > 0 for v in precision_scales):
    raise ValueError(f"--precision_scales {','.join(map(str, precision_scales))}: every scale must be a finite "
                     "number > 0")
  if input_format not in INPUT_FORMATS:
    raise ValueError(f"--input_format {input_format!r} is not one of {', '.join(INPUT_FORMATS)}")
  if output_format not in OUTPUT_FORMATS:
    raise ValueError(f"--output_format {output_format!r} is not one of {', '.join(OUTPUT_FORMATS)}")
  if depth_scale is not None and not (np.isfinite(depth_scale) and depth_scale > 0):
    raise ValueError(f"--depth_scale {depth_scale}: must be a finite number > 0 (metres per stored unit, e.g. 0.001 "
                     "for millimetres)")
  if multiple < 1:
    raise ValueError(f"--pad_multiple {multiple}: must be >= 1")
  n_warnings = 0

  def warn(message: str) -> None:
    nonlocal n_warnings
    n_warnings += 1
    tqdm.write(f"warning: {message}", file=sys.stderr)

  out_root = pathlib.Path(output_dir)
  # An earlier predict's output folder inside the input folder is not read back as input (a folder without its
  # writer record may hold the user's inputs: check_output refuses writing into it).
  exclude = out_root if (out_root / run_files.WRITER_FILE).is_file() else None
  if (points is None) == (input_path is None):
    raise ValueError("pass either --input (depth images) or --points with --calib (point clouds)")
  if points is not None:
    from pncnn_jax.data import points as points_lib  # pylint: disable=g-import-not-at-top  (numpy only)
    if calib is None:
      raise ValueError("--points needs --calib (the calibration: a KITTI date folder or a YAML / JSON file)")
    if depth_scale is not None or input_format != "auto":
      raise ValueError("--input_format and --depth_scale apply to --input depth images, not to --points")
    points_lib.read_calibration(pathlib.Path(calib), camera)  # a wrong calibration: one error, before the model
    root = pathlib.Path(points)
    files = input_files(root, "auto", suffixes=set(points_lib.POINT_SUFFIXES), warn=warn, flag="--points",
                        exclude=exclude)
    if root.is_file() and root.suffix.lower() not in points_lib.POINT_SUFFIXES:
      raise ValueError(f"--points {root}: expected a {'/'.join(points_lib.POINT_SUFFIXES)} point cloud")
    read = lambda src: (points_lib.sparse_depth_from_files(src, calib, camera=camera), "points", 1.0)  # noqa: E731
    default_format = "npy"
  else:
    root = pathlib.Path(input_path)
    files = input_files(root, input_format, warn=warn, exclude=exclude)
    if root.is_file():
      format_of(files[0][0], input_format)  # a file of the wrong type: one error, before the checkpoint loads
    read = lambda src: read_input(src, input_format, depth_scale)  # noqa: E731
    default_format = None
  check_output(files, root, out_root)
  _check_output_dir(output_dir)
  completer = completer_lib.Completer.from_checkpoint(
      names, variant=variant, allow_mismatch=allow_mismatch, allow_fallback=allow_fallback, multiple=multiple,
      fusion=(fusion_rule or "weighted_mean") if len(names) > 1 else None, precision_scales=precision_scales,
      fill_unsupported=fill_unsupported)
  if output_format == "same" and default_format is not None:
    output_format = default_format

  def outputs_of(src: pathlib.Path, rel: pathlib.Path) -> list[pathlib.Path]:
    fmt = output_format if output_format != "same" else format_of(src, input_format)
    return output_paths(out_root / rel.with_suffix(""), fmt, completer.has_sigma, preview)

  planned = set()
  for src, rel in files:
    with contextlib.suppress(ValueError):  # a file of another type fails on its own, in the loop
      planned.update(outputs_of(src, rel))
  record = {"command": "predict", "checkpoint": ",".join(names), "model": model_record(completer),
            # what changes the values a model writes for an input (not how inputs are read or outputs stored: one
            # folder may hold the outputs of PNGs and of arrays, each in its own format)
            "settings": {"variant": variant, "fusion": completer.fusion_rule, "precision_scales": precision_scales,
                         "pad_multiple": multiple, "fill_unsupported": fill_unsupported}}
  lock = _lock_output(out_root)
  try:
    replaced = run_files.claim_output(out_root, record, overwrite=overwrite,
                                      has_outputs=any(os.path.lexists(p) for p in planned))
  except BaseException:
    lock.release()
    raise
  for tmp in sorted(p for p in out_root.rglob(f"*{TMP_MARK}*") if p.is_file() and not p.is_symlink()):
    tmp.unlink(missing_ok=True)  # a killed run's (SIGKILL, power loss): with the lock held, no writer owns it
  if replaced:
    stale = sorted(p for p in out_root.rglob("*") if p.name.endswith(OUTPUT_SUFFIXES) and p not in planned
                   and TMP_MARK not in p.name)
    warn(f"--output {out_root} held {replaced}; --overwrite redoes every input with this model" + (
        f", but {len(stale)} earlier output(s) of other inputs stay as they were (e.g. {stale[0]})" if stale else ""))
  try:
    return _predict_all(completer, files, read, out_root, outputs_of, output_format=output_format,
                        preview=preview, overwrite=overwrite, progress=progress, warn=warn,
                        n_warnings=lambda: n_warnings, fresh=bool(replaced))
  finally:
    lock.release()


def model_record(completer: completer_lib.Completer) -> dict[str, Any]:
  """What identifies a loaded model in an output's writer record (`run_files.claim_output`): the sha256 of its
  weights (an ensemble: of every member's), its loss and its network's settings."""
  net = {f.name: repr(getattr(completer.model, f.name)) for f in dataclasses.fields(completer.model)
         if f.name not in ("parent", "name")}
  net = {k: v for k, v in net.items() if " at 0x" not in v}  # a function's repr names its address: not an identity
  return {"weights_sha256": run_files.weights_digest(completer.variables), "loss": completer.loss, "network": net}


def _lock_output(out_root: pathlib.Path) -> run_files.WorkdirLock:
  """Creates `out_root` and takes its lock (`run_files.WorkdirLock`: one writer per output folder)."""
  created = not out_root.exists()
  try:
    out_root.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise WriteError(e.errno, f"cannot write {e.filename or out_root}: {e.strerror or e}") from None
  lock = run_files.WorkdirLock(out_root, flag="--output", what="predict run")
  try:
    return lock.acquire()
  except BaseException:
    if created:
      with contextlib.suppress(OSError):
        out_root.rmdir()
    raise


def _predict_all(completer: completer_lib.Completer, files: list[tuple[pathlib.Path, pathlib.Path]],
                 read: Callable, out_root: pathlib.Path, outputs_of: Callable, *, output_format: str, preview: bool,
                 overwrite: bool, progress: bool | None, warn: Callable[[str], None],
                 n_warnings: Callable[[], int], fresh: bool = False) -> list[str]:
  """The loop of `predict_files` over a locked and claimed output folder; SUMMARY_FILE is written at its end
  (also when it is interrupted: the frames finished so far)."""
  real_root = pathlib.Path(os.path.realpath(out_root))
  failures, done, skipped, start = [], 0, 0, time.monotonic()
  frames: dict[str, dict[str, Any]] = {}
  bar = tqdm(files, unit="frame", file=sys.stderr, disable=None if progress is None else not progress,
             dynamic_ncols=True, smoothing=0.1)
  try:
    for src, rel in bar:
      if not overwrite:
        with contextlib.suppress(ValueError):
          if all(p.is_file() for p in outputs_of(src, rel)):
            skipped += 1
            continue
      try:
        if not pathlib.Path(os.path.realpath(out_root / rel.parent)).is_relative_to(real_root):
          raise WriteError(errno.EPERM, f"cannot write {out_root / rel.parent}: a symlink there leads out of "
                                        f"--output {out_root}")
        sparse, fmt, scale = read(src)
        line, frames[rel.as_posix()] = _predict_one(completer, sparse, src, fmt, scale, out_root / rel.with_suffix(""),
                                                    output_format=output_format, preview=preview, warn=warn)
      except WriteError:
        raise
      except Exception as e:  # pylint: disable=broad-except  (one bad file must not stop the batch)
        failures.append(_failure(e, src))
        tqdm.write(f"FAILED {failures[-1]}", file=sys.stderr)
        continue
      done += 1
      tqdm.write(line, file=sys.stdout)
  except WriteError as e:
    with contextlib.suppress(OSError):
      write_summary(out_root, completer, frames, fresh=fresh)
    raise WriteError(e.errno, f"{e.strerror}; {done} frame(s) finished before it, whose outputs are complete "
                     "(rerun to continue)") from None
  except BaseException:  # Ctrl-C, SIGTERM: the finished frames' records are kept
    with contextlib.suppress(OSError):
      write_summary(out_root, completer, frames, fresh=fresh)
    raise
  finally:
    bar.close()
  elapsed = time.monotonic() - start
  write_summary(out_root, completer, frames, fresh=fresh)
  outside = sum(f["density_in_range"] is False for f in frames.values())
  trained = completer.trained_density
  density = (f"{outside} outside the {completer_lib.density_text(trained.low)}-"
             f"{completer_lib.density_text(trained.high)} % input density the model was trained on"
             if trained is not None else "input density not checked (the model records no trained range)")
  print(f"summary: {len(files)} input(s): {done} completed, {skipped} skipped (finished earlier"
          f"{'' if overwrite else '; --overwrite redoes them'}), {len(failures)} failed, {n_warnings()} warning(s), "
          f"{density}, {elapsed:.1f} s ({done / max(elapsed, 1e-9):.2f} frames/s)")
  return failures


SUMMARY_FILE = "pncnn_summary.json"  # in an output folder: each completed input's input density (`write_summary`)


def write_summary(out_root: pathlib.Path, completer: completer_lib.Completer, frames: dict[str, dict[str, Any]], *,
                  fresh: bool = False) -> pathlib.Path:
  """Writes <out_root>/SUMMARY_FILE atomically: the input density measure, the range the model was trained on
  (null: unknown) and, per completed input (its name relative to the input root), its input density (a fraction)
  and whether it lies in that range (null: unknown). The inputs of earlier runs into the folder are kept (a rerun
  completes the rest) unless `fresh` (the folder was another model's, replaced with --overwrite)."""
  path = out_root / SUMMARY_FILE
  old: dict[str, Any] = {}
  if not fresh and path.is_file():
    with contextlib.suppress(ValueError, OSError):
      earlier = json.loads(path.read_text())
      old = earlier.get("frames") if isinstance(earlier, dict) and isinstance(earlier.get("frames"), dict) else {}
  trained = completer.trained_density
  record = {"command": "predict", "model": completer.name, "density_measure": input_contract.DENSITY_MEASURE,
            "trained_density": None if trained is None else dataclasses.asdict(trained),
            "frames": dict(sorted({**old, **frames}.items()))}
  text = json.dumps(record, indent=1, default=lambda o: o.item() if isinstance(o, np.generic) else str(o)) + "\n"
  return atomic_write(path, lambda tmp: tmp.write_text(text))


def _failure(e: BaseException, src: pathlib.Path) -> str:
  message = str(e).splitlines()[0] if str(e) else type(e).__name__
  return message if str(src) in message else f"{src}: {message}"  # each path once


def main(argv: list[str] | None = None) -> int:
  parser = cli.ArgumentParser(prog="python -m pncnn_jax.predict", description=__doc__.splitlines()[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=__doc__.split("\n\n", 2)[2].split("\n\nFor every")[0])
  parser.add_argument("--checkpoint", default=completer_lib.RECOMMENDED,
                      help="pncnn_jax checkpoint dir/workdir, shipped name (synthetic:pncnn_masked) or official "
                           f".pth.tar/.npz (default: the recommended shipped model, {completer_lib.RECOMMENDED})")
  parser.add_argument("--input", default=None, help="a sparse depth file or a directory of them")
  parser.add_argument("--points", default=None,
                      help="instead of --input: a point cloud (.bin KITTI Velodyne, .npy (N, 3|4) metres) or a "
                           "directory of them, projected with --calib")
  parser.add_argument("--calib", default=None,
                      help="with --points: a KITTI date folder (calib_cam_to_cam.txt, calib_velo_to_cam.txt) or a "
                           "YAML / JSON calibration (K, T_cam_from_lidar, image_size)")
  parser.add_argument("--camera", default="02", help="with --points: the camera of the calibration (KITTI: 02, 03)")
  parser.add_argument("--output", required=True, help="output directory")
  parser.add_argument("--input_format", default="auto",
                      help=f"one of {', '.join(INPUT_FORMATS)} (default auto: .png = kitti_png, .npy/.npz = npy)")
  parser.add_argument("--depth_scale", type=float, default=None,
                      help="metres per stored unit, replacing the format's (kitti_png 1/256, mm_png 0.001, npy 1)")
  parser.add_argument("--output_format", default="same",
                      help=f"one of {', '.join(OUTPUT_FORMATS)} (default same: the input's format and unit)")
  parser.add_argument("--variant", default=None, help=f"model variant, one of {sorted(models.VARIANTS)}")
  parser.add_argument("--pad_multiple", type=int, default=MULTIPLE,
                      help="zero-pad to a multiple of this (1: run at the image's own size, as the reference)")
  parser.add_argument("--allow_mismatch", action="store_true",
                      help="use --variant even where the checkpoint says it was trained as another variant")
  parser.add_argument("--allow_fallback", action="store_true",
                      help="a checkpoint step that cannot be restored falls back to its run's newest intact step "
                           "(with a warning) instead of stopping")
  parser.add_argument("--fusion", default=None,
                      help=f"an ensemble's fusion rule, one of {', '.join(fusion.FUSION_RULES)} (default "
                           "weighted_mean)")
  parser.add_argument("--precision_scales", default=None,
                      help="an ensemble's per-member precision scales s_1,...,s_K (calibrated fusion)")
  parser.add_argument("--fill_unsupported", action="store_true",
                      help="write the network's depth (clamped at 0) and sigma also where they are not valid (no "
                           "measurement within 8 px): every pixel a number, as before; default NaN there (0 in PNGs)")
  parser.add_argument("--no_preview", action="store_true", help="do not write <name>_preview.png (faster)")
  parser.add_argument("--overwrite", action="store_true",
                      help="redo inputs whose outputs all exist (default: a rerun skips them); also redo every "
                           "input into an --output that another model or other settings wrote (default: refused)")
  parser.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                      help="the progress bar on stderr (auto: when stderr is a terminal)")
  args = parser.parse_args(argv)
  try:
    if args.variant is not None and args.variant not in models.VARIANTS:
      raise ValueError(f"--variant {args.variant!r} is not one of {sorted(models.VARIANTS)}")
    scales = None
    if args.precision_scales is not None:
      try:
        scales = [float(v) for v in args.precision_scales.split(",")]
      except ValueError:
        raise ValueError(f"--precision_scales {args.precision_scales!r}: expected numbers separated by commas, "
                         "one per --checkpoint") from None
    with cli.sigterm_raises():  # SIGTERM cleans up as Ctrl-C does: no temporary file left, the lock released
      failures = predict_files(args.checkpoint, args.input, args.output, args.variant, args.pad_multiple,
                               args.allow_mismatch, input_format=args.input_format, depth_scale=args.depth_scale,
                               output_format=args.output_format, fusion_rule=args.fusion, precision_scales=scales,
                               points=args.points, calib=args.calib, camera=args.camera, preview=not args.no_preview,
                               overwrite=args.overwrite,
                               progress={"auto": None, "on": True, "off": False}[args.progress],
                               allow_fallback=args.allow_fallback, fill_unsupported=args.fill_unsupported)
  except WriteError as e:
    print(f"error: {e.strerror}", file=sys.stderr)
    return 1
  except KeyboardInterrupt:
    print("interrupted: the outputs written so far are complete; rerun the command to finish the rest",
          file=sys.stderr)
    return 130
  except cli.Terminated:
    print("terminated (SIGTERM): the outputs written so far are complete; rerun the command to finish the rest",
          file=sys.stderr)
    return 128 + signal.SIGTERM
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if failures:
    print(f"{len(failures)} file(s) failed (named above)", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
