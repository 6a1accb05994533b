"""`nyu_depth`: NYU-Depth-v2 in the sparse-to-dense h5 layout as a TFDS dataset (ArrayRecord, no TF).

Layout of the manual_dir (docs/SPEC.md §10.4; Ma & Karaman's nyudepthv2.tar.gz):
  <manual_dir>/{train,val}/<scene folder>/<NNNNN>.h5, each with
    rgb   uint8 (3, 480, 640)
    depth float (480, 640), metres
The sparse input is not stored: the pipeline draws it with `sparsify.uniform_sparsify`
(about N = 1000 samples, seeded), as the paper does on every load.
"""

from __future__ import annotations

import pathlib

import numpy as np
import tensorflow_datasets as tfds

_MANUAL = """\
Download nyudepthv2.tar.gz of sparse-to-dense (Ma & Karaman, http://datasets.lids.mit.edu/sparse-to-dense/data/)
and extract it; pass the folder holding train/ and val/ as manual_dir:
  <manual_dir>/train/<scene>/<NNNNN>.h5   (rgb uint8 3x480x640, depth float32 480x640 metres)
  <manual_dir>/val/official/<NNNNN>.h5
"""


class NyuDepthBuildError(ValueError):
  """Missing or unreadable h5 files."""


def read_h5(path) -> tuple[np.ndarray, np.ndarray]:
  """Reads one sparse-to-dense h5: (rgb (H, W, 3) uint8, depth (H, W) float32 metres)."""
  import h5py  # pylint: disable=g-import-not-at-top
  try:
    with h5py.File(path, "r") as f:
      rgb, depth = np.asarray(f["rgb"]), np.asarray(f["depth"])
  except (OSError, KeyError) as e:
    raise NyuDepthBuildError(f"{path}: unreadable NYU h5 (needs datasets 'rgb' and 'depth'): {e}") from e
  if rgb.ndim != 3 or rgb.shape[0] != 3 or depth.shape != rgb.shape[1:]:
    raise NyuDepthBuildError(f"{path}: expected rgb (3, H, W) and depth (H, W), got {rgb.shape}, {depth.shape}")
  depth = depth.astype(np.float32)
  if not np.all(np.isfinite(depth)) or np.any(depth < 0):
    raise NyuDepthBuildError(f"{path}: depth has negative or non-finite values")
  return np.transpose(rgb, (1, 2, 0)).astype(np.uint8), depth


class NyuDepth(tfds.core.GeneratorBasedBuilder):
  """NYU-Depth-v2 (sparse-to-dense h5): RGB and float32 depth in metres."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = _MANUAL

  def __init__(self, **kwargs):
    # ArrayRecord is the TFDS format that is written and read without TensorFlow (the default,
    # tfrecord, imports TF when a split is finalised).
    kwargs.setdefault("file_format", "array_record")
    super().__init__(**kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description="NYU-Depth-v2 (Silberman et al., ECCV 2012) in the sparse-to-dense h5 layout; "
                    "depth float32 metres, 0 = missing.",
        features=tfds.features.FeaturesDict({
            "rgb": tfds.features.Tensor(shape=(None, None, 3), dtype=np.uint8, encoding="zlib"),
            "depth": tfds.features.Tensor(shape=(None, None, 1), dtype=np.float32, encoding="zlib"),
            "name": tfds.features.Text(),
        }),
        homepage="https://cs.nyu.edu/~fergus/datasets/nyu_depth_v2.html",
    )

  def _split_generators(self, dl_manager):
    root = pathlib.Path(dl_manager.manual_dir)
    splits = {s: sorted((root / s).glob("*/*.h5")) for s in ("train", "val") if (root / s).is_dir()}
    splits = {s: f for s, f in splits.items() if f}
    if not splits:
      raise NyuDepthBuildError(f"{root}: no <split>/<folder>/*.h5 files found.\n{_MANUAL}")
    return {s: self._generate_examples(root / s, files) for s, files in splits.items()}

  def _generate_examples(self, split_dir, files):
    bad = []
    for path in files:
      name = f"{path.parent.name}/{path.stem}"
      try:
        rgb, depth = read_h5(path)
      except NyuDepthBuildError as e:
        bad.append(str(e))
        continue
      yield name, {"rgb": rgb, "depth": depth[..., None], "name": name}
    if bad:
      raise NyuDepthBuildError(f"{len(bad)} unreadable NYU files in {split_dir}:\n  " + "\n  ".join(bad))
