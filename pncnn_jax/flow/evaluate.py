"""Evaluation of the sparse-flow models (`pncnn_jax.flow`) and of the baselines, and `eval.py` for flow configs.

`run_flow_evaluation(predict, batches)` is what the training loop validates a flow model with and what the flow
experiment reports with. `predict(batch) -> FlowOutput` (numpy fields) is a trained model (`model_predictor`),
the same model with the failed tracks deleted from its input (`oracle_predictor`: what a perfect input
confidence would give), or the classical normalized convolution with a fixed Gaussian applicability and binary
confidence (`gaussian_nc_predictor`: interpolation of every track, no learning). The metrics are those of
`pncnn_jax.flow.metrics`: EPE and outliers per image, AUSE on EPE over the split's pixels, and the AUROC of a low
input confidence c0 for the failed tracks (the `corrupted` label of `pncnn_jax.flow.dataset`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
from typing import Any, Callable, Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from pncnn_jax import from_config, losses
from pncnn_jax.checkpoints import manager
from pncnn_jax.flow import dataset as flow_dataset
from pncnn_jax.flow import metrics as flow_metrics
from pncnn_jax.flow import model as flow_model
from pncnn_jax.flow import viz as flow_viz
from pncnn_jax.nn import layers
from pncnn_jax.runtime import run_files, sharding

Predictor = Callable[[Mapping[str, np.ndarray]], flow_model.FlowOutput]
UNITS = {"epe": "px", "rmse": "px", "outliers": "%", "track_epe": "px", "nll": "nats"}
TABLE_ORDER = ("epe", "rmse", "outliers", "ause_epe", "nll", "auroc_corrupted", "auroc_gross", "auroc_aperture",
               "auroc_swap", "auroc_reflection", "c0_corrupted", "c0_clean", "num_images")


@dataclasses.dataclass
class FlowEvalResult:
  """What `run_flow_evaluation` measured: `metrics` (scalars, `FlowAccumulator.result`), the AUSE curves and up
  to `num_panels` panel dicts for `flow_viz.flow_panels`."""

  metrics: dict[str, Any]
  sparsification: flow_metrics.EpeSparsification
  panels: list[dict[str, np.ndarray]]

  def summary(self) -> dict[str, Any]:
    """A flat JSON-able dict of every scalar (`rmse` is the RMS end-point error, which picks the best checkpoint)."""
    return dict(self.metrics)


@functools.lru_cache(maxsize=16)
def _apply_fn(model: flow_model.FlowPNCNN):
  """One jitted eval-mode apply per model (reused across validations: no recompilation)."""
  return jax.jit(lambda v, s: model.apply(v, s, train=False))


def model_predictor(model: flow_model.FlowPNCNN, variables: Mapping[str, Any], mesh: Mesh | None = None) -> Predictor:
  """`predict(batch)` of a flow model in eval mode, jitted once, data-parallel over `mesh` (padded batches)."""
  mesh = sharding.make_mesh() if mesh is None else mesh
  variables = sharding.replicate(variables, mesh)
  fn = _apply_fn(model)

  def predict(batch):
    sparse = np.asarray(batch["sparse"], np.float32)
    arrs, _ = sharding.shard_padded((sparse,), mesh)
    out = sharding.to_host(fn(variables, arrs[0]))
    return jax.tree.map(lambda a: np.asarray(a)[:sparse.shape[0]], out)

  return predict


def oracle_predictor(predict: Predictor) -> Predictor:
  """`predict` on the batch with its failed tracks removed (mask and flow zeroed where `corrupted`)."""

  def oracle(batch):
    sparse = np.array(batch["sparse"], np.float32)
    sparse[np.asarray(batch["corrupted"])[..., 0]] = 0.0
    return predict({**batch, "sparse": sparse})

  return oracle


def gaussian_nc_predictor(sigma_px: float = 4.0, radius: int = 12) -> Predictor:
  """Normalized convolution with a fixed Gaussian applicability g (std `sigma_px`, (2 radius + 1)^2 taps) and the
  binary track mask m as confidence, per flow component: x = conv(m x, g) / (conv(m, g) + eps), with the
  propagated confidence conv(m, g) / sum(g) (pNCNN eq. 2 without learning). g is separable, so the 'same'
  convolution with zero padding is two products with banded (Toeplitz) matrices, fast for wide kernels."""
  ax = np.arange(-radius, radius + 1, dtype=np.float64)
  g = np.exp(-0.5 * (ax / sigma_px) ** 2)

  def band(n):  # (n, n): out[i] = sum_j g[j - i + radius] a[j], zero outside the image
    d = np.arange(n)[None, :] - np.arange(n)[:, None] + radius
    return jnp.asarray(np.where((d >= 0) & (d <= 2 * radius), g[np.clip(d, 0, 2 * radius)], 0.0), jnp.float32)

  def blur(a):
    hi = jax.lax.Precision.HIGHEST
    a = jnp.einsum("hk,bkwc->bhwc", band(a.shape[1]), a, precision=hi)
    return jnp.einsum("wk,bhkc->bhwc", band(a.shape[2]), a, precision=hi)

  @jax.jit
  def fn(sparse):
    m = sparse[..., -1:]
    xs, cs = flow_model.fold_channels(sparse[..., :-1] * m), jnp.tile(m, (sparse.shape[-1] - 1, 1, 1, 1))
    num, den = blur(xs), blur(cs)  # xs is zero off the tracks: conv(m x, g)
    x, c = num / (den + layers.NCONV_EPS), den / float(g.sum() ** 2)
    return flow_model.unfold_channels(x, sparse.shape[-1] - 1), c[:sparse.shape[0]], m

  def predict(batch):
    f, c, m = (np.asarray(a) for a in fn(jnp.asarray(batch["sparse"], jnp.float32)))
    return flow_model.FlowOutput(flow=f, confidence=c, input_confidence=m, nconv_confidence=c)

  return predict


def run_flow_evaluation(predict: Predictor, batches: Iterable[Mapping[str, np.ndarray]], *, loss_name: str,
                        max_batches: int = -1, num_panels: int = 0) -> FlowEvalResult:
  """Evaluates `predict` on `batches` (flow_synthetic batches: sparse, target, corrupted?, failure?, image?).

  Args:
    predict: batch -> FlowOutput (numpy).
    batches: an iterable of batches (e.g. `config.eval_iterator(config)`).
    loss_name: the loss the model trained with: 'flow_nll' makes its confidence a precision (NLL reported);
      otherwise the confidence only ranks pixels (AUSE).
    max_batches: stop after this many batches (-1: all).
    num_panels: keep the first `num_panels` examples for `flow_viz.flow_panels`.
  """
  acc = flow_metrics.FlowAccumulator()
  panels: list[dict[str, np.ndarray]] = []
  for i, batch in enumerate(batches):
    if 0 <= max_batches <= i:
      break
    sparse, target = np.asarray(batch["sparse"], np.float32), np.asarray(batch["target"], np.float32)
    if sparse.ndim != 4 or sparse.shape != target.shape:
      raise ValueError(f"flow evaluation batch {i}: expected sparse and target of one shape (B, H, W, C + 1), got "
                       f"{sparse.shape} and {target.shape}")
    out = predict(batch)
    pred, conf = np.asarray(out.flow), np.asarray(out.confidence)
    if not np.isfinite(pred).all():
      raise FloatingPointError(f"flow evaluation batch {i}: {int((~np.isfinite(pred)).sum())} of {pred.size} "
                               "predicted flow values are not finite (the model's weights have diverged)")
    precision = losses.precision_of(conf, loss_name)
    unc = flow_metrics.flow_uncertainty(conf, pred.shape[-1])
    acc.update(pred, target, unc, sparse, np.asarray(out.input_confidence), batch.get("corrupted"),
               batch.get("failure"), precision)
    epe, valid = flow_metrics.end_point_error(pred, target)
    for j in range(pred.shape[0]):
      if len(panels) >= num_panels:
        break
      panels.append({"image": np.asarray(batch["image"])[j, ..., 0] if "image" in batch else np.zeros(epe.shape[1:]),
                     "sparse": sparse[j],
                     "corrupted": np.asarray(batch.get("corrupted", sparse[..., :1] < 0))[j, ..., 0],
                     "input_confidence": np.asarray(out.input_confidence)[j, ..., 0], "flow": pred[j],
                     "target": target[j], "uncertainty": unc[j], "epe": np.where(valid[j], epe[j], np.nan)})
  res = acc.result(flow_dataset.FAILURES)
  sp = res.pop("sparsification")
  return FlowEvalResult(metrics=res, sparsification=sp, panels=panels)


def uncertainty_label(loss_name: str) -> tuple[str, str]:
  """(what a model's `flow_metrics.flow_uncertainty` is, its unit) for the figures."""
  if losses.precision_of(1.0, loss_name) is not None:
    return "predicted RMS end-point error", "px"
  return "sqrt(2 / NConv confidence)", "relative"


def format_table(rows: Mapping[str, Mapping[str, Any]], keys=None, header: str = "model") -> str:
  """A markdown table of flow results, one row per name, with units."""
  keys = keys or [k for k in TABLE_ORDER if any(k in r for r in rows.values())]
  return run_files.markdown_table(rows, list(keys), UNITS, header)


def load_flow_checkpoint(config, workdir: str | None, checkpoint: str = "best"):
  """(model, variables, meta) of a flow training run's 'best' / 'latest' step (of `workdir`) or a checkpoint
  directory; the model is rebuilt with the settings the run stored."""
  if checkpoint in ("best", "latest"):
    if not workdir:
      raise ValueError(f"--checkpoint={checkpoint} needs --workdir (the training run)")
    variables, meta = manager.restore_variables(workdir, step=checkpoint)
  else:
    variables, meta = manager.restore_variables(checkpoint)
  if meta.get("variant") not in (None, config.variant):
    raise ValueError(f"--checkpoint={checkpoint} holds variant {meta.get('variant')!r}, not {config.variant!r}")
  settings = from_config.model_settings(meta.get("config") or config)
  return from_config.build_model({"variant": config.variant, "model": settings}), variables, meta


def evaluate_flow_checkpoint(config, workdir: str | None, checkpoint: str = "best",
                             output_dir: str | None = None) -> tuple[FlowEvalResult, dict[str, str]]:
  """What `eval.py` does for a flow config: evaluates the checkpoint on the config's eval split, prints the table
  and writes results.{json,md}, flow_panels.png and sparsification.png to `output_dir` (default
  `<workdir>/eval_<checkpoint>`)."""
  model, variables, meta = load_flow_checkpoint(config, workdir, checkpoint)
  loss_name = from_config.variant_loss(config)
  result = run_flow_evaluation(model_predictor(model, variables), from_config.eval_iterator(config),
                               loss_name=loss_name, max_batches=config.num_eval_batches, num_panels=config.num_panels)
  tag = checkpoint if checkpoint in ("best", "latest") else pathlib.Path(checkpoint).name
  if output_dir is None:
    if not workdir:
      raise ValueError("give --workdir (or --output) for the reports")
    output_dir = str(pathlib.Path(workdir) / f"eval_{tag}")
  out = pathlib.Path(output_dir)
  out.mkdir(parents=True, exist_ok=True)
  name = f"{config.variant}@{tag}"
  paths = {"json": str(out / "results.json"), "md": str(out / "results.md"),
           "sparsification": str(out / "sparsification.png")}
  payload = {"name": name, "variant": config.variant, "loss": loss_name, "checkpoint": checkpoint,
             "checkpoint_step": meta.get("step"), "data": f"{config.data.dataset}/{config.data.eval_split}",
             "units": UNITS, "results": result.summary()}
  pathlib.Path(paths["json"]).write_text(json.dumps(payload, indent=2, default=float) + "\n")
  table = format_table({name: result.summary()})
  pathlib.Path(paths["md"]).write_text(table + "\n")
  flow_viz.sparsification_figure({name: result.sparsification}, paths["sparsification"])
  if result.panels:
    paths["panels"] = str(out / "flow_panels.png")
    label, unit = uncertainty_label(loss_name)
    flow_viz.flow_panels(result.panels, paths["panels"], title=name, uncertainty_label=label, uncertainty_unit=unit)
  if jax.process_index() == 0:
    print(table)
    print("wrote " + ", ".join(paths.values()))
  return result, paths
