"""pncnn_jax.checkpoints.manager: retention (latest N + best RMSE), resume after a crash, sharded restore, errors."""

import json
import os
import re
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pncnn_jax.checkpoints import _orbax_workarounds, convert, manager

from conftest import REPO, WEIGHTS


def make_state(value: float):
  return {"params": {"w": jnp.full((2, 3), value, jnp.float32), "b": jnp.arange(3, dtype=jnp.float32) + value},
          "batch_stats": {"mean": jnp.full((3,), -value, jnp.float32)},
          "step": jnp.asarray(int(value), jnp.int32)}


def test_keeps_latest_and_best(tmp_path):
  rmse = {1: 5.0, 2: 1.5, 3: 4.0, 4: 3.0, 5: 6.0, 6: 7.0}
  with manager.Checkpointer(tmp_path / "run", max_to_keep=2) as ckpt:
    for step, r in rmse.items():
      ckpt.save(step, make_state(step), {"epoch": step}, {"rmse": r, "mae": 2 * r})
    ckpt.wait()
    # Latest two (5, 6) and the lowest RMSE (2); nothing else survives.
    assert ckpt.all_steps() == [2, 5, 6]
    assert ckpt.latest_step() == 6 and ckpt.best_step() == 2
    state, meta = ckpt.restore("best")
    assert meta == {"epoch": 2}
    np.testing.assert_array_equal(state["params"]["w"], np.full((2, 3), 2.0, np.float32))
    assert int(state["step"]) == 2
    state, meta = ckpt.restore("latest", target=make_state(0))
    assert meta == {"epoch": 6} and float(state["batch_stats"]["mean"][0]) == -6.0
    assert ckpt.metrics(2) == {"rmse": 1.5, "mae": 3.0}
  # A new Checkpointer on the same workdir (a resumed run) sees the same steps.
  with manager.Checkpointer(tmp_path / "run", max_to_keep=2) as ckpt:
    assert ckpt.all_steps() == [2, 5, 6] and ckpt.best_step() == 2
    ckpt.save(7, make_state(7), {}, {"rmse": 1.0})
    ckpt.wait()
    assert ckpt.all_steps() == [6, 7] and ckpt.best_step() == 7


def test_steps_without_metrics_are_only_recent(tmp_path):
  with manager.Checkpointer(tmp_path / "run", max_to_keep=2, async_save=False) as ckpt:
    ckpt.save(1, make_state(1), {}, {"rmse": 2.0})
    for step in (2, 3, 4):
      ckpt.save(step, make_state(step), {})
    assert ckpt.all_steps() == [1, 3, 4] and ckpt.best_step() == 1
  with manager.Checkpointer(tmp_path / "plain", max_to_keep=1, keep_best=False, async_save=False) as ckpt:
    ckpt.save(1, make_state(1), {}, {"rmse": 0.5})
    ckpt.save(2, make_state(2), {}, {"rmse": 9.0})
    assert ckpt.all_steps() == [2]
  with manager.Checkpointer(tmp_path / "nometrics", async_save=False) as ckpt:
    ckpt.save(1, make_state(1), {})
    assert ckpt.best_step() is None
    with pytest.raises(ValueError, match="saved with metrics"):
      ckpt.restore("best")


def test_bad_arguments(tmp_path):
  with manager.Checkpointer(tmp_path / "run", async_save=False) as ckpt:
    with pytest.raises(ValueError, match="finite 'rmse'"):
      ckpt.save(1, make_state(1), {}, {"mae": 1.0})
    with pytest.raises(ValueError, match="finite 'rmse'"):
      ckpt.save(1, make_state(1), {}, {"rmse": float("nan")})
    with pytest.raises(TypeError, match="metadata must be a JSON-serialisable dict"):
      ckpt.save(1, make_state(1), ["not", "a", "dict"])
    ckpt.save(1, make_state(1), {})
    with pytest.raises(ValueError, match="step 1 already exists"):
      ckpt.save(1, make_state(1), {})
    with pytest.raises(FileNotFoundError, match=r"no checkpoint for step 5 .*complete steps: \[1\]"):
      ckpt.restore(5)
    with pytest.raises(ValueError, match="step must be an int"):
      ckpt.restore("first")
  with pytest.raises(ValueError, match="max_to_keep"):
    manager.Checkpointer(tmp_path / "x", max_to_keep=0)
  with manager.Checkpointer(tmp_path / "empty") as ckpt:
    assert ckpt.latest_step() is None and ckpt.best_step() is None
    with pytest.raises(FileNotFoundError, match="no checkpoint for step 'latest'"):
      ckpt.restore()


def test_relative_workdir_is_made_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with manager.Checkpointer("rel/run", async_save=False) as ckpt:
    assert ckpt.directory == tmp_path / "rel" / "run" / "checkpoints"
    ckpt.save(3, make_state(3), {"k": "v"})
  assert (tmp_path / "rel" / "run" / "checkpoints" / "3").is_dir()


_CRASH_SCRIPT = """
import os, signal, sys
import numpy as np
from pncnn_jax.checkpoints import manager
ckpt = manager.Checkpointer(sys.argv[1], max_to_keep=3)
ckpt.save(1, {"w": np.full((4,), 1.0, np.float32)}, {"step": 1}, {"rmse": 2.0})
ckpt.wait()
ckpt.save(2, {"w": np.full((4_000_000,), 2.0, np.float32)}, {"step": 2}, {"rmse": 1.0})  # async: returns at once
os.kill(os.getpid(), signal.SIGKILL)  # the process dies while step 2 is being written
"""


def test_crash_during_save_leaves_run_resumable(tmp_path):
  workdir = tmp_path / "run"
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  r = subprocess.run([sys.executable, "-c", _CRASH_SCRIPT, str(workdir)], env=env, cwd=REPO, timeout=120,
                     capture_output=True, text=True)
  assert r.returncode == -9, r.stderr
  entries = sorted(p.name for p in (workdir / "checkpoints").iterdir())
  crashed_mid_save = any("tmp" in e for e in entries)
  assert "1" in entries and manager.step_folders(workdir) == ([1] if crashed_mid_save else [1, 2])
  with manager.Checkpointer(workdir, max_to_keep=3) as ckpt:
    expected = 1 if crashed_mid_save else 2  # 2 only if the write finished before the kill (not seen so far)
    assert ckpt.latest_step() == expected and ckpt.all_steps() == list(range(1, expected + 1))
    state, meta = ckpt.restore("latest", target={"w": np.zeros((4,) if expected == 1 else (4_000_000,), np.float32)})
    assert meta == {"step": expected} and float(state["w"][0]) == float(expected)
    # Saving goes on; the stray temporary directory is gone once the first save of the new session is done.
    ckpt.save(3, {"w": np.full((4,), 3.0, np.float32)}, {"step": 3}, {"rmse": 0.5})
    ckpt.wait()
    assert ckpt.latest_step() == 3 and ckpt.best_step() == 3
    assert not any("tmp" in p.name for p in (workdir / "checkpoints").iterdir())
  assert crashed_mid_save, f"the save finished before the kill; the crash was not exercised ({entries})"


def test_stray_tmp_directory_is_ignored(tmp_path):
  workdir = tmp_path / "run"
  with manager.Checkpointer(workdir, async_save=False) as ckpt:
    ckpt.save(4, make_state(4), {"ok": True}, {"rmse": 1.0})
  stray = workdir / "checkpoints" / "5.orbax-checkpoint-tmp-1700000000"
  (stray / "state").mkdir(parents=True)
  (stray / "state" / "garbage").write_bytes(b"\x00" * 100)
  (workdir / "checkpoints" / "6").write_text("a file, not a step")
  # The file-system view (before a run opens orbax: will it resume?) agrees with orbax's, and creates nothing.
  assert manager.step_folders(workdir) == [4] and manager.step_folders(tmp_path / "none") == []
  assert not (tmp_path / "none").exists()
  with manager.Checkpointer(workdir) as ckpt:
    assert ckpt.latest_step() == 4 and ckpt.all_steps() == [4]
    state, meta = ckpt.restore("latest")
    assert meta == {"ok": True} and int(state["step"]) == 4
  assert not stray.exists()


@pytest.mark.parametrize("n_devices", [1, 2])
def test_restore_onto_replicated_sharding(tmp_path, n_devices):
  if len(jax.devices()) < n_devices:
    pytest.skip(f"needs {n_devices} devices")
  mesh = Mesh(np.array(jax.devices()[:n_devices]), ("data",))
  replicated = NamedSharding(mesh, PartitionSpec())
  with manager.Checkpointer(tmp_path / "run", async_save=False) as ckpt:
    ckpt.save(1, make_state(1.5), {})
    target = manager.abstract_like(make_state(0), replicated)
    state, _ = ckpt.restore(1, target=target)
  for leaf, ref in zip(jax.tree.leaves(state), jax.tree.leaves(make_state(1.5))):
    assert leaf.sharding == replicated and leaf.dtype == ref.dtype
    np.testing.assert_array_equal(np.asarray(leaf), np.asarray(ref))


def test_a_replicated_save_compiles_nothing_and_stock_orbax_reads_it(tmp_path):
  """The state handler saves replicated arrays from one replica (`_orbax_workarounds.StateHandler`): orbax's
  replica-parallel default compiled a slice program per array shape on each process's first save (30 for an
  NCNN-Conf state, ~1 s). What it writes is what stock orbax writes: the step names orbax's own handlers, and stock
  orbax restores it."""
  mesh = Mesh(np.array(jax.devices()[:2]), ("data",))
  state = jax.device_put(make_state(3.0), NamedSharding(mesh, PartitionSpec()))
  state["params"]["v"] = jax.device_put(jnp.arange(10.0).reshape(5, 2), NamedSharding(mesh, PartitionSpec()))
  compiles = []

  def listen(event, secs, **_):
    if event == "/jax/core/compile/backend_compile_duration":
      compiles.append(secs)

  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    with manager.Checkpointer(tmp_path / "run", async_save=False) as ckpt:
      ckpt.save(1, state, {"epoch": 1})
      ckpt.wait()
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)
  assert compiles == []
  step_dir = tmp_path / "run" / "checkpoints" / "1"
  handlers = json.loads((step_dir / "_CHECKPOINT_METADATA").read_text())["item_handlers"]
  assert handlers == {manager.STATE_ITEM: ocp.PyTreeCheckpointHandler.typestr(),  # as stock orbax records
                      manager.META_ITEM: ocp.JsonCheckpointHandler.typestr()}
  restored = ocp.StandardCheckpointer().restore(step_dir / manager.STATE_ITEM)
  for (path, want), got in zip(jax.tree_util.tree_leaves_with_path(state), jax.tree.leaves(restored)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=jax.tree_util.keystr(path))


def test_model_variables_round_trip(shared_dir, tmp_path):
  variables, _ = convert.load_official(WEIGHTS / "kitti_pncnn_rand0.npz")  # a full pNCNN tree, float32 numpy
  out = manager.save_variables(tmp_path / "model", variables, {"variant": "pncnn"})
  assert out == str(tmp_path / "model")
  restored, meta = manager.restore_variables(tmp_path / "model")
  assert meta == {"variant": "pncnn"}
  assert jax.tree.structure(restored) == jax.tree.structure(variables)
  for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(variables)):
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  with pytest.raises(FileExistsError, match="already exists"):
    manager.save_variables(tmp_path / "model", variables)


def test_restore_variables_from_training_run(tmp_path):
  workdir = tmp_path / "run"
  with manager.Checkpointer(workdir, async_save=False) as ckpt:
    ckpt.save(10, make_state(10), {"epoch": 0}, {"rmse": 2.0})
    ckpt.save(20, make_state(20), {"epoch": 1}, {"rmse": 3.0})
  for path, step, expected in [(workdir, "best", 10), (workdir / "checkpoints", "latest", 20),
                               (workdir / "checkpoints" / "20", "best", 20)]:
    variables, meta = manager.restore_variables(path, step=step)
    assert set(variables) == {"params", "batch_stats"}
    assert float(variables["params"]["w"][0, 0]) == expected and meta == {"epoch": expected // 10 - 1}
  assert manager.restore_variables(workdir, step=20)[1] == {"epoch": 1}


def test_restore_variables_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match=r"checkpoint .*missing does not exist"):
    manager.restore_variables(tmp_path / "missing")
  f = tmp_path / "file.npz"
  f.write_bytes(b"x")
  with pytest.raises(ValueError, match="is a file"):
    manager.restore_variables(f)
  (tmp_path / "emptydir").mkdir()
  with pytest.raises(ValueError, match="is not a pncnn_jax checkpoint"):
    manager.restore_variables(tmp_path / "emptydir")
  if os.geteuid() != 0:  # root reads everything
    locked = tmp_path / "locked"
    locked.mkdir(mode=0)
    with pytest.raises(PermissionError, match="not readable"):
      manager.restore_variables(locked)
    locked.chmod(0o700)


def test_readers_leave_a_writers_tmp_directory_alone(tmp_path):
  """Issue 13.2: a reader (loader, eval, predict) opening a workdir deleted the half-written step of a running
  training (orbax `cleanup_tmp_directories`), which then died. Readers are read-only now."""
  workdir = tmp_path / "run"
  with manager.Checkpointer(workdir, async_save=False) as ckpt:
    ckpt.save(4, make_state(4), {"variant": "x"}, {"rmse": 1.0})
  writing = workdir / "checkpoints" / "5.orbax-checkpoint-tmp-1700000000"
  (writing / "state").mkdir(parents=True)
  (writing / "state" / "half").write_bytes(b"\x00" * 100)
  before = sorted(p.relative_to(workdir) for p in workdir.rglob("*"))
  for step in ("latest", "best"):
    variables, meta = manager.restore_variables(workdir, step=step)
    assert meta == {"variant": "x"} and float(variables["params"]["w"][0, 0]) == 4.0
  with manager.Checkpointer(workdir, read_only=True) as ckpt:
    assert ckpt.all_steps() == [4]
    with pytest.raises(ValueError, match="read-only"):
      ckpt.save(6, make_state(6))
  assert sorted(p.relative_to(workdir) for p in workdir.rglob("*")) == before
  with pytest.raises(FileNotFoundError):
    manager.restore_variables(tmp_path / "none")


def test_a_tree_of_another_model_is_one_line(tmp_path, caplog):
  """Issue 13.8: restoring a step into the state of another variant printed ~20 lines of both trees. A fresh
  read-only reader (which saved nothing) reads the step's tree from the handlers registered up front (orbax's
  current API; `item_names=` is deprecated), quietly."""
  workdir = tmp_path / "run"
  caplog.set_level("INFO", logger="absl")
  with manager.Checkpointer(workdir, async_save=False) as ckpt:
    ckpt.save(3, make_state(3), {"variant": "a"})
  caplog.clear()
  other = make_state(1)
  other["params"]["extra"] = {"k": jnp.zeros(2), "q": jnp.zeros(2)}
  del other["batch_stats"]
  with manager.Checkpointer(workdir, read_only=True) as ckpt:
    assert ckpt.restore_metadata(3) == {"variant": "a"}
    with pytest.raises(ValueError) as e:
      ckpt.restore(3, target=manager.abstract_like(other))
    assert str(e.value) == (
        f"checkpoint {workdir / 'checkpoints' / '3'} does not hold the model being restored: expected params/extra, "
        "not in the checkpoint; found batch_stats, not in the model (a run of another variant or model setting; use "
        "another --workdir)")
    tree, _ = ckpt.restore(3, target=manager.abstract_like(make_state(0)))  # the same tree: restored
    assert float(tree["params"]["w"][0, 0]) == 3.0
  noise = [r.getMessage() for r in caplog.records if r.levelno >= 30]
  assert not noise, noise  # no "Given directory is read only", no save_interval_steps warning


def test_structure_difference_names_the_shortest_subtrees():
  a = {"params": {"conf": {"w": 1, "b": 1}, "nconv": {"w": 1}}, "opt": [{"mu": {"conf": {"w": 1}}}]}
  b = {"params": {"nconv": {"w": 1}, "var": {"w": 1}}, "opt": [{"mu": {"nconv": {"w": 1}}}]}
  assert manager.structure_difference(a, a) == ""
  assert manager.structure_difference(a, b) == (
      "expected opt/0/mu/nconv, params/var, not in the checkpoint; found opt/0/mu/conf, params/conf, not in the "
      "model")
  many = {"params": {f"x{i}": 1 for i in range(5)}}
  assert manager.structure_difference({"params": {"y": 1}}, many) == (
      "expected params/x0, params/x1, params/x2, ... (5 in all), not in the checkpoint; found params/y, not in the "
      "model")


@pytest.mark.slow
def test_training_survives_concurrent_readers(tmp_path):
  """A training saving a checkpoint every step runs while this process loads 'latest' from its workdir over and
  over (as `eval.py --checkpoint latest` or predict would): the training finishes and every checkpoint it keeps
  is complete and restorable."""
  from pncnn_jax.checkpoints import loader  # pylint: disable=g-import-not-at-top
  wd = tmp_path / "wd"
  # The crops and batches of the suite's other tiny NCNN-Conf-L1 runs (tests/training, tests/test_commands.py): their
  # compiled step and validation come from the shared compilation cache.
  args = ["train.py", "--config=configs/synthetic.py:ncnn_conf_l1", f"--workdir={wd}",
          "--config.data.train_crop_height=32", "--config.data.train_crop_width=64",
          "--config.data.eval_crop_height=32", "--config.data.eval_crop_width=64",
          "--config.data.synthetic_size=8", "--config.data.eval_synthetic_size=2", "--config.eval_batch_size=2",
          "--config.steps_per_epoch=6", "--config.num_epochs=1", "--config.checkpoint_every_steps=1",
          "--config.max_to_keep=2", "--config.num_panels=2", "--progress=off"]
  env = dict(os.environ, PYTHONPATH=str(REPO))
  proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  loads = misses = 0  # any other error of a reader fails the test
  try:
    while proc.poll() is None:
      try:
        loader.load("latest", workdir=wd)
        loads += 1
      except (FileNotFoundError, manager.CheckpointCorruptError):
        misses += 1  # no step yet, or the step was rotated out while it was read: a reader's miss, said as such
      time.sleep(0.1)  # a reader polling, not a busy loop taking the CPU the training needs
    _, err = proc.communicate(timeout=300)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 0, err[-3000:]
  assert loads >= 1
  entries = sorted(p.name for p in (wd / "checkpoints").iterdir())
  assert not any("tmp" in e for e in entries), entries
  with manager.Checkpointer(wd, read_only=True) as ckpt:
    assert ckpt.latest_step() == 6 and 5 in ckpt.all_steps()
    for s in ckpt.all_steps():
      state, meta = ckpt.restore(s)
      assert int(state["step"]) == s == meta["step"]
      assert all(np.isfinite(x).all() for x in jax.tree.leaves(state["params"]))


# ------------------------------------------------------------------------------------------------------------
# Issue 39: checkpoints fail soft, readers restore the model only, full disks are OSErrors.


def _truncate_data(step_dir):
  """Truncates the data files of a step's state (what a crash of the disk, not of orbax, leaves)."""
  files = [p for p in (step_dir / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
  assert files
  for p in files:
    with open(p, "r+b") as f:
      f.truncate(10)
  return files


def test_a_step_that_cannot_be_restored_names_the_file_and_the_newest_intact_step(tmp_path, caplog):
  workdir = tmp_path / "run"
  with manager.Checkpointer(workdir, async_save=False) as ckpt:
    for step in (1, 2, 3):
      ckpt.save(step, make_state(step), {"step": step}, {"rmse": 1.0 / step})
  d = workdir / "checkpoints"
  truncated = _truncate_data(d / "3")
  (d / "2" / "meta" / "metadata").write_text('{"step": 2, garbled')
  with manager.Checkpointer(workdir, read_only=True) as ckpt:
    with pytest.raises(manager.CheckpointCorruptError) as e:
      ckpt.restore("latest")
    msg = str(e.value)
    assert msg.startswith(f"checkpoint step 3 in {d} cannot be restored: ") and "(truncated or corrupt)" in msg, msg
    assert any(str(p) in msg for p in truncated), msg
    assert msg.endswith(f"; the newest intact step is 1: pass --allow_fallback to use it, or remove {d / '3'}"), msg
    with pytest.raises(manager.CheckpointCorruptError, match=re.escape(
        f"checkpoint step 2 in {d} cannot be restored: {d / '2' / 'meta' / 'metadata'}: not valid JSON")):
      ckpt.restore_metadata(2)
    tree, meta = ckpt.restore("latest", allow_fallback=True)
    assert meta == {"step": 1} and float(tree["params"]["w"][0, 0]) == 1.0
    assert "using the newest intact step, 1, instead (--allow_fallback)" in caplog.text
  with pytest.raises(manager.CheckpointCorruptError, match="the newest intact step is 1"):
    manager.restore_variables(workdir, step="best")  # best = 3 (lowest rmse)
  variables, meta = manager.restore_variables(workdir, step="best", allow_fallback=True)
  assert meta == {"step": 1} and set(variables) == {"params", "batch_stats"}
  with pytest.raises(manager.CheckpointCorruptError, match=re.escape(f"checkpoint {d / '3'} cannot be restored")):
    manager.restore_variables(d / "3")
  with manager.Checkpointer(workdir, async_save=False) as ckpt:  # a training that fell back
    moved = ckpt.set_aside([2, 3])
    assert [p.name for p in moved] == ["2.unrestorable", "3.unrestorable"] and ckpt.all_steps() == [1]
    ckpt.save(2, make_state(2), {"step": 2})  # the step can be written again
    assert ckpt.all_steps() == [1, 2]


def test_readers_restore_only_the_model_variables(tmp_path):
  workdir = tmp_path / "run"
  state = make_state(5)
  state["opt_state"] = {"mu": jnp.ones((2, 3)), "count": jnp.asarray(7)}
  with manager.Checkpointer(workdir, async_save=False) as ckpt:
    ckpt.save(5, state, {"step": 5})
  with manager.Checkpointer(workdir, read_only=True) as ckpt:
    tree, _ = ckpt.restore(5, model_only=True)
    assert set(tree) == {"params", "batch_stats"}  # the optimizer state is not read
    full, _ = ckpt.restore(5)
    assert set(full) == {"params", "batch_stats", "opt_state", "step"}
  for path in (workdir, workdir / "checkpoints" / "5"):
    variables, _ = manager.restore_variables(path, step="latest")
    assert set(variables) == {"params", "batch_stats"} and float(variables["params"]["w"][0, 0]) == 5.0


def test_a_full_disk_during_a_save_is_an_oserror_naming_the_file():
  """What tensorstore raised under orbax on a full tmpfs (issue 39: one useful line among 212 tracebacks)."""
  path = "/runs/x/checkpoints/1.orbax-checkpoint-tmp/state.orbax-checkpoint-tmp/d/856365f8"
  err = _orbax_workarounds.disk_error(ValueError(
      f'RESOURCE_EXHAUSTED: Failed writing: "{path}": Failed to write 2103 bytes to file 7: No space left on device '
      "[os_error_code='28']"))
  assert isinstance(err, OSError) and err.errno == 28 and err.filename == path
  assert err.strerror == os.strerror(28)
  assert _orbax_workarounds.disk_error(ValueError("INVALID_ARGUMENT: something else")) is None
