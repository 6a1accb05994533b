"""The depth evaluator ('depth'): error metrics, uncertainty (AUSE, AUCE, NLL), disturbed-point AUROC of a model.

`DepthEvaluator` is what the training loop validates a depth model with and what `eval.py` reports with
(`pncnn_jax.evaluate.protocol`: the shared batch loop; `run_evaluation` is its one-call form); it never builds the
training pipeline. It also registers the depth metric sets, 'kitti' and 'nyu' (`protocol.METRIC_SETS`). Per image,
the KITTI (mm, 1/km) or NYU (m) metrics of `pncnn_jax.metrics` are averaged over the split (docs/SPEC.md §7.3); the
per-pixel squared errors and confidences of all valid pixels are pooled for AUSE (docs/SPEC.md §8). KITTI results
also carry the benchmark's own score beside them, `devkit_{mae,rmse,imae,irmse}` (`metrics.kitti_devkit_metrics`):
the predictions rounded to the 16-bit PNG grid as `pncnn_jax.inference.predict` writes them, missing depths filled
from their row neighbours as the KITTI devkit does.

Uncertainty as a standard deviation in metres (used for AUCE, NLL and the "uncertainty" panels) follows from the
loss the model was trained with: sigma = 1/sqrt(precision), the precision being each loss's rule
(`losses.precision_of`: c for gaussian_nll, exp(c) for gaussian_nll_exp, c^2/2 for laplace_nll). For masked_l1 / l2
out.confidence is the propagated NConv confidence, not calibrated: AUSE ranks by it and AUCE / NLL are null.

On synthetic data the batches carry `disturbed` (LiDAR points off the visible surface); the AUROC of the input
confidence c0 for detecting them is reported: the probability that a disturbed point gets a lower c0 than a
clean one (Mann-Whitney, ties count 1/2), over all input points (sparse > 0).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from pncnn_jax import from_config, losses, viz
from pncnn_jax import metrics as metrics_lib
from pncnn_jax.evaluate import protocol
from pncnn_jax.nn import models


def sigma_of(conf: np.ndarray, loss_name: str) -> np.ndarray | None:
  """Predicted standard deviation [m] (see module doc), or None for models without a calibrated sigma."""
  prec = losses.precision_of(np.asarray(conf), loss_name)
  return None if prec is None else metrics_lib.sigma_from_precision(prec)


UNITS = {"kitti": {"mae": "mm", "rmse": "mm", "mse": "mm^2", "imae": "1/km", "irmse": "1/km", "delta1": "%",
                   "delta2": "%", "delta3": "%", "devkit_mae": "mm", "devkit_rmse": "mm", "devkit_imae": "1/km",
                   "devkit_irmse": "1/km"},
         "nyu": {"mae": "m", "rmse": "m", "mse": "m^2", "delta1": "%", "delta2": "%", "delta3": "%"}}
TABLE_ORDER = ("mae", "rmse", "imae", "irmse", "absrel", "delta1", "delta2", "delta3", "ause_pncnn",
               "ause_gustafsson", "auce", "nll", "auroc_disturbed", "devkit_mae", "devkit_rmse", "num_images")
protocol.register_metric_set("kitti", protocol.MetricSet(  # docs/SPEC.md
    "depth", per_image=metrics_lib.kitti_metrics, units=UNITS["kitti"], columns=TABLE_ORDER))
protocol.register_metric_set("nyu", protocol.MetricSet(  # metres
    "depth", per_image=metrics_lib.nyu_metrics, units=UNITS["nyu"], columns=TABLE_ORDER))


def make_eval_fn(model: models.PNCNN, metric_set: str):
  """jit(variables, sparse, target) -> (ModelOutput, per-image metrics), eval mode. One function per (model, metric
  set): equal models (flax modules compare by their settings) share it and its compiled programs within a process,
  across validations, runs and evaluated checkpoints (a model that cannot be hashed gets a function of its own)."""
  try:
    hash(model)
  except TypeError:
    return _make_eval_fn.__wrapped__(model, metric_set)
  return _make_eval_fn(model, metric_set)


@functools.lru_cache(maxsize=16)
def _make_eval_fn(model: models.PNCNN, metric_set: str):
  metric_fn = protocol.get_metric_set(metric_set).per_image
  if metric_fn is None:
    raise ValueError(f"metric set {metric_set!r} scores no depth maps (its evaluator is "
                     f"{protocol.get_metric_set(metric_set).evaluator!r})")

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


class PairEvaluator(protocol.Evaluator):
  """Base of the evaluators whose device step reads (B, H, W, 1) `sparse` and `target` [m] (`batch_arrays`):
  the ensembles' and the baselines' predictive."""

  step_keys = ("sparse", "target")

  def inputs(self, batch, index):
    sparse, target = batch_arrays(batch, index)
    return {"sparse": sparse, "target": target}


class ScoredRows:
  """The accumulators of an evaluator that scores several depth predictions of each batch (ensemble members,
  fusion rules, ensemble sizes): per row name, the per-image metric means and the pooled uncertainty metrics.

  `update(out, target)` takes out[name] = (depth (B, H, W, 1) [m], confidence or precision (B, H, W, 1),
  per-image metrics {key: (B,)}) for every name; `row(name, keys)` is that row's metric means, the uncertainty
  metrics `keys` of `metrics.UncertaintyAccumulator.result` and num_images.
  """

  def __init__(self, names):
    self.names = list(names)
    self._means = {n: metrics_lib.MeanAccumulator() for n in self.names}
    self._uncs = {n: metrics_lib.UncertaintyAccumulator() for n in self.names}
    self.num_images = 0

  def update(self, out: Mapping[Any, Any], target: np.ndarray) -> None:
    for name in self.names:
      depth, confidence, per_image = out[name]
      self._means[name].update(per_image)
      self._uncs[name].update(depth, target, confidence)
    self.num_images += target.shape[0]

  def row(self, name, keys) -> dict[str, Any]:
    u = self._uncs[name].result()
    return {**self._means[name].result(), **{k: u[k] for k in keys}, "num_images": self.num_images}


class DepthEvaluator(protocol.Evaluator):
  """One depth model on batches with NHWC `sparse`, `target` and, on synthetic scenes, `disturbed` (module doc).

  Settings:
    loss_name: the loss the model was trained with (decides sigma, see the module doc).
    metric_set: 'kitti' or 'nyu' (a depth metric set of `protocol.METRIC_SETS`).
    num_panels: keep the first `num_panels` images for qualitative panels.
    error_by_distance: also bin the error by distance to the nearest disturbed input point (batches with
      `disturbed`: `metrics.ErrorByDistance`, a distance transform per image; off in the training loop's validation).
    input_points: also keep every input point's c0, depth [m] and `disturbed` label, and the sum and count of c0
      off the points (the c0 statistics of `pncnn_jax.experiments.evaluate_runs`).
    eval_fn: a `make_eval_fn` result to reuse (saves a compilation).

  Its result has one row (`summary()`: the split means of the per-image error metrics, the KITTI devkit's scores,
  num_images, ause_pncnn, ause_gustafsson, auce and nll (None without a calibrated sigma), num_pixels,
  auroc_disturbed on synthetic data) and the details
    metrics, uncertainty: the row's error metrics (with num_images) and uncertainty figures apart;
    auroc_disturbed: AUROC of -c0 for the disturbed input points (synthetic data only, else None);
    sparsification, sparsification_gustafsson: the curves (`metrics.Sparsification`) for the plot;
    ause_shared_max, ause_none: the pNCNN ranking's AUSE in the other normalisations (the second in m; docs/SPEC.md
      §8.2a); calibration: the AUCE's `uncertainty.Calibration` (coverage per level; None without a sigma);
    panels: up to `num_panels` dicts of (H, W) arrays: sparse, input_confidence, depth, uncertainty, error, target;
    panel_names: the batches' `name` of each panel, if any; uncertainty_kind: what the panels' uncertainty is;
    error_by_disturbed_distance: `metrics.ErrorByDistance.result()` (with `error_by_distance` on batches with
      `disturbed`, else None); input_points (with `input_points`).
  Its figures: sparsification.png, and panels.png when it kept panels.
  """

  header = "model"
  files = ("sparsification.png", "panels.png")
  step_keys = ("sparse", "target")

  def __init__(self, *, loss_name: str, metric_set: str = "kitti", num_panels: int = 0,
               error_by_distance: bool = False, input_points: bool = False, eval_fn=None):
    if protocol.get_metric_set(metric_set).per_image is None:
      raise ValueError(f"metric set {metric_set!r} is not a depth metric set: the 'depth' evaluator scores "
                       "depth maps per image (kitti, nyu)")
    self.loss_name, self.metric_set, self.num_panels = loss_name, metric_set, int(num_panels)
    self.error_by_distance, self.input_points, self.eval_fn = error_by_distance, input_points, eval_fn

  @classmethod
  def from_config(cls, config, **settings) -> DepthEvaluator:
    return cls(**{"loss_name": from_config.variant_loss(config), "metric_set": config.metrics,
                  "num_panels": config.num_panels, **settings})

  def inputs(self, batch, index):
    sparse, target = batch_arrays(batch, index)
    out = {"sparse": sparse, "target": target}
    if "disturbed" in batch:  # synthetic scenes
      out["disturbed"] = np.asarray(batch["disturbed"], bool)
    return out

  def step(self, model):
    return self.eval_fn or make_eval_fn(model, self.metric_set)

  def start(self) -> None:
    self._mean, self._unc = metrics_lib.MeanAccumulator(), metrics_lib.UncertaintyAccumulator()
    self._devkit = metrics_lib.MeanAccumulator()
    self._scores: list[np.ndarray] = []
    self._labels: list[np.ndarray] = []
    self._by_distance = metrics_lib.ErrorByDistance() if self.error_by_distance else None
    self._points: dict[str, list] = {"c0": [], "disturbed": [], "depth": [], "c0_empty_sum": [], "num_empty": []}
    self._panels: list[dict[str, np.ndarray]] = []
    self._panel_names: list[str] = []
    self._num_images = 0

  def update(self, rows, out, index):
    out, per_image = out
    sparse, target = rows["sparse"], rows["target"]
    disturbed = rows.get("disturbed")
    depth, conf = np.asarray(out.depth), np.asarray(out.confidence)
    if not np.isfinite(depth).all():  # a diverged model: say so, not what the AUSE makes of NaN
      raise FloatingPointError(f"evaluation batch {index}: {int((~np.isfinite(depth)).sum())} of {depth.size} "
                               "predicted depths are not finite (the model's weights have diverged)")
    c0 = np.asarray(out.input_confidence)
    self._mean.update({k: np.asarray(v) for k, v in per_image.items()})
    if self.metric_set == "kitti":
      self._devkit.update(metrics_lib.kitti_devkit_metrics(depth, target, quantize=True))
    prec = losses.precision_of(conf, self.loss_name)
    self._unc.update(depth, target, conf if prec is None else prec.astype(np.float32))
    if disturbed is not None:
      pts = sparse > 0
      self._scores.append(-c0[pts].astype(np.float64))
      self._labels.append(disturbed[pts])
      if self._by_distance is not None:  # the distances also to points deleted from the input (the oracle)
        self._by_distance.update(depth, target, disturbed)
    if self.input_points:
      pts = sparse > 0
      self._points["c0"].append(c0[pts])
      self._points["depth"].append(sparse[pts])
      if disturbed is not None:
        self._points["disturbed"].append(disturbed[pts])
      self._points["c0_empty_sum"].append(float(c0[~pts].sum(dtype=np.float64)))
      self._points["num_empty"].append(int((~pts).sum()))
    for j in range(depth.shape[0]):
      if len(self._panels) >= self.num_panels:
        break
      sig = sigma_of(conf[j], self.loss_name)
      valid = target[j, ..., 0] > 0
      self._panels.append({
          "sparse": sparse[j, ..., 0], "input_confidence": c0[j, ..., 0], "depth": depth[j, ..., 0],
          "uncertainty": (sig if sig is not None else conf[j])[..., 0],
          "error": np.where(valid, np.abs(depth[j, ..., 0] - target[j, ..., 0]), np.nan),
          "target": target[j, ..., 0],
      })
      if "name" in rows:  # one host: the batch's image names
        name = np.asarray(rows["name"])[j]
        self._panel_names.append(name.decode() if isinstance(name, bytes) else str(name))
    self._num_images += depth.shape[0]

  def result(self) -> protocol.Result:
    if self._num_images == 0:
      raise ValueError("evaluation: the split gave no images")
    has_sigma = self.loss_name in losses.PROBABILISTIC_LOSSES
    mres = self._mean.result()
    if self.metric_set == "kitti":
      mres.update(self._devkit.result())
    mres["num_images"] = self._num_images
    ures = self._unc.result()
    unc = {"ause_pncnn": ures["ause_pncnn"], "ause_gustafsson": ures["ause_gustafsson"],
           "auce": ures["auce"] if has_sigma else None, "nll": ures["nll"] if has_sigma else None,
           "num_pixels": ures["num_pixels"]}
    au = None
    if self._scores:
      au = metrics_lib.auroc(np.concatenate(self._scores), np.concatenate(self._labels))
    row = {**mres, **unc, **({"auroc_disturbed": au} if au is not None else {})}
    sp, sp_g = ures["sparsification_pncnn"], ures["sparsification_gustafsson"]
    kind = "sigma [m]" if has_sigma else "confidence (uncalibrated)"
    panels, names = self._panels, self._panel_names if len(self._panel_names) == len(self._panels) else []
    details = {"metrics": mres, "uncertainty": unc, "auroc_disturbed": au, "sparsification": sp,
               "sparsification_gustafsson": sp_g, "panels": panels, "panel_names": names, "uncertainty_kind": kind,
               # the pNCNN ranking's AUSE in the other normalisations [-, m] and the AUCE's coverage curve
               "ause_shared_max": ures["ause_shared_max"], "ause_none": ures["ause_none"],
               "calibration": ures["calibration"] if has_sigma else None,
               "error_by_disturbed_distance": (self._by_distance.result() if self._by_distance is not None
                                               and self._scores else None)}
    if self.input_points:
      details["input_points"] = {
          "c0": np.concatenate(self._points["c0"]), "depth": np.concatenate(self._points["depth"]),
          "disturbed": np.concatenate(self._points["disturbed"]) if self._points["disturbed"] else None,
          "c0_empty_sum": self._points["c0_empty_sum"], "num_empty": self._points["num_empty"]}

    def sparsification_png(path, name):
      gustafsson = {name: sp_g} if sp_g is not None else None
      viz.sparsification_plot({name: sp}, path, gustafsson=gustafsson,
                              title=f"Sparsification curves of {name} (lower is better; AUSE = area between model "
                                    "and oracle)")

    def panels_png(path, name):
      viz.panels_figure(panels, path, uncertainty_label=kind, model_name=name,
                        row_labels=[f"image {n}" if n.isdigit() else n for n in names] or None)

    return protocol.Result(
        evaluator=self.name, rows={"model": row}, units=UNITS[self.metric_set], columns=TABLE_ORDER, details=details,
        report={"metric_set": self.metric_set, "uncertainty_kind": kind,
                "sparsification": {"fractions": sp.fractions.tolist(), "oracle": sp.oracle.tolist(),
                                   "model": sp.model.tolist()}},
        figures={"sparsification": ("sparsification.png", sparsification_png),
                 "panels": ("panels.png", panels_png if panels else None)})


protocol.register_evaluator("depth", DepthEvaluator)


def run_evaluation(model: models.PNCNN, variables: Mapping[str, Any], batches: Iterable[Mapping[str, np.ndarray]],
                   *, loss_name: str, metric_set: str = "kitti", mesh: Mesh | None = None, max_batches: int = -1,
                   num_panels: int = 0, eval_fn=None, progress: bool = False,
                   error_by_distance: bool = False) -> protocol.Result:
  """`DepthEvaluator(...).run(model, variables, batches, ...)`: one depth model on `batches` (dicts with NHWC
  `sparse`, `target`, optional `disturbed`), in one call; the settings as `DepthEvaluator`'s, the loop's
  (`mesh`, `max_batches`, `progress`) as `protocol.evaluate_batches`'s. Returns the evaluator's `Result`."""
  evaluator = DepthEvaluator(loss_name=loss_name, metric_set=metric_set, num_panels=num_panels,
                             error_by_distance=error_by_distance, eval_fn=eval_fn)
  return evaluator.run(model, variables, batches, mesh=mesh, max_batches=max_batches, progress=progress)
