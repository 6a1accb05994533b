"""pncnn_jax.runtime.cli: the one `--progress auto|on|off` of every command, and where `--config` finds its file."""

import io
import pathlib
import sys

import pytest

from pncnn_jax.runtime import cli


class _Terminal(io.StringIO):

  def isatty(self):
    return True


def test_progress_auto_draws_only_on_a_terminal():
  assert cli.progress_enabled("auto", _Terminal()) is True
  assert cli.progress_enabled("auto", io.StringIO()) is False  # a pipe or a log file
  assert cli.progress_enabled("on", io.StringIO()) is True
  assert cli.progress_enabled("off", _Terminal()) is False


def test_an_unknown_progress_mode_is_one_line():
  with pytest.raises(ValueError, match=r"^--progress 'yes': expected one of auto, on, off$"):
    cli.progress_enabled("yes")


# --------------------------------------------------------------------------------------------------------------
# --config: a file, or a packaged config by name (pncnn_jax/configs/)


def test_the_packaged_configs_are_the_ones_help_lists():
  assert cli.CONFIG_DIR == pathlib.Path(cli.__file__).resolve().parents[1] / "configs"
  assert {p.stem for p in cli.CONFIG_DIR.glob("*.py")} == {*cli.CONFIG_FILES, "base", "__init__"}


@pytest.mark.parametrize("spec,packaged", [
    ("kitti:pncnn", "kitti.py:pncnn"), ("kitti.py:ncnn", "kitti.py:ncnn"), ("configs/kitti.py:pncnn", "kitti.py:pncnn"),
    ("synthetic", "synthetic.py"), ("configs/flow_synthetic.py:", "flow_synthetic.py:"), ("base", "base.py"),
])
def test_a_config_is_found_by_name_from_any_directory(spec, packaged, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # no configs/ here
  assert cli.config_path(spec) == f"{cli.CONFIG_DIR}/{packaged}"


def test_a_file_of_the_users_wins_and_what_is_not_found_stays_as_given(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "configs").mkdir()
  (tmp_path / "configs" / "kitti.py").write_text("def get_config(arg=None):\n  return {'mine': arg}\n")
  (tmp_path / "kitti").write_text("")  # a file named like a config
  assert cli.config_path("configs/kitti.py:pncnn") == "configs/kitti.py:pncnn"
  assert cli.config_path("kitti") == "kitti"
  assert cli.config_path("kitti.py:pncnn") == f"{cli.CONFIG_DIR}/kitti.py:pncnn"
  for spec in ("configs/synthetc.py:ncnn", "other/kitti.py:pncnn", "/abs/configs/kitti.py", "__init__", "kitti.json",
               "", ":pncnn"):
    assert cli.config_path(spec) == spec


def test_the_config_flag_reads_a_packaged_config_by_name(tmp_path, monkeypatch):
  """`define_config_flag`: ml_collections' DEFINE_config_file (a locked config, overrides), FILE found by
  `config_path`; the checkout's configs/kitti.py reads the same recipe as the packaged one."""
  from absl import flags
  monkeypatch.chdir(tmp_path)
  values = flags.FlagValues()
  holder = cli.define_config_flag(values)
  argv = ["prog", "--config=nyu:ncnn_conf_l1", "--config.batch_size=2"]
  monkeypatch.setattr(sys, "argv", argv)  # ml_collections finds the overrides in sys.argv
  values(argv)
  config = holder.value
  assert (config.variant, config.data.dataset, config.batch_size, config.lr_decay_epochs) == (
      "ncnn_conf_l1", "nyu_depth", 2, 3)
  with pytest.raises(AttributeError):
    config.learning_rat = 0.1  # locked
  from pncnn_jax import from_config
  checkout = pathlib.Path(cli.__file__).resolve().parents[2] / "configs" / "nyu.py"
  assert from_config.load_config(f"{checkout}:ncnn_conf_l1").to_dict() == from_config.load_config(
      "nyu:ncnn_conf_l1").to_dict()
