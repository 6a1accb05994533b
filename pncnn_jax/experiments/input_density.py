r"""The input density a model was trained on, as its manifest records it ('input_density').

  python -m pncnn_jax.experiments.input_density pncnn_jax/pretrained/synthetic [--examples 256] [--only NAME,...]

writes the record into every manifest of the folder (`stamp`; the weights are not touched), and
`python -m pncnn_jax.experiments.reproduce --ship` writes it into each manifest it ships (`measure`, called by
`evaluate_runs.ship_weights`). predict, the bag command and `pncnn_jax.Completer` compare every frame's density with
it and warn outside it (docs/deploy/sensors.md, "Which model for which sensor").

`measure(config)` draws the first `examples` examples of the model's own training stream with the pipeline
(`from_config.data_config(config, 'train')`: its dataset, seed, shuffle, scenes and `data.sensors.train`) and
measures each one's input density (`pncnn_jax.data.input_contract.input_density`: the share of pixels holding a
measurement within the rows spanned by measurements) twice:

  train_crop   in the crop the model was trained on (config.data.train_crop*): what its weights saw;
  full_frame   in the whole frame of the same examples (crop 'none'): what a camera gives a user.

Both are needed because a LiDAR's density is not the same in every row: its lasers lie closer together near the
horizon. The shipped synthetic models trained on 64x320 centre crops, which hold 8.7-10.3 % (1st-99th percentile),
while whole frames of the same scenes and LiDAR hold 6.0-6.3 % (and a real KITTI frame of the same HDL-64E 6.1 %):
the crop's range alone would call every whole frame of the very sensor the model was trained on too sparse. The
record's range is therefore [low, high] = [min of the two 1st percentiles, max of the two 99th percentiles]; a
32-beam LiDAR (3.0 % whole, 4.6 % cropped) and visual-odometry points (0.05-0.5 %) fall below it.

The record:
  measure        'rows_spanned' (`input_contract.DENSITY_MEASURE`); a range in another measure is not compared
  low, high      the range, fractions of the pixels (not percent)
  percentiles    [1, 99]; examples: how many were drawn (fewer when the stream is shorter)
  sensors        config.data.sensors.train, or 'native' (the dataset's own sensor)
  trained_on     words for it ('synthetic 64-beam LiDAR', `pipeline.describe_sensors`), as the warnings say
  train_crop, full_frame   {size (H, W; full_frame: the first example's), p1, median, p99}
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any, Sequence

import numpy as np

from pncnn_jax import data, from_config, pretrained
from pncnn_jax.data import input_contract
from pncnn_jax.data import pipeline as data_pipeline

EXAMPLES = 256  # "a few hundred": the 1st and 99th percentiles each rest on 2-3 examples
PERCENTILES = (1.0, 99.0)
BATCH = 16


def _densities(data_cfg: dict[str, Any], examples: int, batch_size: int) -> tuple[np.ndarray, tuple[int, int]]:
  """The densities of the first `examples` examples of a stream, and the (H, W) of its first example."""
  out: list[np.ndarray] = []
  size = None
  for batch in data.make_iterator({**data_cfg, "batch_size": min(batch_size, examples), "drop_remainder": False}):
    sparse = np.asarray(batch["sparse"])[..., 0]
    size = size or tuple(int(s) for s in sparse.shape[1:])
    out.append(input_contract.input_density(sparse, name="training example"))
    if sum(len(d) for d in out) >= examples:
      break
  if not out:
    raise ValueError(f"the training stream of {data_cfg['dataset']} holds no example")
  return np.concatenate(out)[:examples], size


def _summary(d: np.ndarray, size: tuple[int, int]) -> dict[str, Any]:
  p1, median, p99 = np.percentile(d, [PERCENTILES[0], 50.0, PERCENTILES[1]])
  return {"size": list(size), "p1": float(p1), "median": float(median), "p99": float(p99)}


def measure(config, examples: int = EXAMPLES) -> dict[str, Any]:
  """The 'input_density' record of a model trained with `config` (the module doc): its training stream's
  densities in the train crop and in whole frames, and their joint 1st-99th percentile range."""
  if examples < 2:
    raise ValueError(f"examples must be at least 2, got {examples}")
  train = from_config.data_config(config, "train", batch_size=BATCH, num_epochs=1)
  crop, crop_size = _densities(train, examples, BATCH)
  full, full_size = _densities({**train, "crop": "none"}, examples, 1)  # whole KITTI frames differ in size
  a, b = _summary(crop, crop_size), _summary(full, full_size)
  sensors_name = from_config.sensors_name(config, "train") or "native"
  return {"measure": input_contract.DENSITY_MEASURE, "low": min(a["p1"], b["p1"]), "high": max(a["p99"], b["p99"]),
          "percentiles": list(PERCENTILES), "examples": int(len(crop)), "sensors": sensors_name,
          "trained_on": data_pipeline.describe_sensors(config.data.dataset, sensors_name),
          "train_crop": a, "full_frame": b}


def stamp(directory: str | pathlib.Path, examples: int = EXAMPLES, only: Sequence[str] = (),
          log=print) -> dict[str, dict[str, Any]]:
  """Measures and writes the 'input_density' of every shipped model in `directory` (or those of `only`), each
  training stream once (models of one data config share it); returns {name: record}."""
  import ml_collections  # pylint: disable=g-import-not-at-top

  d = pathlib.Path(directory)
  names = pretrained.available(d.name, d.parent)
  if not names:
    raise FileNotFoundError(f"{d}: no shipped models (<name>.npz with <name>.json)")
  unknown = sorted(set(only) - set(names))
  if unknown:
    raise ValueError(f"--only {','.join(unknown)}: not in {d} (it has {', '.join(names)})")
  done: dict[str, dict[str, Any]] = {}
  by_stream: dict[str, dict[str, Any]] = {}
  for name in [n for n in names if not only or n in only]:
    config = ml_collections.ConfigDict(json.loads((d / f"{name}.json").read_text())["config"])
    key = json.dumps({**from_config.data_config(config, "train", batch_size=BATCH, num_epochs=1),
                      "examples": examples}, sort_keys=True)
    if key not in by_stream:
      t = time.perf_counter()
      by_stream[key] = measure(config, examples)
      r = by_stream[key]
      log(f"[{name}] input density {100 * r['low']:.2f}-{100 * r['high']:.2f} % ({r['trained_on']}; train crop "
          f"{100 * r['train_crop']['p1']:.2f}-{100 * r['train_crop']['p99']:.2f} %, whole frames "
          f"{100 * r['full_frame']['p1']:.2f}-{100 * r['full_frame']['p99']:.2f} %; {r['examples']} examples, "
          f"{time.perf_counter() - t:.0f} s)")
    else:
      log(f"[{name}] the same training stream as a model above")
    pretrained.update_manifest(d, name, {"input_density": by_stream[key]})
    done[name] = by_stream[key]
  return done


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m pncnn_jax.experiments.input_density",
                                   description=__doc__.splitlines()[0])
  parser.add_argument("directory", help="a folder of shipped models (pncnn_jax/pretrained/synthetic)")
  parser.add_argument("--examples", type=int, default=EXAMPLES, help="training examples drawn per model")
  parser.add_argument("--only", default="", help="comma-separated model names (default: every one)")
  args = parser.parse_args(argv)
  try:
    stamp(args.directory, args.examples, [n.strip() for n in args.only.split(",") if n.strip()])
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
