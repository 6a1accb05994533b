"""Restricted readers of official checkpoint files, without torch: legacy `torch.save` pickles and .npz.

  * `read_torch_legacy`: the official legacy (non-zip) `torch.save` files (`checkpoint-9.pth.tar`): five pickles
    in a row (magic number, protocol version, sys_info, the main dict {args, epoch, model, best_result,
    optimizer}, the list of storage keys), then the raw storages (each an int64 element count and little-endian
    bytes). The main pickle holds a whole pickled `network.CNN` module; it is read with a restricted unpickler
    that only rebuilds arrays and inert stand-ins for torch modules, and executes nothing else.
  * `module_state_dict`: torch's `Module.state_dict()` of such an unpickled module.
  * `read_npz_state_dict`: `.npz` state dicts keyed by torch names, as in ../shared/reference/weights/.

The mapping of torch names to our variables is `pncnn_jax.checkpoints.convert` (docs/SPEC.md §12).
"""

from __future__ import annotations

import collections
import hashlib
import io
import math
import os
import pathlib
import pickle
import re
import struct
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

_TORCH_MAGIC = 0x1950A86A20F9469CFC6C
_TORCH_PROTOCOL = 1001

_STORAGE_DTYPES = {
    "DoubleStorage": np.float64,
    "FloatStorage": np.float32,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class CheckpointFormatError(ValueError):
  """A file that is not a readable official checkpoint (truncated, corrupt, unknown format, refused content)."""


class TorchObject:
  """Inert stand-in for a pickled torch/pNCNN object (nn.Module, optimizer, hook, meter).

  It records the object's pickled state in `__dict__` (for modules: `_parameters`, `_buffers`, `_modules` and
  plain attributes such as `init_method`); no method of the original class exists or runs.
  """

  torch_class = "?"

  def __new__(cls, *args, **kwargs):
    del args, kwargs
    return object.__new__(cls)

  def __setstate__(self, state):
    if isinstance(state, tuple) and len(state) == 2:  # (dict state, slot state)
      state = {**(state[0] or {}), **(state[1] or {})}
    if not isinstance(state, dict):
      raise CheckpointFormatError(f"unexpected pickled state of type {type(state).__name__} for {self.torch_class}")
    self.__dict__.update(state)

  def __repr__(self):
    return f"<TorchObject {self.torch_class}>"


class _Namespace(TorchObject):
  torch_class = "argparse.Namespace"


class _StorageType:
  def __init__(self, name: str, dtype):
    self.name, self.dtype = name, np.dtype(dtype)


class _Storage:
  """A torch storage: `size` elements of `dtype`; `data` is filled after the main pickle."""

  def __init__(self, key: str, dtype: np.dtype, size: int):
    self.key, self.dtype, self.size, self.data = key, dtype, size, None


class _StorageView:
  def __init__(self, root: _Storage, offset: int, size: int):
    self.root, self.offset, self.size, self.dtype = root, offset, size, root.dtype


class LazyTensor:
  """A tensor whose storage is read after the main pickle: (storage, offset, size, stride) in elements."""

  def __init__(self, storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...], source: str):
    self.storage, self.offset, self.shape, self.stride, self.source = storage, offset, size, stride, source
    self.requires_grad = False

  def numpy(self) -> np.ndarray:
    """The tensor as a new C-contiguous numpy array."""
    st = self.storage
    offset = self.offset
    if isinstance(st, _StorageView):
      offset += st.offset
      st = st.root
    if st.data is None:
      raise CheckpointFormatError(f"{self.source}: storage {st.key} has no data (file truncated?)")
    n = math.prod(self.shape)
    if n == 0:
      return np.zeros(self.shape, st.dtype)
    return np.lib.stride_tricks.as_strided(
        st.data[offset:], shape=self.shape, strides=[s * st.dtype.itemsize for s in self.stride]).copy()


def _rebuild_tensor_v2(source: str):
  def rebuild(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
    del backward_hooks, metadata
    if not isinstance(storage, (_Storage, _StorageView)):
      raise CheckpointFormatError(f"{source}: tensor rebuilt from a {type(storage).__name__}, not a storage")
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    offset = int(storage_offset)
    if len(size) != len(stride) or offset < 0 or min(size + stride, default=0) < 0:
      raise CheckpointFormatError(f"{source}: invalid tensor geometry size={size} stride={stride} offset={offset}")
    if min(size, default=1) > 0:
      last = offset + sum((n - 1) * s for n, s in zip(size, stride))
      if last >= storage.size:
        raise CheckpointFormatError(
            f"{source}: tensor of size {size}, stride {stride}, offset {offset} exceeds its storage of "
            f"{storage.size} elements")
      if math.prod(size) > storage.size:  # only zero or overlapping strides reuse elements; no weight does
        raise CheckpointFormatError(
            f"{source}: tensor of size {size} ({math.prod(size)} elements) with stride {stride} repeats the "
            f"{storage.size} elements of its storage (zero or overlapping strides): crafted or corrupt; refusing it")
    t = LazyTensor(storage, offset, size, stride, source)
    t.requires_grad = bool(requires_grad)
    return t

  return rebuild


def _rebuild_parameter(data, requires_grad=True, backward_hooks=None):
  del backward_hooks
  if not isinstance(data, LazyTensor):
    raise CheckpointFormatError(f"parameter rebuilt from a {type(data).__name__}, not a tensor")
  data.requires_grad = bool(requires_grad)
  return data


def _is_allowed_object_module(module: str) -> bool:
  """Modules whose classes become inert `TorchObject`s: torch modules/optimizers and the pNCNN repo's classes."""
  return (module == "network" or module.startswith(("common.", "torch.nn.modules.", "torch.optim."))
          or module in ("utils.error_metrics",))


class _RestrictedUnpickler(pickle.Unpickler):
  """Unpickler that resolves only an allow-list of globals; everything else is refused (docs/SPEC.md §12)."""

  _SAFE = {
      ("collections", "OrderedDict"): collections.OrderedDict,
      ("collections", "defaultdict"): collections.defaultdict,
      ("builtins", "dict"): dict,
      ("__builtin__", "dict"): dict,
      ("builtins", "list"): list,
      ("__builtin__", "list"): list,
      ("builtins", "set"): set,
      ("__builtin__", "set"): set,
      ("builtins", "tuple"): tuple,
      ("__builtin__", "tuple"): tuple,
  }

  def __init__(self, file, source: str, storages: dict[str, _Storage] | None, max_bytes: int):
    super().__init__(file)
    self._source = source
    self._storages = storages
    self._max_bytes = max_bytes
    self._classes: dict[tuple[str, str], type] = {}

  def find_class(self, module: str, name: str):
    if (module, name) in self._SAFE:
      return self._SAFE[(module, name)]
    if module == "argparse" and name == "Namespace":
      return _Namespace
    if module == "torch" and name in _STORAGE_DTYPES:
      return _StorageType(name, _STORAGE_DTYPES[name])
    if module == "torch._utils" and name == "_rebuild_tensor_v2":
      return _rebuild_tensor_v2(self._source)
    if module == "torch._utils" and name == "_rebuild_parameter":
      return _rebuild_parameter
    if _is_allowed_object_module(module) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
      key = (module, name)
      if key not in self._classes:
        self._classes[key] = type(name, (TorchObject,), {"torch_class": f"{module}.{name}", "__module__": module})
      return self._classes[key]
    raise CheckpointFormatError(f"refusing to unpickle {module}.{name} from {self._source}")

  def persistent_load(self, pid):
    if not isinstance(pid, tuple) or not pid:
      raise CheckpointFormatError(f"{self._source}: unexpected persistent id {pid!r}")
    kind = pid[0]
    if kind == "module" and len(pid) == 4:
      cls = pid[1]
      if not (isinstance(cls, type) and issubclass(cls, TorchObject)):
        raise CheckpointFormatError(f"{self._source}: persistent module id names {cls!r}")
      return cls
    if kind == "storage" and len(pid) == 6 and self._storages is not None:
      _, stype, key, _location, size, view = pid
      if not isinstance(stype, _StorageType) or not isinstance(key, str) or not isinstance(size, int):
        raise CheckpointFormatError(f"{self._source}: malformed storage id {pid!r}")
      if size < 0 or size * stype.dtype.itemsize > self._max_bytes:
        raise CheckpointFormatError(f"{self._source}: storage {key} in the main pickle claims {size} elements, more "
                                    f"than the whole file of {self._max_bytes} bytes holds (truncated or corrupt)")
      root = self._storages.get(key)
      if root is None:
        root = self._storages[key] = _Storage(key, stype.dtype, size)
      elif root.dtype != stype.dtype or root.size != size:
        raise CheckpointFormatError(f"{self._source}: storage {key} declared twice with different types/sizes")
      if view is None:
        return root
      view_key, offset, view_size = view
      if offset < 0 or view_size < 0 or offset + view_size > size:
        raise CheckpointFormatError(f"{self._source}: storage view {view_key} out of bounds of {key}")
      return _StorageView(root, int(offset), int(view_size))
    raise CheckpointFormatError(f"refusing persistent id {str(pid)[:80]!r} in {self._source}")


def _load_pickle(f: io.BytesIO, source: str, what: str, storages=None, max_bytes: int = 0) -> Any:
  try:
    return _RestrictedUnpickler(f, source, storages, max_bytes).load()
  except CheckpointFormatError:
    raise
  except (EOFError, pickle.UnpicklingError) as e:
    if isinstance(e, pickle.UnpicklingError) and "truncated" not in str(e):
      raise CheckpointFormatError(f"{source}: cannot read the {what} pickle (UnpicklingError: {e})") from e
    raise CheckpointFormatError(f"{source}: file ends inside the {what} pickle (truncated?)") from e
  except Exception as e:  # corrupt streams raise UnpicklingError, KeyError, IndexError, TypeError, ...
    raise CheckpointFormatError(f"{source}: cannot read the {what} pickle ({type(e).__name__}: {e})") from e


def to_plain(obj: Any) -> Any:
  """Namespaces and dict-like containers -> plain dicts (for args and metadata)."""
  if isinstance(obj, TorchObject):
    return {k: to_plain(v) for k, v in vars(obj).items()}
  if isinstance(obj, Mapping):
    return {k: to_plain(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return type(obj)(to_plain(v) for v in obj)
  return obj


def read_torch_legacy(path: str | os.PathLike) -> dict[str, Any]:
  """Reads a legacy (non-zip) `torch.save` file with a restricted unpickler.

  Returns the main pickled object with tensors as `LazyTensor` (already backed by data: call `.numpy()`),
  modules as `TorchObject`s and argparse namespaces as `TorchObject`s (`vars()` gives the dict).

  Raises:
    FileNotFoundError; CheckpointFormatError (a ValueError) naming the file for truncated, corrupt,
    zip-format or refused content.
  """
  path = pathlib.Path(path)
  src = str(path)
  data = path.read_bytes()
  if not data:
    raise CheckpointFormatError(f"{src} is an empty file (0 bytes), not a checkpoint")
  if data[:4] == b"PK\x05\x06":  # a zip archive without members, e.g. np.savez() of no arrays
    raise CheckpointFormatError(f"{src} is an empty zip archive (an .npz without arrays), not a checkpoint")
  if data[:4] == b"PK\x03\x04":
    raise CheckpointFormatError(
        f"{src} is a zip archive (torch >= 1.6 format or .npz); only the legacy torch.save format of the official "
        "checkpoints is read here; use load_official() for .npz, or re-save with "
        "torch.save(..., _use_new_zipfile_serialization=False)")
  if not data[:1] == b"\x80":
    raise CheckpointFormatError(f"{src} is not a torch checkpoint (no pickle header; unknown format)")
  f = io.BytesIO(data)
  magic = _load_pickle(f, src, "magic number")
  if magic != _TORCH_MAGIC:
    raise CheckpointFormatError(f"{src} is a pickle but not a legacy torch.save file (magic number {magic!r})")
  version = _load_pickle(f, src, "protocol version")
  if version != _TORCH_PROTOCOL:
    raise CheckpointFormatError(f"{src}: unsupported torch.save protocol version {version!r}")
  sys_info = _load_pickle(f, src, "sys_info")
  if not isinstance(sys_info, dict) or not sys_info.get("little_endian", False):
    raise CheckpointFormatError(f"{src}: sys_info {sys_info!r} is not a little-endian torch file")
  storages: dict[str, _Storage] = {}
  result = _load_pickle(f, src, "main", storages, max_bytes=len(data))
  keys = _load_pickle(f, src, "storage key list")
  if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
    raise CheckpointFormatError(f"{src}: the storage key list is malformed")
  for key in keys:
    st = storages.get(key)
    if st is None:
      raise CheckpointFormatError(f"{src}: storage {key} listed but never referenced")
    head = f.read(8)
    if len(head) < 8:
      raise CheckpointFormatError(f"{src}: file ends before storage {key} (truncated)")
    (n,) = struct.unpack("<q", head)
    if n != st.size:
      raise CheckpointFormatError(f"{src}: storage {key} has {n} elements on disk, {st.size} declared")
    nbytes = n * st.dtype.itemsize
    raw = f.read(nbytes)
    if len(raw) < nbytes:
      raise CheckpointFormatError(f"{src}: file ends inside storage {key} ({len(raw)} of {nbytes} bytes; truncated)")
    st.data = np.frombuffer(raw, st.dtype.newbyteorder("<")).astype(st.dtype)
  unfilled = sorted(k for k, s in storages.items() if s.data is None)
  if unfilled:
    raise CheckpointFormatError(f"{src}: storages {unfilled[:5]} have no data (truncated?)")
  return result


def module_state_dict(module: TorchObject, prefix: str = "") -> dict[str, np.ndarray]:
  """torch's `Module.state_dict()` of an unpickled module: parameters, buffers, then children, in order."""
  out: dict[str, np.ndarray] = {}
  d = vars(module)
  for group in ("_parameters", "_buffers"):
    for name, t in (d.get(group) or {}).items():
      if t is not None:
        if not isinstance(t, LazyTensor):
          raise CheckpointFormatError(f"{prefix}{name} is a {type(t).__name__}, not a tensor")
        out[prefix + name] = t.numpy()
  for name, child in (d.get("_modules") or {}).items():
    if child is not None:
      if not isinstance(child, TorchObject):
        raise CheckpointFormatError(f"submodule {prefix}{name} is a {type(child).__name__}")
      out.update(module_state_dict(child, prefix + name + "."))
  return out



_EFFECTIVE_WEIGHT = re.compile(r"nconv\.nconv\d+\.weight")


def read_npz_state_dict(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """Reads an .npz state dict (keys = torch names), dropping cached effective NConv weights `nconv.nconvK.weight`."""
  src = str(path)
  try:
    with np.load(path, allow_pickle=False) as z:
      sd = {k: z[k] for k in z.files}
  except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
    raise CheckpointFormatError(f"{src}: not a readable .npz ({type(e).__name__}: {e})") from e
  kept = {k: v for k, v in sd.items() if not _EFFECTIVE_WEIGHT.fullmatch(k)}
  if sd and not kept:
    raise CheckpointFormatError(f"{src} holds only cached effective NConv weights (a __nconv_effective_weights "
                                "file), not a state_dict")
  return kept


def file_sha256(path: str | os.PathLike) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as fh:
    for chunk in iter(lambda: fh.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()
