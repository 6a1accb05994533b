"""The shipped weights (pncnn_jax/pretrained/): each loads by name through the one loader and reproduces the
metrics its manifest recorded on the first validation scenes (`evaluate_runs.check_metrics`)."""

import math

import ml_collections
import numpy as np
import pytest

from pncnn_jax import pretrained
from pncnn_jax.checkpoints import loader
from pncnn_jax.experiments import evaluate_runs
from pncnn_jax.nn import models

SHIPPED = pretrained.available("synthetic")


def test_weights_are_shipped():
  assert {"ncnn", "pncnn_masked", "ncnn_conf_l1_masked"} <= set(SHIPPED), SHIPPED


@pytest.fixture(scope="module")
def scene_cache(tmp_path_factory):
  """One on-disk copy of the check scenes (data/synthetic_cache.py) for every model's check."""
  return str(tmp_path_factory.mktemp("check_scenes"))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_model_matches_its_manifest(name, scene_cache):
  loaded = loader.load(f"synthetic:{name}")
  variables, manifest = pretrained.load(f"synthetic:{name}")
  assert loaded.variant == manifest["variant"] and loaded.meta["step"] == manifest["step"]
  for k in ("command", "commit", "scale", "recipe", "step", "device", "config", "validation", "check"):
    assert k in manifest, k
  model = loaded.build_model()
  assert model.mask_input_confidence == manifest["mask_input_confidence"]
  assert models.count_params(variables["params"]) > 0
  got = evaluate_runs.check_metrics(ml_collections.ConfigDict(manifest["config"]), loaded.variables,
                                    cache_dir=scene_cache)
  want = manifest["check"]
  for key in ("mae", "rmse", "imae", "irmse", "ause_pncnn", "ause_gustafsson", "auce", "nll", "auroc_disturbed"):
    if key in want:
      # Float32 convolutions summed in another order (another CPU, another XLA) move these by ~1e-6 relative.
      assert math.isclose(got[key], want[key], rel_tol=1e-4, abs_tol=1e-6), (key, got[key], want[key])


def test_unknown_shipped_name_lists_the_available_ones():
  with pytest.raises(ValueError, match="available: synthetic:"):
    loader.load("synthetic:no_such_model")
  assert np.all([pretrained.parse(f"synthetic:{n}") == ("synthetic", n) for n in SHIPPED])
