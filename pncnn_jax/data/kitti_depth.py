"""`kitti_depth`: the KITTI depth-completion benchmark as a TFDS dataset (ArrayRecord, no TensorFlow).

Build (once; the zips must be downloaded by hand, KITTI needs a registration):

  import tensorflow_datasets as tfds
  from pncnn_jax.data import kitti_depth
  kitti_depth.KittiDepth(data_dir=DATA_DIR).download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=KITTI_ROOT))

then read with `tfds.data_source('kitti_depth', split=..., data_dir=DATA_DIR)` (or the pipeline's
`data_dir` key). Depth is stored losslessly as the raw uint16 PNG values (metres = value / 256).
"""

from __future__ import annotations

import logging
import pathlib
import re

import numpy as np
import tensorflow_datasets as tfds

from pncnn_jax.data import io

_MANUAL = """\
Download from https://www.cvlibs.net/datasets/kitti/eval_depth.php?benchmark=depth_completion
  data_depth_annotated.zip   (train/ and val/ ground truth, proj_depth/groundtruth)
  data_depth_velodyne.zip    (train/ and val/ LiDAR input, proj_depth/velodyne_raw)
  data_depth_selection.zip   (depth_selection/val_selection_cropped, test_depth_completion_anonymous)
and unzip all three into one folder (the manual_dir), giving (docs/SPEC.md §10.1):
  <manual_dir>/train/<YYYY_MM_DD>_drive_<NNNN>_sync/proj_depth/velodyne_raw/image_0{2,3}/<frame>.png
  <manual_dir>/train/<YYYY_MM_DD>_drive_<NNNN>_sync/proj_depth/groundtruth/image_0{2,3}/<frame>.png
  <manual_dir>/val/...   (same structure)
  <manual_dir>/depth_selection/val_selection_cropped/velodyne_raw/<drive>_sync_velodyne_raw_<frame>_image_0X.png
  <manual_dir>/depth_selection/val_selection_cropped/groundtruth_depth/<drive>_sync_groundtruth_depth_<frame>_image_0X.png
  <manual_dir>/depth_selection/test_depth_completion_anonymous/velodyne_raw/<NNNNNNNNNN>.png
Splits present in the folder are built: train, val, selval (val_selection_cropped), test (input only).
"""

_SEL_RE = re.compile(r"^(?P<drive>.+_sync)_(?:velodyne_raw|groundtruth_depth)_"
                     r"(?P<frame>\d+)_(?P<cam>image_0[23])\.png$")


class KittiDepthBuildError(ValueError):
  """Unpaired or unreadable files in the KITTI folder."""


def _drive_pairs(split_dir: pathlib.Path, problems: list[str]) -> dict[str, tuple[pathlib.Path, pathlib.Path]]:
  """name '<drive>/<image_0X>/<frame>' -> (velodyne_raw, groundtruth), paired by key, not position."""
  files = {}
  for kind in ("velodyne_raw", "groundtruth"):
    files[kind] = {f"{p.parents[3].name}/{p.parent.name}/{p.stem}": p
                   for p in split_dir.glob(f"*/proj_depth/{kind}/image_0[23]/*.png")}
  return _pair(files["velodyne_raw"], files["groundtruth"], split_dir, problems)


def _selection_pairs(sel_dir: pathlib.Path, problems: list[str]) -> dict[str, tuple[pathlib.Path, pathlib.Path]]:
  files, bad = {}, []
  for kind in ("velodyne_raw", "groundtruth_depth"):
    files[kind] = {}
    for p in (sel_dir / kind).glob("*.png"):
      m = _SEL_RE.match(p.name)
      if m is None:
        bad.append(str(p))
        continue
      files[kind][f"{m['drive']}/{m['cam']}/{m['frame']}"] = p
  if bad:
    problems.append(f"{len(bad)} file names not in KITTI's selection pattern:\n  " + "\n  ".join(sorted(bad)))
  pairs = _pair(files["velodyne_raw"], files["groundtruth_depth"], sel_dir, problems)
  # Names are the velodyne_raw file names (predictions are written back under them).
  return {v.stem: (v, g) for v, g in pairs.values()}


def _pair(inputs: dict, targets: dict, where: pathlib.Path, problems: list[str]):
  """The pairs with both files; the files without a partner are listed in `problems`."""
  only_in = sorted(str(inputs[k]) for k in inputs.keys() - targets.keys())
  only_gt = sorted(str(targets[k]) for k in targets.keys() - inputs.keys())
  if only_in or only_gt:
    lines = [f"{where}: {len(only_in) + len(only_gt)} unpaired files (paired by drive, camera, frame):"]
    lines += [f"  no ground truth for {p}" for p in only_in] + [f"  no LiDAR input for {p}" for p in only_gt]
    problems.append("\n".join(lines))
  return {k: (inputs[k], targets[k]) for k in sorted(inputs) if k in targets}


def _fail(problems: list[str]) -> None:
  raise KittiDepthBuildError("the KITTI folder has bad files (all of them are listed; fix them and build again):\n"
                             + "\n".join(problems))


def find_examples(root, problems: list[str] | None = None
                  ) -> dict[str, dict[str, tuple[pathlib.Path, pathlib.Path | None]]]:
  """split -> {name: (input path, ground-truth path or None)} for the splits present under root.

  Unpaired files and selection-set file names out of pattern, in every split, are collected: appended to
  `problems` when it is given (the builder adds the unreadable files it finds, then fails once), else raised
  together as one KittiDepthBuildError.
  """
  root = pathlib.Path(root)
  if not root.is_dir():
    raise KittiDepthBuildError(f"{root}: KITTI manual_dir does not exist.\n{_MANUAL}")
  found: list[str] = []
  out = {}
  for split in ("train", "val"):
    if (root / split).is_dir():
      out[split] = _drive_pairs(root / split, found)
  sel = root / "depth_selection" / "val_selection_cropped"
  if sel.is_dir():
    out["selval"] = _selection_pairs(sel, found)
  test = root / "depth_selection" / "test_depth_completion_anonymous" / "velodyne_raw"
  if test.is_dir():
    out["test"] = {p.stem: (p, None) for p in sorted(test.glob("*.png"))}
  out = {k: v for k, v in out.items() if v}
  if not out and not found:
    raise KittiDepthBuildError(f"{root}: no KITTI depth files found.\n{_MANUAL}")
  if found and problems is None:
    _fail(found)
  if problems is not None:
    problems.extend(found)
  return out


class KittiDepth(tfds.core.GeneratorBasedBuilder):
  """KITTI depth completion: sparse LiDAR (velodyne_raw) and semi-dense ground truth, uint16 / 256 m."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = _MANUAL

  def __init__(self, **kwargs):
    # ArrayRecord is the TFDS format that is written and read without TensorFlow (the default,
    # tfrecord, imports TF when a split is finalised).
    kwargs.setdefault("file_format", "array_record")
    super().__init__(**kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    depth = lambda: tfds.features.Tensor(shape=(None, None, 1), dtype=np.uint16, encoding="zlib")
    return tfds.core.DatasetInfo(
        builder=self,
        description="KITTI depth completion (Uhrig et al., 3DV 2017). sparse/target: raw uint16 "
                    "PNG values, metres = value / 256, 0 = missing; test has no target (all 0).",
        features=tfds.features.FeaturesDict({
            "sparse": depth(),
            "target": depth(),
            "name": tfds.features.Text(),
        }),
        homepage="https://www.cvlibs.net/datasets/kitti/eval_depth.php?benchmark=depth_completion",
        citation="@inproceedings{Uhrig2017THREEDV, title={Sparsity Invariant CNNs}, "
                 "author={Uhrig, Jonas and others}, booktitle={3DV}, year={2017}}",
        license="CC BY-NC-SA 3.0",
    )

  def _split_generators(self, dl_manager):
    # Every bad file of every split is reported by one build: pairing problems and unreadable files are collected
    # across the splits, and the generator of the last split raises them all.
    problems: list[str] = []
    splits = find_examples(dl_manager.manual_dir, problems)
    if not splits:
      _fail(problems)
    if problems:
      logging.warning("kitti_depth: %d problem(s) in the KITTI folder; every file is read before the build fails "
                      "listing them all", len(problems))
    left = [len(splits)]
    return {split: self._generate_examples(examples, problems, left) for split, examples in splits.items()}

  def _generate_examples(self, examples, problems=None, left=None):
    problems = [] if problems is None else problems
    bad = []
    for name, (inp, gt) in examples.items():
      try:
        sparse = io.read_png_uint16(inp)
        target = (io.read_png_uint16(gt) if gt is not None else np.zeros_like(sparse))
        if target.shape != sparse.shape:
          raise io.DepthFileError(f"{gt}: size {target.shape[::-1]} (WxH) does not match its pair "
                                  f"{inp} of size {sparse.shape[::-1]}")
      except io.DepthFileError as e:
        bad.append(str(e))
        continue
      yield name, {"sparse": sparse[..., None], "target": target[..., None], "name": name}
    if bad:
      problems.append(f"{len(bad)} unreadable KITTI files:\n  " + "\n  ".join(bad))
    if left is not None:
      left[0] -= 1
    if problems and (left is None or left[0] == 0):
      _fail(problems)
