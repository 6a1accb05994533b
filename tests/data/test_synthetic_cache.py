"""The scene cache (`pncnn_jax.data.synthetic_cache`) across generator versions: a cache written before the LiDAR
presets (its meta has no `lidar`, azimuth_step_deg 0.175 and lidar_beams 64 spelled out) serves the default config
as before, and refuses another preset."""

import json

import numpy as np
import pytest

from pncnn_jax.data import synthetic, synthetic_cache

WINDOW = (144, 448, 16, 32)
# synthetic_config of meta.json as main at fdf9add wrote it (the fields of SyntheticConfig() then).
OLD_CONFIG = {"height": 352, "width": 1216, "fx": 721.5377, "fy": 721.5377, "cx": 596.5593, "cy": 149.854,
              "azimuth_step_deg": 0.175, "range_noise_m": 0.02, "dropout": 0.01, "far_dropout": 0.1,
              "max_range_m": 100.0, "lidar_beams": 64, "sky_depth_m": 200.0, "gt_max_depth_m": 80.0, "gt_fill": 0.32,
              "disturbed_threshold_m": 1.0}


def test_a_cache_from_before_the_presets_still_serves_the_default_sensor(tmp_path):
  path = synthetic_cache.build(tmp_path / "c", seed=0, stream=0, window=WINDOW, size=2)
  meta = json.loads((path / "meta.json").read_text())
  assert meta["synthetic_config"]["lidar"] == "hdl64" and meta["synthetic_config"]["azimuth_step_deg"] == 0.175
  meta["synthetic_config"] = OLD_CONFIG
  (path / "meta.json").write_text(json.dumps(meta))
  cache = synthetic_cache.SceneCache(path)
  ex = cache.lookup(0, 0, 1, WINDOW)
  ref = synthetic.generate(0, 1, window=WINDOW)
  for k in ("sparse", "target", "dense", "disturbed"):
    np.testing.assert_array_equal(ex[k], ref[k])
  assert synthetic_cache.build(path, seed=0, stream=0, window=WINDOW, size=2) == path  # kept as it is
  with pytest.raises(ValueError, match="cache of another generator version or SyntheticConfig; rebuild it"):
    synthetic_cache.SceneCache(path, synthetic.SyntheticConfig(lidar="vlp16"))
  with pytest.raises(ValueError, match="holds a synthetic cache of other settings"):
    synthetic_cache.build(path, seed=0, stream=0, window=WINDOW, size=2,
                          config=synthetic.SyntheticConfig(lidar_beams=32))
