"""The checkout's door to pncnn_jax/configs/nyu.py, the config itself (edit that one)."""

from pncnn_jax.configs.nyu import get_config  # noqa: F401
