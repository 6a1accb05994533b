"""predict: any image size (pad and crop back), KITTI PNG out, sigma .npy, previews, bad files by name."""

import jax
import numpy as np
import pytest

from pncnn_jax.checkpoints import loader, manager
from pncnn_jax.data import io
from pncnn_jax.inference import completer, predict
from pncnn_jax.nn import models
from pncnn_jax.runtime import run_files


def test_any_size_pads_and_crops_back():
  """multiple=1 is the model at the image's own size (the reference handles any size); the default pads with
  zeros (confidence 0) to a multiple of 8 and crops back, which equals running on the padded map."""
  model = models.build_model("ncnn_conf_l1")
  variables = models.init_variables(model, jax.random.key(0))
  rng = np.random.default_rng(0)
  sparse = np.where(rng.random((37, 61)) < 0.3, rng.uniform(2, 60, (37, 61)), 0).astype(np.float32)
  apply = jax.jit(model.apply)  # eager takes a minute on CPU
  exact = predict.predict_array(model, variables, sparse, multiple=1)
  ref = apply(variables, sparse[None, ..., None])
  np.testing.assert_allclose(exact.depth, np.asarray(ref.depth)[0, ..., 0], rtol=1e-5)
  padded = predict.predict_array(model, variables, sparse)
  ref_p = apply(variables, predict.pad_to_multiple(sparse)[None, ..., None])
  assert padded.depth.shape == padded.confidence.shape == (37, 61)
  np.testing.assert_allclose(padded.depth, np.asarray(ref_p.depth)[0, :37, :61, 0], rtol=1e-6)
  # Away from the padded border, padding changes the prediction very little (NConv normalises by confidence).
  np.testing.assert_allclose(padded.depth[:20, :40], exact.depth[:20, :40], rtol=2e-2)


def test_pad_to_multiple():
  a = np.ones((75, 125), np.float32)
  p = predict.pad_to_multiple(a)
  assert p.shape == (80, 128)
  np.testing.assert_array_equal(p[:75, :125], a)
  assert p[75:].sum() == 0 and p[:, 125:].sum() == 0


@pytest.fixture(scope="module")
def pncnn_checkpoint(tmp_path_factory):
  model = models.build_model("pncnn")
  variables = jax.device_get(models.init_variables(model, jax.random.key(2)))
  path = tmp_path_factory.mktemp("ckpt") / "pncnn_model"
  manager.save_variables(path, variables, {"variant": "pncnn"})
  return path, model, variables


def test_predict_files_writes_outputs_and_reports_bad_files(pncnn_checkpoint, tmp_path, capsys):
  ckpt, model, variables = pncnn_checkpoint
  rng = np.random.default_rng(1)
  inp = tmp_path / "in"
  (inp / "sub").mkdir(parents=True)
  sparse = np.where(rng.random((13, 21)) < 0.2, rng.uniform(2, 60, (13, 21)), 0)  # odd size
  io.write_kitti_depth(inp / "sub" / "a.png", sparse)
  (inp / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
  from PIL import Image
  Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(inp / "rgb.png")
  out = tmp_path / "out"
  failures = predict.predict_files(str(ckpt), str(inp), str(out))
  assert len(failures) == 2 and "broken.png" in failures[0] and "rgb.png" in failures[1]
  assert "FAILED" in capsys.readouterr().err
  depth = io.read_kitti_depth(out / "sub" / "a.png")
  sigma = np.load(out / "sub" / "a_sigma.npy")
  assert depth.shape == sigma.shape == (13, 21) and sigma.dtype == np.float32
  ref = predict.predict_array(model, variables, io.read_kitti_depth(inp / "sub" / "a.png"))
  np.testing.assert_allclose(depth, np.round(np.clip(ref.depth, 0, None) * 256) / 256, atol=1 / 256)
  np.testing.assert_allclose(sigma, 1 / np.sqrt(ref.confidence), rtol=1e-5)  # pNCNN: sigma = 1/sqrt(c)
  assert (out / "sub" / "a_preview.png").stat().st_size > 0
  assert not (out / "broken.png").exists()


def test_predict_main_exit_codes(pncnn_checkpoint, tmp_path, capsys):
  ckpt, _, _ = pncnn_checkpoint
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(tmp_path / "nope"), "--output",
                       str(tmp_path / "o")]) == 2
  assert "nope: no such file or directory" in capsys.readouterr().err
  bad = tmp_path / "bad.png"
  bad.write_bytes(b"")
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(bad), "--output", str(tmp_path / "o")]) == 1
  assert "bad.png" in capsys.readouterr().err
  assert predict.main(["--checkpoint", str(tmp_path / "missing"), "--input", str(bad), "--output",
                       str(tmp_path / "o")]) == 2
  assert "missing: no such file or directory" in capsys.readouterr().err


def test_the_loader_rebuilds_the_model_a_run_was_trained_with(pncnn_checkpoint, tmp_path):
  """predict (and every caller of loader.load) builds the model with the settings stored with the checkpoint:
  config.model of a run, or the top-level `precision` of a run saved before the rename; defaults otherwise."""
  _, model, variables = pncnn_checkpoint
  new = {"variant": "pncnn", "loss": "gaussian_nll", "model": {"nconv_init": "repo", "conv_precision": "default"}}
  old = {"variant": "pncnn", "loss": "gaussian_nll", "nconv_init": "published", "precision": "default"}
  for name, config in (("new", new), ("old", old)):
    manager.save_variables(tmp_path / name, variables, {"variant": "pncnn", "config": config})
    ckpt = loader.load(tmp_path / name)
    assert ckpt.build_model().conv_precision == "default" and ckpt.loss == "gaussian_nll"
  assert loader.load(tmp_path / "new").build_model().nconv_init == "repo"
  assert loader.load(tmp_path / "new").build_model() is loader.load(tmp_path / "new").build_model()  # one instance
  got = loader.load(pncnn_checkpoint[0]).build_model()  # no stored config: the model's defaults
  assert got == model and got.conv_precision == "highest"
  with pytest.raises(ValueError, match=r"was trained as variant 'pncnn' \(its metadata\), but --config asks for "
                     "variant 'ncnn'; pass --allow_mismatch"):
    loader.load(tmp_path / "new", variant="ncnn")
  with pytest.raises(ValueError, match="holds variant 'pncnn', whose weights do not fit 'ncnn'"):
    loader.load(tmp_path / "new", variant="ncnn", allow_mismatch=True)  # the override cannot change the weights


def _sparse_png(path, seed=0, shape=(16, 24)):
  rng = np.random.default_rng(seed)
  io.write_kitti_depth(path, np.where(rng.random(shape) < 0.3, rng.uniform(2, 60, shape), 0))
  return path.read_bytes()


@pytest.mark.parametrize("where", ["same", "file_parent", "subfolder_of_input_file", "input_file_as_output"])
def test_predict_refuses_to_overwrite_inputs(pncnn_checkpoint, tmp_path, capsys, where):
  """Issue 13.1: `--input d --output d` replaced the sparse PNGs with predictions and exited 0."""
  ckpt, _, _ = pncnn_checkpoint
  d = tmp_path / "d"
  (d / "sub").mkdir(parents=True)
  before = {p: _sparse_png(p, i) for i, p in enumerate([d / "a.png", d / "sub" / "b.png"])}
  inp, out = {"same": (d, d), "file_parent": (d / "a.png", d), "subfolder_of_input_file": (d, d / "sub"),
              "input_file_as_output": (d / "a.png", d / "a.png")}[where]
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(inp), "--output", str(out)]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and err.startswith("error: --output") and str(out) in err
  assert {p: p.read_bytes() for p in before} == before
  assert sorted(d.rglob("*")) == sorted([d / "a.png", d / "sub", d / "sub" / "b.png"])


def test_predict_output_under_input_folder_is_allowed(pncnn_checkpoint, tmp_path, capsys):
  ckpt, _, _ = pncnn_checkpoint
  d = tmp_path / "d"
  d.mkdir()
  before = _sparse_png(d / "a.png")
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(d / "a.png"), "--output", str(d / "out")]) == 0
  assert (d / "a.png").read_bytes() == before and (d / "out" / "a.png").exists()
  assert capsys.readouterr().out.count(str(d / "a.png")) == 1  # each input path printed once


def test_predict_array_reads_non_finite_pixels_as_no_measurement(pncnn_checkpoint, capsys):
  """Issue 13.9: one NaN input pixel made the whole prediction NaN. NaN and +-inf are no measurement, as 0 is (the
  input contract's rule, the same in every entry: no warning, here as in the Completer and the bag command)."""
  _, model, variables = pncnn_checkpoint
  rng = np.random.default_rng(0)
  sparse = np.where(rng.random((16, 24)) < 0.3, rng.uniform(2, 60, (16, 24)), 0).astype(np.float32)
  poisoned = sparse.copy()
  poisoned[3, 4], poisoned[5, 6], poisoned[7, 8] = np.nan, np.inf, -np.inf
  masked = sparse.copy()
  masked[3, 4] = masked[5, 6] = masked[7, 8] = 0
  out = predict.predict_array(model, variables, poisoned, name="x.png")
  assert capsys.readouterr().err == ""
  assert np.isfinite(out.depth).all()
  np.testing.assert_allclose(out.depth, predict.predict_array(model, variables, masked).depth, rtol=1e-6)
  # The network itself reads them so too (an exported graph cannot refuse): +-inf made its whole output NaN.
  apply = jax.jit(model.apply)
  unmasked = apply(variables, predict.pad_to_multiple(poisoned)[None, ..., None])
  zeroed = apply(variables, predict.pad_to_multiple(masked)[None, ..., None])
  np.testing.assert_array_equal(np.asarray(unmasked.depth), np.asarray(zeroed.depth))


def test_predict_keeps_going_past_a_tiny_image(pncnn_checkpoint, tmp_path, capsys):
  """Issue 13.6: an image under 8 px with --pad_multiple 1 stopped the batch ('zero-size array')."""
  ckpt, _, _ = pncnn_checkpoint
  d = tmp_path / "in"
  d.mkdir()
  _sparse_png(d / "a_tiny.png", shape=(5, 6))
  _sparse_png(d / "b.png")
  (d / "c_broken.png").write_bytes(b"not a png")
  out = tmp_path / "out"
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(d), "--output", str(out), "--pad_multiple",
                       "1"]) == 1
  assert io.read_kitti_depth(out / "a_tiny.png").shape == (5, 6) and (out / "b.png").exists()
  err = capsys.readouterr().err
  assert err.count("c_broken.png") == 1 and "1 file(s) failed" in err


def test_poisoned_weights_are_refused(tmp_path, capsys):
  """Issue 13.5: convert accepted an .npz with NaN weights and predict then wrote all-zero depth with exit 0."""
  from pncnn_jax.checkpoints import convert  # pylint: disable=g-import-not-at-top

  from conftest import WEIGHTS  # pylint: disable=g-import-not-at-top
  sd = dict(np.load(WEIGHTS / "kitti_ncnn_conf_l1.npz"))
  name = sorted(k for k in sd if sd[k].dtype.kind == "f")[0]
  sd[name] = sd[name].copy()
  sd[name].flat[0] = np.nan
  poisoned = tmp_path / "kitti_ncnn_conf_l1.npz"
  np.savez(poisoned, **sd)
  with pytest.raises(convert.CheckpointFormatError, match=r"kitti_ncnn_conf_l1.npz: 1 weight tensor\(s\) hold NaN"):
    convert.load_official(poisoned)
  _sparse_png(tmp_path / "a.png")
  assert predict.main(["--checkpoint", str(poisoned), "--input", str(tmp_path / "a.png"), "--output",
                       str(tmp_path / "out")]) == 2
  assert "kitti_ncnn_conf_l1.npz" in capsys.readouterr().err and not (tmp_path / "out").exists()
  assert convert.main(["--input", str(poisoned), "--output", str(tmp_path / "conv")]) == 2
  assert not (tmp_path / "conv").exists()


# --------------------------------------------------------------------------------------------------------------
# Input and output formats (issue 14): KITTI PNG (m * 256), millimetre PNG, .npy / .npz in metres, --depth_scale


def _eighths(shape=(16, 24), seed=3):
  """A sparse map of depths that are multiples of 1/8 m = 125 mm = 32/256 m: exact in every format."""
  rng = np.random.default_rng(seed)
  return np.where(rng.random(shape) < 0.3, rng.integers(16, 480, shape) / 8.0, 0.0).astype(np.float32)


def _write(fmt, path, depth_m):
  if fmt == "kitti_png":
    io.write_kitti_depth(path, depth_m)
  elif fmt == "mm_png":
    io.write_nyu_depth(path, depth_m)
  elif fmt == "npy":
    np.save(path, depth_m)
  else:
    np.savez(path, sparse=depth_m[..., None], rgb=np.zeros((2, 2, 3)))


FILES = {"kitti_png": "s.png", "mm_png": "s.png", "npy": "s.npy", "npz": "s.npz"}


@pytest.mark.parametrize("fmt", ["kitti_png", "mm_png", "npy", "npz"])
def test_each_input_format_round_trips(pncnn_checkpoint, tmp_path, fmt, capsys):
  """Written in each format, the same depths in metres give the same prediction, written back in the input's
  format and scale ('same'): KITTI PNG value = round(d * 256), mm PNG round(d * 1000), npy float32 metres."""
  ckpt, model, variables = pncnn_checkpoint
  sparse = _eighths()
  src = tmp_path / "in" / FILES[fmt]
  src.parent.mkdir()
  _write(fmt, src, sparse)
  input_format = {"npz": "npy", "mm_png": "mm_png"}.get(fmt, "auto")  # auto: .png = KITTI, .npy/.npz = npy
  out = tmp_path / "out"
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(src), "--output", str(out),
                       "--input_format", input_format]) == 0
  line = capsys.readouterr().out
  pts = sparse[sparse > 0]
  assert f"({'npy' if fmt == 'npz' else fmt}, " in line and f"input {pts.min():.3g}-{pts.max():.3g} m" in line, line
  assert f"(depth in {dict(kitti_png='1/256 m', mm_png='mm').get(fmt, 'm')}, sigma in m)" in line, line
  ref = predict.predict_array(model, variables, sparse)
  depth = np.clip(ref.depth, 0, None)
  if fmt == "kitti_png":
    got, want = io.read_png_uint16(out / "s.png"), np.round(depth * 256)
  elif fmt == "mm_png":
    got, want = io.read_png_uint16(out / "s.png"), np.round(depth * 1000)
  else:
    got, want = np.load(out / "s.npy"), depth
    assert got.dtype == np.float32 and not (out / "s.png").exists()
  np.testing.assert_array_equal(got, want)
  np.testing.assert_allclose(np.load(out / "s_sigma.npy"), 1 / np.sqrt(ref.confidence), rtol=1e-6)  # sigma [m]


def test_output_format_and_depth_scale(pncnn_checkpoint, tmp_path, capsys):
  """--depth_scale replaces the format's scale (a PNG in half millimetres); --output_format npy writes float32
  metres whatever the input; mm_png output is in millimetres."""
  ckpt, model, variables = pncnn_checkpoint
  sparse = _eighths() / 2  # <= 29.9 m: 59,875 half millimetres fit 16 bits
  io.write_png_uint16(tmp_path / "half_mm.png", np.round(sparse * 2000).astype(np.uint16))
  ref = predict.predict_array(model, variables, sparse)
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(tmp_path / "half_mm.png"), "--output",
                       str(tmp_path / "o1"), "--depth_scale", "0.0005", "--output_format", "npy"]) == 0
  np.testing.assert_array_equal(np.load(tmp_path / "o1" / "half_mm.npy"), np.clip(ref.depth, 0, None))
  assert "(kitti_png, 0.0005 m per unit" in capsys.readouterr().out
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(tmp_path / "half_mm.png"), "--output",
                       str(tmp_path / "o2"), "--depth_scale", "0.0005", "--output_format", "mm_png"]) == 0
  np.testing.assert_array_equal(io.read_png_uint16(tmp_path / "o2" / "half_mm.png"),
                                np.round(np.clip(ref.depth, 0, None) * 1000))


def test_a_shipped_model_predicts_in_metres_from_every_format(tmp_path):
  """Units end to end: a shipped model given a wall 10 m away in each format predicts about 10 m (a millimetre
  PNG read as KITTI would say 39 m, one read as metres 10 km)."""
  shape = (16, 24)
  sparse = np.zeros(shape, np.float32)
  sparse[::3, ::2] = 10.0
  inp = tmp_path / "in"
  inp.mkdir()
  io.write_kitti_depth(inp / "kitti.png", sparse)
  np.save(inp / "metres.npy", sparse)
  (tmp_path / "mm").mkdir()
  io.write_nyu_depth(tmp_path / "mm" / "tof.png", sparse)
  out = tmp_path / "out"
  assert predict.main(["--checkpoint", "synthetic:pncnn_masked", "--input", str(inp), "--output", str(out)]) == 0
  assert predict.main(["--checkpoint", "synthetic:pncnn_masked", "--input", str(tmp_path / "mm"), "--output",
                       str(out), "--input_format", "mm_png", "--output_format", "npy"]) == 0
  for depth in (io.read_kitti_depth(out / "kitti.png"), np.load(out / "metres.npy"), np.load(out / "tof.npy")):
    assert abs(np.median(depth) - 10.0) < 1.0, np.median(depth)
  assert (out / "tof_preview.png").stat().st_size > 0
  # Without --checkpoint: the recommended shipped model (the Completer's and the bag command's default).
  assert predict.main(["--input", str(inp / "metres.npy"), "--output", str(tmp_path / "default")]) == 0
  assert run_files.read_writer(tmp_path / "default")["checkpoint"] == completer.RECOMMENDED
  assert abs(np.median(np.load(tmp_path / "default" / "metres.npy")) - 10.0) < 1.0


@pytest.mark.parametrize("args, message", [
    (["--depth_scale", "-1"], "error: --depth_scale -1.0: must be a finite number > 0 (metres per stored unit"),
    (["--depth_scale", "nan"], "error: --depth_scale nan: must be a finite number > 0"),
    (["--input_format", "tiff"], "error: --input_format 'tiff' is not one of auto, kitti_png, mm_png, npy"),
    (["--output_format", "exr"], "error: --output_format 'exr' is not one of same, kitti_png, mm_png, npy"),
    (["--input_format", "mm_png"], "a.npy: --input_format mm_png reads .png files, not .npy (use --input_format auto)"),
])
def test_bad_format_settings_are_one_line_errors(pncnn_checkpoint, tmp_path, capsys, args, message):
  ckpt, _, _ = pncnn_checkpoint
  np.save(tmp_path / "a.npy", _eighths())
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(tmp_path / "a.npy"), "--output",
                       str(tmp_path / "o")] + args) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and message in err, err
  assert not (tmp_path / "o").exists()


def test_a_wrong_scale_is_named_per_file(pncnn_checkpoint, tmp_path, capsys):
  """Millimetres in an .npy read as metres, metres in a PNG with a millimetre --depth_scale, and negative depths:
  each file fails with one line naming it, the others still run (exit status 1)."""
  ckpt, _, _ = pncnn_checkpoint
  d = tmp_path / "in"
  d.mkdir()
  sparse = _eighths()
  np.save(d / "mm.npy", sparse * 1000)
  np.save(d / "neg.npy", np.where(sparse > 0, -sparse, 0))
  np.save(d / "good.npy", sparse)
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(d), "--output", str(tmp_path / "o")]) == 1
  err = capsys.readouterr().err
  m = sparse[sparse > 0]
  assert (f"FAILED {d / 'mm.npy'}: depths up to {m.max() * 1000:.4g} m (median {np.median(m) * 1000:.4g} m), beyond "
          f"the 1000 m no range sensor reaches: looks like millimetres (x 0.001: {m.min():.3g}-{m.max():.3g} m, median "
          f"{np.median(m):.3g} m); read as npy at 1 m per stored unit: wrong --input_format or --depth_scale? "
          "(kitti_png: value / 256 m, mm_png: value / 1000 m, npy: metres)\n") in err, err
  assert f"FAILED {d / 'neg.npy'}: {int((sparse > 0).sum())} negative depths (min {-m.max():.4g} m); use 0 for no " \
         "measurement\n" in err, err
  assert (tmp_path / "o" / "good.npy").is_file() and not (tmp_path / "o" / "mm.npy").exists()
  io.write_kitti_depth(tmp_path / "k.png", sparse)
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(tmp_path / "k.png"), "--output",
                       str(tmp_path / "o2"), "--depth_scale", "1e-6"]) == 1
  assert "median depth" in capsys.readouterr().err


def test_two_inputs_writing_the_same_outputs_are_refused(pncnn_checkpoint, tmp_path, capsys):
  ckpt, _, _ = pncnn_checkpoint
  d = tmp_path / "in"
  d.mkdir()
  io.write_kitti_depth(d / "a.png", _eighths())
  np.save(d / "a.npy", _eighths())
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(d), "--output", str(tmp_path / "o")]) == 2
  assert "a.npy and a.png would write the same outputs" in capsys.readouterr().err
  assert predict.main(["--checkpoint", str(ckpt), "--input", str(d), "--output", str(tmp_path / "o"),
                       "--input_format", "npy"]) == 0
  assert (tmp_path / "o" / "a.npy").is_file() and not (tmp_path / "o" / "a.png").exists()


def test_npy_nan_means_no_measurement(pncnn_checkpoint, tmp_path):
  ckpt, model, variables = pncnn_checkpoint
  sparse = _eighths()
  np.save(tmp_path / "n.npy", np.where(sparse > 0, sparse, np.nan))
  depth, fmt, scale = predict.read_input(tmp_path / "n.npy")
  assert (fmt, scale) == ("npy", 1.0)
  np.testing.assert_array_equal(depth, sparse)


# ------------------------------------------------------------------------------------------------------------
# Ensembles: several checkpoints fused per pixel.


MEMBERS = ("synthetic:pncnn_masked", "synthetic:pncnn_masked_seed1")


@pytest.mark.parametrize("extra, rule, scales", [([], "weighted_mean", (1.0, 1.0)),
                                                 (["--fusion", "max_confidence", "--precision_scales", "1,0.3"],
                                                  "max_confidence", (1.0, 0.3))])
def test_an_ensemble_predicts_its_fused_depth_and_sigma(tmp_path, extra, rule, scales):
  """The written depth and sigma are `fusion.fuse` of the members' own predictions (precisions scaled first)."""
  from pncnn_jax import losses  # pylint: disable=g-import-not-at-top
  from pncnn_jax.ensemble import fusion  # pylint: disable=g-import-not-at-top
  sparse = _eighths((16, 24), seed=5)
  np.save(tmp_path / "a.npy", sparse)
  assert predict.main(["--checkpoint", ",".join(MEMBERS), "--input", str(tmp_path / "a.npy"), "--output",
                       str(tmp_path / "o")] + extra) == 0
  depths, precs = [], []
  for name, s in zip(MEMBERS, scales):
    member = loader.load(name)
    out = predict.predict_array(member.build_model(), member.variables, sparse)
    depths.append(out.depth)
    precs.append(s * losses.precision_of(out.confidence, member.loss))
  stack = lambda xs: np.stack(xs)[:, None, ..., None]  # noqa: E731  (K, 1, H, W, 1)
  depth, prec = (np.asarray(a)[0, ..., 0] for a in fusion.fuse(stack(depths), stack(precs).astype(np.float32), rule))
  np.testing.assert_allclose(np.load(tmp_path / "o" / "a.npy"), np.clip(depth, 0, None), rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(np.load(tmp_path / "o" / "a_sigma.npy"), 1 / np.sqrt(prec), rtol=1e-4)
  assert not np.allclose(depths[0], depths[1], atol=1e-2)  # two different members: the fusion is not trivial


@pytest.mark.parametrize("checkpoint, extra, message", [
    ("synthetic:pncnn_masked,synthetic:ncnn", [], "error: --checkpoint: the members of an ensemble must be one "
     "model; synthetic:pncnn_masked is pncnn (loss gaussian_nll"),
    ("synthetic:ncnn,synthetic:ncnn", [], "error: an ensemble needs members with a predicted sigma (a probabilistic "
     "loss); these were trained with 'masked_l1'"),
    ("synthetic:pncnn_masked", ["--fusion", "mean"], "error: --fusion and --precision_scales need an ensemble"),
    (",".join(MEMBERS), ["--fusion", "median"], "error: --fusion 'median' is not one of mean, weighted_mean, "
     "max_confidence, mle"),
    (",".join(MEMBERS), ["--precision_scales", "1"], "error: --precision_scales has 1 values for 2 checkpoints"),
    (",".join(MEMBERS), ["--precision_scales", "1,x"], "error: --precision_scales '1,x': expected numbers"),
    (",".join(MEMBERS), ["--precision_scales", "1,-2"], "every scale must be a finite number > 0"),
    ("synthetic:pncnn_masked,", [], "an empty name between commas"),
])
def test_bad_ensembles_are_one_line_errors(tmp_path, capsys, checkpoint, extra, message):
  np.save(tmp_path / "a.npy", _eighths())
  assert predict.main(["--checkpoint", checkpoint, "--input", str(tmp_path / "a.npy"), "--output",
                       str(tmp_path / "o")] + extra) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and message in err, err
  assert not (tmp_path / "o").exists()
