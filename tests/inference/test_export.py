"""`python -m pncnn_jax.export`: the artifacts reproduce `jax.jit(model.apply)`.

A randomly initialised pNCNN (both UNets and the NConvUNet, so every layer kind is in the graph) is saved as a
model checkpoint and exported at 64x96 through the command-line entry point, as a user would. Checked:
  * the StableHLO artifact, deserialized and called, equals jit bit for bit (same XLA, same program: there is
    no reason for a single ulp of difference), at two batch sizes from one artifact (the batch is symbolic);
  * at a size that is not a multiple of 8 it equals predict's Completer (padding, the clamp at 0, NaN and the
    `valid` output where there is no input support; the dense output with --fill_unsupported);
  * the ONNX file under onnxruntime (when the `onnx` extra is installed: `make onnx`; CI sets
    PNCNN_REQUIRE_ONNX=1, which turns its absence into a failure) matches jit within a tolerance derived below;
  * the default --formats writes what the installed packages allow and says what it skipped;
  * the output directory is the export's own: a file or a directory holding a user's files is refused with one
    line and left as it was; a previous export is replaced (its artifacts not written again are removed); a full
    disk is one line and leaves nothing behind;
  * a shipped name (`--checkpoint synthetic:<name>`, `pncnn_jax.pretrained`) goes through the one loader;
  * the snippets of docs/deploy/export.md run as written, without importing pncnn_jax;
  * bad arguments give one line naming the argument and exit status 2.
"""

import errno
import json
import os
import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax import pretrained
from pncnn_jax.checkpoints import loader, manager
from pncnn_jax.inference import completer as completer_lib
from pncnn_jax.inference import export
from pncnn_jax.nn import models

from conftest import REPO

H, W = 64, 96
VARIANT = "pncnn"

pytestmark = pytest.mark.xdist_group("export")  # one worker compiles the model once for the whole file
REQUIRE_ONNX = os.environ.get("PNCNN_REQUIRE_ONNX") == "1"  # .ci/run: the ONNX route must be installed and tested


def _onnx_available() -> bool:
  """Whether the ONNX route (jax2onnx and onnxruntime) imports; with PNCNN_REQUIRE_ONNX=1 its absence fails."""
  try:
    export._jax2onnx()
    import onnxruntime  # noqa: F401
  except ImportError as e:
    if REQUIRE_ONNX:
      pytest.fail(f"PNCNN_REQUIRE_ONNX=1 but the ONNX route does not import ({e}); install it with `make onnx`")
    return False
  return True


def _require_onnx():
  if not _onnx_available():
    pytest.skip("the onnx extra is not installed (make onnx)")


def _sparse(batch: int, seed: int) -> np.ndarray:
  """KITTI-like sparse input: ~5 % of pixels hold a depth in [2, 80) m, the rest 0 (no measurement)."""
  rng = np.random.default_rng(seed)
  depth = rng.uniform(2.0, 80.0, (batch, H, W, 1))
  return np.where(rng.uniform(size=depth.shape) < 0.05, depth, 0.0).astype(np.float32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """(variables, export dir, CLI output) of a random pNCNN exported in both formats when jax2onnx is present."""
  tmp = tmp_path_factory.mktemp("export")
  model = models.build_model(VARIANT)
  variables = models.init_variables(model, jax.random.key(0))
  # Non-trivial BatchNorm running statistics, so eval mode is really exercised.
  stats_keys = jax.random.split(jax.random.key(1), len(jax.tree.leaves(variables["batch_stats"])))
  leaves, tree = jax.tree.flatten(variables["batch_stats"])
  variables["batch_stats"] = jax.tree.unflatten(
      tree, [leaf + 0.5 * jax.random.uniform(k, leaf.shape) for leaf, k in zip(leaves, stats_keys)])
  ckpt = manager.save_variables(tmp / "ckpt", variables, {"variant": VARIANT})
  formats = "stablehlo,onnx" if _onnx_available() else "stablehlo"
  out = tmp / "exported"
  rc = export.main(["--checkpoint", ckpt, "--output", str(out), "--height", str(H), "--width", str(W),
                    "--formats", formats, "--onnx_batch", "2"])
  assert rc == 0
  return variables, out, formats


def _jit_reference(variables, x, *, weights_as_constants):
  """jit's (depth, confidence, valid): of the exported function itself (the weights as constants, as in the
  artifact), or of `model.apply` with the weights as arguments (what training and evaluation run), clamped at 0
  and NaN outside support & ~clamped (H and W are multiples of 8 here: no padding)."""
  model = models.build_model(VARIANT)
  if weights_as_constants:
    return tuple(np.asarray(a) for a in jax.jit(export.serving_fn(model, variables))(jnp.asarray(x)))
  out = jax.jit(lambda v, s: model.apply(v, s, train=False))(variables, jnp.asarray(x))
  depth, conf = np.asarray(out.depth), np.asarray(out.confidence)
  valid = np.asarray(completer_lib.support_mask(jnp.asarray(x))) & (depth >= 0)
  return np.where(valid, depth, np.nan), np.where(valid, conf, np.nan), valid.astype(np.float32)


def test_stablehlo_artifact_equals_jit_at_two_batch_sizes(exported):
  variables, out, _ = exported
  exp = jax.export.deserialize(bytearray((out / export.STABLEHLO_FILE).read_bytes()))
  (in_aval,) = exp.in_avals
  assert jax.export.is_symbolic_dim(in_aval.shape[0]) and tuple(in_aval.shape[1:]) == (H, W, 1)
  assert set(exp.platforms) == {"cpu", "cuda"}
  for batch, seed in ((1, 0), (3, 1)):
    x = _sparse(batch, seed)
    depth, conf, valid = (np.asarray(a) for a in exp.call(x))
    assert depth.shape == conf.shape == valid.shape == (batch, H, W, 1)
    # Bit for bit against jit of the same function: the deserialized module is the program jit compiles.
    ref_depth, ref_conf, ref_valid = _jit_reference(variables, x, weights_as_constants=True)
    ok = ref_valid == 1
    assert ok.mean() > 0.99 and (ref_depth[ok] >= 0).all() and (ref_conf[ok] > 0).all()
    np.testing.assert_array_equal(np.isnan(ref_depth), ~ok)
    np.testing.assert_array_equal(depth, ref_depth, err_msg=f"depth, batch {batch}")
    np.testing.assert_array_equal(conf, ref_conf, err_msg=f"confidence, batch {batch}")
    np.testing.assert_array_equal(valid, ref_valid, err_msg=f"valid, batch {batch}")
    # Against jit(model.apply) with the weights as arguments: XLA folds constant weights (softplus of the NConv
    # kernels, the BatchNorm scale) at compile time and fuses differently, so float32 rounding differs by a few
    # ulp per layer (measured 2.9e-6 m on depths of ~0.1-80 m): 2e-5 m / 2e-5 relative.
    arg_depth, arg_conf, arg_valid = _jit_reference(variables, x, weights_as_constants=False)
    np.testing.assert_allclose(depth, arg_depth, rtol=0, atol=2e-5, err_msg=f"depth, batch {batch}")
    np.testing.assert_allclose(conf, arg_conf, rtol=2e-5, atol=0, err_msg=f"confidence, batch {batch}")
    np.testing.assert_array_equal(valid, arg_valid, err_msg=f"valid, batch {batch}")
  # The batch elements are independent: batch 3 holds three batch-1 results.
  x = _sparse(3, 1)
  d3 = np.asarray(exp.call(x)[0])
  np.testing.assert_array_equal(d3[1:2], np.asarray(exp.call(x[1:2])[0]))


def test_the_graph_reads_nan_and_infinities_as_no_measurement(exported):
  """The input contract's rule for missing values holds inside the artifact, which cannot refuse an input: a frame
  coded with NaN, +inf and -inf gives what the same frame with 0 gives (+-inf made every output NaN; an
  infinite pixel also counted as input support). On concrete arrays the serving function checks the rest of the
  contract as the Completer does."""
  variables, out, _ = exported
  exp = jax.export.deserialize(bytearray((out / export.STABLEHLO_FILE).read_bytes()))
  x = _sparse(1, 5)
  coded = x.copy()
  holes = np.flatnonzero(x == 0)
  coded.flat[holes[0::3]], coded.flat[holes[1::3]], coded.flat[holes[2::3]] = np.nan, np.inf, -np.inf
  for a, b in zip(exp.call(coded), exp.call(x)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  serve = export.serving_fn(models.build_model(VARIANT), variables)
  with pytest.raises(ValueError, match=r"^sparse_depth frame 0: depths up to .* m .*looks like millimetres"):
    serve(x * 1000)
  with pytest.raises(ValueError, match=r"^sparse_depth: expected depth \(B, H, W, 1\) in metres as real numbers, got "
                                       r"shape \(1, 64, 96\) of float32\n"):  # jax adds a note on its frames
    jax.jit(serve)(x[..., 0])  # the layout is checked while tracing


def test_sidecar_describes_inputs_and_outputs(exported):
  _, out, formats = exported
  meta = json.loads((out / export.SIDECAR_FILE).read_text())
  assert (meta["variant"], meta["loss"], meta["height"], meta["width"]) == (VARIANT, "gaussian_nll", H, W)
  assert meta["input"] == {"name": "sparse_depth", "shape": ["B", H, W, 1], "unit": "m",
                           "meaning": "sparse depth, 0 = no measurement",
                           "contract": {"no_measurement": "0, NaN, +inf, -inf", "negative": "not allowed",
                                        "max_m": 1000.0, "min_median_m": 0.05,
                                        "checked": "not inside the graph: check inputs before feeding them"}}
  assert [(o["name"], o["unit"]) for o in meta["outputs"]] == [("depth", "m"), ("confidence", "1/m^2"), ("valid", "1")]
  assert meta["fill_unsupported"] is False and "NaN where valid is 0" in meta["outputs"][0]["meaning"]
  assert sorted(meta["files"]) == sorted(formats.split(","))
  # Exactly the files the sidecar describes: no temporary file left, no ONNX weights sidecar (one self-contained file).
  described = [export.SIDECAR_FILE] + [f["file"] for f in meta["files"].values()]
  assert sorted(p.name for p in out.iterdir()) == sorted(described)


def test_onnx_matches_jit(exported):
  _require_onnx()
  import onnxruntime as ort
  variables, out, _ = exported
  session = ort.InferenceSession(str(out / export.ONNX_FILE), providers=["CPUExecutionProvider"])
  assert [i.name for i in session.get_inputs()] == ["sparse_depth"]
  assert [o.name for o in session.get_outputs()] == ["depth", "confidence", "valid"]
  x = _sparse(2, 2)
  depth, conf, valid = session.run(["depth", "confidence", "valid"], {"sparse_depth": x})
  ref_depth, ref_conf, ref_valid = _jit_reference(variables, x, weights_as_constants=True)
  assert depth.shape == conf.shape == valid.shape == (2, H, W, 1)
  _assert_onnx_close(depth, conf, ref_depth, ref_conf)
  np.testing.assert_array_equal(valid, ref_valid)


def _assert_onnx_close(depth, conf, ref_depth, ref_conf):
  # The ONNX NConv layers are library convolutions (`export.onnx_tracing`), summed in another order than jit's
  # fused taps, and onnxruntime's kernels (MLAS) round differently from XLA's: float32 rounding, ~1e-7 relative.
  # The NConv ratio num / (den + eps) amplifies it where den is tiny (pixels far from any input point, input
  # confidences down to 1e-18), the same cause that sets the 5 mm parity tolerance against the official PyTorch
  # code (docs/PARITY.md). Measured at 64x96: random pNCNNs up to 3.2e-4 m (depth) and 2e-7 relative (precision);
  # the official NCNN-Conf-L1 on a real frame 1.0e-5 m and 1.2e-5 relative (its propagated confidence, down to
  # 1e-11). Bounds: 1 mm and 1e-4 relative, far below what a wrong layer does (onnxruntime's own Sigmoid, for
  # one, moved the official model's depths by up to 22 m).
  np.testing.assert_allclose(depth, ref_depth, rtol=0, atol=1e-3)
  np.testing.assert_allclose(conf, ref_conf, rtol=1e-4, atol=0)


def test_onnx_of_the_official_checkpoint_matches_jit_on_a_real_frame(shared_dir, tmp_path):
  """The official KITTI NCNN-Conf-L1 (a sigmoid confidence head, confidences down to 1e-18) on a 96x320 crop of
  a real KITTI frame: the tails of the activations matter here, as they do not for random weights."""
  _require_onnx()
  import onnxruntime as ort
  ckpt = shared_dir / "reference" / "checkpoints" / "kitti_ncnn_conf_l1_checkpoint-9.pth.tar"
  g = np.load(shared_dir / "reference" / "golden" / "real" / "torch_kitti_image_02__kitti_ncnn_conf_l1.npz")
  h, w = 96, 320
  x = np.ascontiguousarray(np.transpose(g["input"], (0, 2, 3, 1))[:, -h:, :w]).astype(np.float32)
  assert np.mean(x > 0) > 0.03  # LiDAR points in the crop
  out = tmp_path / "exported"
  assert export.main(["--checkpoint", str(ckpt), "--output", str(out), "--height", str(h), "--width", str(w),
                      "--formats", "onnx", "--fill_unsupported"]) == 0  # every pixel: the tails are the point here
  assert json.loads((out / export.SIDECAR_FILE).read_text())["variant"] == "ncnn_conf_l1"
  session = ort.InferenceSession(str(out / export.ONNX_FILE), providers=["CPUExecutionProvider"])
  depth, conf = session.run(["depth", "confidence"], {"sparse_depth": x})
  loaded = loader.load(ckpt)
  serve = export.serving_fn(loaded.build_model(), loaded.variables, fill_unsupported=True)
  ref_depth, ref_conf, _ = (np.asarray(a) for a in jax.jit(serve)(x))
  assert ref_conf.min() < 1e-8  # the regime where onnxruntime's Sigmoid is wrong
  _assert_onnx_close(depth, conf, ref_depth, ref_conf)


def test_an_export_at_a_size_not_a_multiple_of_8_equals_predict(exported, tmp_path):
  """Issue 50: at a size that is not a multiple of 8 the exported graph ran the network unpadded (predict pads to
  a multiple of 8), so its depth differed from predict's (by up to 76 m above a real KITTI scan) and was not
  clamped at 0. It now pads, crops, clamps and marks as the Completer does: the same depth and sigma (NaN where
  the `valid` output is 0; every pixel with --fill_unsupported), within the float32 rounding of constant against
  argument weights (the tolerance of the test above)."""
  _, out, _ = exported
  h, w = 20, 36  # pads to 24 x 40
  rng = np.random.default_rng(4)
  x = np.zeros((1, h, w, 1), np.float32)
  x[0, -5:, :, 0] = np.where(rng.random((5, w)) < 0.3, rng.uniform(2.0, 80.0, (5, w)), 0.0)  # the sky above: none
  for fill in (False, True):
    target = tmp_path / f"exported_{fill}"
    assert export.main(["--checkpoint", str(out.parent / "ckpt"), "--output", str(target), "--height", str(h),
                        "--width", str(w), "--formats", "stablehlo", "--platforms", "cpu"]
                       + (["--fill_unsupported"] if fill else [])) == 0
    outputs = [np.asarray(a)[0, ..., 0] for a in jax.export.deserialize(
        bytearray((target / export.STABLEHLO_FILE).read_bytes())).call(x)]
    kw = {"fill_unsupported": True} if fill else {}
    ref = completer_lib.Completer.from_checkpoint(out.parent / "ckpt", **kw)(x[0, ..., 0])
    depth = outputs[0]
    np.testing.assert_allclose(depth, ref.depth, rtol=0, atol=2e-5, err_msg="depth: export against predict")
    assert np.isnan(depth).any() != fill and (depth[np.isfinite(depth)] >= 0).all()
    _, conf, valid = outputs
    assert (~ref.valid[:6]).all() and ref.valid[-5:].all()
    np.testing.assert_array_equal(valid, ref.valid.astype(np.float32))
    np.testing.assert_allclose(1 / np.sqrt(conf), ref.sigma, rtol=2e-5, atol=0)


def test_shipped_name_exports_through_the_one_loader(exported, tmp_path, monkeypatch):
  """`--checkpoint synthetic:<name>` loads shipped weights (`pncnn_jax.pretrained`, here a temporary folder
  standing in for the package's) through `loader.load`: the artifact equals the one of the same weights saved as
  a checkpoint directory."""
  variables, out, _ = exported
  manifest = {"variant": VARIANT, "config": {"variant": VARIANT, "loss": ""}, "step": 1}
  pretrained.save(jax.tree.map(np.asarray, variables), manifest, tmp_path / "shipped" / "synthetic", "tiny")
  monkeypatch.setattr(pretrained, "ROOT", tmp_path / "shipped")
  shipped = tmp_path / "exported"
  assert export.main(["--checkpoint", "synthetic:tiny", "--output", str(shipped), "--height", str(H),
                      "--width", str(W), "--formats", "stablehlo"]) == 0
  meta = json.loads((shipped / export.SIDECAR_FILE).read_text())
  assert (meta["variant"], meta["loss"], meta["checkpoint"]) == (VARIANT, "gaussian_nll", "synthetic:tiny")
  x = _sparse(1, 3)
  got = jax.export.deserialize(bytearray((shipped / export.STABLEHLO_FILE).read_bytes())).call(x)
  ref = jax.export.deserialize(bytearray((out / export.STABLEHLO_FILE).read_bytes())).call(x)
  for a, b in zip(got, ref):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _page_blocks() -> list[str]:
  text = (REPO / "docs" / "deploy" / "export.md").read_text()
  section = text.split("## Loading the artifacts without pncnn_jax", 1)[1].split("\n## ", 1)[0]
  return re.findall(r"```python\n(.*?)```", section, re.S)


def test_deploy_page_snippets_run_without_pncnn_jax(exported):
  """The deploy page's snippets, run as written from a directory holding `exported/`; pncnn_jax is never imported."""
  _, out, formats = exported
  blocks = _page_blocks()
  assert len(blocks) == 2, "expected a StableHLO and an ONNX snippet"
  if "onnx" not in formats:
    blocks = blocks[:1]
  check = "\nimport sys\nassert 'pncnn_jax' not in sys.modules, 'the snippet imported pncnn_jax'\nprint('OK')\n"
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  for block in blocks:
    r = subprocess.run([sys.executable, "-c", block + check], cwd=out.parent, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stderr[-3000:]


@pytest.mark.parametrize("args, flag", [
    (["--checkpoint", "/nonexistent/ckpt", "--height", "64", "--width", "96"], "--checkpoint"),
    (["--height", "4", "--width", "96"], "--height"),
    (["--height", "64", "--width", "0"], "--width"),
    (["--height", "64", "--width", "96", "--formats", "tflite"], "--formats"),
    (["--height", "64", "--width", "96", "--platforms", "gpu"], "--platforms"),
    (["--height", "64", "--width", "96", "--variant", "pncn"], "--variant"),
    (["--height", "64", "--width", "96"], "--checkpoint"),  # an empty directory: no checkpoint in it
    (["--checkpoint", "synthetic:no_such_model", "--height", "64", "--width", "96"], "--checkpoint"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, flag):
  if "--checkpoint" not in args:
    args = ["--checkpoint", str(tmp_path)] + args  # exists; must not be read before the arguments are checked
  r = subprocess.run([sys.executable, "-m", "pncnn_jax.export", "--output", str(tmp_path / "o")] + args,
                     capture_output=True, text=True, timeout=120, cwd=REPO)
  assert r.returncode == 2, (r.returncode, r.stderr)
  err = r.stderr.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: ") and flag in err[0], r.stderr
  assert not (tmp_path / "o").exists()


def test_onnx_activation_forms_are_exact_to_float32_rounding():
  """The sigmoid and softplus written out for ONNX (`export.onnx_tracing`) against float64 references, down to
  the tails where the official models' input confidences live (1e-25 and below)."""
  x = np.linspace(-87.0, 30.0, 20001).astype(np.float32)
  x64 = x.astype(np.float64)
  for fn, exact in ((export._sigmoid_for_onnx, 1 / (1 + np.exp(-x64))),
                    (export._softplus_for_onnx, np.logaddexp(x64, 0.0))):
    got = np.asarray(jax.jit(fn)(x), np.float64)
    np.testing.assert_allclose(got, exact, rtol=5e-7, atol=0, err_msg=fn.__name__)


def _main(capsys, *args) -> tuple[int, str, str]:
  rc = export.main([str(a) for a in args])
  cap = capsys.readouterr()
  return rc, cap.out, cap.err


def _tree(path) -> dict[str, bytes]:
  return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_default_formats_are_what_is_installed_and_a_previous_export_is_replaced(exported, tmp_path, monkeypatch,
                                                                                capsys):
  """Without the ONNX converter (simulated), the default --formats writes StableHLO and says it skipped ONNX; into
  a previous export's directory (the fixture's, copied), which it replaces: the old ONNX file is removed, so the
  sidecar describes what the directory holds."""
  _, out, formats = exported
  previous = tmp_path / "exported"
  shutil.copytree(out, previous)
  monkeypatch.setitem(sys.modules, "jax2onnx", None)  # `import jax2onnx` raises ImportError
  rc, stdout, stderr = _main(capsys, "--checkpoint", out.parent / "ckpt", "--output", previous, "--height", H,
                             "--width", W)
  assert rc == 0, stderr
  skipped = (r"^skipped onnx: the ONNX converter does not import \(.*jax2onnx.*\); install it with make onnx "
             r"\(pip install 'pncnn_jax\[onnx\]' && pip install --no-deps jax2onnx==0\.17\.1\)$")
  assert re.search(skipped, stdout, re.M), stdout
  assert sorted(p.name for p in previous.iterdir()) == sorted([export.SIDECAR_FILE, export.STABLEHLO_FILE])
  assert list(json.loads((previous / export.SIDECAR_FILE).read_text())["files"]) == ["stablehlo"]
  assert ("removed" in stdout) == ("onnx" in formats)
  # The same function, exported again: a module of the same signature (its outputs: the tests above).
  new, old = (jax.export.deserialize(bytearray((d / export.STABLEHLO_FILE).read_bytes())) for d in (previous, out))
  assert str((new.in_avals, new.out_avals)) == str((old.in_avals, old.out_avals))  # symbolic dims: by name
  # Asked for explicitly, a missing format is an error before anything is written.
  rc, _, stderr = _main(capsys, "--checkpoint", out.parent / "ckpt", "--output", tmp_path / "new", "--height", H,
                        "--width", W, "--formats", "onnx")
  assert rc == 2 and stderr.count("\n") == 1 and "make onnx" in stderr and not (tmp_path / "new").exists()


@pytest.mark.parametrize("case", ["a file", "a user's export.json", "our sidecar and a user's file"])
def test_output_that_is_not_ours_is_refused(tmp_path, capsys, case):
  """As convert refuses a non-empty output: nothing is read or written, one line names --output."""
  target = tmp_path / "target"
  if case == "a file":
    target.write_text("my notes\n")
  else:
    target.mkdir()
    if case == "a user's export.json":
      (target / "export.json").write_text('{"mine": true}\n')
      (target / "pncnn.stablehlo").write_bytes(b"my own model")
    else:
      (target / "export.json").write_text(json.dumps({"written_by": export.WRITTEN_BY, "files": {}}))
      (target / "notes.txt").write_text("mine\n")
  before = target.read_bytes() if target.is_file() else _tree(target)
  rc, stdout, stderr = _main(capsys, "--checkpoint", "synthetic:no_such_model", "--output", target, "--height", H,
                             "--width", W, "--formats", "stablehlo")
  assert rc == 2 and stderr.count("\n") == 1 and stderr.startswith(f"error: --output {target}"), stderr
  assert ("is a file" in stderr) == (case == "a file")
  assert (target.read_bytes() if target.is_file() else _tree(target)) == before


def test_full_disk_is_one_line_and_leaves_nothing(exported, tmp_path, monkeypatch, capsys):
  """A write that fails (ENOSPC, simulated at the flush of the first file) names --output; no file, temporary or
  final, is left, and the directory the export created is removed."""
  _, out, _ = exported
  def full(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  monkeypatch.setattr(export.os, "fsync", full)
  target = tmp_path / "new" / "exported"
  rc, _, stderr = _main(capsys, "--checkpoint", out.parent / "ckpt", "--output", target, "--height", H, "--width", W,
                        "--formats", "stablehlo")
  assert rc == 1 and stderr == f"error: --output {target}: cannot write pncnn.stablehlo (No space left on device)\n"
  assert not (tmp_path / "new").exists()
