"""Tests of pncnn_jax.ensemble.members: fusion rules, MLE mode finding, vmapped members, ensemble training and
resume."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pncnn_jax import from_config, metrics, uncertainty
from pncnn_jax.checkpoints import manager
from pncnn_jax.ensemble import members as ensemble_members
from pncnn_jax.evaluate import depth as evaluate_depth
from pncnn_jax.nn import models
from pncnn_jax.training import config_fields, loop
from pncnn_jax.training import ensemble as training_ensemble
from pncnn_jax.training import step as training_step

from conftest import REPO


def members(*per_member):
  """K lists of P per-pixel values, one list per member -> a (K, 1, 1, P, 1) array."""
  return jnp.asarray(np.stack(per_member, axis=0)[:, None, None, :, None], jnp.float32)


# --------------------------------------------------------------------------------------------------------------
# Fusion rules on hand-made cases.


def test_mean_weighted_and_max_confidence_by_hand():
  mu = members([1.0, 1.0], [3.0, 2.0], [5.0, 6.0])  # 2 pixels, K = 3
  c = members([1.0, 0.5], [3.0, 2.0], [0.0, 2.0])
  np.testing.assert_allclose(ensemble_members.fuse_mean(mu)[0, 0, :, 0], [3.0, 3.0])
  # pixel 0: (1*1 + 3*3 + 0*5) / 4 = 2.5; pixel 1: (0.5*1 + 2*2 + 2*6) / 4.5 = 16.5 / 4.5
  np.testing.assert_allclose(ensemble_members.fuse_weighted_mean(mu, c)[0, 0, :, 0], [2.5, 16.5 / 4.5], rtol=1e-6)
  # pixel 0: member 1 (c=3); pixel 1: members 1 and 2 tie at c=2 -> the first, member 1 (2.0)
  np.testing.assert_array_equal(ensemble_members.fuse_max_confidence(mu, c)[0, 0, :, 0], [3.0, 2.0])


def test_weighted_mean_falls_back_to_mean_without_confidence():
  mu, c = members([1.0], [2.0], [6.0]), members([0.0], [0.0], [0.0])
  np.testing.assert_allclose(ensemble_members.fuse_weighted_mean(mu, c)[0, 0, :, 0], [3.0])
  mu = members([2.0], [2.1], [2.2])  # uniform weights, symmetric and unimodal (spread < v): mode 2.1
  np.testing.assert_allclose(ensemble_members.fuse_mle(mu, c)[0, 0, :, 0], [2.1], atol=1e-4)


def test_mixture_moments_by_hand():
  # mu = (1, 3), c = (1, 0.25) i.e. sigma^2 = (1, 4).
  mu, c = members([1.0], [3.0]), members([1.0], [0.25])
  mean, var = ensemble_members.mixture_moments(mu, c)  # uniform: 2, (1 + 4)/2 + ((1-2)^2 + (3-2)^2)/2 = 3.5
  np.testing.assert_allclose([mean.ravel()[0], var.ravel()[0]], [2.0, 3.5], rtol=1e-6)
  # confidence weights w = (0.8, 0.2): mean 1.4; aleatoric 0.8/1 + 0.2/0.25 = 1.6 (= K / sum c);
  # spread 0.8 * 0.4^2 + 0.2 * 1.6^2 = 0.64
  mean, var = ensemble_members.mixture_moments(mu, c, weighting="confidence")
  np.testing.assert_allclose([mean.ravel()[0], var.ravel()[0]], [1.4, 2.24], rtol=1e-6)
  # about another point f: var + (mean - f)^2 (max-confidence picks mu = 1)
  f, prec = ensemble_members.fuse(mu, c, "max_confidence")
  np.testing.assert_allclose([f.ravel()[0], 1.0 / prec.ravel()[0]], [1.0, 2.24 + 0.4**2], rtol=1e-6)
  f, prec = ensemble_members.fuse(mu, c, "mean")
  np.testing.assert_allclose(1.0 / prec.ravel()[0], 3.5, rtol=1e-6)


def test_zero_precision_member():
  mu, c = members([1.0], [2.0]), members([0.0], [1.0])
  _, var = ensemble_members.mixture_moments(mu, c)
  assert np.isinf(var.ravel()[0])  # uniform weights: a member with sigma = inf
  _, var = ensemble_members.mixture_moments(mu, c, weighting="confidence")
  np.testing.assert_allclose(var.ravel()[0], 1.0)  # it gets weight 0: only member 1, sigma^2 = 1
  assert ensemble_members.fuse_max_confidence(mu, c).ravel()[0] == 2.0


def test_bad_shapes_raise():
  with pytest.raises(ValueError, match=r"\(K, B, H, W, 1\)"):
    ensemble_members.fuse_weighted_mean(jnp.ones((2, 4, 4, 1)), jnp.ones((2, 4, 4, 1)))
  with pytest.raises(ValueError, match="unknown fusion rule"):
    ensemble_members.fuse(members([1.0]), members([1.0]), "median")
  with pytest.raises(ValueError, match="member 1 has leaf shapes"):
    ensemble_members.stack_trees([{"w": jnp.ones(3)}, {"w": jnp.ones(4)}])


# --------------------------------------------------------------------------------------------------------------
# MLE: the mixture mode.


def test_mle_two_clusters_by_hand():
  # Two tight symmetric pairs 4 m apart (v = 0.316 m): the far pair's density is ~exp(-80) at the other pair, so
  # each pair's mode is its midpoint; the heavier pair wins. The plain mean (3.0375 m) lies between them.
  mu = members([1.0, 1.0], [1.1, 1.1], [5.0, 5.0], [5.05, 5.05])
  c = members([1.0, 3.0], [1.0, 3.0], [3.0, 1.0], [3.0, 1.0])
  mode = ensemble_members.fuse_mle(mu, c)[0, 0, :, 0]
  np.testing.assert_allclose(mode, [5.025, 1.05], atol=1e-4)


def _grid_mode(mu, w, v):
  """Brute force global mode of sum_k w_k N(x; mu_k, v) per pixel (float64): a 1 mm grid over
  [min mu - 1, max mu + 1], then a 1 um grid within +-2 mm of the best point. Returns (mode, log p at the mode
  minus log p at the best other local maximum of the coarse grid)."""
  out, gaps = [], []
  for p in range(mu.shape[1]):
    g = np.arange(mu[:, p].min() - 1.0, mu[:, p].max() + 1.0, 1e-3)
    dens = np.sum(w[:, p, None] * np.exp(-0.5 * (g[None] - mu[:, p, None])**2 / v), axis=0)
    i = int(np.argmax(dens))
    fine = np.linspace(g[i] - 2e-3, g[i] + 2e-3, 4001)
    dfine = np.sum(w[:, p, None] * np.exp(-0.5 * (fine[None] - mu[:, p, None])**2 / v), axis=0)
    out.append(fine[np.argmax(dfine)])
    peaks = np.flatnonzero((dens[1:-1] > dens[:-2]) & (dens[1:-1] >= dens[2:])) + 1
    logs = np.sort(np.log(dens[peaks]))[::-1]
    gaps.append(logs[0] - logs[1] if len(logs) > 1 else np.inf)
  return np.array(out), np.array(gaps)


@pytest.mark.parametrize("spread", [0.15, 0.6, 2.5])  # overlapping, partly merged and multi-modal mixtures
def test_mle_matches_grid_search(spread):
  rng = np.random.default_rng(int(spread * 100))
  k, n, v = 4, 300, ensemble_members.DEFAULT_MLE_VARIANCE
  mu = rng.uniform(1.0, 60.0, (1, n)) + rng.normal(0.0, spread, (k, n))
  c = np.exp(rng.uniform(-3.0, 3.0, (k, n)))
  mode = np.asarray(ensemble_members.fuse_mle(members(*mu), members(*c))).ravel()
  ref, gap = _grid_mode(mu, c / c.sum(0), v)

  def log_p(x):
    w = c / c.sum(0)
    return np.log(np.sum(w * np.exp(-0.5 * (x[None] - mu)**2 / v), axis=0))

  clear = gap > 1e-3  # the global mode is unambiguous
  assert clear.mean() > 0.9
  np.testing.assert_allclose(mode[clear], ref[clear], atol=1e-3, rtol=0)  # to 1 mm
  assert np.all(log_p(mode) >= log_p(ref) - 1e-3)  # near-ties: a mode as likely as the grid's
  if spread > 1:
    assert np.mean(np.abs(mode - mu.mean(0)) > 0.1) > 0.3  # truly multi-modal: MLE differs from the mean


def test_mle_gradient_matches_autodiff():
  rng = np.random.default_rng(3)
  mu = jnp.asarray(rng.normal(5.0, 0.5, (4, 7)), jnp.float32)
  logw = jnp.log(jax.nn.softmax(jnp.asarray(rng.normal(size=(4, 7)), jnp.float32), axis=0))
  x = jnp.asarray(rng.normal(5.0, 0.7, (4, 7)), jnp.float32)
  ref = jax.grad(lambda x: jnp.sum(jax.nn.logsumexp(logw[None] - 0.5 * (x[:, None] - mu[None])**2 / 0.1, 1)))(x)
  _, got = ensemble_members._mixture_terms(x, mu, logw, 0.1)  # pylint: disable=protected-access
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------------------------
# Stacked members with vmap.


# The training and vmap tests use the no_var_est variant (pNCNN with one BatchNorm UNet, the NConv confidence as
# the precision): everything pncnn has to vmap (BatchNorm statistics included) at half its compile time.
SMALL_VARIANT = "no_var_est"


def test_init_ensemble_stacks_the_seeds_inits():
  ncnn = models.build_model("ncnn")  # 481 parameters: cheap to initialise eagerly
  stacked = ensemble_members.init_ensemble(ncnn, [3, 7, 11], (32, 64))
  assert ensemble_members.ensemble_size(stacked) == 3
  for s, got in zip([3, 7, 11], ensemble_members.unstack_tree(stacked)):
    jax.tree.map(np.testing.assert_array_equal, got, models.init_variables(ncnn, jax.random.key(s), (32, 64)))


def test_vmap_ensemble_equals_separate_members():
  model = models.build_model(SMALL_VARIANT)
  stacked = ensemble_members.init_ensemble(model, [3, 7, 11], (32, 64))
  # Perturbed BatchNorm statistics too, so that members differ in every part.
  stacked = jax.tree.map(
      lambda x: x + 0.01 * jnp.arange(x.shape[0], dtype=x.dtype).reshape((-1,) + (1,) * (x.ndim - 1)), stacked)
  sparse = _sparse(np.random.default_rng(0), (2, 32, 64, 1))
  out = jax.jit(functools.partial(ensemble_members.apply_ensemble, model, method="vmap"))(stacked, sparse)
  assert out.depth.shape == (3, 2, 32, 64, 1)
  apply = jax.jit(lambda v, x: model.apply(v, x, train=False))
  for k, v in enumerate(ensemble_members.unstack_tree(stacked)):
    want = apply(v, sparse)
    np.testing.assert_allclose(out.depth[k], want.depth, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(out.confidence[k], want.confidence, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["vmap", "map", "unroll"])
def test_member_map_shared_and_per_member_inputs(method):
  ncnn = models.build_model("ncnn")
  stacked = ensemble_members.init_ensemble(ncnn, [0, 1], (32, 64))
  sparse = _sparse(np.random.default_rng(1), (2, 2, 32, 64, 1))
  per = jax.jit(functools.partial(ensemble_members.apply_ensemble, ncnn, per_member=True, method=method))(stacked,
                                                                                                          sparse)
  shared = jax.jit(functools.partial(ensemble_members.apply_ensemble, ncnn, method=method))(stacked, sparse[0])
  apply = jax.jit(lambda v, x: ncnn.apply(v, x, train=False))
  for k, v in enumerate(ensemble_members.unstack_tree(stacked)):
    np.testing.assert_allclose(per.depth[k], apply(v, sparse[k]).depth, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(shared.depth[k], apply(v, sparse[0]).depth, rtol=2e-5, atol=2e-5)


def test_unrolled_members_run_the_single_models_program_and_bad_methods_fail():
  ncnn = models.build_model("ncnn")
  stacked = ensemble_members.init_ensemble(ncnn, [0, 1, 2], (32, 64))
  sparse = _sparse(np.random.default_rng(2), (1, 32, 64, 1))
  out = jax.jit(functools.partial(ensemble_members.apply_ensemble, ncnn, method="unroll"))(stacked, sparse)
  assert out.depth.shape == (3, 1, 32, 64, 1)
  apply = jax.jit(lambda v, x: ncnn.apply(v, x, train=False))
  for k, v in enumerate(ensemble_members.unstack_tree(stacked)):
    want = apply(v, sparse)
    np.testing.assert_allclose(out.depth[k], want.depth, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out.confidence[k], want.confidence, rtol=1e-6, atol=1e-7)
  with pytest.raises(ValueError, match="'auto', 'vmap', 'map' or 'unroll'"):
    ensemble_members.member_map(lambda v: v, "loop")


def _sparse(rng, shape):
  return np.where(rng.random(shape) < 0.1, rng.uniform(2, 50, shape), 0).astype(np.float32)


# --------------------------------------------------------------------------------------------------------------
# Member data streams.


def test_member_subsets_and_epochs():
  subs = [training_ensemble.member_subset(100, 0.3, s) for s in (0, 1)]
  assert [len(s) for s in subs] == [30, 30] and not np.array_equal(subs[0], subs[1])
  assert len(np.unique(subs[0])) == 30 and subs[0].max() < 100
  np.testing.assert_array_equal(subs[0], training_ensemble.member_subset(100, 0.3, 0))  # a function of the seed
  per_epoch = 30 // 4  # 7 batches, 2 examples dropped per epoch
  seen = np.concatenate([training_ensemble.member_example_indices(subs[0], 0, s, 4)[0] for s in range(per_epoch)])
  assert len(np.unique(seen)) == 28 and set(seen) <= set(subs[0])  # one epoch: distinct examples of the subset
  idx, epoch = training_ensemble.member_example_indices(subs[0], 0, per_epoch, 4)
  assert epoch == 1 and set(idx) <= set(subs[0])
  with pytest.raises(ValueError, match="fewer than one batch"):
    training_ensemble.member_example_indices(subs[0][:3], 0, 0, 4)
  with pytest.raises(ValueError, match="subset_fraction"):
    training_ensemble.member_subset(100, 0.0, 0)


# --------------------------------------------------------------------------------------------------------------
# Training: the vmapped step, and train_ensemble resuming exactly.


@pytest.mark.parametrize("method", ["vmap", "map"])
def test_ensemble_step_equals_separate_train_steps(method):
  # SGD, not Adam: Adam's first step is ~lr * sign(g), which turns float noise in near-zero gradients into
  # differences of 2 lr; with SGD the parameters compare at the gradients' precision.
  model = models.build_model("ncnn")  # no BatchNorm, but cheap to compile (BatchNorm: the resume test below)
  variables = ensemble_members.init_ensemble(model, [0, 1], (32, 64))
  tx = optax.sgd(0.01)
  state = training_ensemble.create_ensemble_state(model, variables, learning_rate=0.01)
  state = state.replace(tx=tx, opt_state=jax.vmap(tx.init)(state.params))
  rng = np.random.default_rng(1)
  target = rng.uniform(2, 40, (2, 2, 32, 64, 1)).astype(np.float32)
  sparse = np.where(rng.random(target.shape) < 0.2, target, 0).astype(np.float32)
  batch = {"sparse": sparse, "target": np.where(rng.random(target.shape) < 0.5, target, 0).astype(np.float32)}
  new, m = jax.jit(functools.partial(training_ensemble.ensemble_train_step, loss_name="masked_l1", method=method))(
      state, batch)
  assert m["loss"].shape == (2,) and np.all(np.asarray(new.step) == 1)
  step = jax.jit(functools.partial(training_step.train_step, loss_name="masked_l1"))
  for k, v in enumerate(ensemble_members.unstack_tree(variables)):
    single = training_step.create_train_state(model, v, learning_rate=0.01)
    single = single.replace(tx=tx, opt_state=tx.init(single.params))
    single, ms = step(single, {key: a[k] for key, a in batch.items()})
    np.testing.assert_allclose(m["loss"][k], ms["loss"], rtol=1e-5)
    got = jax.tree.map(lambda x, k=k: x[k], new.params)
    jax.tree.map(functools.partial(np.testing.assert_allclose, rtol=1e-5, atol=1e-7), got, single.params)
    assert not np.allclose(jax.tree.leaves(got)[0], jax.tree.leaves(v["params"])[0])  # it did move


def _tiny_config():
  c = from_config.load_config(
      f"{REPO / 'configs' / 'ensemble_synthetic.py'}:{SMALL_VARIANT}")
  c.ensemble.num_members = 2
  c.ensemble.rules = ("mean", "weighted_mean", "max_confidence", "mle")
  c.ensemble.mle_steps = 20
  c.data.train_crop_height, c.data.train_crop_width = 32, 64
  c.data.eval_crop_height, c.data.eval_crop_width = 32, 64
  c.data.synthetic_size, c.data.eval_synthetic_size = 8, 2
  c.batch_size, c.eval_batch_size, c.num_eval_batches = 2, 2, 1  # batch 2 over the 2 host devices
  c.num_epochs, c.lr_decay_epochs = 1, 1  # 8 // 2 = 4 steps
  c.checkpoint_every_steps, c.log_every_steps, c.progress_bar = 2, 1, False
  return c


# The end-to-end tests below: one worker, so that the run trained once (`trained_ensemble`) and the compiled steps
# serve them all.
TRAINING = pytest.mark.xdist_group("ensemble_training")


@pytest.fixture(scope="module")
def trained_ensemble(tmp_path_factory):
  """A finished tiny ensemble run (`_tiny_config`: 4 steps in one go, then evaluation): (workdir, summary)."""
  wd = tmp_path_factory.mktemp("ensemble") / "a"
  return wd, loop.train_and_evaluate(_tiny_config(), wd)


@TRAINING
@pytest.mark.slow  # end-to-end: train, stop, resume, evaluate (~30 s on an idle 2-core machine)
def test_train_ensemble_resumes_exactly(tmp_path, trained_ensemble):
  config = _tiny_config()
  a, summary = trained_ensemble
  rows = summary["rows"]
  assert list(rows) == ["member 0", "member 1", "mean", "weighted_mean", "max_confidence", "mle"]
  assert all(np.isfinite(r["rmse"]) and 0 <= r["ause_pncnn"] <= 1 for r in rows.values())
  assert rows["mean"]["num_images"] == 2
  assert loop.train_and_evaluate(config, tmp_path / "b", stop_after_steps=2) == {}  # "killed" after step 2
  rows_b = loop.train_and_evaluate(config, tmp_path / "b")["rows"]  # resumes at step 2
  with manager.Checkpointer(a, read_only=True) as ca, \
       manager.Checkpointer(tmp_path / "b", async_save=False) as cb:
    assert ca.all_steps() == cb.all_steps() == [2, 4]
    (ta, meta), (tb, _) = ca.restore(4), cb.restore(4)
  assert meta["ensemble_size"] == 2 and meta["seeds"] == [0, 1]
  jax.tree.map(np.testing.assert_array_equal, ta, tb)
  assert rows_b["mle"]["rmse"] == rows["mle"]["rmse"]
  variables, _ = ensemble_members.load_ensemble(a)  # an ensemble workdir loads stacked
  assert ensemble_members.ensemble_size(variables) == 2
  # members differ (own seeds, own data) and were trained
  p = variables["params"]["nconv"]
  leaf = jax.tree.leaves(p)[0]
  assert not np.allclose(leaf[0], leaf[1])


@TRAINING
@pytest.mark.slow  # end-to-end: two epochs of the tiny ensemble (~30 s on an idle 2-core machine)
def test_train_ensemble_keeps_the_best_checkpoint(tmp_path):
  """Every validation ranks its checkpoint by the RMSE of `ensemble_members.select_rule`; the best one is kept beyond
  max_to_keep, as for a single model."""
  config = _tiny_config()  # its programs are the shared run's (`trained_ensemble`): only the run's length differs
  config.num_epochs, config.max_to_keep = 2, 1  # validations at steps 4 and 8
  config.checkpoint_every_steps = -1
  config.ensemble.select_rule = "max_confidence"
  summary = loop.train_and_evaluate(config, tmp_path)
  val = {r["step"]: r["rmse"] for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())
         if r["split"] == "val"}
  assert sorted(val) == [4, 8] and summary["val"]["rmse"] == val[8] == summary["rows"]["max_confidence"]["rmse"]
  with manager.Checkpointer(tmp_path, async_save=False) as c:
    best, steps = c.best_step(), c.all_steps()
    assert best == min(val, key=val.get) and c.metrics(best)["rmse"] == val[best]
  assert steps == sorted({best, 8})  # the latest (max_to_keep=1) and the best
  assert (tmp_path / "ensemble_eval.md").read_text().startswith("| member / fusion |")


@TRAINING
def test_train_ensemble_refuses_a_workdir_of_another_variant(trained_ensemble):
  wd, _ = trained_ensemble
  other = from_config.load_config(f"{REPO / 'configs' / 'ensemble_synthetic.py'}"
                                 ":ncnn")
  before = sorted(p.relative_to(wd) for p in wd.rglob("*"))
  with pytest.raises(ValueError, match=f"holds a run of variant '{SMALL_VARIANT}', but config.variant is 'ncnn'"):
    loop.train_and_evaluate(other, wd)
  assert sorted(p.relative_to(wd) for p in wd.rglob("*")) == before  # refused before anything was written


# --------------------------------------------------------------------------------------------------------------
# Calibrated fusion: per-member precision scales.


def test_precision_scales_are_each_members_maximum_likelihood_scale():
  target = jnp.asarray([2.0, 4.0, 6.0, 0.0])[None, None, :, None]  # the last pixel has no ground truth
  mu = members([3.0, 4.0, 4.0, 99.0], [2.5, 4.5, 6.5, -5.0])  # residuals (1, 0, -2) and (0.5, 0.5, 0.5)
  c = members([2.0, 1.0, 0.5, 7.0], [4.0, 4.0, 4.0, 1e9])
  sums, count = jax.device_get(ensemble_members.calibration_sums(mu, c, target))
  np.testing.assert_allclose(sums, [2.0 + 0.0 + 2.0, 3 * 4.0 * 0.25])  # sum c r^2 over the valid pixels only
  assert count == 3
  scales = ensemble_members.precision_scales(sums, count)
  np.testing.assert_allclose(scales, [3 / 4.0, 3 / 3.0])
  for k in range(2):  # the Gaussian log-likelihood of s * c_k is largest at s_k
    r2, ck = np.square(np.asarray(mu[k] - target)).ravel()[:3], np.asarray(c[k]).ravel()[:3]
    loglik = lambda s, r2=r2, ck=ck: np.sum(0.5 * np.log(s * ck) - 0.5 * s * ck * r2)
    assert loglik(scales[k]) > max(loglik(0.9 * scales[k]), loglik(1.1 * scales[k]))


def test_precision_scales_refuse_what_cannot_be_calibrated():
  with pytest.raises(ValueError, match="no valid target pixel"):
    ensemble_members.precision_scales([1.0, 2.0], 0)
  with pytest.raises(ValueError, match=r"members \[0, 2\] have a weighted squared error sum of \[0.0, inf\]"):
    ensemble_members.precision_scales([0.0, 2.0, np.inf], 10)
  with pytest.raises(ValueError, match="target must be"):
    ensemble_members.calibration_sums(members([1.0, 2.0]), members([1.0, 1.0]), jnp.ones((1, 1, 3, 1)))


def test_calibrated_rows_rescale_the_precisions_and_nothing_else():
  model = models.build_model(SMALL_VARIANT)
  loss_name = models.VARIANTS[SMALL_VARIANT].loss
  stacked = ensemble_members.init_ensemble(model, [3, 7], (32, 64))
  rng = np.random.default_rng(0)
  batches = [{"sparse": _sparse(rng, (2, 32, 64, 1)), "target": rng.uniform(2, 50, (2, 32, 64, 1)).astype(np.float32)}
             for _ in range(2)]
  rules = ("mean", "weighted_mean", "max_confidence")
  evaluate = functools.partial(ensemble_members.evaluate_ensemble, model, stacked, loss_name=loss_name, rules=rules)
  raw = evaluate(batches)
  assert list(raw) == ["member 0", "member 1", *rules]
  ones = evaluate(batches, precision_scales=[1.0, 1.0])  # scale 1: the calibrated rows are the raw ones
  assert list(ones) == list(raw) + [n + ensemble_members.CALIBRATED for n in raw]
  for name in raw:
    assert ones[name] == raw[name] == ones[name + ensemble_members.CALIBRATED]
  scales = ensemble_members.fit_precision_scales(model, stacked, batches, loss_name=loss_name)
  assert scales.shape == (2,) and np.all(scales > 0) and not np.allclose(scales, 1.0)
  fitted = evaluate(batches, precision_scales=scales)
  for k in range(2):  # fitted on these pixels: the maximum-likelihood scale lowers each member's NLL
    raw_k, cal_k = fitted[f"member {k}"], fitted[f"member {k}" + ensemble_members.CALIBRATED]
    assert cal_k["nll"] < raw_k["nll"]
    for key in ("mae", "rmse", "imae", "irmse"):  # the depth is unchanged
      assert cal_k[key] == raw_k[key], key
    for key in ("ause_pncnn", "ause_gustafsson"):  # so is the ranking, but for float32 rounding of near-ties
      np.testing.assert_allclose(cal_k[key], raw_k[key], rtol=1e-4, err_msg=key)
  common = evaluate(batches, precision_scales=[2.5, 2.5])  # one scale for all: the same weights and picks
  for r in rules:
    for key in ("mae", "rmse"):
      np.testing.assert_allclose(common[r + ensemble_members.CALIBRATED][key], raw[r][key], rtol=1e-6)
  assert fitted["max_confidence" + ensemble_members.CALIBRATED]["rmse"] != raw["max_confidence"]["rmse"]
  with pytest.raises(ValueError, match=r"precision_scales must be 2 finite values > 0 \(one per member\)"):
    evaluate(batches, precision_scales=[1.0, 0.0])


def _evaluate_config(config, variables):
  """The 'ensemble' evaluator of `config` (its rules and calibration split) on its eval split."""
  from pncnn_jax.evaluate import protocol  # pylint: disable=g-import-not-at-top
  evaluator = protocol.evaluator_for(config)
  assert isinstance(evaluator, ensemble_members.EnsembleEvaluator)
  model = from_config.build_model(config) if not isinstance(variables, protocol.LoadedModel) else variables.model
  variables = variables.variables if isinstance(variables, protocol.LoadedModel) else variables
  return evaluator.run(model, variables, from_config.eval_iterator(config), max_batches=config.num_eval_batches).rows


def test_ensemble_config_evaluates_calibrated_rows_fitted_on_another_split():
  config = _tiny_config()
  config.ensemble.rules = ("mean", "max_confidence")
  config.ensemble.calibration_split = "train"  # evaluated on 'val'
  config_fields.check_config(config, training=False)
  stacked = ensemble_members.init_ensemble(models.build_model(SMALL_VARIANT), [0, 1], (32, 64))
  rows = _evaluate_config(config, stacked)
  names = ["member 0", "member 1", "mean", "max_confidence"]
  assert list(rows) == names + [n + ensemble_members.CALIBRATED for n in names]
  config.ensemble.calibration_split = ""
  raw = _evaluate_config(config, stacked)
  assert list(raw) == names and all(raw[n] == rows[n] for n in names)
  assert rows["member 0" + ensemble_members.CALIBRATED]["nll"] != raw["member 0"]["nll"]


def test_ensemble_config_evaluates_shipped_members_as_they_were_trained():
  """A list of shipped names is an ensemble; `mask_input_confidence` comes from the members (the config's pncnn is
  unmasked), so member 0's row is that model evaluated alone; members trained with and without it are refused."""
  from pncnn_jax import evaluate  # pylint: disable=g-import-not-at-top
  from pncnn_jax.checkpoints import loader  # pylint: disable=g-import-not-at-top
  config = from_config.load_config(f"{REPO / 'configs' / 'ensemble_synthetic.py'}"
                                  ":pncnn")
  config.ensemble.rules, config.ensemble.mle_steps = ("mean",), 5
  config.data.eval_crop_height, config.data.eval_crop_width = 64, 96
  config.data.eval_synthetic_size, config.eval_batch_size = 4, 4
  evaluator = evaluate.evaluator_for(config)
  members = evaluator.load(config, "synthetic:pncnn_masked,synthetic:pncnn_masked_seed1")
  assert members.model.mask_input_confidence  # from the members, not the config
  rows = _evaluate_config(config, members)
  single = loader.load("synthetic:pncnn_masked")
  alone = evaluate.run_evaluation(single.build_model(), single.variables, from_config.eval_iterator(config),
                                  loss_name=single.loss)
  for key in ("mae", "rmse"):
    np.testing.assert_allclose(rows["member 0"][key], alone.metrics[key], rtol=1e-5)
  with pytest.raises(ValueError, match="were trained with and without model.mask_input_confidence"):
    evaluator.load(config, "synthetic:pncnn_masked,synthetic:pncnn")


# --------------------------------------------------------------------------------------------------------------
# The evaluators give the numbers of the code they replaced.

# The shipped pncnn_masked and pncnn_masked_seed1 on 5 synthetic validation scenes (64 x 96, batches of 3 and 2),
# computed by the code before the evaluator protocol (`fit_precision_scales`, `evaluate_ensemble` with rules mean,
# max_confidence and mle of 5 steps, calibrated by those scales; commit fdf9add) in this suite's set-up (2 host
# devices, XLA:CPU optimisation level 0). That code ran the ensemble on one device; on a one-device mesh the
# evaluators reproduce its rows exactly and its scales to 4e-8 (per-image sums, added in float64). On another CPU
# the float32 outputs round differently (1.4e-6 relative in a scale, seen in CI): the smooth numbers keep rtol 1e-5,
# for that rounding only. AUSE and AUCE, which rank or threshold pixels, move in steps when near-tied pixels swap,
# and the MLE rule's depth follows Adam's first, sign-like steps and a choice among starts (its MAE moved 1.6e-5
# with XLA limited to SSE4.2): those are checked against the metric functions on what the evaluator fed them
# (tests/evaluate/test_depth.py; fuse_mle has its own tests above).
BEFORE_SCALES = [1.285694469105327, 1.2548063457899579]
BEFORE_ROWS = {
    "member 1": {"mae": 879.2621643066407, "rmse": 3010.9444091796877, "ause_pncnn": 0.05327254584843097,
                 "auce": 0.1425182553295761, "nll": 0.23851699094489193},
    "mean": {"mae": 794.4941284179688, "rmse": 2552.313720703125, "ause_pncnn": 0.05565656872040156,
             "auce": 0.17732969860328354, "nll": 0.24210706209677527},
    "max_confidence": {"mae": 731.6884704589844, "rmse": 2625.34228515625, "ause_pncnn": 0.05519470449459366,
                       "auce": 0.15851002205341833, "nll": 0.18685310163835},
    "mle": {"mae": 730.3384094238281, "rmse": 2624.3828369140624, "ause_pncnn": 0.055156841396345434,
            "auce": 0.15579928938985546, "nll": 0.18547492932521392},
    "mean (calibrated)": {"mae": 794.4941284179688, "rmse": 2552.313720703125, "ause_pncnn": 0.05526514191537301,
                          "auce": 0.14966858613085032, "nll": 0.19061394245058227},
    "max_confidence (calibrated)": {"mae": 732.3459411621094, "rmse": 2628.17685546875,
                                    "ause_pncnn": 0.055049355961274866, "auce": 0.13143641264395983,
                                    "nll": 0.15494459633679328},
}


def _replayed(calls):
  """{row name: {metric: value}} from the `ScoredRows.update` calls (self, out, target) recorded: the metric library
  on the depths, precisions and per-image metrics the evaluator fed it."""
  uncs, means = {}, {}
  for (_, out, target), _ in calls:
    for name, (depth, confidence, per_image) in out.items():
      uncs.setdefault(name, uncertainty.UncertaintyAccumulator()).update(depth, target, confidence)
      means.setdefault(name, metrics.MeanAccumulator()).update({k: np.asarray(v) for k, v in per_image.items()})
  return {name: {**means[name].result(), **uncs[name].result()} for name in uncs}


def _check_rows(rows, want, replayed, rel):
  for name, expected in want.items():
    for k, v in expected.items():
      if k in ("ause_pncnn", "auce") or name.startswith("mle"):
        assert rows[name][k] == replayed[name][k], (name, k)
      else:
        assert rows[name][k] == pytest.approx(v, rel=rel), (name, k)


@pytest.mark.slow
def test_the_ensemble_evaluators_give_the_numbers_of_before(recorded):
  from pncnn_jax import data, pretrained  # pylint: disable=g-import-not-at-top
  from pncnn_jax.runtime import sharding  # pylint: disable=g-import-not-at-top
  stacked = ensemble_members.stack_trees([pretrained.load(f"synthetic:{n}")[0]
                                          for n in ("pncnn_masked", "pncnn_masked_seed1")])
  model = models.build_model("pncnn", mask_input_confidence=True)
  batches = list(data.make_iterator({"dataset": "synthetic", "split": "val", "crop": "center", "crop_height": 64,
                                     "crop_width": 96, "batch_size": 3, "num_epochs": 1, "synthetic_size": 5}))
  one = sharding.make_mesh(jax.devices()[:1])
  scales = ensemble_members.fit_precision_scales(model, stacked, batches, loss_name="gaussian_nll", mesh=one)
  np.testing.assert_allclose(scales, BEFORE_SCALES, rtol=1e-5)
  fed = recorded(evaluate_depth.ScoredRows, "update")
  evaluator = ensemble_members.EnsembleEvaluator(loss_name="gaussian_nll", rules=("mean", "max_confidence", "mle"),
                                                 mle=ensemble_members.MLEOptions(steps=5), precision_scales=scales)
  result = evaluator.run(model, stacked, batches, mesh=one)
  assert result.evaluator == "ensemble" and result.header == "member / fusion"
  _check_rows(result.rows, BEFORE_ROWS, _replayed(fed), rel=1e-5)
  # Sharded over the suite's 2 devices (batches padded from 3 to 4 rows): the same numbers but for float rounding
  # (the MLE's few Adam steps amplify it; its rows are left out).
  del fed[:]
  sharded = evaluator.run(model, stacked, batches)
  names = ("member 0", "member 1", "mean", "max_confidence")
  _check_rows(sharded.rows, {n: {k: result.rows[n][k] for k in ("mae", "rmse", "ause_pncnn", "auce", "nll")}
                             for n in names}, _replayed(fed), rel=1e-4)
