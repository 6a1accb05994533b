"""Name -> entry registries: how the depth core reaches its extensions without importing them.

The core (losses, model variants, evaluation metric sets, datasets) keeps one `Registry` per kind of thing a config
names. An extension (sparse optical flow, `pncnn_jax.flow`, today) registers its entries when it is imported; the
core never imports it. A lookup that misses a name, and a full listing, first import the known extensions by module
name, once (`load_extensions`), so `losses.get_loss('flow_nll')` works in a process that never imported the
extension. The choice an entry stands for is made once, statically, from the config's names.

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
  """

  def __init__(self, what: str):
    self.what = what
    self._entries: dict[str, T] = {}

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
      load_extensions()
    return self._entries[name]

  def __contains__(self, name: object) -> bool:
    if name not in self._entries:
      load_extensions()
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    load_extensions()
    return iter(list(self._entries))

  def __len__(self) -> int:
    load_extensions()
    return len(self._entries)

  def lookup(self, name: str) -> T:
    """`self[name]`, or a ValueError naming the valid names: 'unknown <what> 'x'; valid names: a, b'."""
    try:
      return self[name]
    except (KeyError, TypeError):
      raise ValueError(f"unknown {self.what} {name!r}; valid names: {', '.join(sorted(self))}") from None

  def __repr__(self) -> str:
    return f"Registry({self.what!r}, {sorted(self._entries)})"
