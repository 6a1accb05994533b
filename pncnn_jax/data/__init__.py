"""Data: KITTI-Depth and NYU-v2 TFDS builders, synthetic LiDAR scenes, the grain pipeline, file IO.

The one entry point for training and evaluation code:

  it = pncnn_jax.data.make_iterator({
      "dataset": "synthetic",    # 'synthetic' | 'kitti_depth' | 'nyu_depth'
      "split": "train",          # synthetic: train/val/test; kitti_depth: train/val/selval/test;
                                 # nyu_depth: train/val
      "crop": "random",          # 'none' | 'center' (reference training) | 'bottom' | 'random'
      "crop_height": 128, "crop_width": 384,
      "batch_size": 4,           # per host
      "seed": 0,                 # shuffle order and random crops / NYU sparsifier
      "num_epochs": None,        # None = forever
      "shard_index": jax.process_index(), "shard_count": jax.process_count(),
      "data_dir": None,          # TFDS data_dir for kitti_depth / nyu_depth (see docs/DATA.md)
      "sensors": "",             # '' = the dataset's own sensor; else a sensor or mixture of data.sensors,
                                 # one drawn per example (e.g. 'lidar_mix'; docs/DATA.md, "Sensors")
  })
  batch = next(it)
  state = it.get_state()         # JSON-able dict; save it with the model checkpoint
  it2 = make_iterator(same_config); it2.set_state(state)   # continues at the same sample

Each batch is a dict of numpy arrays (NHWC, metres):
  sparse    (B, H, W, 1) float32  LiDAR / sampled input depth, 0 = missing
  target    (B, H, W, 1) float32  ground truth, 0 = no ground truth
  valid     (B, H, W, 1) bool     target > 0
  name      (B,)                  KITTI: file name key '<drive>/image_0X/<frame>' (or the
                                  selection-set file name); NYU: '<folder>/<file>'; synthetic: index
  synthetic only:
  disturbed (B, H, W, 1) bool     sparse points off the camera-visible surface (> 1 m)
  dense     (B, H, W, 1) float32  full camera z-buffer depth, 0 = sky
  with a `sensors` mixture only:
  sensor    (B,)                  the name of the sensor drawn for each example

All keys of `pipeline.DataConfig` are accepted (unknown keys raise). Train defaults: shuffled,
drop_remainder (fixed shapes); other splits: in order, last partial batch kept.
"""

from pncnn_jax.data.pipeline import DataConfig, make_dataset, make_iterator  # noqa: F401
from pncnn_jax.data.synthetic import SyntheticConfig, generate  # noqa: F401


def smallest_frame(dataset: str, split: str) -> tuple[int, int] | None:
  """(rows, columns) of the smallest frame of a dataset's split, or None if unknown: a crop must fit in it.

  synthetic: the scene generator's frame (352 x 1216); kitti_depth: the cropped selection/test sets are 352 x 1216,
  the raw train/val frames 370-376 x 1224-1242 (docs/SPEC.md §10.3), so 370 x 1224; nyu_depth: 480 x 640.
  """
  from pncnn_jax.data import synthetic  # pylint: disable=g-import-not-at-top
  if dataset == "synthetic":
    return synthetic.KITTI_HEIGHT, synthetic.KITTI_WIDTH
  if dataset == "kitti_depth":
    return (352, 1216) if split in ("selval", "test") else (370, 1224)
  if dataset == "nyu_depth":
    return 480, 640
  return None
