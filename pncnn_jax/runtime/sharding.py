"""Data parallelism: the mesh, the batch-size check, batches in and out of the devices, replication.

One 1-D `Mesh(jax.devices(), ('data',))` over every device of every host. A batch is sharded on its batch axis
(each host feeds its own part through `jax.make_array_from_process_local_data`); states and variables are
replicated `P()`. Under `jit` the losses and BatchNorm statistics are then means over the global batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

TRAIN_KEYS = ("sparse", "target")  # what the train step consumes from a batch


def make_mesh(devices=None) -> Mesh:
  """A 1-D data-parallel mesh over `devices` (default: all devices of all hosts)."""
  devices = jax.devices() if devices is None else list(devices)
  return Mesh(np.asarray(devices), ("data",))


def check_batch_size(batch_size: int, mesh: Mesh, what: str = "config.batch_size") -> None:
  """Raises ValueError unless the global batch splits evenly over the mesh's devices and the hosts."""
  n = mesh.devices.size
  if batch_size <= 0 or batch_size % n:
    raise ValueError(f"{what}={batch_size} is not divisible by the number of devices ({n}): the global batch is "
                     f"split evenly over the 'data' axis; use a multiple of {n}")
  if batch_size % jax.process_count():
    raise ValueError(f"{what}={batch_size} is not divisible by the number of hosts ({jax.process_count()})")


def batch_sharding(mesh: Mesh, batch_axis: int = 0) -> NamedSharding:
  """Arrays whose axis `batch_axis` is the batch, sharded on 'data' along it (leading axes replicated)."""
  return NamedSharding(mesh, P(*([None] * batch_axis), "data"))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def shard_batch(batch: Mapping[str, np.ndarray], mesh: Mesh, keys: Sequence[str] = TRAIN_KEYS,
                batch_axis: int = 0) -> dict[str, jax.Array]:
  """This host's part of a batch -> global arrays sharded over 'data' along `batch_axis` (1 for an ensemble's
  (K, B, ...) batches)."""
  sharding = batch_sharding(mesh, batch_axis)
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(batch[k])) for k in keys}


def shard_batches(batches: Sequence[Mapping[str, np.ndarray]], mesh: Mesh, keys: Sequence[str] = TRAIN_KEYS,
                  batch_axis: int = 0) -> dict[str, jax.Array]:
  """This host's parts of n batches -> global (n, ...) arrays, stacked on a new leading axis."""
  stacked = {k: np.stack([np.asarray(b[k]) for b in batches]) for k in keys}
  return shard_batch(stacked, mesh, keys, batch_axis + 1)


def replicate(tree: Any, mesh: Mesh) -> Any:
  return jax.device_put(tree, replicated(mesh))


def synced(batches: Iterable[Mapping[str, np.ndarray]]) -> Iterator[Mapping[str, np.ndarray]]:
  """This host's evaluation batches, for as long as any host has one: every host must take part in every sharded
  call. A host whose batches ran out (the last global batch of an eval split can miss some hosts,
  pncnn_jax.data.pipeline) gets empty batches (0 rows, the shapes of its last one). One host: `batches` as is."""
  if jax.process_count() == 1:
    yield from batches
    return
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  it, last = iter(batches), None
  while True:
    batch = next(it, None)
    if not multihost_utils.process_allgather(np.int32(batch is not None)).any():
      return
    if batch is None:
      if last is None:
        raise ValueError(f"evaluation: host {jax.process_index()} has no batch at all (fewer batches than hosts)")
      batch = {k: np.asarray(v)[:0] for k, v in last.items()}
    last = batch
    yield batch


def shard_padded(arrays: Sequence[np.ndarray], mesh: Mesh) -> tuple[list[jax.Array], np.ndarray]:
  """Evaluation batches of any size, on any number of hosts: each host's (b, ...) arrays are zero-padded to the
  same multiple of its device count (the largest b of all hosts, rounded up) and sharded over 'data'.

  Returns:
    (the global arrays, keep): keep is the (global rows,) bool mask of the rows that hold data, in the order of
    the global arrays (`to_host`), the same on every host.
  """
  n_local = len(mesh.local_devices)
  b = arrays[0].shape[0]
  most = b
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    sizes = multihost_utils.process_allgather(np.asarray([b, *arrays[0].shape[1:]], np.int64))  # (hosts, rank)
    most = int(sizes[:, 0].max())
    shapes = {tuple(r[1:]) for r in sizes if r[0] > 0}
    if len(shapes) > 1:
      raise ValueError(f"evaluation: the hosts' batches have images of different sizes {sorted(shapes)}; a "
                       "multi-process evaluation needs one size (set config.data.eval_crop)")
  padded = max(1, -(-most // n_local)) * n_local
  sharding = batch_sharding(mesh)

  def pad(x):
    if x.shape[0] == padded:
      return x
    return np.concatenate([x, np.zeros((padded - x.shape[0],) + x.shape[1:], x.dtype)], axis=0)

  keep = np.arange(padded) < b
  if jax.process_count() > 1:
    keep = np.asarray(to_host(jax.make_array_from_process_local_data(sharding, keep)))
  return [jax.make_array_from_process_local_data(sharding, pad(a)) for a in arrays], keep


def to_host(tree: Any) -> Any:
  """Global arrays -> numpy on every host (all hosts' rows with more than one host)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    return multihost_utils.process_allgather(tree, tiled=True)
  return jax.device_get(tree)
