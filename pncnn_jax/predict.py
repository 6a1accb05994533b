r"""Depth completion with uncertainty on your own sparse depth maps.

  python -m pncnn_jax.predict --checkpoint PATH --input FILE_OR_DIR --output DIR [--variant NAME]

For every KITTI-format sparse depth PNG (16-bit, metres * 256, 0 = no measurement; a directory is searched
recursively for *.png) it writes, under the same relative name in DIR:
  <name>.png               the completed depth, KITTI format (16-bit, round(d * 256), negative predictions -> 0)
  <name>_sigma.npy         float32 (H, W) predicted standard deviation in metres (models trained with a
                           probabilistic loss; see pncnn_jax.evaluate), or
  <name>_confidence.npy    float32 (H, W) the output confidence, for NCNN-style models without a calibrated sigma
  <name>_preview.png       colour preview: depth on top, uncertainty below
Any image size works: the input is zero-padded at the bottom and right to a multiple of 8 (--pad_multiple) and
the outputs are cropped back. Padding has zero input confidence, but NConv spreads confidence into it, so
predictions within a few pixels of the bottom/right border differ slightly from --pad_multiple 1, which runs
the network at the image's own size exactly as the reference does (it handles any size).
Files that cannot be read or predicted are reported by name and skipped; the exit status is 1 if any file failed.
An --output folder that would overwrite an input (the input folder itself, the folder of an input file, or any
output file landing on an input) is refused with exit status 2 before anything is written.

PATH is a pncnn_jax checkpoint (a training workdir -> its best step, a step directory, or a converted model
directory) or an official `.pth.tar` / `.npz`; the variant is read from it unless --variant is given.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pncnn_jax import evaluate, loader, models, viz
from pncnn_jax.data import io

MULTIPLE = 8  # three 2x2 poolings


def load_model(checkpoint: str | pathlib.Path, variant: str | None = None,
               allow_mismatch: bool = False) -> tuple[models.PNCNN, dict[str, Any], str]:
  """(model, variables, loss name) of any checkpoint (`loader.load`), the model built with the settings stored
  with it (e.g. its conv_precision). A `variant` the checkpoint contradicts is refused unless `allow_mismatch`."""
  ckpt = loader.load(checkpoint, variant=variant, against="--variant", allow_mismatch=allow_mismatch)
  return ckpt.build_model(), ckpt.variables, ckpt.loss


def pad_to_multiple(depth_hw: np.ndarray, multiple: int = MULTIPLE) -> np.ndarray:
  """Zero-pads an (H, W) map at the bottom and right to multiples of `multiple`."""
  h, w = depth_hw.shape
  return np.pad(depth_hw, ((0, -h % multiple), (0, -w % multiple)))


def make_predict_fn(model: models.PNCNN):
  @jax.jit
  def fn(variables, sparse):
    return model.apply(variables, sparse, train=False)
  return fn


def predict_array(model: models.PNCNN, variables: dict[str, Any], sparse_hw: np.ndarray, *,
                  multiple: int = MULTIPLE, predict_fn=None, name: str = "input") -> models.ModelOutput:
  """Runs the model on one (H, W) sparse depth map [m] of any size; returns (H, W) numpy fields.

  Non-finite pixels (NaN, inf) are set to 0 = no measurement, with a warning on stderr naming `name` and their
  count: one NaN would otherwise spread through every NConv and make the whole prediction NaN. Maps smaller
  than MULTIPLE (8) pixels, which the three 2x2 poolings cannot take at their own size, are zero-padded to 8.
  """
  sparse_hw = np.asarray(sparse_hw, np.float32)
  if multiple < 1:
    raise ValueError(f"pad multiple must be >= 1, got {multiple}")
  if sparse_hw.ndim != 2:
    raise ValueError(f"sparse depth must be (H, W), got shape {sparse_hw.shape}")
  if sparse_hw.size == 0:
    raise ValueError(f"{name}: empty depth map, shape {sparse_hw.shape}")
  bad = ~np.isfinite(sparse_hw)
  if bad.any():
    print(f"warning: {name}: {int(bad.sum())} non-finite pixel(s) set to 0 (no measurement)", file=sys.stderr)
    sparse_hw = np.where(bad, np.float32(0), sparse_hw)
  h, w = sparse_hw.shape
  fn = predict_fn or make_predict_fn(model)
  padded = pad_to_multiple(sparse_hw, multiple)
  padded = np.pad(padded, ((0, max(0, MULTIPLE - padded.shape[0])), (0, max(0, MULTIPLE - padded.shape[1]))))
  out = fn(variables, jnp.asarray(padded)[None, ..., None])
  return jax.tree.map(lambda a: np.asarray(a)[0, :h, :w, 0], out)


def input_files(path: pathlib.Path) -> list[tuple[pathlib.Path, pathlib.Path]]:
  """(file, name relative to the input root) pairs."""
  if path.is_file():
    return [(path, pathlib.Path(path.name))]
  if path.is_dir():
    files = sorted(p for p in path.rglob("*.png") if not p.name.endswith("_preview.png"))
    if not files:
      raise FileNotFoundError(f"--input {path}: no *.png files in this directory")
    return [(p, p.relative_to(path)) for p in files]
  raise FileNotFoundError(f"--input {path}: no such file or directory")


OUTPUT_SUFFIXES = (".png", "_sigma.npy", "_confidence.npy", "_preview.png")


def check_output(files: list[tuple[pathlib.Path, pathlib.Path]], input_path: pathlib.Path,
                 output_dir: pathlib.Path) -> None:
  """Raises ValueError (naming --output) if writing the outputs of `files` under `output_dir` could overwrite an
  input: `output_dir` is the input folder or the folder of an input file, or an output file is an input file."""
  real = lambda p: pathlib.Path(os.path.realpath(p))  # noqa: E731  (symlinks and '..' resolved)
  out = real(output_dir)
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


def _predict_one(model, variables, loss, fn, src: pathlib.Path, stem: pathlib.Path, multiple: int) -> None:
  sparse = io.read_kitti_depth(src)
  out = predict_array(model, variables, sparse, multiple=multiple, predict_fn=fn, name=str(src))
  depth = np.clip(np.nan_to_num(out.depth, nan=0.0), 0.0, 65535 / 256.0)
  stem.parent.mkdir(parents=True, exist_ok=True)
  io.write_kitti_depth(stem.with_suffix(".png"), depth)
  sigma = evaluate.sigma_of(out.confidence, loss)
  if sigma is not None:
    unc = sigma.astype(np.float32)
    np.save(f"{stem}_sigma.npy", unc)
  else:
    unc = out.confidence.astype(np.float32)
    np.save(f"{stem}_confidence.npy", unc)
  viz.save_depth_preview(depth, f"{stem}_preview.png", uncertainty=unc if sigma is not None else -unc)


def predict_files(checkpoint: str, input_path: str, output_dir: str, variant: str | None = None,
                  multiple: int = MULTIPLE, allow_mismatch: bool = False) -> list[str]:
  """Predicts every input file; returns the messages of the files that failed (empty: all succeeded).

  Raises ValueError before reading the checkpoint if the outputs could overwrite an input (`check_output`).
  One file that fails (unreadable, unpredictable, unwritable) is reported on stderr and skipped.
  """
  out_root = pathlib.Path(output_dir)
  files = input_files(pathlib.Path(input_path))
  check_output(files, pathlib.Path(input_path), out_root)
  if out_root.exists() and not out_root.is_dir():
    raise ValueError(f"--output {output_dir} is a file, not a folder")
  base = next(p for p in (out_root.absolute(), *out_root.absolute().parents) if p.exists())  # what mkdir starts from
  if not base.is_dir() or not os.access(base, os.W_OK | os.X_OK):
    raise ValueError(f"--output {output_dir} cannot be created or written: {base} is "
                     + ("a file" if not base.is_dir() else "not writable"))
  model, variables, loss = load_model(checkpoint, variant, allow_mismatch)
  fn = make_predict_fn(model)
  failures = []
  for src, rel in files:
    stem = out_root / rel.with_suffix("")
    try:
      _predict_one(model, variables, loss, fn, src, stem, multiple)
    except Exception as e:  # pylint: disable=broad-except  (one bad file must not stop the batch)
      message = str(e) if str(src) in str(e) else f"{src}: {e}"  # each path once
      failures.append(message)
      print(f"FAILED {message}", file=sys.stderr)
      continue
    print(f"{src} -> {stem.with_suffix('.png')}")
  return failures


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m pncnn_jax.predict", description=__doc__.splitlines()[0])
  parser.add_argument("--checkpoint", required=True, help="pncnn_jax checkpoint dir/workdir or official .pth.tar/.npz")
  parser.add_argument("--input", required=True, help="a sparse depth PNG (KITTI format) or a directory of them")
  parser.add_argument("--output", required=True, help="output directory")
  parser.add_argument("--variant", default=None, help=f"model variant, one of {sorted(models.VARIANTS)}")
  parser.add_argument("--pad_multiple", type=int, default=MULTIPLE,
                      help="zero-pad to a multiple of this (1: run at the image's own size, as the reference)")
  parser.add_argument("--allow_mismatch", action="store_true",
                      help="use --variant even where the checkpoint says it was trained as another variant")
  args = parser.parse_args(argv)
  if args.variant is not None and args.variant not in models.VARIANTS:
    parser.error(f"--variant {args.variant!r} is not one of {sorted(models.VARIANTS)}")
  try:
    failures = predict_files(args.checkpoint, args.input, args.output, args.variant, args.pad_multiple,
                             args.allow_mismatch)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if failures:
    print(f"{len(failures)} file(s) failed (named above)", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
