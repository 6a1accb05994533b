"""Every user-facing bad input of issue 13, through the command lines (train.py, eval.py, python -m
pncnn_jax.{predict,convert,export}) in subprocesses.

For each case: the exit status (2: a user mistake, refused before anything is written; 1: a run that failed, or
some files of a batch that failed), the message lines on stderr (one line naming the file or argument, unless
several files are named), no traceback, and no change to the inputs or to a training workdir (a digest of every
file before and after).

One tiny training run (configs/synthetic.py:ncnn, 2 steps at 32x64, checkpoints at steps 1 and 2) serves every
case that needs a workdir (tests that change it work on a copy); the module runs in one xdist group so that it is
trained once. Issue 39's cases are at the end.
"""

import functools
import hashlib
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from pncnn_jax.data import io
from pncnn_jax.runtime import run_files

from conftest import REFERENCE, REPO, WEIGHTS

pytestmark = pytest.mark.xdist_group("bad_inputs")

TINY = [
    "--config.data.train_crop_height=32", "--config.data.train_crop_width=64",
    "--config.data.eval_crop_height=32", "--config.data.eval_crop_width=64",
    "--config.data.synthetic_size=8", "--config.data.eval_synthetic_size=2",
    "--config.steps_per_epoch=2", "--config.num_epochs=1", "--config.eval_batch_size=2",
    "--config.num_panels=1", "--progress=off",
]
CKPTS = REFERENCE / "checkpoints"
ABSL_LOG = re.compile(r"[IWE]\d{4} ")  # absl's own log lines (train.py and eval.py log the devices at WARNING)


ENV = dict(os.environ, PYTHONPATH=str(REPO), JAX_COMPILATION_CACHE_DIR=str(REPO / ".jax_cache"),
           JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.5")


def run(*args, timeout=300):
  # The tests' two host devices are inherited via XLA_FLAGS; the subprocesses share the suite's compilation cache.
  return subprocess.run([sys.executable, *map(str, args)], cwd=REPO, env=ENV, capture_output=True, text=True,
                        timeout=timeout, check=False)


def digest(*roots: pathlib.Path) -> dict[str, str]:
  """sha256 of every file under `roots` (and the roots' existence): what must not change."""
  out = {}
  for root in roots:
    if root.is_file():
      out[str(root)] = hashlib.sha256(root.read_bytes()).hexdigest()
    elif root.is_dir():
      out[str(root)] = "dir"
      for p in sorted(root.rglob("*")):
        out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    else:
      out[str(root)] = "missing"
  return out


def check(r: subprocess.CompletedProcess, status: int, *messages: str | re.Pattern) -> None:
  """Exit `status`; the stderr lines (absl's log lines aside) are exactly `messages` (str: equal; re: full match);
  no traceback."""
  assert r.returncode == status, (r.returncode, r.stderr[-3000:])
  assert "Traceback" not in r.stderr, r.stderr[-3000:]
  lines = [x for x in r.stderr.splitlines() if x.strip() and not ABSL_LOG.match(x)]
  assert len(lines) == len(messages), r.stderr[-3000:]
  for line, m in zip(lines, messages):
    assert (m.fullmatch(line) if isinstance(m, re.Pattern) else line == m), (line, m)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  """A finished tiny run (variant ncnn) and the digest of its files."""
  wd = tmp_path_factory.mktemp("bad_inputs") / "wd"
  r = run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY,
          "--config.checkpoint_every_steps=1")
  assert r.returncode == 0, r.stderr[-3000:]
  assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == ["1", "2"]
  return wd, digest(wd)


@pytest.fixture
def inputs(tmp_path):
  """A folder of two sparse KITTI PNGs."""
  d = tmp_path / "in"
  rng = np.random.default_rng(0)
  for name in ("a.png", "b.png"):
    io.write_kitti_depth(d / name, np.where(rng.random((20, 30)) < 0.3, rng.uniform(2, 60, (20, 30)), 0))
  return d


# ------------------------------------------------------------------------------------------------------------
# Settings: refused at start in one line, nothing created (issue 13.6/13.7/13.8).


@pytest.mark.parametrize("script,override,message", [
    ("train.py", "--config.lerning_rate=1",
     """error: no config field 'lerning_rate'; Did you mean "learning_rate" instead of "lerning_rate"?"""),
    ("train.py", "--config.learning_rate=-1", "error: config.learning_rate=-1.0: must be a finite number > 0"),
    # issue 39: each trained (hours on KITTI) or compiled before failing, or failed without the field's name
    ("train.py", "--config.lr_decay_factor=-1",
     "error: config.lr_decay_factor=-1.0: must be a finite number in (0, 1]"),
    ("train.py", "--config.log_every_steps=0", "error: config.log_every_steps=0: must be an integer >= 1"),
    ("train.py", "--config.model.conv_precision=foo",
     "error: config.model.conv_precision='foo': must be one of 'default', 'high', 'highest'"),
    ("train.py", "--config.data.train_crop_height=7",
     "error: config.data.train_crop_height=7: must be an integer >= 8 (the model halves the frame three times)"),
    ("eval.py", "--config.metrics=foo", "error: config.metrics='foo': must be one of 'flow', 'kitti', 'nyu'"),
    ("train.py", "--config.data.train_crop_height=400",
     "error: config.data.train_crop_height=400: must be <= 352: the train crop 400x320 does not fit in the "
     "352x1216 frames of synthetic/train"),
    ("eval.py", "--config.eval_batch_size=0", "error: config.eval_batch_size=0: must be an integer >= 1"),
])
def test_settings_out_of_range(tmp_path, script, override, message):
  """A negative learning rate trained uphill with exit 0; a typo printed 55 lines before "Did you mean"; a crop
  larger than the frame failed after the workdir was made. Every other field's range (num_epochs=0 or -3 exited 0
  and printed nothing, ...) is checked in-process from the same table: tests/test_configs.py."""
  wd = tmp_path / "wd"
  check(run(script, "--config=configs/synthetic.py:ncnn_conf_l1", f"--workdir={wd}", override), 2, message)
  assert not wd.exists()


def test_calibration_on_the_evaluation_split(tmp_path):
  """Calibrating the ensemble's precisions on the scenes it is evaluated on would flatter it: refused at start."""
  check(run("eval.py", "--config=configs/ensemble_synthetic.py:pncnn", f"--workdir={tmp_path / 'wd'}",
            "--config.ensemble.calibration_split=val"), 2,
        "error: config.ensemble.calibration_split='val': must be '' (off) or a split of synthetic other than "
        "data.eval_split='val' (one of ['train', 'test'])")
  assert not (tmp_path / "wd").exists()


def test_eval_crop_outside_the_kitti_frames(tmp_path):
  check(run("eval.py", "--config=configs/kitti.py:ncnn_conf_l1", f"--output={tmp_path / 'o'}",
            "--config.data.eval_crop=center", "--config.data.eval_crop_width=1300"), 2,
        "error: config.data.eval_crop_width=1300: must be <= 1216: the eval crop 352x1300 does not fit in the "
        "352x1216 frames of kitti_depth/selval")
  assert not (tmp_path / "o").exists()


def test_workdir_that_is_a_file(tmp_path):
  f = tmp_path / "wd"
  f.write_text("not a folder")
  check(run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={f}", *TINY), 2,
        f"error: --workdir {f} is a file, not a folder")
  assert f.read_text() == "not a folder"


# ------------------------------------------------------------------------------------------------------------
# Checkpoints trained as something else (issue 13.4): refused in one line, with the override named.


@pytest.mark.parametrize("config,checkpoint,message", [
    ("kitti.py:ncnn_conf_l1", "nyu_ncnn_conf_l1_checkpoint-9.pth.tar",
     "was trained as dataset 'nyu_depth' (its args), but --config with --pairs_dir asks for dataset 'kitti_depth'"),
    ("kitti.py:ncnn_conf_l1", "kitti_ncnn_conf_l2_checkpoint-9.pth.tar",
     "was trained as variant 'ncnn_conf_l2', loss 'masked_l2' (its args), but --config with --pairs_dir asks for "
     "variant 'ncnn_conf_l1', loss 'masked_l1'"),
])
def test_eval_refuses_an_official_checkpoint_of_another_dataset_or_loss(shared_dir, tmp_path, config, checkpoint,
                                                                         message):
  """The NYU NCNN-Conf checkpoint was evaluated under configs/kitti.py:ncnn_conf_l1 without a word (MAE 1272 mm);
  an L2 checkpoint under an L1 config was reported as L1."""
  ck = CKPTS / checkpoint
  before = digest(ck)
  check(run("eval.py", f"--config=configs/{config}", f"--checkpoint={ck}", f"--output={tmp_path / 'o'}",
            f"--pairs_dir={shared_dir / 'data' / 'kitti_depth_mini'}"), 2,
        f"error: --checkpoint={ck} {message}; pass --allow_mismatch to use it anyway")
  assert digest(ck) == before and not (tmp_path / "o").exists()


def test_resume_with_another_variant_and_no_config_json(run_dir, tmp_path):
  """A checkpoint of another variant with no config.json printed 20 lines of tree dump."""
  wd = tmp_path / "wd"
  shutil.copytree(run_dir[0], wd)
  (wd / "config.json").unlink()
  before = digest(wd)
  check(run("train.py", "--config=configs/synthetic.py:pncnn", f"--workdir={wd}", *TINY), 2,
        f"error: checkpoint 2 in {wd} was trained as variant 'ncnn', loss 'masked_l1' (its metadata), but --config "
        "asks for variant 'pncnn', loss 'gaussian_nll'; use another --workdir")
  assert digest(wd) == before


def test_predict_refuses_a_variant_the_checkpoint_contradicts(run_dir, inputs, tmp_path):
  wd, trained = run_dir
  check(run("-m", "pncnn_jax.predict", "--checkpoint", wd, "--input", inputs, "--output", tmp_path / "o",
            "--variant", "ncnn_conf_l1"), 2,
        f"error: --checkpoint={wd} was trained as variant 'ncnn' (its metadata), but --variant asks for variant "
        "'ncnn_conf_l1'; pass --allow_mismatch to use it anyway")
  assert digest(wd) == trained and not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------------------------
# Files that are not (usable) checkpoints (issue 13.5/13.8/13.9).


def test_crafted_stride_zero_tensor(tmp_path, monkeypatch):
  """A crafted tensor with stride 0 and an absurd size failed with "Unable to allocate 364 TiB"."""
  from torch_fakes import write_crafted_stride_zero  # pylint: disable=g-import-not-at-top
  f = tmp_path / "crafted.pth.tar"
  write_crafted_stride_zero(f, monkeypatch)
  before = digest(f)
  check(run("-m", "pncnn_jax.convert", "--input", f, "--output", tmp_path / "o"), 2,
        f"error: {f}: tensor of size (32768, 32768, 32768) (35184372088832 elements) with stride (0, 0, 0) repeats "
        "the 4 elements of its storage (zero or overlapping strides): crafted or corrupt; refusing it")
  assert digest(f) == before and not (tmp_path / "o").exists()


def test_empty_npz(tmp_path):
  """An empty .npz was called "not a torch checkpoint"."""
  f = tmp_path / "weights.npz"
  np.savez(f)
  check(run("-m", "pncnn_jax.convert", "--input", f, "--output", tmp_path / "o"), 2,
        f"error: {f} is an empty zip archive (an .npz without arrays), not a checkpoint")
  assert not (tmp_path / "o").exists()


def test_not_a_checkpoint(tmp_path):
  f = tmp_path / "bad.pth.tar"
  f.write_bytes(b"garbage")
  check(run("eval.py", "--config=configs/synthetic.py:ncnn", f"--output={tmp_path / 'o'}", f"--checkpoint={f}"), 2,
        f"error: {f} is not a torch checkpoint (no pickle header; unknown format)")


def test_poisoned_weights(shared_dir, inputs, tmp_path):
  """convert accepted an .npz with NaN weights; predict then wrote all-zero depth with exit 0."""
  sd = dict(np.load(WEIGHTS / "kitti_ncnn_conf_l1.npz"))
  sd["nconv.nconv1.bias"] = np.full_like(sd["nconv.nconv1.bias"], np.nan)
  f = tmp_path / "kitti_ncnn_conf_l1.npz"
  np.savez(f, **sd)
  before = digest(f, inputs)
  message = (f"error: {f}: 1 weight tensor(s) hold NaN or inf, e.g. ['params']['nconv']['nconv1']['bias']; "
             "refusing them")
  check(run("-m", "pncnn_jax.convert", "--input", f, "--output", tmp_path / "o"), 2, message)
  check(run("-m", "pncnn_jax.predict", "--checkpoint", f, "--input", inputs, "--output", tmp_path / "p"), 2, message)
  assert digest(f, inputs) == before and not (tmp_path / "o").exists() and not (tmp_path / "p").exists()


def test_a_workdir_without_checkpoints(tmp_path, inputs):
  """The clean "no checkpoints" error was followed by a stray orbax traceback; predict printed orbax warnings."""
  wd = tmp_path / "wd"
  (wd / "checkpoints").mkdir(parents=True)
  (wd / "checkpoints" / "4.orbax-checkpoint-tmp-1").mkdir()  # a save killed half-way: not a step
  before = digest(wd, inputs)
  message = f"no checkpoint for step 'latest' in {wd / 'checkpoints'} (complete steps: [])"
  check(run("eval.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", "--checkpoint=latest"), 2,
        f"error: {message}")
  check(run("-m", "pncnn_jax.predict", "--checkpoint", wd, "--input", inputs, "--output", tmp_path / "o"), 2,
        f"error: {message}")
  check(run("-m", "pncnn_jax.export", "--checkpoint", wd, "--output", tmp_path / "e", "--height", 32, "--width", 64,
            "--formats", "stablehlo"), 2, f"error: --checkpoint {wd}: {message}")
  check(run("eval.py", "--config=configs/synthetic.py:ncnn", f"--workdir={tmp_path / 'none'}", "--checkpoint=best"),
        2, f"error: --checkpoint=best: {tmp_path / 'none'} holds no checkpoints/ (train there first, or pass "
        "--checkpoint=PATH)")
  assert digest(wd, inputs) == before
  assert not any((tmp_path / n).exists() for n in ("o", "e", "none"))


# ------------------------------------------------------------------------------------------------------------
# predict's outputs (issue 13.1/13.6/13.8/13.9).


@pytest.mark.parametrize("where", ["input_folder", "file", "under_a_file"])
def test_predict_output_that_cannot_be_used(run_dir, inputs, tmp_path, where):
  """`--input d --output d` replaced the sparse PNGs with predictions, exit 0; an output folder that is a file
  or cannot be created gave tracebacks."""
  wd, trained = run_dir
  (tmp_path / "f").write_text("x")
  out, message = {
      "input_folder": (inputs, f"--output {inputs} is the folder of the input files: predictions would overwrite "
                               "them; choose another folder"),
      "file": (tmp_path / "f", f"--output {tmp_path / 'f'} is a file, not a folder"),
      "under_a_file": (tmp_path / "f" / "sub", f"--output {tmp_path / 'f' / 'sub'} cannot be created or written: "
                                               f"{tmp_path / 'f'} is a file"),
  }[where]
  before = digest(inputs, tmp_path / "f")
  check(run("-m", "pncnn_jax.predict", "--checkpoint", wd, "--input", inputs, "--output", out), 2, f"error: {message}")
  assert digest(inputs, tmp_path / "f") == before and digest(wd) == trained


def test_predict_keeps_going_past_bad_files(run_dir, inputs, tmp_path):
  """One unreadable file stopped the batch; a 5x6 image at its own size (--pad_multiple 1) failed with
  "zero-size array"; each path was printed twice."""
  wd, trained = run_dir
  bad = inputs / "c_broken.png"
  bad.write_bytes(b"not a png")
  io.write_kitti_depth(inputs / "d_tiny.png", np.full((5, 6), 7.5))
  before = digest(inputs)
  r = run("-m", "pncnn_jax.predict", "--checkpoint", wd, "--input", inputs, "--output", tmp_path / "o",
          "--pad_multiple", 1)
  check(r, 1, re.compile(re.escape(f"FAILED {bad}: truncated or corrupt PNG (") + r".*"),
        "1 file(s) failed (named above)")
  assert r.stderr.count(str(bad)) == 1
  assert io.read_kitti_depth(tmp_path / "o" / "d_tiny.png").shape == (5, 6)
  assert sorted(p.name for p in (tmp_path / "o").glob("*.png") if not p.stem.endswith(("_preview", "_valid"))) == [
      "a.png", "b.png", "d_tiny.png"]
  assert digest(inputs) == before and digest(wd) == trained


# ------------------------------------------------------------------------------------------------------------
# A diverging run (issue 13.3).


def test_divergence_is_one_line_and_exit_1(tmp_path):
  """At lr 1e30 the 'last good checkpoint' had a parameter norm of 8e32; the run now stops at the first
  non-finite step, before saving, and says how to go on (the lr 1e6 case: tests/training/test_loop.py)."""
  wd = tmp_path / "wd"
  r = run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY, "--config.learning_rate=1e30")
  check(r, 1, re.compile(re.escape("error: the run diverged at step ") + r"\d+: non-finite loss, .* of ncnn in "
                         + re.escape(f"{wd}. Nothing was saved; lower config.learning_rate and rerun.")))
  assert not list((wd / "checkpoints").glob("[0-9]*"))


# ------------------------------------------------------------------------------------------------------------
# Issue 39: one run per workdir, checkpoints that fail soft, unwritable places, Ctrl-C, a finished run.


def test_one_training_per_workdir(run_dir, tmp_path):
  """Two train.py on one workdir both exited 0, the second overwrote the first's checkpoints and interleaved its
  metrics.jsonl. The lock is the workdir folder's flock, held here by the test process as a running training
  would; a second run stops at once (before compiling), naming the holder, and changes nothing."""
  wd = tmp_path / "wd"
  shutil.copytree(run_dir[0], wd)
  before = digest(wd)
  with run_files.WorkdirLock(wd):
    started = json.loads((wd / "RUNNING").read_text())["started"]
    during = digest(wd)
    check(run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY,
              "--config.learning_rate=0.001", "--config.num_epochs=3"), 2,
          f"error: --workdir {wd} is in use by another training run (pid {os.getpid()} on host "
          f"{socket.gethostname()}, started {started}); wait for it to end or choose another --workdir")
    assert digest(wd) == during
  assert digest(wd) == before  # RUNNING goes with the lock


def _truncate_latest(wd: pathlib.Path) -> list[pathlib.Path]:
  files = [p for p in (wd / "checkpoints" / "2" / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
  for p in files:
    with open(p, "r+b") as f:
      f.truncate(100)
  return files


def test_a_checkpoint_that_cannot_be_restored(run_dir, inputs, tmp_path):
  """One truncated data file: resume, eval --checkpoint latest and predict ended in a 151-line tensorstore
  traceback, and nothing said step 1 was intact. Now one line naming the file and step 1 (status 2, nothing
  changed); --allow_fallback (train, eval, predict) uses step 1 with a warning, also while a training holds the
  workdir (readers are not locked out)."""
  wd = tmp_path / "wd"
  shutil.copytree(run_dir[0], wd)
  files = _truncate_latest(wd)
  d = wd / "checkpoints"
  message = re.compile(re.escape(f"error: checkpoint step 2 in {d} cannot be restored: ") + "("
                       + "|".join(re.escape(str(f)) for f in files) + r"): Requested byte range .* \(truncated or "
                       + re.escape(f"corrupt); the newest intact step is 1: pass --allow_fallback to use it, or remove "
                                   f"{d / '2'}"))
  before = digest(wd, inputs)
  check(run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY, "--config.num_epochs=2"), 2,
        message)
  check(run("eval.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", "--checkpoint=latest", *TINY), 2,
        message)
  r = run("-m", "pncnn_jax.predict", "--checkpoint", wd, "--input", inputs, "--output", tmp_path / "p")
  assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
  assert "checkpoint step 2 in" in r.stderr and "the newest intact step is 1" in r.stderr, r.stderr[-3000:]
  assert digest(wd, inputs) == before and not (tmp_path / "p").exists()
  with run_files.WorkdirLock(wd):  # a training is running there: eval may still read it
    r = run("eval.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", "--checkpoint=latest", *TINY,
            "--allow_fallback", f"--output={tmp_path / 'e'}")
  assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
  assert "using the newest intact step, 1, instead (--allow_fallback)" in r.stderr
  res = json.loads((tmp_path / "e" / "results.json").read_text(), parse_constant=lambda c: pytest.fail(c))
  assert res["checkpoint_step"] == 1  # strict JSON (no bare Infinity / NaN) and the step evaluated
  r = run("-m", "pncnn_jax.predict", "--checkpoint", wd, "--input", inputs, "--output", tmp_path / "p",
          "--allow_fallback", "--no_preview")
  assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
  assert "using the newest intact step, 1, instead (--allow_fallback)" in r.stderr, r.stderr[-3000:]
  r = run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY, "--config.num_epochs=2",
          "--allow_fallback", "--allow_config_change")  # resumes from step 1, sets step 2 aside, trains on to step 4
  assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
  assert "resuming from step 1; set aside the step(s) that cannot be restored" in r.stderr
  assert "final validation (step 4)" in r.stdout
  assert {"2.unrestorable", "4"} <= {p.name for p in d.iterdir()}


def test_garbled_checkpoint_metadata_names_the_file(run_dir, tmp_path):
  """A garbled metadata file said "Invalid control character" without naming the file."""
  wd = tmp_path / "wd"
  shutil.copytree(run_dir[0], wd)
  meta = wd / "checkpoints" / "2" / "meta" / "metadata"
  meta.write_text('{"variant": "ncnn",\x01 garbled')
  before = digest(wd)
  check(run("eval.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", "--checkpoint=latest", *TINY), 2,
        re.compile(re.escape(f"error: checkpoint step 2 in {wd / 'checkpoints'} cannot be restored: {meta}: not "
                             "valid JSON (") + ".*" + re.escape(
                                 "); the newest intact step is 1: pass --allow_fallback to use it, or remove "
                                 f"{wd / 'checkpoints' / '2'}")))
  assert digest(wd) == before


def test_a_finished_run_says_so(run_dir):
  """A rerun of a finished run printed only "resumed from step 2"."""
  wd, trained = run_dir
  r = run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY,
          "--config.checkpoint_every_steps=1")
  assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
  assert r.stdout.splitlines()[0] == (
      f"the run in {wd} had finished already at step 2: nothing to do (its results: {wd / 'metrics.jsonl'}, best "
      "checkpoint: step 2; evaluate with eval.py --checkpoint best)"), r.stdout
  assert r.stdout.splitlines()[1].startswith("final validation (step 2): mae=")
  assert digest(wd) == trained


def test_config_json_of_another_variant_is_named(tmp_path):
  """A workdir whose config.json names another variant (a run killed before its first checkpoint) was refused
  without naming the file."""
  wd = tmp_path / "wd"
  wd.mkdir()
  (wd / "config.json").write_text(json.dumps({"variant": "pncnn"}))
  before = digest(wd)
  check(run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY), 2,
        f"error: {wd / 'config.json'} holds a run of variant 'pncnn', but config.variant is 'ncnn': use another "
        "--workdir")
  assert digest(wd) == before


def _read_only_folder(path, request) -> str:
  """`path` made a folder nobody can write into; returns the error it gives. Root ignores permission bits (CI runs
  as root), so for root it is a read-only tmpfs mounted there (unmounted after the test)."""
  path.mkdir()
  if os.geteuid() != 0:
    path.chmod(0o500)
    return "Permission denied"
  r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)], capture_output=True,
                     text=True, check=False)
  if r.returncode != 0:
    pytest.fail(f"root cannot mount a read-only tmpfs here ({r.stderr.strip()}): no read-only folder to test with")
  request.addfinalizer(lambda: subprocess.run(["umount", str(path)], check=False))
  return "Read-only file system"


@pytest.mark.parametrize("how", ["under_a_file", "read_only"])
def test_unwritable_workdir_and_outputs(run_dir, tmp_path, how, request):
  """A read-only workdir or output gave tracebacks in train, eval and convert; a place under a file (ENOTDIR) goes
  the same way."""
  (tmp_path / "f").write_text("x")
  if how == "read_only":
    reason = _read_only_folder(tmp_path / "ro", request)
    place = tmp_path / "ro" / "sub"
  else:
    place, reason = tmp_path / "f" / "sub", "Not a directory"
  wd, trained = run_dir
  check(run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={place}", *TINY), 1,
        f"error: cannot write {place}: {reason}")
  probe = tmp_path / ("ro" if how == "read_only" else "f")
  why = reason if how == "read_only" else f"{probe} is a file, not a folder"
  check(run("eval.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", "--checkpoint=latest", *TINY,
            f"--output={place}"), 1, f"error: cannot write {place if how != 'read_only' else probe}: {why}")
  check(run("-m", "pncnn_jax.convert", "--input", WEIGHTS / "kitti_ncnn_conf_l1.npz", "--output", place), 1,
        f"error: cannot write {place if how != 'read_only' else probe}: {why}")
  assert digest(wd) == trained and (tmp_path / "f").read_text() == "x"


FULL_DISK = """
import runpy, sys
import orbax.checkpoint as ocp
def save(self, step, *a, **k):  # what tensorstore raised under orbax on a full tmpfs
  raise ValueError(f'RESOURCE_EXHAUSTED: Failed writing: "{self.directory}/{step}.orbax-checkpoint-tmp/state/d/0a": '
                   "Failed to write 2103 bytes to file 7: No space left on device [os_error_code='28']")
ocp.CheckpointManager.save = save
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path("train.py", run_name="__main__")
"""


def test_a_full_disk_during_training_is_one_line(run_dir, tmp_path):
  """A full disk during a save gave one useful line among 212 tracebacks. (A real full tmpfs gives the same line:
  checked by hand, see the issue note.)"""
  wd = tmp_path / "wd"
  shutil.copytree(run_dir[0], wd)
  r = subprocess.run([sys.executable, "-c", FULL_DISK, "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY,
                      "--config.num_epochs=2", "--config.checkpoint_every_steps=1", "--allow_config_change"], cwd=REPO,
                     env=dict(ENV, PNCNN_NO_HUGEPAGES="1"), capture_output=True, text=True, timeout=300, check=False)
  check(r, 1, f"error: cannot write {wd / 'checkpoints' / '3.orbax-checkpoint-tmp' / 'state' / 'd' / '0a'}: No space "
        "left on device (the disk is full; the run is resumable once there is room)")
  assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == ["1", "2"] and not (wd / "RUNNING").exists()


def test_ctrl_c_is_one_line_and_resumable(run_dir, tmp_path):
  """Ctrl-C during training printed a traceback."""
  wd = tmp_path / "wd"
  shutil.copytree(run_dir[0], wd)
  # SIGINT as a terminal delivers it: a test run started in the background of a shell (`make test &`) ignores
  # SIGINT, and its children would inherit that and train on (as `nohup train.py &` should).
  p = subprocess.Popen([sys.executable, "train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY,
                        "--config.num_epochs=1000", "--allow_config_change"], cwd=REPO, env=ENV,
                       stderr=subprocess.PIPE, text=True,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  deadline = time.time() + 120
  while not (wd / "RUNNING").exists() and time.time() < deadline and p.poll() is None:
    time.sleep(0.2)
  time.sleep(2)  # inside the run (resuming, compiling or training)
  p.send_signal(signal.SIGINT)
  _, err = p.communicate(timeout=120)
  check(subprocess.CompletedProcess(p.args, p.returncode, "", err), 130, re.compile(re.escape(
      f"error: interrupted; the run in {wd} is resumable: rerun the same command to continue from its latest "
      "checkpoint (step ") + r"\d+\)"))
  assert not (wd / "RUNNING").exists()


# ------------------------------------------------------------------------------------------------------------
# Issue 39, the library: odd arrays and a flow checkpoint.


def test_nconv_reads_negative_confidences_as_zero():
  """nconv accepted negative confidences: outputs beyond the data's range (a negative weight)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from pncnn_jax.nn import layers  # pylint: disable=g-import-not-at-top
  x = jnp.asarray([1.0, 2.0, 3.0, 4.0, 5.0]).reshape(1, 1, 5, 1)
  c = jnp.asarray([1.0, -0.9, 1.0, 0.0, 1.0]).reshape(1, 1, 5, 1)
  w, b = jnp.ones((1, 3, 1, 1)), jnp.zeros((1,))
  out, conf = layers.nconv(x, c, w, b)
  clamped = layers.nconv(x, jnp.maximum(c, 0), w, b)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(clamped[0]))
  np.testing.assert_array_equal(np.asarray(conf), np.asarray(clamped[1]))
  assert float(out.min()) >= 1.0 and float(out.max()) <= 5.0 and float(conf.min()) >= 0.0


def test_nan_coded_missing_depth_is_no_measurement():
  """model.apply turned NaN-coded missing data into an all-NaN output; NaN now reads as 0 (no measurement), and
  so do +-inf (REP 118's codes for too far / too near; the input contract's rule, `pncnn_jax.data.input_contract`),
  which still made the whole output NaN."""
  import jax  # pylint: disable=g-import-not-at-top

  from pncnn_jax import pretrained  # pylint: disable=g-import-not-at-top
  from pncnn_jax.nn import models  # pylint: disable=g-import-not-at-top
  variables, _ = pretrained.load("synthetic:ncnn")
  apply = jax.jit(functools.partial(models.build_model("ncnn").apply, variables))  # one small program, used twice
  rng = np.random.default_rng(0)
  depth = np.where(rng.random((1, 16, 16, 1)) < 0.3, rng.uniform(2, 60, (1, 16, 16, 1)), 0.0).astype(np.float32)
  zero, nan = apply(depth), apply(np.where(depth > 0, depth, np.nan).astype(np.float32))
  assert np.isfinite(np.asarray(nan.depth)).all()
  np.testing.assert_array_equal(np.asarray(nan.depth), np.asarray(zero.depth))
  np.testing.assert_array_equal(np.asarray(nan.confidence), np.asarray(zero.confidence))
  inf = apply(np.where(depth > 0, depth, np.where(rng.random(depth.shape) < 0.5, np.inf, -np.inf)).astype(np.float32))
  np.testing.assert_array_equal(np.asarray(inf.depth), np.asarray(zero.depth))
  np.testing.assert_array_equal(np.asarray(inf.confidence), np.asarray(zero.confidence))


def test_allow_mismatch_on_a_flow_checkpoint(tmp_path):
  """--allow_mismatch on a flow checkpoint (which the mismatch message suggests) was a KeyError traceback; a flow
  checkpoint did not load as itself ('unknown variant')."""
  from pncnn_jax.checkpoints import loader, manager  # pylint: disable=g-import-not-at-top
  path = manager.save_variables(tmp_path / "flow", {"params": {"w": np.ones(2, np.float32)}},
                                {"variant": "flow_pncnn", "config": {"variant": "flow_pncnn"}})
  loaded = loader.load(path, variant="flow_pncnn")
  assert loaded.variant == "flow_pncnn" and loaded.loss == "flow_nll"
  with pytest.raises(ValueError, match=re.escape(
      f"--checkpoint={path} holds variant 'flow_pncnn', whose weights do not fit 'flow_ncnn_conf'")):
    loader.load(path, variant="flow_ncnn_conf", allow_mismatch=True)
  with pytest.raises(ValueError, match=re.escape(
      f"--checkpoint={path} holds variant 'flow_pncnn', whose weights do not fit 'pncnn'")):
    loader.load(path, variant="pncnn", allow_mismatch=True)


def test_results_json_is_strict_json():
  """results.json held a bare Infinity (invalid JSON): non-finite numbers are written as null (NaN) and the
  strings "inf" / "-inf", as in metrics.jsonl."""
  from pncnn_jax import evaluate  # pylint: disable=g-import-not-at-top
  payload = {"a": float("inf"), "b": np.float32(-np.inf), "c": [np.nan, 1.5], "d": np.arange(2), "e": None}
  text = json.dumps(evaluate.strict_json(payload), allow_nan=False)
  assert json.loads(text) == {"a": "inf", "b": "-inf", "c": [None, 1.5], "d": [0, 1], "e": None}


# ------------------------------------------------------------------------------------------------------------
# Issue 50.2 and 50.4: every writer owns its output; empty paths.


def test_a_finished_run_rerun_with_other_settings_names_the_fields(run_dir, tmp_path):
  """train.py on a finished workdir with other settings overwrote config.json and trained on after one buried
  warning line (or, with the same length, said 'nothing to do' for settings it never ran). Now one line naming
  the fields, nothing changed; --allow_config_change continues from the latest checkpoint with the new settings and
  keeps the old config.json as config.until_step_2.json."""
  wd = tmp_path / "wd"
  shutil.copytree(run_dir[0], wd)
  before, old = digest(wd), json.loads((wd / "config.json").read_text())
  lr = old["learning_rate"]
  how = "pass --allow_config_change to continue it with the new settings, or use another --workdir"
  check(run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY, "--config.learning_rate=0.001"),
        2, f"error: {wd / 'config.json'} holds the settings this run was trained with until step 2, and 1 field(s) "
           f"differ: learning_rate: {lr!r} -> 0.001; {how}")
  longer = ["--config.learning_rate=0.001", "--config.num_epochs=2", "--config.data.train_crop_width=72"]
  check(run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY, *longer), 2,
        f"error: {wd / 'config.json'} holds the settings this run was trained with until step 2, and 3 field(s) "
        f"differ: data.train_crop_width: 64 -> 72, learning_rate: {lr!r} -> 0.001, num_epochs: 1 -> 2; {how}")
  assert digest(wd) == before
  r = run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY, *longer[:2],
          "--allow_config_change")
  assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
  assert "final validation (step 4)" in r.stdout
  assert json.loads((wd / "config.json").read_text())["num_epochs"] == 2
  assert json.loads((wd / "config.until_step_2.json").read_text()) == old


def test_empty_workdir_and_output_are_refused(run_dir, tmp_path):
  """--workdir "" (an unset shell variable) trained in the current directory; eval.py --output "" wrote its
  reports elsewhere than asked."""
  wd, trained = run_dir
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  r = subprocess.run([sys.executable, str(REPO / "train.py"), f"--config={REPO / 'configs' / 'synthetic.py'}:ncnn",
                      "--workdir=", *TINY], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300, check=False)
  check(r, 2, "error: --workdir is empty (an unset shell variable?); name the folder or file")
  check(run("eval.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", "--checkpoint=latest", *TINY,
            "--output="), 2, "error: --output is empty (an unset shell variable?); name the folder or file")
  assert not any(cwd.iterdir()) and digest(wd) == trained


def test_eval_owns_its_output(run_dir, tmp_path):
  """Two eval.py into one --output: the last won, and a folder held one checkpoint's results.json beside
  another's panels. The output is locked while an evaluation writes it, and records the checkpoint that wrote it
  (pncnn_writer.json); the reports of another checkpoint are refused in one line, --overwrite replaces them."""
  wd, trained = run_dir
  out = tmp_path / "e"
  out.mkdir()
  args = ["eval.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY, f"--output={out}"]
  lock = run_files.WorkdirLock(out)
  lock.what = "evaluation"  # the name the holder writes into RUNNING, as eval.py's own lock does
  with lock:
    started = json.loads(lock.info.read_text())["started"]
    check(run(*args, "--checkpoint=latest"), 2,
          f"error: --output {out} is in use by another evaluation (pid {os.getpid()} on host {socket.gethostname()}, "
          f"started {started}); wait for it to end or choose another --output")
    assert sorted(p.name for p in out.iterdir()) == ["RUNNING"]
  r = run(*args, "--checkpoint=latest")
  assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
  assert json.loads((out / "pncnn_writer.json").read_text())["model"]["step"] == 2
  before = digest(out)
  check(run(*args, f"--checkpoint={wd / 'checkpoints' / '1'}"), 2,
        f"error: --output {out} holds the outputs of eval.py with checkpoint 'latest' ({out / 'pncnn_writer.json'}; "
        "differs in model.step, model.weights_sha256); pass --overwrite to replace them, or choose another --output")
  assert digest(out) == before
  r = run(*args, f"--checkpoint={wd / 'checkpoints' / '1'}", "--overwrite")
  assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
  assert json.loads((out / "results.json").read_text())["checkpoint_step"] == 1
  assert not (out / "RUNNING").exists() and digest(wd) == trained
