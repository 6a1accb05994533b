"""pncnn_jax.runtime.distributed: a multi-process start-up whose peers do not join ends in one line."""

import os
import socket
import subprocess
import sys

import pytest

from conftest import REPO


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.mark.parametrize("process_id,joined", [
    (0, "1 of 2 processes joined (this one, process 0)"),
    (1, "none of them could join: nothing listens at localhost:{port} (process 0, the coordinator, has not started, "
        "or the address is wrong; this is process 1)"),
])
def test_peers_that_do_not_join_time_out_in_one_line(tmp_path, process_id, joined):
  """One process of a two-process run started alone printed nothing for 300 s, then jax aborted with a C++ stack
  trace saying another task died."""
  port = _free_port()
  flags = [f"--workdir={tmp_path / 'wd'}", f"--coordinator_address=localhost:{port}", "--num_processes=2",
           f"--process_id={process_id}", "--distributed_timeout=2"]
  r = subprocess.run([sys.executable, "train.py", "--config=configs/synthetic.py:ncnn", *flags], cwd=REPO,
                     env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=120,
                     check=False)
  assert r.returncode == 1, r.stderr[-3000:]
  lines = [x for x in r.stderr.splitlines() if x.strip()]
  assert lines == [f"error: timed out after 2 s waiting for the 2 processes of the run at coordinator "
                   f"localhost:{port}: {joined.format(port=port)}; start every process with the same "
                   "--coordinator_address and --num_processes, or raise --distributed_timeout"], r.stderr[-3000:]
  assert not (tmp_path / "wd").exists()
