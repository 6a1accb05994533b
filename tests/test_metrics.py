"""Metrics: parity with the official KITTI/NYU metrics and eval_ause (golden files), and
derivations for the Gustafsson AUSE, AUCE and NLL (docs/SPEC.md §7, §8)."""

import functools
import json
import math
import statistics

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax import losses, metrics

from conftest import GOLDEN, load_npz, nchw_to_nhwc

RTOL = 1e-5  # metrics, reference/README.md
AUSE_ATOL = 1e-6
CASE_A, CASE_B, CASE_C = ("kitti_ncnn_conf_l1__kitti4_f01", "kitti_pncnn_rand0__kitti4_f01",
                          "nyu_ncnn_conf_l1__nyu_480x640")
REAL_FILES = [f"torch_kitti_image_0{i}__kitti_ncnn_conf_l{j}" for i in (2, 3) for j in (1, 2)]


@functools.lru_cache(maxsize=None)
def golden(relpath: str) -> dict:
  return load_npz(GOLDEN / relpath)


def pred_target_conf(g):
  out = nchw_to_nhwc(g["out"])
  return out[..., 0:1], nchw_to_nhwc(g["target"]), out[..., 1:2]


@pytest.fixture(autouse=True)
def _needs_shared(shared_dir):
  del shared_dir


# --- depth error metrics --------------------------------------------------------------------------


def _assert_metrics(got, g, prefix, keys):
  for k in keys:
    got_k = np.asarray(got[k]).item()  # scalar or a batch of one image
    np.testing.assert_allclose(got_k, float(g[prefix + k]), rtol=RTOL, err_msg=k)


@pytest.mark.parametrize("case", [CASE_A, CASE_B, CASE_C])
def test_batch_metrics_match_official(case):
  """`metric_batch`: the official metrics on the whole 2-image batch, pixels pooled."""
  g = golden(f"metrics/{case}.npz")
  pred, target, _ = pred_target_conf(g)
  nyu = case.startswith("nyu")
  fn, keys = (metrics.nyu_metrics, metrics.NYU_METRICS) if nyu else (metrics.kitti_metrics, metrics.KITTI_METRICS)
  got = jax.jit(functools.partial(fn, pooled=True))(pred, target)
  assert set(got) == set(keys) | {"num_valid"}
  assert got["mae"].shape == ()
  assert int(got["num_valid"]) == g["all_err"].size
  _assert_metrics(got, g, "metric_batch/", keys)


@pytest.mark.parametrize("case", [CASE_A, CASE_B, CASE_C])
def test_per_image_then_mean_matches_average_meter(case):
  """`metric_avgmeter`: per image (batch 1) then AverageMeter; also the masked_l1 loss meter."""
  g = golden(f"metrics/{case}.npz")
  pred, target, _ = pred_target_conf(g)
  nyu = case.startswith("nyu")
  fn, keys = (metrics.nyu_metrics, metrics.NYU_METRICS) if nyu else (metrics.kitti_metrics, metrics.KITTI_METRICS)
  per_image = fn(pred, target)
  assert per_image["rmse"].shape == (pred.shape[0],)
  acc = metrics.MeanAccumulator()
  acc.update(per_image)
  for i in range(pred.shape[0]):  # the loss meter: one loss value per image of batch 1
    acc.update({"loss": losses.masked_l1(pred[i:i + 1], target[i:i + 1])}, weight=1)
  res = acc.result()
  _assert_metrics(res, g, "metric_avgmeter/", keys)
  np.testing.assert_allclose(res["loss"], g["metric_avgmeter/loss(masked_l1)"], rtol=RTOL)
  assert acc.num_valid == g["all_err"].size and acc.num_skipped == 0


def test_per_image_values_match_summary_json():
  summary = json.loads((GOLDEN / "metrics/metrics_summary.json").read_text())
  want = summary[CASE_A]["metrics_per_image"]
  pred, target, _ = pred_target_conf(golden(f"metrics/{CASE_A}.npz"))
  got = metrics.kitti_metrics(pred, target)
  for i, w in enumerate(want):
    for k in metrics.KITTI_METRICS:
      np.testing.assert_allclose(float(got[k][i]), w[k], rtol=RTOL, err_msg=f"image {i} {k}")


@pytest.mark.parametrize("fname", REAL_FILES)
def test_real_frame_metrics_match_official(fname):
  g = golden(f"real/{fname}.npz")
  pred, target, _ = pred_target_conf(g)
  _assert_metrics(metrics.kitti_metrics(pred, target), g, "metric/", metrics.KITTI_METRICS)


def test_units_and_definitions_by_hand():
  """pred 10.0 m vs target 10.1 m: 100 mm, 1e4 mm^2, |1/10 - 1/10.1| /m = 0.990099 /km."""
  pred = jnp.full((1, 2, 2, 1), 10.0)
  target = jnp.array([10.1, 10.1, 0.0, 10.1]).reshape(1, 2, 2, 1)
  k = metrics.kitti_metrics(pred, target)
  want = {"mae": 100.0, "rmse": 100.0, "mse": 1e4, "imae": 1000 * (1 / 10 - 1 / 10.1),
          "irmse": 1000 * (1 / 10 - 1 / 10.1), "absrel": 0.1 / 10.1, "delta1": 100.0}
  for key, w in want.items():
    np.testing.assert_allclose(float(k[key][0]), w, rtol=2e-4, err_msg=key)
  n = metrics.nyu_metrics(pred, target)
  assert set(n) == set(metrics.NYU_METRICS) | {"num_valid"}
  np.testing.assert_allclose(float(n["mae"][0]), 0.1, rtol=2e-4)
  np.testing.assert_allclose(float(n["mse"][0]), 0.01, rtol=4e-4)
  assert int(n["num_valid"][0]) == 3


def test_delta_is_strict_and_negative_predictions_count_as_hits():
  # ratios exactly 1.25 (not < 1.25), 1.5625 (= 1.25^2, not < 1.25^2), and a negative prediction.
  pred = jnp.array([1.25, 1.5625, -3.0, 1.0]).reshape(1, 2, 2, 1)
  target = jnp.ones((1, 2, 2, 1))
  m = metrics.kitti_metrics(pred, target, pooled=True)
  np.testing.assert_allclose([m["delta1"], m["delta2"], m["delta3"]], [50.0, 75.0, 100.0])


def test_per_image_equals_pooled_single_images_and_empty_image_is_nan():
  rng = np.random.default_rng(0)
  pred = rng.uniform(1, 80, (3, 8, 12, 1)).astype(np.float32)
  target = (pred * rng.uniform(0.7, 1.3, pred.shape) * (rng.random(pred.shape) < 0.3))
  target = target.astype(np.float32)
  target[1] = 0.0  # no ground truth in image 1
  per = metrics.kitti_metrics(pred, target)
  for i in (0, 2):
    one = metrics.kitti_metrics(pred[i:i + 1], target[i:i + 1], pooled=True)
    for k in metrics.KITTI_METRICS:
      np.testing.assert_allclose(per[k][i], one[k], rtol=1e-6, err_msg=k)
  assert int(per["num_valid"][1]) == 0 and all(np.isnan(per[k][1]) for k in metrics.KITTI_METRICS)
  acc = metrics.MeanAccumulator()
  acc.update(per)
  assert acc.num_skipped == 1
  np.testing.assert_allclose(acc.result()["mae"], (per["mae"][0] + per["mae"][2]) / 2, rtol=1e-6)


def test_metric_bad_input_errors():
  with pytest.raises(ValueError, match=r"kitti_metrics: `pred` must be \(B, H, W, 1\)"):
    metrics.kitti_metrics(jnp.ones((4, 4)), jnp.ones((4, 4)))
  with pytest.raises(ValueError, match="MeanAccumulator.result: no samples"):
    metrics.MeanAccumulator().result()


def test_error_by_distance_bins_by_hand_and_splits_the_pooled_mae():
  # One flagged point at (2, 2) of a 5x7 image; errors chosen per pixel, two pixels without ground truth.
  flagged = np.zeros((1, 5, 7, 1), bool)
  flagged[0, 2, 2] = True
  target = np.full((1, 5, 7, 1), 10.0, np.float32)
  target[0, 0, 6] = target[0, 4, 0] = 0.0
  err = np.arange(35, dtype=np.float32).reshape(1, 5, 7, 1) / 100.0
  acc = metrics.ErrorByDistance(edges_px=(0.0, 1.0, 2.0, 4.0))
  acc.update(target + err, target, flagged)
  r = acc.result()
  yy, xx = np.mgrid[:5, :7]
  dist = np.hypot(yy - 2, xx - 2)
  valid = target[0, ..., 0] > 0
  e = err[0, ..., 0].astype(np.float64)
  for k, (lo, hi) in enumerate([(0, 1), (1, 2), (2, 4), (4, np.inf)]):
    m = valid & (dist >= lo) & (dist < hi)
    assert r["share"][k] == pytest.approx(m.sum() / valid.sum())
    assert r["mae_mm"][k] == pytest.approx(1000 * e[m].mean(), rel=1e-6)
    assert r["rmse_mm"][k] == pytest.approx(1000 * np.sqrt((e[m] ** 2).mean()), rel=1e-6)
  assert r["mae_mm"][0] == pytest.approx(1000 * e[2, 2], rel=1e-6)  # distance 0: the flagged point itself
  assert r["pooled_mae_mm"] == pytest.approx(1000 * e[valid].mean(), rel=1e-6)
  assert sum(s * m for s, m in zip(r["share"], r["mae_mm"])) == pytest.approx(r["pooled_mae_mm"], rel=1e-9)
  assert r["num_pixels"] == 33


def test_error_by_distance_image_without_flagged_points_empty_bins_and_bad_input():
  target = np.ones((2, 4, 4, 1), np.float32)
  flagged = np.zeros_like(target, bool)
  flagged[1, 0, 0] = True  # image 1: every pixel within hypot(3, 3) < 5 px of it; image 0: no flagged point
  acc = metrics.ErrorByDistance()
  acc.update(target + 0.5, target, flagged)
  r = acc.result()
  assert r["share"][-1] == pytest.approx(0.5)  # image 0's 16 pixels, all in [20, inf)
  assert np.isnan(r["mae_mm"][4])  # [10, 20): no pixel
  assert sum(r["share"]) == pytest.approx(1.0) and r["pooled_mae_mm"] == pytest.approx(500.0)
  with pytest.raises(ValueError, match=r"ErrorByDistance.update: expected pred, target, flagged of one"):
    acc.update(np.ones((1, 4, 4, 1)), np.ones((1, 4, 4, 1)), np.ones((1, 4, 5, 1), bool))
  with pytest.raises(ValueError, match="edges_px must rise from 0"):
    metrics.ErrorByDistance(edges_px=(1.0, 2.0))
  with pytest.raises(ValueError, match="no valid pixels"):
    metrics.ErrorByDistance().result()


# --- AUSE -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("relpath", [f"metrics/{c}.npz" for c in (CASE_A, CASE_C)]
                         + [f"real/{f}.npz" for f in REAL_FILES])
def test_ause_pncnn_matches_official(relpath):
  g = golden(relpath)
  s = metrics.ause_pncnn(g["all_err"], g["all_var"])
  np.testing.assert_array_equal(s.fractions, g["ratio_removed"])
  np.testing.assert_allclose(s.oracle, g["rmse_by_err"], atol=1e-6)
  np.testing.assert_allclose(s.model, g["rmse_by_var"], atol=1e-6)
  np.testing.assert_allclose(s.ause, g["ause"], atol=AUSE_ATOL)
  np.testing.assert_allclose(s.ause, g["ause_stable_sort"], atol=AUSE_ATOL)


def test_ause_tie_dominated_case_within_tie_bounds():
  """Case B: var is almost constant (216k ties), so only the tie bounds are a tight golden."""
  g = golden(f"metrics/{CASE_B}.npz")
  lo, hi = g["ause_tie_bounds"]
  s = metrics.ause_pncnn(g["all_err"], g["all_var"])
  assert lo - 1e-7 <= s.ause <= hi + 1e-7
  np.testing.assert_allclose(
      metrics.ause_pncnn(g["all_err"], g["all_var"], tie_break="smaller_error_first").ause, lo,
      atol=AUSE_ATOL)
  np.testing.assert_allclose(
      metrics.ause_pncnn(g["all_err"], g["all_var"], tie_break="larger_error_first").ause, hi,
      atol=AUSE_ATOL)


def test_uncertainty_accumulator_pools_images_like_eval_ause():
  """Feeding case A image by image gives the official AUSE over the pooled valid pixels."""
  g = golden(f"metrics/{CASE_A}.npz")
  pred, target, conf = pred_target_conf(g)
  acc = metrics.UncertaintyAccumulator()
  for i in range(pred.shape[0]):
    acc.update(pred[i:i + 1], target[i:i + 1], conf[i:i + 1])
  res = acc.result()
  assert res["num_pixels"] == g["all_err"].size
  np.testing.assert_allclose(res["ause_pncnn"], g["ause"], atol=AUSE_ATOL)
  np.testing.assert_allclose(res["sparsification_pncnn"].model, g["rmse_by_var"], atol=1e-6)
  # Streaming AUCE/NLL equal the one-shot functions on the same pixels.
  sigma = metrics.sigma_from_precision(conf)
  np.testing.assert_allclose(res["auce"], metrics.auce(pred, sigma, target).auce, rtol=1e-12)
  np.testing.assert_allclose(res["nll"], metrics.mean_gaussian_nll(pred, sigma, target), rtol=1e-9)


def naive_ause(err_sq, key, descending, fractions, norm_model_by_max):
  """Brute force: a fresh sort and mean per fraction; float64 throughout."""
  err_sq = np.asarray(err_sq, np.float64)
  order = np.argsort(-key if descending else key, kind="stable")
  oracle, model = [], []
  for r in fractions:
    n = int((1.0 - r) * err_sq.size)
    oracle.append(math.sqrt(np.mean(np.sort(err_sq)[:n])))
    model.append(math.sqrt(np.mean(err_sq[order][:n])))
  oracle, model = np.array(oracle), np.array(model)
  oracle, model = oracle / oracle[0], model / (model.max() if norm_model_by_max else model[0])
  return np.trapezoid(model - oracle, fractions), model


def test_ause_both_definitions_match_brute_force():
  rng = np.random.default_rng(0)
  sigma = rng.uniform(0.1, 2.0, 5000)
  err_sq = (rng.standard_normal(5000) * sigma) ** 2
  sigma_noisy = sigma * rng.uniform(0.5, 2.0, 5000)  # informative but imperfect
  want, _ = naive_ause(err_sq, 1 / sigma_noisy**2, True, metrics.FRACTIONS_PNCNN, True)
  np.testing.assert_allclose(metrics.ause_pncnn(err_sq, 1 / sigma_noisy**2).ause, want, atol=1e-12)
  want, _ = naive_ause(err_sq, sigma_noisy, False, np.arange(0, 1, 0.01), False)
  np.testing.assert_allclose(metrics.ause_gustafsson(err_sq, sigma_noisy).ause, want, atol=1e-12)


def test_ause_perfect_uncertainty_is_zero():
  rng = np.random.default_rng(1)
  err_sq = rng.exponential(1.0, 2000)
  assert metrics.ause_gustafsson(err_sq, np.sqrt(err_sq)).ause == pytest.approx(0.0, abs=1e-15)
  assert metrics.ause_pncnn(err_sq, 1 / err_sq).ause == pytest.approx(0.0, abs=1e-7)  # sqrt in f32


def test_definitions_coincide_when_model_curve_never_rises():
  """docs/SPEC.md §8.3: max-normalisation = first-value normalisation when the max is at r = 0."""
  g = golden(f"metrics/{CASE_A}.npz")
  assert np.argmax(g["rmse_by_var"]) == 0  # precondition of the derivation
  gus = metrics.ause_gustafsson(g["all_err"], metrics.sigma_from_precision(g["all_var"]))
  np.testing.assert_allclose(gus.ause, g["ause"], atol=AUSE_ATOL)


def test_pncnn_ause_is_smaller_when_model_curve_rises():
  """Anti-informative uncertainty: the model curve rises, the max-normalisation shrinks it."""
  rng = np.random.default_rng(2)
  err_sq = rng.exponential(1.0, 3000)
  sigma = 1 / (1 + np.sqrt(err_sq))  # the largest errors look the most certain
  p = metrics.ause_pncnn(err_sq, 1 / sigma**2)
  gus = metrics.ause_gustafsson(err_sq, sigma)
  assert p.model.argmax() > 0 and gus.model.max() > 1
  _, naive_model = naive_ause(err_sq, sigma, False, np.arange(0, 1, 0.01), False)
  assert p.ause < gus.ause
  # With the same order, pNCNN's model curve is Gustafsson's divided by its own maximum.
  np.testing.assert_allclose(p.model, naive_model / naive_model.max(), atol=1e-12)


def test_ause_bad_input():
  with pytest.raises(ValueError, match="must be 1-D of one length"):
    metrics.ause_pncnn(np.ones(5), np.ones(4))
  with pytest.raises(ValueError, match="tie_break"):
    metrics.ause_gustafsson(np.ones(5), np.ones(5), tie_break="random")
  with pytest.raises(ValueError, match="empty"):
    metrics.ause_pncnn(np.ones(0), np.ones(0))


# --- AUCE and NLL ---------------------------------------------------------------------------------


def _gaussian_sample(n=200_000, seed=3):
  rng = np.random.default_rng(seed)
  mu = rng.uniform(5, 60, n)
  sigma = rng.uniform(0.1, 3.0, n)
  target = mu + sigma * rng.standard_normal(n)
  target[rng.random(n) < 0.2] = 0.0  # invalid pixels are ignored
  return mu, sigma, target


def test_auce_calibrated_and_overconfident():
  mu, sigma, target = _gaussian_sample()
  cal = metrics.auce(mu, sigma, target)
  assert cal.coverage.shape == (99,) and np.all(np.diff(cal.coverage) <= 0)
  assert cal.auce < 0.005  # sampling noise only
  # sigma x 0.1: coverage(alpha) = P(|Z| <= 0.1 z_alpha) = 2 Phi(0.1 z_alpha) - 1.
  over = metrics.auce(mu, 0.1 * sigma, target)
  nd = statistics.NormalDist()
  alphas = np.arange(0.01, 1.0, 0.01)
  expected_cov = np.array([2 * nd.cdf(0.1 * nd.inv_cdf(1 - a / 2)) - 1 for a in alphas])
  want = np.trapezoid(np.abs(expected_cov - (1 - alphas)), alphas)
  assert want > 0.4
  np.testing.assert_allclose(over.auce, want, atol=5e-3)
  np.testing.assert_allclose(over.under_coverage, want, atol=5e-3)  # all under-coverage


def test_mean_gaussian_nll_and_relation_to_loss():
  mu, sigma, target = _gaussian_sample(n=50)
  v = target > 0
  want = np.mean([-math.log(statistics.NormalDist(m, s).pdf(t))
                  for m, s, t in zip(mu[v], sigma[v], target[v])])
  np.testing.assert_allclose(metrics.mean_gaussian_nll(mu, sigma, target), want, rtol=1e-10)
  shape = (1, 5, 10, 1)
  loss = losses.gaussian_nll(*(jnp.asarray(a.reshape(shape), jnp.float32)
                               for a in (mu, 1 / sigma**2, target)))
  np.testing.assert_allclose((float(loss) + math.log(2 * math.pi)) / 2, want, rtol=1e-5)


# -------------------------------------------------------------------------------------------------
# KITTI devkit conventions (issue 13.10): figures worked out by hand from the devkit's rules
# -------------------------------------------------------------------------------------------------

# A 4 x 6 prediction [m], 0 = missing, and five ground-truth pixels. The devkit's fill:
#   row 1 [0 2 0 0 4 0]: left end <- first valid 2; the inner gap between 2 and 4 <- min = 2; right end <- last
#                        valid 4                                                   -> [2 2 2 2 4 4]
#   row 3 [5 0 3 0 0 0]: inner gap between 5 and 3 <- 3; right end <- 3            -> [5 3 3 3 3 3]
#   row 0 (empty, above the first non-empty row) <- row 1; row 2 (empty, between non-empty rows) stays missing,
#   which the devkit scores as a depth of -1 m.
DEVKIT_PRED = np.array([[0, 0, 0, 0, 0, 0], [0, 2, 0, 0, 4, 0], [0, 0, 0, 0, 0, 0], [5, 0, 3, 0, 0, 0]], np.float32)
DEVKIT_FILLED = np.array([[2, 2, 2, 2, 4, 4], [2, 2, 2, 2, 4, 4], [-1] * 6, [5, 3, 3, 3, 3, 3]], np.float64)
DEVKIT_GT = {(0, 0): 2.5, (1, 2): 2.0, (1, 4): 5.0, (2, 0): 1.0, (3, 1): 4.0}  # filled p: 2, 2, 4, -1, 3


def _devkit_case():
  target = np.zeros_like(DEVKIT_PRED)
  for (v, u), t in DEVKIT_GT.items():
    target[v, u] = t
  return DEVKIT_PRED[None, ..., None], target[None, ..., None]


def test_kitti_devkit_fill_by_hand():
  np.testing.assert_array_equal(metrics.kitti_devkit_fill(DEVKIT_PRED), DEVKIT_FILLED)
  assert (metrics.kitti_devkit_fill(np.zeros((2, 3))) == -1).all()  # nothing to fill from
  np.testing.assert_array_equal(metrics.kitti_devkit_fill(np.array([[np.nan, 7.0, -3.0]])), [[7.0, 7.0, 7.0]])


def test_kitti_devkit_metrics_by_hand():
  pred, target = _devkit_case()
  got = metrics.kitti_devkit_metrics(pred, target)
  # |t - p| = 0.5, 0, 1, 2, 1 m; |1/t - 1/p| = 0.1, 0, 0.05, 2, 1/12 per m.
  assert got["num_valid"].tolist() == [5]
  assert got["devkit_mae"][0] == pytest.approx(1000 * 4.5 / 5, rel=1e-12)  # 900 mm
  assert got["devkit_rmse"][0] == pytest.approx(1000 * math.sqrt(6.25 / 5), rel=1e-12)  # 1118.03 mm
  assert got["devkit_imae"][0] == pytest.approx(1000 * (0.1 + 0.05 + 2 + 1 / 12) / 5, rel=1e-12)  # 446.67 1/km
  assert got["devkit_irmse"][0] == pytest.approx(1000 * math.sqrt((0.01 + 0.0025 + 4 + 1 / 144) / 5), rel=1e-12)
  # Our metrics (the reference's) score the missing pixels as depth 0: the same image has an infinite iMAE.
  ours = metrics.kitti_metrics(jnp.asarray(pred), jnp.asarray(target))
  assert float(ours["mae"][0]) == pytest.approx(1000 * (2.5 + 2.0 + 1 + 1.0 + 4.0) / 5, rel=1e-6)  # 2100 mm
  assert math.isinf(float(ours["imae"][0]))


def test_kitti_devkit_png_quantisation_by_hand():
  # 0.001 m is round(0.256) = 0 on the PNG grid (missing, filled with min(3, 5) = 3 m); 2.0019 m -> 512/256 = 2 m.
  pred = np.array([[3.0, 0.001, 5.0, 2.0019]], np.float32)[None, ..., None]
  target = np.array([[0.0, 4.0, 0.0, 2.0]], np.float32)[None, ..., None]
  raw = metrics.kitti_devkit_metrics(pred, target)
  q = metrics.kitti_devkit_metrics(pred, target, quantize=True)
  assert raw["devkit_mae"][0] == pytest.approx(1000 * (3.999 + 0.0019) / 2, rel=1e-6)
  assert q["devkit_mae"][0] == pytest.approx(1000 * (1.0 + 0.0) / 2, rel=1e-12)  # 500 mm
  assert q["devkit_irmse"][0] == pytest.approx(1000 * math.sqrt((1 / 4 - 1 / 3) ** 2 / 2), rel=1e-12)


def test_kitti_devkit_metrics_agree_with_ours_without_missing_predictions():
  rng = np.random.default_rng(0)
  pred = rng.uniform(2, 60, (2, 8, 10, 1)).astype(np.float32)
  target = np.where(rng.random((2, 8, 10, 1)) < 0.3, rng.uniform(2, 60, (2, 8, 10, 1)), 0).astype(np.float32)
  dev = metrics.kitti_devkit_metrics(pred, target)
  ours = metrics.kitti_metrics(jnp.asarray(pred), jnp.asarray(target))
  for k in ("mae", "rmse", "imae", "irmse"):
    np.testing.assert_allclose(dev[f"devkit_{k}"], np.asarray(ours[k]), rtol=1e-5)
  empty = metrics.kitti_devkit_metrics(pred, np.zeros_like(target))  # no ground truth: NaN, as kitti_metrics
  assert np.isnan(empty["devkit_mae"]).all() and empty["num_valid"].tolist() == [0, 0]
  with pytest.raises(ValueError, match=r"\(B, H, W, 1\)"):
    metrics.kitti_devkit_metrics(pred[..., 0], target[..., 0])
