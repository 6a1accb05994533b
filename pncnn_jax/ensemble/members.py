"""Ensembles of pNCNN: K members as one stacked variable tree run with `jax.vmap`, and the fusion rules.

Paper section 5.4 / Table 3 and its supplementary: an ensemble of pNCNNs, each trained on a random subset of the
training data, fused per pixel by the mean, the confidence-weighted mean, the most confident member, or the
maximum-likelihood (MLE) estimate of a mixture built from the members' confidences.

Layout. Every member array carries a leading member axis K: stacked variables have leaves (K, ...); member
outputs are (K, B, H, W, 1) depth mu_k [m] and precision c_k = 1/sigma_k^2 [1/m^2] (`ModelOutput.confidence` of
pNCNN, docs/SPEC.md §6). Fusion rules are pure jnp functions of those two arrays and return (B, H, W, 1).

The fusion rules are `pncnn_jax.ensemble.fusion` (re-exported here). The evaluation of an ensemble is two
evaluators of the protocol (`pncnn_jax.evaluate.protocol`), registered here: 'ensemble' (`EnsembleEvaluator`: every
member and every fusion rule side by side) and 'ensemble_calibration' (`CalibrationEvaluator`: each member's
precision scale).

Training (member data streams, the stacked state, the vmapped step) is `pncnn_jax.training.ensemble`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pncnn_jax import data, from_config, losses
from pncnn_jax.checkpoints import loader
from pncnn_jax.ensemble.fusion import (  # noqa: F401
  DEFAULT_MLE_LR,
  DEFAULT_MLE_STEPS,
  DEFAULT_MLE_VARIANCE,
  FUSION_RULES,
  _mixture_terms,
  calibration_sums,
  confidence_weights,
  fuse,
  fuse_max_confidence,
  fuse_mean,
  fuse_mle,
  fuse_weighted_mean,
  fused_variance,
  mixture_log_density,
  mixture_moments,
  precision_scales,
  scale_precision,
)
from pncnn_jax.evaluate import depth as evaluate_depth
from pncnn_jax.evaluate import protocol
from pncnn_jax.nn import models

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
                  allow_mismatch: bool = False, allow_fallback: bool = False) -> tuple[PyTree, list[dict]]:
  """Stacked variables from K single-model checkpoints, or from one ensemble workdir (`pncnn_jax.training.loop`).

  Args:
    paths: checkpoints understood by `loader.load` (workdirs, step or model directories, official files). One
      path whose metadata has `ensemble_size` is returned as it is (already stacked).
    step: for workdirs: an int, 'latest' or 'best'.
    expect, allow_mismatch, allow_fallback: the identity every checkpoint must have been trained as, and the
      fallback to a workdir's newest intact step (`loader.load`).

  Returns:
    (stacked variables with leaves (K, ...), the list of the checkpoints' metadata).
  """
  variables, loaded = _load_members(paths, step, expect=expect, allow_mismatch=allow_mismatch,
                                    allow_fallback=allow_fallback)
  return variables, [c.meta for c in loaded]


def _load_members(paths, step, **kwargs) -> tuple[PyTree, list[loader.Loaded]]:
  """(stacked variables, every checkpoint's `loader.Loaded`) of `load_ensemble`."""
  paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
  if not paths:
    raise ValueError("load_ensemble: no checkpoint paths given")
  loaded = [loader.load(p, step=step, **kwargs) for p in paths]
  if len(loaded) == 1 and loaded[0].ensemble_size is not None:
    return loaded[0].variables, loaded
  for p, c in zip(paths, loaded):
    if c.ensemble_size is not None:
      raise ValueError(f"load_ensemble: {p} is an ensemble checkpoint; give it alone, not among members")
  return stack_trees([c.variables for c in loaded]), loaded


def member_map(fn: Callable, method: str = "auto") -> Callable:
  """Maps `fn` over the leading member axis K of all its arguments (pytrees with leaves (K, ...)).

  Methods:
    'vmap': `jax.vmap`. Per-member convolution kernels become grouped convolutions (feature_group_count = K),
      which XLA:CPU runs ~3x slower than K plain ones; the method for accelerators and for training.
    'map': `jax.lax.map`, a loop over the members inside one compiled program (one copy of the body: the
      shortest compile); the CPU default.
    'unroll': K copies of `fn` in one program, one per member (`fn(*member_k_args)` for k = 0..K-1, stacked):
      every member runs the single model's own operations (bitwise the single model's outputs in the run of
      docs/develop/benchmarks-log.md, "Ensemble inference against one model on CPU"); compile time grows with K,
      and on CPU it is no faster than 'map' (3.9x against 3.55x one model's time for K = 4).
    'auto': 'map' on CPU, 'vmap' elsewhere (docs/develop/benchmarks-log.md, "Ensembles").
  For training use 'vmap' (the default of `pncnn_jax.training.ensemble.ensemble_train_step`): on CPU a train step inside
  lax.map ran ~10x slower than vmap (docs/develop/benchmarks-log.md).
  """
  if method == "auto":
    method = "map" if jax.default_backend() == "cpu" else "vmap"
  if method == "vmap":
    return jax.vmap(fn)
  if method == "map":
    return lambda *args: jax.lax.map(lambda a: fn(*a), args)
  if method == "unroll":
    def unrolled(*args):
      outs = [fn(*jax.tree.map(lambda x, k=k: x[k], args)) for k in range(ensemble_size(args))]
      return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)
    return unrolled
  raise ValueError(f"member_map: method must be 'auto', 'vmap', 'map' or 'unroll', got {method!r}")


def apply_ensemble(model, variables: PyTree, sparse: Array, *, per_member: bool = False,
                   method: str = "auto") -> models.ModelOutput:
  """Eval-mode forward of every member over the stacked variables (`member_map`: vmap or lax.map).

  Args:
    model: the (common) Flax module.
    variables: stacked variables, leaves (K, ...).
    sparse: (B, H, W, 1) input depth [m] shared by all members, or (K, B, H, W, 1) when `per_member`.
    method: 'vmap', 'map', 'unroll' or 'auto' (see `member_map`); the results agree to float rounding.

  Returns:
    `ModelOutput` whose fields are (K, B, H, W, 1).
  """
  if per_member:
    return member_map(lambda v, x: model.apply(v, x, train=False), method)(variables, sparse)
  return member_map(lambda v: model.apply(v, sparse, train=False), method)(variables)



# ---------------------------------------------------------------------------------------------------------------
# Evaluation: each member and each fusion rule side by side (paper Table 3).


def member_precision(model, variables: PyTree, sparse: Array, loss_name: str) -> tuple[Array, Array]:
  """(depth, precision) of every member, each (K, B, H, W, 1): the precision by the members' loss
  (`losses.precision_of`), the NConv confidence itself for L1/L2 models (fine for weights, not for AUCE)."""
  out = apply_ensemble(model, variables, sparse)
  prec = losses.precision_of(out.confidence, loss_name)
  return out.depth, (out.confidence if prec is None else prec)


@functools.lru_cache(maxsize=8)
def _make_calibration_fn(model, loss_name: str):
  """jit(variables, sparse, target) -> (sums (B, K), counts (B,)): `calibration_sums` of each image."""
  per_image = jax.vmap(lambda d, c, t: calibration_sums(d[:, None], c[:, None], t[None]), in_axes=(1, 1, 0))
  return jax.jit(lambda variables, sparse, target: per_image(
      *member_precision(model, variables, sparse, loss_name), target))


class CalibrationEvaluator(evaluate_depth.PairEvaluator):
  """Per-member precision scales s_k = N / sum_i c_ki (t_i - mu_ki)^2 (`fusion.precision_scales`, the
  maximum-likelihood scale of each member's Gaussian), on batches with (B, H, W, 1) `sparse` and `target` [m].

  Settings: loss_name, the members' training loss. Its result: one row per member ({precision_scale, num_pixels});
  details: precision_scales, (K,) float64.
  """

  header = "member"

  def __init__(self, *, loss_name: str):
    self.loss_name = loss_name

  def step(self, model):
    return _make_calibration_fn(model, self.loss_name)

  def start(self) -> None:
    self._sums, self._count = None, 0

  def update(self, rows, out, index):
    sums, counts = out
    batch = np.asarray(sums, np.float64).sum(axis=0)
    self._sums = batch if self._sums is None else self._sums + batch
    self._count += int(np.asarray(counts).sum())

  def result(self) -> protocol.Result:
    if self._sums is None:
      raise ValueError("ensemble calibration: the batches gave no images")
    scales = precision_scales(self._sums, self._count)
    rows = {f"member {k}": {"precision_scale": float(s), "num_pixels": self._count} for k, s in enumerate(scales)}
    return protocol.Result(evaluator=self.name, rows=rows, units={}, columns=("precision_scale", "num_pixels"),
                           header=self.header, details={"precision_scales": scales},
                           report={"precision_scales": scales.tolist()})


protocol.register_evaluator("ensemble_calibration", CalibrationEvaluator)


def fit_precision_scales(model, variables: PyTree, batches: Iterable[Mapping[str, np.ndarray]], *, loss_name: str,
                         max_batches: int = -1, mesh=None) -> np.ndarray:
  """Per-member precision scales s_k = N / sum_i c_ki (t_i - mu_ki)^2 fitted on `batches` (`CalibrationEvaluator`).

  Fit them on scenes the evaluation does not use (a validation split), then pass them to `EnsembleEvaluator` or
  multiply the members' precisions by them before `fusion.fuse`. Members trained apart can disagree on the scale
  of their precision (one over-confident member then wins most max-confidence picks); s_k < 1 marks a member
  that claims more precision than it earns.

  Args:
    model, variables: the common module and stacked variables, leaves (K, ...).
    batches: dicts with (B, H, W, 1) `sparse` and `target` [m]. loss_name: the members' training loss.
    max_batches: stop after this many batches (-1: all). mesh: the device mesh (default: all devices).

  Returns:
    (K,) float64 scales.
  """
  result = CalibrationEvaluator(loss_name=loss_name).run(model, variables, batches, mesh=mesh,
                                                          max_batches=max_batches)
  return result.details["precision_scales"]


@dataclasses.dataclass(frozen=True)
class MLEOptions:
  """Settings of `fuse_mle` (hashable, so that a jitted evaluation can be cached per setting)."""

  variance: float = DEFAULT_MLE_VARIANCE  # v^2 [m^2]
  steps: int = DEFAULT_MLE_STEPS  # Adam steps
  learning_rate: float = DEFAULT_MLE_LR  # Adam's initial learning rate [m]


# `member_map` methods an ensemble may train with (config.ensemble.train_member_map): 'unroll' compiles one copy per
# member, and 'auto' is for inference.
TRAINING_MEMBER_MAPS = ("vmap", "map")
CALIBRATED = " (calibrated)"  # suffix of the rows fused from scaled precisions (`EnsembleEvaluator(precision_scales=)`)


@functools.lru_cache(maxsize=8)
def make_ensemble_eval_fn(model, loss_name: str, metric_set: str, rules: tuple[str, ...],
                          mle: MLEOptions = MLEOptions(), calibrated: bool = False):
  """jit(variables, sparse, target, scales) -> {row name: (depth, precision, per-image metrics)}.

  Rows: 'member k' (its depth and precision by its loss's rule, `member_precision`) for every member, then every
  rule of `rules` (fused depth and 1 / `fused_variance`). With `calibrated`, the same rows again with every
  member's precision times scales[k] (`fit_precision_scales`), named with the suffix `CALIBRATED`; `scales` (K,)
  is unused otherwise. Metrics per image, KITTI (mm, 1/km) or NYU (m), as `metrics.kitti_metrics`.
  """
  metric_fn = protocol.get_metric_set(metric_set).per_image  # an unknown name: a ValueError naming the valid ones
  if metric_fn is None:
    raise ValueError(f"metric_set {metric_set!r} does not score depth maps (kitti, nyu)")
  bad = [r for r in rules if r not in FUSION_RULES]
  if bad:
    raise ValueError(f"unknown fusion rules {bad}; expected some of {FUSION_RULES}")

  def table(depth, prec, suffix):
    rows = {f"member {k}{suffix}": (depth[k], prec[k]) for k in range(depth.shape[0])}
    for r in rules:
      rows[r + suffix] = fuse(depth, prec, r, variance=mle.variance, steps=mle.steps, learning_rate=mle.learning_rate)
    return rows

  @jax.jit
  def fn(variables, sparse, target, scales):
    depth, prec = member_precision(model, variables, sparse, loss_name)
    rows = table(depth, prec, "")
    if calibrated:
      rows.update(table(depth, scale_precision(prec, scales), CALIBRATED))
    return {name: (d, c, metric_fn(d, target)) for name, (d, c) in rows.items()}

  return fn


class EnsembleEvaluator(evaluate_depth.PairEvaluator):
  """Every member and every fusion rule of an ensemble (stacked variables, leaves (K, ...)) side by side (paper
  Table 3), on batches with (B, H, W, 1) `sparse` and `target` [m].

  Error metrics are split means of per-image values (docs/SPEC.md §7.3); AUSE (both definitions, docs/SPEC.md
  §8.2, §8.3), AUCE and NLL pool all valid pixels of the split. Members are ranked by their own precision; fused
  rows by the fused precision 1 / `fused_variance` (uniform mixture for 'mean', confidence-weighted for the other
  rules). AUCE and NLL are None for models trained without a probabilistic loss.

  Settings:
    loss_name: the members' training loss (decides their precision, `losses.precision_of`).
    metric_set: 'kitti' or 'nyu'. rules: fusion rules to report. mle: `fuse_mle` settings.
    precision_scales: (K,) factors on the members' precisions (calibrated fusion). Given, every row comes again
      with the suffix `CALIBRATED`, computed from the scaled precisions: they change the rules that weigh or pick
      members and every NLL / AUCE, never a member's depth (nor its AUSE, a ranking, but for the float32 rounding
      of near-ties).
    calibration: (split name, batches()) to fit the scales on first (`fit_precision_scales`) when
      `precision_scales` is None (config.ensemble.calibration_split).

  Its result's rows: 'member 0', ..., then the rules in order (then the calibrated rows, in the same order), each
  {metrics, ause_pncnn, ause_gustafsson, auce, nll, num_images}; details: precision_scales ((K,) or None).
  """

  header = "member / fusion"

  def __init__(self, *, loss_name: str, metric_set: str = "kitti", rules: Sequence[str] = FUSION_RULES,
               mle: MLEOptions = MLEOptions(), precision_scales: Sequence[float] | None = None,
               calibration: tuple[str, Callable[[], Iterable[Mapping[str, np.ndarray]]]] | None = None):
    self.loss_name, self.metric_set, self.rules, self.mle = loss_name, metric_set, tuple(rules), mle
    self.precision_scales, self.calibration = precision_scales, calibration
    self._scales: np.ndarray | None = None
    self._k = 0

  @classmethod
  def from_config(cls, config, **settings) -> EnsembleEvaluator:
    """The rules, MLE settings and calibration split of `config.ensemble` (configs/ensemble_synthetic.py)."""
    e = config.ensemble
    split = e.get("calibration_split", "")
    calibration = None
    if split:  # calibrated fusion: per-member precision scales fitted on another split
      per_host = max(1, config.eval_batch_size // jax.process_count())
      stream = {**from_config.data_config(config, "eval", batch_size=per_host, num_epochs=1), "split": split}
      calibration = (split, lambda: data.make_iterator(stream))
    return cls(**{"loss_name": from_config.variant_loss(config), "metric_set": config.metrics,
                  "rules": tuple(e.rules),
                  "mle": MLEOptions(float(e.mle_variance), int(e.mle_steps), float(e.mle_learning_rate)),
                  "calibration": calibration, **settings})

  def load(self, config, checkpoint, *, workdir=None, expect=None, allow_mismatch=False, allow_fallback=False,
           against="--config") -> protocol.LoadedModel:
    """The members named by `checkpoint` (K checkpoints separated by commas, shipped names 'synthetic:<name>'
    included), or 'best' / 'latest' (an int, a path) of one ensemble run, through `loader.load`; the settings of
    `protocol.WEIGHT_SETTINGS` from the members (all alike, else a ValueError)."""
    members = [c.strip() for c in checkpoint.split(",") if c.strip()]
    if len(members) == 1 and members[0] in ("best", "latest"):
      if not workdir:
        raise ValueError(f"--checkpoint={checkpoint} needs --workdir (the ensemble's training run)")
      paths, step = [workdir], members[0]
    else:
      paths, step = members, "best"
    variables, loaded = _load_members(paths, step, expect=dict(expect or {}), allow_mismatch=allow_mismatch,
                                      against=against, allow_fallback=allow_fallback)
    settings = {}
    for key in protocol.WEIGHT_SETTINGS:
      values = {repr(c.model_settings[key]) for c in loaded if key in c.model_settings}
      if len(values) > 1:
        raise ValueError(f"the members {members} were trained with and without model.{key}: not one model"
                         if key == "mask_input_confidence" else
                         f"the members {members} have different model.{key}: not one model")
      if values:
        settings[key] = next(c.model_settings[key] for c in loaded if key in c.model_settings)
    return protocol.LoadedModel(protocol.model_for(config, settings), variables, loaded[0].meta, loaded[0].identity)

  def prepare(self, model, variables, mesh) -> None:
    """The ensemble's size, and its precision scales: given, or fitted on the calibration split first."""
    k = ensemble_size(variables)
    scales = self.precision_scales
    if scales is None and self.calibration is not None:
      split, calibration_batches = self.calibration
      scales = fit_precision_scales(model, variables, calibration_batches(), loss_name=self.loss_name, mesh=mesh)
      print(f"precision scales fitted on split {split!r}: " + ", ".join(f"{s:.3g}" for s in scales), flush=True)
    if scales is not None:
      arr = np.asarray(scales, np.float32)
      if arr.shape != (k,) or not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"evaluate_ensemble: precision_scales must be {k} finite values > 0 (one per member), got "
                         f"{np.asarray(scales).tolist()}")
    self._k, self._scales = k, None if scales is None else np.asarray(scales)

  def step(self, model):
    fn = make_ensemble_eval_fn(model, self.loss_name, self.metric_set, self.rules, self.mle, self._scales is not None)
    scales = np.ones(self._k, np.float32) if self._scales is None else self._scales.astype(np.float32)
    return lambda variables, sparse, target: fn(variables, sparse, target, scales)

  def start(self) -> None:
    names = [f"member {m}" for m in range(self._k)] + list(self.rules)
    self._rows = evaluate_depth.ScoredRows(names + ([n + CALIBRATED for n in names] if self._scales is not None
                                                    else []))

  def update(self, rows, out, index):
    self._rows.update(out, rows["target"])

  def result(self) -> protocol.Result:
    if self._rows.num_images == 0:
      raise ValueError("evaluate_ensemble: the batches gave no images")
    probabilistic = self.loss_name in losses.PROBABILISTIC_LOSSES
    rows = {name: self._rows.row(name, ("ause_pncnn", "ause_gustafsson", "auce", "nll")) for name in self._rows.names}
    if not probabilistic:  # no calibrated sigma: AUSE from the confidence only
      for row in rows.values():
        row["auce"] = row["nll"] = None
    ms = protocol.get_metric_set(self.metric_set)
    scales = None if self._scales is None else self._scales.tolist()
    return protocol.Result(evaluator=self.name, rows=rows, units=ms.units, columns=ms.columns, header=self.header,
                           details={"precision_scales": self._scales},
                           report={"metric_set": self.metric_set, "precision_scales": scales})


protocol.register_evaluator("ensemble", EnsembleEvaluator)


def evaluate_ensemble(model, variables: PyTree, batches: Iterable[Mapping[str, np.ndarray]], *, loss_name: str,
                      metric_set: str = "kitti", rules: Sequence[str] = FUSION_RULES, mle: MLEOptions = MLEOptions(),
                      max_batches: int = -1, precision_scales: Sequence[float] | None = None
                      ) -> dict[str, dict[str, float]]:
  """`EnsembleEvaluator(...).run(model, variables, batches).rows`: every member and every fusion rule on `batches`
  (paper Table 3), in one call; print them with
  `pncnn_jax.evaluate.format_table(rows, metric_set, header="member / fusion")`."""
  evaluator = EnsembleEvaluator(loss_name=loss_name, metric_set=metric_set, rules=rules, mle=mle,
                                precision_scales=precision_scales)
  return evaluator.run(model, variables, batches, max_batches=max_batches).rows


def write_ensemble_eval(rows: dict[str, dict[str, float]], out_dir: pathlib.Path, metric_set: str) -> None:
  """<out_dir>/ensemble_eval.json (the rows' numbers) and ensemble_eval.md (`protocol.format_table`)."""
  out_dir.mkdir(parents=True, exist_ok=True)
  (out_dir / "ensemble_eval.json").write_text(json.dumps(rows, indent=2) + "\n")
  (out_dir / "ensemble_eval.md").write_text(protocol.format_table(rows, metric_set, header="member / fusion") + "\n")
