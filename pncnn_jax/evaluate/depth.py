"""Evaluation of a model on a split: error metrics, uncertainty (AUSE, AUCE, NLL), disturbed-point AUROC.

`run_evaluation` is what the training loop validates with and what `eval.py` reports with; it never builds the
training pipeline. Per image, the KITTI (mm, 1/km) or NYU (m) metrics of `pncnn_jax.metrics` are averaged over
the split (docs/SPEC.md §7.3); the per-pixel squared errors and confidences of all valid pixels are pooled for
AUSE (docs/SPEC.md §8). KITTI results also carry the benchmark's own score beside them,
`devkit_{mae,rmse,imae,irmse}` (`metrics.kitti_devkit_metrics`): the predictions rounded to the 16-bit PNG grid as
`pncnn_jax.inference.predict` writes them, missing depths filled from their row neighbours as the KITTI devkit does.

Uncertainty as a standard deviation in metres (used for AUCE, NLL and the "uncertainty" panels) follows from the
loss the model was trained with: sigma = 1/sqrt(precision), the precision being each loss's rule
(`losses.precision_of`: c for gaussian_nll, exp(c) for gaussian_nll_exp, c^2/2 for laplace_nll). For masked_l1 / l2
out.confidence is the propagated NConv confidence, not calibrated: AUSE ranks by it and AUCE / NLL are null.

On synthetic data the batches carry `disturbed` (LiDAR points off the visible surface); the AUROC of the input
confidence c0 for detecting them is reported: the probability that a disturbed point gets a lower c0 than a
clean one (Mann-Whitney, ties count 1/2), over all input points (sparse > 0).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import os
import pathlib
from typing import Any, Callable, Iterable, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from pncnn_jax import from_config, losses, viz
from pncnn_jax import metrics as metrics_lib
from pncnn_jax.checkpoints import identity as identity_lib
from pncnn_jax.checkpoints import loader
from pncnn_jax.data import io as data_io
from pncnn_jax.data import sparsify
from pncnn_jax.nn import models
from pncnn_jax.runtime import cli, run_files, sharding
from pncnn_jax.runtime.registry import Registry


def sigma_of(conf: np.ndarray, loss_name: str) -> np.ndarray | None:
  """Predicted standard deviation [m] (see module doc), or None for models without a calibrated sigma."""
  prec = losses.precision_of(np.asarray(conf), loss_name)
  return None if prec is None else metrics_lib.sigma_from_precision(prec)


@dataclasses.dataclass
class EvalResult:
  """What `run_evaluation` measured on a split.

  metrics: split means of the per-image error metrics (KITTI mm / 1/km, or NYU m) and `num_images`.
  uncertainty: ause_pncnn, ause_gustafsson, auce and nll (None without a calibrated sigma), num_pixels.
  auroc_disturbed: AUROC of -c0 for the disturbed input points (synthetic data only, else None).
  error_by_disturbed_distance: the pooled error binned by distance to the nearest disturbed input point
    (`metrics.ErrorByDistance`; with `error_by_distance` on batches with `disturbed`, else None).
  sparsification: the pNCNN-normalised curves (`metrics.Sparsification`) for the plot.
  panels: up to `num_panels` dicts of (H, W) arrays: sparse, input_confidence, depth, uncertainty, error, target.
  """

  metrics: dict[str, float]
  uncertainty: dict[str, Any]
  auroc_disturbed: float | None
  sparsification: Any
  sparsification_gustafsson: Any
  panels: list[dict[str, np.ndarray]]
  uncertainty_kind: str
  panel_names: list[str] = dataclasses.field(default_factory=list)  # the batches' `name` of each panel, if any
  # `metrics.ErrorByDistance.result()` against the disturbed input points (synthetic data only, else None)
  error_by_disturbed_distance: dict[str, Any] | None = None

  def summary(self) -> dict[str, Any]:
    """A flat JSON-able dict of every scalar."""
    out: dict[str, Any] = dict(self.metrics)
    out.update(self.uncertainty)
    if self.auroc_disturbed is not None:
      out["auroc_disturbed"] = self.auroc_disturbed
    return out


@dataclasses.dataclass(frozen=True)
class MetricSet:
  """How a config's `metrics` name is evaluated.

  A depth metric set gives `per_image(depth, target) -> {metric: (B,) array}` and `run_evaluation` does the rest;
  an extension's set (pncnn_jax.flow's 'flow') brings its own evaluation of a model, `run(model, variables,
  batches, *, loss_name, mesh, max_batches, num_panels)`, and of a checkpoint, `evaluate_checkpoint(config, workdir,
  checkpoint, output_dir)` (eval.py). `units`: the unit of each metric that has one ({'mae': 'mm', ...}), written
  next to the numbers (the validation rows of metrics.jsonl, the training log lines); `train_units`: those of the
  training batch errors (losses.get_batch_errors) of the models this set evaluates (the train rows of metrics.jsonl)."""
  per_image: Callable[[jax.Array, jax.Array], dict[str, jax.Array]] | None = None
  run: Callable[..., Any] | None = None
  evaluate_checkpoint: Callable[..., Any] | None = None
  units: Mapping[str, str] = dataclasses.field(default_factory=dict)
  train_units: Mapping[str, str] = dataclasses.field(default_factory=lambda: {"mae": "m", "rmse": "m"})


METRIC_SETS: Registry[MetricSet] = Registry("metric set")  # config.metrics (training.config_fields)


def register_metric_set(name: str, metric_set: MetricSet) -> None:
  """Registers a `config.metrics` name (extensions register theirs on import)."""
  METRIC_SETS.register(name, metric_set)


UNITS = {"kitti": {"mae": "mm", "rmse": "mm", "mse": "mm^2", "imae": "1/km", "irmse": "1/km", "delta1": "%",
                   "delta2": "%", "delta3": "%", "devkit_mae": "mm", "devkit_rmse": "mm", "devkit_imae": "1/km",
                   "devkit_irmse": "1/km"},
         "nyu": {"mae": "m", "rmse": "m", "mse": "m^2", "delta1": "%", "delta2": "%", "delta3": "%"}}
register_metric_set("kitti", MetricSet(per_image=metrics_lib.kitti_metrics, units=UNITS["kitti"]))  # docs/SPEC.md
register_metric_set("nyu", MetricSet(per_image=metrics_lib.nyu_metrics, units=UNITS["nyu"]))  # metres


def format_values(values: Mapping[str, Any], keys: Sequence[str], units: Mapping[str, str]) -> str:
  """'mae=1234 mm, rmse=2345 mm, ause_pncnn=0.05': the `keys` of `values` that are numbers, each with its unit from
  `units` (none for a unitless quantity), for the log lines of a training."""
  return ", ".join(f"{k}={values[k]:.4g}" + (f" {units[k]}" if k in units else "") for k in keys
                   if isinstance(values.get(k), (int, float)) and not isinstance(values.get(k), bool))


def get_metric_set(name: str) -> MetricSet:
  """`METRIC_SETS[name]`; a ValueError naming the valid metric sets otherwise."""
  if name not in METRIC_SETS:
    raise ValueError(f"metrics must be one of {sorted(METRIC_SETS)}, got {name!r}")
  return METRIC_SETS[name]


def make_eval_fn(model: models.PNCNN, metric_set: str):
  """jit(variables, sparse, target) -> (ModelOutput, per-image metrics), eval mode; None for a metric set that
  evaluates its models itself (an extension's, `MetricSet.run`). One function per (model, metric set): equal
  models (flax modules compare by their settings) share it and its compiled programs within a process, across
  validations, runs and evaluated checkpoints (a model that cannot be hashed gets a function of its own)."""
  try:
    hash(model)
  except TypeError:
    return _make_eval_fn.__wrapped__(model, metric_set)
  return _make_eval_fn(model, metric_set)


@functools.lru_cache(maxsize=16)
def _make_eval_fn(model: models.PNCNN, metric_set: str):
  metric_fn = get_metric_set(metric_set).per_image
  if metric_fn is None:
    return None

  @jax.jit
  def fn(variables, sparse, target):
    out = model.apply(variables, sparse, train=False)
    return out, metric_fn(out.depth, target)

  return fn


def batch_arrays(batch: Mapping[str, Any], index: int) -> tuple[np.ndarray, np.ndarray]:
  """(sparse, target) of an evaluation batch as float32, both (B, H, W, 1); a clear error names the batch."""
  sparse, target = np.asarray(batch["sparse"], np.float32), np.asarray(batch["target"], np.float32)
  if sparse.ndim != 4 or sparse.shape[-1] != 1 or sparse.shape != target.shape:
    raise ValueError(f"evaluation batch {index}: expected sparse and target of one shape (B, H, W, 1), got "
                     f"{sparse.shape} and {target.shape}")
  return sparse, target


def run_evaluation(model: models.PNCNN, variables: Mapping[str, Any], batches: Iterable[Mapping[str, np.ndarray]],
                   *, loss_name: str, metric_set: str = "kitti", mesh: Mesh | None = None, max_batches: int = -1,
                   num_panels: int = 0, eval_fn=None, progress: bool = False,
                   error_by_distance: bool = False) -> EvalResult:
  """Evaluates `model` with `variables` on `batches` (dicts with NHWC `sparse`, `target`, optional `disturbed`).

  Each batch is zero-padded to a multiple of the device count (padded rows are dropped again) and sharded over
  the mesh's 'data' axis; variables are replicated. With several hosts, each passes its own batches (its rows of
  each global batch) and every host gets the metrics of all of them.

  Args:
    model, variables: the network and its {'params', 'batch_stats'?}.
    batches: an iterable of this host's batches (e.g. `pncnn_jax.data.make_iterator` of an eval split).
    loss_name: the loss the model was trained with (decides sigma, see the module doc).
    metric_set: 'kitti' or 'nyu', or an extension's metric set with its own `MetricSet.run` (pncnn_jax.flow's
      'flow'), which this hands over to.
    mesh: device mesh (default: all devices).
    max_batches: stop after this many batches (-1: all).
    num_panels: keep the first `num_panels` images for qualitative panels.
    eval_fn: a `make_eval_fn` result to reuse (saves a compilation).
    progress: show a tqdm bar.
    error_by_distance: also bin the error by distance to the nearest disturbed input point (batches with
      `disturbed`: `metrics.ErrorByDistance`, a distance transform per image; off in the training loop's validation).
  """
  run = get_metric_set(metric_set).run
  if run is not None:  # an extension's own evaluation (pncnn_jax.flow: a FlowEvalResult)
    return run(model, variables, batches, loss_name=loss_name, mesh=mesh, max_batches=max_batches,
               num_panels=num_panels)
  mesh = sharding.make_mesh() if mesh is None else mesh
  eval_fn = eval_fn or make_eval_fn(model, metric_set)
  variables = sharding.replicate(variables, mesh)
  mean_acc, unc_acc = metrics_lib.MeanAccumulator(), metrics_lib.UncertaintyAccumulator()
  devkit_acc = metrics_lib.MeanAccumulator()
  has_sigma = loss_name in losses.PROBABILISTIC_LOSSES
  dist_scores: list[np.ndarray] = []
  dist_labels: list[np.ndarray] = []
  by_distance = metrics_lib.ErrorByDistance() if error_by_distance else None
  panels: list[dict[str, np.ndarray]] = []
  panel_names: list[str] = []
  num_images = 0
  it = iter(batches)
  if progress:
    from tqdm.auto import tqdm  # pylint: disable=g-import-not-at-top
    it = tqdm(it, unit="batch", desc="eval", dynamic_ncols=True)
  for i, batch in enumerate(sharding.synced(it)):  # several hosts: until every host's batches ran out
    if 0 <= max_batches <= i:
      break
    sparse, target = batch_arrays(batch, i)
    disturbed = [np.asarray(batch["disturbed"], bool)] if "disturbed" in batch else []  # synthetic scenes
    arrs, keep = sharding.shard_padded((sparse, target, *disturbed), mesh)
    out, per_image = sharding.to_host(eval_fn(variables, *arrs[:2]))
    if jax.process_count() > 1:  # every host's rows, each padded (keep says which hold data)
      sparse, target, *disturbed = (np.asarray(sharding.to_host(a))[keep] for a in arrs)
    depth, conf = np.asarray(out.depth)[keep], np.asarray(out.confidence)[keep]
    if not np.isfinite(depth).all():  # a diverged model: say so, not what the AUSE makes of NaN
      raise FloatingPointError(f"evaluation batch {i}: {int((~np.isfinite(depth)).sum())} of {depth.size} predicted "
                               "depths are not finite (the model's weights have diverged)")
    c0 = np.asarray(out.input_confidence)[keep]
    mean_acc.update({k: np.asarray(v)[keep] for k, v in per_image.items()})
    if metric_set == "kitti":
      devkit_acc.update(metrics_lib.kitti_devkit_metrics(depth, target, quantize=True))
    prec = losses.precision_of(conf, loss_name)
    unc_acc.update(depth, target, conf if prec is None else prec.astype(np.float32))
    if disturbed:
      pts = sparse > 0
      dist_scores.append(-c0[pts].astype(np.float64))
      dist_labels.append(disturbed[0][pts])
      if by_distance is not None:  # the distances also to points deleted from the input (the oracle)
        by_distance.update(depth, target, disturbed[0])
    for j in range(depth.shape[0]):
      if len(panels) >= num_panels:
        break
      sig = sigma_of(conf[j], loss_name)
      valid = target[j, ..., 0] > 0
      panels.append({
          "sparse": sparse[j, ..., 0], "input_confidence": c0[j, ..., 0], "depth": depth[j, ..., 0],
          "uncertainty": (sig if sig is not None else conf[j])[..., 0],
          "error": np.where(valid, np.abs(depth[j, ..., 0] - target[j, ..., 0]), np.nan),
          "target": target[j, ..., 0],
      })
      if "name" in batch and jax.process_count() == 1:
        name = np.asarray(batch["name"])[j]
        panel_names.append(name.decode() if isinstance(name, bytes) else str(name))
    num_images += depth.shape[0]
  if num_images == 0:
    raise ValueError("evaluation: the split gave no images")
  mres = mean_acc.result()
  if metric_set == "kitti":
    mres.update(devkit_acc.result())
  mres["num_images"] = num_images
  ures = unc_acc.result()
  unc = {"ause_pncnn": ures["ause_pncnn"], "ause_gustafsson": ures["ause_gustafsson"],
         "auce": ures["auce"] if has_sigma else None, "nll": ures["nll"] if has_sigma else None,
         "num_pixels": ures["num_pixels"]}
  au = None
  if dist_scores:
    au = metrics_lib.auroc(np.concatenate(dist_scores), np.concatenate(dist_labels))
  return EvalResult(metrics=mres, uncertainty=unc, auroc_disturbed=au,
                    sparsification=ures["sparsification_pncnn"],
                    sparsification_gustafsson=ures["sparsification_gustafsson"], panels=panels,
                    uncertainty_kind="sigma [m]" if has_sigma else "confidence (uncalibrated)",
                    panel_names=panel_names if len(panel_names) == len(panels) else [],
                    error_by_disturbed_distance=(by_distance.result() if by_distance is not None and dist_scores
                                                 else None))


# --------------------------------------------------------------------------------------------------------------
# KITTI-layout PNG pairs (e.g. ../shared/data/kitti_depth_mini), without TFDS


def kitti_pairs(root: str | pathlib.Path) -> list[tuple[pathlib.Path, pathlib.Path]]:
  """(velodyne_raw PNG, groundtruth PNG) pairs under a KITTI depth-completion tree (docs/SPEC.md §10.1)."""
  root = pathlib.Path(root)
  if not root.is_dir():
    raise FileNotFoundError(f"--pairs_dir {root} is not a directory")
  pairs = []
  for s in sorted(root.glob("**/proj_depth/velodyne_raw/**/*.png")):
    parts = list(s.parts)
    i = len(parts) - 1 - parts[::-1].index("velodyne_raw")
    g = pathlib.Path(*parts[:i], "groundtruth", *parts[i + 1:])
    if not g.is_file():
      raise FileNotFoundError(f"{s}: no ground truth at {g}")
    pairs.append((s, g))
  if not pairs:
    raise FileNotFoundError(f"no */proj_depth/velodyne_raw/*/*.png under {root}")
  return pairs


def kitti_pair_batches(root: str | pathlib.Path, crop_hw: tuple[int, int] = (352, 1216)):
  """Yields batches of one image: the bottom `crop_hw` rows, centred columns (val_selection_cropped style)."""
  for s, g in kitti_pairs(root):
    sparse = data_io.read_kitti_depth(s)
    target = data_io.read_kitti_depth(g, expected_shape=sparse.shape)
    top, left = sparsify.crop_offsets(*sparse.shape, *crop_hw, "bottom")
    win = np.s_[top:top + crop_hw[0], left:left + crop_hw[1]]
    name = str(s.relative_to(root))
    yield {"sparse": sparse[win][None, ..., None], "target": target[win][None, ..., None],
           "name": np.asarray([name])}


# --------------------------------------------------------------------------------------------------------------
# Reports


TABLE_ORDER = ("mae", "rmse", "imae", "irmse", "absrel", "delta1", "delta2", "delta3", "ause_pncnn",
               "ause_gustafsson", "auce", "nll", "auroc_disturbed", "devkit_mae", "devkit_rmse", "num_images")
def format_table(rows: Mapping[str, Mapping[str, Any]], metric_set: str = "kitti", *,
                 keys: Sequence[str] | None = None, header: str = "model") -> str:
  """A markdown table, one row per named result (a model, an ensemble member or a fusion rule), in the units of
  `metric_set`. `keys`: the columns (default: those of TABLE_ORDER that some row has)."""
  if keys is None:
    keys = [k for k in TABLE_ORDER if any(k in r for r in rows.values())]
  return run_files.markdown_table(rows, list(keys), UNITS[metric_set], header)


REPORT_FILES = ("results.json", "results.csv", "results.md", "sparsification.png", "panels.png")


def write_reports(result: EvalResult, outdir: str | pathlib.Path, name: str, metric_set: str,
                  extra: Mapping[str, Any] | None = None) -> dict[str, str]:
  """Writes `<outdir>/{results.json, results.csv, results.md, sparsification.png, panels.png}`, each atomically."""
  outdir = pathlib.Path(outdir)
  outdir.mkdir(parents=True, exist_ok=True)
  summ = result.summary()
  paths = {k: str(outdir / f) for k, f in (("json", "results.json"), ("csv", "results.csv"),
                                            ("md", "results.md"), ("sparsification", "sparsification.png"),
                                            ("panels", "panels.png"))}
  payload = {"name": name, "metric_set": metric_set, "units": UNITS[metric_set],
             "uncertainty_kind": result.uncertainty_kind, "results": summ,
             "sparsification": {"fractions": result.sparsification.fractions.tolist(),
                                "oracle": result.sparsification.oracle.tolist(),
                                "model": result.sparsification.model.tolist()},
             **(dict(extra) if extra else {})}
  text = json.dumps(strict_json(payload), indent=2, allow_nan=False) + "\n"
  run_files.atomic_write(paths["json"], lambda t: t.write_text(text))

  def write_csv(tmp):
    with open(tmp, "w", newline="", encoding="utf-8") as f:
      w = csv.writer(f)
      w.writerow(["name"] + list(summ))
      w.writerow([name] + ["" if v is None else v for v in summ.values()])

  run_files.atomic_write(paths["csv"], write_csv)
  run_files.atomic_write(paths["md"], lambda t: t.write_text(format_table({name: summ}, metric_set) + "\n"))
  gustafsson = {name: result.sparsification_gustafsson} if result.sparsification_gustafsson is not None else None
  run_files.atomic_write(paths["sparsification"], lambda t: viz.sparsification_plot(
      {name: result.sparsification}, t, gustafsson=gustafsson,
      title=f"Sparsification curves of {name} (lower is better; AUSE = area between model and oracle)"))
  if result.panels:
    run_files.atomic_write(paths["panels"], lambda t: viz.panels_figure(
        result.panels, t, uncertainty_label=result.uncertainty_kind, model_name=name,
        row_labels=[f"image {n}" if n.isdigit() else n for n in result.panel_names] or None))
  else:
    del paths["panels"]
    (outdir / "panels.png").unlink(missing_ok=True)  # an earlier evaluation's, not this one's
  return paths


def strict_json(o: Any) -> Any:
  """`o` as strict JSON values (RFC 8259 has no Infinity or NaN): numpy scalars and arrays as Python numbers and
  lists, NaN as null, +-inf as the strings "inf" / "-inf" (as metrics.jsonl), other objects as their str."""
  if isinstance(o, np.ndarray):
    o = o.tolist()
  if isinstance(o, np.generic):
    o = o.item()
  if isinstance(o, Mapping):
    return {str(k): strict_json(v) for k, v in o.items()}
  if isinstance(o, (list, tuple)):
    return [strict_json(v) for v in o]
  if isinstance(o, float) and not math.isfinite(o):
    return None if math.isnan(o) else ("inf" if o > 0 else "-inf")
  if o is None or isinstance(o, (bool, int, float, str)):
    return o
  return str(o)


# --------------------------------------------------------------------------------------------------------------
# eval.py


def evaluate_checkpoint(config, workdir: str | None, checkpoint: str = "best", *, pairs_dir: str | None = None,
                        output_dir: str | None = None, progress: bool | None = None,
                        allow_mismatch: bool = False, allow_fallback: bool = False, overwrite: bool = False
                        ) -> tuple[EvalResult, dict[str, str]]:
  """What `eval.py` does: loads the checkpoint, evaluates the config's eval split (or KITTI PNG pairs under
  `pairs_dir`), prints the table and writes the reports to `output_dir` (default `<workdir>/eval_<checkpoint>`).
  The checkpoint (any kind, `loader.load`, shipped names 'synthetic:<name>' included) must have been trained as
  the config says (`config.identity`: dataset, or 'kitti_depth' with `pairs_dir`; variant; loss; input scaling),
  else `config.IdentityMismatchError` unless `allow_mismatch`. The model is the config's, except
  `mask_input_confidence`, which is part of what the weights were trained as and is taken from the checkpoint when
  it records it. `allow_fallback`: a step of a training run that cannot be restored is replaced by the newest that
  can, with a warning (`loader.load`); the report records the step evaluated.

  The output folder is this evaluation's while it runs (`run_files.WorkdirLock`: a second eval.py, predict or bag
  command on it stops at once, naming it) and records its writer in pncnn_writer.json (the checkpoint, its step and
  weights' sha256, the data and metric settings): reports of another checkpoint or other settings there are
  refused in one line (`run_files.OutputOwnedError`), or replaced with `overwrite`. An empty `output_dir` or
  `workdir` ("", an unset shell variable) is a ValueError. `progress`: a progress bar on stderr (None: only when
  stderr is a terminal; eval.py --progress auto|on|off)."""
  run_files.require_path(output_dir, "--output")
  run_files.require_path(workdir, "--workdir")
  if not pairs_dir:
    from_config.check_data(config, training=False)  # DatasetNotFoundError before the checkpoint loads
  loss_name = from_config.variant_loss(config)
  tag = (checkpoint if checkpoint in ("best", "latest")
         else pathlib.Path(checkpoint.replace(":", "_")).name.split(".")[0])
  if output_dir is None:
    if not workdir:
      raise ValueError("give --workdir (or an output directory) for the reports")
    output_dir = str(pathlib.Path(workdir) / f"eval_{tag}")
  run_files.check_writable(output_dir)  # before the checkpoint loads and the evaluation runs
  out = pathlib.Path(os.path.abspath(output_dir))
  top = out  # the outermost folder this call creates (out, or an ancestor: <workdir>/eval_best of a new workdir)
  while not top.parent.exists():
    top = top.parent
  created = not out.exists()
  out.mkdir(parents=True, exist_ok=True)
  lock = run_files.WorkdirLock(out, flag="--output", what="evaluation") if jax.process_index() == 0 else None
  try:
    if lock is not None:
      lock.acquire()
    progress = cli.progress_enabled("auto") if progress is None else progress  # None: on a terminal only
    return _evaluate_into(config, workdir, checkpoint, out, tag, loss_name, pairs_dir=pairs_dir, progress=progress,
                          allow_mismatch=allow_mismatch, allow_fallback=allow_fallback, overwrite=overwrite,
                          claim=lock is not None)
  except BaseException:
    if lock is not None:
      lock.release()
      lock = None
    if created:  # a refused evaluation leaves no folder behind, nor the parents it made
      for folder in (out, *out.parents):
        if any(folder.iterdir()):
          break
        folder.rmdir()
        if folder == top:
          break
    raise
  finally:
    if lock is not None:
      lock.release()


def _evaluate_into(config, workdir, checkpoint, out: pathlib.Path, tag: str, loss_name: str, *, pairs_dir,
                   progress: bool, allow_mismatch: bool, allow_fallback: bool, overwrite: bool, claim: bool
                   ) -> tuple[EvalResult, dict[str, str]]:
  """`evaluate_checkpoint` into the locked folder `out`."""
  expect = identity_lib.identity(config)
  if pairs_dir:
    expect["dataset"] = "kitti_depth"
  ckpt = loader.load(checkpoint, workdir=workdir, variant=config.variant, expect=expect,
                     allow_mismatch=allow_mismatch, against="--config with --pairs_dir" if pairs_dir else "--config",
                     allow_fallback=allow_fallback)
  variables, meta = ckpt.variables, ckpt.meta
  if claim:  # which checkpoint (its weights) and which evaluation wrote the reports
    data = pairs_dir or f"{config.data.dataset}/{config.data.eval_split}"
    record = {"command": "eval.py", "checkpoint": checkpoint,
              "model": {"weights_sha256": run_files.weights_digest(variables), "step": meta.get("step")},
              "settings": {"data": data, "metrics": config.metrics, "num_eval_batches": config.num_eval_batches,
                           "eval_crop": [config.data.eval_crop, config.data.eval_crop_height,
                                         config.data.eval_crop_width], "variant": config.variant}}
    run_files.claim_output(out, record, overwrite=overwrite,
                           has_outputs=any((out / f).exists() for f in REPORT_FILES))
  settings = from_config.model_settings(config)
  if "mask_input_confidence" in ckpt.model_settings:
    settings["mask_input_confidence"] = bool(ckpt.model_settings["mask_input_confidence"])
  model = from_config.build_model({"variant": config.variant, "model": settings})
  if pairs_dir:
    batches = kitti_pair_batches(pairs_dir, (config.data.eval_crop_height, config.data.eval_crop_width))
  else:
    batches = from_config.eval_iterator(config)
  result = run_evaluation(model, variables, batches, loss_name=loss_name, metric_set=config.metrics,
                          max_batches=config.num_eval_batches, num_panels=config.num_panels, progress=progress)
  name = f"{config.variant}@{tag}"
  extra = {"checkpoint": checkpoint, "checkpoint_step": meta.get("step"), "variant": config.variant,
           "loss": loss_name, "data": pairs_dir or f"{config.data.dataset}/{config.data.eval_split}",
           "checkpoint_identity": ckpt.identity, "identity_mismatch_allowed": bool(allow_mismatch)}
  paths = write_reports(result, out, name, config.metrics, extra)
  if jax.process_index() == 0:
    print(format_table({name: result.summary()}, config.metrics))
    print("wrote " + ", ".join(paths.values()))
  return result, paths
