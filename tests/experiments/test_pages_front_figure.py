"""The README's front figure (pncnn_jax.experiments.pages.front_figure): the real KITTI frame at 64 and 16 beams,
completed by the default model (real data: fails, not skips, without ../shared)."""

import re

import numpy as np
import pytest
from PIL import Image

from pncnn_jax.data import input_contract
from pncnn_jax.experiments import sensors
from pncnn_jax.experiments.pages import front_figure
from pncnn_jax.inference import completer


@pytest.mark.filterwarnings("ignore::pncnn_jax.inference.completer.InputDensityWarning")  # 16 beams: below training
def test_the_command_draws_the_frame_with_a_direct_completer_runs_numbers(shared_dir, tmp_path, capsys):
  """One PNG of README width (at most 1000 px wide, under 400 KB) whose titles (printed as drawn) hold the points
  kept, the input density and the MAE of a direct `Completer.from_pretrained()` run on the frame's 64-beam scan and
  its every 4th laser, scored at the annotated ground truth where the prediction is valid."""
  raw, depth = shared_dir / "data" / "kitti_raw_mini", shared_dir / "data" / "kitti_depth_mini"
  out = tmp_path / "front.png"
  assert front_figure.main(["--output", str(out), "--kitti_raw", str(raw), "--kitti_depth", str(depth)]) == 0
  with Image.open(out) as im:
    w, h = im.size
  assert 900 <= w <= 1000 and 0.8 * w <= h <= 1.1 * w and out.stat().st_size < 400_000, (w, h, out.stat().st_size)
  titles = [line for line in capsys.readouterr().out.splitlines() if " points (" in line]
  assert len(titles) == 2

  frame = sensors.kitti_frame(sensors.kitti_frame_files(raw, depth)[0])
  model = completer.Completer.from_pretrained()
  gt = frame.target > 0
  for title, (label, every, key) in zip(titles, [("64 beams", 1, sensors.KITTI_REFERENCE),
                                                 ("16 beams", 4, "16 beams (every 4th laser)")]):
    sparse = frame.sparse[key]
    c = model(sparse)
    ok = gt & np.isfinite(c.depth)
    mae_mm = 1000 * np.mean(np.abs(c.depth[ok].astype(np.float64) - frame.target[ok]))
    density = float(input_contract.input_density(sparse)[0])
    want = (f"{label}: .*: {len(frame.scans[every]):,} points \\({int((sparse > 0).sum()):,} pixels in the crop\\), "
            f"input density {completer.density_text(density)} %, MAE {mae_mm:.0f} mm at {int(ok.sum()):,} "
            "ground-truth pixels")
    assert re.match(want, title), (want, title)
  assert len(frame.scans[4]) < 0.3 * len(frame.scans[1])
