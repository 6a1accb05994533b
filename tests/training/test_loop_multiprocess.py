"""Two processes on localhost (CPU collectives through gloo) train as one: the same result as a single process.

The run: train.py in 2 processes of 1 host device each (`--coordinator_address/--num_processes/--process_id`),
8 steps of the NCNN variant on 32x64 random synthetic crops, global batch 4 (2 rows per process, each read by
its own process), a checkpoint every 2 steps, validation after steps 4 and 8 on 5 scenes in global batches of 2
(the last one has a row on process 0 only). Process 1 is killed after the checkpoint of step 4 while process 0
waits for it in step 5; both are started again and resume from step 4. The checkpoints it writes load in one
process, and the one of step 4 resumed by one process also ends where the single-process run ends. Neither launch
writes to (or loads from) the compilation cache it is given: a resumed launch that loaded its step from there hung
with jax 0.12.1 (pncnn_jax/runtime/compile_cache.py).

The reference: the same config in this (single) process on 2 host devices, hence the same 2-way SPMD program.
Equality is exact, not approximate: each device computes the same program on the same 2 rows (the pipeline puts
global row r on the same device whatever the process count), and the cross-device reductions (loss, gradients,
statistics) add 2 partial results, a + b = b + a in IEEE arithmetic whatever the order of the operands.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from pncnn_jax import from_config
from pncnn_jax.checkpoints import _orbax_workarounds, manager
from pncnn_jax.runtime import distributed
from pncnn_jax.training import loop

from conftest import REPO, TEST_XLA_FLAGS

CONFIG = "configs/synthetic.py:ncnn"
OVERRIDES = {
    "data.train_crop": "random", "data.train_crop_height": 32, "data.train_crop_width": 64,
    "data.eval_crop_height": 32, "data.eval_crop_width": 64, "data.synthetic_size": 64,
    "data.eval_synthetic_size": 5, "data.num_threads": 1, "batch_size": 4, "eval_batch_size": 2,
    "steps_per_epoch": 4, "num_epochs": 2, "log_every_steps": 2, "checkpoint_every_steps": 2, "max_to_keep": 5,
    "progress_bar": False,
}
KILL_AFTER = 4  # the checkpoint after which process 1 is killed
# Process 1 of the first launch stops after saving the checkpoint of step KILL_AFTER (so that the kill lands
# after a complete checkpoint and before the end of the run, whatever the machine's speed), then train.py runs.
_WORKER = r"""
import faulthandler, os, pathlib, runpy, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=True)  # a test that times out asks for every thread's stack
from jax.experimental import multihost_utils  # a barrier run as a collective program: recorded (there should be none)
_sync = multihost_utils.sync_global_devices
def sync_recorded(name):
  with open(os.environ["PNCNN_TEST_SYNC_LOG"], "a") as f:
    f.write(name + "\n")
  _sync(name)
multihost_utils.sync_global_devices = sync_recorded
stall = int(os.environ.get("PNCNN_TEST_STALL_AT", "0"))
if stall:
  from pncnn_jax.checkpoints import manager
  save = manager.Checkpointer.save
  def save_then_stall(self, step, *args, **kwargs):
    save(self, step, *args, **kwargs)
    if step == stall:
      self.wait()
      pathlib.Path(os.environ["PNCNN_TEST_STALL_FILE"]).touch()
      time.sleep(3600)
  manager.Checkpointer.save = save_then_stall
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path("train.py", run_name="__main__")
"""


@pytest.fixture
def launched():
  """The processes a test starts; whatever happens, none outlives the test (killed, then reaped)."""
  procs: list[subprocess.Popen] = []
  yield procs
  for p in procs:
    if p.poll() is None:
      p.kill()
    p.wait()


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _launch(launched, workdir, log_dir, tag, stall_file=None) -> list[subprocess.Popen]:
  """Starts the 2 processes of train.py on a fresh port; their stdout/stderr go to `log_dir/<tag>.<i>.{out,err}`.
  They are given a compilation cache of their own (`_cache(log_dir)`), which they must leave unused: with jax 0.12.1
  a training step loaded from it hung the resumed launch (pncnn_jax/runtime/compile_cache.py)."""
  port = _free_port()
  args = [f"--config={CONFIG}", f"--workdir={workdir}", *(f"--config.{k}={v}" for k, v in OVERRIDES.items()),
          f"--coordinator_address=localhost:{port}", "--num_processes=2",
          "--distributed_timeout=120"]  # a loaded test machine may start the two far apart
  procs = []
  for i in range(2):
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu", PNCNN_NO_HUGEPAGES="1",
               XLA_FLAGS=TEST_XLA_FLAGS.replace("device_count=2", "device_count=1"),  # one device per process
               JAX_COMPILATION_CACHE_DIR=str(_cache(log_dir)), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    env["PNCNN_TEST_SYNC_LOG"] = str(log_dir / f"{tag}.{i}.sync")
    if stall_file is not None and i == 1:
      env.update(PNCNN_TEST_STALL_AT=str(KILL_AFTER), PNCNN_TEST_STALL_FILE=str(stall_file))
    out, err = (open(log_dir / f"{tag}.{i}.{s}", "w") for s in ("out", "err"))  # pylint: disable=consider-using-with
    procs.append(subprocess.Popen([sys.executable, "-c", _WORKER, *args, f"--process_id={i}"], cwd=REPO, env=env,
                                  stdout=out, stderr=err))
  launched.extend(procs)
  return procs


def _cache(log_dir):
  return log_dir.parent / "jax_cache"


def _log(log_dir, tag, i, stream="err") -> str:
  return (log_dir / f"{tag}.{i}.{stream}").read_text()


def _main_stack(log: str) -> str:
  """The main thread's frames of the last faulthandler dump in `log`, innermost first, without the library's; then
  the two innermost frames of every other thread that is not an idle pool worker (what the main thread may wait
  on: an orbax save, a barrier)."""
  at = log.rfind("Current thread")
  if at < 0:
    return "(no stack dump: the process had ended)"
  frames = log[at:].splitlines()[1:]
  ours = [f.strip() for f in frames if f.strip().startswith("File") and "site-packages" not in f]
  main = "\n".join(ours[:12]) or "\n".join(frames[:12])
  others = []
  for block in reversed(log[:at].rstrip("\n").split("\n\n")):  # the dump's other "Thread 0x..." blocks, before it
    if not block.lstrip("\n").startswith("Thread 0x"):
      break
    lines = [ln.strip() for ln in block.splitlines()[1:] if ln.strip().startswith("File")]
    if lines and not any(line.endswith(" in _worker") for line in lines[:3]):  # an idle pool worker
      others.append("  | ".join(lines[:3]))
  return main + ("\nother threads:\n" + "\n".join(others) if others else "")


_LIBC = ("__", "pthread_", "syscall", "poll", "epoll", "nanosleep", "std::", "absl::")


def _native_stacks(pid: int, out_file) -> str:
  """Every native thread's stack of process `pid` (gdb; the full text in `out_file`), summarised: each thread that is
  not an idle pool worker, by its 4 innermost frames outside libc (what a hang in compiled code waits on: a gloo
  read, XLA's rendezvous, a buffer's event; Python's faulthandler cannot show it)."""
  if shutil.which("gdb") is None:
    return "(no gdb: no native stacks)"
  try:
    text = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 40"], capture_output=True,
                          text=True, timeout=120, check=False).stdout
  except subprocess.TimeoutExpired:
    return "(gdb timed out)"
  out_file.write_text(text)
  blocks = text.split("\nThread ")[1:]
  summary = []
  for block in blocks:
    frames = [re.sub(r"^#\d+\s+(0x[0-9a-f]+ in )?", "", ln.strip()).split(" (")[0][:100]
              for ln in block.splitlines() if ln.startswith("#")]
    if any("WaitForWork" in f for f in frames[:8]):  # an idle Eigen / tsl pool thread
      continue
    ours = [f for f in frames if not f.startswith(_LIBC) and f != "??"]
    summary.append(f"  thread {block.split()[0]}: " + " <- ".join(ours[:4]))
  return f"{len(blocks)} threads, the busy ones:\n" + ("\n".join(summary[:16]) or "  (none)")


def _xla_lines(log: str) -> str:
  """The log's lines from XLA's C++ runtime and gloo (a collective that waits, times out or fails), the last 6."""
  lines = [ln[:300] for ln in log.splitlines() if re.search(r"stuck|[Gg]loo|rendezvous|[Cc]ollective|timed? ?out", ln)]
  return ("\n  " + "\n  ".join(lines[-6:])) if lines else "none"


def _wait_all(procs, log_dir, tag, timeout, workdir=None):
  deadline = time.monotonic() + timeout
  try:
    for p in procs:
      p.wait(timeout=max(1.0, deadline - time.monotonic()))
  except subprocess.TimeoutExpired:
    codes = [p.poll() for p in procs]  # which one ended first says which one the other waits for
    for p in procs:
      if p.poll() is None:
        p.send_signal(signal.SIGUSR1)  # the stacks of a hang, in its stderr
    time.sleep(2.0)
    native = [_native_stacks(p.pid, log_dir / f"{tag}.{i}.gdb") if p.poll() is None else "(ended)"
              for i, p in enumerate(procs)]
    for p in procs:
      p.kill()
    # CI shows only the end of a failure: the full logs first, then each process's main-thread stack and the codes.
    logs = [_log(log_dir, tag, i) for i in range(len(procs))]
    reached = ""
    if workdir is not None:  # where the run stood: the step a hang is in
      rows = ([json.loads(line)["step"] for line in (workdir / "metrics.jsonl").read_text().splitlines()]
              if (workdir / "metrics.jsonl").exists() else [])
      reached = (f"checkpoints {manager.Checkpointer(workdir, read_only=True).all_steps()}, metrics.jsonl steps "
                 f"{rows}\n")
    pytest.fail(f"{tag}: timed out after {timeout} s\n" + "\n".join(
        f"process {i} stderr:\n{log[-6000:]}" for i, log in enumerate(logs)) + "\n" + "\n".join(
        f"--- process {i}: exit code at the timeout {codes[i]}; its main thread:\n{_main_stack(log)}\n"
        f"XLA's and gloo's messages: {_xla_lines(log)}\nnative threads: {native[i]}"
        for i, log in enumerate(logs)) + "\n" + reached)
  for i, p in enumerate(procs):
    assert p.returncode == 0, f"{tag}: process {i} exited with {p.returncode}:\n{_log(log_dir, tag, i)[-3000:]}"


def _rows(workdir) -> dict[tuple[int, str], dict]:
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  keyed = {(r["step"], r["split"]): r for r in rows}
  assert len(keyed) == len(rows), f"a (step, split) row written twice: {[(r['step'], r['split']) for r in rows]}"
  return keyed


def _reference(workdir):
  config = from_config.load_config(f"{REPO}/{CONFIG}")
  for key, value in OVERRIDES.items():
    *path, last = key.split(".")
    node = config
    for p in path:
      node = node[p]
    node[last] = value
  assert jax.device_count() == 2, "conftest forces 2 host devices"
  return loop.train_and_evaluate(config, workdir)


@pytest.mark.slow
def test_two_processes_train_as_one_and_resume_after_a_kill(tmp_path, launched):
  logs, ref_dir, mp_dir = tmp_path / "logs", tmp_path / "ref", tmp_path / "mp"
  logs.mkdir()
  stall_file = tmp_path / "stalled"
  t0 = time.monotonic()
  first = _launch(launched, mp_dir, logs, "first", stall_file)
  ref = _reference(ref_dir)  # meanwhile, the single-process run
  deadline = time.monotonic() + 300
  while not (stall_file.exists() and (mp_dir / "checkpoints" / str(KILL_AFTER)).is_dir()):
    assert time.monotonic() < deadline and all(p.poll() is None for p in first), (
        f"no checkpoint {KILL_AFTER}; process 0:\n{_log(logs, 'first', 0)[-3000:]}")
    time.sleep(0.2)
  time.sleep(1.0)  # process 0 is inside step 5 now, waiting for process 1
  first[1].send_signal(signal.SIGKILL)
  first[1].wait()
  t_kill = time.monotonic()
  try:  # a launcher (srun, a TPU pod) ends the job when one process dies; so does the test
    first[0].wait(timeout=10)
    survivor = f"exited by itself with status {first[0].returncode} after {time.monotonic() - t_kill:.1f} s"
  except subprocess.TimeoutExpired:
    first[0].kill()
    first[0].wait()
    survivor = "still waiting after 10 s: killed"
  print(f"process 0, when process 1 was killed in step {KILL_AFTER + 1}: {survivor}")
  assert first[1].returncode == -signal.SIGKILL
  steps = manager.Checkpointer(mp_dir, read_only=True).all_steps()
  assert steps == [2, 4], steps
  assert "final validation" not in _log(logs, "first", 0, "out")
  t_killed = time.monotonic()

  second = _launch(launched, mp_dir, logs, "second")
  _wait_all(second, logs, "second", timeout=300, workdir=mp_dir)
  t_end = time.monotonic()
  print(f"first launch + reference {t_killed - t0:.1f} s, resumed launch {t_end - t_killed:.1f} s")
  assert not _cache(logs).exists() or not list(_cache(logs).iterdir()), sorted(_cache(logs).iterdir())
  for i in range(2):
    assert f"resumed from step {KILL_AFTER}" in _log(logs, "second", i)
    assert "persistent compilation cache is off" in _log(logs, "second", i)
    for tag in ("first", "second"):  # orbax's barriers wait on the coordinator, never on gloo
      assert not (logs / f"{tag}.{i}.sync").exists(), (logs / f"{tag}.{i}.sync").read_text()
  assert "final validation (step 8)" in _log(logs, "second", 0, "out")
  assert "final validation" not in _log(logs, "second", 1, "out")  # process 0 reports, process 1 does not

  # One run's files: the same config, every metrics row once (process 0 writes them), the same checkpoints.
  assert json.loads((mp_dir / "config.json").read_text()) == json.loads((ref_dir / "config.json").read_text())
  ref_rows, mp_rows = _rows(ref_dir), _rows(mp_dir)
  assert sorted(mp_rows) == sorted(ref_rows) == sorted([(s, "train") for s in (2, 4, 6, 8)] + [(4, "val"), (8, "val")])
  for key, want in ref_rows.items():
    got = mp_rows[key]
    assert set(got) == set(want)
    for name in set(want) - {"time", "steps_per_sec"}:
      assert got[name] == want[name], (key, name, got[name], want[name])  # exact: see the module docstring
  assert ref["step"] == 8 and ref["val"]["rmse"] == mp_rows[(8, "val")]["rmse"]
  mp_ckpt, ref_ckpt = (manager.Checkpointer(d, read_only=True) for d in (mp_dir, ref_dir))
  assert mp_ckpt.all_steps() == ref_ckpt.all_steps() == [2, 4, 6, 8]
  assert not [p.name for p in (mp_dir / "checkpoints").iterdir() if "tmp" in p.name]
  # The multi-process checkpoint, read by this one process as saved (eval.py, predict): parameters, Adam's moments,
  # step and data position equal the single-process run's.
  (mp_state, mp_meta), (ref_state, ref_meta) = mp_ckpt.restore(8), ref_ckpt.restore(8)
  assert mp_meta["data_iterator"] == ref_meta["data_iterator"] == {"next_index": 8}
  leaves = jax.tree.leaves_with_path(ref_state)
  assert len(leaves) == len(jax.tree.leaves(mp_state)) > 10
  for (path, want), got in zip(leaves, jax.tree.leaves(mp_state)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=jax.tree_util.keystr(path))
  # ... and resumes there: the checkpoint of step 4 of the 2 processes, continued by this process alone.
  one_dir = tmp_path / "resumed_alone"
  shutil.copytree(mp_dir / "checkpoints" / str(KILL_AFTER), one_dir / "checkpoints" / str(KILL_AFTER))
  assert _reference(one_dir)["step"] == 8
  one_state, _ = manager.Checkpointer(one_dir, read_only=True).restore(8)
  for got, want in zip(jax.tree.leaves(one_state), jax.tree.leaves(ref_state), strict=True):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  variables, meta = manager.restore_variables(mp_dir, step=8)
  assert meta["step"] == 8
  for got, want in zip(jax.tree.leaves(variables), jax.tree.leaves(ref_state["params"]), strict=True):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_flags_and_environment_resolve_to_one_setting():
  assert distributed.resolve(environ={}) is None  # a single-process run
  assert distributed.resolve("host:123", 2, 1, environ={}) == ("host:123", 2, 1)
  env = {"JAX_COORDINATOR_ADDRESS": "h0:9", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3"}
  assert distributed.resolve(environ=env) == ("h0:9", 4, 3)
  assert distributed.resolve(None, None, 0, environ=env) == ("h0:9", 4, 0)  # a flag wins over its variable
  for args, message in [(("h:1", 2, None), "--coordinator_address, --num_processes given without --process_id"),
                        ((None, 2, 0), "without --coordinator_address"),
                        (("h", 2, 0), "--coordinator_address='h': must be HOST:PORT"),
                        (("h:1", 0, 0), "--num_processes=0: must be >= 1"),
                        (("h:1", 2, 2), r"--process_id=2: must be in 0 \.\. 1")]:
    with pytest.raises(ValueError, match=message):
      distributed.resolve(*args, environ={})
  with pytest.raises(ValueError, match=r"\$JAX_PROCESS_ID='x': must be an integer"):
    distributed.resolve(environ=dict(env, JAX_PROCESS_ID="x"))
  # --multihost: what is missing comes from jax's cluster detection (SLURM, Open MPI, Cloud TPU)
  assert distributed.resolve("h:1", None, None, environ={}, partial=True) == ("h:1", None, None)
  with pytest.raises(ValueError, match="--process_id=-1: must be in"):
    distributed.resolve(None, None, -1, environ={}, partial=True)


def test_train_cli_names_a_missing_flag():
  r = subprocess.run([sys.executable, "train.py", f"--config={CONFIG}", "--workdir=unused", "--num_processes=2",
                      "--process_id=0"], cwd=REPO, env=dict(os.environ, PNCNN_NO_HUGEPAGES="1"),
                     capture_output=True, text=True, timeout=300, check=False)
  assert r.returncode == 2, r.stderr[-2000:]
  assert r.stderr.strip().splitlines()[-1] == (
      "error: --num_processes, --process_id given without --coordinator_address: a multi-process run needs all "
      "three (or --multihost, in a SLURM, Open MPI or Cloud TPU job)")
  assert not (REPO / "unused").exists()


def test_orbax_barriers_wait_on_the_coordinator():
  """After joining a run, orbax's barriers use jax.distributed's coordination service, not a gloo collective program
  that could meet the training step's collectives (checkpoints/_orbax_workarounds.py, `coordinator_barriers`)."""
  from absl import flags  # pylint: disable=import-outside-toplevel
  from orbax.checkpoint._src.multihost import multihost  # pylint: disable=import-outside-toplevel
  parsed = flags.FLAGS.is_parsed()
  if not parsed:
    flags.FLAGS.mark_as_parsed()
  try:
    flags.FLAGS[_orbax_workarounds.ORBAX_BARRIER_FLAG].value = False
    assert multihost.EXPERIMENTAL_ORBAX_USE_DISTRIBUTED_BARRIER.value is False  # orbax's default
    _orbax_workarounds.coordinator_barriers()
    assert multihost.EXPERIMENTAL_ORBAX_USE_DISTRIBUTED_BARRIER.value is True
  finally:
    flags.FLAGS[_orbax_workarounds.ORBAX_BARRIER_FLAG].value = False
    if not parsed:
      flags.FLAGS.unparse_flags()
