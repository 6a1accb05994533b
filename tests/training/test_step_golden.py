"""One training step against the official one (../shared/reference/golden/train_step), following the
comparison recipe of reference/README.md ("Suggested comparison recipe for a port")."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax.checkpoints import convert
from pncnn_jax.nn import models
from pncnn_jax.training import step as training_step

from conftest import GOLDEN, WEIGHTS, load_npz, nchw_to_nhwc

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
  state = training_step.create_train_state(model, variables, learning_rate=LR)
  batch = {"sparse": jnp.asarray(nchw_to_nhwc(golden["input"])), "target": jnp.asarray(nchw_to_nhwc(golden["target"]))}
  loss_name = models.VARIANTS[variant].loss

  # L1: the gradient takes sign(pred - target) per pixel, and a pixel whose reference prediction is within
  # rounding of its target (the l1 case has one 1.9e-5 m away) can take the other sign under another
  # summation order (a GPU), moving whole gradients by ~1e-2. The gradients and the Adam step are compared
  # with the reference's signs (the subgradient it chose); test_l1_signs checks that ours differ only at
  # such near-ties and that, where none differ, the two gradients are the same.
  ref_sign = jnp.asarray(np.sign(nchw_to_nhwc(golden["out_train"])[..., :1] - batch["target"]) * (batch["target"] > 0))

  def everything(state, batch):
    # One program (one compile, ~20 s on CPU): the train step itself, plus the gradients and train-mode outputs
    # it computes internally (XLA shares the duplicated forward/backward), plus the eval-mode forward before.
    (_, (out_train, stats)), grads = training_step.loss_and_grads(state, state.params, batch, loss_name)
    new_state, metrics = training_step.train_step(state, batch, loss_name=loss_name)
    if loss_name != "masked_l1":
      return training_step.eval_step(state, batch), out_train, stats, grads, new_state, metrics, grads, new_state

    def ref_sign_l1(p):
      out, _ = state.apply_fn({"params": p, "batch_stats": state.batch_stats}, batch["sparse"], train=True,
                              mutable=["batch_stats"])
      return jnp.mean(ref_sign * (out.depth - batch["target"]))

    grads_ref_sign = jax.grad(ref_sign_l1)(state.params)
    ref_sign_state = state.apply_gradients(grads=grads_ref_sign, batch_stats=stats)
    return (training_step.eval_step(state, batch), out_train, stats, grads_ref_sign, ref_sign_state, metrics, grads,
            new_state)

  return (golden, variables, *jax.jit(everything)(state, batch))


def _check_outputs(golden_key, golden, out, pred_atol):
  ref = nchw_to_nhwc(golden[golden_key])
  got = nchw_to_nhwc(np.asarray(out.stack_nchw()))
  assert np.abs(got[..., 0] - ref[..., 0]).max() <= pred_atol
  excess = np.abs(got[..., 1:] - ref[..., 1:]) - (1e-6 + 1e-3 * np.abs(ref[..., 1:]))
  assert excess.max() <= 0, f"{golden_key}: confidence off by {excess.max() + 1e-6:.3g}"


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_outputs_and_loss(shared_dir, case):
  golden, _, out_eval, out_train, _, _, _, metrics, _, _ = _run(case)
  _check_outputs("out_eval_before", golden, out_eval, 5e-3)
  _check_outputs("out_train", golden, out_train, 1e-2)
  np.testing.assert_allclose(float(metrics["loss"]), float(golden["loss"]), rtol=1e-5)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_gradients(shared_dir, case):
  golden, variables, _, _, _, grads, _, _, _, _ = _run(case)
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


@pytest.mark.parametrize("case", [c for c in CASE_PARAMS if models.VARIANTS[CASES[c.values[0]][1]].loss == "masked_l1"])
def test_l1_signs(shared_dir, case):
  """Our L1 subgradient signs equal the reference's except at near-ties (|pred_ref - target| within the 1e-2 m
  train-output tolerance); with no differing sign, the gradients compared above are our own L1 gradients."""
  golden, _, _, out_train, _, grads_compared, _, _, grads_own, _ = _run(case)
  ref_err = nchw_to_nhwc(golden["out_train"])[..., 0] - nchw_to_nhwc(golden["target"])[..., 0]
  flips = _sign_flips(golden, out_train)
  assert np.all(np.abs(ref_err[flips]) <= 1e-2), np.abs(ref_err[flips]).max()
  if not flips.any():  # the same gradient through two graphs: equal up to summation order (7.8e-5 rel. on an H200)
    for a, b in zip(jax.tree.leaves(grads_own), jax.tree.leaves(grads_compared)):
      a, b = np.asarray(a), np.asarray(b)
      assert np.abs(a - b).max() <= 1e-4 * np.abs(b).max() + 1e-12


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_batch_norm_statistics(shared_dir, case):
  golden, variables, _, _, stats, _, _, _, _, _ = _run(case)
  ref = {k[len("bn_after_forward/"):]: v for k, v in golden.items() if k.startswith("bn_after_forward/")}
  got = _torch_names(variables["params"], stats)
  running = {k: v for k, v in ref.items() if not k.endswith("num_batches_tracked")}
  assert set(running) == {k for k in got if k.endswith(("running_mean", "running_var"))}
  for name, r in running.items():
    assert np.abs(got[name] - r).max() <= 1e-5 * np.abs(r).max(), name


def _sign_flips(golden, out_train) -> np.ndarray:
  """Pixels whose L1 subgradient sign differs from the reference's (near-ties only: test_l1_signs)."""
  target = nchw_to_nhwc(golden["target"])[..., 0]
  ref_err = nchw_to_nhwc(golden["out_train"])[..., 0] - target
  return (np.sign(np.asarray(out_train.depth)[..., 0] - target) != np.sign(ref_err)) & (target > 0)


UPDATE_PARAMS = [pytest.param(c, u, marks=pytest.mark.xdist_group(c)) for c in CASES for u in (
    ("train_step", "reference_signs") if models.VARIANTS[CASES[c][1]].loss == "masked_l1" else ("train_step",))]


@pytest.mark.parametrize("case,update", UPDATE_PARAMS)
def test_parameters_after_one_adam_step(shared_dir, case, update):
  """The parameters after one step equal the reference's where the reference's gradient is strong (Adam's first
  step there is lr * sign(g), which a near-tie's L1 sign cannot turn). 'train_step': our own `train_step`'s update,
  as training runs it. 'reference_signs' (L1 only): the update from the gradient with the reference's L1 subgradient
  signs (test_l1_signs), which also holds the gradients' other elements to the reference."""
  golden, variables, _, _, _, _, ref_sign_state, _, _, own_state = _run(case)
  new_state = own_state if update == "train_step" else ref_sign_state
  p0 = _torch_names(variables["params"], variables["batch_stats"])
  p1 = _torch_names(new_state.params, variables["batch_stats"])
  for name, p1_ref in ((k[len("param_after_step/"):], v)
                       for k, v in golden.items() if k.startswith("param_after_step/")):
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
  tx = training_step.make_optimizer()
  updates, _ = tx.update(g, training_step.set_step_lr(tx.init(p0), LR), p0)
  for k in p0:
    np.testing.assert_allclose(p0[k] + np.asarray(updates[k]), golden[f"param_after_step/{k}"], atol=2e-6, rtol=0)
