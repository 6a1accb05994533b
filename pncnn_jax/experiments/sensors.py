"""Behaviour across sensors: trained models on the held-out synthetic scenes seen by other depth sensors.

Every model runs, unchanged, on the same test scenes (the long recipe's evaluation frame, centre crop) seen by the
sensors of `SENSORS` (names of `pncnn_jax.data.sensors`), through the one evaluation across sensors
(`pncnn_jax.evaluate.across_sensors`, what `eval.py --sensors` runs): the 64-beam LiDAR the shipped models were
trained on (`hdl64`, the reference of every ratio), every 2nd and 4th of its lasers (`thin2`, `thin4`), the other
presets rendered as they see the scene (`hdl32`, `os1_32`, `vlp16`, `os1_128`: their own beams, field and mount),
and visual-odometry points at 0.15 % of the pixels (`vo_015`). The ground truth is the same for every sensor.
It writes docs/results/SENSORS.md (+ .json) with the targets of the sensor-robust model checked per model.

  python -m pncnn_jax.experiments.sensors --output docs/results/SENSORS.md

`--models` takes shipped names (`sparse_var_beta_detach_masked`) or `label=checkpoint` for any checkpoint the
loader reads (a training run's directory: its best step).

The real KITTI frame (the page's last section; `kitti_frame_files`, `kitti_frame`, `evaluate_kitti`): the frames
under `--kitti_depth` (KITTI depth completion: velodyne_raw and annotated ground truth, camera 02) whose Velodyne
scan and calibration lie under `--kitti_raw` (KITTI raw: <date>/<drive>/velodyne_points/data/<frame>.bin,
<date>/calib_*.txt); by default ../shared/data/kitti_raw_mini and kitti_depth_mini beside the checkout, when they
exist. Each scan, as recorded (64 beams) and thinned to every 2nd and 4th laser (`data.sensors.thin_points`), is
projected into the camera as `predict --points` does (`data.points`) and cropped as KITTI's depth-completion frames
are (the bottom 352x1216); KITTI's own velodyne_raw is a fourth input. The models: the recommended shipped one
(`inference.completer.RECOMMENDED`), the official KITTI-trained NCNN-Conf-L1 (`--kitti_official`, by default in
../shared/reference/checkpoints) and every `label=checkpoint` of `--models`, scored by the depth evaluator on
one-frame batches against the annotated ground truth.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
from collections.abc import Sequence

import numpy as np

from pncnn_jax import from_config
from pncnn_jax.checkpoints import loader
from pncnn_jax.data import io as data_io
from pncnn_jax.data import points, sparsify
from pncnn_jax.data import sensors as data_sensors
from pncnn_jax.evaluate import across_sensors, pairs
from pncnn_jax.experiments import claims as claims_lib
from pncnn_jax.experiments import runs
from pncnn_jax.inference import completer

SENSORS = ("hdl64", "thin2", "thin4", "hdl32", "os1_32", "vlp16", "os1_128", "vo_015")
REFERENCE = "hdl64"
# The recommended shipped pNCNN and the official-form networks (their unmasked c0, the paper's models).
MODELS = ("sparse_var_beta_detach_masked", "pncnn", "pncnn_exp", "ncnn_conf_l1")
# The sensor-robust model's targets (fixed before its training): per class of sensors, the largest MAE ratio to the
# model's own 64-beam MAE, the largest AUSE (pNCNN's normalisation) and the range of the +-1.96 sigma coverage [%].
TARGET_CLASSES = {"32 beams": ("thin2", "hdl32", "os1_32"), "16 beams": ("thin4", "vlp16"), "VO (0.15 %)": ("vo_015",)}
TARGETS = {"64 beams": (None, 0.05, (90.0, 98.0)), "32 beams": (1.25, 0.08, (90.0, 98.0)),
           "16 beams": (1.6, 0.10, (90.0, 98.0)), "VO (0.15 %)": (3.0, None, None)}
TARGET_64_VS_RECOMMENDED = 1.05  # 64-beam MAE at most this times the recommended shipped model's

# The real KITTI frame: the rows (input name -> every k-th laser of the scan; None: KITTI's own velodyne_raw), the
# first the reference of the ratios; KITTI depth completion's crop; the camera; the data and the official checkpoint
# beside the checkout (../shared, as the tests find it).
KITTI_ROWS = {"64 beams (the scan)": 1, "32 beams (every 2nd laser)": 2, "16 beams (every 4th laser)": 4,
              "64 beams, KITTI's velodyne_raw": None}
KITTI_REFERENCE = "64 beams (the scan)"
KITTI_CROP = (352, 1216)
KITTI_CAMERA = "02"
SHARED = pathlib.Path(__file__).resolve().parents[2].parent / "shared"
KITTI_RAW = SHARED / "data" / "kitti_raw_mini"
KITTI_DEPTH = SHARED / "data" / "kitti_depth_mini"
KITTI_OFFICIAL = SHARED / "reference" / "checkpoints" / "kitti_ncnn_conf_l1_checkpoint-9.pth.tar"
OFFICIAL_LABEL = "ncnn_conf_l1 (official, KITTI)"


def model_specs(text: str, *, labelled_only: bool = False) -> list[tuple[str, str]]:
  """'a,b=path' -> [('a', 'synthetic:a'), ('b', 'path')]: (label, loader checkpoint) pairs; `labelled_only`: only
  the `label=checkpoint` items ([('b', 'path')])."""
  out = []
  for item in (x.strip() for x in text.split(",") if x.strip()):
    label, _, spec = item.partition("=")
    if spec:
      out.append((label, spec))
    elif not labelled_only:
      out.append((label, label if ":" in label else f"synthetic:{label}"))
  return out


def test_config(num_scenes: int, crop: tuple[int, int], batch_size: int = 8):
  """The synthetic config of the held-out test scenes (`num_scenes`, centre `crop`)."""
  config = from_config.load_config("synthetic")
  with config.unlocked():
    config.data.eval_split, config.data.eval_crop = "test", "center"
    config.data.eval_crop_height, config.data.eval_crop_width = crop
    config.data.eval_synthetic_size, config.eval_batch_size = num_scenes, batch_size
  return config


def evaluate_models(models: Sequence[tuple[str, str]], sensors: Sequence[str], num_scenes: int,
                    crop: tuple[int, int]) -> dict[str, dict[str, dict]]:
  """{model label: {sensor: row of `across_sensors.evaluate_sensors`}}, ratios to REFERENCE."""
  config = test_config(num_scenes, crop)
  out = {}
  for label, spec in models:
    ckpt = loader.load(spec)
    res = across_sensors.evaluate_sensors(ckpt.build_model(), ckpt.variables, config, sensors, reference=REFERENCE,
                                          loss_name=ckpt.loss)
    out[label] = res.rows
    print(f"{label}:\n{res.table()}", flush=True)
  return out


def target_checks(results: dict[str, dict[str, dict]], recommended: str | None) -> list[str]:
  """A table: per model with a sigma and per sensor of a target class, each target of TARGETS with the measured
  value and 'holds' or 'misses'; then the 64-beam MAE against the recommended model's."""
  def verdict(ok):
    return "holds" if ok else "misses"

  lines = ["| model | sensor | class | MAE / own 64-beam MAE | AUSE | within 1.96 sigma [%] |",
           "|---|---|---|---|---|---|"]
  notes = []
  rec = results.get(recommended, {}).get(REFERENCE) if recommended else None
  for label, rows in results.items():
    if rows[REFERENCE].get("coverage_95") is None:
      continue  # no calibrated sigma: the targets are about one
    if rec is not None and label != recommended:
      r = rows[REFERENCE]["mae"] / rec["mae"]
      notes.append(f"- **{label}** at 64 beams: MAE {r:.2f}x the recommended model's ({recommended}; target <= "
                   f"{TARGET_64_VS_RECOMMENDED}: {verdict(r <= TARGET_64_VS_RECOMMENDED)}).")
    for cls, members in {"64 beams": (REFERENCE,), **TARGET_CLASSES}.items():
      max_ratio, max_ause, cover = TARGETS[cls]
      for s in (m for m in members if m in rows):
        row = rows[s]
        cells = [
            "-" if max_ratio is None else
            f"{row['mae_ratio']:.2f}x (<= {max_ratio}: {verdict(row['mae_ratio'] <= max_ratio)})",
            f"{row['ause_pncnn']:.3f}" + ("" if max_ause is None else
                                          f" (<= {max_ause}: {verdict(row['ause_pncnn'] <= max_ause)})"),
            f"{row['coverage_95']:.1f}" + ("" if cover is None else
                                           f" ({cover[0]:.0f}-{cover[1]:.0f}: "
                                           f"{verdict(cover[0] <= row['coverage_95'] <= cover[1])})")]
        lines.append(f"| {label} | {s} | {cls} | " + " | ".join(cells) + " |")
  return lines + ([""] + notes if notes else [])


def paper_claims(runs_summary: dict, reference: dict) -> tuple[list[tuple[str, bool | None, str]], list[str]]:
  """The paper's claims (b)-(d) (`pncnn_jax.experiments.claims`) for the runs of `runs_summary` (the sensor-robust
  runs on the long recipe's 96 held-out test scenes at 64 beams: `reproduce --only ...lidar_mix...` writes it to
  <workdir>/SENSOR_RUNS.json) against the rows of `reference` (docs/results/RESULTS_LONG.json, the same scenes)
  they compare with: ([(claim, holds, numbers)] of the claims that name one of those runs, the lines of their
  spread over seeds, which the claims refer to)."""
  ours = runs_summary["runs"]
  merged = {**{n: r for n, r in reference["runs"].items() if n not in ours}, **ours}
  claims = [c for c in claims_lib.claims(merged, None) if any(f"`{n}`" in c[0] for n in ours)]
  refs = {n: reference["runs"][n] for n in ("ncnn_conf_l1_masked",) if n in reference["runs"] and n not in ours}
  return claims, claims_lib.seed_lines({**refs, **ours})


FINDINGS_MARK = "<!-- findings: written by hand, kept when the page is regenerated -->"


def kept_findings(page: pathlib.Path) -> str:
  """What follows FINDINGS_MARK in an existing `page` (the reading of the numbers, written by hand: what holds, what
  does not, the most likely cause), with the mark, to be appended to the regenerated page; '' without one."""
  old = page.read_text(encoding="utf-8") if page.is_file() else ""
  at = old.find(FINDINGS_MARK)
  return "" if at < 0 else "\n" + old[at:]


def render(results: dict[str, dict[str, dict]], meta: dict, kitti: dict,
           claims: tuple[list[tuple[str, bool | None, str]], list[str]] | None = None) -> str:
  """docs/results/SENSORS.md: per model, one row per sensor with its ratio to the 64-beam row, then the targets,
  the paper's claims for the sensor-robust model (`claims`: `paper_claims`) and the real KITTI frame (`kitti`:
  `kitti_summary`, or {'available': False, 'reason': ...})."""
  keys = ("density", "mae", "rmse", "ause_pncnn", "ause_shared_max", "auce", "nll", "coverage_95", "auroc_disturbed")
  head = ["model", "sensor", "input [%]", "MAE [mm]", "RMSE [mm]", "AUSE", "AUSE shared max", "AUCE", "NLL",
          "within 1.96 sigma [%]", "c0 AUROC"]
  lines = [
      "# Behaviour across sensors",
      "",
      f"Each model runs unchanged on the same held-out synthetic scenes ({meta['num_scenes']} test scenes, centre "
      f"{meta['crop'][0]}x{meta['crop'][1]} crops) seen by other sensors: the simulated 64-beam LiDAR most shipped "
      "models were trained on (`hdl64`), every 2nd and every 4th of its lasers (`thin2`, `thin4`: 32 and 16 beams "
      "over the same vertical field), the 32-, 16- and 128-beam presets rendered with their own field and mount "
      "(`hdl32`, `os1_32`, `vlp16`, `os1_128`), and visual-odometry points on 0.15 % of the pixels (`vo_015`). The "
      "ground truth is the same for every sensor. MAE and RMSE in mm (means of per-image values); AUSE in pNCNN's "
      "normalisation and over one shared maximum (lower: sigma ranks the errors better; 0 = the oracle's order); "
      "AUCE (lower: better calibrated); NLL per pixel; within 1.96 sigma: the share of pixels inside the 95 % "
      "interval (95 for a calibrated sigma); c0 AUROC: the input confidence's AUROC for the disturbed LiDAR points "
      "(none for VO). '-': the model has no sigma (NCNN-Conf-L1's AUSE ranks by its output confidence). In "
      "brackets: the ratio to the model's figure at 64 beams (for NLL, the difference).",
      "",
      f"Regenerate: `{meta['command']}` ({meta['date']}, commit {meta['commit']}, {meta['seconds']:.0f} s on "
      f"{meta['machine']}); the same table for one model: `eval.py --sensors {','.join(meta['sensors'])}`.",
      "",
      "| " + " | ".join(head) + " |",
      "|" + "---|" * len(head),
  ]
  for label, rows in results.items():
    for sensor, row in rows.items():
      lines.append("| " + " | ".join([label, sensor] + [across_sensors.cell(row, k) for k in keys]) + " |")
  lines += ["", "## Targets of the sensor-robust model", "",
            "Fixed before its training: at 64 beams an MAE at most 1.05x the recommended model's and AUSE <= 0.05; "
            "at 32 beams MAE <= 1.25x its own 64-beam MAE and AUSE <= 0.08; at 16 beams <= 1.6x and AUSE <= 0.10; "
            "at every LiDAR density 90-98 % of the pixels within 1.96 sigma; VO at 0.15 %: MAE <= 3x (a stretch). "
            "Checked for every model with a sigma:", ""]
  lines += target_checks(results, meta.get("recommended"))
  if claims:
    lines += ["", "## The paper's claims for the sensor-robust model (64 beams)", "",
              f"On the long recipe's {meta['claims_scenes']} seen by the 64-beam LiDAR, with the project's claim "
              "checks and against the rows of [RESULTS_LONG.md](RESULTS_LONG.md) (the same scenes):", ""]
    lines += [f"- {claim}: {claims_lib.mark(ok)}." + (f" {numbers}." if numbers else "")
              for claim, ok, numbers in claims[0]]
    lines += [line.replace("## Spread over seeds", "### Spread over seeds", 1) for line in claims[1]]
  lines += [""] + render_kitti(kitti)
  return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ the real KITTI frame


@dataclasses.dataclass(frozen=True)
class KittiFrame:
  """One real KITTI frame: its Velodyne scan, thinned and projected, and its annotated ground truth (`kitti_frame`).

  Attributes:
    name: KITTI depth completion's key, '<drive>/image_0X/<frame>'.
    scans: {every: (N, 4) float32 points [m], LiDAR frame} for every k of KITTI_ROWS: the scan's rows of every
      k-th laser from the top (k = 1: the whole scan).
    sparse: {row of KITTI_ROWS: (352, 1216) float32 depth [m], 0 = no point}: each scan projected into the camera,
      and KITTI's velodyne_raw, cropped as KITTI's frames are.
    target: (352, 1216) float32 annotated ground truth [m] in the crop, 0 = none.
    agreement: the whole scan's projection against velodyne_raw over the whole image: `pixels` (ours) and
      `pixels_velodyne_raw`, and `within_{0,1,2}px`: the share of velodyne_raw's pixels with a point of ours within
      that many pixels holding a depth within 5 % (`points.depth_agreement`).
  """

  name: str
  scans: dict[int, np.ndarray]
  sparse: dict[str, np.ndarray]
  target: np.ndarray
  agreement: dict[str, float]


def kitti_frame_files(raw_dir: str | os.PathLike, depth_dir: str | os.PathLike, camera: str = KITTI_CAMERA
                      ) -> list[dict[str, pathlib.Path]]:
  """The frames of camera `camera` under `depth_dir` (KITTI depth completion: <drive>/proj_depth/{velodyne_raw,
  groundtruth}/image_0X/<frame>.png) whose scan lies under `raw_dir` (KITTI raw: <date>/<drive>/velodyne_points/
  data/<frame>.bin, the date's calib_*.txt beside its drives), as {name, scan, calib, velodyne_raw, groundtruth}.

  Raises FileNotFoundError / ValueError (one line naming --kitti_raw or --kitti_depth) for a missing folder or
  when no frame has its scan."""
  raw, root = pathlib.Path(raw_dir), pathlib.Path(depth_dir)
  for flag, folder in (("--kitti_raw", raw), ("--kitti_depth", root)):
    if not folder.is_dir():
      raise FileNotFoundError(f"{flag} {folder}: no such folder")
  try:
    found = pairs.kitti_pairs(root)
  except FileNotFoundError as e:
    raise FileNotFoundError(f"--kitti_depth {root}: {e}") from None
  out = []
  for sparse_png, gt_png in found:
    drive, frame = sparse_png.parents[3].name, sparse_png.stem
    if sparse_png.parent.name != f"image_{camera}" or sparse_png.parents[2].name != "proj_depth":
      continue
    date = raw / drive[:10]
    scan = date / drive / "velodyne_points" / "data" / f"{frame}.bin"
    if scan.is_file():
      out.append({"name": f"{drive}/image_{camera}/{frame}", "scan": scan, "calib": date,
                  "velodyne_raw": sparse_png, "groundtruth": gt_png})
  if not out:
    raise ValueError(f"--kitti_raw {raw}: holds the scan of none of the {len(found)} frame(s) of --kitti_depth {root} "
                     f"(camera {camera}; expected <date>/<drive>/velodyne_points/data/<frame>.bin)")
  return out


def kitti_frame(files: dict[str, pathlib.Path], camera: str = KITTI_CAMERA) -> KittiFrame:
  """One frame of `kitti_frame_files`: the scan thinned to every k-th laser (`data.sensors.thin_points`, the lasers
  from the scan order), each projected into `camera` as `predict --points` projects (`points.read_points`,
  `read_calibration`, `project_points`), then it, velodyne_raw and the ground truth cropped to KITTI_CROP at the
  bottom, centred columns (`sparsify.crop_offsets(..., 'bottom')`, as `evaluate.pairs`)."""
  scan = points.read_points(files["scan"])
  calib = points.read_calibration(files["calib"], camera)
  raw = data_io.read_kitti_depth(files["velodyne_raw"])
  target = data_io.read_kitti_depth(files["groundtruth"], expected_shape=raw.shape)
  if calib.image_size != raw.shape:
    raise ValueError(f"{files['velodyne_raw']}: {raw.shape[0]}x{raw.shape[1]}, but camera {camera} of {files['calib']} "
                     f"is {calib.image_size[0]}x{calib.image_size[1]}")
  top, left = sparsify.crop_offsets(*raw.shape, *KITTI_CROP, "bottom")
  win = np.s_[top:top + KITTI_CROP[0], left:left + KITTI_CROP[1]]
  scans = {k: data_sensors.thin_points(scan, k) for k in sorted({k for k in KITTI_ROWS.values() if k})}
  full = {k: points.project_points(s, calib.K, calib.T_cam_from_lidar, calib.image_size) for k, s in scans.items()}
  sparse = {row: (raw if k is None else full[k])[win] for row, k in KITTI_ROWS.items()}
  agreement = {"pixels": int((full[1] > 0).sum()), "pixels_velodyne_raw": int((raw > 0).sum()),
               **{f"within_{r}px": points.depth_agreement(full[1], raw, r) for r in (0, 1, 2)}}
  return KittiFrame(files["name"], scans, sparse, target[win], agreement)


def evaluate_kitti(models: Sequence[tuple[str, str]], frames: Sequence[KittiFrame]) -> dict[str, dict[str, dict]]:
  """{model label: {row of KITTI_ROWS: row of `across_sensors.sensor_row`}}: each model (a loader checkpoint, built
  with its own model settings) on every frame's inputs, one-frame batches, scored by the depth evaluator (KITTI
  metric set: MAE, RMSE in mm) against the annotated ground truth; ratios to KITTI_REFERENCE
  (`across_sensors.with_ratios`). Every model must take metres (its recorded input scaling 1 unit per metre)."""
  out = {}
  for label, spec in models:
    ckpt = loader.load(spec)
    scale = ckpt.identity.get("input_scale")
    if scale is not None and scale != 1.0:
      raise ValueError(f"--models {label}={spec}: trained on input in units of 1/{scale:g} m; the real frame's rows "
                       "give every model metres")
    model = ckpt.build_model()
    evaluator = across_sensors.SensorDepthEvaluator(loss_name=ckpt.loss, metric_set="kitti")
    rows = {}
    for row in KITTI_ROWS:
      batches = [{"sparse": f.sparse[row][None, ..., None], "target": f.target[None, ..., None]} for f in frames]
      rows[row] = across_sensors.sensor_row(evaluator.run(model, ckpt.variables, batches))
    out[label] = across_sensors.with_ratios(rows, KITTI_REFERENCE)
    print(f"{label} on the real KITTI frame:\n" + "\n".join(
        f"  {row}: MAE {r['mae']:.0f} mm ({r['mae_ratio']:.2f}x)" for row, r in out[label].items()), flush=True)
  return out


def shown(path: str | os.PathLike) -> str:
  """A path as the page shows it: '../shared/...' under SHARED, else as given."""
  p = pathlib.Path(path)
  try:
    return str(pathlib.Path("..", "shared", p.resolve().relative_to(SHARED)))
  except ValueError:
    return str(path)


def unsupported(sparse: np.ndarray, target: np.ndarray) -> int:
  """The ground-truth pixels (target > 0) without an input point within `completer.SUPPORT_RADIUS_PX` pixels
  (`completer.support_mask`): scored by the evaluator, NaN in a `Completer`'s output by default. (H, W) [m] each."""
  support = np.asarray(completer.support_mask(np.asarray(sparse, np.float32)[None, ..., None]))[0, ..., 0]
  return int(((target > 0) & ~support).sum())


def kitti_summary(frames: Sequence[KittiFrame], results: dict[str, dict[str, dict]], models: dict[str, str],
                  notes: Sequence[str]) -> dict:
  """The real frame's part of SENSORS.json: the frames' point and pixel counts and agreement, the models and rows."""
  return {"available": True, "camera": KITTI_CAMERA, "crop": list(KITTI_CROP), "reference": KITTI_REFERENCE,
          "frames": [{"name": f.name, "points": {str(k): len(s) for k, s in f.scans.items()},
                      "input_pixels": {row: int((d > 0).sum()) for row, d in f.sparse.items()},
                      "target_pixels": int((f.target > 0).sum()),
                      "target_pixels_unsupported": {row: unsupported(d, f.target) for row, d in f.sparse.items()},
                      "agreement": f.agreement} for f in frames],
          "models": models, "notes": list(notes), "results": results}


KITTI_HOW_TO_ADD = (
    "To add it: put a KITTI raw drive's scan and its date's calibration under one folder (<date>/calib_cam_to_cam.txt, "
    "calib_velo_to_cam.txt, <date>/<drive>/velodyne_points/data/<frame>.bin) and the same frame of KITTI depth "
    "completion under another (<drive>/proj_depth/velodyne_raw/image_02/<frame>.png and groundtruth/image_02/"
    "<frame>.png), then pass `--kitti_raw DIR --kitti_depth DIR` (by default ../shared/data/kitti_raw_mini and "
    "../shared/data/kitti_depth_mini beside the checkout, where tests/conftest.py finds them).")


def render_kitti(kitti: dict) -> list[str]:
  """The page's section "The real KITTI frame" from `kitti_summary` (or {'available': False, 'reason': ...})."""
  lines = ["## The real KITTI frame", ""]
  if not kitti["available"]:
    return lines + [f"Not evaluated: {kitti['reason']}. {KITTI_HOW_TO_ADD}"]
  lines += [
      "The synthetic scenes above against what a robot records: the real KITTI frame(s) we hold both a Velodyne "
      "scan and annotated ground truth for, seen by the 64-beam LiDAR that recorded them and by every 2nd and every "
      "4th of its lasers. One frame is not a benchmark: it is a check that the synthetic rows' trend holds on real "
      "data, not a target to tune on.",
      "",
      "How it was made (`python -m pncnn_jax.experiments.sensors --kitti_raw DIR --kitti_depth DIR`): KITTI raw's "
      "scan of the frame thinned to every 2nd and every 4th laser counted from the top, the lasers recovered from "
      "the scan order (`pncnn_jax.data.sensors.thin_points`; the kept points are rows of the scan), each projected "
      f"into camera {kitti['camera']} with the date's calibration as `predict --points` projects "
      "(`pncnn_jax.data.points`), and cropped as KITTI's depth-completion frames are (the bottom "
      f"{kitti['crop'][0]}x{kitti['crop'][1]}, centred columns); the 64-beam row is the whole scan, the reference of "
      "the ratios, and the last row of each model is KITTI's own `velodyne_raw` of the frame (the input the "
      "official model was trained on). Scores: the depth evaluator (KITTI metric set, the synthetic table's) on a "
      "one-frame batch against the frame's annotated ground truth: MAE and RMSE in mm, the MAE over the model's own "
      "64-beam MAE, and for a model with a sigma the share of the ground-truth pixels within +-1.96 sigma (95 for a "
      "calibrated sigma; '-': no sigma). Every model is built with its checkpoint's model settings "
      "(`pncnn_jax.checkpoints.loader`, as eval.py) and given metres, the input scaling each records.",
      ""]
  for f in kitti["frames"]:
    a, n = f["agreement"], f["points"]
    lines.append(
        f"- `{f['name']}`: {n['1']:,} scan points, {n['2']:,} and {n['4']:,} kept (every 2nd, every 4th laser); in "
        "the crop " + ", ".join(f"{v:,}" for v in f["input_pixels"].values()) + " input pixels (the rows below, in "
        f"order) and {f['target_pixels']:,} of ground truth, all scored, as eval.py does: "
        + ", ".join(f"{v:,}" for v in f["target_pixels_unsupported"].values()) + " of them lie beyond "
        f"{completer.SUPPORT_RADIUS_PX} px of every input point (outside the `Completer`'s support, NaN in its output "
        "by default). The 64-beam projection agrees with velodyne_raw (whole "
        f"image: {a['pixels']:,} pixels against its {a['pixels_velodyne_raw']:,}): {100 * a['within_1px']:.1f} % of "
        f"velodyne_raw's pixels hold a point of ours within 1 px and {100 * a['within_2px']:.1f} % within 2 px at a "
        f"depth within 5 % ({100 * a['within_0px']:.1f} % at the same pixel: KITTI moved points along the sweep, "
        "[LiDAR point clouds](../deploy/sensors.md#against-kittis-own-velodyne_raw)).")
  lines.append("- Models: " + "; ".join(f"**{label}** (`{spec}`)" for label, spec in kitti["models"].items()) + ".")
  lines += [f"- {note}" for note in kitti["notes"]]
  head = ["model", "input", "input [%]", "MAE [mm]", "RMSE [mm]", "MAE / own 64-beam MAE", "within 1.96 sigma [%]"]
  lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for label, rows in kitti["results"].items():
    for row, r in rows.items():
      cells = [label, row, f"{r['density']:.3g}", f"{r['mae']:.0f}", f"{r['rmse']:.0f}", f"{r['mae_ratio']:.2f}x",
               "-" if r.get("coverage_95") is None else f"{r['coverage_95']:.1f}"]
      lines.append("| " + " | ".join(cells) + " |")
  return lines


def kitti_inputs(raw: str | None, depth: str | None, official: str | None) -> tuple[list[dict] | None, str, str | None,
                                                                                  list[str]]:
  """(frame files or None, why none, the official checkpoint or None, notes) from --kitti_raw, --kitti_depth and
  --kitti_official (None: the defaults beside the checkout when they exist; '': left out). A folder or checkpoint
  named explicitly must exist (FileNotFoundError / ValueError, one line naming the flag)."""
  notes = []
  if official is None:
    official = str(KITTI_OFFICIAL) if KITTI_OFFICIAL.is_file() else None
    if official is None:
      notes.append(f"The official KITTI NCNN-Conf-L1 is left out: not found at {shown(KITTI_OFFICIAL)} (pass "
                   "`--kitti_official PATH`).")
  elif not official:
    official = None
    notes.append("The official KITTI NCNN-Conf-L1 is left out (`--kitti_official ''`).")
  elif not pathlib.Path(official).is_file():
    raise FileNotFoundError(f"--kitti_official {official}: no such file")
  if raw == "" or depth == "":
    return None, "left out by the command (`--kitti_raw ''` or `--kitti_depth ''`)", official, notes
  if raw is None and depth is None and not (KITTI_RAW.is_dir() and KITTI_DEPTH.is_dir()):
    return None, (f"no KITTI frame beside the checkout ({shown(KITTI_RAW)} and {shown(KITTI_DEPTH)} not found)"
                  ), official, notes
  files = kitti_frame_files(KITTI_RAW if raw is None else raw, KITTI_DEPTH if depth is None else depth)
  return files, "", official, notes


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--output", default="docs/results/SENSORS.md", help="the page (its .json beside it)")
  p.add_argument("--models", default=",".join(MODELS),
                 help="shipped model names or label=checkpoint, comma-separated")
  p.add_argument("--recommended", default=MODELS[0], help="the label the 64-beam MAE target compares with")
  p.add_argument("--sensors", default=",".join(SENSORS), help=f"sensor names; {REFERENCE} is added first")
  p.add_argument("--num_scenes", type=int, default=32)
  p.add_argument("--crop", default="x".join(map(str, runs.SCALES["long"]["eval_crop"])), help="HxW")
  p.add_argument("--runs_summary", default="",
                 help="<workdir>/SENSOR_RUNS.json of `reproduce --only sparse_var_beta_detach_masked_lidar_mix,...`: "
                      "the page adds the paper's claims (b)-(d) for those runs")
  p.add_argument("--reference_results", default="docs/results/RESULTS_LONG.json",
                 help="the page of the runs the claims compare with (the same held-out scenes)")
  p.add_argument("--kitti_raw", default=None,
                 help=f"KITTI raw folder (<date>/<drive>/velodyne_points, <date>/calib_*.txt) of the real frame "
                      f"(default: {shown(KITTI_RAW)} when it exists; '': no real frame)")
  p.add_argument("--kitti_depth", default=None,
                 help=f"KITTI depth completion folder (<drive>/proj_depth/...) of the real frame (default: "
                      f"{shown(KITTI_DEPTH)} when it exists; '': no real frame)")
  p.add_argument("--kitti_official", default=None,
                 help=f"the official KITTI NCNN-Conf-L1 checkpoint for the real frame (default: "
                      f"{shown(KITTI_OFFICIAL)} when it exists; '': left out)")
  args = p.parse_args(argv)
  try:
    crop = tuple(int(v) for v in args.crop.split("x"))
    if len(crop) != 2 or min(crop) < 8:
      raise ValueError
  except ValueError:
    print(f"error: --crop {args.crop!r}: expected HxW, each >= 8", file=sys.stderr)
    return 2
  if args.num_scenes < 1:
    print(f"error: --num_scenes must be >= 1, got {args.num_scenes}", file=sys.stderr)
    return 2
  sensors = [REFERENCE] + [s for s in (x.strip() for x in args.sensors.split(",")) if s and s != REFERENCE]
  try:
    config = test_config(args.num_scenes, crop)
    for s in sensors:
      across_sensors.sensor_config(config, s)
  except ValueError as e:
    print(f"error: --sensors: {e}", file=sys.stderr)
    return 2
  try:
    kitti_files, why_not, official, notes = kitti_inputs(args.kitti_raw, args.kitti_depth, args.kitti_official)
    frames = None if kitti_files is None else [kitti_frame(f) for f in kitti_files]
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  claims, claims_scenes = None, None
  if args.runs_summary:
    try:
      summary = json.loads(pathlib.Path(args.runs_summary).read_text())
      claims = paper_claims(summary, json.loads(pathlib.Path(args.reference_results).read_text()))
      claims_scenes = summary["scenes"]
    except (OSError, ValueError, KeyError) as e:
      print(f"error: --runs_summary {args.runs_summary} with --reference_results {args.reference_results}: {e}",
            file=sys.stderr)
      return 2
  t = time.time()
  results = evaluate_models(model_specs(args.models), sensors, args.num_scenes, crop)
  if frames is None:
    kitti = {"available": False, "reason": why_not}
  else:
    kitti_models = [(completer.RECOMMENDED.partition(":")[2], completer.RECOMMENDED),
                    *([(OFFICIAL_LABEL, official)] if official else []),
                    *model_specs(args.models, labelled_only=True)]
    kitti = kitti_summary(frames, evaluate_kitti(kitti_models, frames),
                          {label: shown(spec) for label, spec in kitti_models}, notes)
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False).stdout.strip() or "unknown"
  meta = {"date": time.strftime("%Y-%m-%d"), "commit": commit, "seconds": time.time() - t,
          "machine": f"{platform.machine()}, {os.cpu_count()} cores", "num_scenes": args.num_scenes,
          "crop": list(crop), "sensors": sensors, "recommended": args.recommended, "claims_scenes": claims_scenes,
          "command": "python -m pncnn_jax.experiments.sensors " + " ".join(argv if argv is not None else sys.argv[1:])}
  out = pathlib.Path(args.output)
  out.write_text(render(results, meta, kitti, claims) + kept_findings(out))
  out.with_suffix(".json").write_text(json.dumps(
      {"meta": meta, "results": results, "kitti_frame": kitti,
       "claims": [{"claim": c, "holds": ok, "numbers": n} for c, ok, n in (claims or ([], []))[0]]}, indent=1)
      + "\n")
  print(f"wrote {out} and {out.with_suffix('.json')}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
