"""The grain input pipeline over the three sources (synthetic, kitti_depth, nyu_depth).

Order of operations (all index-based, so the whole pipeline is a deterministic function of the
config and the position in the stream):

  source -> shuffle (seed; a new permutation each epoch) -> repeat (num_epochs or forever) ->
  per-example map (decode, crop, NYU sparsifier, sensor; its rng derives from seed and the stream position)
  -> batch (batch_size, per host) -> shard (every shard_count-th batch, from shard_index) -> iterator.

Sensors (`sensors`, a name of `pncnn_jax.data.sensors`: a sensor or a mixture; '' = the dataset's own, as
published): each example draws one sensor of the mixture from its rng, so the draw is a function of (seed, position)
like the crops, and gets a `sensor` entry (its name). synthetic renders the drawn LiDAR preset (same scene, camera
and ground truth) or VO points from the camera's dense depth, then the sensor's dropout, outliers and noise, and
recomputes `disturbed` from the result; kitti_depth thins its HDL-64E scans by pitch binning (every k-th laser, on
the full frame before the crop, with the 2011_09_26 intrinsics and LiDAR mount, `kitti_camera`) or draws VO points
from the semi-dense ground truth; nyu_depth takes its uniform sampler or VO points from its depth, then dropout,
outliers and noise (a depth camera has no lasers: sensors that thin or render a LiDAR are refused by `validate`).

Sharding last makes the global batches independent of the number of hosts: with S hosts of batch p,
global batch k is host 0's batch k, then host 1's, ..., row for row the single-host batch k of size
S p (random crops included). Every host computes the same (index-only) permutation, and reads and
decodes only its own rows (grain datasets are lazy). With drop_remainder each host keeps the same
number of batches, those of full global batches; otherwise the last global batch may be partial and
the hosts past its end have no batch (pncnn_jax.runtime.sharding.synced gives them empty ones). Each
host's iterator state is the same `{'next_index': k}` (k global batches read), so the state saved by
host 0 resumes every host, with any number of hosts.

The iterator is a `grain.DatasetIterator`: `it.get_state()` returns a small JSON-able dict and
`it.set_state(state)` on a fresh iterator of the same config continues at the same sample.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable, Mapping, Optional

import grain
import numpy as np

from pncnn_jax.data import sensors, sparsify, synthetic, synthetic_cache
from pncnn_jax.runtime.registry import Registry


@dataclasses.dataclass(frozen=True)
class Dataset:
  """A `dataset` name of the pipeline: its splits and how an example is made.

  generated: rendered on the fly from an index (no data_dir; `synthetic_size` examples per epoch); else a
  prepared TFDS dataset read from `data_dir`. make_map(cfg): the grain RandomMap from an index (generated) or a
  TFDS record to an example. sensor_sources: the sources of `pncnn_jax.data.sensors.Sensor` its map can make
  (() = no `sensors` mixture); native_lidar: the LiDAR preset of its own input ('' = not a LiDAR: nothing to thin).
  """
  splits: tuple[str, ...]
  generated: bool
  make_map: Callable[[Any], grain.transforms.RandomMap]
  sensor_sources: tuple[str, ...] = ()
  native_lidar: str = ""


# Extensions register theirs on import (pncnn_jax.flow: 'flow_synthetic').
DATASETS: Registry[Dataset] = Registry("dataset")
CROPS = ("none", "center", "bottom", "random")  # DataConfig.crop (`sparsify.crop_offsets`'s modes, or none)


def register_dataset(name: str, dataset: Dataset) -> None:
  """Adds a dataset name the pipeline (and every config's `data.dataset`) accepts."""
  DATASETS.register(name, dataset)


def splits(name: str) -> tuple[str, ...]:
  """The splits of a registered dataset (() for an unknown name)."""
  return DATASETS[name].splits if name in DATASETS else ()


def is_generated(name: str) -> bool:
  """Whether a dataset is rendered on the fly (no data_dir, `synthetic_size` examples per epoch)."""
  return name in DATASETS and DATASETS[name].generated


def check_sensors(name: str, dataset: str) -> None:
  """That the sensor or mixture `name` (of `pncnn_jax.data.sensors`) applies to `dataset`: a one-line ValueError
  naming the valid names, or what the dataset takes, otherwise."""
  sensors.members(name)
  d = DATASETS[dataset]
  sensors.check_for_dataset(name, dataset, d.sensor_sources, d.native_lidar)


def describe_sensors(dataset: str, name: str = "") -> str:
  """Words for the sensor(s) a stream of `dataset` draws (`name`: its `sensors`, '' or 'native' = the dataset's
  own), as messages name what a model was trained on: 'synthetic 64-beam LiDAR', 'kitti_depth 64-beam LiDAR',
  "nyu_depth's own sparse input", "synthetic, sensors 'lidar_mix'"."""
  own = DATASETS[dataset].native_lidar if dataset in DATASETS else ""
  if name in ("", "native"):
    return f"{dataset} {sensors.lidar(own).beams}-beam LiDAR" if own else f"{dataset}'s own sparse input"
  return f"{dataset}, sensors {name!r}"


_SYNTHETIC_STREAM = {"train": 0, "val": 1, "test": 2}


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Pipeline settings (see `pncnn_jax.data.__init__` for the documented dict form)."""
  dataset: str = "synthetic"  # a name of DATASETS: 'synthetic' | 'kitti_depth' | 'nyu_depth' | extensions'
  split: str = "train"  # see `splits(dataset)`
  batch_size: int = 4  # per shard (per host)
  crop: str = "center"  # 'none' | 'center' | 'bottom' | 'random'
  crop_height: int = 352  # crop rows
  crop_width: int = 1216  # crop columns
  seed: int = 0  # shuffle and random-crop / sparsifier seed
  shuffle: Optional[bool] = None  # default: True for 'train', False otherwise
  num_epochs: Optional[int] = 1  # None = repeat forever
  drop_remainder: Optional[bool] = None  # default: True for 'train' (fixed batch shape)
  shard_index: int = 0  # this host's rows of each global batch (jax.process_index())
  shard_count: int = 1  # number of hosts sharing each global batch (jax.process_count())
  data_dir: Optional[str] = None  # TFDS data_dir holding the prepared kitti_depth / nyu_depth
  num_threads: int = 2  # grain reader threads
  prefetch: int = 4  # grain prefetch buffer (elements)
  # generated datasets only (synthetic, and extensions' such as flow_synthetic)
  synthetic_size: int = 10000  # examples per epoch
  synthetic_seed: int = 0  # scene seed (scenes of a split do not depend on `seed`)
  synthetic_cache_dir: Optional[str] = None  # pre-rendered scenes (data/synthetic_cache.py), used if present
  # nyu only
  nyu_num_samples: int = 1000  # expected sparse samples per image (docs/SPEC.md §10.4)
  # sensors: a sensor or mixture of pncnn_jax.data.sensors drawn per example; '' = the dataset's own sensor
  sensors: str = ""

  @classmethod
  def from_mapping(cls, cfg: Mapping[str, Any]) -> "DataConfig":
    if isinstance(cfg, DataConfig):
      return cfg
    if hasattr(cfg, "to_dict"):  # ml_collections.ConfigDict
      cfg = cfg.to_dict()
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(cfg) - names)
    if unknown:
      raise ValueError(f"unknown data config keys {unknown}; known: {sorted(names)}")
    return cls(**cfg)

  def validate(self) -> None:
    if self.dataset not in DATASETS:
      raise ValueError(f"dataset must be one of {tuple(DATASETS)}, got {self.dataset!r}")
    if self.split not in splits(self.dataset):
      raise ValueError(f"split of {self.dataset} must be one of {splits(self.dataset)}, got {self.split!r}")
    if self.crop not in CROPS:
      raise ValueError(f"crop must be 'none', 'center', 'bottom' or 'random', got {self.crop!r}")
    if self.batch_size <= 0:
      raise ValueError(f"batch_size must be positive, got {self.batch_size}")
    if not 0 <= self.shard_index < self.shard_count:
      raise ValueError(f"need 0 <= shard_index < shard_count, got {self.shard_index}, {self.shard_count}")
    if self.num_epochs is not None and self.num_epochs <= 0:
      raise ValueError(f"num_epochs must be positive or None, got {self.num_epochs}")
    if self.sensors:
      check_sensors(self.sensors, self.dataset)
    if not is_generated(self.dataset) and not self.data_dir:  # build.DatasetNotFoundError, with the build command
      from pncnn_jax.data import build  # here: `python -m pncnn_jax.data.build` must not find it imported by data/
      build.check_prepared(self.dataset, self.data_dir, self.split)


# ------------------------------------------------------------------------- per-example maps


def _crop(ex: dict, cfg: DataConfig, rng: np.random.Generator) -> dict:
  if cfg.crop == "none":
    return ex
  h, w = ex["target"].shape[:2]
  top, left = sparsify.crop_offsets(h, w, cfg.crop_height, cfg.crop_width, cfg.crop, rng)
  out = dict(ex)
  for k, v in ex.items():
    if isinstance(v, np.ndarray) and v.ndim == 3:
      out[k] = v[top:top + cfg.crop_height, left:left + cfg.crop_width]
  return out


class _Synthetic(grain.transforms.RandomMap):
  """index -> synthetic example; a crop is rendered directly as a window of the full frame."""

  def __init__(self, cfg: DataConfig):
    self._cfg = cfg
    self._scfg = synthetic.SyntheticConfig()
    self._stream = _SYNTHETIC_STREAM[cfg.split]
    self._cache = None
    if cfg.synthetic_cache_dir and cfg.crop in ("center", "bottom", "none"):  # one fixed window per scene
      s = self._scfg
      top, left = (0, 0) if cfg.crop == "none" else sparsify.crop_offsets(
          s.height, s.width, cfg.crop_height, cfg.crop_width, cfg.crop)
      hw = (s.height, s.width) if cfg.crop == "none" else (cfg.crop_height, cfg.crop_width)
      path = pathlib.Path(cfg.synthetic_cache_dir) / synthetic_cache.cache_name(
          cfg.split, cfg.synthetic_seed, (top, left, *hw))
      if path.is_dir():
        self._cache = synthetic_cache.SceneCache(path, s)

  def random_map(self, index, rng: np.random.Generator):
    c, s = self._cfg, self._scfg
    window = sparsify.crop_window(s.height, s.width, c.crop_height, c.crop_width, c.crop, rng)
    if not c.sensors:  # the dataset's own sensor: no further draw from rng (the published streams, bit for bit)
      return self._render(index, s, window)
    d = sensors.draw(c.sensors, rng)
    preset = d.lidar or s.lidar  # 'native' and 'vo': the generator's own LiDAR
    scfg = s if preset == s.lidar and d.every == 1 else dataclasses.replace(
        s, lidar=preset, lidar_beams=sensors.lidar(preset).beams // d.every)
    ex = self._render(index, scfg, window)
    dense = ex["dense"]
    if d.source == "vo":  # from the visible surface within the LiDAR's range, in place of the LiDAR
      ex["sparse"] = sensors.vo_points(np.where(dense < s.max_range_m, dense, 0.0), d.vo_density, rng)
    sparse = sensors.apply_transforms(ex["sparse"], d, rng)
    ex["sparse"] = sparse
    ex["disturbed"] = (sparse > 0) & ((dense == 0) | (np.abs(sparse - dense) > s.disturbed_threshold_m))
    ex["sensor"] = np.asarray(d.name)
    return ex

  def _render(self, index, scfg: synthetic.SyntheticConfig, window):
    c, s = self._cfg, self._scfg
    if self._cache is not None and scfg == s:
      ex = self._cache.lookup(c.synthetic_seed, self._stream, int(index), window or (0, 0, s.height, s.width))
      if ex is not None:
        return ex
    return synthetic.generate(c.synthetic_seed, int(index), scfg, window=window, stream=self._stream)


class _Real(grain.transforms.RandomMap):
  """TFDS record -> float32 metres (KITTI uint16/256; NYU float32), NYU sparsifier, crop."""

  def __init__(self, cfg: DataConfig):
    self._cfg = cfg

  def random_map(self, rec, rng: np.random.Generator):
    c = self._cfg
    d = sensors.draw(c.sensors, rng) if c.sensors else None
    if c.dataset == "kitti_depth":
      sparse = np.asarray(rec["sparse"], np.float32) / np.float32(256.0)
      target = np.asarray(rec["target"], np.float32) / np.float32(256.0)
      if d is not None and d.source == "vo":  # from the semi-dense ground truth, in place of the LiDAR
        sparse = sensors.vo_points(target, d.vo_density, rng)
      elif d is not None and d.every > 1:  # the full frame: its lasers counted from the top
        sparse = sensors.thin_depth(sparse, d.every, *kitti_camera(*sparse.shape[:2]))
    else:
      target = np.asarray(rec["depth"], np.float32)
      target = np.where(np.isfinite(target) & (target > 0), target, np.float32(0.0))
      if d is not None and d.source == "vo":
        sparse = sensors.vo_points(target, d.vo_density, rng)
      else:
        sparse = sparsify.uniform_sparsify(target, c.nyu_num_samples, rng)
    if d is not None:
      sparse = sensors.apply_transforms(sparse, d, rng)
    name = rec["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    ex = {"sparse": sparse, "target": target, "name": np.asarray(name)}
    if d is not None:
      ex["sensor"] = np.asarray(d.name)
    ex = _crop(ex, c, rng)
    ex["valid"] = ex["target"] > 0
    return ex


def kitti_camera(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
  """(K, T_cam_from_lidar) of a KITTI depth-completion frame of height x width, for pitch binning: the 2011_09_26
  calibration (K of P_rect_02, the LiDAR mount of `synthetic.kitti_lidar_to_camera`), the frame taken as the
  bottom-centre crop of its 375 x 1242 image, as val_selection_cropped is (352 x 1216: cx 596.56, cy 149.85). The
  other days' cameras differ by up to ~2 % in focal length and ~12 px in principal point: a near-uniform shift of
  the elevations, which the clustering of `sensors.depth_laser_ids` does not depend on (docs/deploy/sensors.md)."""
  K = np.array([[synthetic.KITTI_FX, 0.0, synthetic.KITTI_CX + (width - synthetic.KITTI_WIDTH) / 2],
                [0.0, synthetic.KITTI_FY, synthetic.KITTI_CY + (height - synthetic.KITTI_HEIGHT)],
                [0.0, 0.0, 1.0]])
  T = np.eye(4)
  T[:3, :3], T[:3, 3] = synthetic.LIDAR_ROTATION, synthetic.LIDAR_ORIGIN
  return K, T


register_dataset("synthetic", Dataset(("train", "val", "test"), generated=True, make_map=_Synthetic,
                                      sensor_sources=("native", "lidar", "vo"), native_lidar="hdl64"))
register_dataset("kitti_depth", Dataset(("train", "val", "selval", "test"), generated=False, make_map=_Real,
                                        sensor_sources=("native", "vo"), native_lidar="hdl64"))
register_dataset("nyu_depth", Dataset(("train", "val"), generated=False, make_map=_Real,
                                      sensor_sources=("native", "vo")))


def _source(cfg: DataConfig) -> grain.MapDataset:
  if is_generated(cfg.dataset):
    return grain.MapDataset.range(cfg.synthetic_size)
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  from pncnn_jax.data import kitti_depth, nyu_depth  # noqa: F401  (registers the builders)
  split = cfg.split
  from pncnn_jax.data import build  # pylint: disable=g-import-not-at-top
  build.check_prepared(cfg.dataset, cfg.data_dir, split)  # else TFDS would start building it there
  src = tfds.data_source(cfg.dataset, split=split, data_dir=cfg.data_dir)
  return grain.MapDataset.source(src)


def make_dataset(config) -> grain.MapDataset:
  """The batched MapDataset described in the module docstring (before conversion to an iterator)."""
  cfg = DataConfig.from_mapping(config)
  cfg.validate()
  train = cfg.split == "train"
  shuffle = train if cfg.shuffle is None else cfg.shuffle
  drop = train if cfg.drop_remainder is None else cfg.drop_remainder
  ds = _source(cfg)
  if len(ds) == 0:
    raise ValueError(f"{cfg.dataset}/{cfg.split} is empty")
  if shuffle:
    ds = ds.shuffle(seed=cfg.seed)
  ds = ds.repeat(cfg.num_epochs)
  ds = ds.random_map(DATASETS[cfg.dataset].make_map(cfg), seed=cfg.seed)
  ds = ds.batch(cfg.batch_size, drop_remainder=drop)
  if cfg.shard_count > 1:
    if drop and cfg.num_epochs is not None:  # only full global batches: the same number on every host
      ds = ds[:len(ds) // cfg.shard_count * cfg.shard_count]
    ds = ds[cfg.shard_index::cfg.shard_count]
    if len(ds) == 0:
      raise ValueError(f"{cfg.dataset}/{cfg.split}: host {cfg.shard_index} of {cfg.shard_count} gets no batch of "
                       f"{cfg.batch_size} examples")
  return ds


def make_iterator(config) -> grain.DatasetIterator:
  """A checkpointable iterator of batches (see `pncnn_jax.data` for the batch format)."""
  cfg = DataConfig.from_mapping(config)
  ds = make_dataset(cfg)
  opts = grain.ReadOptions(num_threads=cfg.num_threads, prefetch_buffer_size=cfg.prefetch)
  return iter(ds.to_iter_dataset(opts))
