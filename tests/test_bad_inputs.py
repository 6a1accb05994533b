"""Every user-facing bad input of issue 13, through the command lines (train.py, eval.py, python -m
pncnn_jax.{predict,convert,export}) in subprocesses.

For each case: the exit status (2: a user mistake, refused before anything is written; 1: a run that failed, or
some files of a batch that failed), the message lines on stderr (one line naming the file or argument, unless
several files are named), no traceback, and no change to the inputs or to a training workdir (a digest of every
file before and after).

One tiny training run (configs/synthetic.py:ncnn, 2 steps at 32x64) serves every case that needs a workdir; the
module runs in one xdist group so that it is trained once.
"""

import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pncnn_jax.data import io

from conftest import REFERENCE, REPO, WEIGHTS

pytestmark = pytest.mark.xdist_group("bad_inputs")

TINY = [
    "--config.data.train_crop_height=32", "--config.data.train_crop_width=64",
    "--config.data.eval_crop_height=32", "--config.data.eval_crop_width=64",
    "--config.data.synthetic_size=8", "--config.data.eval_synthetic_size=2",
    "--config.steps_per_epoch=2", "--config.num_epochs=1", "--config.eval_batch_size=2",
    "--config.num_panels=1", "--config.progress_bar=False",
]
CKPTS = REFERENCE / "checkpoints"
ABSL_LOG = re.compile(r"[IWE]\d{4} ")  # absl's own log lines (train.py and eval.py log the devices at WARNING)


def run(*args, timeout=300):
  # The tests' two host devices are inherited via XLA_FLAGS; the subprocesses share the suite's compilation cache.
  env = dict(os.environ, PYTHONPATH=str(REPO), JAX_COMPILATION_CACHE_DIR=str(REPO / ".jax_cache"),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.5")
  return subprocess.run([sys.executable, *map(str, args)], cwd=REPO, env=env, capture_output=True, text=True,
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
  r = run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY)
  assert r.returncode == 0, r.stderr[-3000:]
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
    ("train.py", "--config.grad_clip_norm=-1",
     "error: config.grad_clip_norm=-1.0: must be a finite number >= 0 (0: no clipping)"),
    ("train.py", "--config.num_epochs=0", "error: config.num_epochs=0: must be an integer >= 1"),
    ("train.py", "--config.num_epochs=-3", "error: config.num_epochs=-3: must be an integer >= 1"),
    ("train.py", "--config.batch_size=0", "error: config.batch_size=0: must be an integer >= 1"),
    ("train.py", "--config.data.train_crop_width=-5",
     "error: config.data.train_crop_width=-5: must be an integer >= 1 (the train crop is 'center')"),
    ("train.py", "--config.data.train_crop_height=400",
     "error: config.data.train_crop_height=400: must be <= 352: the train crop 400x320 does not fit in the "
     "352x1216 frames of synthetic/train"),
    ("eval.py", "--config.eval_batch_size=0", "error: config.eval_batch_size=0: must be an integer >= 1"),
])
def test_settings_out_of_range(tmp_path, script, override, message):
  """A negative learning rate trained uphill with exit 0; num_epochs=0 or -3 exited 0 and printed nothing; a
  typo printed 55 lines before "Did you mean"; a crop larger than the frame failed after the workdir was made."""
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
  assert sorted(p.name for p in (tmp_path / "o").glob("*.png") if "preview" not in p.name) == [
      "a.png", "b.png", "d_tiny.png"]
  assert digest(inputs) == before and digest(wd) == trained


# ------------------------------------------------------------------------------------------------------------
# A diverging run (issue 13.3).


def test_divergence_is_one_line_and_exit_1(tmp_path):
  """At lr 1e30 the 'last good checkpoint' had a parameter norm of 8e32; the run now stops at the first
  non-finite step, before saving, and says how to go on (the lr 1e6 case: tests/training/test_train.py)."""
  wd = tmp_path / "wd"
  r = run("train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={wd}", *TINY, "--config.learning_rate=1e30")
  check(r, 1, re.compile(re.escape("error: the run diverged at step ") + r"\d+: non-finite loss, .* of ncnn in "
                         + re.escape(f"{wd}. Nothing was saved; lower config.learning_rate and rerun.")))
  assert not list((wd / "checkpoints").glob("[0-9]*"))
