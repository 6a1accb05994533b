"""Module aliases: the user-facing names that moved in the restructuring keep working.

`pncnn_jax/predict.py` is one line, `alias(__name__, "pncnn_jax.inference.predict")`: `import pncnn_jax.predict`
then gives the very module `pncnn_jax.inference.predict` (one module object, so `pncnn_jax.predict.main is
pncnn_jax.inference.predict.main` and monkeypatching either patches both), and `python -m pncnn_jax.predict` runs
it as `__main__`. The package itself never imports an alias (tests/test_structure.py): they are doors for users.
"""

from __future__ import annotations

import importlib
import runpy
import sys


def alias(name: str, target: str) -> None:
  """Makes module `name` stand for module `target` (called from `name`'s own file with `__name__`)."""
  if name == "__main__":  # python -m <alias>: run the target as the program, with the same command line
    runpy.run_module(target, run_name="__main__", alter_sys=True)
    return
  sys.modules[name] = importlib.import_module(target)


def lazy_exports(package: str, exports: dict[str, str]):
  """(`__getattr__`, `__dir__`) for a package `__init__` that re-exports names without importing their modules
  until first use: `exports` maps a public name to the module defining it. A package whose modules are also
  programs (`python -m pncnn_jax.inference.predict`) must not import them in its `__init__`: runpy would then find
  the module imported before running it as `__main__`, and warn."""
  module = sys.modules[package]

  def __getattr__(name: str):
    if name in exports:
      value = getattr(importlib.import_module(exports[name]), name)
      setattr(module, name, value)
      return value
    raise AttributeError(f"module {package!r} has no attribute {name!r}")

  def __dir__() -> list[str]:
    return sorted(set(vars(module)) | set(exports))

  return __getattr__, __dir__
