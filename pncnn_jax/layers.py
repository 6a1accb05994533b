"""`pncnn_jax.layers` is `pncnn_jax.nn.layers`: an alias kept for old imports and `python -m`."""

from pncnn_jax.runtime.alias import alias

alias(__name__, "pncnn_jax.nn.layers")
