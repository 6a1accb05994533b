r"""Synthetic KITTI-like street scenes (pncnn_jax.data.synthetic), sized for a CPU.

Variants: any key of `pncnn_jax.nn.models.VARIANTS`, e.g. `configs/synthetic.py:pncnn`, `:ncnn_conf_l1`.
No download is needed: scenes are rendered on the fly (LiDAR projection with noise, dropout and points seen
through objects, semi-dense ground truth), deterministically from the seeds.

Command (what `make demo` runs for pncnn and ncnn):

  python train.py --config configs/synthetic.py:pncnn --workdir runs/synth_pncnn
  python eval.py --config configs/synthetic.py:pncnn --workdir runs/synth_pncnn --checkpoint best

Recipe: the published optimiser (plain Adam, lr 0.01, StepLR x0.1) on short "epochs": 5 epochs x 50 steps of
batch 4 centre crops of 64x320 (the LiDAR band of the 352x1216 frame), lr x0.1 for the last epoch, validation on
32 val scenes at 128x384 (centre crop). What it reaches (docs/get-started.md, "The demo"; 32 val scenes, best
checkpoint, ~11 min CPU for pncnn, ~1 min for ncnn): pncnn MAE 1.67 m / RMSE 4.43 m / AUSE 0.147 / AUCE 0.23; ncnn MAE
0.67 m / RMSE 2.63 m / AUSE 0.239 (1.32 Gustafsson). 250 steps is far from converged; train longer
(--config.num_epochs, --config.data.synthetic_size) for better depth.

Sensor-robust form, `configs/synthetic.py:<variant>,<mixture>` (e.g. `:pncnn,lidar_mix`): the same recipe, each
training and validation scene seen by one sensor drawn from the named mixture of `pncnn_jax.data.sensors`
(`lidar_mix`: the hdl64, hdl32, vlp16, os1_32 and os1_128 LiDARs, 20 % of them with 5-100 % of the points kept,
10 % visual-odometry points; docs/DATA.md, "Sensors"), in `config.data.sensors.train` and `.eval`. Not trained yet:
what it reaches is not measured.

  python train.py --config configs/synthetic.py:pncnn,lidar_mix --workdir runs/synth_pncnn_lidar_mix
"""

import ml_collections

from pncnn_jax.configs import base
from pncnn_jax.data import sensors


def get_config(arg: str = "pncnn") -> ml_collections.ConfigDict:
  """The synthetic config of one variant (`configs/synthetic.py:<variant>`), optionally on a sensor mixture
  (`configs/synthetic.py:<variant>,<mixture>`)."""
  variant, _, mixture = (arg or "pncnn").partition(",")
  if mixture and mixture not in sensors.names():  # the one list of sensors and mixtures (a copy would miss new ones)
    raise ValueError(f"configs/synthetic.py: unknown sensor mixture {mixture!r}; choose one of "
                     f"{', '.join(sensors.names())}")
  c = base.get_config(variant or "pncnn", "synthetic")
  c.data.dataset = "synthetic"
  c.data.train_crop_height, c.data.train_crop_width = 64, 320  # the LiDAR band of the 352x1216 frame (centre)
  c.data.eval_split = "val"
  c.data.eval_crop = "center"  # the middle rows, where LiDAR points and the disturbed ones are
  c.data.eval_crop_height, c.data.eval_crop_width = 128, 384
  c.data.synthetic_size = 200  # training scenes per epoch (50 steps)
  c.data.eval_synthetic_size = 32  # validation scenes
  c.data.num_threads = 2
  c.eval_batch_size = 8
  c.num_epochs = 5
  c.lr_decay_epochs = 4  # x0.1 for the last epoch
  c.log_every_steps = 20
  c.data.sensors.train = c.data.sensors.eval = mixture  # '' = the generator's own HDL-64E
  return c
