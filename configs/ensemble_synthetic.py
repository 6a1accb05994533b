"""The checkout's door to pncnn_jax/configs/ensemble_synthetic.py, the config itself (edit that one)."""

from pncnn_jax.configs.ensemble_synthetic import get_config  # noqa: F401
