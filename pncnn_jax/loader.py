"""`pncnn_jax.loader` is `pncnn_jax.checkpoints.loader`: an alias kept for old imports and `python -m`."""

from pncnn_jax.runtime.alias import alias

alias(__name__, "pncnn_jax.checkpoints.loader")
