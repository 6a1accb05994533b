"""Host memory for CPU training: back large allocations with transparent huge pages (Linux, glibc >= 2.35).

Why: XLA:CPU allocates a step's whole working memory (10.8 GB for a pNCNN step at 352x1216, batch 4) as one
buffer per call and glibc returns it to the kernel when the call ends, so every step touches fresh pages. With
4 KiB pages that is ~3 million page faults per step (15 s of system time on the 2-core benchmark machine, a
third of the step). glibc's `glibc.malloc.hugetlb=1` tunable makes malloc back those buffers with 2 MiB
transparent huge pages instead: 512x fewer faults. Measured in docs/develop/benchmarks-log.md.

glibc reads tunables only at process start, so the command-line entry points (train.py, eval.py, the demo and
the benchmarks) call `reexec_with_hugepages()` first thing: if the tunable is missing (and would help) they
re-execute themselves once with it added to GLIBC_TUNABLES; the command line and all other variables are
unchanged. Set PNCNN_NO_HUGEPAGES=1 to opt out. Library users (notebooks) can export
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 before starting Python. Numerics are unaffected.

Standard library only: it runs before jax is imported.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

TUNABLE = "glibc.malloc.hugetlb"
OPT_OUT = "PNCNN_NO_HUGEPAGES"
_THP_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"


def _glibc_version() -> tuple[int, ...] | None:
  lib, version = platform.libc_ver()
  if lib != "glibc" or not version:
    return None
  try:
    return tuple(int(p) for p in version.split(".")[:2])
  except ValueError:
    return None


def _thp_mode(path: str = _THP_MODE) -> str | None:
  """The kernel's THP mode ('always', 'madvise' or 'never'), None where unknown."""
  try:
    with open(path) as f:
      text = f.read()
  except OSError:
    return None
  start, end = text.find("["), text.find("]")
  return text[start + 1:end] if 0 <= start < end else None


def hugepage_environment(environ: Mapping[str, str], *, system: str = sys.platform,
                         glibc: tuple[int, ...] | None = None, thp_mode: str | None = None) -> dict[str, str] | None:
  """The environment to re-execute with, or None where it would not change anything.

  None when: opted out (PNCNN_NO_HUGEPAGES set and not '0'), not Linux, not glibc >= 2.35 (the first with the
  tunable), the kernel's THP mode is not 'madvise' ('always' already uses huge pages, 'never' cannot), or
  GLIBC_TUNABLES already sets glibc.malloc.hugetlb (whatever its value: the user's choice wins).
  """
  if environ.get(OPT_OUT, "0") not in ("", "0"):
    return None
  if not system.startswith("linux"):
    return None
  glibc = _glibc_version() if glibc is None else glibc
  if glibc is None or glibc < (2, 35):
    return None
  if (_thp_mode() if thp_mode is None else thp_mode) != "madvise":
    return None
  current = environ.get("GLIBC_TUNABLES", "")
  if TUNABLE in current:
    return None
  env = dict(environ)
  env["GLIBC_TUNABLES"] = f"{current}:{TUNABLE}=1" if current else f"{TUNABLE}=1"
  return env


def reexec_with_hugepages() -> None:
  """Re-executes the current command (same interpreter, same arguments, `-m` kept) with huge pages on.

  Returns without doing anything where `hugepage_environment` says so; otherwise does not return. Call it
  before importing jax (it only costs an interpreter start).
  """
  env = hugepage_environment(os.environ)
  if env is None:
    return
  argv = list(getattr(sys, "orig_argv", []))[1:] or sys.argv
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, [sys.executable, *argv], env)
