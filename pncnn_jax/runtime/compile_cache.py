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
  returns the folder in use, None when opted out."""
  import jax  # pylint: disable=g-import-not-at-top

  environ = os.environ if environ is None else environ
  path = directory(workdir, environ, jax.config.jax_compilation_cache_dir)
  if path is not None and path != jax.config.jax_compilation_cache_dir:
    jax.config.update("jax_compilation_cache_dir", path)
  return path
