"""`pncnn_jax.export` is `pncnn_jax.inference.export`: an alias kept for old imports and `python -m`."""

from pncnn_jax.runtime.alias import alias

alias(__name__, "pncnn_jax.inference.export")
