"""`pncnn_jax.convert` is `pncnn_jax.checkpoints.convert`: an alias kept for old imports and `python -m`."""

from pncnn_jax.runtime.alias import alias

alias(__name__, "pncnn_jax.checkpoints.convert")
