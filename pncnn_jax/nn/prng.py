"""The random-number generator of parameter initialisation: threefry2x32 with its original (non-partitionable)
counter layout, as a PRNG implementation of its own, so initial weights do not depend on the
`jax_threefry_partitionable` flag (docs/SPEC.md §11.4).

JAX's threefry has two ways of turning a key into random bits and subkeys. The original layout hashes the counters
0..n-1 of the flattened request; the partitionable layout (JAX's default since 0.5, the only one once the flag is
removed) hashes per-dimension counters instead, so the same key gives different numbers. pncnn_jax's initial
weights (and with them every training run and shipped model's provenance) were drawn with the original layout,
by switching the flag off around the initialisation. `INIT_PRNG` computes the original layout from the public
`jax.extend.random.threefry_2x32` hash: seeding and fold_in are threefry's own (the flag does not change them),
split and random_bits are the original ones. tests/nn/test_prng.py checks that it equals JAX's non-partitionable
threefry while JAX still has the flag, and that initialisation no longer depends on it.
"""

from __future__ import annotations

import math

import jax
import jax.extend.random as jex_random
import jax.numpy as jnp
import numpy as np
from jax import lax

_THREEFRY = jex_random.threefry_prng_impl
_MAX_COUNT = 2**32 - 1  # one threefry block; larger requests take the original code's multi-block path


def _split(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """k subkeys: the hash of the counters 0..2k-1, paired."""
  num = math.prod(shape)
  return lax.reshape(jex_random.threefry_2x32(key, lax.iota(np.uint32, num * 2)), (*shape, 2))


def _random_bits(key: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
  """`shape` random words: the hash of the counters 0..n-1 (32 bits), or of 0..2n-1 with the first half as the
  high words (64 bits)."""
  size = math.prod(shape)
  words = size * bit_width // 32
  if bit_width not in (32, 64) or words >= _MAX_COUNT:
    raise NotImplementedError(f"pncnn_jax.nn.prng: {bit_width}-bit draws of {size} numbers are not supported "
                              "(parameter initialisation needs 32-bit draws of fewer than 2**32)")
  bits = jex_random.threefry_2x32(key, lax.iota(np.uint32, words))
  if bit_width == 64:
    hi, lo = (lax.convert_element_type(b, np.uint64) for b in jnp.split(bits, 2))
    bits = lax.shift_left(hi, np.uint64(32)) | lo
  return lax.reshape(bits, shape)


INIT_PRNG = jex_random.define_prng_impl(
    key_shape=(2,), seed=_THREEFRY.seed, split=_split, random_bits=_random_bits, fold_in=_THREEFRY.fold_in,
    name="threefry2x32_original", tag="tfo")


def init_key(rng: jax.Array) -> jax.Array:
  """The INIT_PRNG key holding the same data as the threefry key `rng` (typed, `jax.random.key`, or raw uint32[2],
  `jax.random.PRNGKey`)."""
  data = jax.random.key_data(rng) if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key) else rng
  if data.shape != (2,) or data.dtype != jnp.uint32:
    raise ValueError(f"init_key: expected a threefry key (2 uint32 words), got data {data.dtype} {data.shape}")
  return jax.random.wrap_key_data(data, impl=INIT_PRNG)
