"""MC-Dropout and deep-ensemble predictions of the baseline, and their evaluation.

Both give M Gaussian predictions (mu_m, sigma_m^2) per pixel and fuse them with one rule (Gustafsson et al.; the
uniform mixture of `pncnn_jax.ensemble.fusion.mixture_moments`, docs/SPEC.md §9):

    mean = (1/M) sum_m mu_m,    var = (1/M) sum_m sigma_m^2  (aleatoric)  +  (1/M) sum_m (mu_m - mean)^2  (epistemic)

MC-Dropout: the M predictions are M stochastic passes of one network (dropout on, BatchNorm on its running
statistics), in one jitted call vmapped over M dropout keys. Deep ensemble: the first M members of a stacked ensemble
(`pncnn_jax.ensemble.members.apply_ensemble`). One model ('single'): its own Gaussian, M = 1, scored the same way.

`PredictiveEvaluator` ('predictive', an evaluator of the core's protocol `pncnn_jax.evaluate.protocol`, registered
here on import) runs the largest M once per batch and fuses every smaller M from its first members or passes, so a
table over M costs one pass over the scenes.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Sequence

import jax

from pncnn_jax import losses
from pncnn_jax import metrics as metrics_lib
from pncnn_jax.ensemble import fusion, members
from pncnn_jax.evaluate import depth as evaluate_depth
from pncnn_jax.evaluate import protocol

Array = jax.Array
MC_DROPOUT_M = (1, 2, 4, 8, 16, 32)
ENSEMBLE_M = (1, 2, 4, 8)
KINDS = ("mc_dropout", "ensemble", "single")  # where the M predictions come from
MC_SEED = 0  # the dropout keys of a MC-Dropout evaluation: dropout_keys(MC_SEED, max M)


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


def single_member(model, variables: Any, sparse: Array, loss_name: str) -> tuple[Array, Array]:
  """One model as a predictive of M = 1: (depth, precision), each (1, B, H, W, 1); the NConv confidence itself
  for a model without a calibrated precision (ranks pixels: AUSE only)."""
  out = model.apply(variables, sparse, train=False)
  prec = losses.precision_of(out.confidence, loss_name)
  return out.depth[None], (out.confidence if prec is None else prec)[None]


@functools.lru_cache(maxsize=8)
def make_members_fn(model, loss_name: str, kind: str) -> Callable:
  """jit of the per-member predictions: kind 'mc_dropout' (variables, sparse, keys), 'ensemble' (stacked
  variables, sparse) or 'single' (variables, sparse); returns (depth, precision), each (M, B, H, W, 1)."""
  if kind == "mc_dropout":
    return jax.jit(lambda v, x, keys: mc_dropout_members(model, v, x, keys, loss_name))
  if kind == "ensemble":
    return jax.jit(lambda v, x: ensemble_members(model, v, x, loss_name))
  if kind == "single":
    return jax.jit(lambda v, x: single_member(model, v, x, loss_name))
  raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")


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


class PredictiveEvaluator(evaluate_depth.PairEvaluator):
  """Accuracy and uncertainty of the fused prediction of the first M members or passes, for every M of `ms`, on
  batches with (B, H, W, 1) `sparse` and `target` [m].

  Settings:
    loss_name: the members' loss (decides their precision).
    kind: 'mc_dropout' (M stochastic passes of one model, keys `dropout_keys(seed, max(ms))`), 'ensemble'
      (stacked variables, leaves (K, ...), K >= max(ms)) or 'single' (one model, ms = (1,)).
    ms: the ensemble sizes / pass counts.
    seed: the dropout keys' seed (MC-Dropout).

  Its result's rows: one per M (named str(M), in order): {mae, rmse, imae, irmse (KITTI units: mm, 1/km; split
  means of per-image values), ause_pncnn, ause_shared_max, ause_none [m] (docs/SPEC.md §8.2a), ause_gustafsson,
  auce, nll, num_images}.
  """

  header = "M"

  def __init__(self, *, loss_name: str, kind: str, ms: Sequence[int], seed: int = MC_SEED):
    ms = tuple(sorted(set(int(m) for m in ms)))
    if not ms or ms[0] < 1:
      raise ValueError(f"the predictive evaluator: ms must be positive ints, got {ms}")
    if kind not in KINDS:
      raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    self.loss_name, self.kind, self.ms, self.seed = loss_name, kind, ms, seed

  def step(self, model):
    fn, fuse = make_members_fn(model, self.loss_name, self.kind), _prefix_fn(self.ms)
    keys = dropout_keys(self.seed, self.ms[-1]) if self.kind == "mc_dropout" else None

    def step(variables, sparse, target):
      depth, precision = fn(variables, sparse, keys) if keys is not None else fn(variables, sparse)
      if depth.shape[0] < self.ms[-1]:
        raise ValueError(f"the predictive evaluator: {depth.shape[0]} members or passes, fewer than M = "
                         f"{self.ms[-1]}")
      return fuse(depth, precision, target)

    return step

  def start(self) -> None:
    self._rows = evaluate_depth.ScoredRows(self.ms)

  def update(self, rows, out, index):
    self._rows.update(out, rows["target"])

  def result(self) -> protocol.Result:
    if self._rows.num_images == 0:
      raise ValueError("the predictive evaluator: the batches gave no images")
    keys = ("ause_pncnn", "ause_shared_max", "ause_none", "ause_gustafsson", "auce", "nll")
    rows = {str(m): self._rows.row(m, keys) for m in self.ms}
    ms = protocol.get_metric_set("kitti")
    columns = ("mae", "rmse", "imae", "irmse", "ause_pncnn", "ause_shared_max", "ause_none", "ause_gustafsson",
               "auce", "nll", "num_images")
    return protocol.Result(evaluator=self.name, rows=rows, units=ms.units, columns=columns, header=self.header,
                           report={"kind": self.kind, "ms": list(self.ms)})


protocol.register_evaluator("predictive", PredictiveEvaluator)
