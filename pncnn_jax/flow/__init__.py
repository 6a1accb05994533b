"""Sparse optical flow: a multi-channel pNCNN (paper section 6), an extension of the depth core.

The depth core never imports this package. Importing it registers, once, what a flow config names:

  model variants  flow_ncnn, flow_ncnn_conf, flow_pncnn, flow_pncnn_aniso   (`from_config.VARIANTS`)
  losses          flow_epe, flow_nll (precision 1/sigma^2 [1/px^2]), with their EPE batch errors (`losses.LOSSES`)
  dataset         flow_synthetic, synthetic street frames with labelled KLT failures   (`data.pipeline.DATASETS`)
  metric set      flow: EPE, outliers, AUSE on EPE, track-failure AUROC, evaluated by 'flow'
                  (`evaluate.METRIC_SETS`)
  evaluator       flow: `pncnn_jax.flow.evaluate.FlowEvaluator`, of the core's evaluator protocol
                  (`pncnn_jax.evaluate.EVALUATORS`; the module registers it itself, on import)

and a registry that misses one of these names imports it by module name (`runtime.registry.EXTENSIONS`).

Modules: `model` (FlowPNCNN and the variants), `losses`, `metrics`, `evaluate`, `viz`, `scenes` (two frames of a
moving street with exact flow), `dataset` (the tracks and their failures). configs/flow_synthetic.py trains them.
"""

from pncnn_jax import from_config as _from_config
from pncnn_jax import losses as _losses
from pncnn_jax.data import pipeline as _pipeline
from pncnn_jax.evaluate import protocol as _protocol
from pncnn_jax.flow import dataset, evaluate, losses, metrics, model, scenes, viz  # noqa: F401
from pncnn_jax.flow.model import FLOW_VARIANTS, FlowOutput, FlowPNCNN, build_flow_model  # noqa: F401

_from_config.register_variants(FLOW_VARIANTS, build_flow_model)
_losses.register("flow_epe", lambda out, target: losses.flow_epe(out.depth, target), None, losses.batch_errors)
# flow_nll: the output confidence is the precision 1/sigma^2 [1/px^2] of each flow component.
_losses.register("flow_nll", lambda out, target: losses.flow_nll(out.depth, out.confidence, target),
                 lambda c, xp: c, losses.batch_errors)
_pipeline.register_dataset("flow_synthetic", _pipeline.Dataset(tuple(dataset.STREAMS), generated=True,
                                                               make_map=dataset.FlowSyntheticMap))

_protocol.register_metric_set("flow", _protocol.MetricSet(
    "flow", units=evaluate.UNITS, columns=evaluate.TABLE_ORDER,
    train_units={"epe": "px", "rmse": "px"}))  # losses.batch_errors
