"""The reproduction runs' building blocks: the scene cache, the run options (input-confidence mask, detached
variance input, learning rate, gradient clipping) and the shipped-weight files."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax import pretrained
from pncnn_jax.data import make_iterator, synthetic_cache
from pncnn_jax.experiments import runs
from pncnn_jax.nn import models


def test_cached_scenes_equal_rendered_scenes(tmp_path):
  window = (144, 448, 64, 320)  # configs/synthetic.py's centre crop of the 352x1216 frame
  synthetic_cache.build(tmp_path / synthetic_cache.cache_name("train", 0, window), seed=0, stream=0, window=window,
                        size=3)
  cfg = dict(dataset="synthetic", split="train", crop="center", crop_height=64, crop_width=320, batch_size=1,
             synthetic_size=5, num_epochs=1, shuffle=False)
  plain, cached = list(make_iterator(cfg)), list(make_iterator(dict(cfg, synthetic_cache_dir=str(tmp_path))))
  assert len(plain) == len(cached) == 5  # scenes 3 and 4 are not cached: rendered as before
  for a, b in zip(plain, cached):
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  assert int((plain[0]["disturbed"]).sum()) > 0


def test_cache_rendered_by_several_processes_equals_one(tmp_path):
  window = (144, 448, 32, 64)
  one = synthetic_cache.build(tmp_path / "one", seed=0, stream=2, window=window, size=5)
  many = synthetic_cache.build(tmp_path / "many", seed=0, stream=2, window=window, size=5, workers=2, chunk=2)
  for k in ("sparse", "target", "dense", "disturbed"):
    a, b = np.load(one / f"{k}.npy"), np.load(many / f"{k}.npy")
    assert a.shape == (5, 32, 64, 1)
    np.testing.assert_array_equal(a, b, err_msg=k)
  assert np.load(many / "sparse.npy")[4].any()  # the last, odd-sized chunk was written
  assert json.loads((one / "meta.json").read_text()) == json.loads((many / "meta.json").read_text())


@pytest.mark.parametrize("other_seed", [0, 1])
def test_cache_finished_first_by_another_process(tmp_path, monkeypatch, other_seed):
  """Two runs started on one workdir render the same cache. The one renamed second keeps the first's (a directory
  cannot be renamed onto a full one) and leaves no temporary directory behind; a cache of other settings that
  appeared meanwhile is still refused."""
  path, window = tmp_path / "c", (144, 448, 16, 32)
  drain = synthetic_cache._drain

  def drain_while_another_finishes(*args):
    drain(*args)
    monkeypatch.setattr(synthetic_cache, "_drain", drain)
    other = synthetic_cache.build(tmp_path / "other", seed=other_seed, stream=0, window=window, size=2)
    other.rename(path)  # the other process's cache, renamed first

  monkeypatch.setattr(synthetic_cache, "_drain", drain_while_another_finishes)
  if other_seed:
    with pytest.raises(ValueError, match="other settings"):
      synthetic_cache.build(path, seed=0, stream=0, window=window, size=2)
  else:
    assert synthetic_cache.build(path, seed=0, stream=0, window=window, size=2) == path
    assert np.load(path / "sparse.npy")[1].any()
  assert synthetic_cache._drain is drain  # the other process did run
  assert [p.name for p in tmp_path.iterdir()] == ["c"]


def test_cache_of_other_settings_is_refused(tmp_path):
  path = tmp_path / "c"
  synthetic_cache.build(path, seed=0, stream=0, window=(0, 0, 16, 16), size=1)
  with pytest.raises(ValueError, match="other settings"):
    synthetic_cache.build(path, seed=1, stream=0, window=(0, 0, 16, 16), size=1)
  with pytest.raises(ValueError, match="not a synthetic scene cache"):
    synthetic_cache.SceneCache(tmp_path)


@pytest.mark.parametrize("variant", ["ncnn_conf_l1", "pncnn"])
def test_masked_input_confidence_is_zero_off_the_measurements(variant):
  x = np.zeros((1, 32, 48, 1), np.float32)
  rng = np.random.default_rng(0)
  pts = rng.random(x.shape) < 0.1
  x[pts] = rng.uniform(2.0, 60.0, int(pts.sum()))
  official, masked = models.build_model(variant), models.build_model(variant, mask_input_confidence=True)
  assert not official.mask_input_confidence  # the parity variants are unchanged
  variables = models.init_variables(official, jax.random.key(0))
  c0_off = np.asarray(jax.jit(official.apply)(variables, jnp.asarray(x)).input_confidence)
  out = jax.jit(masked.apply)(variables, jnp.asarray(x))  # same parameters: the mask adds none
  c0 = np.asarray(out.input_confidence)
  assert np.all(c0[~pts] == 0.0) and np.all(c0_off[~pts] > 0.0)
  np.testing.assert_array_equal(c0[pts], c0_off[pts])
  assert np.all(np.isfinite(np.asarray(out.depth)))


def test_detached_variance_input_changes_gradients_not_outputs():
  """detach_variance_input: the same outputs; a loss of the precision alone trains only the variance UNet, while
  the depth still trains NConv and c0."""
  x = np.zeros((2, 32, 48, 1), np.float32)
  rng = np.random.default_rng(1)
  pts = rng.random(x.shape) < 0.2
  x[pts] = rng.uniform(2.0, 60.0, int(pts.sum()))
  plain, detached = models.build_model("pncnn"), models.build_model("pncnn", detach_variance_input=True)
  variables = models.init_variables(plain, jax.random.key(0))
  # jitted: one compile per program instead of one per eager operation (most of this test's time)
  for a, b in zip(*(jax.tree.leaves(jax.jit(m.apply)(variables, jnp.asarray(x))) for m in (plain, detached)),
                  strict=True):
    np.testing.assert_array_equal(a, b)

  def grad(model, of):
    def loss(params):
      out, _ = model.apply({**variables, "params": params}, jnp.asarray(x), train=True, mutable=["batch_stats"])
      return jnp.mean(getattr(out, of))
    return jax.grad(loss)
  norm = lambda tree: float(sum(jnp.sum(jnp.abs(g)) for g in jax.tree.leaves(tree)))
  # one program for the three gradients: their forward passes are one computation (stop_gradient is the identity)
  g_plain, g_det, g_depth = jax.jit(lambda p: (grad(plain, "confidence")(p), grad(detached, "confidence")(p),
                                               grad(detached, "depth")(p)))(variables["params"])
  for module in ("conf_estimator", "nconv"):
    assert norm(g_plain[module]) > 0 and norm(g_det[module]) == 0.0 and norm(g_depth[module]) > 0
  np.testing.assert_allclose(norm(g_det["var_estimator"]), norm(g_plain["var_estimator"]), rtol=1e-6)
  assert runs.run_config(runs.RUNS_BY_NAME["pncnn_detach_masked"], "smoke").model.detach_variance_input is True
  assert runs.run_config(runs.RUNS_BY_NAME["pncnn_masked"], "smoke").model.detach_variance_input is False


def test_learning_rate_option_sets_only_the_lr_before_the_drop():
  plain, low = (runs.run_config(runs.RUNS_BY_NAME[n], "long") for n in ("pncnn_masked", "pncnn_masked_lr3e-3"))
  assert plain.learning_rate == runs.SCALES["long"]["learning_rate"] == 0.01 and low.learning_rate == 0.003
  # everything else is the reference recipe's: the same drop step, steps, crops, model and seed
  rest = lambda c: {k: v for k, v in c.to_dict().items() if k != "learning_rate"}  # noqa: E731
  assert rest(plain) == rest(low)
  ref = runs.run_config(runs.RUNS_BY_NAME["ncnn_conf_l1_masked_lr3e-3"], "long")
  assert ref.learning_rate == 0.003 and ref.model.mask_input_confidence and ref.variant == "ncnn_conf_l1"


def test_grad_clip_option_sets_only_the_clip_norm():
  plain, clipped = (runs.run_config(runs.RUNS_BY_NAME[n], "long") for n in ("pncnn_masked", "pncnn_masked_clip10"))
  assert plain.grad_clip_norm == 0.0 and clipped.grad_clip_norm == 10.0
  rest = lambda c: {k: v for k, v in c.to_dict().items() if k != "grad_clip_norm"}  # noqa: E731
  assert rest(plain) == rest(clipped)
  assert runs.run_config(runs.RUNS_BY_NAME["pncnn_masked_clip10_seed1"], "long").seed == 1


def test_sensor_runs_are_the_recommended_recipe_on_the_mixture():
  """The sensor-robust runs differ from the recommended shipped run only in the sensors they see (and the seed)."""
  ref = runs.run_config(runs.RUNS_BY_NAME["sparse_var_beta_detach_masked"], "long")
  for k, run in enumerate(runs.SENSOR_RUNS_SCRATCH):
    c = runs.run_config(run, "long")
    assert (c.data.sensors.train, c.data.sensors.eval, c.seed, c.init_from) == ("lidar_mix", "lidar_mix", k, "")
    rest = lambda c: {k: v for k, v in c.to_dict().items() if k not in ("data", "seed")}  # noqa: E731
    data = lambda c: {k: v for k, v in c.data.to_dict().items() if k != "sensors"}  # noqa: E731
    assert rest(c) == rest(ref) and data(c) == data(ref)
  # The fine-tuned form: the same, started from the shipped recommended weights, for half the steps at a tenth of
  # the learning rate (2000 steps at 0.001, then 500 at 0.0001).
  tuned = (("num_epochs", "lr_decay_epochs", "learning_rate", "init_from"))
  for k, run in enumerate(runs.SENSOR_RUNS_FINETUNED):
    c, scratch = runs.run_config(run, "long"), runs.run_config(runs.SENSOR_RUNS_SCRATCH[k], "long")
    assert (c.num_epochs, c.lr_decay_epochs, c.learning_rate, c.init_from) == (
        10, 8, pytest.approx(0.001), "synthetic:sparse_var_beta_detach_masked")
    assert c.steps_per_epoch == scratch.steps_per_epoch == 250 and c.seed == k
    assert {k: v for k, v in c.to_dict().items() if k not in tuned} == {
        k: v for k, v in scratch.to_dict().items() if k not in tuned}
    assert runs.recipe(run, "long") == runs.finetune_recipe("long")
  assert ref.data.sensors.train == ref.data.sensors.eval == ""  # the published recipes keep their one sensor
  assert all(r.name not in runs.select(None, "long") for r in runs.SENSOR_RUNS)  # trained only when named
  assert runs.select("sparse_var_beta_detach_masked_lidar_mix", "long") == [runs.SENSOR_RUNS[0]]


def test_pretrained_round_trip_and_errors(tmp_path):
  tree = {"params": {"a": {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}}, "batch_stats": {"m": np.ones(2)}}
  pretrained.save(tree, {"name": "x", "variant": "ncnn"}, tmp_path / "synthetic", "x")
  variables, manifest = pretrained.load("synthetic:x", root=tmp_path)
  np.testing.assert_array_equal(variables["params"]["a"]["w"], tree["params"]["a"]["w"])
  assert manifest["variant"] == "ncnn" and pretrained.available(root=tmp_path) == ["x"]
  with pytest.raises(ValueError, match="available: synthetic:x"):
    pretrained.load("synthetic:y", root=tmp_path)
  assert pretrained.parse("runs/x") is None and pretrained.parse("synthetic:../x") is None
  bad = {"params": {"w": np.array([1.0, np.nan], np.float32)}}
  with pytest.raises(ValueError, match="non-finite"):
    pretrained.save(bad, {}, tmp_path / "synthetic", "bad")
