"""The checkout's door to pncnn_jax/configs/base.py, the config itself (edit that one)."""

from pncnn_jax.configs.base import get_config  # noqa: F401
