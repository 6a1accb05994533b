"""Ensembles of pNCNN: K members as one stacked variable tree run with `jax.vmap`, and the fusion rules.

Paper section 5.4 / Table 3 and its supplementary: an ensemble of pNCNNs, each trained on a random subset of the
training data, fused per pixel by the mean, the confidence-weighted mean, the most confident member, or the
maximum-likelihood (MLE) estimate of a mixture built from the members' confidences.

Layout. Every member array carries a leading member axis K: stacked variables have leaves (K, ...); member
outputs are (K, B, H, W, 1) depth mu_k [m] and precision c_k = 1/sigma_k^2 [1/m^2] (`ModelOutput.confidence` of
pNCNN, REFERENCE 5). Fusion rules are pure jnp functions of those two arrays and return (B, H, W, 1).

Training (`train_ensemble`). One `TrainState` whose params / opt_state / batch_stats / step have the leading K
axis; one jitted step vmaps `train_step` over the members, each on its own batch (K, B, H, W, 1): member k is
trained exactly as a single model would be on its own data stream (test_ensemble checks this). Data parallel as
the single model: the batch axis is sharded over the mesh axis 'data', the member axis and the state replicated.

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
import json
import math
import os
import pathlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from pncnn_jax import evaluate
from pncnn_jax import metrics as metrics_lib
from pncnn_jax import models, train_step as ts

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


def load_ensemble(paths: Sequence[str | os.PathLike], step: int | str = "best") -> tuple[PyTree, list[dict]]:
  """Stacked variables from K single-model checkpoints, or from one ensemble workdir (`train_ensemble`).

  Args:
    paths: checkpoint directories understood by `checkpointing.restore_variables` (model checkpoints, training
      step directories or workdirs). One path whose metadata has `ensemble_size` is returned as it is (already
      stacked).
    step: for workdirs: an int, 'latest' or 'best'.

  Returns:
    (stacked variables with leaves (K, ...), the list of the checkpoints' metadata).
  """
  from pncnn_jax import checkpointing  # pylint: disable=g-import-not-at-top

  paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
  if not paths:
    raise ValueError("load_ensemble: no checkpoint paths given")
  loaded = [checkpointing.restore_variables(p, step=step) for p in paths]
  if len(loaded) == 1 and "ensemble_size" in loaded[0][1]:
    return loaded[0][0], [loaded[0][1]]
  for p, (_, meta) in zip(paths, loaded):
    if "ensemble_size" in meta:
      raise ValueError(f"load_ensemble: {p} is an ensemble checkpoint; give it alone, not among members")
  return stack_trees([v for v, _ in loaded]), [m for _, m in loaded]


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
# Fusion rules. depth, precision: (K, B, H, W, 1); results (B, H, W, 1).

DEFAULT_MLE_VARIANCE = 0.1  # v^2 [m^2] of every mixture component (paper supplementary)
DEFAULT_MLE_STEPS = 500
DEFAULT_MLE_LR = 0.05  # Adam's initial step [m]; cosine-decayed to 0 over the steps


def _check_members(name: str, depth: Array, precision: Array) -> None:
  if depth.ndim != 5 or depth.shape[-1] != 1 or depth.shape != precision.shape:
    raise ValueError(f"{name}: depth and precision must both be (K, B, H, W, 1), got {tuple(depth.shape)} and "
                     f"{tuple(precision.shape)}")


def confidence_weights(precision: Array) -> Array:
  """w_k = c_k / sum_j c_j over the member axis 0; uniform 1/K where every c_j is 0. Shape of `precision`."""
  c = jnp.maximum(precision, 0.0)
  total = jnp.sum(c, axis=0, keepdims=True)
  return jnp.where(total > 0, c / jnp.where(total > 0, total, 1.0), 1.0 / c.shape[0])


def fuse_mean(depth: Array, precision: Array | None = None) -> Array:
  """Plain ensemble mean: mean_k mu_k [m]. `precision` is ignored (accepted for a common signature)."""
  del precision
  return jnp.mean(depth, axis=0)


def fuse_weighted_mean(depth: Array, precision: Array) -> Array:
  """Confidence-weighted mean sum_k c_k mu_k / sum_k c_k [m] (the mean of the precision-weighted mixture;
  the plain mean where all c_k = 0)."""
  _check_members("fuse_weighted_mean", depth, precision)
  return jnp.sum(confidence_weights(precision) * depth, axis=0)


def fuse_max_confidence(depth: Array, precision: Array) -> Array:
  """Per pixel, mu of the member with the largest c (the first such member on ties) [m]."""
  _check_members("fuse_max_confidence", depth, precision)
  k = jnp.argmax(precision, axis=0)[None]
  return jnp.take_along_axis(depth, k, axis=0)[0]


def _mixture_terms(x: Array, depth: Array, log_weights: Array, variance: float) -> tuple[Array, Array]:
  """log p(x) and d log p / dx for p(x) = sum_k w_k N(x; mu_k, v^2), with x (S, ...) and depth (K, ...).

  d log p / dx = sum_k r_k (mu_k - x) / v^2 with responsibilities r_k = w_k N(x; mu_k, v^2) / p(x). The K
  components are unrolled (K is small) so that XLA fuses everything into one pass without (S, K, ...)
  temporaries.
  """
  mus = [depth[k][None] for k in range(depth.shape[0])]
  logits = [log_weights[k][None] - 0.5 * jnp.square(x - mu) / variance for k, mu in enumerate(mus)]
  top = functools.reduce(jnp.maximum, logits)
  e = [jnp.exp(a - top) for a in logits]
  z = functools.reduce(jnp.add, e)
  drift = functools.reduce(jnp.add, [ek * (mu - x) for ek, mu in zip(e, mus)])
  log_p = top + jnp.log(z) - 0.5 * math.log(2.0 * math.pi * variance)
  return log_p, drift / (z * variance)


def mixture_log_density(x: Array, depth: Array, log_weights: Array, variance: float) -> Array:
  """log p(x) of the 1-D mixture p(x) = sum_k w_k N(x; mu_k, v^2) per pixel, for S points per pixel.

  Args:
    x: (S, ...) evaluation points [m]. depth: (K, ...) means mu_k [m]. log_weights: (K, ...) log w_k.
    variance: v^2 [m^2], common to all components.

  Returns:
    (S, ...) log-density [log 1/m].
  """
  return _mixture_terms(x, depth, log_weights, variance)[0]


@functools.partial(jax.jit, static_argnames=("variance", "steps", "learning_rate", "return_all"))
def fuse_mle(depth: Array, precision: Array, *, variance: float = DEFAULT_MLE_VARIANCE,
             steps: int = DEFAULT_MLE_STEPS, learning_rate: float = DEFAULT_MLE_LR, return_all: bool = False):
  """Maximum-likelihood fusion: the mode of the mixture sum_k w_k N(mu_k, v^2), w_k = c_k / sum_j c_j.

  Paper supplementary (MLE fusion): K starts x_s = mu_s (one per member) are each moved by Adam (optax.adam,
  learning rate `learning_rate` cosine-decayed to 0 over `steps`) to maximise log p(x); the start that ends at
  the highest log p is kept. Every pixel and start is an independent 1-D problem: Adam's moments are per
  element, so one Adam over the whole (K, B, H, W, 1) array of starts is exactly per-pixel Adam. The gradient
  of -log p is analytic (`_mixture_terms`), equal to autodiff's.

  Args:
    depth: (K, B, H, W, 1) member means mu_k [m].
    precision: (K, B, H, W, 1) member precisions c_k [1/m^2] (only their ratios matter: the weights).
    variance: v^2 [m^2] of every component (0.1 in the paper).
    steps: Adam steps (500 in the paper).
    learning_rate: Adam's initial learning rate [m per step].
    return_all: also return the K end points and their log-densities.

  Returns:
    (B, H, W, 1) the mode estimate [m]; with `return_all`, (mode, ends (K, ...), log_density (K, ...)).
  """
  _check_members("fuse_mle", depth, precision)
  if not variance > 0:
    raise ValueError(f"fuse_mle: variance must be > 0, got {variance}")
  depth = depth.astype(jnp.float32)
  w = confidence_weights(precision.astype(jnp.float32))
  log_w = jnp.where(w > 0, jnp.log(jnp.where(w > 0, w, 1.0)), -jnp.inf)
  tx = optax.adam(optax.cosine_decay_schedule(learning_rate, max(int(steps), 1)))

  def body(_, carry):
    x, opt_state = carry
    _, ascent = _mixture_terms(x, depth, log_w, variance)
    updates, opt_state = tx.update(-ascent, opt_state)  # Adam minimises -log p
    return optax.apply_updates(x, updates), opt_state

  ends, _ = jax.lax.fori_loop(0, int(steps), body, (depth, tx.init(depth)))
  log_p = mixture_log_density(ends, depth, log_w, variance)
  best = jnp.argmax(log_p, axis=0)[None]
  mode = jnp.take_along_axis(ends, best, axis=0)[0]
  return (mode, ends, log_p) if return_all else mode


def mixture_moments(depth: Array, precision: Array, *, weighting: str = "uniform") -> tuple[Array, Array]:
  """Mean and variance of the members' mixture sum_k w_k N(mu_k, 1/c_k).

    mean = sum_k w_k mu_k,   var = sum_k w_k / c_k  (aleatoric)  +  sum_k w_k (mu_k - mean)^2  (member spread)

  `weighting='uniform'` (w_k = 1/K) is the deep-ensemble predictive variance of Gustafsson et al. (REFERENCE
  6.4: sigma^2 = mean sigma_alea^2 + Var_M(mu)); 'confidence' uses w_k = c_k / sum c (then the aleatoric term is
  K'/sum c with K' the members with c_k > 0, and the mean is `fuse_weighted_mean`).

  Returns:
    (mean [m], variance [m^2]), each (B, H, W, 1); the variance is inf where a uniformly weighted c_k is 0.
  """
  _check_members("mixture_moments", depth, precision)
  mean = fuse_mean(depth) if weighting == "uniform" else fuse_weighted_mean(depth, precision)
  return mean, fused_variance(depth, precision, mean, weighting=weighting)


def fused_variance(depth: Array, precision: Array, fused: Array, *, weighting: str = "uniform") -> Array:
  """Expected squared error of a fused depth f under the members' mixture: sum_k w_k (1/c_k + (mu_k - f)^2).

  Equals the mixture variance when f is the mixture mean (`mixture_moments`), and adds the squared offset
  (mean - f)^2 otherwise (max-confidence and MLE fusion). Weights as in `mixture_moments`.

  Args:
    depth, precision: (K, B, H, W, 1). fused: (B, H, W, 1) [m]. weighting: 'uniform' or 'confidence'.

  Returns:
    (B, H, W, 1) variance [m^2].
  """
  _check_members("fused_variance", depth, precision)
  if weighting == "uniform":
    w = jnp.full_like(precision, 1.0 / precision.shape[0])
  elif weighting == "confidence":
    w = confidence_weights(precision)
  else:
    raise ValueError(f"weighting must be 'uniform' or 'confidence', got {weighting!r}")
  c = jnp.maximum(precision, 0.0)
  alea = jnp.where(w > 0, w / c, 0.0)  # w/0 = inf for a member that counts; 0 for one that does not
  return jnp.sum(alea + w * jnp.square(depth - fused[None]), axis=0)


FUSION_RULES = ("mean", "weighted_mean", "max_confidence", "mle")
_RULE_WEIGHTING = {"mean": "uniform", "weighted_mean": "confidence", "max_confidence": "confidence",
                   "mle": "confidence"}


def fuse(depth: Array, precision: Array, rule: str, *, variance: float = DEFAULT_MLE_VARIANCE,
         steps: int = DEFAULT_MLE_STEPS, learning_rate: float = DEFAULT_MLE_LR) -> tuple[Array, Array]:
  """One fusion rule with its uncertainty.

  Returns:
    (fused depth [m], fused precision 1 / `fused_variance` [1/m^2]), each (B, H, W, 1); the variance uses
    uniform weights for 'mean' and confidence weights for the other rules, so 'mean' and 'weighted_mean' get
    exactly their mixture's variance.
  """
  if rule == "mean":
    f = fuse_mean(depth)
  elif rule == "weighted_mean":
    f = fuse_weighted_mean(depth, precision)
  elif rule == "max_confidence":
    f = fuse_max_confidence(depth, precision)
  elif rule == "mle":
    f = fuse_mle(depth, precision, variance=variance, steps=steps, learning_rate=learning_rate)
  else:
    raise ValueError(f"unknown fusion rule {rule!r}; expected one of {FUSION_RULES}")
  var = fused_variance(depth, precision, f, weighting=_RULE_WEIGHTING[rule])
  return f, 1.0 / var


def member_precision(confidence: Array, loss_name: str) -> Array:
  """The members' precision 1/sigma^2 [1/m^2] from `ModelOutput.confidence` for a model trained with
  `loss_name` (as `evaluate.precision_equivalent`): c (gaussian_nll), exp(c) (gaussian_nll_exp), c^2/2
  (laplace_nll); for L1/L2 models the uncalibrated NConv confidence itself (fine for weights, not for AUCE)."""
  if loss_name == "gaussian_nll_exp":
    return jnp.exp(confidence)
  if loss_name == "laplace_nll":
    return 0.5 * jnp.square(confidence)
  return confidence


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

  Rows: 'member k' (its depth and `member_precision`) for every member, then every rule of `rules` (fused depth
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
    prec = member_precision(out.confidence, loss_name)
    rows = {f"member {k}": (out.depth[k], prec[k]) for k in range(out.depth.shape[0])}
    for r in rules:
      rows[r] = fuse(out.depth, prec, r, variance=mle.variance, steps=mle.steps, learning_rate=mle.learning_rate)
    return {name: (d, c, metric_fn(d, target)) for name, (d, c) in rows.items()}

  return fn


def evaluate_ensemble(model, variables: PyTree, batches: Iterable[Mapping[str, np.ndarray]], *, loss_name: str,
                      metric_set: str = "kitti", rules: Sequence[str] = FUSION_RULES, mle: MLEOptions = MLEOptions(),
                      max_batches: int = -1) -> dict[str, dict[str, float]]:
  """Evaluates every member and every fusion rule on `batches` (paper Table 3).

  Error metrics are split means of per-image values (REFERENCE 6.1); AUSE (both definitions, REFERENCE 6.3/6.4),
  AUCE and NLL pool all valid pixels of the split. Members are ranked by their own precision; fused rows by the
  fused precision 1 / `fused_variance` (uniform mixture for 'mean', confidence-weighted for the other rules).
  AUCE and NLL are None for models trained without a probabilistic loss.

  Args:
    model: the common Flax module; variables: stacked, leaves (K, ...).
    batches: dicts with (B, H, W, 1) `sparse` and `target` [m] (e.g. `pncnn_jax.data.make_iterator`).
    loss_name: the members' training loss (decides their precision, `member_precision`).
    metric_set: 'kitti' or 'nyu'. rules: fusion rules to report. mle: `fuse_mle` settings.
    max_batches: stop after this many batches (-1: all).

  Returns:
    {row name: flat dict of metrics}, rows 'member 0', ..., then the rules in order; print it with
    `pncnn_jax.evaluate.format_table(rows, metric_set)` or `format_table` here.
  """
  fn = make_ensemble_eval_fn(model, loss_name, metric_set, tuple(rules), mle)
  probabilistic = loss_name in evaluate.PROBABILISTIC_LOSSES
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


def format_table(rows: Mapping[str, Mapping[str, Any]], metric_set: str = "kitti",
                 keys: Sequence[str] = ("mae", "rmse", "ause_pncnn", "ause_gustafsson", "auce")) -> str:
  """The rows of `evaluate_ensemble` as a markdown table (units of `metric_set`)."""
  unit = {"mae": "mm", "rmse": "mm", "imae": "1/km", "irmse": "1/km"} if metric_set == "kitti" else {
      "mae": "m", "rmse": "m"}
  head = ["member / fusion"] + [f"{k} [{unit[k]}]" if k in unit else k for k in keys]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name, r in rows.items():
    cells = [("n/a" if r.get(k) is None else f"{r[k]:.4g}") for k in keys]
    lines.append("| " + " | ".join([name] + cells) + " |")
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Training: K members in one vmapped, jitted, data-parallel step.

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
    from pncnn_jax import data  # pylint: disable=g-import-not-at-top

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
    import grain  # pylint: disable=g-import-not-at-top
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


@functools.lru_cache(maxsize=8)
def make_ensemble_train_step(loss_name: str, mesh: Mesh, method: str = "vmap"):
  """`ensemble_train_step` jitted for the mesh: state replicated (donated), batch sharded P(None, 'data')."""
  rep, shard = NamedSharding(mesh, P()), NamedSharding(mesh, P(None, "data"))
  return jax.jit(functools.partial(ensemble_train_step, loss_name=loss_name, method=method),
                 in_shardings=(rep, shard), out_shardings=(rep, rep), donate_argnums=0)


def _model_of(config):
  """The config's model, one instance per setting: `model.apply` is a static part of the TrainState and bound
  methods of equal but distinct modules compare unequal, which would make the jitted step recompile."""
  from pncnn_jax import train  # pylint: disable=g-import-not-at-top
  return _cached_model(config.variant, **train.model_settings(config))


@functools.lru_cache(maxsize=8)
def _cached_model(variant: str, **settings: str):
  return models.build_model(variant, **settings)


@functools.lru_cache(maxsize=8)
def _schedule_and_tx(lr: float, steps_per_epoch: int, decay_epochs: int, gamma: float):
  """The StepLR schedule and Adam, one object per setting: the optimizer is a static part of the TrainState, so a
  new one would make the jitted step recompile (e.g. when a run resumes in the same process)."""
  schedule = ts.step_lr_schedule(lr, steps_per_epoch, decay_epochs, gamma)
  return schedule, ts.make_optimizer(schedule)


def member_seeds(config) -> list[int]:
  """`config.ensemble.seeds`, or seed + k for k < num_members."""
  e = config.ensemble
  seeds = list(e.seeds) if e.seeds else [int(config.seed) + k for k in range(int(e.num_members))]
  if len(seeds) != int(e.num_members) or len(set(seeds)) != len(seeds):
    raise ValueError(f"config.ensemble.seeds must be {e.num_members} distinct ints, got {seeds}")
  return seeds


def train_ensemble(config, workdir: str | os.PathLike, *, stop_after_steps: int | None = None
                   ) -> dict[str, dict[str, float]]:
  """Trains an ensemble (config.ensemble: num_members, seeds, subset_fraction, mle_*) in `workdir`, resuming
  from its latest checkpoint; then evaluates members and fusion rules on the eval split.

  Same recipe and schedule as a single model of the config (`pncnn_jax.train`): num_epochs x steps_per_epoch
  steps of Adam with the StepLR schedule, each member on batches of config.batch_size from its own subset.
  Checkpoints (`checkpointing.Checkpointer`) every epoch and every checkpoint_every_steps hold the stacked state;
  their metadata has `ensemble_size`, so `load_ensemble(workdir)` / `checkpointing.restore_variables(workdir)`
  return stacked variables. Writes config.json, metrics.jsonl (per-member train metrics) and, at the end,
  ensemble_eval.{json,md}.

  Args:
    config: configs/ensemble_synthetic.py (or any single-model config plus an `ensemble` block).
    workdir: run directory. stop_after_steps: testing hook, return after this many steps of this call.

  Returns:
    the `evaluate_ensemble` rows ({} when stopped early).
  """
  from pncnn_jax import checkpointing, train  # pylint: disable=g-import-not-at-top

  workdir = pathlib.Path(os.path.abspath(os.fspath(workdir)))
  workdir.mkdir(parents=True, exist_ok=True)
  loss_name, model = train.variant_loss(config), _model_of(config)
  seeds, fraction = member_seeds(config), float(config.ensemble.subset_fraction)
  mesh = train.make_mesh()
  train.check_batch_size(config.batch_size, mesh)
  spe = train.steps_per_epoch(config)
  total = spe * int(config.num_epochs)
  schedule, tx = _schedule_and_tx(float(config.learning_rate), spe, int(config.lr_decay_epochs),
                                  float(config.lr_decay_factor))
  hw = (config.data.train_crop_height, config.data.train_crop_width)
  state = create_ensemble_state(model, init_ensemble(model, seeds, hw), tx)
  per_host = config.batch_size // jax.process_count()
  source = MemberBatches(train.data_config(config, "train", batch_size=1, num_epochs=1), seeds, fraction, per_host)
  is_main = jax.process_index() == 0
  if is_main:
    (workdir / "config.json").write_text(config.to_json_best_effort(indent=2) + "\n")

  ckpt = checkpointing.Checkpointer(workdir, max_to_keep=config.max_to_keep, keep_best=False)
  writer = train.MetricWriter(workdir, enabled=is_main)
  rep = NamedSharding(mesh, P())
  latest = ckpt.latest_step()
  if latest is not None:
    tree, meta = ckpt.restore(latest, target=checkpointing.abstract_like(train.state_to_tree(state), rep))
    if meta.get("ensemble_size") != len(seeds) or meta.get("seeds") != seeds or meta.get("variant") != config.variant:
      raise ValueError(f"{workdir}: checkpoint {latest} is an ensemble of {meta.get('variant')!r} with seeds "
                       f"{meta.get('seeds')}, the config asks for {config.variant!r} with seeds {seeds}")
    state = train.tree_to_state(state, tree)
  else:
    state = jax.device_put(state, rep)
  start = int(state.step[0])
  step_fn = make_ensemble_train_step(loss_name, mesh, config.ensemble.get("train_member_map", "vmap"))
  batch_sharding = NamedSharding(mesh, P(None, "data"))
  meta = {"variant": config.variant, "loss": loss_name, "ensemble_size": len(seeds), "seeds": seeds,
          "subset_fraction": fraction, "steps_per_epoch": spe, "config": json.loads(config.to_json_best_effort())}
  stop = total if stop_after_steps is None else min(total, start + int(stop_after_steps))
  it = source.iterator(start, stop)
  t0 = time.perf_counter()
  try:
    for step in range(start, stop):
      batch = {k: jax.make_array_from_process_local_data(batch_sharding, v) for k, v in next(it).items()}
      state, m = step_fn(state, batch)
      m, done = jax.device_get(m), step + 1
      if not np.all(m["is_finite"]):
        raise FloatingPointError(
            f"non-finite loss or gradient at step {done} in members {np.flatnonzero(~m['is_finite']).tolist()} "
            f"(loss {m['loss'].tolist()}) in {workdir}: stopping; the last good checkpoint is step "
            f"{ckpt.latest_step()}. Lower config.learning_rate or check the data.")
      if done % config.log_every_steps == 0 or done == total:
        row = {f"{k}_{j}": float(m[k][j]) for k in ("loss", "mae", "rmse", "grad_norm") for j in range(len(seeds))}
        writer.write(done, "train", {**row, "lr": float(schedule(step)),
                                     "steps_per_sec": (done - start) / (time.perf_counter() - t0)})
      every = config.checkpoint_every_steps
      if done % spe == 0 or done == total or (every > 0 and done % every == 0):
        ckpt.save(done, train.state_to_tree(state), {**meta, "step": done})
  finally:
    ckpt.wait()
    ckpt.close()
    writer.close()
  if stop < total:
    return {}
  rows = evaluate_ensemble_config(config, train.state_to_tree(state))
  if is_main:
    (workdir / "ensemble_eval.json").write_text(json.dumps(rows, indent=2) + "\n")
    (workdir / "ensemble_eval.md").write_text(format_table(rows, config.metrics) + "\n")
  return rows


def evaluate_ensemble_config(config, variables_or_path: PyTree | str | os.PathLike | Sequence[str],
                             step: int | str = "latest") -> dict[str, dict[str, float]]:
  """What eval.py runs for an ensemble config: the eval split of `config`, every member and every rule.

  Args:
    config: an ensemble config (configs/ensemble_synthetic.py).
    variables_or_path: stacked variables, an ensemble workdir, or a list of K single-model checkpoints.
    step: for workdirs: an int, 'latest' or 'best'.
  """
  from pncnn_jax import data, train  # pylint: disable=g-import-not-at-top

  if isinstance(variables_or_path, (str, os.PathLike)) or (
      isinstance(variables_or_path, Sequence) and not isinstance(variables_or_path, Mapping)):
    variables, _ = load_ensemble(variables_or_path, step=step)
  else:
    variables = {k: v for k, v in variables_or_path.items() if k in ("params", "batch_stats")}
  e = config.ensemble
  batches = data.make_iterator(train.data_config(config, "eval", batch_size=max(1, config.eval_batch_size),
                                                 num_epochs=1))
  return evaluate_ensemble(_model_of(config), variables, batches, loss_name=train.variant_loss(config),
                           metric_set=config.metrics, rules=tuple(e.rules),
                           mle=MLEOptions(float(e.mle_variance), int(e.mle_steps), float(e.mle_learning_rate)),
                           max_batches=config.num_eval_batches)
