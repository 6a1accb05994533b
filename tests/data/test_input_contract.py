"""The input contract (`pncnn_jax.data.input_contract`): layouts and dtypes, 0 / NaN / +-inf as no measurement,
negative depths, the units check at its documented thresholds (1000 m, a median of 5 cm) with what the numbers look
like, frames named in batches, point-cloud ranges, image against camera size; and that every entry that takes depth
(the Completer, predict_array, predict's file reader, the bag's image decoder, export's serving function) refuses a
bad input with the very same line."""

import importlib.util

import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax.data import input_contract
from pncnn_jax.inference import completer as completer_lib
from pncnn_jax.inference import export, predict, rosbag

F32 = np.finfo(np.float32)


def _frame(shape=(6, 8), top=40.0, seed=0):
  rng = np.random.default_rng(seed)
  return np.where(rng.random(shape) < 0.4, rng.uniform(2.0, top, shape), 0.0).astype(np.float32)


def test_layouts_and_dtypes_are_one_line_naming_the_input():
  frame = _frame()
  assert input_contract.check_sparse_depth(frame, name="x").shape == (1, 6, 8)
  assert input_contract.check_sparse_depth(np.stack([frame] * 3), name="x").shape == (3, 6, 8)
  for layout, a in ((input_contract.BHW1, frame[None, ..., None]), (input_contract.HW1, frame[..., None])):
    assert input_contract.check_sparse_depth(a, name="x", layouts=(layout,)).shape == (1, 6, 8)
  for dtype in (np.float16, np.float64, np.uint16, np.int32):  # real numbers of any width
    assert input_contract.check_sparse_depth(np.round(frame).astype(dtype), name="x").dtype == np.float32
  with pytest.raises(ValueError) as e:
    input_contract.check_sparse_depth(frame[None, ..., None], name="scan.npy")
  assert str(e.value) == ("scan.npy: expected depth (H, W) or (B, H, W) in metres as real numbers, got shape "
                          "(1, 6, 8, 1) of float32")
  for bad in (frame > 0, frame.astype(np.complex64), frame.astype(object)):
    with pytest.raises(ValueError, match=rf"^x: expected depth \(H, W\) or \(B, H, W\) in metres as real numbers, "
                                         rf"got shape \(6, 8\) of {bad.dtype}$"):
      input_contract.check_sparse_depth(bad, name="x")
  with pytest.raises(ValueError, match=r"^x: expected depth \(1, H, W, 1\) in metres"):
    input_contract.check_sparse_depth(np.zeros((2, 6, 8, 1)), name="x", layouts=(input_contract.ONE_HW1,))  # 1 map
  with pytest.raises(ValueError, match=r"^x: empty depth map, shape \(0, 8\)$"):
    input_contract.check_sparse_depth(np.zeros((0, 8)), name="x")
  # A symbolic (traced) batch is compared only where the layout names an exact size.
  layout = input_contract.check_layout(("b", 6, 8, 1), np.float32, name="x", layouts=(input_contract.BHW1,))
  assert layout == input_contract.BHW1


def test_zero_nan_and_infinities_are_no_measurement_silently(recwarn):
  frame = _frame()
  coded = frame.copy()
  holes = frame == 0
  coded[holes] = np.resize(np.array([np.nan, np.inf, -np.inf, 0.0], np.float32), int(holes.sum()))
  np.testing.assert_array_equal(input_contract.check_sparse_depth(coded, name="x")[0], frame)
  assert not recwarn.list  # the policy, not a surprise: nothing warns


def test_negative_depths_are_refused_naming_the_frames():
  frame = _frame()
  frame[1, 2], frame[3, 4] = -0.5, -3.0
  with pytest.raises(ValueError) as e:
    input_contract.check_sparse_depth(frame, name="a.npy")
  assert str(e.value) == "a.npy: 2 negative depths (min -3 m); use 0 for no measurement"
  with pytest.raises(ValueError, match=r"^batch frame 1: 2 negative depths \(min -3 m\)"):
    input_contract.check_sparse_depth(np.stack([_frame(seed=1), frame]), name="batch")


@pytest.mark.parametrize("top, median, refused", [
    (1000.0, 20.0, None),                           # the largest plausible depth passes
    (np.nextafter(np.float32(1000), np.float32(2000)), 20.0, "depths up to"),  # one float32 step beyond: refused
    (40.0, 0.05, None),                             # the smallest plausible median passes
    (40.0, 0.0499, "median depth 0.0499 m"),
])
def test_the_units_check_is_at_its_documented_thresholds(top, median, refused):
  frame = np.zeros((4, 5), np.float32)
  frame[0, :3] = median  # three of five measurements at the median
  frame[1, :1] = top
  frame[1, 1] = 0.01
  if refused is None:
    input_contract.check_sparse_depth(frame, name="x")
  else:
    with pytest.raises(ValueError, match=f"^x: {refused}"):
      input_contract.check_sparse_depth(frame, name="x")


def test_units_errors_say_what_the_numbers_look_like():
  metres = _frame(top=40.0)
  with pytest.raises(ValueError) as e:
    input_contract.check_sparse_depth(metres * 1000, name="mm.npy", hint="pass --depth_scale 0.001")
  m = metres[metres > 0]
  assert str(e.value) == (
      f"mm.npy: depths up to {m.max() * 1000:.4g} m (median {np.median(m) * 1000:.4g} m), beyond the 1000 m no range "
      f"sensor reaches: looks like millimetres (x 0.001: {m.min():.3g}-{m.max():.3g} m, median {np.median(m):.3g} m)"
      "; pass --depth_scale 0.001")
  with pytest.raises(ValueError, match=r"^km: median depth 0\.0\d+ m \(up to 0\.0\d+ m\), under 5 cm: looks like "
                                       r"kilometres \(x 1000: .* m\); pass depth in metres$"):
    input_contract.check_sparse_depth(metres / 1000, name="km")
  one_mm = np.where(metres > 0, 0.001, 0.0)
  with pytest.raises(ValueError, match=r"^x: median depth 0\.001 m"):
    input_contract.check_sparse_depth(one_mm, name="x")
  for extreme in (1e6 * 1e3, 1e20, float(F32.max)):  # neither metres nor millimetres
    with pytest.raises(ValueError, match=r": not metres; pass depth in metres$"):
      input_contract.check_sparse_depth(np.where(metres > 0, extreme, 0.0).astype(np.float32), name="x")
  with pytest.raises(ValueError, match=r"^x: median depth 1\.4e-45 m .*: not metres"):
    input_contract.check_sparse_depth(np.where(metres > 0, F32.smallest_subnormal, 0), name="x")


def test_float64_beyond_float32_is_refused_not_rounded_to_no_measurement():
  """1e300 as float32 is inf, which reads as no measurement: the check sees the values as given."""
  frame = _frame().astype(np.float64)
  frame[2, 2] = 1e300
  with pytest.raises(ValueError, match=r"^x: depths up to 1e\+300 m"):
    input_contract.check_sparse_depth(frame, name="x")


def test_frames_without_measurement_are_named_unless_allowed():
  frames = np.stack([_frame(), np.zeros((6, 8)), np.full((6, 8), np.nan), _frame(seed=2)])
  with pytest.raises(ValueError) as e:
    input_contract.check_sparse_depth(frames, name="input")
  assert str(e.value) == "input frames [1, 2]: no measurement (every pixel is 0 or NaN); nothing to complete"
  with pytest.raises(ValueError, match=r"^a\.png: no measurement"):
    input_contract.check_sparse_depth(np.zeros((6, 8)), name="a.png")
  out = input_contract.check_sparse_depth(frames, name="input", allow_empty=True)
  assert not out[1:3].any() and (out[0] == frames[0]).all()
  with pytest.raises(ValueError, match=r"^input frame 2: depths up to 3\.9\d+e\+04 m"):  # each frame on its own
    input_contract.check_sparse_depth(np.stack([_frame(), _frame(), _frame() * 1000]), name="input")


def test_point_ranges():
  rng = np.random.default_rng(3)
  scan = rng.uniform(-40, 40, (500, 4))
  scan[:10, :3] = 0.0  # drivers' "no return"
  scan[10:20, 0] = np.nan
  input_contract.check_point_ranges(scan, name="points a.bin")
  with pytest.raises(ValueError, match=r"^points a\.bin: ranges up to \d.* m \(median .* m\), beyond the 1000 m "
                                       r"no range sensor reaches: looks like millimetres \(x 0\.001: .*\); point "
                                       r"coordinates must be in metres$"):
    input_contract.check_point_ranges(scan * 1000, name="points a.bin")
  with pytest.raises(ValueError, match=r"^p: ranges up to 1\.7\d+e\+06 m .*: not metres"):
    input_contract.check_point_ranges(np.full((5, 3), 1e6), name="p")
  with pytest.raises(ValueError, match=r"^p: median range 0\.0\d+ m .*looks like kilometres"):
    input_contract.check_point_ranges(scan / 1000, name="p")
  with pytest.raises(ValueError, match=r"^p: ranges up to 1\.7\d+e\+300 m"):  # no overflow to inf
    input_contract.check_point_ranges(np.full((2, 3), 1e300), name="p")
  input_contract.check_point_ranges(np.zeros((0, 3)), name="p")  # no points: nothing to check
  with pytest.raises(ValueError, match=r"^p: expected \(N, 3\) or \(N, 4\) points"):
    input_contract.check_point_ranges(np.zeros((4, 2)), name="p")


def test_same_size():
  input_contract.check_same_size((12, 20), (12, 20), name="m", source="info")
  with pytest.raises(ValueError) as e:
    input_contract.check_same_size((12, 20), (24, 40), name="/d message 0", source="its camera info on /d/camera_info")
  assert str(e.value) == ("/d message 0: 12x20 pixels (HxW), but its camera info on /d/camera_info is 24x40; a depth "
                          "image and its camera must have one size")


def test_input_density_is_the_share_of_the_spanned_rows_measured():
  """The equation: measurements / ((last - first + 1) W); NaN, +-inf and 0 are no measurement; 0 without any;
  one value per frame of a batch."""
  frame = np.zeros((5, 4))
  frame[1, :2] = 3.0
  frame[3, 1] = 7.0
  frame[2, 3], frame[4, 0], frame[0, 0] = np.nan, np.inf, -np.inf  # no measurement: rows 0 and 4 stay empty
  np.testing.assert_array_equal(input_contract.input_density(frame), [3 / 12])
  np.testing.assert_array_equal(input_contract.input_density(np.stack([frame, np.zeros((5, 4)), np.ones((5, 4))])),
                                [0.25, 0.0, 1.0])
  assert input_contract.DENSITY_MEASURE == "rows_spanned"
  with pytest.raises(ValueError, match=r"^scan: expected depth \(H, W\) or \(B, H, W\)"):
    input_contract.input_density(np.zeros((1, 2, 3, 4)), name="scan")


@pytest.mark.parametrize("seed", range(20))
def test_input_density_properties(seed):
  """Over random sparse frames: adding or cropping empty rows above and below leaves the density as it is (a sky
  of any height); removing measurements while the first and last rows keep theirs lowers it; and so does keeping
  every k-th row (a sparser LiDAR of the same vertical field: every k-th row from the first, the last one kept)."""
  rng = np.random.default_rng(seed)
  h, w = rng.integers(4, 40), rng.integers(4, 60)
  frame = np.where(rng.random((h, w)) < rng.uniform(0.02, 0.6), rng.uniform(1, 80, (h, w)), 0.0)
  frame[0, rng.integers(w)] = frame[-1, rng.integers(w)] = 5.0
  d = input_contract.input_density(frame)[0]
  above, below = rng.integers(0, 30, 2)
  assert input_contract.input_density(np.pad(frame, ((above, below), (0, 0))))[0] == d
  empty_rows = np.zeros((above, w))
  assert input_contract.input_density(np.vstack([empty_rows, frame, np.full((below, w), np.nan)]))[0] == d
  rows = np.flatnonzero((frame > 0).any(axis=1))
  assert input_contract.input_density(frame[rows[0]:rows[-1] + 1])[0] == d
  keep = rng.random((h, w)) < rng.uniform(0.0, 0.9)
  keep[0], keep[-1] = frame[0] > 0, frame[-1] > 0  # the span's ends keep their measurements
  thinned = np.where(keep, frame, 0.0)
  if (thinned > 0).sum() < (frame > 0).sum():
    assert input_contract.input_density(thinned)[0] < d
  k = int(rng.integers(2, 5))
  every = np.zeros_like(frame)
  every[::k], every[-1] = frame[::k], frame[-1]
  if (every > 0).sum() < (frame > 0).sum():
    assert input_contract.input_density(every)[0] < d


def test_input_density_of_a_real_scan_halves_with_every_other_laser():
  """KITTI's velodyne_raw frame (an HDL-64E, 375 x 1242) and the same thinned to every 2nd and 4th laser
  (`sensors.thin_depth`): 6.1 %, then about a half and a quarter of it."""
  from pncnn_jax.data import io, pipeline, sensors  # pylint: disable=g-import-not-at-top

  from conftest import DATA  # pylint: disable=g-import-not-at-top
  depth = io.read_png_uint16(DATA / "kitti_depth_mini" / "train" / "2011_09_26_drive_0001_sync" / "proj_depth" /
                             "velodyne_raw" / "image_02" / "0000000005.png") / 256.0
  K, T = pipeline.kitti_camera(*depth.shape)
  d = [input_contract.input_density(sensors.thin_depth(depth, k, K, T))[0] for k in (1, 2, 4)]
  assert 0.060 < d[0] < 0.062, d
  assert 0.45 < d[1] / d[0] < 0.55 and 0.22 < d[2] / d[0] < 0.28, d


def _message(fn) -> str:
  with pytest.raises(ValueError) as e:
    fn()
  assert "\n" not in str(e.value)
  return str(e.value)


@pytest.mark.parametrize("case", ["millimetres", "kilometres", "negative", "float32 max", "empty"])
def test_every_entry_refuses_with_the_same_line(tmp_path, case):
  """One bad frame through each entry that takes depth: the same message, the entry's name in front and its own
  hint for units at the end. All are refused before any network runs (nothing compiles here)."""
  frame = _frame().astype(np.float64)
  bad = {"millimetres": frame * 1000, "kilometres": frame / 1000, "negative": -frame,
         "float32 max": np.where(frame > 0, F32.max, 0.0), "empty": np.zeros_like(frame)}[case].astype(np.float32)
  expected = _message(lambda: input_contract.check_sparse_depth(bad, name="NAME"))
  core = expected[len("NAME"):].rsplit("; pass depth in metres", 1)[0]  # without the Python entries' hint
  c = completer_lib.Completer.from_pretrained("synthetic:ncnn")
  got = {
      "Completer": _message(lambda: c(bad, name="NAME")),
      "predict_array": _message(lambda: predict.predict_array(c.model, c.variables, bad, name="NAME")),
      "serving_fn": _message(lambda: export.serving_fn(c.model, c.variables)(jnp.asarray(bad)[None, ..., None])),
  }
  np.save(tmp_path / "f.npy", bad)
  got["predict file"] = _message(lambda: predict.read_input(tmp_path / "f.npy"))
  if case != "empty" and importlib.util.find_spec("rosbags"):  # the bag passes empty frames (writes NaN)
    _, _, ts = rosbag._rosbags()  # pylint: disable=protected-access
    msg = ts.types["sensor_msgs/msg/Image"](
        header=ts.types["std_msgs/msg/Header"](stamp=ts.types["builtin_interfaces/msg/Time"](sec=0, nanosec=0),
                                               frame_id="c"),
        height=bad.shape[0], width=bad.shape[1], encoding="32FC1", is_bigendian=0, step=4 * bad.shape[1],
        data=np.frombuffer(bad.astype("<f4").tobytes(), np.uint8))
    got["bag"] = _message(lambda: rosbag.depth_of(msg, "NAME"))
  assert got["Completer"] == got["predict_array"] == expected
  assert got["serving_fn"].startswith("sparse_depth") and core in got["serving_fn"]
  assert got["predict file"].startswith(str(tmp_path / "f.npy")) and core in got["predict file"]
  if "bag" in got:
    assert got["bag"].startswith("NAME") and core in got["bag"]
  if case in ("millimetres", "kilometres", "float32 max"):  # each entry's own way out
    assert got["predict file"].endswith("wrong --input_format or --depth_scale? (kitti_png: value / 256 m, mm_png: "
                                        "value / 1000 m, npy: metres)")
    if "bag" in got:
      assert got["bag"].endswith("; 32FC1 depth images are in metres (REP 118)")
