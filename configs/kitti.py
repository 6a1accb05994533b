"""The checkout's door to pncnn_jax/configs/kitti.py, the config itself (edit that one)."""

from pncnn_jax.configs.kitti import get_config  # noqa: F401
