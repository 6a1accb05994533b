"""predict on hostile inputs and places (issue 39, predict side; issue 40.6, streaming): outputs are physical or
flagged, units are kept, writes are atomic, links are named, reruns skip finished frames, memory stays flat.

Every case runs the command (`predict.main`) on 16x24 frames with the shipped `synthetic:ncnn` (an NCNN: one
small program, compiled once for the whole module) and checks the exit status, the one-line message, that there
is no traceback, and that the inputs are unchanged."""

import errno
import importlib.util
import json
import os
import pathlib
import socket
import tracemalloc

import numpy as np
import pytest

from pncnn_jax.data import input_contract, io
from pncnn_jax.inference import completer as completer_lib
from pncnn_jax.inference import predict

from conftest import frame_at_density

MODEL = "synthetic:ncnn"
SHAPE = (16, 24)
KITTI_RAW = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "kitti_raw_mini" / "2011_09_26"


def _frame(seed=0, shape=SHAPE):
  """2-60 m at 8 % of the pixels: inside the shipped models' trained input density (6.0-10.3 %), so that a test
  sees only the warnings it is about."""
  return frame_at_density(np.random.default_rng(seed), shape, 2.0, 60.0)


def _run(capsys, *args):
  rc = predict.main(["--checkpoint", MODEL, "--no_preview", "--progress", "off", *map(str, args)])
  out, err = capsys.readouterr()
  assert "Traceback" not in err
  return rc, out, err


def _snapshot(d):
  return {p: p.read_bytes() for p in sorted(pathlib.Path(d).rglob("*")) if p.is_file()}


def test_millimetre_arrays_are_written_back_in_millimetres(tmp_path, capsys):
  """Issue 39: an .npy in mm with --depth_scale 0.001 came back in metres under the same name. 'same' keeps the
  input's unit (and says it); --output_format npy is float32 metres; sigma is metres in both."""
  sparse_m = _frame()
  np.save(tmp_path / "mm.npy", sparse_m * 1000)
  rc, out, _ = _run(capsys, "--input", tmp_path / "mm.npy", "--output", tmp_path / "same", "--depth_scale", "0.001")
  assert rc == 0 and "depth in mm" in out, out
  rc, out, _ = _run(capsys, "--input", tmp_path / "mm.npy", "--output", tmp_path / "m", "--depth_scale", "0.001",
                    "--output_format", "npy")
  assert rc == 0 and "depth in m)" in out, out
  mm, metres = np.load(tmp_path / "same" / "mm.npy"), np.load(tmp_path / "m" / "mm.npy")
  np.testing.assert_allclose(mm, metres * 1000, rtol=1e-6)
  assert 2 < np.median(metres) < 60  # metres, as the model predicts them
  np.testing.assert_array_equal(np.load(tmp_path / "same" / "mm_confidence.npy"),
                                np.load(tmp_path / "m" / "mm_confidence.npy"))


def test_outputs_are_never_negative_and_the_clamp_is_reported(tmp_path, capsys, monkeypatch):
  """Issue 39: negative depths reached .npy outputs with exit 0. The Completer clamps them at 0 and predict says
  how many per file; they are not valid (issue 50), so NaN unless --fill_unsupported."""
  forward = completer_lib.Completer.forward
  monkeypatch.setattr(completer_lib.Completer, "forward",
                      lambda self, x: {**(raw := forward(self, x)), "depth": raw["depth"] - 20.0})
  np.save(tmp_path / "a.npy", _frame())
  rc, out, _ = _run(capsys, "--input", tmp_path / "a.npy", "--output", tmp_path / "o", "--fill_unsupported")
  depth = np.load(tmp_path / "o" / "a.npy")
  assert rc == 0 and depth.min() == 0 and (depth > 0).any()
  assert f"{int((depth == 0).sum())} negative depth(s) clamped to 0" in out, out
  rc, out, _ = _run(capsys, "--input", tmp_path / "a.npy", "--output", tmp_path / "nan")
  marked = np.load(tmp_path / "nan" / "a.npy")
  assert rc == 0 and np.nanmin(marked) > 0
  np.testing.assert_array_equal(np.isnan(marked), depth == 0)
  assert f"{int((depth == 0).sum())} negative depth(s) clamped to 0" in out and "written as NaN" in out, out


def _band(seed=0, rows=4):
  """A LiDAR-like frame: measurements only in the bottom `rows` rows; the rows more than 8 px above have none
  within the support radius (the sky above a LiDAR)."""
  sparse = np.zeros(SHAPE, np.float32)
  sparse[-rows:] = _frame(seed, (rows, SHAPE[1]))
  return sparse


def test_pixels_without_support_are_no_value_in_every_file(tmp_path, capsys):
  """Issue 50: every pixel without input support came out as a depth (0 m or the network's extrapolation) and no
  file marked it. Now the .npy depth and the confidence are NaN there, a 16-bit PNG holds 0 (its 'no
  measurement'), and <name>_valid.png is the Completer's `valid` (255 / 0); --fill_unsupported writes the dense
  depth of before, still with the mask."""
  from PIL import Image
  d = tmp_path / "in"
  d.mkdir()
  band = _band()
  np.save(d / "a.npy", band)
  io.write_kitti_depth(d / "b.png", band)
  rc, out, _ = _run(capsys, "--input", d, "--output", tmp_path / "o")
  assert rc == 0, out
  # Rows 0-3 have no measurement within 8 px (the band is rows 12-15): no value there in either depth file.
  assert np.isnan(np.load(tmp_path / "o" / "a.npy")[:4]).all(), "a depth in the .npy where there is no support"
  assert (io.read_kitti_depth(tmp_path / "o" / "b.png")[:4] == 0).all(), "a depth in the PNG without support"
  completer = completer_lib.Completer.from_pretrained(MODEL)
  for name, sparse in (("a", band), ("b", io.read_kitti_depth(d / "b.png"))):
    ref = completer(sparse)
    assert (~ref.valid).sum() >= 2 * SHAPE[1] and ref.valid.any()  # at least the top rows
    mask = np.asarray(Image.open(tmp_path / "o" / f"{name}_valid.png"))
    assert mask.dtype == np.uint8
    np.testing.assert_array_equal(mask, np.where(ref.valid, 255, 0))
    conf = np.load(tmp_path / "o" / f"{name}_confidence.npy")
    np.testing.assert_array_equal(np.isnan(conf), ~ref.valid)
    if name == "a":
      depth = np.load(tmp_path / "o" / "a.npy")
      np.testing.assert_array_equal(np.isnan(depth), ~ref.valid)
      np.testing.assert_allclose(depth[ref.valid], ref.depth[ref.valid], rtol=1e-6)
    else:
      depth = io.read_kitti_depth(tmp_path / "o" / "b.png")
      assert (depth[~ref.valid] == 0).all() and (depth[ref.valid] > 0).all()
  assert "% not valid, written as NaN" in out and "% not valid, written as 0" in out, out
  rc, out, _ = _run(capsys, "--input", d, "--output", tmp_path / "dense", "--fill_unsupported")
  dense = completer_lib.Completer.from_pretrained(MODEL, fill_unsupported=True)(band)
  depth = np.load(tmp_path / "dense" / "a.npy")
  assert rc == 0 and np.isfinite(depth).all() and (depth >= 0).all()
  np.testing.assert_allclose(depth, dense.depth, rtol=1e-6)
  np.testing.assert_array_equal(np.isnan(np.load(tmp_path / "dense" / "a_confidence.npy")), False)
  np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "dense" / "a_valid.png")),
                                np.where(dense.valid, 255, 0))
  assert "% not valid, kept (--fill_unsupported)" in out, out


def test_inputs_beyond_the_trained_range_warn_per_file(tmp_path, capsys):
  """Issue 39: 400-499 m points came out as 1 cm without a word. Each file with measurements beyond the range
  the model was trained on (the synthetic LiDAR's 100 m) gets one warning; the summary counts them."""
  d = tmp_path / "in"
  d.mkdir()
  far = _frame()
  far[3, 4:8] = [150, 420, 480, 499]
  np.save(d / "far.npy", far)
  np.save(d / "near.npy", _frame(1))
  before = _snapshot(d)
  rc, out, err = _run(capsys, "--input", d, "--output", tmp_path / "o")
  assert rc == 0 and (tmp_path / "o" / "far.npy").is_file()
  lines = [x for x in err.splitlines() if x.startswith("warning:")]
  assert lines == [f"warning: {d / 'far.npy'}: 4 measurement(s) outside the 0-100 m this model was trained on "
                   "(150-499 m); its depth and sigma near them are extrapolations"], err
  assert "1 warning(s)" in out and _snapshot(d) == before


def test_each_frame_states_its_input_density_and_one_outside_the_trained_range_warns(tmp_path, capsys):
  """Every file's line gives its input density; a frame sparser than what the model was trained on (every 4th row
  of a training-like frame: a quarter of the density) gets one warning line, counted in the summary, and
  pncnn_summary.json records both frames' densities. A rerun keeps the records of the frames it skips."""
  d = tmp_path / "in"
  d.mkdir()
  dense = _frame()
  sparse = np.zeros_like(dense)
  sparse[::4] = dense[::4]
  sparse[-1] = dense[-1]  # the same rows spanned
  np.save(d / "lidar64.npy", dense)
  np.save(d / "thinned.npy", sparse)
  rc, out, err = _run(capsys, "--input", d, "--output", tmp_path / "o")
  assert rc == 0
  got = {p: input_contract.input_density(np.load(d / p))[0] for p in ("lidar64.npy", "thinned.npy")}
  assert got["lidar64.npy"] == 31 / 384 and got["thinned.npy"] < 0.04  # exactly 8.07 %: `_frame`
  trained = completer_lib.Completer.from_pretrained(MODEL).trained_density
  text = completer_lib.density_text
  for p, density in got.items():
    assert f"{d / p} (npy, 1 m per unit, input " in out and f"m, input density {text(density)} %) -> " in out, out
  lines = [x for x in err.splitlines() if x.startswith("warning:")]
  assert lines == [f"warning: {d / 'thinned.npy'}: input density {text(got['thinned.npy'])} % is below the "
                   f"{text(trained.low)}-{text(trained.high)} % this model was trained on (synthetic 64-beam LiDAR): "
                   "expect larger errors; see docs/deploy/sensors.md"], err
  assert (f"1 warning(s), 1 outside the {text(trained.low)}-{text(trained.high)} % input density the model was "
          "trained on, ") in out, out
  record = json.loads((tmp_path / "o" / predict.SUMMARY_FILE).read_text())
  assert record["density_measure"] == "rows_spanned" and record["trained_density"] == {
      "low": trained.low, "high": trained.high, "trained_on": "synthetic 64-beam LiDAR"}
  assert record["frames"] == {"lidar64.npy": {"input_density": got["lidar64.npy"], "density_in_range": True},
                              "thinned.npy": {"input_density": got["thinned.npy"], "density_in_range": False}}
  (tmp_path / "o" / "thinned.npy").unlink()  # a rerun redoes it alone
  rc, out, _ = _run(capsys, "--input", d, "--output", tmp_path / "o")
  assert rc == 0 and "2 input(s): 1 completed, 1 skipped" in out
  assert json.loads((tmp_path / "o" / predict.SUMMARY_FILE).read_text())["frames"] == record["frames"]


def test_a_frame_without_measurements_is_refused_in_one_line(tmp_path, capsys):
  """Issue 39: an all-zero frame came out as 2.7 mm everywhere, exit 0."""
  d = tmp_path / "in"
  d.mkdir()
  np.save(d / "empty.npy", np.zeros(SHAPE, np.float32))
  np.save(d / "nan.npy", np.full(SHAPE, np.nan, np.float32))
  np.save(d / "ok.npy", _frame())
  rc, out, err = _run(capsys, "--input", d, "--output", tmp_path / "o")
  assert rc == 1
  for name in ("empty.npy", "nan.npy"):
    assert f"FAILED {d / name}: no measurement (every pixel is 0 or NaN); nothing to complete" in err
    assert not (tmp_path / "o" / name).exists()
  assert (tmp_path / "o" / "ok.npy").is_file() and "2 failed" in out


def test_links_in_the_input_folder_are_followed_or_named(tmp_path, capsys):
  """Issue 39: dangling links and symlinked folders were skipped without a word. Symlinked folders are followed
  (each real folder once: a loop is named), dangling links are named."""
  real = tmp_path / "real"
  real.mkdir()
  np.save(real / "b.npy", _frame(2))
  d = tmp_path / "in"
  d.mkdir()
  np.save(d / "a.npy", _frame())
  (d / "linked").symlink_to(real, target_is_directory=True)
  (d / "dangling.npy").symlink_to(tmp_path / "gone.npy")
  (real / "loop").symlink_to(d, target_is_directory=True)
  rc, out, err = _run(capsys, "--input", d, "--output", tmp_path / "o")
  assert rc == 0, err
  assert (tmp_path / "o" / "a.npy").is_file() and (tmp_path / "o" / "linked" / "b.npy").is_file()
  assert f"warning: {d / 'dangling.npy'}: a dangling link (its target {tmp_path / 'gone.npy'} does not exist); " \
         "skipped" in err
  assert f"warning: {d / 'linked' / 'loop'}: a symlinked folder already searched" in err
  assert "2 input(s): 2 completed" in out


def _fail_on_call(n, code, monkeypatch, exc=None):
  """Makes the n-th output write fail with `code` (or raise `exc`) after writing half of its bytes (a disk
  filling up)."""
  calls = {"n": 0}
  real_replace = os.replace

  def replace(src, dst):
    if predict.TMP_MARK not in str(src):  # RUNNING and pncnn_writer.json, not an output
      return real_replace(src, dst)
    calls["n"] += 1
    if calls["n"] == n:
      data = pathlib.Path(src).read_bytes()
      pathlib.Path(src).write_bytes(data[: len(data) // 2])
      raise exc or OSError(code, os.strerror(code), str(src))
    return real_replace(src, dst)
  monkeypatch.setattr(predict.os, "replace", replace)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_full_disk_or_read_only_output_is_one_line_and_leaves_no_truncated_file(tmp_path, capsys, monkeypatch,
                                                                                 code):
  """Issue 39: predict on a full disk left truncated .npy files under their normal names. Each output is written
  to a temporary name and renamed: the run stops at the first write that fails with one line naming the file,
  what exists is complete, and a rerun finishes the rest."""
  d = tmp_path / "in"
  d.mkdir()
  for i in range(4):
    np.save(d / f"f{i}.npy", _frame(i))
  before = _snapshot(d)
  out = tmp_path / "o"
  with monkeypatch.context() as m:
    _fail_on_call(7, code, m)  # 3 outputs per frame: frames 0 and 1 finish, frame 2's confidence fails
    rc, _, err = _run(capsys, "--input", d, "--output", out)
  assert rc == 1
  assert err.strip().splitlines()[-1] == (f"error: cannot write {out / 'f2_confidence.npy'}: {os.strerror(code)}; "
                                          "2 frame(s) finished before it, whose outputs are complete (rerun to "
                                          "continue)"), err
  assert sorted(p.name for p in out.iterdir()) == ["f0.npy", "f0_confidence.npy", "f0_valid.png", "f1.npy",
                                                   "f1_confidence.npy", "f1_valid.png", "pncnn_summary.json",
                                                   "pncnn_writer.json"]
  assert sorted(json.loads((out / "pncnn_summary.json").read_text())["frames"]) == ["f0.npy", "f1.npy"]
  for p in out.glob("*.npy"):
    assert np.load(p).shape == SHAPE  # complete files only
  rc, log, err = _run(capsys, "--input", d, "--output", out)
  assert rc == 0 and "4 input(s): 2 completed, 2 skipped" in log, log
  assert _snapshot(d) == before


def test_ctrl_c_is_one_line_and_leaves_complete_files(tmp_path, capsys, monkeypatch):
  d = tmp_path / "in"
  d.mkdir()
  for i in range(3):
    np.save(d / f"f{i}.npy", _frame(i))
  out = tmp_path / "o"
  with monkeypatch.context() as m:
    _fail_on_call(4, None, m, exc=KeyboardInterrupt())
    rc, _, err = _run(capsys, "--input", d, "--output", out)
  assert rc == 130 and err.strip() == ("interrupted: the outputs written so far are complete; rerun the command to "
                                       "finish the rest"), err
  assert sorted(p.name for p in out.iterdir()) == ["f0.npy", "f0_confidence.npy", "f0_valid.png",
                                                   "pncnn_summary.json", "pncnn_writer.json"]  # no temporary
  #                                                  file, no RUNNING; the finished frame's record
  rc, log, err = _run(capsys, "--input", d, "--output", out)
  assert rc == 0 and "3 input(s): 2 completed, 1 skipped" in log, log


# SIGTERM (a service manager stopping predict) lands in the middle of a write: on the 4th rename the temporary file
# of frame 1's second output exists, and the process signals itself there.
_SIGTERM_WORKER = r"""
import os, signal, sys
from pncnn_jax.inference import predict
calls, real_replace = [0], os.replace
def replace(src, dst):
  calls[0] += 1
  if calls[0] == 4:
    os.kill(os.getpid(), signal.SIGTERM)
  return real_replace(src, dst)
predict.os.replace = replace
sys.exit(predict.main(sys.argv[1:]))
"""


def test_sigterm_is_one_line_and_leaves_no_temporary_file(tmp_path, capsys):
  """A SIGTERM during predict left a hidden `.<name>.pncnn-tmp<pid>` file in the output folder (found by probing)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  d = tmp_path / "in"
  d.mkdir()
  for i in range(3):
    np.save(d / f"f{i}.npy", _frame(i))
  out = tmp_path / "o"
  repo = pathlib.Path(predict.__file__).resolve().parents[2]
  p = subprocess.run([sys.executable, "-c", _SIGTERM_WORKER, "--checkpoint", MODEL, "--no_preview", "--progress",
                      "off", "--input", str(d), "--output", str(out)], capture_output=True, text=True, timeout=300,
                     env=dict(os.environ, PYTHONPATH=str(repo), JAX_PLATFORMS="cpu"))
  assert p.returncode == 143 and p.stderr.strip().splitlines()[-1] == (
      "terminated (SIGTERM): the outputs written so far are complete; rerun the command to finish the rest"), p.stderr
  left = sorted(x.name for x in out.iterdir())
  assert "f0_confidence.npy" in left and not [x for x in left if predict.TMP_MARK in x or x.startswith(".")], left
  rc, log, _ = _run(capsys, "--input", d, "--output", out)  # the lock was released: a rerun finishes the rest
  assert rc == 0 and "3 input(s):" in log, log


def test_a_killed_runs_temporary_files_are_removed_by_the_next_run(tmp_path, capsys):
  """SIGKILL cannot be caught: its temporary file stays until the next run into the folder removes it (found by
  probing: nothing removed them)."""
  d = tmp_path / "in"
  d.mkdir()
  np.save(d / "f0.npy", _frame(0))
  out = tmp_path / "o"
  assert _run(capsys, "--input", d, "--output", out)[0] == 0
  stale = out / f".f0.npy{predict.TMP_MARK}424242.npy"
  stale.write_bytes(b"half")
  rc, log, _ = _run(capsys, "--input", d, "--output", out)
  assert rc == 0 and "1 input(s): 0 completed, 1 skipped" in log, log
  assert not stale.exists()


def test_a_malformed_argument_is_one_line(capsys):
  """argparse printed its 13-line usage before the reason (found by probing: --depth_scale abc)."""
  with pytest.raises(SystemExit) as e:
    predict.main(["--checkpoint", MODEL, "--input", "x", "--output", "y", "--depth_scale", "abc"])
  err = capsys.readouterr().err
  assert e.value.code == 2 and err == ("error: argument --depth_scale: invalid float value: 'abc' "
                                       "(see python -m pncnn_jax.predict --help)\n"), err


def test_a_directory_of_hundreds_of_frames_streams_in_flat_memory_and_a_rerun_skips(tmp_path, capsys):
  """Issue 40.6: hundreds of frames run one at a time (memory does not grow with their number), end with a
  summary, and a rerun skips the finished ones."""
  shape = (32, 48)  # 6 kB per field: keeping the ~7 fields of each frame would grow 8 MB over 200 frames
  folders = {}
  for n in (5, 20, 200):
    folders[n] = tmp_path / f"in{n}"
    folders[n].mkdir()
    for i in range(n):
      np.save(folders[n] / f"{i:04d}.npy", _frame(i % 7, shape))
  _run(capsys, "--input", folders[5], "--output", tmp_path / "warm")  # compiles
  peaks = []
  for n in (20, 200):
    tracemalloc.start()
    rc, out, _ = _run(capsys, "--input", folders[n], "--output", tmp_path / f"o{n}")
    peaks.append(tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
    assert rc == 0
  assert peaks[1] - peaks[0] < 1e6, peaks  # 10x the frames: no more than the list of names more
  summary = out.strip().splitlines()[-1]
  assert summary.startswith("summary: 200 input(s): 200 completed, 0 skipped") and "frames/s" in summary, summary
  out_dir = tmp_path / "o200"
  mtime = (out_dir / "0000.npy").stat().st_mtime_ns
  (out_dir / "0007.npy").unlink()  # an unfinished frame
  rc, out, _ = _run(capsys, "--input", folders[200], "--output", out_dir)
  assert rc == 0 and "200 input(s): 1 completed, 199 skipped" in out, out
  assert out.count("->") == 1 and "0007.npy" in out
  assert (out_dir / "0000.npy").stat().st_mtime_ns == mtime
  rc, out, _ = _run(capsys, "--input", folders[5], "--output", tmp_path / "warm", "--overwrite")
  assert rc == 0 and "5 completed, 0 skipped" in out


def test_the_progress_bar_shows_rate_and_time_left(tmp_path, capsys):
  for i in range(3):
    np.save(tmp_path / f"{i}.npy", _frame(i))
  rc, _, err = _run(capsys, "--input", tmp_path, "--output", tmp_path / "o", "--progress", "on")
  assert rc == 0 and "3/3" in err and "frame/s" in err and "<00:00" in err, err


@pytest.mark.skipif(importlib.util.find_spec("pncnn_jax.data.points") is None, reason="no pncnn_jax.data.points")
def test_points_and_calibration_are_completed(tmp_path, capsys):
  """--points SCAN --calib CALIB: points projected into the camera (pncnn_jax.data.points) and completed, in
  metres; a calibration without the camera asked for is one line before the model loads."""
  from pncnn_jax.data import points  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  z = np.full(300, 20.0)  # a wall 20 m away
  uv = rng.uniform([-1, -1], [25, 17], (300, 2))  # pixels, some outside the 24 x 16 image
  xyz = np.stack([(uv[:, 0] - 12) * z / 20, (uv[:, 1] - 8) * z / 20, z], 1).astype(np.float32)
  np.save(tmp_path / "scan.npy", xyz)
  calib = tmp_path / "calib.json"
  calib.write_text('{"K": [[20, 0, 12], [0, 20, 8], [0, 0, 1]], "T_cam_from_lidar": [[1, 0, 0, 0], [0, 1, 0, 0], '
                   '[0, 0, 1, 0], [0, 0, 0, 1]], "image_size": [16, 24]}')
  rc, out, err = _run(capsys, "--points", tmp_path / "scan.npy", "--calib", calib, "--output", tmp_path / "o")
  assert rc == 0, err
  depth = np.load(tmp_path / "o" / "scan.npy")
  sparse = points.sparse_depth_from_files(tmp_path / "scan.npy", calib)
  assert depth.shape == sparse.shape == SHAPE and depth.min() >= 0 and "(points, 1 m per unit" in out
  hit = sparse > 0
  assert np.abs(depth[hit] - 20).max() < 1 and abs(np.median(depth) - 20) < 1  # the wall, in metres
  if KITTI_RAW.is_dir():
    rc, _, err = _run(capsys, "--points", tmp_path / "scan.npy", "--calib", KITTI_RAW, "--camera", "07",
                      "--output", tmp_path / "p")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "07" in err and not (tmp_path / "p").exists()
  rc, _, err = _run(capsys, "--points", tmp_path / "scan.npy", "--output", tmp_path / "p")
  assert rc == 2 and "--points needs --calib" in err and not (tmp_path / "p").exists()


@pytest.mark.parametrize("unit, scale, looks", [("mm", 1000.0, "looks like millimetres (x 0.001: "),
                                               ("1e6 m", None, "not metres")])
def test_points_that_are_not_metres_are_refused_in_one_line(tmp_path, capsys, unit, scale, looks):
  """--points completed a scan in millimetres, or one 1e6 m away, to a constant 2.7 mm with exit status 0: its
  points now pass the input contract's units check on their ranges (none beyond 1000 m, a median of at least
  5 cm), so the file fails with one line naming it and saying what its numbers look like; the others still run."""
  rng = np.random.default_rng(1)
  z = rng.uniform(5.0, 40.0, 300)
  uv = rng.uniform([0, 0], [24, 16], (300, 2))
  xyz = np.stack([(uv[:, 0] - 12) * z / 20, (uv[:, 1] - 8) * z / 20, z], 1)  # in front of the camera, in metres
  d = tmp_path / "scans"
  d.mkdir()
  np.save(d / "good.npy", xyz.astype(np.float32))
  bad = xyz * scale if scale else xyz / np.linalg.norm(xyz, axis=1, keepdims=True) * 1e6
  np.save(d / "bad.npy", bad.astype(np.float32))
  calib = tmp_path / "calib.json"
  calib.write_text('{"K": [[20, 0, 12], [0, 20, 8], [0, 0, 1]], "T_cam_from_lidar": [[1, 0, 0, 0], [0, 1, 0, 0], '
                   '[0, 0, 1, 0], [0, 0, 0, 1]], "image_size": [16, 24]}')
  rc, out, err = _run(capsys, "--points", d, "--calib", calib, "--output", tmp_path / "o")
  assert rc == 1 and "2 input(s): 1 completed" in out, (out, err)
  failed = [line for line in err.splitlines() if line.startswith("FAILED")]
  assert len(failed) == 1 and failed[0].startswith(f"FAILED points {d / 'bad.npy'}: ranges up to "), err
  assert f"beyond the 1000 m no range sensor reaches: {looks}" in failed[0] and failed[0].endswith(
      "; point coordinates must be in metres"), failed[0]
  assert not (tmp_path / "o" / "bad.npy").exists() and (tmp_path / "o" / "good.npy").is_file()
  assert abs(np.nanmedian(np.load(tmp_path / "o" / "good.npy")) - 20) < 15  # metres, not 2.7 mm


# ------------------------------------------------------------------------------------------------------------
# Issue 50.2 and 50.4: one writer per output folder, which records its model; paths only where the user named.


def _inputs(tmp_path, n=2):
  d = tmp_path / "in"
  d.mkdir()
  for i in range(n):
    np.save(d / f"f{i}.npy", _frame(i))
  return d


def test_a_second_writer_on_the_output_stops_at_once(tmp_path, capsys):
  """Two predict runs into one --output both exited 0 and left a mix of their frames. The output folder is locked
  as train.py locks its workdir (held here by the test process, as a running predict would): the second run stops
  with one line naming the first and writes nothing."""
  from pncnn_jax.runtime import run_files  # pylint: disable=g-import-not-at-top
  d, out = _inputs(tmp_path), tmp_path / "o"
  out.mkdir()
  lock = run_files.WorkdirLock(out)
  lock.what = "predict run"  # the name the holder writes into RUNNING, as predict's own lock does
  with lock:
    started = json.loads(lock.info.read_text())["started"]
    rc, _, err = _run(capsys, "--input", d, "--output", out)
    assert sorted(p.name for p in out.iterdir()) == ["RUNNING"]
  assert rc == 2 and err.strip() == (
      f"error: --output {out} is in use by another predict run (pid {os.getpid()} on host {socket.gethostname()}, "
      f"started {started}); wait for it to end or choose another --output"), err
  assert not any(out.iterdir())


def test_a_rerun_with_another_model_is_refused_or_redone(tmp_path, capsys):
  """A rerun with another --checkpoint skipped the 'finished' files of the old model (exit 0, a folder of one
  model's frames claimed by another). The output records its writer (pncnn_writer.json: the weights' sha256 and
  the settings); another model is refused in one line, nothing changed, and --overwrite redoes every input."""
  d, out = _inputs(tmp_path), tmp_path / "o"
  rc, _, err = _run(capsys, "--input", d, "--output", out)
  assert rc == 0, err
  first = _snapshot(out)
  other = "synthetic:ncnn_conf_l1"
  rc, log, err = _run(capsys, "--input", d, "--output", out, "--checkpoint", other)
  assert rc == 2 and err.strip() == (
      f"error: --output {out} holds the outputs of predict with checkpoint '{MODEL}' ({out / 'pncnn_writer.json'}; "
      "differs in model.network.conf_estimator, model.weights_sha256); pass --overwrite to replace them, or choose "
      "another --output"), err
  assert _snapshot(out) == first
  record = json.loads((out / "pncnn_writer.json").read_text())
  assert record["checkpoint"] == MODEL and len(record["model"]["weights_sha256"]) == 64
  rc, _, err = _run(capsys, "--input", d, "--output", out, "--fill_unsupported")  # another setting, same model
  assert rc == 2 and "differs in settings.fill_unsupported" in err and _snapshot(out) == first, err
  rc, log, err = _run(capsys, "--input", d, "--output", out, "--checkpoint", other, "--overwrite")
  assert rc == 0 and "2 input(s): 2 completed, 0 skipped" in log, (log, err)
  assert json.loads((out / "pncnn_writer.json").read_text())["checkpoint"] == other
  assert all(_snapshot(out)[p] != first[p] for p in first if p.name.endswith((".npy")))
  (out / "pncnn_writer.json").unlink()  # outputs of an older version, or copied in: which model is unknown
  rc, _, err = _run(capsys, "--input", d, "--output", out, "--checkpoint", other)
  assert rc == 2 and "holds outputs without a record of the model that wrote them" in err, err


def test_empty_paths_are_refused(tmp_path, capsys, monkeypatch):
  """--output "" (an unset shell variable) wrote the predictions into the current directory; --input "" read it."""
  d, cwd = _inputs(tmp_path), tmp_path / "cwd"
  cwd.mkdir()
  np.save(cwd / "x.npy", _frame(5))
  monkeypatch.chdir(cwd)
  before = _snapshot(cwd)
  for args, flag in (((d, ""), "--output"), (("", tmp_path / "o"), "--input")):
    rc, _, err = _run(capsys, "--input", args[0], "--output", args[1])
    assert rc == 2 and err.strip() == f"error: {flag} is empty (an unset shell variable?); name the folder or file"
  assert _snapshot(cwd) == before and not (tmp_path / "o").exists()


def test_no_write_follows_a_symlink_out_of_the_output(tmp_path, capsys):
  """A folder symlink inside --output (out/sub -> elsewhere) took the predictions of in/sub/ to a place the user
  never named. Refused in one line before anything is written."""
  d = tmp_path / "in"
  (d / "sub").mkdir(parents=True)
  np.save(d / "sub" / "a.npy", _frame())
  out, elsewhere = tmp_path / "o", tmp_path / "elsewhere"
  out.mkdir()
  elsewhere.mkdir()
  (out / "sub").symlink_to(elsewhere, target_is_directory=True)
  rc, _, err = _run(capsys, "--input", d, "--output", out)
  assert rc == 2 and err.strip() == (
      f"error: --output {out}: {out / 'sub'} is a symlink to {elsewhere}, outside --output; predict does not write "
      "through it (remove the link or choose another --output)"), err
  assert not any(elsewhere.iterdir()) and sorted(p.name for p in out.iterdir()) == ["sub"]


def test_an_output_inside_the_input_is_not_read_back(tmp_path, capsys):
  """--input d --output d/out: the rerun read the first run's predictions as inputs (and refused its own output
  folder as 'the folder of the input files'). A predict output folder inside the input is excluded."""
  d = _inputs(tmp_path)
  out = d / "out"
  rc, log, err = _run(capsys, "--input", d, "--output", out)
  assert rc == 0 and "2 input(s): 2 completed" in log, err
  rc, log, err = _run(capsys, "--input", d, "--output", out)
  assert rc == 0 and "2 input(s): 0 completed, 2 skipped" in log, (log, err)
  assert not (out / "out").exists()
