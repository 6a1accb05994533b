"""Fake PyTorch legacy checkpoints written without torch: the modules, storages and tensors its pickle names.

Shared by tests/checkpoints/test_convert.py and tests/test_bad_inputs.py (tests/ is on the path of every test).
"""

import collections
import io
import pickle
import struct
import sys
import types

import numpy as np


def _legacy_file(main_pickle: bytes, keys=()) -> bytes:
  head = b"".join(pickle.dumps(o, protocol=2) for o in (
      0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True, "type_sizes": {}}))
  return head + main_pickle + pickle.dumps(list(keys), protocol=2)


def _fake_torch_modules(monkeypatch):
  """Registers importable stand-ins so that pickle writes the same globals torch.save does."""

  mods = {name: types.ModuleType(name) for name in ("torch", "torch._utils", "network", "common", "common.nconv")}

  def _rebuild_tensor_v2(*args):
    raise AssertionError("never called here")

  _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
  mods["torch._utils"]._rebuild_tensor_v2 = _rebuild_tensor_v2
  for mod, cls in [("torch", "FloatStorage"), ("network", "CNN"), ("common.nconv", "NConvUNet"),
                   ("common.nconv", "NConv2d")]:
    setattr(mods[mod], cls, type(cls, (), {"__module__": mod}))
  for name, m in mods.items():
    monkeypatch.setitem(sys.modules, name, m)
  return mods


class _FakeStorage:
  def __init__(self, key, data):
    self.key, self.data = key, np.ascontiguousarray(data, np.float32)


class _FakeTensor:
  def __init__(self, storage, offset, size, stride):
    self.args = (storage, offset, tuple(size), tuple(stride), False, {})

  def __reduce__(self):
    return (sys.modules["torch._utils"]._rebuild_tensor_v2, self.args)


def _write_legacy(path, obj, storages, mods):
  buf = io.BytesIO()
  pickler = pickle.Pickler(buf, protocol=2)
  pickler.persistent_id = lambda o: (("storage", mods["torch"].FloatStorage, o.key, "cpu", o.data.size, None)
                                     if isinstance(o, _FakeStorage) else None)
  pickler.dump(obj)
  tail = b"".join(struct.pack("<q", s.data.size) + s.data.tobytes() for s in storages)
  path.write_bytes(_legacy_file(buf.getvalue(), [s.key for s in storages]) + tail)


def _module(cls, **attrs):
  m = cls()
  m.__dict__.update({"training": False, "_parameters": collections.OrderedDict(), "_buffers": collections.OrderedDict(),
                     "_modules": collections.OrderedDict(), **attrs})
  return m



def write_crafted_stride_zero(path, monkeypatch):
  """A legacy checkpoint whose one tensor claims 2^45 elements (128 TiB of float32) over a 4-element storage by
  stride 0: the reader used to materialise it ("Unable to allocate 364 TiB")."""
  mods = _fake_torch_modules(monkeypatch)
  storage = _FakeStorage("1", np.arange(4, dtype=np.float32))
  model = _module(mods["network"].CNN)
  model._parameters["w"] = _FakeTensor(storage, 0, (1 << 15,) * 3, (0, 0, 0))
  _write_legacy(path, {"args": None, "epoch": 1, "model": model}, [storage], mods)
  monkeypatch.undo()
