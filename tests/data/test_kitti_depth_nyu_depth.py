"""TFDS builders (kitti_depth, nyu_depth) built from real files, read back exactly, without TF."""

import shutil
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from pncnn_jax.data import io, kitti_depth, make_iterator, nyu_depth

from conftest import DATA

KITTI_MINI = DATA / "kitti_depth_mini"
DRIVE = "2011_09_26_drive_0001_sync"


def _build(builder_cls, data_dir, manual_dir):
  b = builder_cls(data_dir=str(data_dir))
  b.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir)))
  return b


def test_no_tensorflow_installed():
  import importlib.util
  assert importlib.util.find_spec("tensorflow") is None
  assert "tensorflow" not in sys.modules


def _kitti_with_selection(tmp_path):
  """The real mini tree plus selection / test sets written from the same real frames."""
  root = tmp_path / "kitti"
  shutil.copytree(KITTI_MINI, root)
  sel = root / "depth_selection/val_selection_cropped"
  test = root / "depth_selection/test_depth_completion_anonymous/velodyne_raw"
  for cam in ("image_02", "image_03"):
    src = KITTI_MINI / "train" / DRIVE / "proj_depth"
    for kind, sel_kind in (("velodyne_raw", "velodyne_raw"), ("groundtruth", "groundtruth_depth")):
      raw = io.read_png_uint16(src / kind / cam / "0000000005.png")[-352:, 13:13 + 1216]
      io.write_png_uint16(sel / sel_kind / f"{DRIVE}_{sel_kind}_0000000005_{cam}.png", raw)
  io.write_png_uint16(test / "0000000000.png",
                      io.read_png_uint16(sel / "velodyne_raw" / f"{DRIVE}_velodyne_raw_0000000005_image_02.png"))
  return root


@pytest.fixture(scope="module")
def kitti_built(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("kitti_tfds")
  root = _kitti_with_selection(tmp)
  _build(kitti_depth.KittiDepth, tmp / "data", root)
  return tmp / "data", root


def test_kitti_train_reads_back_bit_exact(kitti_built):
  data_dir, _ = kitti_built
  src = tfds.data_source("kitti_depth", split="train", data_dir=str(data_dir))
  assert len(src) == 2
  seen = set()
  for i in range(len(src)):
    ex = src[i]
    name = ex["name"].decode()
    drive, cam, frame = name.split("/")
    seen.add(name)
    base = KITTI_MINI / "train" / drive / "proj_depth"
    for key, kind in (("sparse", "velodyne_raw"), ("target", "groundtruth")):
      want = np.asarray(Image.open(base / kind / cam / f"{frame}.png"))  # independent decode
      assert ex[key].dtype == np.uint16 and ex[key].shape == (375, 1242, 1)
      np.testing.assert_array_equal(ex[key][..., 0], want)
  assert seen == {f"{DRIVE}/image_02/0000000005", f"{DRIVE}/image_03/0000000005"}


def test_kitti_selection_and_test_splits(kitti_built):
  data_dir, root = kitti_built
  sel = tfds.data_source("kitti_depth", split="selval", data_dir=str(data_dir))
  ex = {sel[i]["name"].decode(): sel[i] for i in range(len(sel))}
  name = f"{DRIVE}_velodyne_raw_0000000005_image_03"
  assert set(ex) == {name, name.replace("image_03", "image_02")}
  gt = io.read_png_uint16(root / "depth_selection/val_selection_cropped/groundtruth_depth"
                          / f"{DRIVE}_groundtruth_depth_0000000005_image_03.png")
  np.testing.assert_array_equal(ex[name]["target"][..., 0], gt)
  test = tfds.data_source("kitti_depth", split="test", data_dir=str(data_dir))
  assert len(test) == 1 and test[0]["name"] == b"0000000000" and not test[0]["target"].any()


def test_kitti_pipeline_bottom_crop_metres(kitti_built):
  data_dir, _ = kitti_built
  b = next(make_iterator(dict(dataset="kitti_depth", split="train", crop="bottom", batch_size=2,
                              data_dir=str(data_dir), num_threads=1)))
  assert b["sparse"].shape == (2, 352, 1216, 1) and b["sparse"].dtype == np.float32
  names = [str(n) for n in b["name"]]
  for i, name in enumerate(names):
    drive, cam, frame = name.split("/")
    base = KITTI_MINI / "train" / drive / "proj_depth"
    want = io.read_kitti_depth(base / "groundtruth" / cam / f"{frame}.png")[-352:, 13:13 + 1216]
    np.testing.assert_array_equal(b["target"][i, ..., 0], want)
  # SOURCES.md densities of this crop: sparse 4.41/4.42%, GT 21.2/20.0%.
  assert sorted(np.round(100 * b["valid"].mean(axis=(1, 2, 3)), 1)) == [20.0, 21.2]


def test_kitti_unpaired_files_are_listed(tmp_path):
  root = tmp_path / "kitti"
  shutil.copytree(KITTI_MINI, root)
  (root / "train" / DRIVE / "proj_depth/groundtruth/image_03/0000000005.png").unlink()
  extra = root / "train/2011_09_26_drive_0002_sync/proj_depth/groundtruth/image_02/0000000007.png"
  extra.parent.mkdir(parents=True)
  shutil.copy(root / "train" / DRIVE / "proj_depth/groundtruth/image_02/0000000005.png", extra)
  with pytest.raises(kitti_depth.KittiDepthBuildError) as e:
    _build(kitti_depth.KittiDepth, tmp_path / "data", root)
  msg = str(e.value)
  assert "2 unpaired" in msg
  assert f"no ground truth for {root}/train/{DRIVE}/proj_depth/velodyne_raw/image_03/0000000005.png" in msg
  assert f"no LiDAR input for {extra}" in msg


def test_kitti_unreadable_files_are_listed(tmp_path):
  root = tmp_path / "kitti"
  shutil.copytree(KITTI_MINI, root)
  bad = root / "train" / DRIVE / "proj_depth/velodyne_raw/image_02/0000000005.png"
  bad.write_bytes(bad.read_bytes()[:500])
  small = root / "train" / DRIVE / "proj_depth/groundtruth/image_03/0000000005.png"
  io.write_png_uint16(small, np.zeros((10, 20), np.uint16))
  with pytest.raises(kitti_depth.KittiDepthBuildError, match="2 unreadable KITTI files") as e:
    _build(kitti_depth.KittiDepth, tmp_path / "data", root)
  assert f"{bad}: truncated or corrupt" in str(e.value)
  assert f"{small}: size (20, 10)" in str(e.value)


def test_kitti_every_bad_file_is_reported_by_one_build(tmp_path):
  """Issue 13.9: the builder stopped at the first bad split, so a second run was needed to see the rest."""
  root = tmp_path / "kitti"
  shutil.copytree(KITTI_MINI, root)
  shutil.copytree(root / "train", root / "val")
  unpaired = root / "train" / DRIVE / "proj_depth/velodyne_raw/image_03/0000000005.png"
  (root / "train" / DRIVE / "proj_depth/groundtruth/image_03/0000000005.png").unlink()
  truncated = root / "val" / DRIVE / "proj_depth/groundtruth/image_02/0000000005.png"
  truncated.write_bytes(truncated.read_bytes()[:500])
  misnamed = root / "depth_selection/val_selection_cropped/velodyne_raw/frame.png"
  misnamed.parent.mkdir(parents=True)
  shutil.copy(unpaired, misnamed)
  with pytest.raises(kitti_depth.KittiDepthBuildError) as e:
    _build(kitti_depth.KittiDepth, tmp_path / "data", root)
  msg = str(e.value)
  assert msg.startswith("the KITTI folder has bad files (all of them are listed")
  assert f"no ground truth for {unpaired}" in msg
  assert f"1 file names not in KITTI's selection pattern:\n  {misnamed}" in msg
  assert f"1 unreadable KITTI files:\n  {truncated}: truncated or corrupt" in msg
  assert not list((tmp_path / "data").glob("kitti_depth/*/*.array_record*"))  # nothing half-built


def test_kitti_missing_folder_shows_instructions(tmp_path):
  with pytest.raises(kitti_depth.KittiDepthBuildError, match="data_depth_annotated.zip"):
    kitti_depth.find_examples(tmp_path / "nowhere")


def _write_nyu_h5(root):
  import h5py
  files = {}
  for split, stems in (("train", ("00000", "00050")), ("val", ("00100",))):
    for stem in stems:
      depth = io.read_nyu_depth(DATA / f"nyu_mini/depth/sync_depth_{stem}.png")
      rgb = np.asarray(Image.open(DATA / f"nyu_mini/rgb/rgb_{stem}.jpg").convert("RGB"))
      path = root / split / "scene_a" / f"{stem}.h5"
      path.parent.mkdir(parents=True, exist_ok=True)
      with h5py.File(path, "w") as f:
        f["rgb"] = np.transpose(rgb, (2, 0, 1))
        f["depth"] = depth
      files[f"scene_a/{stem}"] = (rgb, depth)
  return files


def test_nyu_builds_and_reads_back_exact(tmp_path):
  files = _write_nyu_h5(tmp_path / "nyu")
  _build(nyu_depth.NyuDepth, tmp_path / "data", tmp_path / "nyu")
  for split, n in (("train", 2), ("val", 1)):
    src = tfds.data_source("nyu_depth", split=split, data_dir=str(tmp_path / "data"))
    assert len(src) == n
    for i in range(n):
      ex = src[i]
      rgb, depth = files[ex["name"].decode()]
      assert ex["depth"].dtype == np.float32 and ex["depth"].shape == (480, 640, 1)
      np.testing.assert_array_equal(ex["depth"][..., 0], depth)
      np.testing.assert_array_equal(ex["rgb"], rgb)
  # Pipeline: full 480x640 frames (docs/SPEC.md §10.4), sparse ~ 1000 samples of the target, seeded.
  cfg = dict(dataset="nyu_depth", split="val", crop="none", batch_size=1, data_dir=str(tmp_path / "data"),
             num_threads=1, seed=3)
  b = next(make_iterator(cfg))
  s, t = b["sparse"][0, ..., 0], b["target"][0, ..., 0]
  assert b["name"][0] == "scene_a/00100" and s.shape == (480, 640)
  assert 850 < (s > 0).sum() < 1150 and np.all((s == 0) | (s == t))
  np.testing.assert_array_equal(next(make_iterator(cfg))["sparse"], b["sparse"])


def test_nyu_bad_h5_is_named(tmp_path):
  import h5py
  p = tmp_path / "nyu/train/x/bad.h5"
  p.parent.mkdir(parents=True)
  with h5py.File(p, "w") as f:
    f["rgb"] = np.zeros((3, 4, 5), np.uint8)
    f["depth"] = -np.ones((4, 5), np.float32)
  with pytest.raises(nyu_depth.NyuDepthBuildError, match=r"bad\.h5: depth has negative"):
    _build(nyu_depth.NyuDepth, tmp_path / "data", tmp_path / "nyu")


def test_build_command_and_check_prepared(tmp_path, capsys):
  """`python -m pncnn_jax.data.build` builds the splits present; check_prepared names what is missing, where it
  looked and the build command, and creates nothing (TFDS would start building in the data_dir)."""
  from pncnn_jax.data import build
  data_dir = tmp_path / "data"
  cmd = f"python -m pncnn_jax.data.build kitti_depth --manual_dir KITTI_ROOT --data_dir {data_dir}"
  with pytest.raises(build.DatasetNotFoundError) as e:
    build.check_prepared("kitti_depth", data_dir, "train")
  assert str(e.value) == f"data_dir {data_dir} does not exist; build it once (docs/DATA.md): {cmd}"
  data_dir.mkdir()
  with pytest.raises(build.DatasetNotFoundError, match=f"holds no built kitti_depth \\(looked for {data_dir}/"
                     "kitti_depth/1.0.0/dataset_info.json\\); build it once"):
    make_iterator(dict(dataset="kitti_depth", split="train", data_dir=str(data_dir), crop="none", batch_size=1))
  assert list(data_dir.iterdir()) == []
  with pytest.raises(build.DatasetNotFoundError, match="nyu_depth needs data_dir"):
    build.check_prepared("nyu_depth", None, "val")

  assert build.main(["kitti_depth", "--manual_dir", str(KITTI_MINI), "--data_dir", str(data_dir)]) == 0
  assert f"built kitti_depth in {data_dir}/kitti_depth/1.0.0" in capsys.readouterr().out
  assert build.check_prepared("kitti_depth", data_dir, "train") == data_dir / "kitti_depth" / "1.0.0"
  with pytest.raises(build.DatasetNotFoundError) as e:
    build.check_prepared("kitti_depth", data_dir, "selval")
  assert (f"the built kitti_depth has no split 'selval' (it has train; {data_dir}/kitti_depth/1.0.0/dataset_info.json);"
          f" put depth_selection/val_selection_cropped/ into KITTI_ROOT, remove {data_dir}/kitti_depth/1.0.0 and "
          f"rebuild (docs/DATA.md): {cmd}") in str(e.value)
  assert build.main(["nyu_depth", "--manual_dir", str(tmp_path / "nowhere"), "--data_dir", str(data_dir)]) == 2
  assert "--manual_dir" in capsys.readouterr().err
