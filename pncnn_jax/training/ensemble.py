"""Ensemble training: member data streams, the stacked TrainState and the vmapped step (the loop is
pncnn_jax.training.loop).

Training (`pncnn_jax.training.loop.train_and_evaluate` of a config with an `ensemble` block, the single-model loop). One
`TrainState` whose params / opt_state / batch_stats / step have the leading K axis; one jitted step vmaps
`train_step` over the members, each on its own batch (K, B, H, W, 1): member k is trained exactly as a single
model would be on its own data stream (test_ensemble checks this). Data parallel as the single model: the batch
axis is sharded over the mesh axis 'data', the member axis and the state replicated.

Member data streams (`member_example_indices`). With N training examples (of this host's shard) and
f = `subset_fraction`, member k draws its subset S_k: round(f N) distinct indices chosen uniformly without
replacement by `np.random.default_rng([seed_k, 0])`. It iterates S_k in epochs of floor(|S_k| / B) batches
(remainder dropped), in the order of a fresh permutation per epoch from `np.random.default_rng([seed_k, 1,
epoch])`. So the stream is a pure function of (seed_k, step): resuming needs only the step. Random crops differ
per epoch (the example is read at position index + (epoch mod E) N of an E-epoch unshuffled dataset).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np

from pncnn_jax import data
from pncnn_jax.ensemble.members import ensemble_size, member_map
from pncnn_jax.training import step as training_step

Array = jax.Array
PyTree = Any


_CROP_EPOCHS = 1000  # distinct random-crop epochs of the base dataset (epoch e reads crop epoch e mod 1000)


def member_subset(num_examples: int, fraction: float, seed: int) -> np.ndarray:
  """The sorted example indices of one member's training subset: round(fraction N) (at least 1) distinct indices
  drawn uniformly by `np.random.default_rng([seed, 0])` (see the module docstring)."""
  if not 0.0 < fraction <= 1.0:
    raise ValueError(f"subset_fraction must be in (0, 1], got {fraction}")
  m = max(1, int(round(fraction * num_examples)))
  return np.sort(np.random.default_rng([seed, 0]).choice(num_examples, m, replace=False))


def member_example_indices(subset: np.ndarray, seed: int, step: int, batch_size: int) -> tuple[np.ndarray, int]:
  """(the B example indices member `seed` trains on at `step`, its epoch over the subset): batch
  step mod floor(|S| / B) of the epoch's permutation `np.random.default_rng([seed, 1, epoch])` of the subset."""
  per_epoch = len(subset) // batch_size
  if per_epoch < 1:
    raise ValueError(f"a member's subset has {len(subset)} examples, fewer than one batch ({batch_size}): raise "
                     "ensemble.subset_fraction or the training set size")
  epoch, j = divmod(int(step), per_epoch)
  perm = np.random.default_rng([seed, 1, epoch]).permutation(len(subset))
  return subset[perm[j * batch_size:(j + 1) * batch_size]], epoch


class MemberBatches:
  """Random access to the ensemble's training batches: `batches[step]` = {'sparse', 'target'}, (K, B, H, W, 1).

  Member k reads `member_example_indices(subsets[k], seeds[k], step, B)` from the unshuffled training dataset
  described by `data_config` (a `pncnn_jax.data.make_dataset` config; its batch size, shuffle and epochs are
  replaced). `iterator(start, stop)` prefetches with grain threads.
  """

  def __init__(self, data_config: Mapping[str, Any], seeds: Sequence[int], fraction: float, batch_size: int):
    single = {**dict(data_config), "batch_size": 1, "shuffle": False, "drop_remainder": False}
    self.num_examples = len(data.make_dataset({**single, "num_epochs": 1}))
    self._base = data.make_dataset({**single, "num_epochs": _CROP_EPOCHS})
    self.seeds, self.batch_size = [int(s) for s in seeds], int(batch_size)
    self.subsets = [member_subset(self.num_examples, fraction, s) for s in self.seeds]
    self._threads = int(data_config.get("num_threads", 2))

  def indices(self, step: int) -> np.ndarray:
    """(K, B) positions in the base dataset read at `step` (example index + (epoch mod E) N)."""
    rows = []
    for sub, seed in zip(self.subsets, self.seeds):
      idx, epoch = member_example_indices(sub, seed, step, self.batch_size)
      rows.append(idx + (epoch % _CROP_EPOCHS) * self.num_examples)
    return np.stack(rows)

  def __getitem__(self, step: int) -> dict[str, np.ndarray]:
    ex = [[self._base[int(i)] for i in row] for row in self.indices(step)]
    return {k: np.stack([np.concatenate([e[k] for e in row]) for row in ex]) for k in ("sparse", "target")}

  def iterator(self, start: int, stop: int):
    ds = grain.MapDataset.range(start, stop).map(self.__getitem__)
    return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=self._threads, prefetch_buffer_size=4)))


def create_ensemble_state(model, variables: PyTree, *, learning_rate: float, steps_per_epoch: int = 1,
                          decay_epochs: int = 0, gamma: float = 0.1,
                          clip_norm: float = 0.0) -> training_step.TrainState:
  """A TrainState whose step (K,), params, opt_state (vmapped init of `training_step.make_optimizer`, every member
  with the StepLR schedule of `training_step.set_step_lr`) and batch_stats lead with K."""
  k = ensemble_size(variables)
  tx = training_step.make_optimizer(clip_norm)
  opt_state = training_step.set_step_lr(jax.vmap(tx.init)(variables["params"]), learning_rate, steps_per_epoch,
                                        decay_epochs, gamma)
  return training_step.TrainState(step=jnp.zeros((k,), jnp.int32), apply_fn=model.apply, params=variables["params"],
                                  tx=tx, opt_state=opt_state, batch_stats=variables.get("batch_stats", {}))


def ensemble_train_step(state: training_step.TrainState, batch: Mapping[str, Array], *, loss_name: str,
                        method: str = "vmap"):
  """`train_step` mapped over the members (`member_map`: vmap or lax.map): state leaves (K, ...), batch
  (K, B, H, W, 1) -> (state, metrics (K,)). Member k's result is exactly `train_step` on its own state and batch."""
  return member_map(functools.partial(training_step.train_step, loss_name=loss_name), method)(state, dict(batch))
