"""`pncnn_jax.demo` is `pncnn_jax.experiments.demo`: an alias kept for old imports and `python -m`."""

from pncnn_jax.runtime.alias import alias

alias(__name__, "pncnn_jax.experiments.demo")
