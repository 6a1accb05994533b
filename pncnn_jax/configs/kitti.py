r"""KITTI depth completion, the published pNCNN recipe (docs/SPEC.md §11).

Variants are chosen by the config argument (a key of `pncnn_jax.nn.models.VARIANTS`; the loss is the variant's):
  ncnn, ncnn_conf_l1, ncnn_conf_l2, pncnn, pncnn_exp, no_conf_est, no_var_est, depth_pred, laplace, and
  pncnn_beta (pNCNN trained with beta-NLL weights) and sparse_var (the variance UNet also sees the sparse input):
  our options, not the published recipe.

Command (needs the `kitti_depth` TFDS dataset prepared in DATA_DIR, see docs/DATA.md):

  python train.py --config configs/kitti.py:pncnn --workdir runs/kitti_pncnn \
      --config.data.data_dir=DATA_DIR
  python eval.py --config configs/kitti.py:pncnn --workdir runs/kitti_pncnn --checkpoint best \
      --config.data.data_dir=DATA_DIR

Recipe: plain Adam, lr 0.01, x0.1 every 5 epochs, batch 4, 10 epochs (21,475 steps/epoch), centre crop
352x1216 for training, the 1000-image selval set at full 352x1216 for validation, published NConv init.
What it should reach on selval after 10 epochs (docs/SPEC.md §13, official logs): ncnn_conf_l1 MAE 224 mm /
RMSE 1070 mm / AUSE 0.31; ncnn_conf_l2 259 / 1010 / 0.73; pncnn 276 / 1271 / AUSE 0.052; pncnn_exp 252 / 1013 /
0.065. The reference trained on one GPU for ~1-2 days.
"""

import ml_collections

from pncnn_jax.configs import base


def get_config(variant: str = "pncnn") -> ml_collections.ConfigDict:
  """The KITTI config of one variant (`configs/kitti.py:<variant>`): the base recipe as it is."""
  return base.get_config(variant or "pncnn", "kitti")
