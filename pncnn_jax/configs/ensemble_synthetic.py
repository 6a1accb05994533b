r"""An ensemble of pNCNNs on the synthetic scenes (paper Table 3), sized for a CPU.

The single-model recipe of configs/synthetic.py (variant chosen by the argument, default pncnn) plus an
`ensemble` block: K members in one vmapped train step (pncnn_jax.training.loop, the loop of single models), member k
from seed seeds[k] (default seed + k) on its own random subset of the training scenes, then evaluated per member and per
fusion rule (mean, confidence-weighted mean, max-confidence, MLE), optionally also after calibrating each member's
precision scale on another split (`ensemble.calibration_split`, e.g. 'val' with `data.eval_split` = 'test').

Library use (train.py / eval.py dispatch to these when the config has an `ensemble` block):

  from pncnn_jax import evaluate, from_config
  from pncnn_jax.training import loop
  config = from_config.load_config("configs/ensemble_synthetic.py:pncnn")
  rows = loop.train_and_evaluate(config, "runs/synth_ensemble")["rows"]  # trains, resumes, evaluates
  result, files = evaluate.evaluate_checkpoint(config, "runs/synth_ensemble")  # eval.py: prints, writes files
  rows = result.rows

bench/bench_ensemble.py trains a shorter version of it (see docs/develop/benchmarks-log.md, section "Ensembles").
"""

import ml_collections

from pncnn_jax.configs import synthetic


def get_config(variant: str = "pncnn") -> ml_collections.ConfigDict:
  """configs/synthetic.py:<variant> plus the ensemble settings."""
  c = synthetic.get_config(variant or "pncnn")
  c.ensemble = ml_collections.ConfigDict()
  c.ensemble.num_members = 4  # K members (the paper's Table 3 uses 4)
  c.ensemble.seeds = ()  # per-member init and data seeds; () = seed + k
  c.ensemble.subset_fraction = 0.5  # each member trains on this random fraction of the training scenes
  c.ensemble.train_member_map = "vmap"  # 'vmap' | 'map' (lax.map: ~10x slower train steps on CPU)
  c.ensemble.rules = ("mean", "weighted_mean", "max_confidence", "mle")  # fusion rules evaluated
  c.ensemble.select_rule = "mean"  # the fusion rule whose validation RMSE picks the best checkpoint
  c.ensemble.mle_variance = 0.1  # v^2 [m^2] of the MLE mixture components (paper supplementary)
  c.ensemble.mle_steps = 500  # Adam steps of the MLE fusion
  c.ensemble.mle_learning_rate = 0.05  # Adam's initial learning rate [m], cosine-decayed to 0
  # Calibrated fusion: '' = off; else a split (not the evaluation split) on which each member's precision scale
  # is fitted (pncnn_jax.ensemble.members.fit_precision_scales); the table then shows every row calibrated as well.
  c.ensemble.calibration_split = ""
  c.data.synthetic_size = 480  # training scenes (members see subset_fraction of them)
  return c
