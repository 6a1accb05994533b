"""pncnn_jax.runtime.run_files: one training per workdir (WorkdirLock), writable places, config.json checks."""

import json
import os
import signal
import subprocess
import sys

import ml_collections
import pytest

from pncnn_jax.runtime import run_files

from conftest import REPO

HOLD = """
import sys, time
from pncnn_jax.runtime import run_files
run_files.WorkdirLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(120)
"""


def test_a_second_holder_is_refused_and_named(tmp_path):
  with run_files.WorkdirLock(tmp_path) as first:
    info = json.loads((tmp_path / run_files.RUNNING_FILE).read_text())
    assert info["pid"] == os.getpid()
    with pytest.raises(run_files.WorkdirBusyError, match=rf"--workdir {tmp_path} is in use by another training run "
                       rf"\(pid {os.getpid()} on host "):
      run_files.WorkdirLock(tmp_path).acquire()
    assert first.info.exists()
  assert not (tmp_path / run_files.RUNNING_FILE).exists()
  with run_files.WorkdirLock(tmp_path):  # released: the next run takes it
    pass


def test_a_killed_holder_leaves_no_lock(tmp_path):
  """SIGKILL leaves a stale RUNNING file but no lock (the kernel drops a dead process's flock): the next run goes
  on and replaces the file."""
  p = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
  try:
    assert p.stdout.readline().strip() == "locked"
    with pytest.raises(run_files.WorkdirBusyError, match=f"pid {p.pid} on host"):
      run_files.WorkdirLock(tmp_path).acquire()
  finally:
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
  assert json.loads((tmp_path / run_files.RUNNING_FILE).read_text())["pid"] == p.pid  # stale
  with run_files.WorkdirLock(tmp_path):
    assert json.loads((tmp_path / run_files.RUNNING_FILE).read_text())["pid"] == os.getpid()


def test_check_writable_names_the_path(tmp_path):
  (tmp_path / "f").write_text("x")
  run_files.check_writable(tmp_path / "new" / "deeper")  # creatable: fine, nothing created
  assert not (tmp_path / "new").exists()
  with pytest.raises(OSError) as e:
    run_files.check_writable(tmp_path / "f" / "sub")
  assert e.value.filename == str(tmp_path / "f" / "sub")
  assert e.value.strerror == f"{tmp_path / 'f'} is a file, not a folder"
  if os.geteuid() != 0:  # root writes anywhere
    (tmp_path / "ro").mkdir(mode=0o500)
    with pytest.raises(PermissionError) as e:
      run_files.check_writable(tmp_path / "ro" / "out")
    assert e.value.filename == str(tmp_path / "ro")


def test_config_json_of_another_variant_names_the_file(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps({"variant": "pncnn"}))
  config = ml_collections.ConfigDict({"variant": "ncnn"})
  with pytest.raises(ValueError, match=f"^{tmp_path / 'config.json'} holds a run of variant 'pncnn', but "):
    run_files.check_config_file(config, tmp_path)
  assert not run_files.check_config_file(config, tmp_path / "none")


def test_config_differences_name_nested_fields():
  old = {"learning_rate": 0.01, "data": {"train_crop_height": 32, "dataset": "synthetic"}, "seed": 0}
  new = {"learning_rate": 0.01, "data": {"train_crop_height": 64, "dataset": "synthetic"}, "loss": "l1"}
  names = run_files.config_differences(old, new)
  assert names == ["data.train_crop_height", "loss", "seed"]
  assert run_files.describe_differences(old, new, names, limit=2) == (
      "data.train_crop_height: 32 -> 64, loss: '(none)' -> 'l1' and 1 more")


def test_claim_output_refuses_another_writer_unless_overwrite(tmp_path):
  """The record is written atomically; the same writer claims again silently; another model, or outputs without
  a record, are refused naming the file and the fields, and `overwrite` replaces the record."""
  a = {"command": "predict", "checkpoint": "a", "model": {"weights_sha256": "1"}, "settings": {"fill": False}}
  assert run_files.claim_output(tmp_path, a, has_outputs=False) is None
  assert run_files.read_writer(tmp_path)["checkpoint"] == "a"
  assert sorted(p.name for p in tmp_path.iterdir()) == [run_files.WRITER_FILE]  # no temporary file left
  assert run_files.claim_output(tmp_path, {**a, "checkpoint": "a-again"}) is None  # same weights and settings
  b = {**a, "checkpoint": "b", "model": {"weights_sha256": "2"}, "settings": {"fill": True}}
  with pytest.raises(run_files.OutputOwnedError, match=r"holds the outputs of predict with checkpoint 'a-again' \(.*"
                     r"pncnn_writer.json; differs in model.weights_sha256, settings.fill\); pass --overwrite"):
    run_files.claim_output(tmp_path, b)
  assert run_files.claim_output(tmp_path, b, overwrite=True).startswith("the outputs of predict")
  assert run_files.read_writer(tmp_path)["checkpoint"] == "b"
  (tmp_path / run_files.WRITER_FILE).unlink()
  with pytest.raises(run_files.OutputOwnedError, match="holds outputs without a record of the model"):
    run_files.claim_output(tmp_path, b, has_outputs=True)


def test_empty_paths_are_refused():
  run_files.require_path(None, "--output")  # not given: fine
  for value in ("", "  "):
    with pytest.raises(ValueError, match=r"^--workdir is empty \(an unset shell variable\?\)"):
      run_files.require_path(value, "--workdir")


def test_metric_rows_name_the_unit_of_each_value_that_has_one(tmp_path):
  writer = run_files.MetricWriter(tmp_path)
  writer.write(2, "train", {"loss": 0.5, "rmse": 1.25}, units={"rmse": "m", "mae": "m"})
  writer.write(2, "val", {"rmse": 1250.0})  # no units: a row as older versions wrote it
  writer.close()
  train, val = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert train["units"] == {"rmse": "m"} and train["rmse"] == 1.25 and train["loss"] == 0.5
  assert "units" not in val and val["rmse"] == 1250.0


def test_a_field_added_to_the_configs_at_its_default_is_no_change(tmp_path):
  """A run written before a field existed was trained as the field's default: resuming or rerunning it with the
  default is no change; with another value it is, and so is a changed old field."""
  defaults = {"data": {"sensors": {"train": ""}}}  # config_fields.predating_values(): the fields added later
  (tmp_path / "config.json").write_text(json.dumps({"variant": "pncnn", "lr": 0.01, "data": {"crop": 64}}))
  config = ml_collections.ConfigDict({"variant": "pncnn", "lr": 0.01, "data": {"crop": 64, "sensors": {"train": ""}}})
  assert run_files.check_config_change(config, tmp_path, step=5, defaults=defaults) == ""
  assert run_files.check_config_file(config, tmp_path, defaults) == []
  with pytest.raises(run_files.ConfigChangedError, match=r"1 field\(s\) differ: data.sensors: '\(none\)' -> "):
    run_files.check_config_change(config, tmp_path, step=5)  # without the defaults: a difference, as before
  config.data.sensors.train = "lidar_mix"
  with pytest.raises(run_files.ConfigChangedError, match="1 field"):
    run_files.check_config_change(config, tmp_path, step=5, defaults=defaults)
  config.data.sensors.train, config.lr = "", 0.1
  assert run_files.check_config_file(config, tmp_path, defaults) == ["lr"]
