r"""Depth completion with uncertainty on your own sparse depth maps.

  python -m pncnn_jax.predict --checkpoint PATH --input FILE_OR_DIR --output DIR [--input_format auto]
      [--depth_scale M] [--output_format same] [--variant NAME]

Input formats (`--input_format`; a directory is searched recursively for the format's files):
  kitti_png   16-bit PNG, KITTI depth completion: metres = value / 256 (--depth_scale 0.00390625)
  mm_png      16-bit PNG in millimetres, as ToF cameras and NYU-Depth-v2 exports write: metres = value / 1000
              (--depth_scale 0.001)
  npy         float array (H, W) or (H, W, 1) in metres (--depth_scale 1) as .npy, or .npz holding one array (or
              one named 'sparse' or 'depth'); NaN and inf mean no measurement, as 0 does
  auto        (default) by suffix: .npy/.npz are npy, .png are kitti_png. Millimetre PNGs need mm_png: the two
              PNG formats cannot be told apart from the file.
0 means no measurement in every format. `--depth_scale` (metres per stored unit) replaces the format's scale,
e.g. 0.0001 for PNGs in tenths of a millimetre, or 0.001 for .npy arrays in millimetres. Each file is printed
with the format, scale and depth range it was read as; depths beyond 1000 m or a median under 5 cm are refused
as a wrong --input_format or --depth_scale.

For every input it writes, under the same relative name in DIR:
  <name>.png or <name>.npy  the completed depth, in `--output_format`: 'same' (default: the input's format and
                           scale), kitti_png, mm_png (PNGs clip at the format's largest depth, 255.996 m and 65.535 m,
                           with a warning; negative predictions -> 0) or npy (float32 (H, W) metres)
  <name>_sigma.npy         float32 (H, W) predicted standard deviation in metres (models trained with a
                           probabilistic loss; see pncnn_jax.evaluate), or
  <name>_confidence.npy    float32 (H, W) the output confidence, for NCNN-style models without a calibrated sigma
  <name>_preview.png       a figure: the input, the depth and the uncertainty, with colour bars in their units
Any image size works: the input is zero-padded at the bottom and right to a multiple of 8 (--pad_multiple) and
the outputs are cropped back. Padding has zero input confidence, but NConv spreads confidence into it, so
predictions within a few pixels of the bottom/right border differ slightly from --pad_multiple 1, which runs
the network at the image's own size exactly as the reference does (it handles any size).
Files that cannot be read or predicted are reported by name and skipped; the exit status is 1 if any file failed.
An --output folder that would overwrite an input (the input folder itself, the folder of an input file, or any
output file landing on an input) is refused with exit status 2 before anything is written.

PATH is a pncnn_jax checkpoint (a training workdir -> its best step, a step directory, or a converted model
directory), a shipped model ('synthetic:pncnn_masked') or an official `.pth.tar` / `.npz`; the variant is read
from it unless --variant is given.

An ensemble: several PATHs separated by commas (members of one model trained with a probabilistic loss, e.g.
synthetic:pncnn_masked,synthetic:pncnn_masked_seed1,synthetic:pncnn_masked_seed2,synthetic:pncnn_masked_seed3) are
run together and fused per pixel by --fusion (default weighted_mean: the precision-weighted mean; also mean,
max_confidence, mle); <name>_sigma.npy is then the fused sigma, sqrt of the expected squared error under the members'
mixture (docs/SPEC.md §9). --precision_scales s_1,...,s_K multiplies each member's precision first (calibrated
fusion, e.g. the scales `pncnn_jax.ensemble.members.fit_precision_scales` fitted on validation data).
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

from pncnn_jax import evaluate, losses, viz
from pncnn_jax import metrics as metrics_lib
from pncnn_jax.checkpoints import loader
from pncnn_jax.data import io
from pncnn_jax.ensemble import fusion
from pncnn_jax.ensemble import members as ensemble
from pncnn_jax.nn import models

MULTIPLE = 8  # three 2x2 poolings


def pad_to_multiple(depth_hw: np.ndarray, multiple: int = MULTIPLE) -> np.ndarray:
  """Zero-pads an (H, W) map at the bottom and right to multiples of `multiple`."""
  h, w = depth_hw.shape
  return np.pad(depth_hw, ((0, -h % multiple), (0, -w % multiple)))


def make_predict_fn(model: models.PNCNN):
  @jax.jit
  def fn(variables, sparse):
    return model.apply(variables, sparse, train=False)
  return fn


def make_fused_predict_fn(model: models.PNCNN, loss_name: str, rule: str, scales=None):
  """jit(stacked variables, sparse (1, H, W, 1)) -> {'depth': fused depth [m], 'confidence': fused precision
  [1/m^2]} of an ensemble of `model` (`fusion.fuse` by `rule`, after multiplying member k's precision by scales[k])."""
  if loss_name not in losses.PROBABILISTIC_LOSSES:
    raise ValueError(f"an ensemble needs members with a predicted sigma (a probabilistic loss); these were trained "
                     f"with {loss_name!r}")

  @jax.jit
  def fn(variables, sparse):
    depth, prec = ensemble.member_precision(model, variables, sparse, loss_name)
    depth, fused_prec = fusion.fuse(depth, prec if scales is None else fusion.scale_precision(prec, scales), rule)
    return {"depth": depth, "confidence": fused_prec}
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
  out = jax.tree.map(lambda a: np.asarray(a)[0, :h, :w, 0], out)
  return models.ModelOutput(out["depth"], out["confidence"], None, None) if isinstance(out, dict) else out


# name: (suffixes, metres per stored unit, what it is)
FORMATS = {
    "kitti_png": ((".png",), io.KITTI_METRES_PER_UNIT, "16-bit PNG, metres = value / 256 (KITTI)"),
    "mm_png": ((".png",), io.MM_METRES_PER_UNIT, "16-bit PNG in millimetres (ToF, NYU)"),
    "npy": ((".npy", ".npz"), 1.0, "float array in metres (.npy / .npz)"),
}
INPUT_FORMATS = ("auto", *FORMATS)
OUTPUT_FORMATS = ("same", *FORMATS)
MAX_PLAUSIBLE_M = 1000.0  # deeper than any range sensor: a wrong format or scale
MIN_PLAUSIBLE_MEDIAN_M = 0.05  # a median depth under 5 cm: a wrong scale (e.g. millimetres read as kilometres)
OUTPUT_SUFFIXES = (".png", ".npy", "_sigma.npy", "_confidence.npy", "_preview.png")


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

  The stored values times `depth_scale` (default: the format's) are metres; NaN/inf in arrays become 0 (no
  measurement). Raises DepthFileError / ValueError naming the file for an unreadable file, negative
  depths, or depths that only a wrong format or scale explains (beyond MAX_PLAUSIBLE_M, or a median under
  MIN_PLAUSIBLE_MEDIAN_M).
  """
  fmt = format_of(path, input_format)
  scale = FORMATS[fmt][1] if depth_scale is None else float(depth_scale)
  if fmt == "npy":  # NaN / inf: no measurement
    raw = io.read_depth_array(path)
    depth = np.where(np.isfinite(raw), raw * scale, 0.0).astype(np.float32)
  else:
    depth = io.read_depth_png(path, scale)
  finite = depth[np.isfinite(depth)]
  if (finite < 0).any():
    raise ValueError(f"{path}: {int((finite < 0).sum())} negative depths (min {finite.min():.4g} m); use 0 or NaN "
                     "for no measurement")
  valid = finite[finite > 0]
  hint = (f"read as {fmt} at {scale:g} m per stored unit: wrong --input_format or --depth_scale? "
          "(kitti_png: value / 256 m, mm_png: value / 1000 m, npy: metres)")
  if valid.size and valid.max() > MAX_PLAUSIBLE_M:
    raise ValueError(f"{path}: depths up to {valid.max():.4g} m, {hint}")
  if valid.size and np.median(valid) < MIN_PLAUSIBLE_MEDIAN_M:
    raise ValueError(f"{path}: median depth {np.median(valid):.3g} m, {hint}")
  return depth, fmt, scale


def input_files(path: pathlib.Path, input_format: str = "auto") -> list[tuple[pathlib.Path, pathlib.Path]]:
  """(file, name relative to the input root) pairs: the file itself, or every file of the format under a folder
  (outputs of an earlier run, *_preview.png, *_sigma.npy, *_confidence.npy, excepted). Two inputs that would
  write the same outputs (a.png and a.npy) are a ValueError."""
  if path.is_file():
    return [(path, pathlib.Path(path.name))]
  if not path.is_dir():
    raise FileNotFoundError(f"--input {path}: no such file or directory")
  suffixes = {s for f, (sfx, _, _) in FORMATS.items() if input_format in ("auto", f) for s in sfx}
  skip = ("_preview.png", "_sigma.npy", "_confidence.npy")
  files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in suffixes
                 and not p.name.endswith(skip))
  if not files:
    raise FileNotFoundError(f"--input {path}: no {'/'.join(sorted(suffixes))} files in this directory "
                            f"(--input_format {input_format})")
  pairs = [(p, p.relative_to(path)) for p in files]
  stems: dict[pathlib.Path, pathlib.Path] = {}
  for src, rel in pairs:
    other = stems.setdefault(rel.with_suffix(""), src)
    if other != src:
      raise ValueError(f"--input {path}: {other.name} and {src.name} would write the same outputs; keep one of "
                       "them, or pass --input_format to pick one kind")
  return pairs


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


def write_depth(stem: pathlib.Path, depth_m: np.ndarray, fmt: str, scale: float) -> pathlib.Path:
  """Writes the completed depth [m] as `fmt` (PNGs at `scale` metres per unit, clipped to [0, 65535 * scale] with a
  warning when a depth is beyond it; npy: float32 metres); returns the file written."""
  depth = np.nan_to_num(depth_m, nan=0.0)
  if fmt == "npy":
    path = stem.with_suffix(".npy")
    np.save(path, depth.astype(np.float32))
    return path
  path = stem.with_suffix(".png")
  top = 65535 * scale
  if (far := int((depth > top).sum())):
    print(f"warning: {path}: {far} predicted depth(s) beyond {fmt}'s largest, {top:.6g} m, clipped to it",
          file=sys.stderr)
  io.write_depth_png(path, np.clip(depth, 0.0, top), scale)
  return path


def _predict_one(model, variables, sigma_fn, fn, src: pathlib.Path, stem: pathlib.Path, *, multiple: int,
                 input_format: str, depth_scale: float | None, output_format: str, title: str) -> str:
  sparse, fmt, scale = read_input(src, input_format, depth_scale)
  out = predict_array(model, variables, sparse, multiple=multiple, predict_fn=fn, name=str(src))
  out_fmt = fmt if output_format == "same" else output_format
  out_scale = scale if out_fmt == fmt else FORMATS[out_fmt][1]
  stem.parent.mkdir(parents=True, exist_ok=True)
  written = write_depth(stem, out.depth, out_fmt, out_scale)
  sigma = sigma_fn(out.confidence)
  if sigma is not None:
    np.save(f"{stem}_sigma.npy", sigma.astype(np.float32))
  else:
    np.save(f"{stem}_confidence.npy", out.confidence.astype(np.float32))
  viz.save_depth_preview(out.depth, f"{stem}_preview.png", sparse_m=np.nan_to_num(sparse, nan=0.0, posinf=0.0),
                         sigma_m=sigma, confidence=None if sigma is not None else out.confidence,
                         title=f"model {title}, file {src.name}")
  valid = sparse[np.isfinite(sparse) & (sparse > 0)]
  span = f"{valid.min():.3g}-{valid.max():.3g} m" if valid.size else "no measurements"
  return f"{src} ({fmt}, {scale:g} m per unit, input {span}) -> {written}"


def _load_ensemble(names: list[str], variant: str | None, allow_mismatch: bool, rule: str, scales):
  """(model, stacked variables, sigma_fn, fn, title) of the members `names` (one model, a probabilistic loss)."""
  if scales is not None and len(scales) != len(names):
    raise ValueError(f"--precision_scales has {len(scales)} values for {len(names)} checkpoints")
  if scales is not None and not all(np.isfinite(v) and v > 0 for v in scales):
    raise ValueError(f"--precision_scales {','.join(map(str, scales))}: every scale must be a finite number > 0")
  members = [loader.load(n, variant=variant, against="--variant", allow_mismatch=allow_mismatch) for n in names]
  first = members[0]
  for name, m in zip(names[1:], members[1:]):
    if (m.variant, m.loss, m.model_settings) != (first.variant, first.loss, first.model_settings):
      raise ValueError(f"--checkpoint: the members of an ensemble must be one model; {names[0]} is {first.variant} "
                       f"(loss {first.loss}, {first.model_settings}), {name} is {m.variant} (loss {m.loss}, "
                       f"{m.model_settings})")
  model = first.build_model()
  fn = make_fused_predict_fn(model, first.loss, rule, scales)
  title = f"ensemble of {len(names)} {first.variant} fused by {rule}"
  return model, ensemble.stack_trees([m.variables for m in members]), metrics_lib.sigma_from_precision, fn, title


def predict_files(checkpoint: str, input_path: str, output_dir: str, variant: str | None = None,
                  multiple: int = MULTIPLE, allow_mismatch: bool = False, *, input_format: str = "auto",
                  depth_scale: float | None = None, output_format: str = "same", fusion_rule: str | None = None,
                  precision_scales: list[float] | None = None) -> list[str]:
  """Predicts every input file; returns the messages of the files that failed (empty: all succeeded).

  `checkpoint`: one checkpoint, or several separated by commas (an ensemble, fused by `fusion_rule`, default
  'weighted_mean', after multiplying member k's precision by `precision_scales[k]`).

  Raises ValueError before reading the checkpoint if the outputs could overwrite an input (`check_output`) or a
  setting is out of range. One file that fails (unreadable, unpredictable, unwritable) is reported on stderr and
  skipped.
  """
  names = [n.strip() for n in str(checkpoint).split(",")]
  if not all(names):
    raise ValueError(f"--checkpoint {checkpoint!r}: an empty name between commas")
  if len(names) == 1 and (fusion_rule is not None or precision_scales is not None):
    raise ValueError("--fusion and --precision_scales need an ensemble: several --checkpoint paths separated by "
                     "commas")
  if fusion_rule is not None and fusion_rule not in fusion.FUSION_RULES:
    raise ValueError(f"--fusion {fusion_rule!r} is not one of {', '.join(fusion.FUSION_RULES)}")
  if input_format not in INPUT_FORMATS:
    raise ValueError(f"--input_format {input_format!r} is not one of {', '.join(INPUT_FORMATS)}")
  if output_format not in OUTPUT_FORMATS:
    raise ValueError(f"--output_format {output_format!r} is not one of {', '.join(OUTPUT_FORMATS)}")
  if depth_scale is not None and not (np.isfinite(depth_scale) and depth_scale > 0):
    raise ValueError(f"--depth_scale {depth_scale}: must be a finite number > 0 (metres per stored unit, e.g. 0.001 "
                     "for millimetres)")
  out_root = pathlib.Path(output_dir)
  files = input_files(pathlib.Path(input_path), input_format)
  if pathlib.Path(input_path).is_file():
    format_of(files[0][0], input_format)  # a file of the wrong type: one error, before the checkpoint loads
  check_output(files, pathlib.Path(input_path), out_root)
  if out_root.exists() and not out_root.is_dir():
    raise ValueError(f"--output {output_dir} is a file, not a folder")
  base = next(p for p in (out_root.absolute(), *out_root.absolute().parents) if p.exists())  # what mkdir starts from
  if not base.is_dir() or not os.access(base, os.W_OK | os.X_OK):
    raise ValueError(f"--output {output_dir} cannot be created or written: {base} is "
                     + ("a file" if not base.is_dir() else "not writable"))
  if len(names) > 1:
    model, variables, sigma_fn, fn, title = _load_ensemble(names, variant, allow_mismatch,
                                                           fusion_rule or "weighted_mean", precision_scales)
  else:
    ckpt = loader.load(checkpoint, variant=variant, against="--variant", allow_mismatch=allow_mismatch)
    model, variables, loss = ckpt.build_model(), ckpt.variables, ckpt.loss
    title = checkpoint if ckpt.variant in str(checkpoint) else f"{ckpt.variant} ({checkpoint})"
    fn, sigma_fn = make_predict_fn(model), lambda conf: evaluate.sigma_of(conf, loss)
  failures = []
  for src, rel in files:
    try:
      line = _predict_one(model, variables, sigma_fn, fn, src, out_root / rel.with_suffix(""), multiple=multiple,
                          input_format=input_format, depth_scale=depth_scale, output_format=output_format,
                          title=title)
    except Exception as e:  # pylint: disable=broad-except  (one bad file must not stop the batch)
      message = str(e) if str(src) in str(e) else f"{src}: {e}"  # each path once
      failures.append(message)
      print(f"FAILED {message}", file=sys.stderr)
      continue
    print(line)
  return failures


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m pncnn_jax.predict", description=__doc__.splitlines()[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   epilog=__doc__.split("\n\n", 2)[2].split("\n\nFor every")[0])
  parser.add_argument("--checkpoint", required=True,
                      help="pncnn_jax checkpoint dir/workdir, shipped name (synthetic:pncnn_masked) or official "
                           ".pth.tar/.npz")
  parser.add_argument("--input", required=True, help="a sparse depth file or a directory of them")
  parser.add_argument("--output", required=True, help="output directory")
  parser.add_argument("--input_format", default="auto",
                      help=f"one of {', '.join(INPUT_FORMATS)} (default auto: .png = kitti_png, .npy/.npz = npy)")
  parser.add_argument("--depth_scale", type=float, default=None,
                      help="metres per stored unit, replacing the format's (kitti_png 1/256, mm_png 0.001, npy 1)")
  parser.add_argument("--output_format", default="same",
                      help=f"one of {', '.join(OUTPUT_FORMATS)} (default same: the input's format and scale)")
  parser.add_argument("--variant", default=None, help=f"model variant, one of {sorted(models.VARIANTS)}")
  parser.add_argument("--pad_multiple", type=int, default=MULTIPLE,
                      help="zero-pad to a multiple of this (1: run at the image's own size, as the reference)")
  parser.add_argument("--allow_mismatch", action="store_true",
                      help="use --variant even where the checkpoint says it was trained as another variant")
  parser.add_argument("--fusion", default=None,
                      help=f"an ensemble's fusion rule, one of {', '.join(fusion.FUSION_RULES)} (default "
                           "weighted_mean)")
  parser.add_argument("--precision_scales", default=None,
                      help="an ensemble's per-member precision scales s_1,...,s_K (calibrated fusion)")
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
    failures = predict_files(args.checkpoint, args.input, args.output, args.variant, args.pad_multiple,
                             args.allow_mismatch, input_format=args.input_format, depth_scale=args.depth_scale,
                             output_format=args.output_format, fusion_rule=args.fusion, precision_scales=scales)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if failures:
    print(f"{len(failures)} file(s) failed (named above)", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
