"""End-to-end command lines on tiny synthetic runs: train.py, eval.py, python -m pncnn_jax.predict; clear errors."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from pncnn_jax.data import io

from conftest import REPO

TINY = [
    "--config.data.train_crop_height=32", "--config.data.train_crop_width=64",
    "--config.data.eval_crop_height=32", "--config.data.eval_crop_width=64",
    "--config.data.synthetic_size=8", "--config.data.eval_synthetic_size=3",
    "--config.steps_per_epoch=2", "--config.num_epochs=1", "--config.eval_batch_size=2",
    "--config.num_panels=2",  # no --progress: auto, and the tests' stderr is a pipe
]


def run(args, timeout=600):
  """The command's result, its output decoded as written: '\r' stays (text=True would turn it into '\n')."""
  env = dict(os.environ, PYTHONPATH=str(REPO))  # the tests' two host devices are inherited via XLA_FLAGS
  r = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, timeout=timeout, check=False)
  return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())


# The tests of the trained run share one worker, so that it is trained once.
TRAINED = pytest.mark.xdist_group("cli_trained")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  wd = tmp_path_factory.mktemp("run") / "wd"
  r = run(["train.py", "--config=configs/synthetic.py:ncnn_conf_l1", f"--workdir={wd}", *TINY])
  assert r.returncode == 0, r.stderr[-3000:]
  return wd, r


@TRAINED
def test_train_cli(trained):
  wd, r = trained
  assert "final validation (step 2)" in r.stdout
  rows = [json.loads(x) for x in (wd / "metrics.jsonl").read_text().splitlines()]
  assert [x["step"] for x in rows if x["split"] == "val"] == [2]
  assert "\r" not in r.stderr and "\r" not in r.stdout  # --progress auto: no bar redraws into a pipe
  # One unit per quantity: the train rows' batch errors in metres, the KITTI validation metrics in millimetres.
  train_units = [x["units"] for x in rows if x["split"] == "train"]
  assert train_units and all(u["mae"] == "m" and u["rmse"] == "m" and u["steps_per_sec"] == "step/s"
                             for u in train_units)
  val_units = [x["units"] for x in rows if x["split"] == "val"][0]
  assert val_units["mae"] == "mm" and val_units["rmse"] == "mm" and val_units["irmse"] == "1/km"
  assert re.search(r"final validation \(step 2\): mae=\S+ mm, rmse=\S+ mm", r.stdout), r.stdout
  assert json.loads((wd / "config.json").read_text())["data"]["train_crop_height"] == 32
  assert (wd / "checkpoints" / "2").is_dir()


def test_progress_on_draws_the_bar_with_units_into_a_pipe(tmp_path):
  r = run(["train.py", "--config=configs/synthetic.py:ncnn", f"--workdir={tmp_path / 'wd'}", *TINY, "--progress=on"])
  assert r.returncode == 0, r.stderr[-3000:]
  assert "\r" in r.stderr and "2/2" in r.stderr
  assert re.search(r"train rmse=\S+ m, lr=", r.stderr), r.stderr[-2000:]  # the bar: batch errors in metres
  assert re.search(r"step 2: val mae=\S+ mm, rmse=\S+ mm", r.stdout), r.stdout  # the val line (tqdm.write): KITTI mm


@TRAINED
def test_the_old_progress_spelling_still_works_with_a_notice(trained, tmp_path):
  wd, _ = trained
  r = run(["eval.py", "--config=configs/synthetic.py:ncnn_conf_l1", f"--workdir={wd}", "--checkpoint=best",
           f"--output={tmp_path / 'out'}", *TINY, "--config.progress_bar=True"])
  assert r.returncode == 0, r.stderr[-3000:]
  notes = [x for x in r.stderr.splitlines() if "deprecated" in x]
  assert notes == ["note: --config.progress_bar is deprecated and will be removed in the next release; use "
                   "--progress on|off|auto"]
  assert "\r" in r.stderr  # True is 'on', as before


@TRAINED
def test_eval_cli(trained):
  wd, _ = trained
  r = run(["eval.py", "--config=configs/synthetic.py:ncnn_conf_l1", f"--workdir={wd}", "--checkpoint=best",
           *TINY])
  assert r.returncode == 0, r.stderr[-3000:]
  assert "\r" not in r.stderr and "deprecated" not in r.stderr
  out = wd / "eval_best"
  res = json.loads((out / "results.json").read_text())
  assert res["checkpoint_step"] == 2 and res["results"]["num_images"] == 3
  val = [json.loads(x) for x in (wd / "metrics.jsonl").read_text().splitlines()][-1]
  assert val["split"] == "val"
  assert res["results"]["rmse"] == pytest.approx(val["rmse"], rel=1e-6)  # same split, same checkpoint
  assert res["results"]["auce"] is None  # L1 model: no calibrated sigma
  assert "auroc_disturbed" in res["results"]
  assert (out / "results.csv").read_text().startswith("name,")
  assert (out / "sparsification.png").stat().st_size > 0 and (out / "panels.png").stat().st_size > 0
  assert "| ncnn_conf_l1@best |" in r.stdout


@TRAINED
def test_predict_cli(trained, tmp_path):
  wd, _ = trained
  sparse = np.zeros((30, 50))
  sparse[::3, ::4] = 12.5
  io.write_kitti_depth(tmp_path / "in" / "x.png", sparse)
  (tmp_path / "in" / "y.png").write_text("not a png")
  r = run(["-m", "pncnn_jax.predict", "--checkpoint", str(wd), "--input", str(tmp_path / "in"), "--output",
           str(tmp_path / "out")])
  assert r.returncode == 1 and "y.png" in r.stderr  # one bad file: reported, the other still written
  assert io.read_kitti_depth(tmp_path / "out" / "x.png").shape == (30, 50)
  assert np.load(tmp_path / "out" / "x_confidence.npy").shape == (30, 50)  # L1 model: confidence, no sigma


def test_config_typo_is_a_clear_error(tmp_path):
  r = run(["train.py", "--config=configs/synthetic.py:ncnn_conf_l1", f"--workdir={tmp_path}",
           "--config.learning_rat=0.1"])
  assert r.returncode != 0 and "learning_rat" in r.stderr
  r = run(["train.py", "--config=configs/synthetic.py:ncnn_conv_l1", f"--workdir={tmp_path}"])
  assert r.returncode != 0 and "unknown variant 'ncnn_conv_l1'" in r.stderr


def test_bad_inputs_are_clear_errors(tmp_path):
  r = run(["train.py", "--config=configs/synthetic.py:ncnn_conf_l1", f"--workdir={tmp_path}",
           "--config.batch_size=3"])
  assert r.returncode == 2 and "batch_size=3 is not divisible by the number of devices (2)" in r.stderr
  r = run(["eval.py", "--config=configs/synthetic.py:ncnn_conf_l1", f"--workdir={tmp_path / 'none'}",
           "--checkpoint=best"])
  assert r.returncode == 2 and "holds no checkpoints" in r.stderr
  bad = tmp_path / "bad.pth.tar"
  bad.write_bytes(b"garbage")
  r = run(["eval.py", "--config=configs/synthetic.py:ncnn_conf_l1", f"--output={tmp_path / 'o'}",
           f"--checkpoint={bad}"])
  assert r.returncode == 2 and "bad.pth.tar" in r.stderr


def test_ensemble_train_and_eval_cli(tmp_path):
  """train.py / eval.py dispatch on an `ensemble` config: K members trained in one step, then every member and
  every fusion rule reported side by side."""
  wd = tmp_path / "ens"
  ens = ["--config.ensemble.num_members=2", "--config.ensemble.mle_steps=5", *TINY]
  r = run(["train.py", "--config=configs/ensemble_synthetic.py:ncnn", f"--workdir={wd}", *ens])
  assert r.returncode == 0, r.stderr[-3000:]
  r = run(["eval.py", "--config=configs/ensemble_synthetic.py:ncnn", f"--workdir={wd}", "--checkpoint=latest", *ens])
  assert r.returncode == 0, r.stderr[-3000:]
  table = [line for line in r.stdout.splitlines() if line.startswith("| ")]
  names = [line.split("|")[1].strip() for line in table[1:]]
  assert names == ["member 0", "member 1", "mean", "weighted_mean", "max_confidence", "mle"], r.stdout
  assert all(np.isfinite(float(line.split("|")[3])) for line in table[1:])  # rmse column
  # An ensemble trained as another variant is refused in one line, as for single models (issue 13.4).
  r = run(["eval.py", "--config=configs/ensemble_synthetic.py:ncnn_conf_l1", f"--workdir={wd}", "--checkpoint=latest",
           *ens])
  assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
  assert "was trained as variant 'ncnn'" in r.stderr and "'ncnn_conf_l1'" in r.stderr, r.stderr[-3000:]


# Settings out of range and the other bad inputs of issue 13: tests/test_bad_inputs.py.


@pytest.mark.parametrize("script,override,message", [
    ("train.py", "--config=configs/synthetic.py:ncnn_conv_l1",
     "error: --config configs/synthetic.py:ncnn_conv_l1: unknown variant 'ncnn_conv_l1'; choose one of ncnn, "),
    ("eval.py", "--config=configs/synthetic.py:ncnn_conv_l1",
     "error: --config configs/synthetic.py:ncnn_conv_l1: unknown variant 'ncnn_conv_l1'; choose one of ncnn, "),
    ("train.py", "--config=configs/synthetc.py:ncnn",
     "error: --config: configs/synthetc.py does not exist; the configs are configs/synthetic.py, configs/kitti.py"),
    ("eval.py", "--config=configs/synthetc.py:ncnn", "error: --config: configs/synthetc.py does not exist"),
])
def test_config_mistakes_are_one_line_and_exit_2(tmp_path, script, override, message):
  wd = tmp_path / "wd"
  config = [] if override.startswith("--config=") else ["--config=configs/synthetic.py:ncnn_conf_l1"]
  r = run([script, *config, f"--workdir={wd}", override])
  assert r.returncode == 2, r.stderr[-2000:]
  assert "Traceback" not in r.stderr
  lines = [x for x in r.stderr.splitlines() if x.strip() and not re.match(r"(WARNING|[IW]\d{4} )", x)]  # absl logs
  assert len(lines) == 1 and lines[0].startswith(message), r.stderr[-2000:]
  assert not wd.exists()  # nothing started


@pytest.mark.parametrize("script", ["train.py", "eval.py"])
def test_help_lists_configs_variants_and_fields(script):
  from pncnn_jax import from_config
  from pncnn_jax.nn import models
  from pncnn_jax.runtime import cli
  r = run([script, "--help"])  # absl exits with status 1 after --help
  for name in sorted(p.stem for p in (REPO / "configs").glob("*.py") if p.stem != "base"):
    assert f"configs/{name}.py" in r.stdout, name
  assert "Variants: " + ", ".join(models.VARIANTS) in r.stdout
  from pncnn_jax.flow import model as flow_model
  assert "Flow variants (configs/flow_synthetic.py only): " + ", ".join(flow_model.FLOW_VARIANTS) in r.stdout
  assert cli.FLOW_VARIANTS == tuple(flow_model.FLOW_VARIANTS)
  assert cli.VARIANTS == tuple(models.VARIANTS) and set(cli.CONFIG_FILES) == {
      p.stem for p in (REPO / "configs").glob("*.py") if p.stem != "base"}
  base = from_config.load_config(REPO / "configs" / "base.py")
  fields = re.findall(r"(?<![\w.-])((?:data\.|model\.)?[a-z_]+)(?==|  |$)", cli.CONFIG_HELP.split("Most-used fields")[1]
                      .split("A misspelled")[0].split("\n", 1)[1], re.M)
  assert len(fields) >= 15
  for f in fields:
    node = base
    for k in f.split("."):
      assert k in node, f"--help names {f}, which configs/base.py does not have"
      node = node[k]


@pytest.mark.parametrize("script", ["train.py", "eval.py"])
def test_an_unbuilt_data_dir_is_one_line_and_creates_nothing(tmp_path, script):
  """Issue 14: a missing KITTI data_dir printed a 40-line TFDS traceback that began "Downloading and preparing
  dataset" and created downloads/ and kitti_depth/ under it (and the workdir)."""
  data_dir, wd = tmp_path / "kitti_tfds", tmp_path / "wd"
  out = ["--workdir", str(wd)] if script == "train.py" else ["--output", str(wd)]
  r = run([script, "--config=configs/kitti.py:pncnn", f"--config.data.data_dir={data_dir}", *out])
  assert r.returncode == 2 and "Traceback" not in r.stderr and "Downloading" not in r.stderr, r.stderr[-2000:]
  lines = [x for x in r.stderr.splitlines() if x.strip() and not re.match(r"(WARNING|[IW]\d{4} )", x)]
  assert lines == [f"error: data_dir {data_dir} does not exist; build it once (docs/DATA.md): python -m "
                   f"pncnn_jax.data.build kitti_depth --manual_dir KITTI_ROOT --data_dir {data_dir}"], r.stderr
  assert not data_dir.exists() and not wd.exists()
  data_dir.mkdir()
  r = run([script, "--config=configs/nyu.py:pncnn", f"--config.data.data_dir={data_dir}", *out])
  assert r.returncode == 2 and f"holds no built nyu_depth (looked for {data_dir}/nyu_depth/1.0.0/" in r.stderr
  assert list(data_dir.iterdir()) == [] and not wd.exists()


SIGKILL_AT_SAVE = """
import os, runpy, signal, sys
from pncnn_jax.checkpoints import manager
save = manager.Checkpointer.save
def save_then_die(self, step, *a, **k):
  save(self, step, *a, **k)  # issued (an async save may still be writing): then no clean-up of any kind
  if step == int(os.environ["KILL_AFTER_SAVE"]):
    os.kill(os.getpid(), signal.SIGKILL)
manager.Checkpointer.save = save_then_die
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path("train.py", run_name="__main__")
"""


def test_a_sigkilled_training_resumes_to_the_uninterrupted_parameters(tmp_path):
  """train.py killed by SIGKILL right after it issued the checkpoint of step 3 (of 6; one per step), then the same
  command again: the final parameters and optimizer state are bitwise those of a run never interrupted (NCNN, no
  BatchNorm: no rounding noise between programs)."""
  from pncnn_jax.checkpoints import manager  # pylint: disable=g-import-not-at-top
  args = ["--config=configs/synthetic.py:ncnn", *TINY, "--config.num_epochs=3", "--config.checkpoint_every_steps=1",
          "--config.max_to_keep=10"]
  whole = run(["train.py", f"--workdir={tmp_path / 'whole'}", *args])
  assert whole.returncode == 0, whole.stderr[-3000:]
  env = dict(os.environ, PYTHONPATH=str(REPO), KILL_AFTER_SAVE="3")
  killed = subprocess.run([sys.executable, "-c", SIGKILL_AT_SAVE, f"--workdir={tmp_path / 'cut'}", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
  assert killed.returncode == -9, killed.stderr[-3000:]
  assert (tmp_path / "cut" / "RUNNING").exists()  # the kill left its lock file: the rerun must see it is stale
  again = run(["train.py", f"--workdir={tmp_path / 'cut'}", *args])
  assert again.returncode == 0, again.stderr[-3000:]
  trees = []
  for name in ("whole", "cut"):
    with manager.Checkpointer(tmp_path / name, read_only=True) as ckpt:
      assert ckpt.latest_step() == 6
      trees.append(ckpt.restore(6)[0])
  for x, y in zip(jax_leaves(trees[0]), jax_leaves(trees[1]), strict=True):
    np.testing.assert_array_equal(x, y)


def jax_leaves(tree):
  import jax  # pylint: disable=g-import-not-at-top
  return [np.asarray(x) for x in jax.tree.leaves(tree)]
