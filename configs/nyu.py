r"""NYU-Depth-v2, the published pNCNN recipe (REFERENCE.md sections 7.4 and 8).

Variants: any key of `pncnn_jax.models.VARIANTS` (published: ncnn_conf_l1, pncnn).

Command (needs the `nyu_depth` TFDS dataset prepared in DATA_DIR, see docs/DATA.md):

  python train.py --config configs/nyu.py:pncnn --workdir runs/nyu_pncnn --config.data.data_dir=DATA_DIR
  python eval.py --config configs/nyu.py:pncnn --workdir runs/nyu_pncnn --checkpoint best \
      --config.data.data_dir=DATA_DIR

Recipe: plain Adam, lr 0.01, x0.1 every 3 epochs, 10 epochs, batch 8 for the NCNN variants and 4 for pNCNN, full
480x640 frames (no crop, no augmentation), 1000 uniformly sampled input points per image, validation on the 654
val images. What it should reach (REFERENCE.md 10.3, official logs, metres): ncnn_conf_l1 MAE 0.0505 / RMSE
0.136 / delta1 98.9 % / AUSE 0.47; pncnn MAE 0.0577 / RMSE 0.144 / AUSE 0.10.
"""

import ml_collections


def get_config(variant: str = "pncnn") -> ml_collections.ConfigDict:
  """The NYU config of one variant (`configs/nyu.py:<variant>`)."""
  variant = variant or "pncnn"
  from pncnn_jax import models  # pylint: disable=g-import-not-at-top
  if variant not in models.VARIANTS:  # the one list of variants (a copy here would miss new ones)
    raise ValueError(f"configs/nyu.py: unknown variant {variant!r}; choose one of {', '.join(models.VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.variant = variant  # model preset, a key of pncnn_jax.models.VARIANTS
  c.loss = ""  # '' = the variant's published loss; else a key of pncnn_jax.losses.LOSSES
  c.nconv_init = "published"  # 'published' (Poisson, as the shipped checkpoints) or 'repo' (Kaiming)
  c.precision = "highest"  # UNet convolutions: 'highest' = float32 everywhere; 'default' = TF32/bf16 on GPU/TPU
  c.seed = 0  # parameter init and data order

  c.data = ml_collections.ConfigDict()
  c.data.dataset = "nyu_depth"  # 'synthetic' | 'kitti_depth' | 'nyu_depth'
  c.data.data_dir = ml_collections.FieldReference(None, field_type=str)  # TFDS data_dir (required for KITTI)
  c.data.train_split = "train"  # split trained on
  c.data.train_crop = "none"  # full 480x640 frames, as the reference (REFERENCE.md 7.4)
  c.data.train_crop_height = 480  # rows of the training crop
  c.data.train_crop_width = 640  # columns of the training crop
  c.data.eval_split = "val"  # split validated / evaluated on (654 images, 480x640)
  c.data.eval_crop = "none"  # crop of the evaluation images
  c.data.eval_crop_height = 480  # rows of the evaluation crop (if any)
  c.data.eval_crop_width = 640  # columns of the evaluation crop (if any)
  c.data.synthetic_size = 10000  # synthetic only: training scenes per epoch
  c.data.eval_synthetic_size = 0  # synthetic only: validation scenes
  c.data.nyu_num_samples = 1000  # nyu only: expected sparse samples per image
  c.data.num_threads = 4  # grain reader threads per host

  c.metrics = "nyu"  # 'kitti' (mm, 1/km) or 'nyu' (metres)
  c.batch_size = 8 if variant.startswith("ncnn") else 4  # global batch (all devices, all hosts); must divide by the device count
  c.eval_batch_size = 1  # per-image metrics do not depend on it; padded to the device count
  c.num_epochs = 10  # epochs of training
  c.steps_per_epoch = -1  # -1: len(train split) // batch_size
  c.learning_rate = 0.01  # Adam (plain: amsgrad False, as the shipped checkpoints)
  c.lr_decay_epochs = 3  # StepLR step size in epochs
  c.lr_decay_factor = 0.1  # StepLR gamma

  c.eval_every_steps = -1  # also validate every N steps (-1: only at the end of each epoch)
  c.num_eval_batches = -1  # -1: the whole validation split
  c.steps_per_call = 2  # optimisation steps per jitted call (unrolled; validation/checkpoint steps stay exact).
  # >1 saves XLA:CPU re-faulting the step's working memory on every call (~10 % per KITTI-size step).
  c.log_every_steps = 100  # training metrics to metrics.jsonl / TensorBoard every N steps
  c.checkpoint_every_steps = -1  # also checkpoint every N steps (-1: after each validation only)
  c.max_to_keep = 2  # latest checkpoints kept (the best by validation RMSE is kept too)
  c.num_panels = 4  # qualitative panels written by eval.py
  c.progress_bar = True  # tqdm progress bar with rate and ETA
  return c
