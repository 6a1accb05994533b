"""pncnn_jax.checkpoints.convert: official checkpoints (legacy torch pickles, .npz state dicts) -> our variables.

Golden values: ../shared/reference/weights/*.npz (state dicts extracted by the reference with torch),
golden/checkpoints_info.json (args, epoch, sha256 recorded by the reference), docs/SPEC.md §12 sanity values.
"""

import collections
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from torch_fakes import (
  _fake_torch_modules,
  _FakeStorage,
  _FakeTensor,
  _legacy_file,
  _module,
  _write_legacy,
  write_crafted_stride_zero,
)

from pncnn_jax.checkpoints import convert, manager
from pncnn_jax.nn import layers, models

from conftest import GOLDEN, REFERENCE, REPO, WEIGHTS, load_npz, nchw_to_nhwc

CKPTS = REFERENCE / "checkpoints"
OFFICIAL = {  # checkpoint file stem -> (weights npz, variant, dataset)
    "kitti_ncnn_conf_l1": ("kitti_ncnn_conf_l1", "ncnn_conf_l1", "kitti_depth"),
    "kitti_ncnn_conf_l2": ("kitti_ncnn_conf_l2", "ncnn_conf_l2", "kitti_depth"),
    "nyu_ncnn_conf_l1": ("nyu_ncnn_conf_l1", "ncnn_conf_l1", "nyudepthv2"),
}
STATE_DICT_NPZ = ["kitti_ncnn_conf_l1", "kitti_ncnn_conf_l2", "kitti_ncnn_conf_l2_model_best", "nyu_ncnn_conf_l1",
                  "nyu_ncnn_conf_l1_model_best", "kitti_pncnn_rand0", "kitti_pncnn_exp_rand1"]
WITH_EFFECTIVE = ["kitti_ncnn_conf_l1", "kitti_ncnn_conf_l2", "nyu_ncnn_conf_l1", "kitti_pncnn_rand0",
                  "kitti_pncnn_exp_rand1"]


def ckpt_path(stem):
  return CKPTS / f"{stem}_checkpoint-9.pth.tar"


@pytest.fixture(scope="module")
def checkpoints_info(shared_dir):
  with open(GOLDEN / "checkpoints_info.json") as f:
    return json.load(f)


def flatten(tree, prefix=()):
  out = {}
  for k, v in tree.items():
    if isinstance(v, dict):
      out.update(flatten(v, prefix + (k,)))
    else:
      out[prefix + (k,)] = v
  return out


# ------------------------------------------------------------------------------------------------------------
# Official .pth.tar files


@pytest.mark.parametrize("stem", sorted(OFFICIAL))
def test_official_checkpoint_equals_reference_state_dict(shared_dir, checkpoints_info, stem):
  npz_name, variant, dataset = OFFICIAL[stem]
  ref = load_npz(WEIGHTS / f"{npz_name}.npz")

  # The raw state_dict read from the pickle equals the torch-extracted one, key by key, in torch order.
  obj = convert.read_torch_legacy(ckpt_path(stem))
  sd = convert.module_state_dict(obj["model"])
  assert list(sd) == list(ref)
  for k in ref:
    assert sd[k].dtype == ref[k].dtype and sd[k].shape == ref[k].shape, k
    np.testing.assert_array_equal(sd[k], ref[k], err_msg=k)

  # Through our variables and back: still exact.
  variables, info = convert.load_official(ckpt_path(stem))
  back = convert.variables_to_state_dict(variables, info["num_batches_tracked"])
  assert list(back) == list(ref)
  for k in ref:
    assert back[k].dtype == ref[k].dtype, k
    np.testing.assert_array_equal(back[k], ref[k], err_msg=k)

  golden = checkpoints_info[f"{stem}/checkpoint-9.pth.tar"]
  assert info["variant"] == variant and info["variant_source"] == "args.loss"
  assert info["dataset"] == dataset
  assert info["epoch"] == golden["epoch"] == 9
  assert info["args"] == golden["args"]
  assert info["conf_estimator_class"] == "common.unet.UNet"
  assert len(info["num_batches_tracked"]) == 14
  assert convert.file_sha256(ckpt_path(stem)) == golden["sha256"]


def test_sanity_values_of_kitti_l1(shared_dir):
  """docs/SPEC.md §12: NConv biases, effective-weight sums per output channel, outc bias, BN batch count."""
  variables, info = convert.load_official(ckpt_path("kitti_ncnn_conf_l1"))
  nconv = variables["params"]["nconv"]
  table = {  # layer: (bias, sum of softplus_10(W_p) per output channel)
      1: ([-0.019406, -0.151036], [22.0623, 8.0641]),
      2: ([-0.012289, -0.000252], [72.1178, 12.7283]),
      3: ([-0.080679, -0.056350], [23.5230, 27.1762]),
      4: ([0.032401, 0.073301], [76.3968, 34.1915]),
      5: ([0.038050, 0.045524], [66.6207, 24.9618]),
      6: ([-0.097355, -0.092742], [15.3267, 59.8344]),
      7: ([0.313392], [26.8272]),
  }
  for k, (bias, wsum) in table.items():
    np.testing.assert_allclose(nconv[f"nconv{k}"]["bias"], bias, atol=1e-6)
    w = np.asarray(layers.softplus_beta(jnp.asarray(nconv[f"nconv{k}"]["kernel_p"])))
    np.testing.assert_allclose(w.sum(axis=(0, 1, 2)), wsum, atol=1e-4)
  np.testing.assert_allclose(variables["params"]["conf_estimator"]["outc"]["bias"], [-4.62863], atol=1e-5)
  assert info["num_batches_tracked"]["conf_estimator.inc.conv.conv.1.num_batches_tracked"] == 214750
  # The legacy pickle also stores the summed best_result (docs/SPEC.md §12): 1,069,424 / 1000 = 1069.42 mm.
  assert info["best_result"]["metrics"]["rmse"] / info["best_result"]["cnt"] == pytest.approx(1069.424, abs=1e-3)


def test_layout_transposes(shared_dir):
  """OIHW -> HWIO and BN names, checked element-wise against the torch names."""
  ref = load_npz(WEIGHTS / "kitti_ncnn_conf_l1.npz")
  v, _ = convert.state_dict_to_variables(ref)
  w = ref["conf_estimator.up3.conv.conv.0.weight"]  # (32, 96, 3, 3)
  k = v["params"]["conf_estimator"]["up3"]["conv0"]["kernel"]  # (3, 3, 96, 32)
  assert k.shape == (3, 3, 96, 32)
  assert k[2, 0, 95, 7] == w[7, 95, 2, 0]
  assert v["params"]["nconv"]["nconv4"]["kernel_p"][1, 2, 3, 0] == ref["nconv.nconv4.weight_p"][0, 3, 1, 2]
  bn = "conf_estimator.down2.mpconv.1.conv.4"
  np.testing.assert_array_equal(v["params"]["conf_estimator"]["down2"]["bn1"]["scale"], ref[f"{bn}.weight"])
  np.testing.assert_array_equal(v["params"]["conf_estimator"]["down2"]["bn1"]["bias"], ref[f"{bn}.bias"])
  np.testing.assert_array_equal(v["batch_stats"]["conf_estimator"]["down2"]["bn1"]["mean"], ref[f"{bn}.running_mean"])
  np.testing.assert_array_equal(v["batch_stats"]["conf_estimator"]["down2"]["bn1"]["var"], ref[f"{bn}.running_var"])


# ------------------------------------------------------------------------------------------------------------
# .npz state dicts


@pytest.mark.parametrize("name", STATE_DICT_NPZ)
def test_npz_round_trip_exact(shared_dir, name):
  ref = load_npz(WEIGHTS / f"{name}.npz")
  variables, structure = convert.state_dict_to_variables(ref)
  assert structure["conf_estimator"] and structure["var_estimator"] == ("pncnn" in name)
  back = convert.variables_to_state_dict(variables, structure["num_batches_tracked"])
  assert list(back) == list(ref)
  for k in ref:
    assert back[k].dtype == ref[k].dtype, k
    np.testing.assert_array_equal(back[k], ref[k], err_msg=k)


@pytest.mark.parametrize("name", WITH_EFFECTIVE)
def test_effective_nconv_weights(shared_dir, name):
  """softplus_10(kernel_p) equals the cached `nconv.nconvK.weight` torch computed (1e-6 relative)."""
  variables, _ = convert.load_official(WEIGHTS / f"{name}.npz")
  eff = load_npz(WEIGHTS / f"{name}__nconv_effective_weights.npz")
  assert sorted(eff) == [f"nconv.nconv{k}.weight" for k in range(1, 8)]
  for k in range(1, 8):
    kp = variables["params"]["nconv"][f"nconv{k}"]["kernel_p"]
    w = np.asarray(layers.softplus_beta(jnp.asarray(kp)))
    np.testing.assert_allclose(w, eff[f"nconv.nconv{k}.weight"].transpose(2, 3, 1, 0), rtol=1e-6, atol=0)


@pytest.mark.parametrize("variant,source,n_params", [
    ("pncnn", WEIGHTS / "kitti_pncnn_rand0.npz", 668_515),
    ("pncnn_exp", WEIGHTS / "kitti_pncnn_exp_rand1.npz", 668_515),
    ("ncnn_conf_l1", ckpt_path("kitti_ncnn_conf_l1"), 334_498),
])
def test_tree_matches_our_model(shared_dir, variant, source, n_params):
  variables, info = convert.load_official(source)
  assert info["variant"] == variant
  ours = jax.eval_shape(lambda: models.init_variables(models.build_model(variant), jax.random.key(0)))
  assert jax.tree.structure(variables) == jax.tree.structure(ours)
  flat, flat_ours = flatten(variables), flatten(ours)
  assert flat.keys() == flat_ours.keys()
  for k in flat:
    assert flat[k].shape == flat_ours[k].shape and flat[k].dtype == flat_ours[k].dtype, k
  assert models.count_params(variables["params"]) == n_params


def test_npz_variant_from_file_name_and_structure(shared_dir, tmp_path):
  assert convert.load_official(WEIGHTS / "kitti_ncnn_conf_l2_model_best.npz")[1]["variant"] == "ncnn_conf_l2"
  assert convert.load_official(WEIGHTS / "nyu_ncnn_conf_l1.npz")[1]["dataset"] == "nyudepthv2"
  renamed = tmp_path / "weights.npz"
  shutil.copy(WEIGHTS / "kitti_pncnn_exp_rand1.npz", renamed)
  _, info = convert.load_official(renamed)
  assert info["variant"] == "pncnn" and info["variant_source"].startswith("weights structure")
  assert convert.load_official(renamed, variant="pncnn_exp")[1]["variant"] == "pncnn_exp"
  # A state dict with only the NConvUNet is the plain NCNN (481 parameters, no batch_stats).
  ref = load_npz(WEIGHTS / "kitti_ncnn_conf_l1.npz")
  nconv_only = tmp_path / "plain.npz"
  np.savez(nconv_only, **{k: v for k, v in ref.items() if k.startswith("nconv.")})
  variables, info = convert.load_official(nconv_only)
  assert info["variant"] == "ncnn" and set(variables) == {"params"}
  assert models.count_params(variables["params"]) == 481
  # The effective-weights companion key is skipped when it sits inside a state dict.
  mixed = tmp_path / "mixed.npz"
  np.savez(mixed, **ref, **{"nconv.nconv1.weight": np.ones((2, 1, 5, 5), np.float32)})
  assert flatten(convert.load_official(mixed)[0]).keys() == flatten(convert.state_dict_to_variables(ref)[0]).keys()


# ------------------------------------------------------------------------------------------------------------
# Strictness and malformed input


def test_state_dict_errors_name_the_keys(shared_dir):
  ref = load_npz(WEIGHTS / "kitti_ncnn_conf_l1.npz")
  with pytest.raises(ValueError, match=r"unknown keys \['conf_estimator.extra.weight'\]"):
    convert.state_dict_to_variables({**ref, "conf_estimator.extra.weight": np.zeros(3, np.float32)})
  missing = dict(ref)
  del missing["conf_estimator.up2.conv.conv.4.running_var"]
  with pytest.raises(ValueError, match=r"missing keys \['conf_estimator.up2.conv.conv.4.running_var'\]"):
    convert.state_dict_to_variables(missing)
  bad = {**ref, "nconv.nconv4.weight_p": np.zeros((2, 3, 3, 3), np.float32)}
  with pytest.raises(ValueError, match=r"nconv.nconv4.weight_p: shape \(2, 3, 3, 3\), expected \(2, 4, 3, 3\)"):
    convert.state_dict_to_variables(bad)
  bad = {**ref, "conf_estimator.inc.conv.conv.0.bias": np.zeros(32, np.int32)}
  with pytest.raises(ValueError, match=r"conf_estimator.inc.conv.conv.0.bias: dtype int32"):
    convert.state_dict_to_variables(bad)


def test_variant_mismatch_is_refused(shared_dir):
  with pytest.raises(ValueError, match=r"'pncnn' needs conf_estimator=True, var_estimator=True"):
    convert.load_official(ckpt_path("kitti_ncnn_conf_l1"), variant="pncnn")
  with pytest.raises(ValueError, match=r"softplus confidence UNet, but the checkpoint's conf_estimator is a sigmoid"):
    convert.load_official(ckpt_path("kitti_ncnn_conf_l1"), variant="no_var_est")
  with pytest.raises(ValueError, match=r"cannot be loaded"):
    convert.load_official(ckpt_path("kitti_ncnn_conf_l1"), variant="resnet50")


class _Evil:
  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_not_run(tmp_path):
  marker = tmp_path / "pwned"
  for i, payload in enumerate([pickle.dumps(_Evil(marker), protocol=2),  # a bare pickle file
                               _legacy_file(pickle.dumps({"model": _Evil(marker)}, protocol=2))]):
    f = tmp_path / f"evil{i}.pth.tar"
    f.write_bytes(payload)
    with pytest.raises(convert.CheckpointFormatError, match=rf"refusing to unpickle (os|posix)\.system from .*evil{i}"):
      convert.load_official(f)
  assert not marker.exists()
  # Builtins that execute code are not on the allow-list either.
  f = tmp_path / "eval.pth.tar"
  f.write_bytes(_legacy_file(b"\x80\x02cbuiltins\neval\nq\x00X\x04\x00\x00\x001+1q\x01\x85q\x02Rq\x03."))
  with pytest.raises(convert.CheckpointFormatError, match=r"refusing to unpickle builtins\.eval"):
    convert.load_official(f)


def test_truncated_files(shared_dir, tmp_path):
  data = ckpt_path("kitti_ncnn_conf_l1").read_bytes()
  for cut, what in [(40_000, "main pickle"), (len(data) - 100, "storage"), (100, "sys_info pickle")]:
    f = tmp_path / f"cut{cut}.pth.tar"
    f.write_bytes(data[:cut])
    with pytest.raises(convert.CheckpointFormatError, match=rf"{re.escape(str(f))}.*{what}.*truncated"):
      convert.load_official(f)


def test_not_a_checkpoint(tmp_path):
  rnd = tmp_path / "random.pth.tar"
  rnd.write_bytes(np.random.default_rng(0).bytes(4096))
  with pytest.raises(convert.CheckpointFormatError, match=rf"{re.escape(str(rnd))} is not a torch checkpoint"):
    convert.load_official(rnd)
  rnd_pickle = tmp_path / "random2.pth.tar"
  rnd_pickle.write_bytes(b"\x80\x02" + np.random.default_rng(1).bytes(4096))
  with pytest.raises(convert.CheckpointFormatError, match=re.escape(str(rnd_pickle))):
    convert.load_official(rnd_pickle)
  plain = tmp_path / "list.pth.tar"
  plain.write_bytes(pickle.dumps([1, 2, 3], protocol=2))
  with pytest.raises(convert.CheckpointFormatError, match=r"not a legacy torch.save file"):
    convert.load_official(plain)
  no_model = tmp_path / "nomodel.pth.tar"
  no_model.write_bytes(_legacy_file(pickle.dumps({"epoch": 3}, protocol=2)))
  with pytest.raises(convert.CheckpointFormatError, match=r"expected a dict with a pickled 'model' module"):
    convert.load_official(no_model)
  with pytest.raises(FileNotFoundError, match="does_not_exist"):
    convert.load_official(tmp_path / "does_not_exist.pth.tar")


def test_zip_files(tmp_path):
  torch_zip = tmp_path / "new_format.pth"
  with zipfile.ZipFile(torch_zip, "w") as z:
    z.writestr("archive/data.pkl", pickle.dumps({}, protocol=2))
    z.writestr("archive/version", "3\n")
  with pytest.raises(convert.CheckpointFormatError, match=rf"{re.escape(str(torch_zip))} is a zip archive"):
    convert.load_official(torch_zip)
  other = tmp_path / "other.zip"
  with zipfile.ZipFile(other, "w") as z:
    z.writestr("readme.txt", "hello")
  with pytest.raises(convert.CheckpointFormatError, match=r"neither an .npz state dict nor a torch checkpoint"):
    convert.load_official(other)
  with pytest.raises(convert.CheckpointFormatError, match=r"holds only cached effective NConv weights"):
    convert.load_official(WEIGHTS / "kitti_ncnn_conf_l1__nconv_effective_weights.npz")


# ------------------------------------------------------------------------------------------------------------
# Forward smoke test and the CLI


def test_converted_model_reproduces_golden_output(shared_dir):
  variables, info = convert.load_official(ckpt_path("kitti_ncnn_conf_l1"))
  g = load_npz(GOLDEN / "kitti_ncnn_conf_l1" / "small_64x96.npz")
  model = models.build_model(info["variant"])
  out = jax.jit(model.apply)(variables, jnp.asarray(nchw_to_nhwc(g["input"])))
  out = np.asarray(out.stack_nchw())
  ref = g["out"]
  np.testing.assert_allclose(out[:, 0], ref[:, 0], atol=5e-3, rtol=0)
  np.testing.assert_allclose(out[:, 1:], ref[:, 1:], rtol=1e-3, atol=1e-6)


def test_cli_writes_a_restorable_checkpoint(shared_dir, checkpoints_info, tmp_path, capsys):
  src = ckpt_path("kitti_ncnn_conf_l2")
  out_dir = tmp_path / "converted"
  assert convert.main(["--input", str(src), "--output", str(out_dir)]) == 0
  printed = capsys.readouterr().out
  assert str(out_dir) in printed and "ncnn_conf_l2" in printed
  restored, meta = manager.restore_variables(out_dir)
  expected, _ = convert.load_official(src)
  flat_r, flat_e = flatten(restored), flatten(expected)
  assert flat_r.keys() == flat_e.keys()
  for k in flat_e:
    assert np.asarray(flat_r[k]).dtype == np.float32
    np.testing.assert_array_equal(np.asarray(flat_r[k]), flat_e[k], err_msg=str(k))
  golden = checkpoints_info["kitti_ncnn_conf_l2/checkpoint-9.pth.tar"]
  assert meta["variant"] == "ncnn_conf_l2" and meta["dataset"] == "kitti_depth" and meta["epoch"] == 9
  assert meta["sha256"] == golden["sha256"] and meta["source_file"] == str(src)
  # A second run does not overwrite the output.
  assert convert.main(["--input", str(src), "--output", str(out_dir)]) == 2
  assert "already exists" in capsys.readouterr().err


def test_cli_entry_point(shared_dir, tmp_path):
  out_dir = tmp_path / "nyu"
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  r = subprocess.run([sys.executable, "-m", "pncnn_jax.convert", "--input", str(ckpt_path("nyu_ncnn_conf_l1")),
                      "--output", str(out_dir), "--variant", "ncnn_conf_l1"],
                     capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
  assert r.returncode == 0, r.stderr
  assert "wrote" in r.stdout and '"dataset": "nyudepthv2"' in r.stdout
  assert (out_dir / "variables").is_dir()
  r = subprocess.run([sys.executable, "-m", "pncnn_jax.convert", "--input", str(tmp_path / "nope.pth.tar"),
                      "--output", str(tmp_path / "x")], capture_output=True, text=True, env=env, cwd=REPO,
                     timeout=120)
  assert r.returncode == 2 and "nope.pth.tar does not exist" in r.stderr


# ------------------------------------------------------------------------------------------------------------
# A legacy file written here with stand-in torch classes: storage offsets, strides and shared storages.



def test_legacy_reader_geometry(tmp_path, monkeypatch):
  """All 14 NConvUNet tensors live in ONE storage at offsets; weight_p of nconv4 is a transposed (strided) view."""
  mods = _fake_torch_modules(monkeypatch)
  rng = np.random.default_rng(0)
  expected = {}
  flat = [np.zeros(7, np.float32)]  # 7 leading elements so that offsets are non-zero
  pos = 7
  layout = []
  for k, (cout, cin, ks) in convert.NCONV_SHAPES.items():
    for name, shape in (("bias", (cout,)), ("weight_p", (cout, cin, ks, ks))):
      a = rng.normal(size=shape).astype(np.float32)
      expected[f"nconv.nconv{k}.{name}"] = a
      stored = a.transpose(1, 0, 2, 3) if (k == 4 and name == "weight_p") else a  # store nconv4 as (I, O, kh, kw)
      layout.append((k, name, pos, a.shape, stored))
      flat.append(stored.ravel())
      pos += a.size
  storage = _FakeStorage("140000", np.concatenate(flat))
  nconv = _module(mods["common.nconv"].NConvUNet)
  for k in range(1, 8):
    nconv._modules[f"nconv{k}"] = _module(mods["common.nconv"].NConv2d, init_method="p")
  for k, name, offset, shape, stored in layout:
    stride = tuple(int(s) // 4 for s in np.empty(stored.shape, np.float32).strides)
    if stored is not expected[f"nconv.nconv{k}.{name}"]:
      stride = (stride[1], stride[0]) + stride[2:]  # the (O, I, kh, kw) view of the (I, O, kh, kw) block
    nconv._modules[f"nconv{k}"]._parameters[name] = _FakeTensor(storage, offset, shape, stride)
  model = _module(mods["network"].CNN, _modules=collections.OrderedDict(nconv=nconv))
  f = tmp_path / "fake.pth.tar"
  _write_legacy(f, {"args": None, "epoch": 3, "model": model}, [storage], mods)

  monkeypatch.undo()  # the reader must not need the stand-ins
  sd = convert.module_state_dict(convert.read_torch_legacy(f)["model"])
  assert sorted(sd) == sorted(expected)
  for key, a in expected.items():
    np.testing.assert_array_equal(sd[key], a, err_msg=key)
  variables, info = convert.load_official(f)
  assert info["variant"] == "ncnn" and info["epoch"] == 3 and set(variables) == {"params"}

  # A tensor reaching past the end of its storage is refused.
  mods = _fake_torch_modules(monkeypatch)
  bad = _module(mods["network"].CNN)
  bad._parameters["w"] = _FakeTensor(storage, storage.data.size - 2, (3,), (1,))
  _write_legacy(f, {"model": bad}, [storage], mods)
  monkeypatch.undo()
  with pytest.raises(convert.CheckpointFormatError, match=r"exceeds its storage"):
    convert.read_torch_legacy(f)



def test_stride_zero_tensor_is_refused_without_allocating(tmp_path, monkeypatch):
  """Issue 13.8: a crafted tensor with stride 0 and an absurd size failed with "Unable to allocate 364 TiB"."""
  f = tmp_path / "crafted.pth.tar"
  write_crafted_stride_zero(f, monkeypatch)
  with pytest.raises(convert.CheckpointFormatError, match=re.escape(
      f"{f}: tensor of size (32768, 32768, 32768) (35184372088832 elements) with stride (0, 0, 0) repeats the 4 "
      "elements of its storage (zero or overlapping strides): crafted or corrupt; refusing it")):
    convert.read_torch_legacy(f)


def test_empty_files_are_named_as_empty(tmp_path):
  """Issue 13.9: an empty .npz was called "not a torch checkpoint"."""
  empty_npz, empty = tmp_path / "weights.npz", tmp_path / "zero.pth.tar"
  np.savez(empty_npz)
  empty.write_bytes(b"")
  with pytest.raises(convert.CheckpointFormatError, match=re.escape(
      f"{empty_npz} is an empty zip archive (an .npz without arrays), not a checkpoint")):
    convert.load_official(empty_npz)
  with pytest.raises(convert.CheckpointFormatError, match=re.escape(f"{empty} is an empty file (0 bytes)")):
    convert.load_official(empty)


@pytest.mark.parametrize("stem,identity", [
    ("kitti_ncnn_conf_l1", {"dataset": "kitti_depth", "variant": "ncnn_conf_l1", "loss": "masked_l1",
                            "input_scale": 1.0}),
    ("kitti_ncnn_conf_l2", {"dataset": "kitti_depth", "variant": "ncnn_conf_l2", "loss": "masked_l2",
                            "input_scale": 1.0}),
    ("nyu_ncnn_conf_l1", {"dataset": "nyu_depth", "variant": "ncnn_conf_l1", "loss": "masked_l1",
                          "input_scale": 1.0}),
])
def test_official_identity_comes_from_the_args(shared_dir, checkpoints_info, stem, identity):
  """Issue 13.4/13.5: the args of an official checkpoint (dataset, loss, norm_factor 256 = metres; see
  golden/checkpoints_info.json) say what it was trained as, whatever variant it is loaded as."""
  args = checkpoints_info[f"{stem}/checkpoint-9.pth.tar"]["args"]
  assert (args["norm_factor"], args["train_disp"], args["modality"]) == (256, False, "d")
  _, info = convert.load_official(ckpt_path(stem))
  assert info["identity"] == identity and info["identity_source"] == "its args"
  _, given = convert.load_official(ckpt_path(stem), variant="ncnn_conf_l2" if "l1" in stem else "ncnn_conf_l1")
  assert given["identity"] == identity  # a given variant does not rewrite the record
  _, npz = convert.load_official(WEIGHTS / f"{stem}.npz")  # no args: the dataset and variant from the file name
  assert npz["identity"] == {**identity, "input_scale": None} and npz["identity_source"] == "its file name"


def test_convert_refuses_a_variant_its_args_contradict(shared_dir, tmp_path, capsys):
  src = ckpt_path("kitti_ncnn_conf_l2")
  assert convert.main(["--input", str(src), "--output", str(tmp_path / "a"), "--variant", "ncnn_conf_l1"]) == 2
  err = capsys.readouterr().err.strip()
  assert err == (f"error: --input {src} was trained as variant 'ncnn_conf_l2' (its args), but --variant asks for "
                 "variant 'ncnn_conf_l1'; pass --allow_mismatch to use it anyway")
  assert not (tmp_path / "a").exists()
  assert convert.main(["--input", str(src), "--output", str(tmp_path / "b"), "--variant", "ncnn_conf_l1",
                       "--allow_mismatch"]) == 0
  _, meta = manager.restore_variables(tmp_path / "b")
  assert (meta["variant"], meta["loss"], meta["dataset"], meta["input_scale"]) == ("ncnn_conf_l1", "masked_l2",
                                                                                   "kitti_depth", 1.0)
