"""grain pipeline: batch format, deterministic order, epochs, sharding, resume, crops, sparsifier."""

import json

import numpy as np
import pytest

from pncnn_jax.data import io, make_iterator, sparsify

from conftest import DATA

SMALL = dict(dataset="synthetic", split="train", crop="random", crop_height=32, crop_width=64,
             batch_size=2, seed=0, synthetic_size=8, num_threads=1)


def _batches(it, n):
  for i, b in enumerate(it):
    if i >= n:
      break
    yield b


def _names(it, n=None):
  out = []
  for i, b in enumerate(it):
    if n is not None and i >= n:
      break
    out.append(b["name"].tolist())
  return out


def test_batch_format():
  b = next(make_iterator(SMALL))
  for k in ("sparse", "target", "dense"):
    assert b[k].shape == (2, 32, 64, 1) and b[k].dtype == np.float32
  assert b["valid"].dtype == bool and b["disturbed"].dtype == bool and b["name"].shape == (2,)
  np.testing.assert_array_equal(b["valid"], b["target"] > 0)


def test_order_is_deterministic_and_reshuffled_each_epoch():
  cfg = dict(SMALL, num_epochs=2)
  a = _names(make_iterator(cfg))
  assert a == _names(make_iterator(cfg))
  assert len(a) == 8  # 2 epochs x 8 examples / batch 2
  e1, e2 = sum(a[:4], []), sum(a[4:], [])
  assert sorted(e1) == list(range(8)) and sorted(e2) == list(range(8))
  assert e1 != e2 and e1 != list(range(8))
  assert a != _names(make_iterator(dict(cfg, seed=1)))
  # Unshuffled eval split: in order, last partial batch kept.
  ev = dict(SMALL, split="val", synthetic_size=5, crop="center")
  assert _names(make_iterator(ev)) == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize("split,num_epochs", [("train", 2), ("train", None), ("val", 1)])
def test_shards_are_row_blocks_of_the_single_host_batches(split, num_epochs):
  """With S hosts of batch p, global batch k is host 0's batch k, then host 1's, ...: row for row (random crops
  included) the single-host batch k of size S p. The global batches, hence the training, do not depend on the
  number of hosts; each host renders only its own rows."""
  cfg = dict(SMALL, split=split, num_epochs=num_epochs, synthetic_size=9, batch_size=4)
  n = None if num_epochs is None else 10
  single = list(_batches(make_iterator(cfg), n or 6))
  shards = [list(_batches(make_iterator(dict(cfg, batch_size=2, shard_index=i, shard_count=2)), n or 6))
            for i in range(2)]
  if split == "train":  # fixed shapes: only full global batches (epochs run on: 2 x 9 // 4 = 4), on every host
    assert len(single) == len(shards[0]) == len(shards[1]) == (6 if n is None else 9 * num_epochs // 4)
  else:  # in order, the last global batch partial: 9 = 4 + 4 + 1 (host 1 has no row of it)
    assert [len(b["name"]) for b in single] == [4, 4, 1]
    assert [len(b["name"]) for b in shards[0]] == [2, 2, 1] and [len(b["name"]) for b in shards[1]] == [2, 2]
  for k, want in enumerate(single):
    parts = [s[k] for s in shards if k < len(s)]
    for key in ("name", "sparse", "target"):
      np.testing.assert_array_equal(np.concatenate([b[key] for b in parts]), want[key])


def test_resume_continues_at_the_same_sample():
  cfg = dict(SMALL, num_epochs=None)
  it = make_iterator(cfg)
  for _ in range(5):
    next(it)
  state = json.loads(json.dumps(it.get_state()))  # survives serialisation
  expected = [next(it) for _ in range(3)]
  it2 = make_iterator(cfg)
  it2.set_state(state)
  for want in expected:
    got = next(it2)
    for k in want:
      np.testing.assert_array_equal(got[k], want[k])


def test_synthetic_crop_matches_generator_window():
  from pncnn_jax.data import synthetic
  b = next(make_iterator(dict(SMALL, split="val", crop="bottom", crop_height=64, crop_width=128,
                              batch_size=1)))
  ex = synthetic.generate(0, 0, window=(352 - 64, round((1216 - 128) / 2), 64, 128), stream=1)
  np.testing.assert_array_equal(b["sparse"][0], ex["sparse"])


@pytest.mark.parametrize("hw,mode,want", [((375, 1242), "center", (12, 13)), ((376, 1241), "center", (12, 12)),
                                          ((374, 1238), "center", (11, 11)), ((370, 1224), "center", (9, 4)),
                                          ((370, 1226), "center", (9, 5)), ((375, 1242), "bottom", (23, 13)),
                                          ((376, 1241), "bottom", (24, 12))])
def test_crop_offsets_reference_table(hw, mode, want):
  # docs/SPEC.md §10.3 (round half to even) and SOURCES.md's val_selection-style crops.
  assert sparsify.crop_offsets(*hw, 352, 1216, mode) == want


def test_bad_config_messages():
  with pytest.raises(ValueError, match="unknown data config keys.*'batchsize'"):
    make_iterator(dict(SMALL, batchsize=3))
  with pytest.raises(ValueError, match="split of synthetic"):
    make_iterator(dict(SMALL, split="selval"))
  with pytest.raises(FileNotFoundError, match="kitti_depth needs data_dir .* pncnn_jax.data.build kitti_depth"):
    make_iterator(dict(SMALL, dataset="kitti_depth"))
  with pytest.raises(ValueError, match="larger than the image"):
    sparsify.crop_offsets(100, 100, 352, 1216, "center")


def test_uniform_sparsifier_on_real_nyu():
  depth = io.read_nyu_depth(DATA / "nyu_mini/depth/sync_depth_00050.png")
  n_valid = int((depth > 0).sum())
  counts = []
  for seed in range(20):
    s = sparsify.uniform_sparsify(depth, 1000, np.random.default_rng(seed))
    assert np.all((s == 0) | (s == depth)) and not np.any((s > 0) & (depth == 0))
    counts.append(int((s > 0).sum()))
  # Binomial(n_valid, 1000 / n_valid): mean 1000, sd ~ sqrt(1000 (1 - p)) ~ 31.
  sd = np.sqrt(1000 * (1 - 1000 / n_valid))
  assert abs(np.mean(counts) - 1000) < 4 * sd / np.sqrt(20)
  assert len(set(counts)) > 1
  a = sparsify.uniform_sparsify(depth, 1000, np.random.default_rng(7))
  np.testing.assert_array_equal(a, sparsify.uniform_sparsify(depth, 1000, np.random.default_rng(7)))
