"""Inference: completing depth maps a user brings, and exporting models for deployment.

  completer  Completer: one call, sparse depth [m] -> depth [m], sigma [m], confidences (`pncnn_jax.Completer`)
  predict  files or arrays -> depth [m] and sigma [m] (`python -m pncnn_jax.predict`)
  export   StableHLO and ONNX with a JSON sidecar (`python -m pncnn_jax.export`)

The names below are imported on first use (both modules are also programs).
"""

from pncnn_jax.runtime.alias import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "Completer": "pncnn_jax.inference.completer",
    "Completion": "pncnn_jax.inference.completer",
    "predict_array": "pncnn_jax.inference.predict",
    "predict_files": "pncnn_jax.inference.predict",
    "export_checkpoint": "pncnn_jax.inference.export",
})
