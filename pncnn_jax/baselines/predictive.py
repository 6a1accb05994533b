"""MC-Dropout and deep-ensemble predictions of the baseline, and their evaluation.

Both give M Gaussian predictions (mu_m, sigma_m^2) per pixel and fuse them with one rule (Gustafsson et al.; the
uniform mixture of `pncnn_jax.ensemble.fusion.mixture_moments`, docs/SPEC.md §9):

    mean = (1/M) sum_m mu_m,    var = (1/M) sum_m sigma_m^2  (aleatoric)  +  (1/M) sum_m (mu_m - mean)^2  (epistemic)

MC-Dropout: the M predictions are M stochastic passes of one network (dropout on, BatchNorm on its running
statistics), in one jitted call vmapped over M dropout keys. Deep ensemble: the first M members of a stacked ensemble
(`pncnn_jax.ensemble.members.apply_ensemble`). `evaluate_prefixes` runs the largest M once per batch and fuses every
smaller M from its first members or passes, so a table over M costs one pass over the scenes.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pncnn_jax import evaluate, losses
from pncnn_jax import metrics as metrics_lib
from pncnn_jax.ensemble import fusion, members

Array = jax.Array
MC_DROPOUT_M = (1, 2, 4, 8, 16, 32)
ENSEMBLE_M = (1, 2, 4, 8)


def dropout_keys(seed: int, passes: int) -> Array:
  """The M dropout keys of a MC-Dropout evaluation: jax.random.split(key(seed), M), (M,) typed keys."""
  return jax.random.split(jax.random.key(seed), passes)


def mc_dropout_members(model, variables: Mapping[str, Any], sparse: Array, keys: Array, loss_name: str
                       ) -> tuple[Array, Array]:
  """M stochastic passes, vmapped over the dropout `keys` (M,): (depth [m], precision [1/m^2]), each (M, B, H, W, 1).

  Pass m is `model.apply(variables, sparse, stochastic=True, rngs={'dropout': keys[m]})`."""
  def one(key):
    out = model.apply(variables, sparse, train=False, stochastic=True, rngs={"dropout": key})
    return out.depth, losses.precision_of(out.confidence, loss_name)
  return jax.vmap(one)(keys)


def ensemble_members(model, variables: Any, sparse: Array, loss_name: str) -> tuple[Array, Array]:
  """Every member of stacked `variables` (leaves (K, ...)): (depth, precision), each (K, B, H, W, 1)."""
  return members.member_precision(model, variables, sparse, loss_name)


def predictive(depth: Array, precision: Array) -> tuple[Array, Array]:
  """The fused prediction of M members (M, B, H, W, 1): (mean [m], variance [m^2]) (module docstring)."""
  return fusion.mixture_moments(depth, precision, weighting="uniform")


@functools.lru_cache(maxsize=8)
def make_members_fn(model, loss_name: str, kind: str) -> Callable:
  """jit of the per-member predictions: kind 'mc_dropout' (variables, sparse, keys) or 'ensemble' (stacked
  variables, sparse); returns (depth, precision), each (M, B, H, W, 1)."""
  if kind == "mc_dropout":
    return jax.jit(lambda v, x, keys: mc_dropout_members(model, v, x, keys, loss_name))
  if kind == "ensemble":
    return jax.jit(lambda v, x: ensemble_members(model, v, x, loss_name))
  raise ValueError(f"kind must be 'mc_dropout' or 'ensemble', got {kind!r}")


@functools.lru_cache(maxsize=8)
def _prefix_fn(ms: tuple[int, ...]) -> Callable:
  """jit((depth, precision (K, B, H, W, 1), target) -> {M: (mean, precision 1/var, per-image metrics)})."""
  @jax.jit
  def fn(depth, precision, target):
    out = {}
    for m in ms:
      mean, var = predictive(depth[:m], precision[:m])
      out[m] = (mean, 1.0 / var, metrics_lib.kitti_metrics(mean, target))
    return out
  return fn


def evaluate_prefixes(members_fn: Callable[[Array], tuple[Array, Array]], batches: Iterable[Mapping[str, np.ndarray]],
                      ms: Sequence[int]) -> dict[int, dict[str, float]]:
  """Accuracy and uncertainty of the fused prediction of the first M members, for every M of `ms`.

  Args:
    members_fn: sparse (B, H, W, 1) -> (depth, precision), each (max(ms), B, H, W, 1) (e.g. a `make_members_fn`
      with its variables bound).
    batches: dicts with (B, H, W, 1) `sparse` and `target` [m].
    ms: the ensemble sizes / pass counts.

  Returns:
    {M: {mae, rmse, imae, irmse (KITTI units: mm, 1/km; split means of per-image values), ause_pncnn,
    ause_shared_max, ause_none [m] (docs/SPEC.md §8.2a), ause_gustafsson, auce, nll, num_images}}.
  """
  ms = tuple(sorted(set(int(m) for m in ms)))
  if not ms or ms[0] < 1:
    raise ValueError(f"evaluate_prefixes: ms must be positive ints, got {ms}")
  fn = _prefix_fn(ms)
  means = {m: metrics_lib.MeanAccumulator() for m in ms}
  uncs = {m: metrics_lib.UncertaintyAccumulator() for m in ms}
  num_images = 0
  for i, batch in enumerate(batches):
    sparse, target = evaluate.batch_arrays(batch, i)
    depth, precision = members_fn(jnp.asarray(sparse))
    if depth.shape[0] < ms[-1]:
      raise ValueError(f"evaluate_prefixes: {depth.shape[0]} members or passes, fewer than M = {ms[-1]}")
    out = jax.device_get(fn(depth, precision, jnp.asarray(target)))
    for m in ms:
      d, c, per_image = out[m]
      means[m].update(per_image)
      uncs[m].update(d, target, c)
    num_images += sparse.shape[0]
  if num_images == 0:
    raise ValueError("evaluate_prefixes: the batches gave no images")
  rows = {}
  for m in ms:
    u = uncs[m].result()
    rows[m] = {**means[m].result(), **{k: u[k] for k in ("ause_pncnn", "ause_shared_max", "ause_none",
                                                         "ause_gustafsson", "auce", "nll")},
               "num_images": num_images}
  return rows
