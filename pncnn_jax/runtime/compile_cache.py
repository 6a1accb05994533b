"""jax's persistent compilation cache for training runs: a restarted or resumed run loads its compiled step.

Why: compiling a pNCNN training step at 352x1216 takes XLA:CPU 20-30 s of CPU time, on every start of train.py
and every resume; with the cache, a program compiled once is loaded from disk (docs/develop/benchmarks-log.md, "Compile
time"). jax keys each entry on the program, the jax and XLA versions, the flags and the machine, so a stale entry
is never used.

Nothing is written outside the places the user named: `training.loop.train_and_evaluate` calls `enable(workdir)` once
the workdir is accepted, which puts the cache in `<workdir>/jax_cache` unless

  - JAX_COMPILATION_CACHE_DIR is set (the user's folder wins; `python -m pncnn_jax.experiments.reproduce` sets it to its
    `<workdir>/jax_cache`, so that its runs share programs), or jax's `jax_compilation_cache_dir` option is set
    already (by the user, or by an earlier run in this process: the first one decides), or
  - PNCNN_NO_COMPILATION_CACHE=1 (no cache).

eval.py and predict use the cache only when the user sets JAX_COMPILATION_CACHE_DIR (jax reads it itself).
Entries are a few MB per training program and jax never evicts them: delete the folder to reclaim the space.

A multi-process run on CPU never uses it (`off_for_cpu_collectives`, called by pncnn_jax.runtime.distributed when
the processes have joined): there collectives go through gloo, and with jax/jaxlib 0.12.1 a data-parallel training
step loaded from the cache waits in gloo's all-reduce in every process forever (a resumed run hangs at its first
step), where the same program compiled afresh runs (0.12.0.1 runs both). Such a run compiles its programs at every
start instead. Single-process runs, and multi-process runs on GPU or TPU (no gloo), keep the cache.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

VARIABLE = "JAX_COMPILATION_CACHE_DIR"
OPT_OUT = "PNCNN_NO_COMPILATION_CACHE"
SUBDIR = "jax_cache"


def directory(workdir: str | os.PathLike, environ: Mapping[str, str], configured: str | None = None) -> str | None:
  """The cache folder for a run in `workdir`: None when opted out, else the user's (JAX_COMPILATION_CACHE_DIR,
  or jax's option `configured`), else `<workdir>/jax_cache`."""
  if environ.get(OPT_OUT, "0") not in ("", "0"):
    return None
  return environ.get(VARIABLE) or configured or str(pathlib.Path(workdir) / SUBDIR)


def enable(workdir: str | os.PathLike, environ: Mapping[str, str] | None = None) -> str | None:
  """Points jax's persistent compilation cache at `directory(...)` (before the run's first compilation);
  returns the folder in use, None when opted out or turned off (`off_for_cpu_collectives`)."""
  import jax  # pylint: disable=g-import-not-at-top

  if not jax.config.jax_enable_compilation_cache:
    return None
  environ = os.environ if environ is None else environ
  path = directory(workdir, environ, jax.config.jax_compilation_cache_dir)
  if path is not None and path != jax.config.jax_compilation_cache_dir:
    jax.config.update("jax_compilation_cache_dir", path)
  return path


def off_for_cpu_collectives() -> bool:
  """Turns jax's persistent compilation cache off in a multi-process run on CPU (why: the module docstring), whatever
  the user or `enable` set; returns whether it did. Call it after `jax.distributed.initialize` and before the first
  compilation (jax decides once per process whether it uses the cache)."""
  import jax  # pylint: disable=g-import-not-at-top

  if jax.process_count() == 1 or jax.default_backend() != "cpu":
    return False
  jax.config.update("jax_enable_compilation_cache", False)
  return True
