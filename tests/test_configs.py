"""Configs: every variant loads, the published recipe is the default, typos and unknown variants fail."""

import pytest

from pncnn_jax import from_config
from pncnn_jax.nn import models
from pncnn_jax.training import config_fields

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


# ------------------------------------------------------------------------------------------------------------
# The table of config fields (config_fields.FIELDS): every field has a rule, each rule refuses what it should.

ALL_CONFIGS = ["synthetic.py:pncnn", "kitti.py:pncnn", "nyu.py:ncnn_conf_l1", "ensemble_synthetic.py:pncnn",
               "flow_synthetic.py:flow_pncnn"]


def _leaves(c, prefix=""):
  for k, v in c.items():
    if hasattr(v, "items"):
      yield from _leaves(v, f"{prefix}{k}.")
    else:
      yield f"{prefix}{k}"


@pytest.mark.parametrize("spec", ALL_CONFIGS)
def test_every_field_of_every_config_has_a_rule_and_passes(spec):
  c = from_config.load_config(f"{REPO}/configs/{spec}")
  assert sorted(set(_leaves(c)) - set(config_fields.FIELDS)) == []  # a new field needs a row in the table
  config_fields.check_config(c)
  config_fields.check_config(c, training=False)


@pytest.mark.parametrize("field,value,message", [
    ("learning_rate", 0.0, "must be a finite number > 0"),
    ("grad_clip_norm", -1.0, "must be a finite number >= 0 (0: no clipping)"),
    ("num_epochs", 0, "must be an integer >= 1"),
    ("num_epochs", -3, "must be an integer >= 1"),
    ("batch_size", 0, "must be an integer >= 1"),
    ("steps_per_epoch", 0, "must be an integer >= 1, or -1 (one pass over the split)"),
    ("data.train_crop_width", -5, "must be an integer >= 8 (the model halves the frame three times)"),
    ("lr_decay_factor", -1.0, "must be a finite number in (0, 1]"),
    ("lr_decay_factor", 1.5, "must be a finite number in (0, 1]"),
    ("lr_decay_epochs", 0, "must be an integer >= 1"),
    ("log_every_steps", 0, "must be an integer >= 1"),
    ("metrics", "foo", "must be one of 'flow', 'kitti', 'nyu'"),
    ("num_eval_batches", 0, "must be an integer >= 1, or -1 (the whole split)"),
    ("eval_every_steps", 0, "must be an integer >= 1, or -1 (at the end of each epoch only)"),
    ("checkpoint_every_steps", -2, "must be an integer >= 1, or -1 (after each validation only)"),
    ("steps_per_call", 0, "must be an integer >= 1, or -1 (the platform's choice)"),
    ("max_to_keep", 0, "must be an integer >= 1"),
    ("num_panels", -1, "must be an integer >= 0"),
    ("seed", -1, "must be an integer >= 0"),
    ("data.eval_synthetic_size", 0, "must be an integer >= 1"),
    ("data.synthetic_size", 0, "must be an integer >= 1"),
    ("data.num_threads", 0, "must be an integer >= 1"),
    ("data.train_crop_height", 7, "must be an integer >= 8 (the model halves the frame three times)"),
    ("data.eval_crop_width", 4, "must be an integer >= 8 (the model halves the frame three times)"),
    ("data.train_crop", "middle", "must be one of 'none', 'center', 'bottom', 'random'"),
    ("data.eval_split", "nope", "must be one of 'train', 'val', 'test'"),
    ("data.dataset", "kitty", "must be one of 'flow_synthetic', 'kitti_depth', 'nyu_depth', 'synthetic'"),
    ("model.conv_precision", "foo", "must be one of 'default', 'high', 'highest'"),
    ("data.sensors.train", "radar", "must be one of 'depth_camera_mix', 'dropout', 'hdl32', 'hdl64', "),
    ("data.sensors.eval", "lidar64", "must be one of 'depth_camera_mix', 'dropout', 'hdl32', 'hdl64', "),
    ("model.nconv_init", "xavier", "must be one of 'published', 'repo'"),
    ("loss", "l3", "must be one of "),
    ("variant", "pncn", "must be one of "),
])
def test_each_field_out_of_range_is_named_with_its_allowed_values(field, value, message):
  """lr_decay_factor=-1 trained uphill with exit 0; log_every_steps=0 was a ZeroDivisionError after compiling;
  metrics=foo, num_eval_batches=0, eval_synthetic_size=0 failed after a whole epoch; a 7-pixel crop failed in numpy;
  conv_precision=foo gave jax's message without the field."""
  c = from_config.load_config(f"{REPO}/configs/synthetic.py:pncnn")
  *parents, last = field.split(".")
  node = c
  for p in parents:
    node = node[p]
  node[last] = value
  with pytest.raises(from_config.ConfigError) as e:
    config_fields.check_config(c)
  assert str(e.value).startswith(f"config.{field}={value!r}: {message}"), str(e.value)


def test_sensor_fields_name_their_values_and_fit_the_dataset():
  c = from_config.load_config(f"{REPO}/configs/synthetic.py:pncnn")
  c.data.sensors.train = "radar"
  with pytest.raises(from_config.ConfigError) as e:
    config_fields.check_config(c)
  assert str(e.value).endswith(", 'vlp16', 'vo', 'vo_015', or '' (the dataset's own sensor)"), str(e.value)
  c = from_config.load_config(f"{REPO}/configs/nyu.py:pncnn")
  c.data.sensors.eval = "lidar_mix"
  with pytest.raises(from_config.ConfigError, match=r"^config.data.sensors.eval='lidar_mix': sensors 'lidar_mix': "
                                                    r"sensor 'lidar_any' has source 'lidar', which nyu_depth cannot "
                                                    r"make .* nyu_depth takes sensors of source 'native' or 'vo'$"):
    config_fields.check_config(c, training=False)
  c.data.sensors.eval = "depth_camera_mix"
  config_fields.check_config(c, training=False)


def test_synthetic_config_on_a_sensor_mixture():
  """configs/synthetic.py:<variant>,<mixture>: the recipe unchanged, the mixture in both streams."""
  plain, mixed = cfg("synthetic", "pncnn"), cfg("synthetic", "pncnn,lidar_mix")
  assert (plain.data.sensors.train, plain.data.sensors.eval) == ("", "")
  assert (mixed.data.sensors.train, mixed.data.sensors.eval) == ("lidar_mix", "lidar_mix")
  mixed.data.sensors.train = mixed.data.sensors.eval = ""
  assert mixed.to_dict() == plain.to_dict()
  mixed = cfg("synthetic", "pncnn,lidar_mix")
  config_fields.check_config(mixed)
  assert from_config.data_config(mixed, "train", batch_size=4, num_epochs=1)["sensors"] == "lidar_mix"
  assert from_config.data_config(plain, "eval", batch_size=4, num_epochs=1)["sensors"] == ""
  assert cfg("ensemble_synthetic", "pncnn,lidar_mix").data.sensors.train == "lidar_mix"
  with pytest.raises(ValueError, match=r"configs/synthetic.py: unknown sensor mixture 'lidar_mx'; choose one of "
                                       r"depth_camera_mix, dropout, "):
    cfg("synthetic", "pncnn,lidar_mx")


def test_training_only_fields_are_not_checked_for_evaluation():
  c = from_config.load_config(f"{REPO}/configs/synthetic.py:pncnn")
  c.log_every_steps = 0
  config_fields.check_config(c, training=False)
  c.num_eval_batches = 0
  with pytest.raises(from_config.ConfigError, match=r"config.num_eval_batches=0"):
    config_fields.check_config(c, training=False)


@pytest.mark.parametrize("field,value,message", [
    ("ensemble.select_rule", "median", "must be one of 'mean', 'weighted_mean', 'max_confidence', 'mle'"),
    ("ensemble.rules", ("mean", "vote"), "must be a non-empty tuple of some of 'mean', "),
    ("ensemble.subset_fraction", 0.0, "must be a finite number in (0, 1]"),
    ("ensemble.seeds", (1, 1, 2, 3), "must be () (seed + k) or 4 distinct integers"),
    ("ensemble.mle_steps", 0, "must be an integer >= 1"),
])
def test_ensemble_fields(field, value, message):
  c = from_config.load_config(f"{REPO}/configs/ensemble_synthetic.py:pncnn")
  c.ensemble[field.split(".")[1]] = value
  with pytest.raises(from_config.ConfigError) as e:
    config_fields.check_config(c)
  assert str(e.value).startswith(f"config.{field}=") and message in str(e.value), str(e.value)


def test_fields_added_later_say_what_older_runs_were_trained_as():
  """data.sensors and init_from came after runs (the shipped models, a user's demo_out) were written: their
  config.json lacks them and they were trained on the dataset's own sensor from scratch, which are also the
  defaults, so resuming them is no change."""
  assert config_fields.predating_values() == {"init_from": "", "data": {"sensors": {"train": "", "eval": ""}}}
  base = from_config.load_config(f"{REPO}/configs/synthetic.py:pncnn")
  for path, field in config_fields.FIELDS.items():
    if field.before is not config_fields.UNSET:
      node = base
      for part in path.split("."):
        node = node[part]
      assert node == field.before, path  # today's default is what the older runs did
