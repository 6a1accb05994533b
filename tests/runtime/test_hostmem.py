"""pncnn_jax.runtime.hostmem: when the entry points re-execute with huge pages, and that the re-execution works."""

import os
import subprocess
import sys

from pncnn_jax.runtime import hostmem

LINUX = dict(system="linux", glibc=(2, 36), thp_mode="madvise")


def test_adds_the_tunable_and_keeps_the_rest():
  env = hostmem.hugepage_environment({"PATH": "/bin"}, **LINUX)
  assert env == {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
  env = hostmem.hugepage_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, **LINUX)
  assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"


def test_nothing_to_do():
  assert hostmem.hugepage_environment({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, **LINUX) is None  # user's choice
  assert hostmem.hugepage_environment({"PNCNN_NO_HUGEPAGES": "1"}, **LINUX) is None
  assert hostmem.hugepage_environment({"PNCNN_NO_HUGEPAGES": "0"}, **LINUX) is not None
  assert hostmem.hugepage_environment({}, **{**LINUX, "system": "darwin"}) is None
  assert hostmem.hugepage_environment({}, **{**LINUX, "glibc": (2, 34)}) is None  # tunable added in 2.35
  assert hostmem.hugepage_environment({}, **{**LINUX, "thp_mode": "always"}) is None
  assert hostmem.hugepage_environment({}, **{**LINUX, "thp_mode": "never"}) is None


def test_thp_mode_parsing(tmp_path):
  p = tmp_path / "enabled"
  p.write_text("always [madvise] never\n")
  assert hostmem._thp_mode(str(p)) == "madvise"
  assert hostmem._thp_mode(str(tmp_path / "missing")) is None


def test_reexec_runs_the_same_command_once_with_the_tunable():
  code = ("import os, sys; from pncnn_jax.runtime import hostmem; hostmem.reexec_with_hugepages(); "
          "print(os.environ.get('GLIBC_TUNABLES'), os.environ.get('MARK'), sys.argv[1:])")
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", hostmem.OPT_OUT)}
  env["MARK"] = "kept"
  out = subprocess.run([sys.executable, "-c", code, "a1", "--b=2"], env=env, capture_output=True, text=True,
                       check=True, timeout=60).stdout.split()
  expected = "glibc.malloc.hugetlb=1" if hostmem.hugepage_environment(env) is not None else "None"
  assert out == [expected, "kept", "['a1',", "'--b=2']"]
