"""Conventional baselines for the paper's headline comparison, an extension of the depth core.

The depth core never imports this package. Importing it registers, once, what a baseline config names:

  model variants  s2d (Sparse-to-Dense, ResNet-18 + up-projection, Gaussian head; a deep-ensemble member) and
                  s2d_mcdropout (the same with dropout p = 0.5 where Gustafsson et al. put it)  (`from_config.VARIANTS`)
  loss            gaussian_nll_logvar: the Gaussian NLL of a (mean, log-variance) head; its confidence is the
                  log-precision s = -log sigma^2, precision exp(s) [1/m^2]  (`losses.LOSSES`)
  evaluator       predictive: the fused prediction of the first M members or passes, for every M
                  (`predictive.PredictiveEvaluator`, registered by `pncnn_jax.baselines.predictive` on import;
                  `pncnn_jax.evaluate.EVALUATORS`)

and a registry that misses one of these names imports it by module name (`runtime.registry.EXTENSIONS`).

Modules: `model` (SparseToDense, the variants, the parameter count), `losses`, `predictive` (MC-Dropout passes in one
vmapped call, ensemble members, the fused predictive mean and variance, their evaluator over M).
pncnn_jax.experiments trains and compares them with pNCNN (docs/results/RESULTS_BASELINES.md).
"""

from pncnn_jax import from_config as _from_config
from pncnn_jax import losses as _losses
from pncnn_jax.baselines import losses, model, predictive  # noqa: F401
from pncnn_jax.baselines.model import BASELINE_VARIANTS, SparseToDense, build_baseline  # noqa: F401

_from_config.register_variants(BASELINE_VARIANTS, build_baseline)
_losses.register(losses.LOSS_NAME, lambda out, target: losses.gaussian_nll_logvar(out.depth, out.confidence, target),
                 losses.precision_rule)
