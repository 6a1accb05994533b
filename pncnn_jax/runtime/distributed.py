"""Multi-process runs: the command-line flags of train.py and eval.py and `jax.distributed.initialize`.

A multi-process run is one process per host (TPU pod slices, GPU nodes) or per GPU, all running the same command.
They join before anything touches a device; then `jax.devices()` lists every process's devices, the mesh of
pncnn_jax.runtime.sharding spans them all, each process feeds its rows of each global batch (pncnn_jax.data.pipeline)
and process 0 writes the metrics and the config (orbax coordinates the checkpoints: every process calls save and
restore). How the processes find each other, the first that applies:

  * flags: `--coordinator_address=HOST:PORT --num_processes=N --process_id=I` (HOST:PORT is where process 0
    listens: a port free on its host, reachable from the others);
  * environment: the same three from `JAX_COORDINATOR_ADDRESS` (read by jax itself), `JAX_NUM_PROCESSES` and
    `JAX_PROCESS_ID` (read here), for launchers that set variables;
  * `--multihost` alone: jax's cluster auto-detection (SLURM, Open MPI, Cloud TPU pod slices, Kubernetes), i.e.
    `jax.distributed.initialize()` without arguments.

Start-up has a deadline: a process whose peers have not all joined within `--distributed_timeout` seconds (default
DEFAULT_TIMEOUT_S) prints one line (how many processes joined, which coordinator address it waited on) and exits
with status 1, instead of jax's silent 300 s wait and C++ abort. Raise it where processes start far apart.

On CPU the processes exchange data through gloo (`jax_cpu_collectives_implementation='gloo'`, set here unless
$JAX_CPU_COLLECTIVES_IMPLEMENTATION chooses; the default of jax 0.12), and jax's persistent compilation cache is
turned off once they have joined (`compile_cache.off_for_cpu_collectives`: why is there). absl and jax only;
nothing touches a device before the processes have joined.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading

from absl import flags

from pncnn_jax.runtime import compile_cache

log = logging.getLogger(__name__)

ENV_NUM_PROCESSES, ENV_PROCESS_ID, ENV_COORDINATOR = "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS"
DEFAULT_TIMEOUT_S = 30  # seconds for every process of a run to join (--distributed_timeout)


def define_flags() -> None:
  """Defines --multihost, --coordinator_address, --num_processes and --process_id (once per program)."""
  flags.DEFINE_bool("multihost", False, "join a multi-process run by jax's cluster auto-detection (SLURM, Open MPI, "
                    "Cloud TPU pod slices), or by --coordinator_address/--num_processes/--process_id")
  flags.DEFINE_string("coordinator_address", None, f"HOST:PORT of process 0 of a multi-process run (default: "
                      f"${ENV_COORDINATOR})")
  flags.DEFINE_integer("num_processes", None, f"processes of a multi-process run (default: ${ENV_NUM_PROCESSES})")
  flags.DEFINE_integer("process_id", None, f"this process's index, 0 .. num_processes-1 (default: ${ENV_PROCESS_ID})")
  flags.DEFINE_integer("distributed_timeout", DEFAULT_TIMEOUT_S, "seconds to wait for every process of a "
                       "multi-process run to join before giving up with one line", lower_bound=1)


def initialize_from_flags() -> bool:
  """`initialize` with the values of the flags of `define_flags`."""
  f = flags.FLAGS
  return initialize(f.coordinator_address, f.num_processes, f.process_id, auto=f.multihost,
                    timeout_s=f.distributed_timeout)


def _env_int(environ, name: str) -> int | None:
  value = environ.get(name)
  if value in (None, ""):
    return None
  try:
    return int(value)
  except ValueError:
    raise ValueError(f"${name}={value!r}: must be an integer") from None


def resolve(coordinator_address: str | None = None, num_processes: int | None = None, process_id: int | None = None,
            environ=os.environ, *, partial: bool = False) -> tuple[str | None, int | None, int | None] | None:
  """The (coordinator_address, num_processes, process_id) given by the arguments or else the environment, or None
  when neither gives any. Raises ValueError (naming the flag) for an inconsistent set, or a partial one unless
  `partial` (--multihost: jax's cluster detection fills in the rest)."""
  address = coordinator_address or environ.get(ENV_COORDINATOR) or None
  n = num_processes if num_processes is not None else _env_int(environ, ENV_NUM_PROCESSES)
  i = process_id if process_id is not None else _env_int(environ, ENV_PROCESS_ID)
  given = {"--coordinator_address": address, "--num_processes": n, "--process_id": i}
  if all(v is None for v in given.values()):
    return None
  missing = [k for k, v in given.items() if v is None]
  if missing and not partial:
    have = ", ".join(k for k, v in given.items() if v is not None)
    raise ValueError(f"{have} given without {' and '.join(missing)}: a multi-process run needs all three (or "
                     f"--multihost, in a SLURM, Open MPI or Cloud TPU job)")
  host, _, port = (address or "h:1").rpartition(":")
  if not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(f"--coordinator_address={address!r}: must be HOST:PORT (process 0's host and a free port)")
  if n is not None and n < 1:
    raise ValueError(f"--num_processes={n}: must be >= 1")
  if i is not None and (i < 0 or (n is not None and i >= n)):
    raise ValueError(f"--process_id={i}: must be in 0 .. {n - 1 if n else 'num_processes - 1'} (--num_processes={n})")
  return address, n, i


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, auto: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
  """Joins this process to a multi-process run (see the module docstring); returns whether it did.

  Nothing given (no arguments, no environment variables, auto False) is a single-process run: nothing is done.
  With `auto` (--multihost), what is not given comes from jax's cluster detection. Call it before anything touches
  a device. Raises ValueError with a one-line message for a partial set of arguments without `auto`, or for
  `auto` outside a cluster jax recognises. When not every process has joined after `timeout_s` seconds, prints
  one line (`join_failure`) and ends the process with status 1 (jax's own deadline, set later, would abort it in
  C++ with a stack trace; a Python exception cannot be raised out of the blocked call).
  """
  given = resolve(coordinator_address, num_processes, process_id, partial=auto)
  if given is None and not auto:
    return False
  import jax  # pylint: disable=g-import-not-at-top
  if "JAX_CPU_COLLECTIVES_IMPLEMENTATION" not in os.environ:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  address, n, i = given or (None, None, None)
  joined = threading.Event()

  def give_up():
    if not joined.wait(timeout_s):
      print(f"error: {join_failure(address, n, i, timeout_s)}", file=sys.stderr, flush=True)
      os._exit(1)

  threading.Thread(target=give_up, daemon=True, name="distributed-join-deadline").start()
  try:
    jax.distributed.initialize(coordinator_address=address, num_processes=n, process_id=i,
                               initialization_timeout=int(timeout_s) + 60)
  except ValueError as e:  # jax, e.g. 'coordinator_address should be defined.' outside a known cluster
    if not auto:
      raise
    raise ValueError(f"--multihost: no SLURM, Open MPI or Cloud TPU environment gave what is missing ({e}); give "
                     "--coordinator_address, --num_processes and --process_id instead") from None
  finally:
    joined.set()
  if compile_cache.off_for_cpu_collectives():
    log.warning("a multi-process run on CPU: jax's persistent compilation cache is off (a program loaded from it "
                "hangs in gloo's all-reduce with jax 0.12.1; pncnn_jax/runtime/compile_cache.py)")
  return True


def join_failure(address: str | None, num_processes: int | None, process_id: int | None, timeout_s: float) -> str:
  """The one line of a start-up that timed out: how many processes joined, as far as this one can tell (jax reports
  no count before all have joined: this one, and whether anything listens at the coordinator address), and where
  it waited."""
  where = address or "the coordinator address of the cluster environment"
  n = num_processes if num_processes is not None else "?"
  host, _, port = (address or "").rpartition(":")
  listening = False
  if host and port.isdigit():
    try:
      with socket.create_connection((host, int(port)), timeout=2):
        listening = True
    except OSError:
      pass
  if process_id == 0 or listening:
    joined = "1 of 2 processes joined (this one, process 0)" if n == 2 and process_id == 0 else (
        f"fewer than {n} processes joined (this one, process {process_id}, did" + (
            "; the coordinator, process 0, is up)" if process_id != 0 else ")"))
  else:
    joined = (f"none of them could join: nothing listens at {where} (process 0, the coordinator, has not started, "
              f"or the address is wrong; this is process {process_id})")
  return (f"timed out after {timeout_s:g} s waiting for the {n} processes of the run at coordinator {where}: "
          f"{joined}; start every process with the same --coordinator_address and --num_processes, or raise "
          "--distributed_timeout")
