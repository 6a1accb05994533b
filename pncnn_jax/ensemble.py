"""Ensembles of pNCNN: K members as one stacked variable tree run with `jax.vmap`, and the fusion rules.

Paper section 5.4 / Table 3 and its supplementary: an ensemble of pNCNNs, each trained on a random subset of the
training data, fused per pixel by the mean, the confidence-weighted mean, the most confident member, or the
maximum-likelihood (MLE) estimate of a mixture built from the members' confidences.

Layout. Every member array carries a leading member axis K: stacked variables have leaves (K, ...); member
outputs are (K, B, H, W, 1) depth mu_k [m] and precision c_k = 1/sigma_k^2 [1/m^2] (`ModelOutput.confidence` of
pNCNN, docs/SPEC.md §6). Fusion rules are pure jnp functions of those two arrays and return (B, H, W, 1).

The fusion rules are `pncnn_jax.fusion` (re-exported here).

Training (`pncnn_jax.train.train_and_evaluate` of a config with an `ensemble` block, the single-model loop). One
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

import dataclasses
import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax

from pncnn_jax import config as config_lib
from pncnn_jax import data, evaluate, loader, losses, models
from pncnn_jax import metrics as metrics_lib
from pncnn_jax import train_step as ts
from pncnn_jax.fusion import (DEFAULT_MLE_LR, DEFAULT_MLE_STEPS, DEFAULT_MLE_VARIANCE, FUSION_RULES,  # noqa: F401
                              confidence_weights, fuse, fuse_max_confidence, fuse_mean, fuse_mle,
                              fuse_weighted_mean, fused_variance, mixture_log_density, mixture_moments,
                              _mixture_terms)

Array = jax.Array
PyTree = Any

# ---------------------------------------------------------------------------------------------------------------
# Stacked variable trees.


def stack_trees(trees: Sequence[PyTree]) -> PyTree:
  """Stacks K trees of equal structure and leaf shapes into one tree with leaves (K, ...)."""
  trees = list(trees)
  if not trees:
    raise ValueError("stack_trees: need at least one tree")
  ref = jax.tree.structure(trees[0])
  for i, t in enumerate(trees[1:], 1):
    if jax.tree.structure(t) != ref:
      raise ValueError(f"stack_trees: member {i} has a different tree structure than member 0")
    bad = [(a.shape, b.shape) for a, b in zip(jax.tree.leaves(trees[0]), jax.tree.leaves(t)) if a.shape != b.shape]
    if bad:
      raise ValueError(f"stack_trees: member {i} has leaf shapes differing from member 0, e.g. {bad[0]}")
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def ensemble_size(stacked: PyTree) -> int:
  """K, the common leading dimension of a stacked tree's leaves."""
  sizes = {int(np.shape(x)[0]) if np.ndim(x) else None for x in jax.tree.leaves(stacked)}
  if len(sizes) != 1 or None in sizes:
    raise ValueError(f"not a stacked ensemble tree: leading dimensions {sorted(map(str, sizes))}")
  return sizes.pop()


def unstack_tree(stacked: PyTree) -> list[PyTree]:
  """The K member trees of a stacked tree."""
  return [jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(ensemble_size(stacked))]


def init_ensemble(model, seeds: Sequence[int], shape: tuple[int, int] = (64, 96)) -> PyTree:
  """Stacked initial variables of K members: member k is `models.init_variables(model, jax.random.key(seeds[k]),
  shape)` (one jitted init, compiled once per model and shape, run K times and stacked)."""
  if len(seeds) < 1:
    raise ValueError("init_ensemble: `seeds` is empty")
  return stack_trees([_init_one(model, jax.random.key(int(s)), tuple(shape)) for s in seeds])


@functools.partial(jax.jit, static_argnums=(0, 2))
def _init_one(model, key: Array, shape: tuple[int, int]) -> PyTree:
  return models.init_variables(model, key, shape)


def load_ensemble(paths: Sequence[str | os.PathLike], step: int | str = "best", *, expect: dict | None = None,
                  allow_mismatch: bool = False) -> tuple[PyTree, list[dict]]:
  """Stacked variables from K single-model checkpoints, or from one ensemble workdir (`pncnn_jax.train`).

  Args:
    paths: checkpoints understood by `loader.load` (workdirs, step or model directories, official files). One
      path whose metadata has `ensemble_size` is returned as it is (already stacked).
    step: for workdirs: an int, 'latest' or 'best'.
    expect, allow_mismatch: the identity every checkpoint must have been trained as (`loader.load`).

  Returns:
    (stacked variables with leaves (K, ...), the list of the checkpoints' metadata).
  """
  paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
  if not paths:
    raise ValueError("load_ensemble: no checkpoint paths given")
  loaded = [loader.load(p, step=step, expect=expect, allow_mismatch=allow_mismatch) for p in paths]
  if len(loaded) == 1 and loaded[0].ensemble_size is not None:
    return loaded[0].variables, [loaded[0].meta]
  for p, c in zip(paths, loaded):
    if c.ensemble_size is not None:
      raise ValueError(f"load_ensemble: {p} is an ensemble checkpoint; give it alone, not among members")
  return stack_trees([c.variables for c in loaded]), [c.meta for c in loaded]


def member_map(fn: Callable, method: str = "auto") -> Callable:
  """Maps `fn` over the leading member axis of all its arguments: `jax.vmap`, or `jax.lax.map` (a loop over the
  members inside one compiled program). 'auto' is 'map' on CPU and 'vmap' elsewhere: for inference, vmapping over
  convolution kernels makes XLA emit grouped convolutions, ~3x slower than K plain ones on CPU. For training use
  'vmap' (the default of `ensemble_train_step`): on CPU a train step inside lax.map ran ~10x slower than vmap
  (docs/BENCHMARKS.md)."""
  if method == "auto":
    method = "map" if jax.default_backend() == "cpu" else "vmap"
  if method == "vmap":
    return jax.vmap(fn)
  if method == "map":
    return lambda *args: jax.lax.map(lambda a: fn(*a), args)
  raise ValueError(f"member_map: method must be 'auto', 'vmap' or 'map', got {method!r}")


def apply_ensemble(model, variables: PyTree, sparse: Array, *, per_member: bool = False,
                   method: str = "auto") -> models.ModelOutput:
  """Eval-mode forward of every member over the stacked variables (`member_map`: vmap or lax.map).

  Args:
    model: the (common) Flax module.
    variables: stacked variables, leaves (K, ...).
    sparse: (B, H, W, 1) input depth [m] shared by all members, or (K, B, H, W, 1) when `per_member`.
    method: 'vmap', 'map' or 'auto' (see `member_map`); the results agree to float rounding.

  Returns:
    `ModelOutput` whose fields are (K, B, H, W, 1).
  """
  if per_member:
    return member_map(lambda v, x: model.apply(v, x, train=False), method)(variables, sparse)
  return member_map(lambda v: model.apply(v, sparse, train=False), method)(variables)



# ---------------------------------------------------------------------------------------------------------------
# Evaluation: each member and each fusion rule side by side (paper Table 3).


@dataclasses.dataclass(frozen=True)
class MLEOptions:
  """Settings of `fuse_mle` (hashable, so that a jitted evaluation can be cached per setting)."""

  variance: float = DEFAULT_MLE_VARIANCE  # v^2 [m^2]
  steps: int = DEFAULT_MLE_STEPS  # Adam steps
  learning_rate: float = DEFAULT_MLE_LR  # Adam's initial learning rate [m]


@functools.lru_cache(maxsize=8)
def make_ensemble_eval_fn(model, loss_name: str, metric_set: str, rules: tuple[str, ...],
                          mle: MLEOptions = MLEOptions()):
  """jit(variables, sparse, target) -> {row name: (depth, precision, per-image metrics)}.

  Rows: 'member k' (its depth and precision by its loss's rule, `losses.precision_of`; the NConv confidence itself
  for L1/L2 models, fine for weights, not for AUCE) for every member, then every rule of `rules` (fused depth
  and 1 / `fused_variance`). Metrics per image, KITTI (mm, 1/km) or NYU (m), as `metrics.kitti_metrics`.
  """
  if metric_set not in ("kitti", "nyu"):
    raise ValueError(f"metric_set must be 'kitti' or 'nyu', got {metric_set!r}")
  bad = [r for r in rules if r not in FUSION_RULES]
  if bad:
    raise ValueError(f"unknown fusion rules {bad}; expected some of {FUSION_RULES}")
  metric_fn = metrics_lib.kitti_metrics if metric_set == "kitti" else metrics_lib.nyu_metrics

  @jax.jit
  def fn(variables, sparse, target):
    out = apply_ensemble(model, variables, sparse)
    prec = losses.precision_of(out.confidence, loss_name)
    prec = out.confidence if prec is None else prec
    rows = {f"member {k}": (out.depth[k], prec[k]) for k in range(out.depth.shape[0])}
    for r in rules:
      rows[r] = fuse(out.depth, prec, r, variance=mle.variance, steps=mle.steps, learning_rate=mle.learning_rate)
    return {name: (d, c, metric_fn(d, target)) for name, (d, c) in rows.items()}

  return fn


def evaluate_ensemble(model, variables: PyTree, batches: Iterable[Mapping[str, np.ndarray]], *, loss_name: str,
                      metric_set: str = "kitti", rules: Sequence[str] = FUSION_RULES, mle: MLEOptions = MLEOptions(),
                      max_batches: int = -1) -> dict[str, dict[str, float]]:
  """Evaluates every member and every fusion rule on `batches` (paper Table 3).

  Error metrics are split means of per-image values (docs/SPEC.md §7.3); AUSE (both definitions, docs/SPEC.md
  §8.2, §8.3), AUCE and NLL pool all valid pixels of the split. Members are ranked by their own precision; fused
  rows by the fused precision 1 / `fused_variance` (uniform mixture for 'mean', confidence-weighted for the other
  rules).
  AUCE and NLL are None for models trained without a probabilistic loss.

  Args:
    model: the common Flax module; variables: stacked, leaves (K, ...).
    batches: dicts with (B, H, W, 1) `sparse` and `target` [m] (e.g. `pncnn_jax.data.make_iterator`).
    loss_name: the members' training loss (decides their precision, `losses.precision_of`).
    metric_set: 'kitti' or 'nyu'. rules: fusion rules to report. mle: `fuse_mle` settings.
    max_batches: stop after this many batches (-1: all).

  Returns:
    {row name: flat dict of metrics}, rows 'member 0', ..., then the rules in order; print it with
    `pncnn_jax.evaluate.format_table(rows, metric_set, header="member / fusion")`.
  """
  fn = make_ensemble_eval_fn(model, loss_name, metric_set, tuple(rules), mle)
  probabilistic = loss_name in losses.PROBABILISTIC_LOSSES
  means: dict[str, metrics_lib.MeanAccumulator] = {}
  uncs: dict[str, metrics_lib.UncertaintyAccumulator] = {}
  names = [f"member {k}" for k in range(ensemble_size(variables))] + list(rules)
  num_images = 0
  for i, batch in enumerate(batches):
    if 0 <= max_batches <= i:
      break
    sparse, target = evaluate.batch_arrays(batch, i)
    out = jax.device_get(fn(variables, sparse, target))
    for name in names:
      d, c, per_image = out[name]
      means.setdefault(name, metrics_lib.MeanAccumulator()).update(per_image)
      uncs.setdefault(name, metrics_lib.UncertaintyAccumulator()).update(d, target, c)
    num_images += sparse.shape[0]
  if num_images == 0:
    raise ValueError("evaluate_ensemble: the batches gave no images")
  rows = {}
  for name in names:
    u = uncs[name].result()
    rows[name] = {**means[name].result(), "ause_pncnn": u["ause_pncnn"], "ause_gustafsson": u["ause_gustafsson"],
                  "auce": u["auce"] if probabilistic else None, "nll": u["nll"] if probabilistic else None,
                  "num_images": num_images}
  return rows



# ---------------------------------------------------------------------------------------------------------------
# Training: member data streams, the stacked state and the vmapped step (the loop is pncnn_jax.train).

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


def create_ensemble_state(model, variables: PyTree, tx: optax.GradientTransformation) -> ts.TrainState:
  """A TrainState whose step (K,), params, opt_state (vmapped `tx.init`) and batch_stats lead with K."""
  k = ensemble_size(variables)
  return ts.TrainState(step=jnp.zeros((k,), jnp.int32), apply_fn=model.apply, params=variables["params"], tx=tx,
                       opt_state=jax.vmap(tx.init)(variables["params"]),
                       batch_stats=variables.get("batch_stats", {}))


def ensemble_train_step(state: ts.TrainState, batch: Mapping[str, Array], *, loss_name: str, method: str = "vmap"):
  """`train_step` mapped over the members (`member_map`: vmap or lax.map): state leaves (K, ...), batch
  (K, B, H, W, 1) -> (state, metrics (K,)). Member k's result is exactly `train_step` on its own state and batch."""
  return member_map(functools.partial(ts.train_step, loss_name=loss_name), method)(state, dict(batch))


def evaluate_ensemble_config(config, variables_or_path: PyTree | str | os.PathLike | Sequence[str],
                             step: int | str = "latest", *, allow_mismatch: bool = False
                             ) -> dict[str, dict[str, float]]:
  """What eval.py runs for an ensemble config: the eval split of `config`, every member and every rule.

  Args:
    config: an ensemble config (configs/ensemble_synthetic.py).
    variables_or_path: stacked variables, an ensemble workdir, or a list of K single-model checkpoints.
    step: for workdirs: an int, 'latest' or 'best'.
    allow_mismatch: use checkpoints trained as something else than `config` says (`config.identity`: dataset,
      variant, loss, input scaling) with a warning; refused otherwise (`config.IdentityMismatchError`).
  """
  if isinstance(variables_or_path, (str, os.PathLike)) or (
      isinstance(variables_or_path, Sequence) and not isinstance(variables_or_path, Mapping)):
    variables, _ = load_ensemble(variables_or_path, step=step, expect=config_lib.identity(config),
                                 allow_mismatch=allow_mismatch)
  else:
    variables = {k: v for k, v in variables_or_path.items() if k in ("params", "batch_stats")}
  e = config.ensemble
  batches = data.make_iterator(config_lib.data_config(config, "eval", batch_size=max(1, config.eval_batch_size),
                                                      num_epochs=1))
  return evaluate_ensemble(config_lib.build_model(config), variables, batches,
                           loss_name=config_lib.variant_loss(config),
                           metric_set=config.metrics, rules=tuple(e.rules),
                           mle=MLEOptions(float(e.mle_variance), int(e.mle_steps), float(e.mle_learning_rate)),
                           max_batches=config.num_eval_batches)

