"""KITTI / NYU depth PNG IO: exact values on the real files, round trips, and bad-file messages."""

import numpy as np
import pytest
from PIL import Image

from pncnn_jax.data import io

from conftest import DATA

KITTI = DATA / "kitti_depth_mini/train/2011_09_26_drive_0001_sync/proj_depth"
NYU = DATA / "nyu_mini/depth"


def test_read_kitti_real_is_raw_over_256():
  path = KITTI / "velodyne_raw/image_02/0000000005.png"
  raw = np.asarray(Image.open(path)).astype(np.int64)  # independent decode of the same file
  depth = io.read_kitti_depth(path)
  assert depth.shape == (375, 1242) and depth.dtype == np.float32
  np.testing.assert_array_equal(depth, raw / 256.0)
  # SOURCES.md: 4.41% sparse density on the bottom-352 / centre-1216 crop.
  assert abs((depth[-352:, 13:13 + 1216] > 0).mean() - 0.0441) < 0.0001


def test_read_nyu_real_is_millimetres():
  depth = io.read_nyu_depth(NYU / "sync_depth_00000.png")
  assert depth.shape == (480, 640)
  v = depth[depth > 0]
  # SOURCES.md: 67-75% valid, 0.7-8.3 m.
  assert 0.67 <= (depth > 0).mean() <= 0.75 and v.min() >= 0.6 and v.max() <= 8.4


@pytest.mark.parametrize("write,read,scale", [(io.write_kitti_depth, io.read_kitti_depth, 256),
                                              (io.write_nyu_depth, io.read_nyu_depth, 1000)])
def test_round_trip_is_exact(tmp_path, write, read, scale):
  raw = np.random.default_rng(0).integers(0, 65536, (7, 9)).astype(np.uint16)
  raw[0, 0], raw[0, 1] = 0, 65535
  metres = raw.astype(np.float64) / scale
  write(tmp_path / "d.png", metres[..., None])
  np.testing.assert_array_equal(io.read_png_uint16(tmp_path / "d.png"), raw)
  np.testing.assert_array_equal(read(tmp_path / "d.png"), (raw / scale).astype(np.float32))


def test_not_16_bit(tmp_path):
  p = tmp_path / "eight.png"
  Image.fromarray(np.zeros((4, 4), np.uint8)).save(p)
  with pytest.raises(io.DepthFileError, match=r"eight\.png.*16-bit.*'L'"):
    io.read_kitti_depth(p)
  p = tmp_path / "rgb.png"
  Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(p)
  with pytest.raises(io.DepthFileError, match=r"rgb\.png.*16-bit"):
    io.read_kitti_depth(p)


def test_truncated_and_corrupt(tmp_path):
  data = (KITTI / "groundtruth/image_02/0000000005.png").read_bytes()
  p = tmp_path / "cut.png"
  p.write_bytes(data[: len(data) // 2])
  with pytest.raises(io.DepthFileError, match=r"cut\.png: truncated or corrupt"):
    io.read_kitti_depth(p)
  p = tmp_path / "junk.png"
  p.write_bytes(b"not a png at all")
  with pytest.raises(io.DepthFileError, match=r"junk\.png"):
    io.read_kitti_depth(p)
  with pytest.raises(io.DepthFileError, match=r"missing\.png: depth file does not exist"):
    io.read_kitti_depth(tmp_path / "missing.png")


def test_wrong_size_for_pair():
  with pytest.raises(io.DepthFileError, match=r"0000000005\.png: size 1242x375.*1241x376"):
    io.read_kitti_depth(KITTI / "groundtruth/image_02/0000000005.png", expected_shape=(376, 1241))


@pytest.mark.parametrize("bad,msg", [(-1.0, "negative"), (np.nan, "non-finite"), (np.inf, "non-finite"),
                                     (300.0, "exceeds")])
def test_bad_arrays_are_refused(tmp_path, bad, msg):
  d = np.ones((3, 3), np.float32)
  d[1, 1] = bad
  with pytest.raises(ValueError, match=rf"depth_m for .*out\.png.*{msg}"):
    io.write_kitti_depth(tmp_path / "out.png", d)
  assert not (tmp_path / "out.png").exists()


def test_bad_shape_is_refused(tmp_path):
  with pytest.raises(ValueError, match=r"depth_m for .*x\.png.*shape \(2, 3, 4\)"):
    io.write_nyu_depth(tmp_path / "x.png", np.zeros((2, 3, 4)))
