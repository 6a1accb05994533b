"""pncnn_jax.runtime.cli: the one `--progress auto|on|off` of every command."""

import io

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
