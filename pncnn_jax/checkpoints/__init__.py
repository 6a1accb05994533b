"""Checkpoints: saving and restoring runs (orbax, behind one wrapper), loading any checkpoint a user names, the
identity every checkpoint records, and reading the official PyTorch checkpoints without torch.

  manager       `Checkpointer` (orbax CheckpointManager), `save_variables` / `restore_variables`
  loader        `load(checkpoint)`: a run, a step, a converted checkpoint or a shipped model -> `Loaded`
  identity      {dataset, variant, loss, input_scale} of a checkpoint, and `check_identity`
  convert       official `.pth.tar` -> our variables (`python -m pncnn_jax.convert`)
  torch_pickle  a restricted reader of PyTorch's pickle format; torch_names: their parameter names and ours

The names below are imported on first use (`convert` is also a program).
"""

from pncnn_jax.runtime.alias import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "IdentityMismatchError": "pncnn_jax.checkpoints.identity",
    "check_identity": "pncnn_jax.checkpoints.identity",
    "checkpoint_identity": "pncnn_jax.checkpoints.identity",
    "Loaded": "pncnn_jax.checkpoints.loader",
    "load": "pncnn_jax.checkpoints.loader",
    "Checkpointer": "pncnn_jax.checkpoints.manager",
    "restore_variables": "pncnn_jax.checkpoints.manager",
    "save_variables": "pncnn_jax.checkpoints.manager",
})
