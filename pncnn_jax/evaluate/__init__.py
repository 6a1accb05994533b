"""Evaluation: one evaluator protocol, one batch loop, one entry that evaluates a checkpoint.

  protocol    `Evaluator` (inputs / step / update / result, after big_vision's evaluators), `Result` (rows with
              units, table, files), `evaluate_batches` (the one batch loop: padding, sharding, several hosts), the
              registries `EVALUATORS` and `METRIC_SETS`, `evaluator_for(config)`
  depth       the 'depth' evaluator (KITTI / NYU metrics, AUSE, AUCE, NLL, disturbed-point AUROC) and the 'kitti'
              and 'nyu' metric sets; `run_evaluation`, its one-call form
  across_sensors  `evaluate_sensors`: one depth model on the split seen by a list of sensors (eval.py --sensors)
  checkpoint  `evaluate_checkpoint`: what eval.py does, for every config
  report      the table, the log-line values, strict JSON
  pairs       KITTI PNG pairs as batches (eval.py --pairs_dir)

eval.py's flags and main (`pncnn-eval`) are `pncnn_jax.training.evaluate_main`.

The other evaluators register themselves: 'ensemble' and 'ensemble_calibration' (`pncnn_jax.ensemble.members`),
'flow' (`pncnn_jax.flow`), 'predictive' (`pncnn_jax.baselines`). The names below are imported on first use, so that
`eval.py --help` needs no jax.
"""

from pncnn_jax.runtime.alias import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("Evaluator", "Result", "LoadedModel", "MetricSet", "EVALUATORS", "METRIC_SETS",
                     "WEIGHT_SETTINGS", "evaluate_batches", "register_evaluator", "get_evaluator", "evaluator_for",
                     "evaluator_name", "register_metric_set", "get_metric_set", "format_table"),
                    "pncnn_jax.evaluate.protocol"),
    **dict.fromkeys(("DepthEvaluator", "run_evaluation", "make_eval_fn", "batch_arrays", "sigma_of", "UNITS",
                     "TABLE_ORDER"), "pncnn_jax.evaluate.depth"),
    **dict.fromkeys(("evaluate_sensors", "SensorDepthEvaluator"), "pncnn_jax.evaluate.across_sensors"),
    **dict.fromkeys(("evaluate_checkpoint", "checkpoint_tag", "REPORT_FILES"), "pncnn_jax.evaluate.checkpoint"),
    **dict.fromkeys(("format_values", "format_rows", "strict_json"), "pncnn_jax.evaluate.report"),
    **dict.fromkeys(("kitti_pairs", "kitti_pair_batches"), "pncnn_jax.evaluate.pairs"),
})
