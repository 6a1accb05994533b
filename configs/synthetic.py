"""The checkout's door to pncnn_jax/configs/synthetic.py, the config itself (edit that one)."""

from pncnn_jax.configs.synthetic import get_config  # noqa: F401
