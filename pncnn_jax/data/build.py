r"""Building the KITTI / NYU TFDS datasets once, and checking that a data_dir holds them before anything reads it.

  python -m pncnn_jax.data.build kitti_depth --manual_dir KITTI_ROOT --data_dir DATA_DIR
  python -m pncnn_jax.data.build nyu_depth --manual_dir NYU_ROOT --data_dir DATA_DIR

KITTI_ROOT holds the three unzipped KITTI depth-completion zips, NYU_ROOT the extracted sparse-to-dense
nyudepthv2 folder (docs/DATA.md). The splits whose folders are present are built, into
DATA_DIR/<dataset>/<version>/ (ArrayRecord, no TensorFlow).

`check_prepared(dataset, data_dir, split)` looks at the files only: given a data_dir where the dataset is not built
(or lacks the split), TFDS itself would start "downloading and preparing" it there, creating folders, and fail
with a long traceback; the check instead raises `DatasetNotFoundError`, one line naming what is missing, where it
looked and the build command. train.py and eval.py print it and exit with status 2.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

from pncnn_jax.runtime import cli

DATASETS = ("kitti_depth", "nyu_depth")
ROOT_NAMES = {"kitti_depth": "KITTI_ROOT", "nyu_depth": "NYU_ROOT"}
# The manual_dir folder each split is built from (what to add before rebuilding when a split is missing).
SPLIT_SOURCES = {
    "kitti_depth": {"train": "train/", "val": "val/", "selval": "depth_selection/val_selection_cropped/",
                    "test": "depth_selection/test_depth_completion_anonymous/"},
    "nyu_depth": {"train": "train/", "val": "val/"},
}


class DatasetNotFoundError(FileNotFoundError):
  """A KITTI / NYU dataset that is not built in its data_dir (or lacks a split)."""


def build_command(dataset: str, data_dir: str | os.PathLike | None) -> str:
  return (f"python -m pncnn_jax.data.build {dataset} --manual_dir {ROOT_NAMES[dataset]} "
          f"--data_dir {data_dir or 'DATA_DIR'}")


def _version(dataset: str) -> str:
  if dataset == "kitti_depth":
    from pncnn_jax.data import kitti_depth  # pylint: disable=g-import-not-at-top  (imports tfds)
    return str(kitti_depth.KittiDepth.VERSION)
  from pncnn_jax.data import nyu_depth  # pylint: disable=g-import-not-at-top
  return str(nyu_depth.NyuDepth.VERSION)


def check_prepared(dataset: str, data_dir: str | os.PathLike | None, split: str) -> pathlib.Path:
  """Returns the folder of the built `dataset` in `data_dir` if it has `split`; raises DatasetNotFoundError
  (what is missing, where it looked, the command that builds it; see docs/DATA.md) otherwise. Creates nothing."""
  if dataset not in DATASETS:
    raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")
  how = f"build it once (docs/DATA.md): {build_command(dataset, data_dir)}"
  if not data_dir:
    raise DatasetNotFoundError(f"{dataset} needs data_dir (config.data.data_dir), the folder it was built in; {how}")
  folder = pathlib.Path(data_dir) / dataset / _version(dataset)
  info = folder / "dataset_info.json"
  if not info.is_file():
    where = ("does not exist" if not pathlib.Path(data_dir).exists() else
             f"holds no built {dataset} (looked for {info})")
    raise DatasetNotFoundError(f"data_dir {data_dir} {where}; {how}")
  try:
    splits = [s["name"] for s in json.loads(info.read_text()).get("splits", [])]
  except (OSError, ValueError, TypeError, KeyError) as e:
    raise DatasetNotFoundError(f"{info}: unreadable ({type(e).__name__}: {e}); remove {folder} and {how}") from e
  if split not in splits:
    source = SPLIT_SOURCES[dataset].get(split, f"{split}/")
    raise DatasetNotFoundError(
        f"data_dir {data_dir}: the built {dataset} has no split {split!r} (it has {', '.join(splits) or 'none'}; "
        f"{info}); put {source} into {ROOT_NAMES[dataset]}, remove {folder} and rebuild (docs/DATA.md): "
        f"{build_command(dataset, data_dir)}")
  return folder


def build(dataset: str, manual_dir: str | os.PathLike, data_dir: str | os.PathLike) -> pathlib.Path:
  """Builds `dataset` from `manual_dir` into `data_dir` (the splits whose folders are present); returns its
  folder. A dataset already built there is reused as it is."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  from pncnn_jax.data import kitti_depth, nyu_depth  # pylint: disable=g-import-not-at-top
  cls = {"kitti_depth": kitti_depth.KittiDepth, "nyu_depth": nyu_depth.NyuDepth}[dataset]
  builder = cls(data_dir=os.fspath(data_dir))
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=os.fspath(manual_dir)))
  return pathlib.Path(builder.data_dir)


def main(argv: list[str] | None = None) -> int:
  parser = cli.ArgumentParser(prog="python -m pncnn_jax.data.build", description=__doc__.splitlines()[0])
  parser.add_argument("dataset", choices=DATASETS)
  parser.add_argument("--manual_dir", required=True, help="the unzipped KITTI / extracted NYU folder (docs/DATA.md)")
  parser.add_argument("--data_dir", required=True, help="where to build (config.data.data_dir of training)")
  args = parser.parse_args(argv)
  if not pathlib.Path(args.manual_dir).is_dir():
    print(f"error: --manual_dir {args.manual_dir} is not a folder (see docs/DATA.md for what it holds)",
          file=sys.stderr)
    return 2
  from pncnn_jax.data import kitti_depth, nyu_depth  # pylint: disable=g-import-not-at-top
  try:
    folder = build(args.dataset, args.manual_dir, args.data_dir)
  except (kitti_depth.KittiDepthBuildError, nyu_depth.NyuDepthBuildError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"built {args.dataset} in {folder}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
