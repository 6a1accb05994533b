"""Name -> entry registries: how the depth core reaches its extensions without importing them.

The core (losses, model variants, evaluation metric sets, evaluators, datasets) keeps one `Registry` per kind of
thing a config names. An extension (sparse optical flow, `pncnn_jax.flow`, today) registers its entries when it is
imported; the core never imports it. A lookup that misses a name, and a full listing, first import the known
extensions by module name, once (`load_extensions`), so `losses.get_loss('flow_nll')` works in a process that never
imported the extension. The choice an entry stands for is made once, statically, from the config's names. A
registry whose entries also come from core modules above it (the evaluators of `pncnn_jax.evaluate`: the ensemble's
is defined in `pncnn_jax.ensemble`) names those modules as its `providers`, imported by name in the same way.

Imports nothing of pncnn_jax (and not jax): every layer may use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

# The extensions a registry imports on a miss, by module name (big_vision's importlib-by-name, not a static import).
EXTENSIONS: tuple[str, ...] = ("pncnn_jax.flow", "pncnn_jax.baselines")

_loaded = False

T = TypeVar("T")


def load_extensions() -> None:
  """Imports every module of EXTENSIONS once; each registers its entries on import."""
  global _loaded
  if _loaded:
    return
  _loaded = True
  for name in EXTENSIONS:
    importlib.import_module(name)


class Registry(Mapping[str, T], Generic[T]):
  """A read-only mapping name -> entry, filled by `register`; listing it or missing a name loads the extensions.

  Args:
    what: what an entry is, for messages ('loss', 'model variant', ...).
    providers: modules (by name) that register entries here besides the extensions: core modules of higher
      layers, which the module defining the registry may not import. Imported with the extensions, once.
  """

  def __init__(self, what: str, providers: tuple[str, ...] = ()):
    self.what = what
    self.providers = tuple(providers)
    self._entries: dict[str, T] = {}
    self._provided = not self.providers

  def _load(self) -> None:
    """Imports this registry's providers (once) and the extensions (once per process)."""
    if not self._provided:
      self._provided = True
      for name in self.providers:
        importlib.import_module(name)
    load_extensions()

  def register(self, name: str, entry: T) -> T:
    """Adds `entry` under `name`; a name registered twice with another entry is a ValueError."""
    if not isinstance(name, str) or not name:
      raise ValueError(f"a {self.what} needs a non-empty string name, got {name!r}")
    if name in self._entries and self._entries[name] is not entry:
      raise ValueError(f"{self.what} {name!r} is registered already")
    self._entries[name] = entry
    return entry

  def __getitem__(self, name: str) -> T:
    if name not in self._entries:
      self._load()
    return self._entries[name]

  def __contains__(self, name: object) -> bool:
    if name not in self._entries:
      self._load()
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    self._load()
    return iter(list(self._entries))

  def __len__(self) -> int:
    self._load()
    return len(self._entries)

  def lookup(self, name: str) -> T:
    """`self[name]`, or a ValueError naming the valid names: 'unknown <what> 'x'; valid names: a, b'."""
    try:
      return self[name]
    except (KeyError, TypeError):
      raise ValueError(f"unknown {self.what} {name!r}; valid names: {', '.join(sorted(self))}") from None

  def __repr__(self) -> str:
    return f"Registry({self.what!r}, {sorted(self._entries)})"
