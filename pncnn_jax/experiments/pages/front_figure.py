"""The front figure of the README and the docs home: the real KITTI frame at 64 and at 16 beams, completed by the
default model, with its sigma.

The frame is the one `pncnn_jax.experiments.sensors` scores on docs/results/SENSORS.md (`kitti_frame_files`,
`kitti_frame`: its Velodyne scan, thinned to every 4th laser by `data.sensors.thin_points` and projected as
`predict --points` projects, in KITTI depth completion's bottom 352x1216 crop). The default model
(`inference.completer.RECOMMENDED`, `Completer.from_pretrained()`) completes each input as a user's call would;
the pixels without input support (`Completion.valid` False: NaN in its output) are hatched, as in predict's preview
(`pncnn_jax.viz`). Each block is titled with the scan points kept, the input density predict prints
(`data.input_contract.input_density`, the Completion's `input_density`) and the MAE of the valid prediction at the
annotated ground-truth pixels.

  python -m pncnn_jax.experiments.pages.front_figure --output docs/results/figures/kitti_64_16.png

Regenerate it when the default model changes (the README's and docs/index.md's captions quote its numbers).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys

import numpy as np

from pncnn_jax import viz
from pncnn_jax.data import io as data_io
from pncnn_jax.data import sparsify
from pncnn_jax.experiments import sensors
from pncnn_jax.inference import completer

OUTPUT = "docs/results/figures/kitti_64_16.png"
# The figure's rows: (label, every k-th laser, the input of `sensors.KittiFrame.sparse`).
ROWS = (("64 beams: the whole scan", 1, "64 beams (the scan)"),
        ("16 beams: every 4th laser", 4, "16 beams (every 4th laser)"))
POINT_PX = 3  # input points are drawn POINT_PX x POINT_PX pixels wide (the nearest depth wins): visible at 1000 px
WIDTH_IN, DPI = 9.0, 105  # ~1000 px wide


@dataclasses.dataclass(frozen=True)
class FrontRow:
  """One row of the figure: the input and the default model's completion of it.

  Attributes:
    label: the row's name (ROWS).
    points: the scan points kept (every k-th laser), all of them, in and out of the camera's view.
    input_pixels: the crop's pixels holding a projected point.
    sparse: (352, 1216) float32 input depth [m], 0 = none.
    depth, sigma: (352, 1216) float32 [m], NaN where not valid (`Completion`).
    valid: (352, 1216) bool, `Completion.valid`.
    density: the input density (`Completion.input_density`, a fraction).
    mae_m: mean |depth - ground truth| [m] over the ground-truth pixels where the prediction is valid.
    scored, unscored: the ground-truth pixels inside and outside `valid`.
  """

  label: str
  points: int
  input_pixels: int
  sparse: np.ndarray
  depth: np.ndarray
  sigma: np.ndarray
  valid: np.ndarray
  density: float
  mae_m: float
  scored: int
  unscored: int

  def title(self) -> str:
    return (f"{self.label}: {self.points:,} points ({self.input_pixels:,} pixels in the crop), input density "
            f"{completer.density_text(self.density)} %, MAE {1000 * self.mae_m:.0f} mm at {self.scored:,} ground-truth "
            f"pixels")


def camera_image(files: dict[str, pathlib.Path], camera: str = sensors.KITTI_CAMERA) -> pathlib.Path:
  """The frame's camera image in KITTI raw beside its scan: <drive>/image_0X/data/<frame>.png."""
  scan = files["scan"]
  path = scan.parents[2] / f"image_{camera}" / "data" / f"{scan.stem}.png"
  if not path.is_file():
    raise FileNotFoundError(f"--kitti_raw {scan.parents[4]}: no camera image {path}")
  return path


def read_crop(path: pathlib.Path, shape: tuple[int, int]) -> np.ndarray:
  """(352, 1216, 3) uint8: the camera image cropped as the depth (`sensors.KITTI_CROP` at the bottom, centred)."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  rgb = np.asarray(Image.open(path).convert("RGB"))
  if rgb.shape[:2] != shape:
    raise ValueError(f"{path}: {rgb.shape[0]}x{rgb.shape[1]}, but its depth maps are {shape[0]}x{shape[1]}")
  top, left = sparsify.crop_offsets(*shape, *sensors.KITTI_CROP, "bottom")
  return rgb[top:top + sensors.KITTI_CROP[0], left:left + sensors.KITTI_CROP[1]]


def front_rows(frame: sensors.KittiFrame, model: completer.Completer) -> list[FrontRow]:
  """The figure's rows (ROWS): `model` on each input of `frame`, scored at the annotated ground truth."""
  out = []
  gt = frame.target > 0
  for label, every, key in ROWS:
    sparse = frame.sparse[key]
    c = model(sparse, name=label)
    scored = gt & c.valid
    out.append(FrontRow(label, len(frame.scans[every]), int((sparse > 0).sum()), sparse, c.depth, c.sigma, c.valid,
                        float(c.input_density), float(np.mean(np.abs(c.depth[scored] - frame.target[scored]))),
                        int(scored.sum()), int((gt & ~c.valid).sum())))
  return out


def widen_points(sparse: np.ndarray, px: int = POINT_PX) -> np.ndarray:
  """(H, W) depth [m], 0 = none -> each point drawn px x px pixels (the nearest depth where they overlap)."""
  h, w = sparse.shape
  r = px // 2
  d = np.pad(np.where(sparse > 0, sparse, np.inf), r, constant_values=np.inf)
  near = np.min([d[i:i + h, j:j + w] for i in range(px) for j in range(px)], axis=0)
  return np.where(np.isfinite(near), near, 0.0).astype(np.float32)


def draw(rows: list[FrontRow], rgb: np.ndarray, target: np.ndarray, path, *, model_name: str, frame_name: str) -> None:
  """The figure: the camera image and the annotated ground truth, then per row of `rows` (a block titled by
  `FrontRow.title`) the input points, the completed depth, sigma (log scale) and |error| at the ground truth;
  depth and error on one scale for every row, sigma on one log scale; hatched: not valid (no input support)."""
  plt = viz._plt()  # pylint: disable=protected-access
  dmax = float(np.percentile(rows[0].sparse[rows[0].sparse > 0], 99))
  s_lo, s_hi, s_log = viz.value_range(np.concatenate([r.sigma[r.valid] for r in rows]), positive=True)
  gt = target > 0
  errs = [np.where(gt & r.valid, np.abs(r.depth - target), np.nan) for r in rows]
  e_hi = float(np.nanpercentile(np.concatenate([e[np.isfinite(e)] for e in errs]), 99))
  h, w = target.shape
  panel_h = 0.5 * WIDTH_IN * h / w
  nrows = 1 + 2 * len(rows)
  height = nrows * (panel_h + 0.3) + 0.3 * len(rows) + 0.3
  fig = plt.figure(figsize=(WIDTH_IN, height))
  outer = fig.add_gridspec(1 + len(rows), 1, height_ratios=[1] + [2.15] * len(rows), hspace=0.28,
                           top=1 - 0.45 / height, bottom=0.01, left=0.01, right=0.99)
  top = outer[0].subgridspec(1, 2, wspace=0.12)
  ax = fig.add_subplot(top[0, 0])
  ax.imshow(rgb, interpolation="antialiased")
  ax.set_xticks([]), ax.set_yticks([])
  ax.set_title("camera image_02 (the same bottom 352x1216 crop)", fontsize=8)
  viz.show_image(fig.add_subplot(top[0, 1]), np.where(gt, target, np.nan), cmap="turbo", label="depth [m]",
                 vmin=0.0, vmax=dmax, title="annotated ground truth (white: none)")
  for i, (r, err) in enumerate(zip(rows, errs)):
    block = outer[1 + i].subgridspec(2, 2, wspace=0.12, hspace=0.3)
    wide = widen_points(r.sparse)
    views = [dict(values=np.where(wide > 0, wide, np.nan), cmap="turbo", label="depth [m]", vmin=0.0, vmax=dmax,
                  title=f"input: projected points (drawn {POINT_PX} px wide)"),
             dict(values=r.depth, cmap="turbo", label="depth [m]", vmin=0.0, vmax=dmax, hatch=~r.valid,
                  title=f"completed depth (hatched: no input support, {100 * (~r.valid).mean():.0f} %)"),
             dict(values=r.sigma, cmap="magma", label="sigma [m]", vmin=s_lo, vmax=s_hi, log=s_log, hatch=~r.valid,
                  title="sigma (bright = uncertain)"),
             dict(values=err, cmap="inferno", label="|error| [m]", vmin=0.0, vmax=e_hi,
                  title="|error| at the ground truth")]
    axes = [fig.add_subplot(block[k // 2, k % 2]) for k in range(4)]
    for a, v in zip(axes, views):
      viz.show_image(a, **v)
      a.title.set_fontsize(7)
    axes[0].annotate(r.title(), xy=(0.0, 1.0), xycoords="axes fraction", xytext=(0, 15), textcoords="offset points",
                     fontsize=8, fontweight="bold", va="bottom")
  fig.suptitle(f"Real KITTI frame {frame_name}, completed by {model_name}", fontsize=9, y=1 - 0.05 / height,
               va="top")
  viz._save(fig, path, dpi=DPI)  # pylint: disable=protected-access
  from PIL import Image  # pylint: disable=g-import-not-at-top
  with Image.open(path) as im:  # 256 colours: a third of the bytes, the colour maps' steps kept
    small = im.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT)
  small.save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--output", default=OUTPUT, help="the PNG")
  p.add_argument("--kitti_raw", default=str(sensors.KITTI_RAW),
                 help=f"KITTI raw folder of the frame (default: {sensors.shown(sensors.KITTI_RAW)})")
  p.add_argument("--kitti_depth", default=str(sensors.KITTI_DEPTH),
                 help=f"KITTI depth completion folder of the frame (default: {sensors.shown(sensors.KITTI_DEPTH)})")
  p.add_argument("--model", default=completer.RECOMMENDED, help="the model (default: the recommended one)")
  args = p.parse_args(argv)
  try:
    files = sensors.kitti_frame_files(args.kitti_raw, args.kitti_depth)[0]
    frame = sensors.kitti_frame(files)
    rgb = read_crop(camera_image(files), data_io.read_kitti_depth(files["velodyne_raw"]).shape)
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  model = completer.Completer.from_pretrained(args.model)
  rows = front_rows(frame, model)
  for r in rows:
    print(r.title() + f"; {r.unscored:,} ground-truth pixels without a valid prediction")
  out = pathlib.Path(args.output)
  draw(rows, rgb, frame.target, out, model_name=args.model.partition(":")[2] or args.model, frame_name=frame.name)
  print(f"wrote {out} ({os.path.getsize(out) / 1024:.0f} KB)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
