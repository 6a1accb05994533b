"""Configs: every variant loads, the published recipe is the default, typos and unknown variants fail."""

import pytest

from pncnn_jax import from_config
from pncnn_jax.nn import models

from conftest import REPO

KITTI_VARIANTS = ("ncnn", "ncnn_conf_l1", "ncnn_conf_l2", "pncnn", "pncnn_exp", "no_conf_est", "no_var_est",
                  "depth_pred", "laplace", "pncnn_beta", "sparse_var")


def cfg(name, variant):
  return from_config.load_config(f"{REPO}/configs/{name}.py:{variant}")


@pytest.mark.parametrize("variant", KITTI_VARIANTS)
def test_kitti_variants_follow_the_published_recipe(variant):
  c = cfg("kitti", variant)
  assert c.variant == variant and from_config.variant_loss(c) == models.VARIANTS[variant].loss
  # docs/SPEC.md §11.2: Adam lr 0.01, x0.1 every 5 epochs, batch 4, 10 epochs, centre crop 352x1216, selval.
  assert (c.learning_rate, c.lr_decay_epochs, c.lr_decay_factor, c.batch_size, c.num_epochs) == (0.01, 5, 0.1, 4, 10)
  assert (c.data.train_crop, c.data.train_crop_height, c.data.train_crop_width) == ("center", 352, 1216)
  assert (c.data.dataset, c.data.eval_split, c.metrics, c.model.nconv_init) == ("kitti_depth", "selval", "kitti",
                                                                               "published")


def test_published_losses():
  variants = ("ncnn_conf_l1", "ncnn_conf_l2", "pncnn", "pncnn_exp")
  assert [from_config.variant_loss(cfg("kitti", v)) for v in variants] == [
      "masked_l1", "masked_l2", "gaussian_nll", "gaussian_nll_exp"]


def test_nyu_recipe():
  l1, p = cfg("nyu", "ncnn_conf_l1"), cfg("nyu", "pncnn")
  # docs/SPEC.md §11.2: batch 8 (ncnn) / 4 (pncnn), x0.1 every 3 epochs, full 480x640, 1000 uniform samples.
  assert (l1.batch_size, p.batch_size, p.lr_decay_epochs, p.num_epochs, p.learning_rate) == (8, 4, 3, 10, 0.01)
  assert (p.data.train_crop, p.data.nyu_num_samples, p.metrics, p.data.eval_split) == ("none", 1000, "nyu", "val")


def test_synthetic_is_cpu_sized():
  for v in ("pncnn", "ncnn_conf_l1"):
    c = cfg("synthetic", v)
    assert c.data.dataset == "synthetic"
    assert c.data.train_crop_height * c.data.train_crop_width <= 128 * 384
    assert from_config.steps_per_epoch(c) * c.num_epochs <= 2000


@pytest.mark.parametrize("name", ["kitti", "nyu", "synthetic"])
def test_unknown_variant_is_a_clear_error(name):
  with pytest.raises(ValueError, match=r"unknown variant 'pncn'"):
    cfg(name, "pncn")


def test_locked_config_rejects_typos():
  c = cfg("kitti", "pncnn")
  c.lock()
  with pytest.raises(AttributeError, match="learning_rat"):
    c.learning_rat = 0.1  # pylint: disable=attribute-defined-outside-init
  with pytest.raises(FileNotFoundError, match="nope.py"):
    from_config.load_config(f"{REPO}/configs/nope.py:pncnn")
