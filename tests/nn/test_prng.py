"""Parameter initialisation does not depend on the `jax_threefry_partitionable` flag (issue 14 upkeep).

`prng.INIT_PRNG` is threefry with the original counter layout. While JAX still has the flag, its draws, splits and
fold-ins must equal JAX's own threefry with the flag off, which is how the initial weights of every run and
shipped model were drawn (docs/SPEC.md §11.4); and the initial variables must be the same whatever the flag.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pncnn_jax.nn import models, prng

HAS_FLAG = hasattr(jax, "threefry_partitionable")


@pytest.mark.skipif(not HAS_FLAG, reason="JAX no longer has the flag: nothing left to compare with")
@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (5, 5, 1, 2), (3, 3, 64, 64)])
def test_init_prng_equals_non_partitionable_threefry(shape):
  for seed in (0, 1, 12345):
    ours = prng.init_key(jax.random.key(seed))
    with jax.threefry_partitionable(False):
      ref = jax.random.key(seed)
      want = [jax.random.uniform(ref, shape), jax.random.normal(jax.random.fold_in(ref, 3), shape),
              jax.random.uniform(jax.random.split(ref, 3)[2], shape, minval=-2, maxval=2),
              jax.random.bits(ref, shape, jnp.uint32)]
    got = [jax.random.uniform(ours, shape), jax.random.normal(jax.random.fold_in(ours, 3), shape),
           jax.random.uniform(jax.random.split(ours, 3)[2], shape, minval=-2, maxval=2),
           jax.random.bits(ours, shape, jnp.uint32)]
    for g, w in zip(got, want):
      np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
  draws = []
  for flag in (True, False):  # and the flag does not change ours
    with jax.threefry_partitionable(flag):
      draws.append(np.asarray(jax.random.uniform(jax.random.split(prng.init_key(jax.random.key(1)))[1], shape)))
  np.testing.assert_array_equal(draws[0], draws[1])


@pytest.mark.skipif(not HAS_FLAG, reason="JAX no longer has the flag")
def test_initial_variables_do_not_depend_on_the_flag():
  """pNCNN (NConv Poisson + noise, UNet uniform weights and biases) from seed 4, flag on and off, and the values
  the flag-off threefry gives (how they were drawn before)."""
  model = models.build_model("pncnn")
  runs = []
  for flag in (True, False):
    with jax.threefry_partitionable(flag):
      runs.append(jax.device_get(models.init_variables(model, jax.random.key(4))))
  with jax.threefry_partitionable(False):
    before = jax.device_get(jax.jit(lambda k: model.init(k, jnp.zeros((1, 16, 16, 1)), train=False))(
        jax.random.key(4)))
  for other in (runs[1], before):
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), runs[0], other))


def test_init_key_accepts_typed_and_raw_keys_only_of_threefry():
  typed, raw = jax.random.key(7), jax.random.PRNGKey(7)
  np.testing.assert_array_equal(jax.random.key_data(prng.init_key(typed)), jax.random.key_data(prng.init_key(raw)))
  with pytest.raises(ValueError, match="expected a threefry key"):
    prng.init_key(jnp.zeros((4,), jnp.uint32))
  with pytest.raises(NotImplementedError, match="16-bit draws"):
    jax.random.bits(prng.init_key(typed), (3,), jnp.uint16)
