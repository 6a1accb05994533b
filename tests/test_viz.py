"""Figures: every image has a colour bar labelled with its unit, values spanning decades are on a log scale, titles
name the model, rows are labelled, and the sparsification legend names its normalisation.

The figures are captured before they are written (viz._save), so their axes, labels and norms can be inspected.
"""

import io as std_io

import numpy as np
import pytest
from matplotlib import colors

from pncnn_jax import viz
from pncnn_jax.uncertainty import Sparsification


@pytest.fixture
def figures(monkeypatch):
  captured = []
  monkeypatch.setattr(viz, "_save", lambda fig, path, dpi=110: captured.append(fig))
  return captured


def _images(fig):
  """[(image axes, its colour bar's label, its norm)] for every imshow of the figure."""
  return [(ax, im.colorbar.ax.get_ylabel() if im.colorbar else None, im.norm)
          for ax in fig.axes for im in ax.get_images()]


def _scene(h=16, w=48, seed=0):
  rng = np.random.default_rng(seed)
  sparse = np.where(rng.random((h, w)) < 0.2, rng.uniform(2, 60, (h, w)), 0.0)
  target = np.where(rng.random((h, w)) < 0.4, rng.uniform(2, 60, (h, w)), 0.0)
  depth = rng.uniform(2, 60, (h, w))
  return sparse, target, depth


def test_preview_of_an_ncnn_confidence_spanning_decades_is_log_scaled(figures):
  """predict's preview: input, depth, confidence; a confidence spanning 1e-25..0.9 is on a log colour scale and
  says so, with its range in the title; the title names the model."""
  sparse, _, depth = _scene()
  conf = np.geomspace(1e-25, 0.9, depth.size).reshape(depth.shape)
  viz.save_depth_preview(depth, "unused.png", sparse_m=sparse, confidence=conf, title="model synthetic:ncnn, file a")
  (fig,) = figures
  assert fig._suptitle.get_text() == "model synthetic:ncnn, file a"
  shown = _images(fig)
  assert [label for _, label, _ in shown] == ["depth [m]", "depth [m]", "confidence (unitless), log scale"]
  assert isinstance(shown[2][2], colors.LogNorm) and not isinstance(shown[1][2], colors.LogNorm)
  assert "values 1.0e-25 to 0.9" in shown[2][0].get_title()
  assert "no measurement" in shown[0][0].get_title()


def test_preview_of_a_sigma_within_a_decade_is_linear(figures):
  sparse, _, depth = _scene()
  viz.save_depth_preview(depth, "unused.png", sparse_m=sparse, sigma_m=np.linspace(0.5, 2.0, depth.size).reshape(
      depth.shape), title="t")
  labels = [label for _, label, _ in _images(figures[0])]
  assert labels == ["depth [m]", "depth [m]", "sigma [m]"]


@pytest.mark.parametrize("fill", [False, True])
def test_preview_hatches_the_pixels_without_a_valid_prediction(figures, fill):
  """Issue 50: the preview drew the pixels without input support (depth 0 m, or the network's extrapolation) in
  the colour of a near depth. They are hatched in the depth and uncertainty rows, whether predict wrote NaN there
  (the default) or the network's values (--fill_unsupported), and no colour of the scale is drawn on them."""
  from matplotlib import colormaps
  sparse, _, depth = _scene()
  invalid = np.zeros(depth.shape, bool)
  invalid[:5] = True  # the rows above a LiDAR
  depth[:5] = 0.0 if fill else np.nan
  sigma = np.where(invalid, 30.0 if fill else np.nan, np.linspace(0.5, 2.0, depth.size).reshape(depth.shape))
  # predict's default writes NaN there: the preview hatches the non-finite depths by itself; with
  # --fill_unsupported it names them (`invalid`).
  viz.save_depth_preview(depth, "unused.png", sparse_m=sparse, sigma_m=sigma, title="t",
                         **({"invalid": invalid} if fill else {}))
  (fig,) = figures
  shown = _images(fig)
  assert "hatched" in shown[1][0].get_title() and "31% of pixels" in shown[1][0].get_title()
  assert shown[2][2].vmax < 30  # the colour range is the valid pixels'
  fig.canvas.draw()
  rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
  for ax, _, _ in shown[1:]:
    (im,) = ax.get_images()
    np.testing.assert_array_equal(np.ma.getmaskarray(im.get_array()), invalid)  # drawn white (NaN), not coloured
    assert any(viz.HATCH in [*getattr(c, "hatches", []), c.get_hatch()] for c in ax.collections), "no hatching"
    # The rendered pixels of the region's middle row: white and the hatch's grey, never a colour of the scale.
    x0, y0 = ax.transData.transform((0, 2))
    x1, _ = ax.transData.transform((depth.shape[1] - 1, 2))
    row = rgb[int(round(rgb.shape[0] - y0)), int(x0):int(x1)]
    assert (np.ptp(row, axis=1) < 8).all(), "a coloured pixel in the hatched region"
    assert (row.min(axis=1) < 200).any() and (row.min(axis=1) > 240).any()  # hatch lines on white
    near = (np.asarray(colormaps["turbo"](0.0)[:3]) * 255).astype(int)
    assert not (np.abs(row - near).max(axis=1) < 30).any()


@pytest.mark.parametrize("kind", ["sigma [m]", "confidence (uncalibrated)"])
def test_panels_have_units_row_labels_and_the_model_in_the_title(figures, kind):
  panels = []
  for seed in (0, 1):
    sparse, target, depth = _scene(seed=seed)
    unc = np.geomspace(0.1, 20, depth.size).reshape(depth.shape) if "sigma" in kind else np.geomspace(
        1e-20, 0.9, depth.size).reshape(depth.shape)
    panels.append({"sparse": sparse, "input_confidence": np.geomspace(1e-3, 5, depth.size).reshape(depth.shape),
                   "depth": depth, "uncertainty": unc, "target": target,
                   "error": np.where(target > 0, np.abs(depth - target), np.nan)})
  viz.panels_figure(panels, "unused.png", kind, model_name="pncnn_masked@synthetic", row_labels=["a", "b"])
  (fig,) = figures
  assert "pncnn_masked@synthetic" in fig._suptitle.get_text()
  shown = _images(fig)
  assert len(shown) == 10
  want = ["depth [m]", "c0 (unitless), log scale", "depth [m]",
          "sigma [m], log scale" if "sigma" in kind else "confidence (unitless), log scale", "|error| [m]"]
  assert [label for _, label, _ in shown[::2]] == want and [label for _, label, _ in shown[1::2]] == want
  assert [ax.get_title() for ax, _, _ in shown[:2]] == ["a", "b"]  # one column per image
  assert [ax.get_ylabel() for ax, _, _ in shown[::2]] == ["input depth\n(white: none)", "input\nconfidence c0",
                                                          "prediction", "sigma" if "sigma" in kind else
                                                          "output\nconfidence", "|error| at\nground truth"]


def _curve(start_below_one: bool) -> Sparsification:
  fr = np.linspace(0, 1, 100, endpoint=False)
  model = np.linspace(0.25, 1.0, 100) if start_below_one else np.linspace(1.0, 0.1, 100)
  return Sparsification(0.3, fr, np.exp(-10 * fr), model)


def test_sparsification_legend_names_the_normalisation(figures):
  viz.sparsification_plot({"ncnn": _curve(True)}, "unused.png", gustafsson={"ncnn": _curve(False)}, title="T")
  (fig,) = figures
  axes = [ax for ax in fig.axes if ax.get_legend()]
  assert len(axes) == 2
  notes = [ax.get_legend().get_title().get_text() for ax in axes]
  assert "pNCNN normalisation: model curve / its own maximum" in notes[0] and "starts below 1" in notes[0]
  assert "Gustafsson et al. normalisation: both curves / their" in notes[1]
  for ax in axes:
    assert "(unitless)" in ax.get_xlabel() and "(unitless)" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["ncnn: model (AUSE 0.300)", "ncnn: oracle"]


def test_figures_write_pngs_to_files_and_file_objects(tmp_path):
  sparse, target, depth = _scene()
  viz.save_depth_preview(depth, tmp_path / "sub" / "p.png", sparse_m=sparse, sigma_m=np.ones_like(depth))
  buf = std_io.BytesIO()
  viz.sparsification_plot({"m": _curve(False)}, buf)
  assert (tmp_path / "sub" / "p.png").read_bytes()[:4] == b"\x89PNG" and buf.getvalue()[:4] == b"\x89PNG"


def test_value_range():
  assert viz.value_range(np.array([0.0, 1.0, 1.0]), positive=True) == (0.0, 1.0, False)  # a 0/1 mask: linear
  lo, hi, log = viz.value_range(np.geomspace(1e-6, 1, 1000), positive=True, hi_pct=100)
  assert log and hi == 1.0 and 1e-6 < lo < 1e-5
