"""pncnn_jax: probabilistic normalized convolutional networks (Eldesokey et al., CVPR 2020) in JAX/Flax.

Submodules:
  layers   pure normalized-convolution numerics (NHWC) and thin Flax modules
  models   NConvUNet, the compact UNets and the pNCNN model family
  losses   masked L1/L2, the pNCNN Gaussian NLL and its variants
  metrics  KITTI/NYU error metrics, sparsification curves, AUSE, AUCE
  convert  official PyTorch checkpoints -> our variables (no torch needed)
"""

__version__ = "0.1.0"
