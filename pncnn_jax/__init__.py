"""pncnn_jax: probabilistic normalized convolutional networks (Eldesokey et al., CVPR 2020) in JAX/Flax.

Sparse depth in metres in; dense depth in metres and a per-pixel uncertainty out. The package, by concern:

  nn/           pure normalized-convolution numerics (NHWC) and the Flax modules (`pncnn_jax.layers` is nn.layers)
  losses, metrics, uncertainty    the pNCNN losses, KITTI/NYU metrics, sparsification / AUSE / AUCE
  from_config   a config -> model, loss and data streams; evaluate: a model or checkpoint on a split
  data/         KITTI-Depth and NYU-v2 TFDS builders, synthetic LiDAR scenes, the grain pipeline, file IO
  checkpoints/  orbax checkpoints, `load` of any checkpoint, official PyTorch checkpoints without torch
  training/     the pure train step and the resumable loop (train.py); ensemble/: members and fusion
  inference/    Completer (one call: sparse metres -> depth and sigma in metres), predict (files) and export
  runtime/      flags, host memory, compilation cache, multi-process start-up, sharding, registries
  pretrained/   the models pncnn_jax trained itself, by name: 'synthetic:<name>'
  flow/         the sparse optical-flow extension (registers itself); experiments/: the paper's claims

The names below are imported when first used, so `import pncnn_jax` stays cheap (no jax until then).
"""

from pncnn_jax.runtime.alias import lazy_exports

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "build_model": "pncnn_jax.nn.models",
    "init_variables": "pncnn_jax.nn.models",
    "PNCNN": "pncnn_jax.nn.models",
    "VARIANTS": "pncnn_jax.nn.models",
    "ModelOutput": "pncnn_jax.nn.models",
    "load": "pncnn_jax.checkpoints.loader",
    "Loaded": "pncnn_jax.checkpoints.loader",
    "load_config": "pncnn_jax.from_config",
    "train_and_evaluate": "pncnn_jax.training.loop",
    "predict_array": "pncnn_jax.inference.predict",
    "Completer": "pncnn_jax.inference.completer",
    "Completion": "pncnn_jax.inference.completer",
    "make_iterator": "pncnn_jax.data",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
