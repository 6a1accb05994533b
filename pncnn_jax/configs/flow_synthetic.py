r"""Sparse optical-flow rectification on synthetic street scenes (pncnn_jax.flow.dataset), sized for a CPU.

Variants: a key of `pncnn_jax.flow.FLOW_VARIANTS`: `flow_ncnn` (binary confidence: every track is interpolated),
`flow_ncnn_conf` (learned input confidence, EPE loss), `flow_pncnn` (learned input confidence and an isotropic
precision, 2-D Gaussian NLL) and `flow_pncnn_aniso` (one precision per flow component). No download is needed:
scene pairs, exact flow and KLT-like tracks with labelled failures are rendered on the fly.

Command:

  python train.py --config configs/flow_synthetic.py:flow_pncnn --workdir runs/flow_pncnn
  python eval.py --config configs/flow_synthetic.py:flow_pncnn --workdir runs/flow_pncnn --checkpoint best

Recipe (that of `python -m pncnn_jax.experiments.flow.reproduce`): Adam, lr 3e-3 then x0.1 for the last of 8 epochs of
100 steps (batch 4, random 64x192 windows of the 176x608 half-resolution frame), validation on 32 val scenes (random
96x320 windows, fixed by the seed). What it reaches on 96 test scenes (docs/results/RESULTS_FLOW.md): flow_ncnn EPE
3.09 px (3.6 min of CPU), flow_ncnn_conf 2.11 px and AUROC 0.84 of a low c0 for the failed tracks (7.9 min),
flow_pncnn 3.43 px, AUROC 0.77, AUSE on EPE 0.20 (8.7 min). None is converged by docs/results/RESULTS_FLOW.md's 2 %
rule.
"""

import ml_collections

from pncnn_jax.configs import base
from pncnn_jax.flow import model as flow_model


def get_config(variant: str = "flow_pncnn") -> ml_collections.ConfigDict:
  """The flow config of one variant (`configs/flow_synthetic.py:<variant>`)."""
  variant = variant or "flow_pncnn"
  if variant not in flow_model.FLOW_VARIANTS:
    raise ValueError(f"configs/flow_synthetic.py: unknown variant {variant!r}; choose one of "
                     f"{', '.join(flow_model.FLOW_VARIANTS)}")
  c = base.get_config("pncnn", "flow_synthetic")
  c.variant = variant  # a key of pncnn_jax.flow.FLOW_VARIANTS
  c.model = dict(  # pncnn_jax.flow.FlowPNCNN settings besides the variant's (c0 is always zero off the tracks)
      nconv_init="published",  # 'published' (Poisson) or 'repo' (Kaiming)
      conv_precision="highest",  # UNet convolutions: float32 everywhere
      unet_features=(16, 16, 32, 32),  # confidence / variance UNet widths (half the depth model's)
  )
  c.data.dataset = "flow_synthetic"
  c.data.train_crop = "random"  # a new window of the frame every time a scene is drawn
  c.data.train_crop_height, c.data.train_crop_width = 64, 192
  c.data.eval_split = "val"
  c.data.eval_crop = "random"  # one window per scene, fixed by the seed
  c.data.eval_crop_height, c.data.eval_crop_width = 96, 320
  c.data.synthetic_size = 400  # training scenes per epoch (100 steps of batch 4)
  c.data.eval_synthetic_size = 32  # validation scenes
  c.data.num_threads = 2
  c.metrics = "flow"  # EPE, outliers, AUSE on EPE, AUROC of c0 for the failed tracks (pncnn_jax.flow.metrics)
  c.batch_size = 4
  c.eval_batch_size = 8
  c.num_epochs = 8
  c.learning_rate = 3e-3
  c.lr_decay_epochs = 7  # x0.1 for the last epoch
  c.log_every_steps = 20
  c.num_panels = 3
  return c
