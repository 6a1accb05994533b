r"""The fields every config shares, with the published recipe's values (docs/SPEC.md §11).

Not used alone: configs/kitti.py, nyu.py and synthetic.py start from `get_config(variant)` here and override
what differs (flax examples/imagenet style). Variants: any key of `pncnn_jax.nn.models.VARIANTS`.
"""

import ml_collections

from pncnn_jax.nn import models


def get_config(variant: str = "pncnn", name: str = "base") -> ml_collections.ConfigDict:
  """The shared fields of a config of `variant`; `name` is the calling config file, for the error message."""
  variant = variant or "pncnn"
  if variant not in models.VARIANTS:  # the one list of variants (a copy here would miss new ones)
    raise ValueError(f"configs/{name}.py: unknown variant {variant!r}; choose one of {', '.join(models.VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.variant = variant  # model preset, a key of pncnn_jax.nn.models.VARIANTS
  c.loss = ""  # '' = the variant's published loss; else a key of pncnn_jax.losses.LOSSES
  c.model = dict(  # pncnn_jax.nn.models.PNCNN settings besides the variant's, passed as keyword arguments
      nconv_init="published",  # 'published' (Poisson, as the shipped checkpoints) or 'repo' (Kaiming)
      conv_precision="highest",  # UNet convolutions: 'highest' = float32 everywhere; 'default' = TF32/bf16 on GPU/TPU
      mask_input_confidence=False,  # our option, not the official network: c0 <- c0 * [x > 0] (docs/results/RESULTS.md)
      detach_variance_input=False,  # our option (training): no gradient from the variance UNet into NConv and c0
  )
  c.seed = 0  # parameter init and data order
  c.init_from = ""  # fine-tuning: start a fresh run from these weights (any checkpoint pncnn_jax.checkpoints.loader
  # loads: a shipped name such as 'synthetic:pncnn_masked', a workdir, a step folder) instead of `seed`'s; the same
  # variant; Adam and the schedule start afresh. '' = from scratch. Only read when the workdir has no checkpoint.

  c.data = ml_collections.ConfigDict()
  c.data.dataset = "kitti_depth"  # 'synthetic' | 'kitti_depth' | 'nyu_depth'
  c.data.data_dir = ml_collections.FieldReference(None, field_type=str)  # TFDS data_dir (required for KITTI)
  c.data.train_split = "train"  # split trained on
  c.data.train_crop = "center"  # torchvision CenterCrop, as the reference (docs/SPEC.md §10.3)
  c.data.train_crop_height = 352  # rows of the training crop
  c.data.train_crop_width = 1216  # columns of the training crop
  c.data.eval_split = "selval"  # split validated / evaluated on
  c.data.eval_crop = "none"  # crop of the evaluation images
  c.data.eval_crop_height = 352  # rows of the evaluation crop (if any)
  c.data.eval_crop_width = 1216  # columns of the evaluation crop (if any)
  c.data.synthetic_size = 10000  # synthetic only: training scenes per epoch
  c.data.eval_synthetic_size = 0  # synthetic only: validation scenes
  c.data.synthetic_cache_dir = ""  # synthetic only: pre-rendered scenes (pncnn_jax.data.synthetic_cache), if present
  c.data.nyu_num_samples = 1000  # nyu only: expected sparse samples per image
  c.data.sensors = ml_collections.ConfigDict()  # one sensor per example, drawn from a named sensor or mixture of
  # pncnn_jax.data.sensors (docs/DATA.md, "Sensors"); '' = the dataset's own sensor, as published
  c.data.sensors.train = ""  # the training stream's, e.g. 'lidar_mix'
  c.data.sensors.eval = ""  # the validation / evaluation stream's
  c.data.num_threads = 4  # grain reader threads per host

  c.metrics = "kitti"  # 'kitti' (mm, 1/km) or 'nyu' (metres)
  c.batch_size = 4  # global batch (all devices, all hosts); must divide by the device count
  c.eval_batch_size = 1  # per-image metrics do not depend on it; padded to the device count
  c.num_epochs = 10  # epochs of training
  c.steps_per_epoch = -1  # -1: len(train split) // batch_size
  c.learning_rate = 0.01  # Adam (plain: amsgrad False, as the shipped checkpoints)
  c.lr_decay_epochs = 5  # StepLR step size in epochs
  c.lr_decay_factor = 0.1  # StepLR gamma
  c.grad_clip_norm = 0.0  # > 0: clip the gradient to this global L2 norm before Adam (0: off, as published)

  c.eval_every_steps = -1  # also validate every N steps (-1: only at the end of each epoch)
  c.num_eval_batches = -1  # -1: the whole validation split
  c.steps_per_call = -1  # optimisation steps per jitted call (unrolled; validation/checkpoint steps stay exact);
  # -1: the platform's choice (pncnn_jax.from_config.steps_per_call: 2 on CPU for KITTI/NYU-size frames, else 1)
  c.log_every_steps = 100  # training metrics to metrics.jsonl / TensorBoard every N steps
  c.checkpoint_every_steps = -1  # also checkpoint every N steps (-1: after each validation only)
  c.max_to_keep = 2  # latest checkpoints kept (the best by validation RMSE is kept too)
  c.num_panels = 4  # qualitative panels written by eval.py
  c.progress_bar = True  # tqdm progress bar with rate and ETA
  return c
