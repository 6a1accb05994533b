"""Ensembles of pNCNN members and their fusion (paper Table 3): members stacked on a leading axis and applied
with `vmap`, and the fusion rules (mean, precision-weighted mean, max confidence, maximum-likelihood mixture).

  members  stack / init / load members, `apply_ensemble`, calibration and evaluation of an ensemble
  fusion   `fuse(depth, precision, rule)` over the member axis; mixture moments; calibration scales
"""

from pncnn_jax.ensemble.fusion import FUSION_RULES, fuse, fused_variance, mixture_moments  # noqa: F401
from pncnn_jax.ensemble.members import apply_ensemble, init_ensemble, load_ensemble, stack_trees  # noqa: F401
