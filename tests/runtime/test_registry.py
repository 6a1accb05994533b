"""The extension seam (pncnn_jax/runtime/registry.py): the core reaches the flow extension by name only."""

import subprocess
import sys

import pytest

from pncnn_jax import evaluate, from_config, losses
from pncnn_jax.data import pipeline
from pncnn_jax.runtime.registry import Registry

from conftest import REPO


def test_a_registry_refuses_a_second_entry_and_names_the_valid_ones():
  r = Registry("widget")
  r.register("a", 1)
  r.register("a", 1)  # the same entry again (a module imported twice) is fine
  with pytest.raises(ValueError, match="widget 'a' is registered already"):
    r.register("a", 2)
  with pytest.raises(ValueError, match="a widget needs a non-empty string name"):
    r.register("", 3)
  with pytest.raises(ValueError, match=r"unknown widget 'b'; valid names: a$"):
    r.lookup("b")
  assert dict(r) == {"a": 1} and "a" in r and "b" not in r


def test_a_cold_process_finds_the_extension_by_name():
  """In a process that never imported pncnn_jax.flow, every core registry finds its flow entries, and the core's
  own imports did not load the extension."""
  code = """
import sys
from pncnn_jax import evaluate, from_config, losses
from pncnn_jax.data import pipeline
from pncnn_jax.training import step
assert "pncnn_jax.flow" not in sys.modules, "the core imported the extension"
losses.get_loss("flow_nll")
assert "pncnn_jax.flow" in sys.modules
assert pipeline.splits("flow_synthetic") == ("train", "val", "test") and pipeline.is_generated("flow_synthetic")
assert evaluate.get_metric_set("flow").evaluator == "flow" and "flow" in evaluate.EVALUATORS
assert from_config.variant_loss({"variant": "flow_pncnn"}) == "flow_nll"
print("ok")
"""
  r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                     env={"JAX_PLATFORMS": "cpu", "PATH": ""})
  assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_what_flow_registers():
  assert {"flow_ncnn", "flow_ncnn_conf", "flow_pncnn", "flow_pncnn_aniso"} <= set(from_config.VARIANTS)
  assert losses.PRECISION_RULES["flow_epe"] is None and losses.is_probabilistic("flow_nll")
  assert not losses.is_probabilistic("masked_l1") and losses.is_probabilistic("gaussian_nll")
  assert losses.get_batch_errors("gaussian_nll") is losses.depth_batch_errors
  from pncnn_jax.flow import losses as flow_losses  # pylint: disable=g-import-not-at-top
  assert losses.get_batch_errors("flow_epe") is flow_losses.batch_errors
  assert {"synthetic", "kitti_depth", "nyu_depth", "flow_synthetic"} <= set(pipeline.DATASETS)
  assert set(evaluate.METRIC_SETS) >= {"kitti", "nyu", "flow"}
  assert set(evaluate.EVALUATORS) >= {"depth", "ensemble", "ensemble_calibration", "flow", "predictive"}
  with pytest.raises(ValueError, match="metrics must be one of .*'kitti'.*got 'foo'"):
    evaluate.get_metric_set("foo")
  with pytest.raises(ValueError, match=r"config.variant='foo' is not a model variant; choose one of .*flow_pncnn"):
    from_config.variant_loss({"variant": "foo"})
