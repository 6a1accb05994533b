"""The training loop: data-parallel step, exact resume, non-finite stop, batch/device checks, metrics file."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from pncnn_jax import data, from_config
from pncnn_jax.checkpoints import identity as identity_lib
from pncnn_jax.checkpoints import manager
from pncnn_jax.runtime import run_files, sharding
from pncnn_jax.training import config_fields, loop
from pncnn_jax.training import step as training_step

from conftest import REPO

# One worker for the whole file: its runs share compiled steps (`loop.make_train_step` is cached per loss and mesh).
pytestmark = pytest.mark.xdist_group("train_loop")


def tiny_config(variant="ncnn_conf_l1", **overrides):
  c = from_config.load_config(f"{REPO}/configs/synthetic.py:{variant}")
  c.data.train_crop_height, c.data.train_crop_width = 32, 64
  c.data.eval_crop_height, c.data.eval_crop_width = 32, 64
  c.data.synthetic_size = 64
  c.data.eval_synthetic_size = 2
  c.batch_size = 4
  c.eval_batch_size = 2
  c.steps_per_epoch = 4
  c.num_epochs = 2
  c.log_every_steps = 2
  c.progress_bar = False
  for k, v in overrides.items():
    c[k] = v
  return c


def _batches(n, hw=(32, 64), bs=4):
  it = data.make_iterator({"dataset": "synthetic", "split": "train", "crop": "random", "crop_height": hw[0],
                           "crop_width": hw[1], "batch_size": bs, "seed": 3, "num_epochs": None})
  return [next(it) for _ in range(n)]


def test_two_device_step_equals_one_device_step():
  """Sharded over 2 devices, the step computes what it computes on one device.

  Gradients, loss and BatchNorm statistics of one step agree to float32 reduction-order noise. Parameters after
  3 Adam steps agree to 1e-5 except where a gradient component is at the noise level: Adam's g/sqrt(v) turns
  that noise into steps of up to lr (docs/SPEC.md §11.3); those elements are bounded by 2 lr per
  step and must be few. A per-device loss or per-device BatchNorm statistics would change every gradient.
  """
  assert jax.device_count() == 2, "conftest forces 2 host devices"
  cfg = tiny_config()
  batches = _batches(3)
  results = {}
  for n in (1, 2):
    mesh = sharding.make_mesh(jax.devices()[:n])
    state = sharding.replicate(loop.init_state(cfg, 4), mesh)
    rep, shd = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    grads_fn = jax.jit(lambda st, b: training_step.loss_and_grads(st, st.params, b, "masked_l1"),
                       in_shardings=(rep, shd), out_shardings=rep)
    sharded = sharding.shard_batch(batches[0], mesh)
    if n == 2:  # the batch really is split and the state replicated
      assert len(sharded["sparse"].addressable_shards) == 2
      assert sharded["sparse"].addressable_shards[0].data.shape[0] == 2
      assert state.params["nconv"]["nconv1"]["bias"].sharding.is_fully_replicated
    (loss, (_, stats)), grads = jax.device_get(grads_fn(state, sharded))
    step = loop.make_train_step("masked_l1", mesh)
    assert loop.make_train_step("masked_l1", sharding.make_mesh(jax.devices()[:n])) is step  # cached
    p0 = jax.device_get(state.params)
    losses, params1, compiled = [], None, None
    for i, b in enumerate(batches):
      state, m = step(state, sharding.shard_batch(b, mesh))
      losses.append(float(m["loss"]))
      if i == 0:
        params1, compiled = jax.device_get(state.params), step._cache_size()  # pylint: disable=protected-access
    assert step._cache_size() == compiled  # no recompilation after the first step  pylint: disable=protected-access
    results[n] = dict(loss=loss, stats=stats, grads=grads, losses=losses, p0=p0, p1=params1)
  r1, r2 = results[1], results[2]
  np.testing.assert_allclose(r2["loss"], r1["loss"], rtol=1e-6)
  np.testing.assert_allclose(r2["losses"], r1["losses"], rtol=5e-4)  # after Adam steps: see above
  for a, b in zip(jax.tree.leaves(r1["stats"]), jax.tree.leaves(r2["stats"])):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
  lr = cfg.learning_rate
  leaves = zip(jax.tree_util.tree_flatten_with_path(r1["grads"])[0], jax.tree.leaves(r2["grads"]),
               jax.tree.leaves(r1["p0"]), jax.tree.leaves(r1["p1"]), jax.tree.leaves(r2["p1"]))
  for (path, g1), g2, p0, a, b in leaves:
    name = jax.tree_util.keystr(path)
    tol = 1e-3 * np.max(np.abs(g1)) + 1e-7
    np.testing.assert_allclose(g2, g1, rtol=0, atol=tol, err_msg=name)
    # One Adam step (docs/SPEC.md §11.3): |p1 - p0| <= lr everywhere; equal where |g| is not noise.
    assert np.max(np.abs(b - p0)) <= lr + 2e-6 * max(1.0, float(np.max(np.abs(p0)))), name
    strong = np.abs(g1) > 2 * tol
    np.testing.assert_allclose(b[strong], a[strong], rtol=0, atol=1e-5 * max(1.0, float(np.max(np.abs(p0)))),
                               err_msg=name)


def test_training_lowers_the_loss():
  """What training is for: NCNN-Conf-L1 (the recipe's model, the loop's compiled step on 2 devices) over 40 steps
  of 4 fixed batches at lr 0.01 at least halves the loss of every batch (measured: 5-14x lower)."""
  mesh = sharding.make_mesh()
  state = sharding.replicate(loop.init_state(tiny_config(learning_rate=0.01), 100), mesh)
  step = loop.make_train_step("masked_l1", mesh)
  batches = [sharding.shard_batch(b, mesh) for b in _batches(4)]
  first, last = [], []
  for i in range(40):
    state, m = step(state, batches[i % 4])
    (first if i < 4 else last).append(float(m["loss"]))
  last = last[-4:]
  assert all(np.isfinite(first + last)), (first, last)
  assert all(b < 0.5 * a for a, b in zip(first, last)), f"loss per batch: first {first}, last {last}"


def test_batch_not_divisible_by_devices_is_a_clear_error(tmp_path):
  with pytest.raises(ValueError, match=r"batch_size=3 is not divisible by the number of devices \(2\)"):
    loop.train_and_evaluate(tiny_config(batch_size=3), tmp_path)


def _params(workdir, step="latest"):
  tree, meta = manager.Checkpointer(workdir, async_save=False).restore(step)
  return tree, meta


def test_a_run_stopped_after_a_checkpoint_resumes_to_the_uninterrupted_parameters(tmp_path):
  """In-process: the run returns after step 3 (as a kill would leave it: step 3 lost, the last checkpoint is step 2)
  and the same call resumes it (a real SIGKILL of train.py: tests/test_commands.py)."""
  cfg = tiny_config(steps_per_epoch=2, log_every_steps=1)  # 4 steps; validation + checkpoint at 2 and 4
  full = loop.train_and_evaluate(cfg, tmp_path / "full")
  loop.train_and_evaluate(cfg, tmp_path / "resumed", stop_after_steps=3)
  ck = manager.Checkpointer(tmp_path / "resumed", async_save=False)
  assert ck.latest_step() == 2
  ck.close()
  resumed = loop.train_and_evaluate(cfg, tmp_path / "resumed")  # the same command again
  a, meta_a = _params(tmp_path / "full")
  b, meta_b = _params(tmp_path / "resumed")
  assert int(a["step"]) == int(b["step"]) == 4
  assert meta_a["data_iterator"] == meta_b["data_iterator"] == {"next_index": 4}
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert full["val"]["rmse"] == resumed["val"]["rmse"]
  rows = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
  val_steps = [r["step"] for r in rows if r["split"] == "val"]
  assert val_steps == [2, 4]  # once per epoch
  train_rows = [r for r in rows if r["split"] == "train"]
  assert [r["step"] for r in train_rows] == [1, 2, 3, 4]
  for r in train_rows:
    assert {"loss", "lr", "grad_norm", "param_norm", "steps_per_sec"} <= set(r)
  # StepLR: lr_decay_epochs=3 > 2 epochs, so the lr is the base lr throughout.
  assert all(r["lr"] == pytest.approx(0.01) for r in train_rows)
  resumed_rows = [json.loads(x) for x in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
  # Step 3 ran twice; its first row, written after the last checkpoint, was dropped on resume (issue 13.9: the
  # file repeated up to 13 rows).
  assert [(r["step"], r["split"]) for r in resumed_rows] == [(r["step"], r["split"]) for r in rows]
  # Every checkpoint records what it was trained as (issue 13, checkpoint identity).
  assert {k: meta_a[k] for k in identity_lib.IDENTITY_FIELDS} == {
      "dataset": "synthetic", "variant": "ncnn_conf_l1", "loss": "masked_l1", "input_scale": 1.0}
  assert json.loads((tmp_path / "full" / "config.json").read_text())["variant"] == "ncnn_conf_l1"
  best = manager.Checkpointer(tmp_path / "full", async_save=False)
  vals = {r["step"]: r["rmse"] for r in rows if r["split"] == "val"}
  assert best.best_step() == min(vals, key=vals.get)
  best.close()


def test_metric_rows_after_the_restored_step_are_dropped_atomically(tmp_path):
  path = tmp_path / "metrics.jsonl"
  rows = [json.dumps({"step": s, "split": "train"}) for s in (1, 2, 3, 4, 5)]
  path.write_text("\n".join(rows) + '\n{"step": 6, "spl')  # the last line cut by a kill
  writer = run_files.MetricWriter(tmp_path)
  assert writer.drop_after(3) == 3
  assert path.read_text().splitlines() == rows[:3]
  assert writer.drop_after(3) == 0 and not list(tmp_path.glob("*.tmp"))  # replaced, nothing left behind
  writer.close()


def test_call_lengths_stop_at_every_boundary():
  every = [3, -1, 5]  # epoch of 3 steps, no eval interval, checkpoint every 5
  done, calls = 0, []
  while done < 10:
    n = loop.steps_in_call(done, 2, loop.next_boundary(done, every=every, last=10))
    assert not any(b % 3 == 0 or b % 5 == 0 for b in range(done + 1, done + n))  # no boundary inside a call
    calls.append(n)
    done += n
  assert calls == [2, 1, 2, 1, 2, 1, 1] and done == 10


def test_several_steps_per_call_give_the_same_run(tmp_path):
  """steps_per_call=2 (unrolled two-step program; single steps before each boundary) = one step per call.

  NCNN (no BatchNorm): with BatchNorm, the pre-BN conv biases have analytically zero gradients whose rounding
  noise Adam turns into +-lr steps, so two equally valid programs drift apart (reference README A.6)."""
  cfg = tiny_config("ncnn", steps_per_epoch=3, log_every_steps=1)  # 6 steps; validation + checkpoint at 3 and 6
  loop.train_and_evaluate(cfg, tmp_path / "one")
  cfg.steps_per_call = 2
  loop.train_and_evaluate(cfg, tmp_path / "two")
  a, meta_a = _params(tmp_path / "one")
  b, meta_b = _params(tmp_path / "two")
  assert int(a["step"]) == int(b["step"]) == 6 and meta_a["data_iterator"] == meta_b["data_iterator"]
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
  rows = {d: [json.loads(x) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()] for d in ("one", "two")}
  assert [(r["split"], r["step"]) for r in rows["one"]] == [(r["split"], r["step"]) for r in rows["two"]]
  for r1, r2 in zip(rows["one"], rows["two"]):
    if r1["split"] == "train":
      assert r1["loss"] == pytest.approx(r2["loss"], rel=1e-5)
  cfg.steps_per_call = 0
  with pytest.raises(ValueError, match="steps_per_call"):
    loop.train_and_evaluate(cfg, tmp_path / "bad")


def test_two_step_program_on_two_devices_starts_like_the_single_step():
  """The stacked two-step program with BatchNorm (NCNN-Conf), batch sharded over 2 devices: its first step's
  metrics are the single step's, its second loss follows to rounding (see the test above for why not exact)."""
  cfg = tiny_config()
  mesh = sharding.make_mesh()
  batches = _batches(2)
  state = sharding.replicate(loop.init_state(cfg, 4), mesh)
  stacked = sharding.shard_batches(batches, mesh)
  assert stacked["sparse"].shape == (2, 4, 32, 64, 1) and len(stacked["sparse"].addressable_shards) == 2
  _, m2 = loop.make_train_steps("masked_l1", mesh)(jax.tree.map(jnp.copy, state), stacked)
  single = loop.make_train_step("masked_l1", mesh)
  s1, m1a = single(jax.tree.map(jnp.copy, state), sharding.shard_batch(batches[0], mesh))
  _, m1b = single(s1, sharding.shard_batch(batches[1], mesh))
  for k in ("loss", "mae", "rmse", "grad_norm"):
    np.testing.assert_allclose(float(m2[k][0]), float(m1a[k]), rtol=1e-5)
  np.testing.assert_allclose(float(m2["loss"][1]), float(m1b["loss"]), rtol=1e-3)


def test_model_settings_follow_the_config_and_old_configs_load_as_trained():
  cfg = tiny_config()
  cfg.model.conv_precision = "default"
  assert from_config.build_model(cfg).conv_precision == "default"
  old = json.loads(tiny_config().to_json_best_effort())  # a config.json written before the `model` block:
  del old["model"]
  old.update(nconv_init="repo", precision="default")  # `precision` was the name of conv_precision
  assert from_config.model_settings(old) == {"nconv_init": "repo", "conv_precision": "default"}
  assert from_config.build_model(old).conv_precision == "default"
  del old["precision"]  # a config saved before the field existed gets float32
  assert from_config.build_model(old).conv_precision == "highest"


def test_lr_schedule_follows_the_step():
  """The state's learning rate is StepLR's (PyTorch's, stepped per epoch): 0.01, x0.1 every epoch of 4 steps; the
  train step reports the rate it applied."""
  cfg = tiny_config("ncnn", lr_decay_epochs=1)
  state = loop.init_state(cfg, 4)
  assert int(state.step) == 0 and state.step.dtype == jnp.int32
  lrs = []
  step = jax.jit(lambda s, b: training_step.train_step(s, b, loss_name="masked_l1"))
  for b in _batches(9):
    state, m = step(state, b)
    lrs.append(float(m["lr"]))
  np.testing.assert_allclose(lrs, [0.01] * 4 + [1e-3] * 4 + [1e-4], rtol=1e-6)
  np.testing.assert_allclose([float(training_step.step_lr(jnp.asarray(c), 0.01, 4, 0.1)) for c in (0, 3, 4, 7, 8)],
                             [0.01, 0.01, 1e-3, 1e-3, 1e-4], rtol=1e-6)


def test_non_finite_loss_stops_with_last_good_checkpoint(tmp_path, monkeypatch):
  real = data.make_iterator

  class Poisoned:
    """The training stream with an infinite ground-truth depth from the 4th batch on."""

    def __init__(self, it):
      self.it, self.n = it, 0

    def __next__(self):
      b = dict(next(self.it))
      self.n += 1
      if self.n >= 4:
        b["target"] = np.array(b["target"])
        b["target"][0, 0, 0, 0] = np.inf
      return b

    def get_state(self):
      return self.it.get_state()

    def set_state(self, s):
      self.it.set_state(s)

  def fake(cfg):
    it = real(cfg)
    return Poisoned(it) if cfg["split"] == "train" else it

  monkeypatch.setattr(loop.data, "make_iterator", fake)
  cfg = tiny_config(checkpoint_every_steps=2, eval_every_steps=-1, steps_per_epoch=8, num_epochs=1)
  with pytest.raises(FloatingPointError, match=r"diverged at step 4: non-finite loss.*last good checkpoint, "
                                               r"step 2"):
    loop.train_and_evaluate(cfg, tmp_path)
  tree, meta = _params(tmp_path)
  assert int(tree["step"]) == 2
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(tree))


def _saved_states(workdir):
  with manager.Checkpointer(workdir, read_only=True) as ckpt:
    return {s: ckpt.restore(s)[0] for s in ckpt.all_steps()}


@pytest.mark.parametrize("lr,diverges_at", [(1e6, 2), (1e30, 1)])
def test_divergence_stops_before_saving_and_a_rerun_says_so(tmp_path, lr, diverges_at):
  """Issue 13.3: with lr 1e6 the loss stays finite while the BatchNorm variance becomes inf, and the check (loss
  and gradients only) never fired; with lr 1e30 the 'last good checkpoint' had a parameter norm of 8e32. Now the
  parameters, their norm and the BatchNorm statistics are checked after every step, before any save."""
  cfg = tiny_config("pncnn", learning_rate=lr, checkpoint_every_steps=1, eval_every_steps=-1)
  for attempt in range(2):  # the rerun resumes from the last good step and reports the same divergence
    with pytest.raises(FloatingPointError, match=rf"diverged at step {diverges_at}: non-finite loss, gradient, "
                                                 r"parameter or BatchNorm statistic") as e:
      loop.train_and_evaluate(cfg, tmp_path)
    saved = _saved_states(tmp_path)
    assert sorted(saved) == list(range(1, diverges_at))
    assert ("last good checkpoint, step 1" in str(e.value)) == (diverges_at == 2), (attempt, str(e.value))
    for tree in saved.values():  # every saved step passes the same check
      state = loop.init_state(cfg, 4)
      assert bool(training_step.state_is_finite(training_step.tree_to_state(state, tree)))


def test_resume_refuses_a_diverged_checkpoint(tmp_path):
  """A checkpoint with inf BatchNorm statistics (as older versions saved) is refused on resume, with the step to
  resume from instead, rather than failing later in the validation's AUSE."""
  cfg = tiny_config(checkpoint_every_steps=1, eval_every_steps=-1)  # NCNN-Conf-L1: its UNet has BatchNorm
  loop.train_and_evaluate(cfg, tmp_path, stop_after_steps=2)
  with manager.Checkpointer(tmp_path) as ckpt:
    tree, meta = ckpt.restore(2)
    tree = jax.tree.map(np.array, tree)  # writable copies
    leaf = jax.tree.leaves(tree["batch_stats"])[0]
    leaf.flat[0] = np.inf
  import shutil  # pylint: disable=g-import-not-at-top
  shutil.rmtree(tmp_path / "checkpoints" / "2")
  with manager.Checkpointer(tmp_path, async_save=False) as ckpt:
    ckpt.save(2, tree, meta)
  with pytest.raises(FloatingPointError, match=r"checkpoint 2 in .* holds non-finite .*remove .*checkpoints/2 "
                                               r"\(earlier steps: \[1\]\)"):
    loop.train_and_evaluate(cfg, tmp_path)


def test_workdir_that_is_a_file_is_a_clear_error(tmp_path):
  (tmp_path / "wd").write_text("x")
  with pytest.raises(ValueError, match=r"--workdir .*wd is a file, not a folder"):
    loop.train_and_evaluate(tiny_config(), tmp_path / "wd")
  assert (tmp_path / "wd").read_text() == "x"


def test_gradient_clipping_scales_the_gradient_before_adam():
  """config.grad_clip_norm > 0: Adam sees g * min(1, clip / ||g||_2) (norm over all parameters) at every step;
  0, the published recipe, is plain Adam with the same optimizer state (checkpoints stay compatible)."""
  p = {"a": jnp.zeros(3), "b": jnp.zeros(2)}
  grads = [{"a": jnp.array([30.0, -40.0, 0.0]), "b": jnp.array([0.0, 0.0])},  # norm 50
           {"a": jnp.array([1.0, 2.0, 3.0]), "b": jnp.array([-1.0, 4.0])},  # norm 5.57
           {"a": jnp.array([0.1, 0.0, -0.2]), "b": jnp.array([0.3, 0.0])}]  # norm 0.37: kept as it is

  def run(tx, gs):
    x, s = p, training_step.set_step_lr(tx.init(p), 0.01)
    for g in gs:
      u, s = tx.update(g, s, x)
      x = optax.apply_updates(x, u)
    return x

  def by_hand(g):
    return jax.tree.map(lambda v: v * min(1.0, 5.0 / float(optax.tree.norm(g))), g)

  plain, clipped = training_step.make_optimizer(), training_step.make_optimizer(clip_norm=5.0)
  got, want, unclipped = run(clipped, grads), run(plain, [by_hand(g) for g in grads]), run(plain, grads)
  for k in p:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-9)
  assert not np.allclose(got["a"], unclipped["a"], rtol=1e-3)  # the clipping changed the steps
  assert training_step.make_optimizer(0.0) is plain  # 0: plain Adam, one object
  config = from_config.load_config(f"{REPO / 'configs' / 'synthetic.py'}:pncnn")
  assert config.grad_clip_norm == 0.0
  with config.unlocked():
    config.grad_clip_norm = 5.0
  assert loop.optimizer_settings(config, 10)["clip_norm"] == 5.0  # the training loop's optimizer follows the config
  assert loop.init_state(config, 10).tx is clipped


def test_global_norm_and_all_finite_equal_their_per_leaf_forms():
  """The training step's norms and checks reduce all leaves at once (`training_step._raveled`): the same values as
  per leaf."""
  rng = np.random.default_rng(0)
  tree = {"a": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32), "b": {"c": jnp.asarray(rng.normal(size=5),
                                                                                          jnp.float32)}}
  np.testing.assert_allclose(training_step.global_norm(tree), optax.tree.norm(tree), rtol=1e-6)
  assert bool(training_step.all_finite(tree)) and bool(training_step.all_finite({}))
  assert float(training_step.global_norm({})) == 0.0
  for bad in (np.inf, -np.inf, np.nan):
    broken = jax.tree.map(lambda x: x, tree)
    broken["b"]["c"] = broken["b"]["c"].at[2].set(bad)
    assert not bool(training_step.all_finite(broken)) and not np.isfinite(float(training_step.global_norm(broken)))
  big = {"x": jnp.full((4,), 3e19, jnp.float32)}  # finite elements whose norm overflows float32
  assert bool(training_step.all_finite(big)) and not np.isfinite(float(training_step.global_norm(big)))



def test_the_optimizer_equals_adam_with_a_closed_over_schedule_and_compiles_once_for_every_lr():
  """The one optimizer of single models and ensembles (`training_step.make_optimizer`: the StepLR settings held in
  its state by optax.inject_hyperparams) updates bitwise as `optax.adam(optax.exponential_decay(...,
  staircase=True))` with the schedule closed over, across two learning-rate drops and with clipping; the step
  reports the rate it applied; and one compiled step serves every lr, decay and epoch length (the divergence tests
  below run lr 1e6 and 1e30 through one program)."""
  cfg = tiny_config("ncnn", learning_rate=0.003, lr_decay_epochs=1, grad_clip_norm=5.0)
  ours = loop.init_state(cfg, 2)  # lr 0.003, 3e-4 after 2 steps, 3e-5 after 4
  closed_tx = optax.chain(optax.clip_by_global_norm(5.0), optax.adam(optax.exponential_decay(
      0.003, 2, 0.1, staircase=True), b1=0.9, b2=0.999, eps=1e-8))
  closed = loop.init_state(cfg, 2).replace(tx=closed_tx)
  closed = closed.replace(opt_state=closed_tx.init(closed.params))
  step = jax.jit(lambda s, b: training_step.train_step(s, b, loss_name="masked_l1"))
  lrs = []
  for b in _batches(5):
    (ours, m), closed = step(ours, b), step(closed, b)[0]
    lrs.append(float(m["lr"]))
  np.testing.assert_allclose(lrs, [0.003, 0.003, 3e-4, 3e-4, 3e-5], rtol=1e-6)
  for x, y in zip(jax.tree.leaves(ours.params), jax.tree.leaves(closed.params), strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  compiled = step._cache_size()  # pylint: disable=protected-access
  assert compiled == 2  # one program per optimizer object
  for lr, decay, spe in ((1e30, 3, 4), (0.5, 2, 7)):
    step(loop.init_state(tiny_config("ncnn", learning_rate=lr, lr_decay_epochs=decay, grad_clip_norm=5.0), spe), b)
  assert step._cache_size() == compiled  # pylint: disable=protected-access


def test_row_units_give_ensemble_members_the_unit_of_their_metric():
  units = {"rmse": "m", "mae": "m", "delta1": "%"}
  assert loop.row_units(["rmse", "rmse_0", "mae_12", "loss_1", "delta1", "lr"], units) == {
      "rmse": "m", "rmse_0": "m", "mae_12": "m", "delta1": "%"}


def test_init_from_starts_a_fresh_run_from_shipped_weights_and_only_once(tmp_path):
  """config.init_from (fine-tuning): the step-0 state holds the named weights, Adam starts afresh, the source is
  recorded; a resumed run continues from its checkpoint, and other weights or another variant are refused."""
  from pncnn_jax import pretrained  # pylint: disable=import-outside-toplevel
  cfg = tiny_config(init_from="synthetic:ncnn_conf_l1", steps_per_epoch=2, num_epochs=1)
  fresh = loop.init_state(cfg, 2)
  state = loop.init_from(cfg, fresh, loop.load_init_source(cfg, tmp_path), tmp_path)
  shipped, _ = pretrained.load("synthetic:ncnn_conf_l1")
  for path, got in jax.tree_util.tree_flatten_with_path(state.params)[0]:
    want = shipped["params"]
    for key in path:
      want = want[key.key]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=jax.tree_util.keystr(path))
  assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(fresh.params)))
  assert int(state.step) == 0
  for a, b in zip(jax.tree.leaves(state.opt_state), jax.tree.leaves(fresh.opt_state)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # Adam's moments and the schedule: fresh
  record = json.loads((tmp_path / loop.INIT_FROM_FILE).read_text())
  assert record["init_from"] == "synthetic:ncnn_conf_l1"
  assert record["identity"]["variant"] == "ncnn_conf_l1"
  assert record["weights_sha256"] == run_files.weights_digest(shipped)

  # A source of another variant, or one that does not load: one line before anything is written.
  with pytest.raises(ValueError, match=r"config.init_from='synthetic:pncnn_masked' holds a pncnn model, not the "
                                       r"config's ncnn_conf_l1"):
    loop.train_and_evaluate(tiny_config(init_from="synthetic:pncnn_masked"), tmp_path / "other")
  with pytest.raises(ValueError, match=r"config.init_from='.*nowhere'"):
    loop.train_and_evaluate(tiny_config(init_from=str(tmp_path / "nowhere")), tmp_path / "other")
  assert not (tmp_path / "other").exists()
  other = tiny_config(init_from="synthetic:ncnn_conf_l1")
  other.model.unet_features = (4, 4, 4, 4)
  with pytest.raises(ValueError, match=r"its parameters do not match the ncnn_conf_l1 model of this config"):
    loop.init_from(other, loop.init_state(other, 2), loop.load_init_source(other, tmp_path), tmp_path)

  # Through the loop: the run trains from the shipped weights and writes the record; rerun, it resumes (the record
  # and the checkpoint are not rewritten from the source).
  run = tmp_path / "run"
  first = loop.train_and_evaluate(cfg, run)
  scratch = loop.train_and_evaluate(tiny_config(steps_per_epoch=2, num_epochs=1), tmp_path / "scratch")
  assert first["val"]["rmse"] < scratch["val"]["rmse"]  # 2 steps from trained weights beat 2 from scratch
  assert json.loads((run / loop.INIT_FROM_FILE).read_text()) == record
  assert json.loads((run / "config.json").read_text())["init_from"] == "synthetic:ncnn_conf_l1"
  again = loop.train_and_evaluate(cfg, run)
  assert again["finished"] and again["step"] == 2
  with pytest.raises(run_files.ConfigChangedError, match="init_from"):
    loop.train_and_evaluate(tiny_config(init_from="synthetic:ncnn_conf_l1_masked", steps_per_epoch=2,
                                        num_epochs=2), run)


def test_init_from_is_refused_for_an_ensemble():
  cfg = from_config.load_config(f"{REPO}/configs/ensemble_synthetic.py")
  cfg.init_from = "synthetic:pncnn_masked"
  with pytest.raises(from_config.ConfigError, match=r"config.init_from='synthetic:pncnn_masked': must be '' for an "
                                                    r"ensemble"):
    config_fields.check_config(cfg)
