"""`pncnn-scans-to-bag` (`pncnn_jax.inference.scans_to_bag`): KITTI scans and their calibration become a bag whose
points are the .bin's float32 values and whose CameraInfo is the calibration's P; the bag completion command reads
it and completes the very sparse map of the KITTI route; bad input is one line and writes nothing; the output is
atomic (a temporary folder renamed into place; SIGTERM and SIGKILL leave nothing under its name)."""

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import yaml

pytest.importorskip("rosbags")

from pncnn_jax.data import points  # noqa: E402
from pncnn_jax.inference import completer as completer_lib  # noqa: E402
from pncnn_jax.inference import rosbag, scans_to_bag  # noqa: E402

from conftest import DATA, REPO, stop_after_writes  # noqa: E402

RAW = DATA / "kitti_raw_mini" / "2011_09_26"
SCAN = RAW / "2011_09_26_drive_0001_sync" / "velodyne_points" / "data" / "0000000005.bin"
SMALL = "synthetic:ncnn"  # an NCNN: a few hundred weights, quick to compile at the full frame

pytestmark = pytest.mark.xdist_group("rosbag")


def _kitti_rows(path):
  """'key: numbers' rows of a KITTI calibration file, parsed here on their own."""
  rows = {}
  for line in path.read_text().splitlines():
    key, _, value = line.partition(":")
    try:
      rows[key] = np.array([float(v) for v in value.split()])
    except ValueError:
      pass
  return rows


def _read(bag):
  Reader, _, ts = rosbag._rosbags()  # pylint: disable=protected-access
  out = {}
  with Reader(bag) as r:
    for conn, t, raw in r.messages():
      out.setdefault(conn.topic, []).append((t, ts.deserialize_cdr(raw, conn.msgtype)))
  return out


def _drive(tmp_path, scans, timestamps=None):
  """A KITTI drive folder: <drive>/velodyne_points/data/<scans> and, when given, velodyne_points/timestamps.txt."""
  data = tmp_path / "drive_sync" / "velodyne_points" / "data"
  data.mkdir(parents=True)
  for name, records in scans.items():
    np.asarray(records, "<f4").tofile(data / name)
  if timestamps is not None:
    (data.parent / "timestamps.txt").write_text("".join(f"{t}\n" for t in timestamps))
  return data


def _calib(tmp_path, width=40, height=24):
  """A small KITTI calibration folder: a 24x40 camera 02 with a stereo baseline, the LiDAR 8 cm above."""
  d = tmp_path / "calib"
  d.mkdir()
  (d / "calib_cam_to_cam.txt").write_text(
      "calib_time: 09-Jan-2012 13:57:47\n"
      f"S_rect_02: {width:e} {height:e}\nR_rect_00: 1 0 0 0 1 0 0 0 1\n"
      f"P_rect_02: 30 0 {width / 2 - 0.5} 1.5 0 30 {height / 2 - 0.5} 0 0 0 1 0\n")
  (d / "calib_velo_to_cam.txt").write_text("calib_time: x\nR: 0 -1 0 0 0 -1 1 0 0\nT: 0 -0.08 0\n")
  return d


def _scan(seed, n=300):
  rng = np.random.default_rng(seed)
  fwd = rng.uniform(3.0, 30.0, n)  # x forward, y left, z up: in the camera's field of view
  return np.stack([fwd, rng.uniform(-0.5, 0.5, n) * fwd, rng.uniform(-0.3, 0.3, n) * fwd, rng.random(n)], 1)


def test_a_real_scan_round_trips_and_the_bag_command_completes_it(tmp_path, shared_dir, capsys):
  """KITTI raw frame 5 of drive 0001: the bag's points are the .bin's float32 records, its CameraInfo carries
  P_rect_02 and S_rect_02, the stamp comes from the KITTI timestamps file, and lidar_to_camera.yaml is R_rect_00
  Tr_velo_to_cam. pncnn-rosbag then completes exactly the sparse map of `predict --points` (the KITTI route)."""
  del shared_dir
  data = _drive(tmp_path, {}, timestamps=[f"2011-09-26 13:02:25.{i:09d}" for i in range(5)] +
                ["2011-09-26 13:02:26.500000123", "2011-09-26 13:02:26.6"])
  os.symlink(SCAN, data / SCAN.name)
  out = tmp_path / "kitti_bag"
  assert scans_to_bag.main(["--scans", str(data), "--calib", str(RAW), "--output", str(out)]) == 0
  stdout = capsys.readouterr().out
  assert stdout.splitlines()[0] == (
      f"wrote {out}: 1 scan(s), 121948 points, on /kitti/velo/pointcloud (PointCloud2, frame velo_link) and camera "
      f"02's CameraInfo (375x1242, P = P_rect_02) on /kitti/camera_color_left/camera_info (frame camera_color_left); "
      f"stamps from {data.parent / 'timestamps.txt'}; LiDAR -> camera in {out / 'lidar_to_camera.yaml'}"), stdout
  assert sorted(p.name for p in out.iterdir()) == ["kitti_bag.db3", "lidar_to_camera.yaml", "metadata.yaml",
                                                   "pncnn_writer.json"]
  assert not list(tmp_path.glob(".kitti_bag*"))  # no temporary folder left
  got = _read(out)
  assert sorted(got) == ["/kitti/camera_color_left/camera_info", "/kitti/velo/pointcloud"]
  (t, cloud), = got["/kitti/velo/pointcloud"]
  (t_info, info), = got["/kitti/camera_color_left/camera_info"]
  stamp = 1317042146 * 10**9 + 500000123  # 2011-09-26 13:02:26.500000123 UTC, the file's line 6 (frame 5)
  assert t == t_info == stamp and (cloud.header.stamp.sec, cloud.header.stamp.nanosec) == (1317042146, 500000123)
  assert cloud.header.frame_id == "velo_link" and info.header == info.header.__class__(
      stamp=cloud.header.stamp, frame_id="camera_color_left")
  assert [(f.name, f.offset, f.datatype, f.count) for f in cloud.fields] == [
      ("x", 0, 7, 1), ("y", 4, 7, 1), ("z", 8, 7, 1), ("intensity", 12, 7, 1)]
  assert (cloud.height, cloud.width, cloud.point_step, cloud.row_step, cloud.is_bigendian) == (
      1, 121948, 16, 16 * 121948, False)
  np.testing.assert_array_equal(np.asarray(cloud.data, np.uint8).view("<f4").reshape(-1, 4),
                                np.fromfile(SCAN, "<f4").reshape(-1, 4))  # the .bin's float32 values, bit for bit
  c2c, v2c = _kitti_rows(RAW / "calib_cam_to_cam.txt"), _kitti_rows(RAW / "calib_velo_to_cam.txt")
  np.testing.assert_array_equal(info.p, c2c["P_rect_02"])
  np.testing.assert_array_equal(info.k, c2c["P_rect_02"].reshape(3, 4)[:, :3].ravel())
  assert (info.width, info.height) == tuple(c2c["S_rect_02"].astype(int)) == (1242, 375)
  np.testing.assert_array_equal(info.r, np.eye(3).ravel())
  assert not np.asarray(info.d).any() and info.distortion_model == "plumb_bob"
  r_rect, velo = np.eye(4), np.eye(4)
  r_rect[:3, :3] = c2c["R_rect_00"].reshape(3, 3)
  velo[:3, :3], velo[:3, 3] = v2c["R"].reshape(3, 3), v2c["T"]
  T = np.asarray(yaml.safe_load((out / "lidar_to_camera.yaml").read_text())["T_cam_from_lidar"])
  np.testing.assert_array_equal(T, r_rect @ velo)
  with pytest.raises(ValueError, match="no K"):  # not a calibration for predict --calib: its T lacks the baseline
    points.read_calibration(out / "lidar_to_camera.yaml")
  # The bag command reads it with the printed flags and completes the KITTI route's sparse map.
  completed = tmp_path / "completed"
  completer = completer_lib.Completer.from_pretrained(SMALL)
  summary = rosbag.complete_bag(out, completed, completer, points_topic="/kitti/velo/pointcloud",
                                camera_info_topic="/kitti/camera_color_left/camera_info",
                                calib=out / "lidar_to_camera.yaml", progress=False, log=lambda _: None)
  assert summary["frames"] == 1 and summary["density_outside"] == 0
  sparse = points.sparse_depth_from_files(SCAN, RAW, camera="02")
  assert (sparse > 0).sum() == 19137  # docs/deploy/sensors.md's count
  depth = _read(completed)["/pncnn/depth"][0][1]
  assert (depth.height, depth.width, depth.header.stamp) == (375, 1242, cloud.header.stamp)
  np.testing.assert_array_equal(np.asarray(depth.data, np.uint8).view("<f4").reshape(375, 1242),
                                completer(sparse).depth)


def test_fixed_rate_camera_03_and_topics(tmp_path, capsys):
  """Without a timestamps file: frame N at N / rate s (the names' frame numbers); names that are not numbers:
  their order. Camera 03 gets its own frame and topic; --points_topic and --camera_info_topic rename them."""
  data = _drive(tmp_path, {"0000000003.bin": _scan(0), "0000000007.bin": _scan(1)})
  calib = _calib(tmp_path)
  (calib / "calib_cam_to_cam.txt").write_text((calib / "calib_cam_to_cam.txt").read_text().replace("_02", "_03"))
  out = tmp_path / "bag"
  summary = scans_to_bag.convert(data, calib, out, camera="03", rate_hz=4.0, log=lambda _: None)
  assert summary["stamps_ns"] == [750_000_000, 1_750_000_000] and summary["points"] == 600
  got = _read(out)
  assert [t for t, _ in got["/kitti/velo/pointcloud"]] == summary["stamps_ns"]
  assert {m.header.frame_id for _, m in got["/kitti/camera_color_right/camera_info"]} == {"camera_color_right"}
  named = _drive(tmp_path / "n", {"a.bin": _scan(2), "b.bin": _scan(3), "c.bin": _scan(4)})
  summary = scans_to_bag.convert(named, _calib(tmp_path / "n"), tmp_path / "bag2", timestamps="none",
                                 points_topic="/lidar/points", info_topic="/cam/info", log=print)
  assert summary["stamps_ns"] == [0, 100_000_000, 200_000_000]
  assert "stamps at 10 Hz from the scans' order (--timestamps none)" in capsys.readouterr().out
  assert sorted(_read(tmp_path / "bag2")) == ["/cam/info", "/lidar/points"]


def _refused(capsys, args):
  rc = scans_to_bag.main(args)
  err = capsys.readouterr().err
  assert rc == 2 and err.count("\n") == 1 and err.startswith("error: "), (rc, err)
  return err.strip()


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
  data = _drive(tmp_path, {"0000000000.bin": _scan(0), "0000000001.bin": _scan(1)})
  calib = _calib(tmp_path)
  out = tmp_path / "out"
  base = ["--scans", str(data), "--calib", str(calib), "--output", str(out)]
  no_velo = tmp_path / "no_velo"
  no_velo.mkdir()
  (no_velo / "calib_cam_to_cam.txt").write_text((calib / "calib_cam_to_cam.txt").read_text())
  assert _refused(capsys, base[:2] + ["--calib", str(no_velo), "--output", str(out)]) == (
      f"error: calibration {no_velo / 'calib_velo_to_cam.txt'}: no such file (a KITTI calibration needs "
      "calib_cam_to_cam.txt and calib_velo_to_cam.txt in one folder)")
  assert _refused(capsys, base[:2] + ["--calib", str(tmp_path / "none"), "--output", str(out)]).startswith(
      f"error: --calib {tmp_path / 'none'}: no such file or folder")
  assert _refused(capsys, base + ["--camera", "01"]) == (
      "error: --camera '01': KITTI raw has the colour cameras 02, 03")
  odd = tmp_path / "odd"
  odd.mkdir()
  (odd / "0000000000.bin").write_bytes(np.zeros(4 * 4 * 10 + 4, np.uint8).tobytes())  # 164 bytes
  assert _refused(capsys, ["--scans", str(odd), "--calib", str(calib), "--output", str(out)]) == (
      f"error: --scans {odd / '0000000000.bin'}: 164 bytes is not a multiple of 16 (a KITTI scan is float32 x, y, "
      "z, reflectance records of 16 bytes); a truncated or foreign file")
  empty = tmp_path / "empty"
  empty.mkdir()
  assert _refused(capsys, ["--scans", str(empty), "--calib", str(calib), "--output", str(out)]) == (
      f"error: --scans {empty}: no .bin scans in this folder")
  mm = _drive(tmp_path / "mm", {"0000000000.bin": _scan(0) * [1000, 1000, 1000, 1]})
  assert "looks like millimetres" in _refused(capsys, ["--scans", str(mm), "--calib", str(calib), "--output",
                                                       str(out)])
  (data.parent / "timestamps.txt").write_text("2011-09-26 13:02:25.1\n")
  assert _refused(capsys, base) == (f"error: --timestamps {data.parent / 'timestamps.txt'}: 1 lines, but the scans go "
                                    "up to frame 1 (0000000001.bin)")
  (data.parent / "timestamps.txt").write_text("2011-09-26 13:02:25.1\n2011-02-30 13:02:25.2\n")
  assert _refused(capsys, base) == (f"error: --timestamps {data.parent / 'timestamps.txt'} line 2: "
                                    "'2011-02-30 13:02:25.2' is not a valid date and time")
  assert _refused(capsys, base + ["--timestamps", "none", "--rate", "0"]) == (
      "error: --rate 0: must be a frequency > 0 in Hz")
  assert _refused(capsys, base[:4] + ["--output", str(tmp_path / "no" / "bag"), "--timestamps", "none"]) == (
      f"error: --output {tmp_path / 'no' / 'bag'}: its folder {tmp_path / 'no'} does not exist")
  assert _refused(capsys, ["--scans", "", "--calib", str(calib), "--output", str(out)]) == (
      "error: --scans is empty (an unset shell variable?); name the folder or file")
  assert sorted(p.name for p in tmp_path.iterdir()) == ["calib", "drive_sync", "empty", "mm", "no_velo", "odd"]


def test_an_existing_output_is_replaced_only_with_overwrite_and_only_if_ours(tmp_path, capsys):
  data = _drive(tmp_path, {"0000000000.bin": _scan(0)})
  calib, out = _calib(tmp_path), tmp_path / "out"
  args = ["--scans", str(data), "--calib", str(calib), "--output", str(out), "--timestamps", "none"]
  assert scans_to_bag.main(args) == 0
  capsys.readouterr()
  assert _refused(capsys, args) == (f"error: --output {out} already exists (a bag this command wrote from {data}); "
                                    "pass --overwrite to replace it, or name a new bag directory")
  assert scans_to_bag.main(args + ["--points_topic", "/lidar/points", "--overwrite"]) == 0
  capsys.readouterr()
  assert sorted(_read(out)) == ["/kitti/camera_color_left/camera_info", "/lidar/points"]  # the new bag
  assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
  mine = tmp_path / "mine"
  mine.mkdir()
  (mine / "notes.txt").write_text("x")
  assert _refused(capsys, args[:4] + ["--output", str(mine), "--overwrite"]) == (
      f"error: --output {mine} already exists and is not a bag this command wrote (no pncnn_writer.json of "
      "pncnn-scans-to-bag in it); name a new bag directory (it is never replaced)")
  assert (mine / "notes.txt").read_text() == "x" and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
  completed = tmp_path / "completed_bag"  # a bag the completion command wrote is not ours either
  completed.mkdir()
  (completed / "pncnn_writer.json").write_text('{"command": "rosbag"}')
  assert "is not a bag this command wrote" in _refused(capsys, args[:4] + ["--output", str(completed),
                                                                          "--overwrite"])


# the first scan's camera info and cloud are in the .db3 when it stops
STOP_AFTER_FIRST_SCAN = stop_after_writes("pncnn_jax.inference.scans_to_bag", "pncnn-scans-to-bag", 2)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_conversion_leaves_nothing_under_the_bags_name(tmp_path, sig):
  """SIGTERM removes the temporary folder and says so in one line (exit 143); SIGKILL (no handler runs) leaves
  it beside, hidden, and the next run removes it and writes the bag."""
  data = _drive(tmp_path, {f"{i:010d}.bin": _scan(i) for i in range(3)})
  calib, out = _calib(tmp_path), tmp_path / "out"
  p = subprocess.Popen([sys.executable, "-c", STOP_AFTER_FIRST_SCAN, "--scans", str(data), "--calib", str(calib),
                        "--output", str(out)], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    for line in p.stdout:
      if line.strip() == "WRITING":
        break
    else:
      pytest.fail(f"the conversion ended before writing: {p.wait()} {p.stderr.read()[-3000:]}")
    tmp = tmp_path / f".out{scans_to_bag.TMP_MARK}{p.pid}"
    assert (tmp / "out" / "out.db3").is_file() and not out.exists()
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
  finally:
    p.kill()
  assert not out.exists()
  if sig == signal.SIGTERM:
    assert p.returncode == 143 and err.strip() == f"error: terminated (SIGTERM); {out} was not written", err
    assert not tmp.exists()
    return
  assert tmp.is_dir()  # SIGKILL: nothing ran; the next run cleans up
  assert scans_to_bag.main(["--scans", str(data), "--calib", str(calib), "--output", str(out)]) == 0
  assert not tmp.exists() and len(_read(out)["/kitti/velo/pointcloud"]) == 3
