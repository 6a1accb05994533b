"""Behaviour across sensors (pncnn_jax.experiments.sensors): the generator's thinned LiDAR, the page's command, and
the real KITTI frame thinned to fewer lasers (real data: fails, not skips, without ../shared)."""

import json

import numpy as np
import pytest

from pncnn_jax.data import io as data_io
from pncnn_jax.data import points, sparsify, synthetic
from pncnn_jax.experiments import sensors
from pncnn_jax.inference import completer


def test_fewer_beams_keep_every_other_laser_of_the_same_scan():
  """32 and 16 beams: about 1/2 and 1/4 of the 64-beam returns, the same scene and ground truth; the kept beams'
  returns are the 64-beam scan's (same noise and dropouts): every 16-beam return is a 32-beam return where no
  nearer return of a dropped beam hid it, so almost all of them coincide exactly."""
  window = (112, 416, 128, 384)
  ex = {b: synthetic.generate(0, 3, synthetic.SyntheticConfig(lidar_beams=b), window=window, stream=2)
        for b in (64, 32, 16)}
  n = {b: int((e["sparse"] > 0).sum()) for b, e in ex.items()}
  assert 0.4 < n[32] / n[64] < 0.6 and 0.4 < n[16] / n[32] < 0.6, n
  np.testing.assert_array_equal(ex[16]["target"], ex[64]["target"])
  np.testing.assert_array_equal(ex[16]["dense"], ex[64]["dense"])
  both = (ex[16]["sparse"] > 0) & (ex[32]["sparse"] > 0)
  assert both.sum() >= 0.95 * n[16]
  assert np.mean(ex[16]["sparse"][both] == ex[32]["sparse"][both]) > 0.95
  with pytest.raises(ValueError, match=r"lidar_beams must be None or a divisor of the 64 beams of 'hdl64' "
                                       r"\(64, 32, 16, 8, 4, 2, 1\), got 48"):
    synthetic.generate(0, 0, synthetic.SyntheticConfig(lidar_beams=48), window=window)


def test_the_command_writes_the_table_with_ratios_to_64_beams_and_checks_the_targets(tmp_path, capsys):
  out = tmp_path / "SENSORS.md"
  assert sensors.main(["--output", str(out), "--models", "ncnn,masked=synthetic:pncnn_masked", "--recommended",
                       "masked", "--sensors", "thin4,vo_015", "--num_scenes", "2", "--crop", "64x96",
                       "--kitti_raw", ""]) == 0
  page = out.read_text()
  table = page.split("## Targets of the sensor-robust model")[0]
  rows = [line.split(" | ") for line in table.splitlines() if line.startswith(("| ncnn |", "| masked |"))]
  assert [r[:2] for r in rows] == [["| ncnn", s] for s in ("hdl64", "thin4", "vo_015")] + [
      ["| masked", s] for s in ("hdl64", "thin4", "vo_015")]  # the reference row first
  assert "×)" in rows[1][3] and rows[0][-4] == "-"  # ratios; NCNN has no sigma: no coverage
  data = json.loads(out.with_suffix(".json").read_text())
  got = data["results"]["masked"]
  assert list(got) == ["hdl64", "thin4", "vo_015"]
  assert got["hdl64"]["density"] > got["thin4"]["density"] > got["vo_015"]["density"] > 0
  assert got["thin4"]["mae_ratio"] == pytest.approx(got["thin4"]["mae"] / got["hdl64"]["mae"])
  targets = page.split("## Targets of the sensor-robust model")[1]
  assert "| masked | hdl64 | 64 beams | - |" in targets and "| ncnn |" not in targets  # only models with sigma
  verdict = "holds" if got["thin4"]["mae_ratio"] <= 1.6 else "misses"
  assert f"| masked | thin4 | 16 beams | {got['thin4']['mae_ratio']:.2f}x (<= 1.6: {verdict}) |" in targets
  kitti = page.split("## The real KITTI frame")[1]
  assert "Not evaluated: left out by the command (`--kitti_raw ''`" in kitti
  assert "--kitti_raw DIR --kitti_depth DIR" in kitti  # how to add it
  # The findings written by hand below the mark survive a regeneration; the generated part is rewritten.
  findings = f"{sensors.FINDINGS_MARK}\n\n## Findings\n\nThe reading of the numbers.\n"
  out.write_text(page.replace("## Targets", "## Stale targets") + "\n" + findings)
  assert sensors.main(["--output", str(out), "--models", "ncnn", "--sensors", "thin4", "--num_scenes", "1",
                       "--crop", "64x96", "--kitti_raw", ""]) == 0
  again = out.read_text()
  assert again.endswith("\n" + findings) and again.count(sensors.FINDINGS_MARK) == 1
  assert "## Stale targets" not in again and "| masked |" not in again
  assert data["kitti_frame"]["available"] is False
  assert sensors.main(["--output", str(out), "--sensors", "sonar"]) == 2
  assert "error: --sensors: unknown sensor or sensor mixture 'sonar'" in capsys.readouterr().err
  for flag, want in (("--kitti_raw", "error: --kitti_raw {}: no such folder"),
                     ("--kitti_official", "error: --kitti_official {}: no such file")):
    assert sensors.main(["--output", str(out), flag, str(tmp_path / "none")]) == 2
    assert want.format(tmp_path / "none") in capsys.readouterr().err
  assert sensors.main(["--output", str(out), "--kitti_raw", str(tmp_path), "--kitti_depth", str(tmp_path)]) == 2
  assert f"error: --kitti_depth {tmp_path}: no */proj_depth/velodyne_raw/*/*.png under" in capsys.readouterr().err


@pytest.fixture(scope="module")
def kitti_dirs(shared_dir):
  data = shared_dir / "data"
  if not (data / "kitti_raw_mini").is_dir() or not (data / "kitti_depth_mini").is_dir():
    pytest.fail(f"{data}/kitti_raw_mini and kitti_depth_mini not found: the real-frame tests need them")
  return data / "kitti_raw_mini", data / "kitti_depth_mini"


@pytest.fixture(scope="module")
def kitti_files(kitti_dirs):
  return sensors.kitti_frame_files(*kitti_dirs)


def test_the_real_frame_thinned_is_the_scans_rows_projected_as_predict_does(kitti_files):
  """The one frame with a scan and ground truth is found; its 32- and 16-beam scans are rows of the 64-beam scan,
  about 1/2 and 1/4 of them; the 64-beam input is `predict --points`'s projection, cropped as KITTI's frames, and
  agrees with KITTI's own velodyne_raw (96.8 % of its pixels within 2 px, docs/deploy/sensors.md)."""
  assert [f["name"] for f in kitti_files] == ["2011_09_26_drive_0001_sync/image_02/0000000005"]
  files = kitti_files[0]
  frame = sensors.kitti_frame(files)
  full = frame.scans[1]
  rows = {r.tobytes() for r in full}
  for k in (2, 4):
    thin = frame.scans[k]
    assert all(r.tobytes() in rows for r in thin), k  # a subset of the scan's points
    assert abs(len(thin) / len(full) - 1 / k) < 0.03, (k, len(thin), len(full))
  ours = points.sparse_depth_from_files(files["scan"], files["calib"], camera="02")  # what predict --points reads
  raw = data_io.read_kitti_depth(files["velodyne_raw"])
  top, left = sparsify.crop_offsets(*raw.shape, 352, 1216, "bottom")
  win = np.s_[top:top + 352, left:left + 1216]
  ref = sensors.KITTI_REFERENCE
  np.testing.assert_array_equal(frame.sparse[ref], ours[win])
  np.testing.assert_array_equal(frame.sparse["64 beams, KITTI's velodyne_raw"], raw[win])
  np.testing.assert_array_equal(frame.target, data_io.read_kitti_depth(files["groundtruth"])[win])
  assert frame.agreement["within_2px"] == points.depth_agreement(ours, raw) > 0.96
  assert points.depth_agreement(frame.sparse[ref], raw[win]) > 0.96  # in the crop too
  for row, k in sensors.KITTI_ROWS.items():  # fewer lasers: about 1/k of the input pixels, each a point of the scan
    if k is not None:  # (so the whole scan's map has a point there, at that depth or nearer)
      thin = frame.sparse[row]
      assert np.all((thin == 0) | ((ours[win] > 0) & (thin >= ours[win]))), row
      assert abs((thin > 0).sum() / (frame.sparse[ref] > 0).sum() - 1 / k) < 0.03, row


@pytest.mark.slow
def test_the_real_frame_section_matches_a_completer_run(kitti_dirs, kitti_files, tmp_path):
  """The command's real-frame section for the default model alone (the official checkpoint left out): its rows'
  MAE equal a direct `Completer` run on each input of the frame (the metres it was given, the ground-truth pixels),
  the ratios are to its own 64-beam MAE, and the page says what one frame is and is not."""
  out = tmp_path / "SENSORS.md"
  assert sensors.main(["--output", str(out), "--models", "ncnn", "--sensors", "thin4", "--num_scenes", "1",
                       "--crop", "64x96", "--kitti_raw", str(kitti_dirs[0]), "--kitti_depth", str(kitti_dirs[1]),
                       "--kitti_official", ""]) == 0
  kitti = json.loads(out.with_suffix(".json").read_text())["kitti_frame"]
  label = completer.RECOMMENDED.partition(":")[2]
  assert kitti["available"] and list(kitti["results"]) == [label]
  rows = kitti["results"][label]
  assert list(rows) == list(sensors.KITTI_ROWS)
  frame = sensors.kitti_frame(kitti_files[0])
  model = completer.Completer.from_pretrained(fill_unsupported=True)
  valid = frame.target > 0
  for row, r in rows.items():
    got = model(frame.sparse[row])
    depth = got.depth
    assert kitti["frames"][0]["target_pixels_unsupported"][row] == (~got.support[valid]).sum(), row
    mae_mm = 1000 * np.mean(np.abs(depth[valid].astype(np.float64) - frame.target[valid]))
    assert r["mae"] == pytest.approx(mae_mm, rel=1e-5), row
    assert r["mae_ratio"] == pytest.approx(r["mae"] / rows[sensors.KITTI_REFERENCE]["mae"])
    assert 90 <= r["coverage_95"] <= 100 and r["num_images"] == 1
  assert rows["16 beams (every 4th laser)"]["mae"] > rows["32 beams (every 2nd laser)"]["mae"] > rows[
      sensors.KITTI_REFERENCE]["mae"]
  page = out.read_text()
  section = page.split("## The real KITTI frame")[1]
  assert "One frame is not a benchmark" in section and "left out (`--kitti_official ''`)" in section
  r = rows["16 beams (every 4th laser)"]
  assert (f"| {label} | 16 beams (every 4th laser) | {r['density']:.3g} | {r['mae']:.0f} | {r['rmse']:.0f} | "
          f"{r['mae_ratio']:.2f}x | {r['coverage_95']:.1f} |") in section
  assert page.index("## Targets of the sensor-robust model") < page.index("## The real KITTI frame")


def test_the_sensor_robust_runs_get_the_paper_claims_against_the_long_page(tmp_path, capsys):
  """Claims (b)-(d) of the two sensor-robust runs (<workdir>/SENSOR_RUNS.json) against NCNN-Conf-L1 (masked) of the
  long page; the spread over their seeds, which the claims cite, comes with them; no other run's claim. Worked by
  hand: the reference has MAE 500, RMSE 2500, AUSE 0.2."""
  from fake_runs import fake_run  # pylint: disable=g-import-not-at-top
  name = "sparse_var_beta_detach_masked_lidar_mix"
  ours = {"scenes": "96 held-out test scenes",
          "runs": {name: fake_run(540, 2600, 0.05, 0.9, 0.85, 0.1, 1.0),                # (b) (c) (d) hold
                   f"{name}_seed1": fake_run(600, 2600, 0.12, 0.9, 0.7, 0.1, 1.0)}}   # (d) MAE +20 %, (c), (b) not
  reference = {"runs": {"ncnn_conf_l1_masked": fake_run(500, 2500, 0.2, 0.9, 0.85, 0.01, 0.2),
                        "pncnn_masked": fake_run(510, 2550, 0.08, 0.81, 0.81, 0.5, 1.0),
                        name: fake_run(1, 1, 1, 0, 0, 1, 1)}}  # a row of the same name on the page: ours wins
  claims, spread = sensors.paper_claims(ours, reference)
  got = {c: (ok, nums) for c, ok, nums in claims}
  assert [c[:3] for c in got] == ["(b)", "(c)", "(d)"] and all(f"`{name}`" in c for c in got)
  b, c, d = got.values()
  assert (b[0], c[0], d[0]) == (True, True, True)
  assert "AUSE (pNCNN def.) 0.050 vs 0.200 (ratio 0.25)" in c[1] and "MAE 540 vs 500 mm (+8.0 %)" in d[1]
  assert b[1].endswith("it holds for 1 of 2 (table 'Spread over seeds')")
  assert d[1].endswith("it holds for 1 of 2 (table 'Spread over seeds')")
  assert spread[1].startswith("## Spread over seeds")
  assert f"| `{name}` seeds 0-1: mean (sd) | 570 (42.4) |" in "\n".join(spread)
  assert "`pncnn_masked`" not in "\n".join(spread)
  summary = tmp_path / "SENSOR_RUNS.json"
  summary.write_text(json.dumps(ours))
  page = sensors.render({}, {"num_scenes": 2, "crop": [8, 8], "command": "c", "date": "d", "commit": "x",
                             "seconds": 1.0, "machine": "m", "sensors": ["hdl64"], "claims_scenes": ours["scenes"]},
                        {"available": False, "reason": "r"}, (claims, spread))
  section = page.split("## The paper's claims for the sensor-robust model (64 beams)")[1]
  assert "On the long recipe's 96 held-out test scenes seen by the 64-beam LiDAR" in section
  assert f"- (c) `{name}` AUSE clearly below `ncnn_conf_l1_masked`'s (ratio <= 0.5): **holds**." in section
  assert "### Spread over seeds" in section.split("## The real KITTI frame")[0]
  (tmp_path / "empty.json").write_text("{}")
  for bad, why in ((tmp_path / "none.json", "No such file"), (tmp_path / "empty.json", "'runs'")):
    assert sensors.main(["--output", str(tmp_path / "S.md"), "--runs_summary", str(bad), "--kitti_raw", ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --runs_summary {bad} with --reference_results") and why in err, err
    assert not (tmp_path / "S.md").exists()
