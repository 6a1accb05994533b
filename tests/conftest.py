"""Shared test set-up: strict numerics, two host devices, and the ../shared reference files."""

import os
import pathlib

# Two host CPU devices for the sharding tests; must be set before jax is imported. And XLA:CPU's LLVM backend at
# optimisation level 0: compiling is most of the suite's time on CPU, and level 0 compiles its small programs
# ~45 % faster (docs/develop/benchmarks-log.md, 'The test suite'). The programs are the same (one HLO); their float32
# results differ from the default level's by rounding (instruction selection), as another CPU's would. Every parity and
# golden test passes at both levels with the same tolerances; the benchmarks and users run the default level.
# Subprocesses (train.py, eval.py, predict) inherit both flags through the environment.
TEST_XLA_FLAGS = "--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0"
os.environ.setdefault("XLA_FLAGS", TEST_XLA_FLAGS)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The test cache (below), also for the train.py/eval.py subprocesses of the CLI tests (a set variable wins over
# train.py's default <workdir>/jax_cache, pncnn_jax/runtime/compile_cache.py): one shared cache, ignored by git.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(pathlib.Path(__file__).resolve().parents[1] / ".jax_cache"))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
# Compiling dominates the suite on CPU; a persistent cache shares identical programs across test files and the
# two xdist workers (and makes a rerun fast). Ignored by git.
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs",
                  float(os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", 0.5)))

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("PNCNN_SHARED", REPO.parent / "shared")).resolve()
REFERENCE = SHARED / "reference"
GOLDEN = REFERENCE / "golden"
WEIGHTS = REFERENCE / "weights"
DATA = SHARED / "data"


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
  if not (SHARED / "reference").is_dir():
    pytest.fail(f"../shared not found at {SHARED}: the parity tests need it (set PNCNN_SHARED)")
  return SHARED


def load_npz(path) -> dict[str, np.ndarray]:
  """Loads a whole .npz into a dict (the files are small enough)."""
  with np.load(path) as f:
    return {k: f[k] for k in f.files}


def nchw_to_nhwc(a: np.ndarray) -> np.ndarray:
  return np.transpose(a, (0, 2, 3, 1))


def frame_at_density(rng: np.random.Generator, shape: tuple[int, int], lo_m: float, hi_m: float,
                     density: float = 0.08) -> np.ndarray:
  """A sparse (H, W) float32 depth map: `density` of its pixels hold a depth uniform in [lo_m, hi_m] m, the first
  and the last row among them, so its input density (`input_contract.input_density`) is `density`; the default
  8 % lies inside the range the shipped models were trained on (6.0-10.3 %): a test sees only its own warnings."""
  h, w = shape
  n = round(density * h * w)
  idx = np.concatenate([[rng.integers(w), (h - 1) * w + rng.integers(w)],
                        rng.choice(np.arange(w, (h - 1) * w), n - 2, replace=False)])
  frame = np.zeros(h * w, np.float32)
  frame[idx] = rng.uniform(lo_m, hi_m, n)
  return frame.reshape(h, w)


def stop_after_writes(module: str, prog: str, writes: int) -> str:
  """A `python -c` script that runs the bag command `module` as `prog` (its flags: the script's arguments) and, once
  its bag writer has written `writes` messages, prints WRITING and sleeps: the test then signals or kills it in
  the middle of a conversion."""
  return f"""
import runpy, sys, time
from rosbags.rosbag2 import storage_sqlite3
write, calls = storage_sqlite3.Sqlite3Writer.write, [0]
def stop(self, *a):
  write(self, *a)
  calls[0] += 1
  if calls[0] == {writes}:
    print("WRITING", flush=True)
    time.sleep(120)
storage_sqlite3.Sqlite3Writer.write = stop
sys.argv = [{prog!r}] + sys.argv[1:]
runpy.run_module({module!r}, run_name="__main__")
"""


@pytest.fixture
def recorded(monkeypatch):
  """`recorded(owner, name)`: from now on, the (args, kwargs) of every call of `owner.name` (a class's method, self
  included in args), in order; the method still runs. A test replays them to recompute what a caller reported."""

  def record(owner, name):
    calls = []
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
      calls.append((args, kwargs))
      return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return calls

  return record


def pytest_collection_modifyitems(config, items):
  """The longest work first, so that neither of `make test`'s two xdist workers idles at the end while the other
  runs a long test: xdist hands out work units (an `xdist_group`, else one test) in this order, one at a time to the
  worker that is free. First the groups (files that share one trained run or one compiled model), then the tests
  marked `slow`, then the rest, each in collection order."""
  del config

  def rank(item):
    if item.get_closest_marker("xdist_group"):
      return 0
    return 1 if item.get_closest_marker("slow") else 2

  items[:] = sorted(items, key=rank)  # stable: collection order within a rank
