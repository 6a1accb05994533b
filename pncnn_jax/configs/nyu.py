r"""NYU-Depth-v2, the published pNCNN recipe (docs/SPEC.md §10.4 and §11).

Variants: any key of `pncnn_jax.nn.models.VARIANTS` (published: ncnn_conf_l1, pncnn).

Command (needs the `nyu_depth` TFDS dataset prepared in DATA_DIR, see docs/DATA.md):

  python train.py --config configs/nyu.py:pncnn --workdir runs/nyu_pncnn --config.data.data_dir=DATA_DIR
  python eval.py --config configs/nyu.py:pncnn --workdir runs/nyu_pncnn --checkpoint best \
      --config.data.data_dir=DATA_DIR

Recipe: plain Adam, lr 0.01, x0.1 every 3 epochs, 10 epochs, batch 8 for the NCNN variants and 4 for pNCNN, full
480x640 frames (no crop, no augmentation), 1000 uniformly sampled input points per image, validation on the 654
val images. What it should reach (docs/SPEC.md §13, official logs, metres): ncnn_conf_l1 MAE 0.0505 / RMSE
0.136 / delta1 98.9 % / AUSE 0.47; pncnn MAE 0.0577 / RMSE 0.144 / AUSE 0.10.
"""

import ml_collections

from pncnn_jax.configs import base


def get_config(variant: str = "pncnn") -> ml_collections.ConfigDict:
  """The NYU config of one variant (`configs/nyu.py:<variant>`)."""
  variant = variant or "pncnn"
  c = base.get_config(variant, "nyu")
  c.data.dataset = "nyu_depth"
  c.data.train_crop = "none"  # full 480x640 frames, as the reference (docs/SPEC.md §10.4)
  c.data.train_crop_height, c.data.train_crop_width = 480, 640
  c.data.eval_split = "val"  # 654 images, 480x640
  c.data.eval_crop_height, c.data.eval_crop_width = 480, 640
  c.metrics = "nyu"
  c.batch_size = 8 if variant.startswith("ncnn") else 4  # docs/SPEC.md §11.2
  c.lr_decay_epochs = 3  # StepLR x0.1 every 3 epochs
  return c
