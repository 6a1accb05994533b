"""One training step against the official one (../shared/reference/golden/train_step), following the
comparison recipe of reference/README.md ("Suggested comparison recipe for a port")."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import GOLDEN, WEIGHTS, load_npz, nchw_to_nhwc

from pncnn_jax import convert, models, train_step

LR = 0.01
CASES = {
    "kitti_ncnn_conf_l1__MaskedL1Loss__b2_64x96": ("kitti_ncnn_conf_l1", "ncnn_conf_l1"),
    "kitti_ncnn_conf_l2__MaskedL2Loss__b2_64x96": ("kitti_ncnn_conf_l2", "ncnn_conf_l2"),
    "kitti_pncnn_rand0__MaskedProbLoss__b2_64x96": ("kitti_pncnn_rand0", "pncnn"),
    "kitti_pncnn_exp_rand1__MaskedProbExpLoss__b2_64x96": ("kitti_pncnn_exp_rand1", "pncnn_exp"),
}


# Each case's tests share one cached run: keep them on one xdist worker (the Makefile uses --dist loadgroup).
CASE_PARAMS = [pytest.param(c, marks=pytest.mark.xdist_group(c)) for c in CASES]


def _is_pre_bn_bias(name: str) -> bool:
  return (name.startswith(("conf_estimator.", "var_estimator.")) and ".outc." not in name
          and name.endswith(("conv.0.bias", "conv.3.bias")))


def _torch_names(params, batch_stats) -> dict[str, np.ndarray]:
  """Our params + batch_stats trees -> torch state_dict names and layouts."""
  sd = convert.variables_to_state_dict({"params": params, "batch_stats": batch_stats})
  return {k: np.asarray(v) for k, v in sd.items()}


@functools.cache
def _run(case: str):
  weights, variant = CASES[case]
  golden = load_npz(GOLDEN / "train_step" / f"{case}.npz")
  variables, _ = convert.state_dict_to_variables(load_npz(WEIGHTS / f"{weights}.npz"))
  variables = jax.tree.map(jnp.asarray, variables)
  model = models.build_model(variant)
  state = train_step.create_train_state(model, variables, train_step.make_optimizer(LR))
  batch = {"sparse": jnp.asarray(nchw_to_nhwc(golden["input"])), "target": jnp.asarray(nchw_to_nhwc(golden["target"]))}
  loss_name = models.VARIANTS[variant].loss

  def everything(state, batch):
    # One program (one compile, ~20 s on CPU): the train step itself, plus the gradients and train-mode outputs
    # it computes internally (XLA shares the duplicated forward/backward), plus the eval-mode forward before.
    (_, (out_train, stats)), grads = train_step.loss_and_grads(state, state.params, batch, loss_name)
    new_state, metrics = train_step.train_step(state, batch, loss_name=loss_name)
    return train_step.eval_step(state, batch), out_train, stats, grads, new_state, metrics

  return (golden, variables, *jax.jit(everything)(state, batch))


def _check_outputs(golden_key, golden, out, pred_atol):
  ref = nchw_to_nhwc(golden[golden_key])
  got = nchw_to_nhwc(np.asarray(out.stack_nchw()))
  assert np.abs(got[..., 0] - ref[..., 0]).max() <= pred_atol
  excess = np.abs(got[..., 1:] - ref[..., 1:]) - (1e-6 + 1e-3 * np.abs(ref[..., 1:]))
  assert excess.max() <= 0, f"{golden_key}: confidence off by {excess.max() + 1e-6:.3g}"


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_outputs_and_loss(shared_dir, case):
  golden, _, out_eval, out_train, _, _, _, metrics = _run(case)
  _check_outputs("out_eval_before", golden, out_eval, 5e-3)
  _check_outputs("out_train", golden, out_train, 1e-2)
  np.testing.assert_allclose(float(metrics["loss"]), float(golden["loss"]), rtol=1e-5)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_gradients(shared_dir, case):
  golden, variables, _, _, _, grads, _, _ = _run(case)
  got = _torch_names(grads, variables["batch_stats"])
  ref = {k[len("grad/"):]: v for k, v in golden.items() if k.startswith("grad/")}
  assert set(ref) <= set(got) and len(ref) == len(jax.tree.leaves(grads))
  for name, g_ref in ref.items():
    g = got[name]
    if _is_pre_bn_bias(name):  # analytically zero in train mode: pure rounding noise (README A.6 item 1)
      w_ref = ref[name[: -len("bias")] + "weight"]
      assert np.abs(g).max() <= 1e-3 * np.abs(w_ref).max(), name
      continue
    tol = 1e-2 * np.abs(g_ref).max() + 1e-6
    assert np.abs(g - g_ref).max() <= tol, f"{name}: grad off by {np.abs(g - g_ref).max():.3g} (tol {tol:.3g})"


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_batch_norm_statistics(shared_dir, case):
  golden, variables, _, _, stats, _, _, _ = _run(case)
  ref = {k[len("bn_after_forward/"):]: v for k, v in golden.items() if k.startswith("bn_after_forward/")}
  got = _torch_names(variables["params"], stats)
  running = {k: v for k, v in ref.items() if not k.endswith("num_batches_tracked")}
  assert set(running) == {k for k in got if k.endswith(("running_mean", "running_var"))}
  for name, r in running.items():
    assert np.abs(got[name] - r).max() <= 1e-5 * np.abs(r).max(), name


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_parameters_after_one_adam_step(shared_dir, case):
  golden, variables, _, _, _, _, new_state, _ = _run(case)
  p0 = _torch_names(variables["params"], variables["batch_stats"])
  p1 = _torch_names(new_state.params, variables["batch_stats"])
  for name, p1_ref in ((k[len("param_after_step/"):], v) for k, v in golden.items() if k.startswith("param_after_step/")):
    scale = np.maximum(1.0, np.abs(p0[name]))
    assert np.all(np.abs(p1[name] - p0[name]) <= LR + 2e-6 * scale), name
    g_ref = golden[f"grad/{name}"]
    if _is_pre_bn_bias(name):
      continue
    strong = np.abs(g_ref) > 2 * (1e-2 * np.abs(g_ref).max() + 1e-6)
    err = np.abs(p1[name] - p1_ref)[strong]
    assert err.size == 0 or err.max() <= 1e-5 * scale[strong].max(), f"{name}: {err.max():.3g}"


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_adam_in_isolation(shared_dir, case):
  """Our optimizer fed the reference's p0 and gradients reproduces its step to 2e-6 (tight)."""
  weights, _ = CASES[case]
  golden = load_npz(GOLDEN / "train_step" / f"{case}.npz")
  p0 = {k: v for k, v in load_npz(WEIGHTS / f"{weights}.npz").items() if f"grad/{k}" in golden}
  g = {k: golden[f"grad/{k}"] for k in p0}
  tx = train_step.make_optimizer(LR)
  updates, _ = tx.update(g, tx.init(p0), p0)
  for k in p0:
    np.testing.assert_allclose(p0[k] + np.asarray(updates[k]), golden[f"param_after_step/{k}"], atol=2e-6, rtol=0)
