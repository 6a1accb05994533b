"""The synthetic sparse-flow benchmark: exact flow on known motions, the tracks and their failure labels, the
grain pipeline."""

import math

import numpy as np
import pytest

from pncnn_jax.data import make_iterator, synthetic
from pncnn_jax.flow import dataset as flow_dataset
from pncnn_jax.flow import scenes as flow_scenes

CFG = flow_scenes.FlowSceneConfig()


def _empty_scene(boxes=()):
  return synthetic.Scene(np.asarray(boxes, np.float32).reshape(-1, 7), np.zeros((0, 5), np.float32),
                         np.zeros((0, 4), np.float32), 0.0)


def _flow(scene, motion, window):
  depth, solid, d_cam = flow_scenes.render(scene, CFG, window)
  return (*flow_scenes.exact_flow(scene, motion, CFG, depth, solid, d_cam, window), depth, solid)


def test_exact_flow_of_a_forward_translation_over_the_road():
  # Camera forward by T over a flat road: a road point at depth Z moves to Z - T, so its pixel moves radially from
  # the principal point: flow = (u - cx, v - cy) * T / (Z - T), with Z = fy * g / (v - cy). Sky does not move.
  t = 1.2
  window = (40, 100, 120, 300)
  f, valid, depth, _ = _flow(_empty_scene(), flow_scenes.Motion(np.eye(3), np.array([0.0, 0.0, t]), []), window)
  top, left, h, w = window
  v = np.arange(top, top + h)[:, None] + np.zeros((1, w))
  u = np.arange(left, left + w)[None, :] + np.zeros((h, 1))
  road = np.isfinite(depth)
  assert road.sum() > 0.3 * road.size and (~road).sum() > 0.1 * road.size
  z = CFG.fy * synthetic.CAMERA_HEIGHT_M / (v - CFG.cy)
  np.testing.assert_allclose(f[..., 0][road], ((u - CFG.cx) * t / (z - t))[road], rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(f[..., 1][road], ((v - CFG.cy) * t / (z - t))[road], rtol=1e-4, atol=1e-4)
  assert np.abs(f[~road]).max() < 1e-9 and valid.all()


def test_exact_flow_of_a_pure_yaw_does_not_depend_on_depth():
  # Yaw psi, no translation: a ray at horizontal angle alpha (tan alpha = (u - cx) / fx) is seen at alpha - psi:
  # u2 = cx + fx tan(alpha - psi); v2 = cy + fy y / (sin(psi) x + cos(psi)) for the ray (x, y, 1).
  psi = math.radians(2.0)
  window = (0, 0, CFG.height, CFG.width)
  motion = flow_scenes.Motion(flow_scenes.raycast.yaw_matrix(psi), np.zeros(3), [])
  f, _, depth, _ = _flow(_empty_scene(), motion, window)
  x = (np.arange(CFG.width)[None, :] - CFG.cx) / CFG.fx
  y = (np.arange(CFG.height)[:, None] - CFG.cy) / CFG.fy
  u2 = CFG.cx + CFG.fx * np.tan(np.arctan(x) - psi)
  v2 = CFG.cy + CFG.fy * y / (math.sin(psi) * x + math.cos(psi))
  np.testing.assert_allclose(f[..., 0], u2 - np.arange(CFG.width)[None, :] + 0 * y, atol=2e-3)
  np.testing.assert_allclose(f[..., 1], v2 - np.arange(CFG.height)[:, None] + 0 * x, atol=2e-3)
  assert np.isfinite(depth).any() and (~np.isfinite(depth)).any()  # road and sky alike


def test_a_car_moving_with_the_camera_has_zero_flow():
  disp = np.array([0.0, 0.0, 1.0])
  car = [[0.0, 1.0, 10.0, 1.0, 0.6, 2.0, 0.0]]
  motion = flow_scenes.Motion(np.eye(3), disp, [(0, 1, disp)])
  f, _, _, solid = _flow(_empty_scene(car), motion, (0, 0, CFG.height, CFG.width))
  on_car = solid == 0
  assert on_car.sum() > 1000
  assert np.abs(f[on_car]).max() < 1e-3 and np.abs(f[~on_car & (f[..., 1] != 0)]).max() > 1.0


def test_render_gives_the_depth_of_the_synthetic_camera():
  scene = synthetic.make_scene(np.random.default_rng(3))
  cam = synthetic.SyntheticConfig(height=CFG.height, width=CFG.width, fx=CFG.fx, fy=CFG.fy, cx=CFG.cx, cy=CFG.cy)
  window = (30, 200, 64, 192)
  depth, solid, _ = flow_scenes.render(scene, CFG, window)
  np.testing.assert_array_equal(depth, synthetic._render_camera(scene, cam, *window))  # pylint: disable=protected-access
  classes = flow_scenes.solid_classes(scene)
  assert (classes == flow_scenes.SIDEWALK).sum() == 2 and (classes == flow_scenes.FACADE).sum() > 2
  assert np.all(solid[~np.isfinite(depth)] == -1)


def _labels(index, **track):
  ex = flow_dataset.generate(0, index, track_config=flow_dataset.TrackConfig(**track), window=(40, 96, 96, 320))
  tracks = ex["sparse"][..., 2] > 0
  err = np.hypot(*(ex["sparse"][..., :2] - ex["target"][..., :2])[tracks].T)
  return ex, tracks, err, ex["failure"][..., 0][tracks]


def test_failed_tracks_are_labelled_and_good_tracks_are_exact_without_noise():
  kinds = []
  for index in range(4):
    ex, tracks, err, kind = _labels(index, noise_px=0.0)
    assert np.all(ex["failure"][~tracks] == 0) and np.array_equal(ex["corrupted"][..., 0], ex["failure"][..., 0] > 0)
    assert np.all(ex["sparse"][~tracks] == 0.0)
    assert np.all(err[kind == flow_dataset.NONE] == 0.0)
    assert np.all(err[kind > 0] >= flow_dataset.MIN_FAILURE_PX - 1e-4)
    kinds.append(kind)
  kinds = np.concatenate(kinds)
  assert set(np.unique(kinds)) == set(range(len(flow_dataset.FAILURES)))  # every failure mode occurs
  assert 0.15 < np.mean(kinds > 0) < 0.5


def test_gross_failures_sit_on_homogeneous_texture_and_noise_is_sub_pixel():
  ex, tracks, err, kind = _labels(5)
  l1, l2, _ = flow_dataset.structure_tensor(ex["image"][..., 0])
  energy = (l1 + l2)[tracks]
  cfg = flow_dataset.TrackConfig()
  assert np.all(energy[kind == flow_dataset.GROSS] < cfg.homogeneous_energy)
  assert np.median(err[kind == flow_dataset.NONE]) < 0.5 and np.median(err[kind > 0]) > 3.0
  assert 0.005 < tracks.mean() < 0.025


def test_structure_tensor_of_an_edge_and_a_corner():
  img = np.zeros((21, 21))
  img[:, 10:] = 1.0  # a vertical edge: the image does not change along y
  l1, l2, edge_dir = flow_dataset.structure_tensor(img)
  assert l1[10, 10] > 0.05 and l2[10, 10] == pytest.approx(0.0, abs=1e-12)
  np.testing.assert_allclose(np.abs(edge_dir[10, 10]), [0.0, 1.0], atol=1e-9)
  img[:10] = 0.0  # a corner at (10, 10)
  l1, l2, _ = flow_dataset.structure_tensor(img)
  peak = np.unravel_index(np.argmax(l2), l2.shape)
  assert l2[10, 10] > 0.01 and max(abs(peak[0] - 10), abs(peak[1] - 10)) <= 2  # strongest within the window
  assert l2[17, 10] == pytest.approx(0.0, abs=1e-12) and l2[3, 3] == 0.0  # on the edge below it, and flat


def test_examples_are_deterministic_and_the_flow_does_not_depend_on_the_window():
  a, b = (flow_dataset.generate(1, 7, window=(20, 30, 64, 192)),
          flow_dataset.generate(1, 7, window=(20, 30, 64, 192)))
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])
  full = flow_dataset.generate(1, 7)
  np.testing.assert_allclose(a["target"], full["target"][20:84, 30:222], atol=1e-4)
  np.testing.assert_allclose(a["image"], full["image"][20:84, 30:222], atol=1e-6)
  with pytest.raises(ValueError, match="not inside"):
    flow_dataset.generate(1, 7, window=(150, 0, 64, 64))


def test_pipeline_batches_and_resumes():
  cfg = {"dataset": "flow_synthetic", "split": "train", "crop": "random", "crop_height": 32, "crop_width": 64,
         "batch_size": 2, "synthetic_size": 6, "num_epochs": None, "num_threads": 1}
  it = make_iterator(cfg)
  first = next(it)
  assert first["sparse"].shape == first["target"].shape == (2, 32, 64, 3)
  assert first["corrupted"].shape == first["failure"].shape == first["image"].shape == (2, 32, 64, 1)
  state = it.get_state()
  second = next(it)
  it2 = make_iterator(cfg)
  it2.set_state(state)
  np.testing.assert_array_equal(next(it2)["sparse"], second["sparse"])
  with pytest.raises(ValueError, match="split of flow_synthetic"):
    make_iterator({**cfg, "split": "selval"})
