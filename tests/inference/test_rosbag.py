"""`python -m pncnn_jax.inference.rosbag`: small bags of both kinds (depth images; point clouds with a camera) are
written with rosbags, completed through `main(argv)` and read back: stamps, headers, encodings, shapes, and values
equal to the Completer's on the same sparse input (NaN where not valid, with a mono8 valid mask); the input bag is
unchanged; bad input is one line."""

import hashlib
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import yaml

pytest.importorskip("rosbags")

from pncnn_jax.data import input_contract, points  # noqa: E402
from pncnn_jax.inference import completer as completer_lib  # noqa: E402
from pncnn_jax.inference import rosbag  # noqa: E402

from conftest import REPO, frame_at_density, stop_after_writes  # noqa: E402

MODEL = "synthetic:pncnn_masked"  # a pNCNN: it has a sigma
H, W = 12, 20  # pads to 16 x 24: one compiled program for every frame of both bags
K = np.array([[12.0, 0.0, 9.5], [0.0, 12.0, 5.5], [0.0, 0.0, 1.0]])
# LiDAR (x forward, y left, z up) -> camera optical frame (x right, y down, z forward), the LiDAR 0.2 m above.
T_CAM_FROM_LIDAR = np.array([[0.0, -1.0, 0.0, 0.0], [0.0, 0.0, -1.0, -0.2], [1.0, 0.0, 0.0, 0.0], [0, 0, 0, 1.0]])

# The bags' frames are denser than the models' training: the density warning is not what these tests check.
pytestmark = [pytest.mark.xdist_group("rosbag"),
              pytest.mark.filterwarnings("ignore::pncnn_jax.inference.completer.InputDensityWarning")]


@pytest.fixture(scope="module")
def completer():
  return completer_lib.Completer.from_pretrained(MODEL)


@pytest.fixture(scope="module")
def ros():
  return rosbag._rosbags()  # pylint: disable=protected-access


def _header(ts, sec, nanosec, frame):
  return ts.types["std_msgs/msg/Header"](stamp=ts.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec),
                                          frame_id=frame)


def _camera_info(ts, header, baseline_px=0.0):
  P = np.hstack([K, [[baseline_px], [0.0], [0.0]]])
  return ts.types["sensor_msgs/msg/CameraInfo"](
      header=header, height=H, width=W, distortion_model="plumb_bob", d=np.zeros(5), k=K.ravel(),
      r=np.eye(3).ravel(), p=P.ravel(), binning_x=0, binning_y=0,
      roi=ts.types["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0, do_rectify=False))


def _image(ts, header, values, encoding, bigendian=False, pad=0):
  """A depth image message; `pad` bytes of row padding (step > width * bytes per pixel)."""
  dtype = {"32FC1": "f4", "16UC1": "u2"}[encoding]
  a = np.asarray(values).astype((">" if bigendian else "<") + dtype)
  rows = np.hstack([a.view(np.uint8).reshape(H, -1), np.full((H, pad), 7, np.uint8)])
  return ts.types["sensor_msgs/msg/Image"](header=header, height=H, width=W, encoding=encoding,
                                           is_bigendian=int(bigendian), step=rows.shape[1], data=rows.ravel())


def _cloud(ts, header, xyz):
  """PointCloud2 of x, y, z float32 and an intensity, 16 bytes a point, one row."""
  Field = ts.types["sensor_msgs/msg/PointField"]
  rec = np.zeros(len(xyz), np.dtype({"names": ["x", "y", "z", "i"], "formats": ["<f4"] * 4,
                                     "offsets": [0, 4, 8, 12], "itemsize": 16}))
  rec["x"], rec["y"], rec["z"], rec["i"] = xyz[:, 0], xyz[:, 1], xyz[:, 2], 0.5
  fields = [Field(name=n, offset=4 * i, datatype=7, count=1) for i, n in enumerate(["x", "y", "z", "intensity"])]
  return ts.types["sensor_msgs/msg/PointCloud2"](header=header, height=1, width=len(xyz), fields=fields,
                                                 is_bigendian=False, point_step=16, row_step=16 * len(xyz),
                                                 data=rec.view(np.uint8).ravel(), is_dense=False)


def _write(path, ros, messages):
  """messages: [(topic, msgtype, bag time [ns], msg)]."""
  _, Writer, ts = ros
  with Writer(path, version=rosbag.BAG_VERSION) as w:
    conns = {}
    for topic, msgtype, t, msg in messages:
      if topic not in conns:
        conns[topic] = w.add_connection(topic, msgtype, typestore=ts)
      w.write(conns[topic], t, ts.serialize_cdr(msg, msgtype))


def _read(path, ros):
  """{topic: [(bag time, msg)]} of a bag."""
  Reader, _, ts = ros
  out = {}
  with Reader(path) as r:
    for conn, t, raw in r.messages():
      out.setdefault(conn.topic, []).append((t, ts.deserialize_cdr(raw, conn.msgtype)))
  return out


def _digest(folder):
  return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _pixels(msg):
  assert msg.encoding == "32FC1" and not msg.is_bigendian and msg.step == 4 * msg.width
  return np.asarray(msg.data, np.uint8).view("<f4").reshape(msg.height, msg.width)


def _mask(msg):
  assert msg.encoding == "mono8" and msg.step == msg.width
  return np.asarray(msg.data, np.uint8).reshape(msg.height, msg.width)


def _check_outputs(bag, ros, completer, expected, info_frame):
  """expected: [(bag time, input header, sparse (H, W) metres or None for an empty frame)]."""
  got = _read(bag, ros)
  assert sorted(got) == ["/pncnn/camera_info", "/pncnn/depth", "/pncnn/sigma", "/pncnn/valid"]
  for i, (t, header, sparse) in enumerate(expected):
    ref = None if sparse is None else completer(sparse)
    for topic, field in (("/pncnn/depth", "depth"), ("/pncnn/sigma", "sigma")):
      bag_time, msg = got[topic][i]
      assert bag_time == t and msg.header == header and (msg.height, msg.width) == (H, W)
      if ref is None:
        assert np.isnan(_pixels(msg)).all()
      else:
        np.testing.assert_array_equal(_pixels(msg), getattr(ref, field))  # NaN where ref's is
    bag_time, msg = got["/pncnn/valid"][i]
    assert bag_time == t and msg.header == header
    np.testing.assert_array_equal(_mask(msg), 0 if ref is None else np.where(ref.valid, 255, 0))
    bag_time, info = got["/pncnn/camera_info"][i]
    assert bag_time == t and info.header == header and info.header.frame_id == info_frame
    np.testing.assert_array_equal(info.k, K.ravel())
  assert all(len(v) == len(expected) for v in got.values())


def test_depth_image_bag(tmp_path, ros, completer, capsys):
  """32FC1 (little-endian, NaN and +Inf as no measurement), 16UC1 millimetres (big-endian, padded rows) and an empty
  frame; the camera info is found as the image topic's sibling."""
  ts = ros[2]
  rng = np.random.default_rng(0)
  metres = np.where(rng.random((2, H, W)) < 0.3, rng.uniform(2.0, 40.0, (2, H, W)), 0.0)
  f32 = metres[0].astype(np.float32)
  f32[0, 0], f32[0, 1] = np.nan, np.inf
  mm = np.round(metres[1] * 1000).astype(np.uint16)
  headers = [_header(ts, 100 + i, 250_000_000 * i, "camera_optical") for i in range(3)]
  times = [5_000_000_000 + i * 100_000_000 for i in range(3)]
  inp = tmp_path / "in"
  _write(inp, ros, [
      ("/camera/depth/camera_info", rosbag.CAMERA_INFO, times[0] - 1, _camera_info(ts, headers[0])),
      ("/camera/depth/image", rosbag.IMAGE, times[0], _image(ts, headers[0], f32, "32FC1")),
      ("/camera/depth/image", rosbag.IMAGE, times[1], _image(ts, headers[1], mm, "16UC1", bigendian=True, pad=6)),
      ("/camera/depth/image", rosbag.IMAGE, times[2], _image(ts, headers[2], np.zeros((H, W)), "32FC1")),
  ])
  before = _digest(inp)
  out = tmp_path / "out"
  assert rosbag.main(["--input", str(inp), "--output", str(out), "--checkpoint", MODEL,
                      "--depth_topic", "/camera/depth/image"]) == 0
  stdout = capsys.readouterr().out
  assert "3 frames on /camera/depth/image (Image) with camera info /camera/depth/camera_info" in stdout
  assert "note: 1 frame(s) without any measurement written as NaN (messages [2])" in stdout
  assert _digest(inp) == before
  sparse0 = np.where(np.isfinite(f32), f32, 0).astype(np.float32)
  sparse1 = (mm.astype(np.float64) * 1e-3).astype(np.float32)
  _check_outputs(out, ros, completer, [(times[0], headers[0], sparse0), (times[1], headers[1], sparse1),
                                       (times[2], headers[2], None)], "camera_optical")


def test_pointcloud_bag_with_camera_info_and_calibration(tmp_path, ros, completer, capsys):
  """Two LiDAR clouds (in frame 'lidar', with a NaN point) projected into the camera of the CameraInfo through the
  --calib transform: the same sparse map as `points.project_points`, completed as the Completer does."""
  ts = ros[2]
  rng = np.random.default_rng(1)
  clouds = []
  for _ in range(2):
    fwd = rng.uniform(3.0, 30.0, 400)  # x forward, y left, z up, inside the camera's field of view
    xyz = np.stack([fwd, rng.uniform(-0.7, 0.7, 400) * fwd, rng.uniform(-0.4, 0.6, 400) * fwd], 1)
    clouds.append(np.vstack([xyz, [[np.nan, 0.0, 0.0], [-5.0, 0.0, 0.0]]]).astype(np.float32))  # NaN, behind
  headers = [_header(ts, 7, 100 + i, "lidar") for i in range(2)]
  infos = [_header(ts, 6, 0, "camera_optical"), _header(ts, 7, 101, "camera_optical")]
  times = [1_000 + 10 * i for i in range(2)]
  inp = tmp_path / "in"
  _write(inp, ros, [
      ("/camera/camera_info", rosbag.CAMERA_INFO, 1, _camera_info(ts, infos[0])),
      ("/lidar/points", rosbag.POINTCLOUD2, times[0], _cloud(ts, headers[0], clouds[0])),
      ("/camera/camera_info", rosbag.CAMERA_INFO, times[1] - 1, _camera_info(ts, infos[1], baseline_px=-6.0)),
      ("/lidar/points", rosbag.POINTCLOUD2, times[1], _cloud(ts, headers[1], clouds[1])),
  ])
  calib = tmp_path / "lidar_to_camera.yaml"
  calib.write_text(yaml.safe_dump({"T_cam_from_lidar": T_CAM_FROM_LIDAR.tolist()}))
  before = _digest(inp)
  out = tmp_path / "out"
  assert rosbag.main(["--input", str(inp), "--output", str(out), "--checkpoint", MODEL, "--progress", "on",
                      "--points_topic", "/lidar/points", "--camera_info_topic", "/camera/camera_info",
                      "--calib", str(calib)]) == 0
  captured = capsys.readouterr()
  assert "wrote " + str(out) + ": 2 frames" in captured.out
  assert "\r" in captured.err and "2/2" in captured.err  # --progress on: the bar, although stderr is no terminal
  assert _digest(inp) == before
  expected = []
  for i, baseline_px in enumerate([0.0, -6.0]):  # cloud 1 takes the second CameraInfo (stamped at or before it)
    T = np.eye(4)
    T[0, 3] = baseline_px / K[0, 0]  # P's 4th column (fx * b, 0, 0) as a translation
    sparse = points.project_points(clouds[i], K, T @ T_CAM_FROM_LIDAR, (H, W))
    assert 50 < (sparse > 0).sum() < H * W
    header = _header(ts, 7, 100 + i, "camera_optical")  # the cloud's stamp, the camera's frame
    expected.append((times[i], header, sparse))
  _check_outputs(out, ros, completer, expected, "camera_optical")


def test_pixels_without_support_are_nan_in_32fc1(tmp_path, ros, capsys):
  """Issue 50: in a 32FC1 image 0.0 (or the network's extrapolation) is a valid depth to depth_image_proc, so every
  pixel without input support became a point. REP 118 says invalid is NaN: the depth and sigma are NaN where the
  Completer's `valid` is False (here the rows more than 8 px above a band of measurements), and /pncnn/valid
  (mono8) marks them; --fill_unsupported writes the network's values there (clamped at 0), still marked."""
  ts = ros[2]
  rng = np.random.default_rng(2)
  band = np.zeros((H, W), np.float32)
  band[-2:] = np.where(rng.random((2, W)) < 0.5, rng.uniform(2.0, 40.0, (2, W)), 0.0)
  band[-1, 0] = 5.0
  header = _header(ts, 3, 0, "camera_optical")
  inp = tmp_path / "in"
  _write(inp, ros, [("/camera/depth/image", rosbag.IMAGE, 10, _image(ts, header, band, "32FC1"))])
  for fill in (False, True):
    out = tmp_path / f"out_{fill}"
    assert rosbag.main(["--input", str(inp), "--output", str(out), "--checkpoint", MODEL, "--no_progress",
                        "--depth_topic", "/camera/depth/image"] + (["--fill_unsupported"] if fill else [])) == 0
    captured = capsys.readouterr()
    stdout = captured.out
    assert captured.err.splitlines() == ["note: --no_progress is deprecated and will be removed in the next release; "
                                         "use --progress off"]  # the old spelling works: no bar, one notice
    got = _read(out, ros)
    depth, sigma = (_pixels(got[t][0][1]) for t in ("/pncnn/depth", "/pncnn/sigma"))
    if not fill:  # rows 0-1: no measurement within 8 rows
      assert np.isnan(depth[:2]).all() and np.isnan(sigma[:2]).all(), "a 32FC1 depth where there is no support"
    ref = completer_lib.Completer.from_pretrained(MODEL, fill_unsupported=fill)(band)
    invalid = ~ref.valid
    assert invalid[:2].all() and ref.valid[-2:].all()
    np.testing.assert_array_equal(_mask(got["/pncnn/valid"][0][1]), np.where(ref.valid, 255, 0))
    if fill:
      assert np.isfinite(depth).all() and (depth >= 0).all() and np.isfinite(sigma).all()
    else:
      np.testing.assert_array_equal(np.isnan(depth), invalid)
      np.testing.assert_array_equal(np.isnan(sigma), invalid)
    np.testing.assert_array_equal(depth, ref.depth)
    how = "filled (--fill_unsupported)" if fill else "NaN"
    assert f"% of the pixels are not valid (no input support, or a negative network depth): {how}" in stdout, stdout


def _lidar_like(rng):
  """2-40 m at 8 % of the pixels: inside the shipped models' trained input density (6.0-10.3 %)."""
  return frame_at_density(rng, (H, W), 2.0, 40.0)


def test_frames_outside_the_trained_density_are_one_warning_and_counted(tmp_path, ros, capsys):
  """A bag of a training-like frame and two thinned ones (every 4th row): the first thinned frame is one warning
  line, not one per frame; the summary states the density and counts both."""
  ts = ros[2]
  rng = np.random.default_rng(6)
  dense = _lidar_like(rng)
  thin = np.zeros_like(dense)
  thin[::4], thin[-1] = dense[::4], dense[-1]
  frames = [dense, thin, thin * 1.1]
  inp = tmp_path / "in"
  _write(inp, ros, [("/camera/depth/image", rosbag.IMAGE, 10 + i, _image(ts, _header(ts, i, 0, "cam"), f, "32FC1"))
                    for i, f in enumerate(frames)])
  completer = completer_lib.Completer.from_pretrained(MODEL)
  lines = []
  summary = rosbag.complete_bag(inp, tmp_path / "out", completer, depth_topic="/camera/depth/image", progress=False,
                                log=lines.append)
  trained, text = completer.trained_density, completer_lib.density_text
  densities = [input_contract.input_density(f)[0] for f in frames]
  assert densities[0] == 19 / 240 and trained.low <= densities[0] <= trained.high and densities[1] < trained.low
  warned = [x for x in lines if x.startswith("warning:")]
  assert warned == [f"warning: /camera/depth/image message 1: input density {text(densities[1])} % is below the "
                    f"{text(trained.low)}-{text(trained.high)} % this model was trained on (synthetic 64-beam "
                    "LiDAR): expect larger errors; see docs/deploy/sensors.md (the first such frame; the summary "
                    "counts them)"], lines
  assert summary["density_outside"] == 2
  assert summary["input_density"] == {"min": densities[1], "median": densities[1], "max": densities[0]}
  assert (f"input density: median {text(densities[1])} % ({text(densities[1])}-{text(densities[0])} % over 3 frames)"
          f"; 2 frame(s) outside the range this model was trained on, {trained}") in lines, lines


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, ros, capsys):
  ts = ros[2]
  inp = tmp_path / "in"
  hdr = _header(ts, 1, 0, "lidar")
  _write(inp, ros, [("/camera/camera_info", rosbag.CAMERA_INFO, 1, _camera_info(ts, _header(ts, 1, 0, "cam"))),
                    ("/lidar/points", rosbag.POINTCLOUD2, 2, _cloud(ts, hdr, np.ones((3, 3), np.float32)))])
  (tmp_path / "taken").mkdir()
  cases = [
      (["--depth_topic", "/camera/depth"], "--depth_topic /camera/depth: no such topic in"),
      (["--depth_topic", "/lidar/points"], "--depth_topic /lidar/points in"),  # ... is PointCloud2, expected Image
      (["--points_topic", "/lidar/points"], "--points_topic needs --camera_info_topic"),
      (["--points_topic", "/lidar/points", "--camera_info_topic", "/camera/camera_info"], "pass --calib FILE"),
      (["--points_topic", "/lidar/points", "--camera_info_topic", "/cam/info"], "--camera_info_topic /cam/info: no"),
      (["--points_topic", "/lidar/points", "--camera_info_topic", "/camera/camera_info", "--calib",
        str(tmp_path / "none.yaml")], "calibration"),
      ([], "name one input"),
  ]
  for extra, message in cases:
    rc = rosbag.main(["--input", str(inp), "--output", str(tmp_path / "out")] + extra)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: ") and message in err, (extra, err)
  rc = rosbag.main(["--input", str(inp), "--output", str(tmp_path / "taken"), "--depth_topic", "/lidar/points"])
  assert rc == 2 and "--depth_topic /lidar/points" in capsys.readouterr().err  # the topic is checked first
  rc = rosbag.main(["--input", str(inp), "--output", str(tmp_path / "taken"), "--points_topic", "/lidar/points",
                    "--camera_info_topic", "/camera/camera_info", "--calib", str(_identity_calib(tmp_path))])
  assert rc == 2 and "--output " + str(tmp_path / "taken") + " already exists" in capsys.readouterr().err
  rc = rosbag.main(["--input", str(tmp_path / "nobag"), "--output", str(tmp_path / "out"), "--depth_topic", "/d"])
  assert rc == 2 and "--input " + str(tmp_path / "nobag") + ": no such bag" in capsys.readouterr().err
  assert not (tmp_path / "out").exists() and not any((tmp_path / "taken").iterdir())


def _refused(capsys, args, out):
  """The command's exit status 2 and its one stderr line, after which OUT does not exist."""
  rc = rosbag.main(["--output", str(out), "--checkpoint", MODEL, "--progress", "off"] + args)
  err = capsys.readouterr().err
  assert rc == 2 and err.count("\n") == 1 and err.startswith("error: "), (rc, err)
  assert not out.exists()
  return err.strip()


@pytest.mark.parametrize("case", ["1 mm in 16UC1", "kilometres in 32FC1", "millimetres in 32FC1", "negative 32FC1",
                                  "millimetres in PointCloud2"])
def test_frames_that_break_the_input_contract_are_refused_in_one_line(tmp_path, ros, capsys, case):
  """A bag of 1 mm measurements came out as depths up to 0.17 m and a bag in kilometres as 0-0.2 m, both with exit
  status 0 (predict refused such files); negative 32FC1 depths were read as no measurement. Each frame now passes
  the input contract (`pncnn_jax.data.input_contract`: the checks and messages of the Completer and predict) and a
  refused one stops the conversion in one line naming the message, with the REP's unit as the way out; the new bag
  is removed."""
  ts = ros[2]
  rng = np.random.default_rng(3)
  metres = np.where(rng.random((H, W)) < 0.3, rng.uniform(2.0, 40.0, (H, W)), 0.0)
  hdr = _header(ts, 1, 0, "camera_optical")
  inp = tmp_path / "in"
  if case.endswith("PointCloud2"):
    fwd = rng.uniform(3.0, 30.0, 400)
    xyz = np.stack([rng.uniform(-0.7, 0.7, 400) * fwd, rng.uniform(-0.4, 0.4, 400) * fwd, fwd], 1)  # camera frame
    _write(inp, ros, [("/camera/camera_info", rosbag.CAMERA_INFO, 1, _camera_info(ts, hdr)),
                      ("/lidar/points", rosbag.POINTCLOUD2, 2, _cloud(ts, hdr, (xyz * 1000).astype(np.float32)))])
    err = _refused(capsys, ["--input", str(inp), "--points_topic", "/lidar/points", "--camera_info_topic",
                            "/camera/camera_info"], tmp_path / "out")
    assert err.startswith("error: /lidar/points message 0: ranges up to ") and "looks like millimetres" in err and \
        err.endswith("; PointCloud2 x, y, z are metres (REP 103)"), err
    return
  image = {"1 mm in 16UC1": _image(ts, hdr, np.where(metres > 0, 1, 0), "16UC1"),
           "kilometres in 32FC1": _image(ts, hdr, metres / 1000, "32FC1"),
           "millimetres in 32FC1": _image(ts, hdr, metres * 1000, "32FC1"),
           "negative 32FC1": _image(ts, hdr, np.where(metres > 30, -metres, metres), "32FC1")}[case]
  _write(inp, ros, [("/camera/depth/image", rosbag.IMAGE, 10, image)])
  err = _refused(capsys, ["--input", str(inp), "--depth_topic", "/camera/depth/image"], tmp_path / "out")
  m = metres[metres > 0]
  expected = {
      "1 mm in 16UC1": "median depth 0.001 m (up to 0.001 m), under 5 cm: looks like kilometres (x 1000: 1-1 m, "
                       "median 1 m); 16UC1 depth images are in millimetres (REP 118)",
      "kilometres in 32FC1": "median depth 0.0",
      "millimetres in 32FC1": f"depths up to {np.float32(m.max() * 1000):.4g} m",
      "negative 32FC1": f"{int((m > 30).sum())} negative depths (min {-np.float32(m.max()):.4g} m); use 0 for no "
                        "measurement",
  }[case]
  assert err.startswith(f"error: /camera/depth/image message 0: {expected}"), err
  if "metres in" in case:
    assert err.endswith("; 32FC1 depth images are in metres (REP 118)"), err


def test_images_of_another_size_than_their_camera_info_are_refused(tmp_path, ros, capsys):
  """12x20 depth images with a 24x40 camera info were completed and published with that camera info, which
  describes other pixels (depth_image_proc would project them wrongly). The image must have the camera info's size,
  less its binning and region of interest (REP 104): a 24x40 camera binned 2x2 takes 12x20 images."""
  ts = ros[2]
  rng = np.random.default_rng(4)
  metres = np.where(rng.random((H, W)) < 0.3, rng.uniform(2.0, 40.0, (H, W)), 0.0)
  hdr = _header(ts, 1, 0, "camera_optical")
  for binning in (0, 2):
    info = _camera_info(ts, hdr)
    info.height, info.width, info.binning_x, info.binning_y = 2 * H, 2 * W, binning, binning
    inp = tmp_path / f"in_{binning}"
    _write(inp, ros, [("/camera/depth/camera_info", rosbag.CAMERA_INFO, 5, info),
                      ("/camera/depth/image", rosbag.IMAGE, 10, _image(ts, hdr, metres, "32FC1"))])
    args = ["--input", str(inp), "--depth_topic", "/camera/depth/image"]
    if binning == 0:
      err = _refused(capsys, args, tmp_path / "out")
      assert err == ("error: /camera/depth/image message 0: 12x20 pixels (HxW), but its camera info on "
                     "/camera/depth/camera_info is 24x40; a depth image and its camera must have one size"), err
    else:
      assert rosbag.main(args + ["--output", str(tmp_path / "binned"), "--checkpoint", MODEL]) == 0
      got = _read(tmp_path / "binned", ros)
      assert (got["/pncnn/depth"][0][1].height, got["/pncnn/camera_info"][0][1].binning_x) == (H, 2)


def _identity_calib(tmp_path):
  path = tmp_path / "identity.json"
  path.write_text('{"T_cam_from_lidar": [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0]}')
  return path


def test_decoders_on_unusual_layouts(ros):
  """image_to_depth: 16UC1 big-endian with padded rows is millimetres; an unknown encoding is one line.
  pointcloud2_to_xyz: float64 fields at odd offsets, two rows with row padding."""
  ts = ros[2]
  hdr = _header(ts, 0, 0, "c")
  mm = np.arange(H * W, dtype=np.uint16).reshape(H, W)
  np.testing.assert_array_equal(rosbag.image_to_depth(_image(ts, hdr, mm, "16UC1", bigendian=True, pad=3)),
                                (mm * 1e-3).astype(np.float32))
  rgb = _image(ts, hdr, mm, "16UC1")
  rgb.encoding = "rgb8"
  with pytest.raises(ValueError, match=r"^img: encoding 'rgb8' is not a depth encoding"):
    rosbag.image_to_depth(rgb, "img")
  Field = ts.types["sensor_msgs/msg/PointField"]
  xyz = np.arange(12, dtype=np.float64).reshape(4, 3) + 0.25
  rec = np.zeros(4, np.dtype({"names": ["x", "y", "z"], "formats": [">f8"] * 3, "offsets": [1, 9, 17],
                               "itemsize": 27}))
  rec["x"], rec["y"], rec["z"] = xyz.T
  rows = np.hstack([rec.view(np.uint8).reshape(2, 54), np.zeros((2, 5), np.uint8)])
  cloud = ts.types["sensor_msgs/msg/PointCloud2"](
      header=hdr, height=2, width=2, fields=[Field(name=n, offset=1 + 8 * i, datatype=8, count=1)
                                             for i, n in enumerate("xyz")],
      is_bigendian=True, point_step=27, row_step=59, data=rows.ravel(), is_dense=True)
  np.testing.assert_array_equal(rosbag.pointcloud2_to_xyz(cloud), xyz)


# ------------------------------------------------------------------------------------------------------------
# Issue 50.2 and 50.4: interrupted conversions, a full disk, empty paths, reruns.

# the first frame's depth, sigma and valid images are in the .db3 when it stops
STOP_AFTER_FIRST_FRAME = stop_after_writes("pncnn_jax.inference.rosbag", "rosbag", 3)

FULL_DISK = """
import runpy, sqlite3, sys
from rosbags.rosbag2 import storage_sqlite3
def full(self, *a):  # what sqlite3 raises when the disk fills up under it (SQLITE_FULL)
  raise sqlite3.OperationalError("database or disk is full")
storage_sqlite3.Sqlite3Writer.write = full
sys.argv = ["rosbag"] + sys.argv[1:]
runpy.run_module("pncnn_jax.inference.rosbag", run_name="__main__")
"""


def _depth_bag(tmp_path, ros, frames=3):
  ts = ros[2]
  rng = np.random.default_rng(5)
  inp = tmp_path / "in"
  _write(inp, ros, [("/camera/depth/image", rosbag.IMAGE, 10 + i, _image(
      ts, _header(ts, i, 0, "cam"), np.where(rng.random((H, W)) < 0.3, rng.uniform(2, 40, (H, W)), 0), "32FC1"))
      for i in range(frames)])
  return inp


def _command(script, inp, out, *extra):
  return subprocess.Popen([sys.executable, "-c", script, "--input", str(inp), "--output", str(out), "--checkpoint",
                           MODEL, "--depth_topic", "/camera/depth/image", *extra], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def _wait_for_writing(p):
  for line in p.stdout:
    if line.strip() == "WRITING":
      return
  pytest.fail(f"the conversion ended before writing: {p.wait()} {p.stderr.read()[-3000:]}")


def test_sigterm_removes_the_partial_bag_in_one_line(tmp_path, ros):
  """SIGTERM (a job scheduler, `kill`) left a .db3 without metadata.yaml, which a rerun refused as existing."""
  inp, out = _depth_bag(tmp_path, ros), tmp_path / "out"
  p = _command(STOP_AFTER_FIRST_FRAME, inp, out)
  try:
    _wait_for_writing(p)
    assert (out / "out.db3").is_file()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
  finally:
    p.kill()
  assert p.returncode == 143 and err.strip() == f"error: terminated (SIGTERM); the partial bag {out} was removed", err
  assert not out.exists()


def test_sigkill_leaves_a_partial_bag_that_a_rerun_names_and_replaces(tmp_path, ros, capsys):
  """After SIGKILL (no handler runs) the rerun said only 'already exists'. Now it names the partial conversion,
  --overwrite replaces it, and the result is a complete bag; a finished bag is replaced only with --overwrite, and
  a folder this command did not write never."""
  inp, out = _depth_bag(tmp_path, ros), tmp_path / "out"
  p = _command(STOP_AFTER_FIRST_FRAME, inp, out)
  try:
    _wait_for_writing(p)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
  finally:
    p.kill()
  assert (out / "out.db3").is_file() and not (out / "metadata.yaml").exists()
  args = ["--input", str(inp), "--output", str(out), "--checkpoint", MODEL, "--depth_topic", "/camera/depth/image"]
  assert rosbag.main(args) == 2
  assert capsys.readouterr().err.strip() == (
      f"error: --output {out} is a partial bag conversion (no metadata.yaml: a conversion of {inp} was killed before "
      "it finished); pass --overwrite to replace it")
  assert rosbag.main(args + ["--overwrite"]) == 0
  capsys.readouterr()
  got = _read(out, ros)
  assert sorted(got) == ["/pncnn/depth", "/pncnn/sigma", "/pncnn/valid"] and len(got["/pncnn/depth"]) == 3
  assert sorted(p.name for p in out.iterdir()) == ["metadata.yaml", "out.db3", "pncnn_writer.json"]
  assert rosbag.main(args) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith(f"error: --output {out} already exists (a bag completed from {inp} with checkpoint ") and \
      err.endswith("pass --overwrite to replace it, or name a new bag directory"), err
  (tmp_path / "mine").mkdir()
  (tmp_path / "mine" / "notes.txt").write_text("x")
  assert rosbag.main(args[:2] + ["--output", str(tmp_path / "mine")] + args[4:] + ["--overwrite"]) == 2
  assert "replaces only a bag this command wrote" in capsys.readouterr().err
  assert (tmp_path / "mine" / "notes.txt").read_text() == "x"


def test_a_full_disk_is_one_line(tmp_path, ros):
  """A full disk ended in a sqlite3 traceback."""
  inp, out = _depth_bag(tmp_path, ros, frames=1), tmp_path / "out"
  p = _command(FULL_DISK, inp, out)
  _, err = p.communicate(timeout=300)
  assert p.returncode == 1 and err.strip() == (
      f"error: cannot write {out}: database or disk is full; the partial bag was removed"), err
  assert not out.exists()


def test_empty_paths_are_refused(tmp_path, ros, capsys, monkeypatch):
  """--input "" read the current directory as the bag; --output "" was the current directory."""
  inp = _depth_bag(tmp_path, ros, frames=1)
  monkeypatch.chdir(tmp_path)
  for i, o, flag in (("", "out", "--input"), (str(inp), "", "--output")):
    assert rosbag.main(["--input", i, "--output", o, "--depth_topic", "/camera/depth/image"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {flag} is empty (an unset shell variable?); name the folder " \
                                              "or file"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
