r"""Synthetic KITTI-like street scenes (pncnn_jax.data.synthetic), sized for a CPU.

Variants: any key of `pncnn_jax.models.VARIANTS`, e.g. `configs/synthetic.py:pncnn`, `:ncnn_conf_l1`.
No download is needed: scenes are rendered on the fly (LiDAR projection with noise, dropout and points seen
through objects, semi-dense ground truth), deterministically from the seeds.

Command (what `make demo` runs for pncnn and ncnn):

  python train.py --config configs/synthetic.py:pncnn --workdir runs/synth_pncnn
  python eval.py --config configs/synthetic.py:pncnn --workdir runs/synth_pncnn --checkpoint best

Recipe: the published optimiser (plain Adam, lr 0.01, StepLR x0.1) on short "epochs": 5 epochs x 50 steps of
batch 4 centre crops of 64x320 (the LiDAR band of the 352x1216 frame), lr x0.1 for the last epoch, validation on
32 val scenes at 128x384 (centre crop). What it reaches (README "Demo", 32 val scenes, best checkpoint, ~11 min
CPU for pncnn, ~1 min for ncnn): pncnn MAE 1.67 m / RMSE 4.43 m / AUSE 0.147 / AUCE 0.23; ncnn MAE 0.67 m /
RMSE 2.63 m / AUSE 0.239 (1.32 Gustafsson). 250 steps is far from converged; train longer
(--config.num_epochs, --config.data.synthetic_size) for better depth.
"""

import ml_collections


def get_config(variant: str = "pncnn") -> ml_collections.ConfigDict:
  """The synthetic config of one variant (`configs/synthetic.py:<variant>`)."""
  from pncnn_jax import models  # pylint: disable=g-import-not-at-top
  variant = variant or "pncnn"
  if variant not in models.VARIANTS:
    raise ValueError(f"configs/synthetic.py: unknown variant {variant!r}; choose one of "
                     f"{', '.join(models.VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.variant = variant  # model preset, a key of pncnn_jax.models.VARIANTS
  c.loss = ""  # '' = the variant's published loss; else a key of pncnn_jax.losses.LOSSES
  c.nconv_init = "published"  # 'published' (Poisson, as the shipped checkpoints) or 'repo' (Kaiming)
  c.precision = "highest"  # UNet convolutions: 'highest' = float32 everywhere; 'default' = TF32/bf16 on GPU/TPU
  c.seed = 0  # parameter init and data order

  c.data = ml_collections.ConfigDict()
  c.data.dataset = "synthetic"  # 'synthetic' | 'kitti_depth' | 'nyu_depth'
  c.data.data_dir = ml_collections.FieldReference(None, field_type=str)  # unused for synthetic
  c.data.train_split = "train"  # split trained on
  c.data.train_crop = "center"  # the middle rows of the 352x1216 frame (the LiDAR band; scenes differ)
  c.data.train_crop_height = 64  # rows of the training crop
  c.data.train_crop_width = 320  # columns of the training crop
  c.data.eval_split = "val"  # split validated / evaluated on
  c.data.eval_crop = "center"  # the middle rows, where LiDAR points and the disturbed ones are
  c.data.eval_crop_height = 128  # rows of the evaluation crop
  c.data.eval_crop_width = 384  # columns of the evaluation crop
  c.data.synthetic_size = 200  # training scenes per epoch (50 steps)
  c.data.eval_synthetic_size = 32  # validation scenes
  c.data.nyu_num_samples = 1000  # nyu only: expected sparse samples per image
  c.data.num_threads = 2  # grain reader threads per host

  c.metrics = "kitti"  # 'kitti' (mm, 1/km) or 'nyu' (metres)
  c.batch_size = 4  # global batch (all devices, all hosts); must divide by the device count
  c.eval_batch_size = 8  # per-image metrics do not depend on it; padded to the device count
  c.num_epochs = 5  # epochs of training
  c.steps_per_epoch = -1  # -1: synthetic_size // batch_size
  c.learning_rate = 0.01  # Adam (plain: amsgrad False, as the shipped checkpoints)
  c.lr_decay_epochs = 4  # StepLR step size in epochs (x0.1 for the last epoch)
  c.lr_decay_factor = 0.1  # StepLR gamma

  c.eval_every_steps = -1  # also validate every N steps (-1: only at the end of each epoch)
  c.num_eval_batches = -1  # -1: the whole validation split
  c.steps_per_call = 1  # optimisation steps per jitted call (unrolled; validation/checkpoint steps stay exact).
  # >1 saves XLA:CPU re-faulting the step's working memory on every call (~10 % per KITTI-size step).
  c.log_every_steps = 20  # training metrics to metrics.jsonl / TensorBoard every N steps
  c.checkpoint_every_steps = -1  # also checkpoint every N steps (-1: after each validation only)
  c.max_to_keep = 2  # latest checkpoints kept (the best by validation RMSE is kept too)
  c.num_panels = 4  # qualitative panels written by eval.py
  c.progress_bar = True  # tqdm progress bar with rate and ETA
  return c
