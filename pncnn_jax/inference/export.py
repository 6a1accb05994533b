r"""Export a trained model for deployment: a serialized StableHLO module and an ONNX file, at a fixed H x W.

  python -m pncnn_jax.export --checkpoint PATH --output DIR --height H --width W [--variant NAME]
      [--formats auto|stablehlo,onnx] [--platforms cpu,cuda] [--onnx_batch 1] [--fill_unsupported]

PATH is anything the one checkpoint loader (`pncnn_jax.checkpoints.loader.load`) takes: a pncnn_jax checkpoint (training
workdir -> its best step, a step directory, a converted model directory), an official `.pth.tar` / `.npz` (then
--variant if it names none), or a shipped name such as `synthetic:pncnn_masked` (`pncnn_jax.pretrained`). The
model is rebuilt with the settings stored with the checkpoint (e.g. its conv_precision).

Writes into DIR:
  pncnn.stablehlo   `jax.export.Exported.serialize()` bytes (flatbuffers). Load with `jax.export.deserialize` and
                    call with `.call(x)`: only jax is needed, not pncnn_jax. The batch is symbolic (any B >= 1);
                    H and W are fixed. Lowered for every platform of --platforms (default cpu and cuda).
  pncnn.onnx        ONNX (opset 23) through jax2onnx, at the fixed batch --onnx_batch (jax2onnx 0.17.1 mis-traces
                    the batch concatenation of `layers.nconv` under a symbolic batch, so the ONNX batch is fixed).
                    The NConv layers are plain `Conv` nodes there and the sigmoid/softplus heads are written out
                    from Exp/Log (`onnx_tracing`). One self-contained file (the weights inside, no .onnx.data).
                    Needs the `onnx` extra: `make onnx` (docs/deploy/export.md).
  export.json       the sidecar: input size, variant, loss, the input and output names, shapes and units.

--formats auto (the default) writes every format the installed packages allow: StableHLO always, ONNX when
jax2onnx imports (`make onnx`), and says which it skipped and how to install it. A format named in --formats
that cannot be written is an error, before anything is written.

The output directory is the export's own: DIR must be new, empty, or a previous export (a directory holding only
an export.json this command wrote, pncnn.stablehlo and pncnn.onnx); anything else is refused with one line, as
`python -m pncnn_jax.convert` refuses a non-empty output, so a user's files are never replaced. Each file is
written under a temporary name in DIR and renamed into place once complete (the sidecar last), so an
interrupted or failed export (a full disk, a read-only folder: one line naming the path) leaves no truncated file
under a final name; artifacts of a previous export that this one does not write (its ONNX file when this one
writes StableHLO only) are removed, so the sidecar always describes what DIR holds.

Input `sparse_depth`: (B, H, W, 1) float32, metres, 0 = no measurement (NaN and +-inf too: the input contract,
`pncnn_jax.data.input_contract`, whose value checks the graph cannot make: feed it depths >= 0 in metres, at most
1000 m, with a median of at least 5 cm per frame; export.json records this). Outputs, in this order, all (B, H, W, 1)
float32 (NHWC), equal to what `python -m pncnn_jax.predict` and `pncnn_jax.Completer` give for the same frame:
  depth        the completed depth, metres, >= 0 (negative network depths clamped at 0) where `valid`, NaN elsewhere.
  confidence   the model's output confidence (`models.ModelOutput.confidence`); its meaning depends on the loss the
               variant was trained with (`CONFIDENCE_KINDS`, see `pncnn_jax.evaluate.depth`): for pNCNN (gaussian_nll)
               the precision 1/sigma^2 in 1/m^2, so sigma = 1/sqrt(confidence) metres. NaN where depth is.
  valid        1 where the depth is valid, 0 where it is not (`Completion.valid`): a measurement within 8 pixels
               (`completer.support_mask`, input support) and a network depth that is not negative.
--fill_unsupported exports the network's depth (clamped at 0) and confidence at every pixel instead of NaN (as
predict's flag of that name); `valid` still marks the pixels without support. Inside the graph the frame is
zero-padded at the bottom and right to a multiple of 8 and cropped back, as the Completer does, so an export at any
H x W (375 x 1242, say) computes what predict computes at that size. The weights are constants inside both
artifacts. Eval mode (BatchNorm running statistics).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp

from pncnn_jax.checkpoints import loader
from pncnn_jax.data import input_contract
from pncnn_jax.inference import completer as completer_lib
from pncnn_jax.nn import cpu_kernels, models
from pncnn_jax.runtime import cli

INPUT_NAME = "sparse_depth"
OUTPUT_NAMES = ("depth", "confidence", "valid")
STABLEHLO_FILE, ONNX_FILE, SIDECAR_FILE = "pncnn.stablehlo", "pncnn.onnx", "export.json"
FORMATS = ("stablehlo", "onnx")
WRITTEN_BY = "pncnn_jax.export"  # the sidecar's `written_by`: how a later export recognises its own directory
TMP_PREFIX = ".export-tmp-"  # files being written: DIR/.export-tmp-<pid>-<name>, renamed to <name> when complete
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
MIN_SIZE = 8  # three 2x2 poolings
JAX2ONNX_VERSION = "0.17.1"
ONNX_INSTALL = f"make onnx (pip install 'pncnn_jax[onnx]' && pip install --no-deps jax2onnx=={JAX2ONNX_VERSION})"

# What the `confidence` output is, by training loss (pncnn_jax.evaluate.depth's module doc).
_PRECISION = ("precision 1/sigma^2", "1/m^2", "sigma = 1/sqrt(confidence)")
CONFIDENCE_KINDS = {
    "gaussian_nll": _PRECISION,
    "gaussian_nll_beta": _PRECISION,
    "gaussian_nll_beta1": _PRECISION,
    "gaussian_nll_l1": _PRECISION,
    "gaussian_nll_beta_l1": _PRECISION,
    "gaussian_nll_exp": ("log precision log(1/sigma^2)", "log(1/m^2)", "sigma = exp(-confidence / 2)"),
    "laplace_nll": ("inverse Laplace scale 1/b", "1/m", "sigma = sqrt(2) / confidence"),
    "masked_l1": ("propagated NConv confidence (not calibrated)", "unitless", "none: rank pixels by it"),
    "masked_l2": ("propagated NConv confidence (not calibrated)", "unitless", "none: rank pixels by it"),
}


def load(checkpoint: str | pathlib.Path, variant: str | None = None, allow_mismatch: bool = False) -> loader.Loaded:
  """`loader.load` (the one checkpoint loader), its errors naming --checkpoint."""
  try:
    return loader.load(checkpoint, variant=variant, against="--variant", allow_mismatch=allow_mismatch)
  except (ValueError, FileNotFoundError) as e:
    if str(e).startswith("--checkpoint"):
      raise
    raise type(e)(f"--checkpoint {checkpoint}: {e}") from e


def serving_fn(model: models.PNCNN, variables: dict[str, Any], *, fill_unsupported: bool = False
               ) -> Callable[[jax.Array], tuple[jax.Array, jax.Array, jax.Array]]:
  """sparse (B, H, W, 1) metres -> (depth [m], confidence, valid (1/0)), eval mode, the variables closed over as
  constants: the Completer's computation (pncnn_jax.inference.completer, steps 3-5) for one model. The input is
  zero-padded at the bottom and right to a multiple of 8 (`completer.padded_size`) and the outputs cropped back; the
  depth is clamped at 0; depth and confidence are NaN outside valid = support & ~clamped (`support_mask`) unless
  `fill_unsupported`.

  The input contract (`pncnn_jax.data.input_contract`): the layout (B, H, W, 1) of real numbers is checked when
  `serve` is traced (for export, or under `jax.jit`); called on concrete arrays, `serve` also checks their values
  as the Completer does (one-line ValueError naming `sparse_depth`). Inside the graph 0, NaN and +-inf are no
  measurement; the graph cannot refuse an input, so a deployment checks signs and units itself (export.json)."""
  def serve(sparse_depth):
    input_contract.check_layout(sparse_depth.shape, sparse_depth.dtype, name=INPUT_NAME,
                                layouts=(input_contract.BHW1,))
    if not isinstance(sparse_depth, jax.core.Tracer):  # concrete values: the whole contract, as the Completer's
      input_contract.check_sparse_depth(sparse_depth, name=INPUT_NAME, layouts=(input_contract.BHW1,))
    _, h, w, _ = sparse_depth.shape
    hp, wp = completer_lib.padded_size(h, w)
    padded = jnp.pad(sparse_depth, ((0, 0), (0, hp - h), (0, wp - w), (0, 0)))
    out = model.apply(variables, padded, train=False)
    depth, confidence = out.depth[:, :h, :w], out.confidence[:, :h, :w]
    clamped = depth < 0
    valid = completer_lib.support_mask(sparse_depth) & ~clamped
    depth = jnp.where(clamped, jnp.zeros_like(depth), depth)
    if not fill_unsupported:
      nan = jnp.full_like(depth, jnp.nan)
      depth, confidence = jnp.where(valid, depth, nan), jnp.where(valid, confidence, nan)
    return depth, confidence, valid.astype(jnp.float32)
  return serve


def export_stablehlo(fn: Callable, height: int, width: int,
                     platforms: tuple[str, ...] = ("cpu", "cuda")) -> jax.export.Exported:
  """`jax.export` of `fn` for a (b, height, width, 1) float32 input with a symbolic batch b >= 1."""
  (b,) = jax.export.symbolic_shape("b")
  spec = jax.ShapeDtypeStruct((b, height, width, 1), jnp.float32)
  return jax.export.export(jax.jit(fn), platforms=platforms)(spec)


def _jax2onnx():
  """jax2onnx's `to_onnx`, after the shim it needs on jax >= 0.11.

  jax 0.11 merged `ClosedJaxpr` into `Jaxpr` and removed the name `jax._src.core.ClosedJaxpr`, which jax2onnx
  0.17.1's `jit` lowering plugin still reads (`isinstance(x, jcore.ClosedJaxpr)`). The shim binds that name to
  the class jax itself exports as `jax.extend.core.ClosedJaxpr` (the merged `Jaxpr` on jax >= 0.11). It touches
  nothing when the name exists, and only runs when an ONNX export is asked for.
  """
  try:
    from jax2onnx import to_onnx  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(f"--formats onnx needs jax2onnx and onnxruntime: {ONNX_INSTALL} ({e})") from e
  from jax._src import core as jax_src_core  # pylint: disable=g-import-not-at-top
  if not hasattr(jax_src_core, "ClosedJaxpr"):
    from jax.extend import core as jax_ext_core  # pylint: disable=g-import-not-at-top
    jax_src_core.ClosedJaxpr = jax_ext_core.ClosedJaxpr
  return to_onnx


def _sigmoid_for_onnx(x: jax.Array) -> jax.Array:
  """1 / (1 + exp(-x)): onnxruntime's `Sigmoid` kernel is off by up to 160 % (relative) for x < -17."""
  return 1 / (1 + jnp.exp(-x))


def _softplus_for_onnx(x: jax.Array) -> jax.Array:
  """max(x, 0) + log1p(exp(-|x|)), log1p in Kahan's form from Log/Div (ONNX has no Log1p; jax.nn.softplus becomes
  log(1 + t) there, which is 0 for t < 6e-8, i.e. softplus(x) = 0 instead of ~exp(x) for x < -17)."""
  t = jnp.exp(-jnp.abs(x))
  u = 1 + t
  log1p_t = jnp.where(u == 1, t, jnp.log(u) * (t / jnp.where(u == 1, jnp.ones_like(u), u - 1)))
  return jax.nn.relu(x) + log1p_t


@contextlib.contextmanager
def onnx_tracing():
  """Within it, the model traces in a form that ONNX runtimes compute as jit does. Only read at trace time.

  * NConv layers as library convolutions instead of `cpu_kernels._taps_same_conv`. The fused taps are an XLA:CPU
    speed-up (kh*kw*C_in*C_out shifted slices, multiplied and summed); in ONNX they become ~5,000
    Slice/Squeeze/Mul/Add nodes, which jax2onnx needs ~130 s to convert for pNCNN at 64x96 (against ~12 s) and
    onnxruntime runs slower (86 ms against 68 ms per 64x96 frame, 2 CPU cores). The library form is one `Conv` per
    layer. Same convolution, another summation order.
  * The UNet heads' sigmoid and softplus in forms exact to float32 rounding under onnxruntime
    (`_sigmoid_for_onnx`, `_softplus_for_onnx`). The input confidences reach 1e-25 and NConv takes ratios of them,
    so the tails matter: with onnxruntime's own Sigmoid the official KITTI NCNN-Conf-L1 moved depths by up to 22 m.
  Weight transforms (softplus of the NConv kernels, the BatchNorm scale) act on constants and run in JAX at trace
  time, so they need nothing here.
  """
  saved = cpu_kernels.TAPS_MAX_CHANNEL_PAIRS, dict(models.UNET_ACTIVATIONS)
  cpu_kernels.TAPS_MAX_CHANNEL_PAIRS = 0
  models.UNET_ACTIVATIONS.update(sigmoid=_sigmoid_for_onnx, softplus=_softplus_for_onnx)
  try:
    yield
  finally:
    cpu_kernels.TAPS_MAX_CHANNEL_PAIRS = saved[0]
    models.UNET_ACTIVATIONS.clear()
    models.UNET_ACTIVATIONS.update(saved[1])


def export_onnx(fn: Callable, path: str | pathlib.Path, height: int, width: int, batch: int = 1,
                model_name: str = "pncnn") -> str:
  """Writes `fn` as ONNX for a fixed (batch, height, width, 1) float32 input; returns the path.

  `fn` is traced afresh under `onnx_tracing()`: pass a function that no `jax.jit` has traced before. The file is
  self-contained (jax2onnx's export_mode 'web': the weights inside, no `.onnx.data` sidecar, which jax2onnx's
  default mode writes beside it once constants pass 1 MB, e.g. pNCNN at 352x1216), so it can be written under a
  temporary name, renamed and moved on its own.
  """
  to_onnx = _jax2onnx()
  with onnx_tracing(), _quiet_onnx_ir():
    to_onnx(fn, [(batch, height, width, 1)], model_name=model_name, input_names=[INPUT_NAME],
            output_names=list(OUTPUT_NAMES), return_mode="file", output_path=str(path), export_mode="web")
  return str(path)


@contextlib.contextmanager
def _quiet_onnx_ir():
  """onnx_ir logs one warning per intermediate value without a recorded type (hundreds per model)."""
  logger = logging.getLogger("onnx_ir")
  level = logger.level
  logger.setLevel(logging.ERROR)
  try:
    yield
  finally:
    logger.setLevel(level)


def sidecar(variant: str, loss: str, height: int, width: int, *, formats: tuple[str, ...],
            platforms: tuple[str, ...], onnx_batch: int, checkpoint: str,
            fill_unsupported: bool = False) -> dict[str, Any]:
  """The JSON description of the artifacts (what a deployment needs to feed them and read their outputs)."""
  kind, unit, sigma = CONFIDENCE_KINDS[loss]
  files = {}
  if "stablehlo" in formats:
    files["stablehlo"] = {"file": STABLEHLO_FILE, "batch": "symbolic (any B >= 1)", "platforms": list(platforms),
                          "load": "jax.export.deserialize(bytearray(open(file, 'rb').read())).call(x)"}
  if "onnx" in formats:
    files["onnx"] = {"file": ONNX_FILE, "batch": onnx_batch, "opset": 23, "converter": f"jax2onnx {JAX2ONNX_VERSION}"}
  return {
      "written_by": WRITTEN_BY,
      "variant": variant,
      "loss": loss,
      "checkpoint": checkpoint,
      "height": height,
      "width": width,
      "layout": "NHWC",
      "dtype": "float32",
      "input": {"name": INPUT_NAME, "shape": ["B", height, width, 1], "unit": "m",
                "meaning": "sparse depth, 0 = no measurement",
                "contract": {"no_measurement": "0, NaN, +inf, -inf", "negative": "not allowed",
                             "max_m": input_contract.MAX_PLAUSIBLE_M,
                             "min_median_m": input_contract.MIN_PLAUSIBLE_MEDIAN_M,
                             "checked": "not inside the graph: check inputs before feeding them"}},
      "outputs": [
          {"name": "depth", "shape": ["B", height, width, 1], "unit": "m",
           "meaning": "completed depth, >= 0" + (" (every pixel; see valid)" if fill_unsupported
                                                 else "; NaN where valid is 0")},
          {"name": "confidence", "shape": ["B", height, width, 1], "unit": unit, "meaning": kind, "sigma": sigma,
           **({} if fill_unsupported else {"invalid": "NaN where valid is 0"})},
          {"name": "valid", "shape": ["B", height, width, 1], "unit": "1",
           "meaning": f"1 where the depth is valid (a measurement within {completer_lib.SUPPORT_RADIUS_PX} pixels and "
                      "a network depth >= 0), else 0"},
      ],
      "fill_unsupported": fill_unsupported,
      "pad_multiple": completer_lib.MULTIPLE,
      "files": files,
      "jax_version": jax.__version__,
  }


def available_formats() -> tuple[tuple[str, ...], dict[str, str]]:
  """(the formats the installed packages can write, {skipped format: why and how to install it}).

  StableHLO needs only jax; ONNX needs jax2onnx (the `onnx` extra, `make onnx`)."""
  try:
    _jax2onnx()
  except ImportError as e:
    return ("stablehlo",), {"onnx": f"the ONNX converter does not import ({e.__cause__ or e}); install it with "
                                    f"{ONNX_INSTALL}"}
  return FORMATS, {}


def check_output_dir(output_dir: str | os.PathLike) -> list[pathlib.Path]:
  """Refuses an --output that is a file or holds files this command did not write; returns the files of a
  previous export in it (to be replaced or removed), [] for a new or empty directory.

  A previous export is recognised by its export.json (`written_by` = pncnn_jax.export, or the sidecar's input
  name, for exports written before `written_by`): DIR may then hold that sidecar, pncnn.stablehlo, pncnn.onnx
  (pncnn.onnx.data, which older exports wrote beside it) and our temporary files (a killed export's), nothing else.
  """
  out = pathlib.Path(output_dir)
  if out.exists() and not out.is_dir():
    raise FileExistsError(f"--output {out} is a file, not a directory: name a new or empty directory")
  if not out.is_dir():
    return []
  try:
    entries = sorted(out.iterdir())
  except OSError as e:
    raise OSError(f"--output {out}: cannot list it ({e.strerror or e})") from None
  if not entries:
    return []
  ours = set()
  try:
    meta = json.loads((out / SIDECAR_FILE).read_text())
    if isinstance(meta, dict) and (meta.get("written_by") == WRITTEN_BY
                                   or (meta.get("input") or {}).get("name") == INPUT_NAME):
      ours = {SIDECAR_FILE, STABLEHLO_FILE, ONNX_FILE, ONNX_FILE + ".data"}  # .data: an older export's ONNX weights
  except (OSError, ValueError, AttributeError):
    pass
  foreign = [e.name for e in entries if e.name not in ours and not (e.name.startswith(TMP_PREFIX) and e.is_file())]
  if foreign:
    shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    raise FileExistsError(f"--output {out} already holds files pncnn_jax.export did not write ({shown}); "
                          f"name a new or empty directory (or a previous export's)")
  return entries


def export_checkpoint(checkpoint: str, output_dir: str, height: int, width: int, *, variant: str | None = None,
                      formats: tuple[str, ...] | None = None, platforms: tuple[str, ...] = ("cpu", "cuda"),
                      onnx_batch: int = 1, log: Callable[[str], None] = print,
                      allow_mismatch: bool = False, fill_unsupported: bool = False) -> dict[str, Any]:
  """What `python -m pncnn_jax.export` does; returns the sidecar dict (also written to DIR/export.json).

  `formats` None: every format the installed packages allow (`available_formats`), logging what is skipped. The
  output directory rules and the atomic writes are the module doc's (`check_output_dir`). Raises ValueError,
  FileNotFoundError, FileExistsError (an --output that is not ours), ImportError (a format asked for whose
  packages are missing) or OSError (a write that failed: a full disk, a read-only folder; named in the message).
  `fill_unsupported`: depth and confidence at every pixel instead of NaN where they are not valid (module doc).
  """
  check_size("--height", height)
  check_size("--width", width)
  if onnx_batch < 1:
    raise ValueError(f"--onnx_batch must be >= 1, got {onnx_batch}")
  previous = check_output_dir(output_dir)
  ckpt = load(checkpoint, variant, allow_mismatch)
  if formats is None:
    formats, skipped = available_formats()
    for name, why in skipped.items():
      log(f"skipped {name}: {why}")
  elif "onnx" in formats:
    _jax2onnx()  # fail before writing anything when the extra is missing
  model, variables, variant, loss = ckpt.build_model(), ckpt.variables, ckpt.variant, ckpt.loss
  if ckpt.ensemble_size is not None:
    raise ValueError(f"--checkpoint {checkpoint} is an ensemble of {ckpt.ensemble_size} models: export one member")
  fn = serving_fn(model, variables, fill_unsupported=fill_unsupported)
  out = pathlib.Path(output_dir)
  created = [d for d in (out, *out.parents) if not d.exists()]  # removed again, if still empty, when this fails
  tmp: dict[str, pathlib.Path] = {}  # final name -> temporary file, complete
  done = False
  try:
    try:
      out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
      raise OSError(f"--output {out}: cannot create it ({e.strerror or e})") from None
    temp = lambda name: out / f"{TMP_PREFIX}{os.getpid()}-{name}"
    if "stablehlo" in formats:
      t0 = time.perf_counter()
      data = export_stablehlo(fn, height, width, platforms).serialize()
      tmp[STABLEHLO_FILE] = _write(temp(STABLEHLO_FILE), data, STABLEHLO_FILE)
      log(f"exported StableHLO ({_size(len(data))}, {time.perf_counter() - t0:.1f} s)")
    if "onnx" in formats:
      t0 = time.perf_counter()
      tmp[ONNX_FILE] = temp(ONNX_FILE)
      try:
        export_onnx(serving_fn(model, variables, fill_unsupported=fill_unsupported), tmp[ONNX_FILE], height, width,
                    onnx_batch, model_name=f"pncnn_{variant}")
      except OSError as e:
        raise OSError(f"--output {out}: cannot write {ONNX_FILE} ({e.strerror or e})") from None
      log(f"exported ONNX ({_size(tmp[ONNX_FILE].stat().st_size)}, {time.perf_counter() - t0:.1f} s)")
    meta = sidecar(variant, loss, height, width, formats=formats, platforms=platforms, onnx_batch=onnx_batch,
                   checkpoint=str(checkpoint), fill_unsupported=fill_unsupported)
    tmp[SIDECAR_FILE] = _write(temp(SIDECAR_FILE), (json.dumps(meta, indent=2) + "\n").encode(), SIDECAR_FILE)
    for name, path in tmp.items():  # the sidecar last: it never describes a file that is not complete
      if name == SIDECAR_FILE:
        for stale in previous:  # a previous export's files this one does not write, a killed export's temporaries
          if stale.name not in tmp:
            stale.unlink(missing_ok=True)
            log(f"removed {stale} (left by a previous export; not part of this one)")
      try:
        os.replace(path, out / name)
      except OSError as e:
        raise OSError(f"--output {out / name}: cannot write it ({e.strerror or e})") from None
      log(f"wrote {out / name}")
    tmp.clear()
    done = True
  finally:
    for path in tmp.values():
      path.unlink(missing_ok=True)
    for d in created if not done else ():
      if d.is_dir() and not any(d.iterdir()):
        d.rmdir()
  return meta


def _size(n: int) -> str:
  return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def _write(path: pathlib.Path, data: bytes, name: str) -> pathlib.Path:
  """Writes `data` to `path` (the temporary name of DIR/`name`) and flushes it to disk; an OSError names DIR."""
  try:
    with open(path, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
  except OSError as e:
    path.unlink(missing_ok=True)
    raise OSError(f"--output {path.parent}: cannot write {name} ({e.strerror or e})") from None
  return path


def check_size(flag: str, n: int) -> None:
  if n < MIN_SIZE:
    raise ValueError(f"{flag} must be >= {MIN_SIZE} (three 2x2 poolings), got {n}")


def _csv(flag: str, value: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
  items = tuple(v.strip() for v in value.split(",") if v.strip())
  bad = [v for v in items if v not in allowed]
  if not items or bad:
    raise ValueError(f"{flag} {value!r}: expected a comma-separated subset of {list(allowed)}")
  return items


def main(argv: list[str] | None = None) -> int:
  parser = cli.ArgumentParser(prog="python -m pncnn_jax.export", description=__doc__.splitlines()[0])
  parser.add_argument("--checkpoint", required=True,
                      help="pncnn_jax checkpoint dir/workdir, official .pth.tar/.npz, or a shipped name "
                           "('synthetic:<name>')")
  parser.add_argument("--output", required=True, help="output directory")
  parser.add_argument("--height", type=int, required=True, help="input height H (fixed in the artifacts)")
  parser.add_argument("--width", type=int, required=True, help="input width W (fixed in the artifacts)")
  parser.add_argument("--variant", default=None, help=f"model variant, one of {sorted(models.VARIANTS)}")
  parser.add_argument("--formats", default="auto",
                      help=f"'auto' (every format the installed packages allow, saying what it skips) or a "
                           f"comma-separated subset of {list(FORMATS)}")
  parser.add_argument("--platforms", default="cpu,cuda",
                      help=f"platforms of the StableHLO artifact, a comma-separated subset of {list(PLATFORMS)}")
  parser.add_argument("--onnx_batch", type=int, default=1, help="the fixed batch size of the ONNX model")
  parser.add_argument("--allow_mismatch", action="store_true",
                      help="use --variant even where the checkpoint says it was trained as another variant")
  parser.add_argument("--fill_unsupported", action="store_true",
                      help="export depth (clamped at 0) and confidence at every pixel, also where they are not valid "
                           "(no measurement within 8 px); default NaN there. The valid output marks them either way")
  args = parser.parse_args(argv)
  try:
    if args.variant is not None and args.variant not in models.VARIANTS:
      raise ValueError(f"--variant {args.variant!r} is not one of {sorted(models.VARIANTS)}")
    formats = None if args.formats == "auto" else _csv("--formats", args.formats, FORMATS)
    platforms = _csv("--platforms", args.platforms, PLATFORMS)
    check_size("--height", args.height)
    check_size("--width", args.width)
    export_checkpoint(args.checkpoint, args.output, args.height, args.width, variant=args.variant,
                      formats=formats, platforms=platforms, onnx_batch=args.onnx_batch,
                      allow_mismatch=args.allow_mismatch, fill_unsupported=args.fill_unsupported)
  except (ValueError, FileNotFoundError, FileExistsError, ImportError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  except OSError as e:  # a full disk, a read-only folder: the messages above name the path
    print(f"error: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
