"""The completer API: equal to the low-level path (load, build_model, jit(apply) on the padded input), batches,
compiles once per padded shape, checks its input with the input contract (NaN, inf, negative, units, empty frames)
and warns beyond the trained range, gives finite outputs for every finite input it accepts, and marks the pixels
without input support or with a clamped depth (NaN by default, the network's values with fill_unsupported)."""

import warnings

import jax
import numpy as np
import pytest

import pncnn_jax
from pncnn_jax import losses
from pncnn_jax.checkpoints import loader
from pncnn_jax.inference import completer as completer_lib
from pncnn_jax.inference import predict

SMALL = "synthetic:ncnn_conf_l1"  # an NCNN: a few hundred weights, compiles in a second
# The frames here are random samples of 30 % of the pixels, denser than any shipped model was trained on: the density
# warning is not what these tests check (the density test below does, with pytest.warns, which records a warning
# whatever the filters).
pytestmark = pytest.mark.filterwarnings("ignore::pncnn_jax.inference.completer.InputDensityWarning")


@pytest.fixture(scope="module")
def small():
  return completer_lib.Completer.from_pretrained(SMALL)


def _sparse(shape, seed=0, density=0.3, top=60.0):
  rng = np.random.default_rng(seed)
  return np.where(rng.random(shape) < density, rng.uniform(2, top, shape), 0).astype(np.float32)


def _low_level(name, sparse_hw):
  """The five steps by hand: load, build the model, pad to a multiple of 8, jit(apply), crop back."""
  ckpt = loader.load(name)
  h, w = sparse_hw.shape
  padded = predict.pad_to_multiple(sparse_hw)
  out = jax.jit(ckpt.build_model().apply)(ckpt.variables, padded[None, ..., None])
  return ckpt, jax.tree.map(lambda a: np.asarray(a)[0, :h, :w, 0], out)


def test_the_api_equals_the_low_level_path(small):
  sparse = _sparse((13, 21))  # pads to 16 x 24
  ckpt, ref = _low_level(SMALL, sparse)
  out = small(sparse)
  assert out.depth.shape == out.output_confidence.shape == out.input_confidence.shape == (13, 21)
  assert out.depth.dtype == np.float32 and out.sigma is None and not small.has_sigma  # an L1 model: no sigma
  np.testing.assert_allclose(out.depth, np.clip(ref.depth, 0, None), rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(out.clamped, ref.depth < 0)
  np.testing.assert_allclose(out.output_confidence, ref.nconv_confidence, rtol=1e-6, atol=1e-12)
  np.testing.assert_allclose(out.input_confidence, ref.input_confidence, rtol=1e-6)
  assert (out.depth >= 0).all() and (out.input_confidence >= 0).all()
  assert small.input_range_m == (0.0, 100.0) == completer_lib.input_range_of(ckpt.identity["dataset"])


def test_a_batch_equals_its_frames_and_compiles_once_per_padded_shape(small):
  frames = np.stack([_sparse((13, 21), seed=s) for s in range(3)])
  before = small._fn._cache_size()  # pylint: disable=protected-access
  batch = small(frames)
  assert batch.depth.shape == (3, 13, 21)
  for i in range(3):
    one = small(frames[i])
    np.testing.assert_allclose(batch.depth[i], one.depth, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(batch.support[i], one.support)
  small(_sparse((14, 22), seed=9))  # pads to 16 x 24 as well: no new program
  assert small._fn._cache_size() - before <= 2  # (3, 16, 24) and (1, 16, 24): one each  # pylint: disable=protected-access


def test_nan_and_inf_are_no_measurement_and_bad_input_is_named(small):
  """The input contract (`pncnn_jax.data.input_contract`): 0, NaN and +-inf mean no measurement, silently (the
  Completer warned about +-inf, predict_array about NaN too, the bag command about neither); a negative depth, a
  wrong shape and a frame without measurements are one line naming the input (and the frame of a batch)."""
  sparse = _sparse((16, 24), seed=1)
  with_nan = np.where(sparse > 0, sparse, np.nan)
  np.testing.assert_array_equal(small(with_nan).depth, small(sparse).depth)
  poisoned = sparse.copy()
  poisoned[2, 3], poisoned[4, 5] = np.inf, -np.inf
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    warnings.filterwarnings("ignore", category=completer_lib.InputDensityWarning)  # 32 % dense: not this test's
    out = small(poisoned, name="frame.npy")
  zeroed = np.where(np.isfinite(poisoned), poisoned, 0)
  np.testing.assert_array_equal(out.depth, small(zeroed).depth)
  negative = sparse.copy()
  negative[1, 3] = -3.0
  with pytest.raises(ValueError, match=r"frame.npy: 1 negative depths \(min -3 m\)"):
    small(negative, name="frame.npy")
  with pytest.raises(ValueError, match="frame.npy: no measurement"):
    small(np.zeros((16, 24)), name="frame.npy")
  with pytest.raises(ValueError, match=r"input frame 1: no measurement"):
    small(np.stack([sparse, np.full((16, 24), np.nan)]))
  with pytest.raises(ValueError, match=r"expected depth \(H, W\) or \(B, H, W\) in metres"):
    small(sparse[None, ..., None])


@pytest.mark.parametrize("scale, message", [
    (None, r"median depth 0\.001 m \(up to 0\.001 m\), under 5 cm"),  # every measurement 1 mm
    (1e-3, r"median depth 0\.0\d+ m .*looks like kilometres"),          # kilometres
    (1e3, r"depths up to 5\.\d+e\+04 m .*looks like millimetres"),       # millimetres
    (1e6, r"depths up to 5\.\d+e\+07 m .*not metres"),
])
def test_depths_that_are_not_metres_are_refused_in_one_line(small, scale, message):
  """A frame of 1 mm measurements came out as 0-0.17 m (a shipped pNCNN), one in kilometres as 0-0.2 m, millimetres
  and 1e6 m as 2.7 mm everywhere: the units check of the input contract (beyond 1000 m or a median under 5 cm; the
  thresholds predict used for files) refuses them, naming the input and the frame of a batch."""
  sparse = _sparse((16, 24), seed=7)
  bad = np.where(sparse > 0, 0.001, 0.0) if scale is None else sparse * scale
  with pytest.raises(ValueError, match=rf"^frame\.npy: {message}.*; pass depth in metres$") as e:
    small(bad, name="frame.npy")
  assert "\n" not in str(e.value)
  with pytest.raises(ValueError, match=rf"^batch frame 1: {message}"):
    small(np.stack([sparse, bad, sparse]), name="batch")


F32_MAX = float(np.finfo(np.float32).max)
EXTREMES = np.array([np.finfo(np.float32).smallest_subnormal, np.finfo(np.float32).tiny, 1e-30, 1e-3, 0.05, 0.5, 3.0,
                     30.0, 99.0, 500.0, 999.9, 1000.0, np.nextafter(np.float32(1000), np.float32(2000)), 1e4, 1e20,
                     1e30, 1e38, F32_MAX], np.float32)


def _extreme_frames(n, seed):
  """Tiny frames (8 x 8 and 5 x 7: one padded shape) of finite values: extremes from EXTREMES (float32's smallest
  subnormal to its maximum, the units thresholds and one float32 step beyond them), log-uniform over all of float32's
  positive range, or log-uniform over 1 cm - 1 km; one measurement to every pixel. Plus dense constant frames (the
  case where a network's precision underflows to 0)."""
  rng = np.random.default_rng(seed)
  for i in range(n):
    shape = (8, 8) if i % 2 else (5, 7)
    mask = rng.random(shape) < rng.choice([0.02, 0.1, 0.4, 1.0])
    mask.flat[rng.integers(mask.size)] = True
    values = (rng.choice(EXTREMES, shape), 10.0 ** rng.uniform(-44.8, 38.5, shape),
              10.0 ** rng.uniform(-2, 3, shape))[i % 3]
    yield np.where(mask, values, 0.0).astype(np.float32)
  for v in (0.05, 3.0, 30.0, 300.0, 1000.0):
    yield np.full((8, 8), v, np.float32)


@pytest.mark.parametrize("name", [completer_lib.RECOMMENDED, "synthetic:pncnn"])
def test_extreme_finite_inputs_give_finite_outputs_or_a_one_line_refusal(name):
  """Property: a finite input is either refused by the input contract, in one line, exactly when its documented
  rule says so (a measurement beyond 1000 m, a median under 5 cm), or completed with finite numbers: depth and
  sigma where `valid` (NaN elsewhere, never inf), every pixel with fill_unsupported, confidences everywhere.

  Before, the recommended model's depth was inf at 1e20 m and NaN near float32's maximum (the units check now
  refuses them), and `synthetic:pncnn` gave sigma = inf at 200 of 960 valid pixels of a dense 30 m frame, inside
  its trained range: its precision head underflows to 0 there (sigma is now at most `SIGMA_MAX_M`, `sigma_of`)."""
  dense = completer_lib.Completer.from_pretrained(name, fill_unsupported=True)
  c = completer_lib.Completer(dense.model, dense.variables, loss=dense.loss)
  completed = refused = 0
  for i, x in enumerate(_extreme_frames(90, seed=11)):
    measured = x[x > 0].astype(np.float64)
    should_refuse = measured.max() > 1000.0 or np.median(measured) < 0.05
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", completer_lib.InputRangeWarning)
        out, filled = c(x, name=f"frame {i}"), dense(x, name=f"frame {i}")
    except ValueError as e:
      assert should_refuse, f"frame {i} refused, values {measured.min():.3g}-{measured.max():.3g} m: {e}"
      assert "\n" not in str(e) and str(e).startswith(f"frame {i}: ") and ("depths up to" in str(e)
                                                                         or "median depth" in str(e)), str(e)
      refused += 1
      continue
    for field in ("depth", "sigma"):
      got = getattr(out, field)
      assert np.isfinite(got[out.valid]).all() and np.isnan(got[~out.valid]).all(), (i, field, measured.max())
      assert np.isfinite(getattr(filled, field)).all(), (i, field, "fill_unsupported", measured.max())
    for field in ("output_confidence", "input_confidence"):
      assert np.isfinite(getattr(out, field)).all(), (i, field)
    assert not should_refuse, f"frame {i} accepted with values {measured.min():.3g}-{measured.max():.3g} m"
    completed += 1
  assert completed >= 30 and refused >= 30, (completed, refused)  # both sides of the contract were exercised


@pytest.mark.parametrize("value", [1e20, F32_MAX])
def test_inputs_near_float32s_maximum_are_refused(value):
  """Finite measurements of 1e20 m gave the recommended model an inf depth, float32's maximum a NaN depth and
  sigma, although the docs promise a depth >= 0: the units check refuses them in one line."""
  c = completer_lib.Completer.from_pretrained()
  x = np.where(_sparse((8, 8), seed=8) > 0, value, 0.0).astype(np.float32)
  with pytest.raises(ValueError) as e:
    c(x)
  assert str(e.value) == (f"input: depths up to {value:.4g} m (median {value:.4g} m), beyond the 1000 m no range "
                          "sensor reaches: not metres; pass depth in metres")


def test_sigma_of_is_finite_where_the_precision_underflows():
  prec = np.array([4.0, 1e-30, np.finfo(np.float32).smallest_subnormal, 0.0, np.inf, np.nan], np.float32)
  sigma = completer_lib.sigma_of(prec)
  np.testing.assert_allclose(sigma[:2], [0.5, 1e15], rtol=1e-6)
  assert sigma[2] == sigma[3] == np.float32(completer_lib.SIGMA_MAX_M) and sigma[4] == 0 and np.isnan(sigma[5])
  assert np.isfinite(np.float32(completer_lib.SIGMA_MAX_M) ** 2)  # squares without overflow in float32


def test_inputs_beyond_the_trained_range_warn_and_are_marked(small):
  sparse = _sparse((16, 24), seed=2)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # inside the range: no warning
    warnings.filterwarnings("ignore", category=completer_lib.InputDensityWarning)  # 30 % dense: not this test's
    small(sparse)
  far = sparse.copy()
  far[5, 7] = 450.0
  with pytest.warns(completer_lib.InputRangeWarning, match=r"1 measurement\(s\) outside the 0-100 m this model was "
                    r"trained on \(450-450 m\)"):
    out = small(far)
  assert out.out_of_range.sum() == 1 and out.out_of_range[5, 7]


@pytest.mark.parametrize("fill", [False, True])
def test_negative_depths_are_clamped_and_recorded(small, monkeypatch, fill):
  """Where the network's raw depth is negative the API clamps it to 0 and marks the pixel in `clamped`; such a
  pixel is not `valid`, so it is NaN unless fill_unsupported."""
  sparse = _sparse((16, 24), seed=3)
  forward = small.forward

  def shifted(x):
    raw = forward(x)
    return {**raw, "depth": raw["depth"] - 30.0}
  monkeypatch.setattr(small, "forward", shifted)
  monkeypatch.setattr(small, "fill_unsupported", fill)
  out = small(sparse)
  raw = forward(sparse[None])["depth"][0] - 30.0
  assert out.support.all() and out.clamped.any() and (out.depth[out.valid] >= 0).all()
  np.testing.assert_array_equal(out.clamped, raw < 0)
  np.testing.assert_array_equal(out.valid, raw >= 0)
  np.testing.assert_array_equal(out.depth, np.maximum(raw, 0) if fill else np.where(raw >= 0, raw, np.nan))


def test_support_marks_pixels_near_a_measurement(small):
  sparse = np.zeros((16, 24), np.float32)
  sparse[8, 2] = 10.0
  out = small(sparse)
  radius = completer_lib.SUPPORT_RADIUS_PX
  assert out.support[8, 2 + radius] and not out.support[8, 3 + radius] and out.support[0, 0]
  assert np.isfinite(out.output_confidence).all()


def _band(shape=(16, 24), rows=4, seed=5):
  """A LiDAR-like frame: measurements (30 %) only in the bottom `rows` rows, none above (the sky)."""
  sparse = np.zeros(shape, np.float32)
  sparse[-rows:] = _sparse((rows, shape[1]), seed=seed)
  return sparse


def test_pixels_without_support_are_nan_unless_filled(small):
  """Issue 50: every pixel without input support came out as a depth (0 m or the network's extrapolation) that no
  output marked. By default depth is NaN exactly outside `valid` = support & ~clamped (a measurement within 8 px:
  here the rows more than 8 rows above the band); fill_unsupported keeps today's dense output (clamped at 0)."""
  sparse = _band()  # rows 12-15 hold measurements: rows 0-3 are more than 8 px away
  out = small(sparse)
  r = completer_lib.SUPPORT_RADIUS_PX
  assert np.isnan(out.depth[:12 - r]).all(), "a depth where no measurement lies within 8 px"
  expected_support = np.zeros(sparse.shape, bool)
  expected_support[12 - r:] = True
  np.testing.assert_array_equal(out.support, expected_support)
  np.testing.assert_array_equal(out.valid, out.support & ~out.clamped)
  np.testing.assert_array_equal(np.isnan(out.depth), ~out.valid)
  assert (out.depth[out.valid] >= 0).all()
  dense = completer_lib.Completer(small.model, small.variables, loss=small.loss, fill_unsupported=True)(sparse)
  raw = small.forward(sparse[None])["depth"][0]
  np.testing.assert_array_equal(dense.depth, np.maximum(raw, 0))  # every pixel a number, as before
  np.testing.assert_array_equal(dense.depth[out.valid], out.depth[out.valid])
  np.testing.assert_array_equal(dense.valid, out.valid)


def test_support_mask_is_the_chebyshev_ball_of_the_measurements():
  """`support_mask` (one definition for the Completer, predict, the bag command and export) against a direct
  evaluation of its definition: some measurement at Chebyshev distance <= SUPPORT_RADIUS_PX."""
  rng = np.random.default_rng(6)
  sparse = np.where(rng.random((2, 23, 41)) < 0.004, 7.0, 0.0).astype(np.float32)
  sparse[1, 0, 0] = np.nan  # no measurement
  got = np.asarray(completer_lib.support_mask(jax.numpy.asarray(sparse)[..., None]))[..., 0]
  r = completer_lib.SUPPORT_RADIUS_PX
  expected = np.zeros(sparse.shape, bool)
  for b, i, j in zip(*np.nonzero(sparse > 0)):
    expected[b, max(i - r, 0):i + r + 1, max(j - r, 0):j + r + 1] = True
  assert 0.2 < expected.mean() < 0.9
  np.testing.assert_array_equal(got, expected)


def test_a_probabilistic_model_gives_sigma_in_metres():
  """The recommended model (the default): sigma = 1 / sqrt(precision) of the network's raw output (the forward
  pass itself is held to the low-level path by the test above; one compilation of this larger model here)."""
  c = pncnn_jax.Completer.from_pretrained()
  assert c.name == completer_lib.RECOMMENDED and c.has_sigma and pncnn_jax.Completion is completer_lib.Completion
  sparse = _sparse((16, 24), seed=4)
  out = c(sparse)
  raw = c.forward(sparse[None])
  prec = losses.precision_of(raw["confidence"][0], c.loss)
  np.testing.assert_allclose(out.sigma, 1 / np.sqrt(prec), rtol=1e-5)
  np.testing.assert_array_equal(out.depth, np.maximum(raw["depth"][0], 0))
  assert out.sigma.dtype == np.float32 and (out.sigma > 0).all() and (out.input_confidence >= 0).all()
  # Issue 50: sigma is NaN where depth is (outside the support: here the rows above a band of measurements).
  band = c(_band())
  assert (~band.valid).any() and band.valid.any()
  np.testing.assert_array_equal(np.isnan(band.sigma), ~band.valid)
  np.testing.assert_array_equal(np.isnan(band.depth), ~band.valid)


@pytest.mark.parametrize("kw, message", [
    ({"fusion": "mean"}, "fusion and precision_scales need an ensemble"),
    ({"multiple": 0}, "pad multiple must be an integer >= 1"),
])
def test_bad_settings_are_one_line_errors(kw, message):
  with pytest.raises(ValueError, match=message):
    completer_lib.Completer.from_checkpoint(SMALL, **kw)


def test_the_package_door_exports_it():
  assert pncnn_jax.Completer is completer_lib.Completer and "Completer" in dir(pncnn_jax)


def _training_example(sensor=""):
  """One example of the shipped models' training stream (synthetic scenes, the 64x320 centre crop), with the
  training sensor ('') or another one of `pncnn_jax.data.sensors` (e.g. 'thin4': every 4th laser, 16 beams)."""
  from pncnn_jax import data  # pylint: disable=g-import-not-at-top
  it = data.make_iterator({"dataset": "synthetic", "split": "train", "crop": "center", "crop_height": 64,
                           "crop_width": 320, "batch_size": 1, "synthetic_size": 1, "num_epochs": 1,
                           "sensors": sensor, "num_threads": 1})
  return np.asarray(next(it)["sparse"])[0, ..., 0]


def test_the_density_warning_appears_for_a_thinned_input_and_not_for_a_training_like_one(small):
  """Every frame's input density is given; a frame outside the range the shipped model was trained on (its
  manifest's 'input_density', a 64-beam LiDAR's) warns once, naming the density, the range and the sensor."""
  from pncnn_jax.data import input_contract  # pylint: disable=g-import-not-at-top
  assert small.trained_density is not None and small.trained_density.trained_on == "synthetic 64-beam LiDAR"
  lo, hi = small.trained_density.low, small.trained_density.high
  native, thinned = _training_example(), _training_example("thin4")
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # the training sensor: no warning at all
    out = small(native)
  assert out.input_density == input_contract.input_density(native)[0] and lo <= out.input_density <= hi
  assert out.density_in_range is True
  with pytest.warns(completer_lib.InputDensityWarning) as caught:
    out = small(thinned, name="scan 7")
  assert len(caught) == 1 and out.density_in_range is False and out.input_density < lo / 2
  assert str(caught[0].message) == (
      f"scan 7: input density {completer_lib.density_text(out.input_density)} % is below the "
      f"{completer_lib.density_text(lo)}-{completer_lib.density_text(hi)} % this model was trained on (synthetic "
      "64-beam LiDAR): expect larger errors; see docs/deploy/sensors.md")
  with pytest.warns(completer_lib.InputDensityWarning, match=r"^input frame 1: input density"):
    batch = small(np.stack([native, thinned]))  # one warning, naming the frame outside
  np.testing.assert_array_equal(batch.density_in_range, [True, False])
  np.testing.assert_allclose(batch.input_density, input_contract.input_density(np.stack([native, thinned])))


def test_an_official_checkpoint_states_the_density_without_a_warning(shared_dir):
  """An official .pth.tar records no density range: the density is given, nothing is checked."""
  official = completer_lib.Completer.from_checkpoint(
      shared_dir / "reference" / "checkpoints" / "kitti_ncnn_conf_l1_checkpoint-9.pth.tar")
  assert official.trained_density is None
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    out = official(_training_example("thin4")[:32, :64])
  assert 0 < out.input_density < 0.05 and out.density_in_range is None


def test_trained_density_records_and_ensembles():
  """A manifest's record in another measure is not compared (unknown); an ensemble takes the range every member
  was trained on (the intersection of the seeds' slightly different ranges)."""
  good = {"measure": "rows_spanned", "low": 0.06, "high": 0.1, "trained_on": "x"}
  assert completer_lib.TrainedDensity.from_record(good) == completer_lib.TrainedDensity(0.06, 0.1, "x")
  for bad in (None, {**good, "measure": "pixels"}, {**good, "low": 0.2}, {**good, "high": "a"}):
    assert completer_lib.TrainedDensity.from_record(bad) is None
  members = ["synthetic:pncnn_masked", "synthetic:pncnn_masked_seed1"]
  ens = completer_lib.Completer.from_pretrained(",".join(members))
  ranges = [completer_lib.Completer.from_pretrained(m).trained_density for m in members]
  assert ens.trained_density == completer_lib.TrainedDensity(max(r.low for r in ranges),
                                                             min(r.high for r in ranges), "synthetic 64-beam LiDAR")
  assert completer_lib.TrainedDensity.common([ranges[0], None]) is None
