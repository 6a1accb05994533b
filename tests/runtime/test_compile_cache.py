"""The persistent compilation cache of training runs (pncnn_jax.runtime.compile_cache): only where the user said."""

import os
import subprocess
import sys

import jax

from pncnn_jax.runtime import compile_cache


def test_the_default_is_inside_the_workdir(tmp_path):
  assert compile_cache.directory(tmp_path / "run", {}) == str(tmp_path / "run" / "jax_cache")


def test_a_folder_chosen_by_the_user_wins_and_opting_out_gives_none(tmp_path):
  env = {compile_cache.VARIABLE: str(tmp_path / "mine")}
  assert compile_cache.directory(tmp_path / "run", env) == str(tmp_path / "mine")
  assert compile_cache.directory(tmp_path / "run", {}, configured=str(tmp_path / "cfg")) == str(tmp_path / "cfg")
  assert compile_cache.directory(tmp_path / "run", env | {compile_cache.OPT_OUT: "1"}) is None


_CODE = """
import sys, jax, jax.numpy as jnp
from pncnn_jax.runtime import compile_cache
jax.jit(lambda x: x + 1)(jnp.ones(3)).block_until_ready()  # a compilation before the cache is set
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)
hits = []
jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name) if 'cache_hits' in name else None)
print(compile_cache.enable(sys.argv[1]))
jax.jit(lambda x: jnp.sin(x) @ x.T)(jnp.ones((64, 64))).block_until_ready()
print(len(hits))
"""


def _fresh_process(workdir, **env):
  clean = {k: v for k, v in os.environ.items() if k not in (compile_cache.VARIABLE, compile_cache.OPT_OUT)}
  out = subprocess.run([sys.executable, "-c", _CODE, str(workdir)], env=clean | env, capture_output=True, text=True,
                       check=True)
  return out.stdout.splitlines()


def test_a_compiled_program_lands_in_the_workdir_and_a_second_process_loads_it(tmp_path):
  first = _fresh_process(tmp_path / "run")
  cache = tmp_path / "run" / "jax_cache"
  assert first == [str(cache), "0"]
  assert any(p.name.startswith("jit__lambda") for p in cache.iterdir()), sorted(cache.iterdir())
  second = _fresh_process(tmp_path / "run")
  assert int(second[1]) >= 1  # loaded from the cache, not compiled again


def test_opting_out_writes_nothing(tmp_path):
  assert _fresh_process(tmp_path / "run", **{compile_cache.OPT_OUT: "1"}) == ["None", "0"]
  assert not (tmp_path / "run").exists()


def test_a_cache_turned_off_stays_off(tmp_path):
  """jax's own switch (which `off_for_cpu_collectives` sets in a multi-process CPU run) wins over `enable`: no folder
  named, nothing written, nothing loaded."""
  assert _fresh_process(tmp_path / "run", JAX_ENABLE_COMPILATION_CACHE="false") == ["None", "0"]
  assert not (tmp_path / "run").exists()


def test_a_single_process_keeps_its_cache():
  assert not compile_cache.off_for_cpu_collectives()
  assert jax.config.jax_enable_compilation_cache
