"""The paper's experiments on the synthetic benchmark as data: recipes (`SCALES`), the trained models (`RUNS`)
and where each run lives in a reproduction workdir. `python -m pncnn_jax.experiments.reproduce` runs them;
`pncnn_jax.experiments.evaluate_runs` evaluates them; `pncnn_jax.experiments.pages.report` writes
docs/results/RESULTS.md.

Two forms of each model with a learned input confidence are trained:
  <variant>         the official network: c0 = UNet(x) at every pixel, also where there is no measurement.
  <variant>_masked  our option `mask_input_confidence`: c0 = UNet(x) * [x > 0] (docs/results/RESULTS.md says why).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any, Mapping

import ml_collections

from pncnn_jax import from_config
from pncnn_jax.experiments import runner
from pncnn_jax.runtime import cli

# One recipe per scale. 'cpu' fits 2 CPU cores (about 10-30 min per pNCNN run); 'long' is the same recipe 5x longer.
SCALES: dict[str, dict[str, Any]] = {
    "cpu": dict(train_crop=(64, 320), batch_size=4, steps_per_epoch=100, num_epochs=10, lr_decay_epochs=8,
                learning_rate=0.01, train_scenes=2000, val_scenes=32, test_scenes=96, eval_crop=(128, 384)),
    # The cpu recipe 5x longer (lr 0.01 for 4000 steps, then 1000 at 0.001), same crops and batch: does training
    # length change the claims? Measured on a 2-core CPU machine, one run per core: 1-2 h for a run with a UNet,
    # 5 min for NCNN (`train_wall_s` in docs/results/RESULTS_LONG.json).
    "long": dict(train_crop=(64, 320), batch_size=4, steps_per_epoch=250, num_epochs=20, lr_decay_epochs=16,
                 learning_rate=0.01, train_scenes=2000, val_scenes=32, test_scenes=96, eval_crop=(128, 384)),
    # The long recipe 2x longer (lr 0.01 for 8000 steps, then 2000 at 0.001), for the runs whose validation curve
    # still falls at 5000 steps (SCALE_RUNS). Measured: about 4 h per pNCNN-sized run on one CPU core, 2 h for NCNN-Conf
    "longer": dict(train_crop=(64, 320), batch_size=4, steps_per_epoch=250, num_epochs=40, lr_decay_epochs=32,
                   learning_rate=0.01, train_scenes=2000, val_scenes=32, test_scenes=96, eval_crop=(128, 384)),
    # A few steps on tiny crops: the whole command end to end in about a minute (tests, a first look).
    "smoke": dict(train_crop=(32, 64), batch_size=2, steps_per_epoch=3, num_epochs=2, lr_decay_epochs=1,
                  learning_rate=0.01, train_scenes=8, val_scenes=2, test_scenes=4, eval_crop=(64, 96)),
}


@dataclasses.dataclass(frozen=True)
class Run:
  """One trained model: a variant of pncnn_jax.nn.models.VARIANTS, the c0 mask option and the init/data seed."""
  name: str
  variant: str
  masked: bool = False
  seed: int = 0
  # 'main' | 'ablation' | 'ensemble' | 'beta' | 'aux' | 'detach' | 'seeds' | 'recipe' | 'sensors' (the tables a run
  # appears in)
  group: str = "main"
  loss: str = ""  # '' = the variant's loss; else a key of pncnn_jax.losses.LOSSES (config.loss)
  detach: bool = False  # config.model.detach_variance_input (our option)
  learning_rate: float = 0.0  # 0: the scale's; else the lr before the scale's drop (our recipe option);
  # BASELINE_LR_FROM_SWEEP: the best learning rate of the baseline sweep (`baseline_learning_rate`)
  grad_clip_norm: float = 0.0  # 0: plain Adam; else config.grad_clip_norm (our recipe option)
  members: int = 0  # > 0: an ensemble of this many members trained in one vmapped step (bench/bench_jobs.py)
  sensors: str = ""  # '' = the generator's HDL-64E; else a sensor or mixture of pncnn_jax.data.sensors, drawn per
  #                    training and validation scene (config.data.sensors.train and .eval)
  init_from: str = ""  # '' = from scratch; else the weights it is fine-tuned from (config.init_from), with the
  #                      scale's fine-tuning recipe (`finetune_recipe`)


# In training order: the models the claims need first, the official (unmasked) forms next, then the extra
# ensemble members and the ablations.
RUNS: tuple[Run, ...] = (
    Run("ncnn", "ncnn"),
    Run("pncnn_masked", "pncnn", True),
    Run("ncnn_conf_l1_masked", "ncnn_conf_l1", True),
    Run("pncnn", "pncnn"),
    Run("ncnn_conf_l1", "ncnn_conf_l1"),
    Run("pncnn_exp_masked", "pncnn_exp", True),
    Run("ncnn_conf_l2_masked", "ncnn_conf_l2", True),
    Run("pncnn_masked_seed1", "pncnn", True, 1, "ensemble"),
    Run("pncnn_masked_seed2", "pncnn", True, 2, "ensemble"),
    Run("pncnn_masked_seed3", "pncnn", True, 3, "ensemble"),
    Run("no_conf_est", "no_conf_est", False, 0, "ablation"),
    Run("no_var_est_masked", "no_var_est", True, 0, "ablation"),
    Run("depth_pred_masked", "depth_pred", True, 0, "ablation"),
    Run("laplace_masked", "laplace", True, 0, "ablation"),
    # Our option against claims (b) and (d): pNCNN trained with beta-NLL weights, two seeds.
    Run("pncnn_beta_masked", "pncnn_beta", True, 0, "beta"),
    Run("pncnn_beta_masked_seed1", "pncnn_beta", True, 1, "beta"),
    Run("pncnn_beta1_masked", "pncnn_beta", True, 0, "beta", loss="gaussian_nll_beta1"),  # beta = 1: dose-response
    # Does an L1-type data term make c0 single out the disturbed points whatever the seed (claim (b))?
    Run("laplace_masked_seed1", "laplace", True, 1, "ablation"),
    Run("laplace_masked_seed2", "laplace", True, 2, "ablation"),
    Run("ncnn_conf_l1_masked_seed1", "ncnn_conf_l1", True, 1, "seeds"),  # the reference of (b)-(d), over seeds too
    Run("ncnn_conf_l1_masked_seed2", "ncnn_conf_l1", True, 2, "seeds"),
    # Our option against claim (b): an auxiliary L1 term on mu gives c0 the signal NCNN-Conf-L1 trains it with,
    # whatever the predicted precision (losses.gaussian_nll_l1); with the plain and the beta-NLL.
    Run("pncnn_aux_masked", "pncnn", True, 0, "aux", loss="gaussian_nll_l1"),
    Run("pncnn_beta_aux_masked", "pncnn_beta", True, 0, "aux", loss="gaussian_nll_beta_l1"),
    # Does the gradient from the variance UNet into cout decide what c0 learns (claim (b))? The same models with
    # the variance UNet's input detached (models.PNCNN.detach_variance_input).
    Run("pncnn_detach_masked", "pncnn", True, 0, "detach", detach=True),
    Run("pncnn_beta_detach_masked", "pncnn_beta", True, 0, "detach", detach=True),
    Run("pncnn_beta_detach_masked_seed1", "pncnn_beta", True, 1, "detach", detach=True),
    # Detached, the variance UNet sees only the NConv confidence and loses what c0 told it: the same with the sparse
    # input as a second channel, so that it can find the disturbed points itself.
    Run("sparse_var_beta_detach_masked", "sparse_var", True, 0, "detach", loss="gaussian_nll_beta", detach=True),
    Run("sparse_var_beta_detach_masked_seed1", "sparse_var", True, 1, "detach", loss="gaussian_nll_beta", detach=True),
    # The same with an absolute-error data term (Laplace NLL): the kind of term under which c0 was selective most often.
    Run("sparse_var_laplace_detach_masked", "sparse_var", True, 0, "detach", loss="laplace_nll", detach=True),
    # Is lr 0.01 too high for batches of four 64x320 crops (pNCNN's validation curves swing +-10 %, and it spiked
    # once at the longer scale)? Masked pNCNN and its (d) reference at lr 0.003, x0.1 at the scale's step.
    Run("pncnn_masked_lr3e-3", "pncnn", True, 0, "recipe", learning_rate=0.003),
    Run("pncnn_masked_lr3e-3_seed1", "pncnn", True, 1, "recipe", learning_rate=0.003),  # its c0 over seeds too
    Run("ncnn_conf_l1_masked_lr3e-3", "ncnn_conf_l1", True, 0, "recipe", learning_rate=0.003),
    # In both runs whose loss spiked (lr 0.003 seed 1, and seed 0 over 10000 steps) c0 turned reversed right after
    # the spike: masked pNCNN at the scale's lr with each gradient clipped to global L2 norm 10 (the largest norms
    # logged outside a spike are ~9), so that one outlier batch cannot throw Adam's moments.
    Run("pncnn_masked_clip10", "pncnn", True, 0, "recipe", grad_clip_norm=10.0),
    Run("pncnn_masked_clip10_seed1", "pncnn", True, 1, "recipe", grad_clip_norm=10.0),
    Run("pncnn_exp", "pncnn_exp"),
    Run("ncnn_conf_l2", "ncnn_conf_l2"),
)
# The conventional baselines of the paper's headline comparison (pncnn_jax.baselines;
# docs/results/RESULTS_BASELINES.md): trained only when named (--only), never by a plain `reproduce`. The
# Sparse-to-Dense network with dropout p = 0.5 (MC-Dropout), and 8 runs without dropout that differ only in their
# seed (deep ensembles of M = 1, 2, 4, 8: the first M of them; member k from seed k, its own initialisation and data
# order). The members train as single-model
# runs, one process each under --jobs, not as one vmapped ensemble run: on 2 CPU cores two runs at once train 3.6-4.0
# member steps/s against 1.6 for a vmapped 2-member run (bench/bench_jobs.py --members 2,
# docs/develop/benchmarks-log.md).
# Their learning rate is the best of BASELINE_SWEEP_LRS on a short run (`sweep_recipe`), judged by the validation
# RMSE; Gustafsson et al.'s own setting (Adam, lr 1e-5, weight decay 5e-4, 40000 steps of batch 4 at 352x352) is 8x
# the long recipe's steps, too slow a rate for 5000.
BASELINE_LR_FROM_SWEEP = -1.0
BASELINE_SWEEP_LRS = (1e-3, 3e-4, 1e-4)
BASELINE_SWEEP = tuple(Run(f"s2d_lr{lr:.0e}".replace("e-0", "e-"), "s2d", group="baseline_sweep", learning_rate=lr)
                       for lr in BASELINE_SWEEP_LRS)
BASELINE_MC = Run("s2d_mcdropout", "s2d_mcdropout", group="baseline", learning_rate=BASELINE_LR_FROM_SWEEP)
BASELINE_MEMBERS = tuple(Run(f"s2d_seed{k}", "s2d", seed=k, group="baseline", learning_rate=BASELINE_LR_FROM_SWEEP)
                         for k in range(8))
BASELINE_ENSEMBLE = "s2d_ensemble8"  # in --only: every run of BASELINE_MEMBERS
BASELINES: tuple[Run, ...] = (*BASELINE_SWEEP, BASELINE_MC, *BASELINE_MEMBERS)
# The sensor-robust model (docs/results/SENSORS.md): the recommended shipped recipe (sparse_var, beta-NLL, detached
# variance input, masked c0) trained from scratch on the 'lidar_mix' mixture (five spinning LiDARs, 20 % of them with
# 5-100 % of the points kept, 10 % visual-odometry points), two seeds. From scratch rather than fine-tuned from the
# shipped 64-beam weights: the two seeds are then independent runs (a spread, not one model twice), and the recipe
# stays the one whose figures the results pages carry. Trained only when named (--only), like the baselines.
SENSOR_RUNS_SCRATCH: tuple[Run, ...] = tuple(
    Run(f"sparse_var_beta_detach_masked_lidar_mix{'_seed%d' % k if k else ''}", "sparse_var", True, k, "sensors",
        loss="gaussian_nll_beta", detach=True, sensors="lidar_mix") for k in range(2))
# From scratch, the mixture cost the 64-beam figures (MAE 1.6-1.8x the recommended model's): the same recipe
# fine-tuned from the shipped 64-beam weights on the same mixture (`finetune_recipe`: half the steps at a tenth of
# the learning rate), so that it starts from what it must keep at 64 beams. Both seeds start from the one shipped
# model; they differ in their data order (the spread of the fine-tuning, not of the 64-beam training).
SENSOR_RUNS_FINETUNED: tuple[Run, ...] = tuple(
    Run(f"sparse_var_beta_detach_masked_lidar_mix_ft{'_seed%d' % k if k else ''}", "sparse_var", True, k, "sensors",
        loss="gaussian_nll_beta", detach=True, sensors="lidar_mix", init_from="synthetic:sparse_var_beta_detach_masked")
    for k in range(2))
SENSOR_RUNS: tuple[Run, ...] = SENSOR_RUNS_SCRATCH + SENSOR_RUNS_FINETUNED
RUNS_BY_NAME = {r.name: r for r in RUNS + BASELINES + SENSOR_RUNS}
RUN_GROUPS = {BASELINE_ENSEMBLE: BASELINE_MEMBERS}  # names that --only expands into several runs
# The ensemble of the fusion table: four pNCNN (masked c0) runs that differ only in their seed.
ENSEMBLE = ("pncnn_masked", "pncnn_masked_seed1", "pncnn_masked_seed2", "pncnn_masked_seed3")
# Runs of one recipe that differ only in their seed, keyed by the seed-0 run the claims use: their spread is what
# one run's figures carry (docs/results/RESULTS.md, 'Spread over seeds').
SEED_GROUPS: dict[str, tuple[str, ...]] = {
    "pncnn_masked": ENSEMBLE,
    "pncnn_beta_masked": ("pncnn_beta_masked", "pncnn_beta_masked_seed1"),
    "pncnn_beta_detach_masked": ("pncnn_beta_detach_masked", "pncnn_beta_detach_masked_seed1"),
    "sparse_var_beta_detach_masked": ("sparse_var_beta_detach_masked", "sparse_var_beta_detach_masked_seed1"),
    "sparse_var_beta_detach_masked_lidar_mix": tuple(r.name for r in SENSOR_RUNS_SCRATCH),
    "sparse_var_beta_detach_masked_lidar_mix_ft": tuple(r.name for r in SENSOR_RUNS_FINETUNED),
    "laplace_masked": ("laplace_masked", "laplace_masked_seed1", "laplace_masked_seed2"),
    "ncnn_conf_l1_masked": ("ncnn_conf_l1_masked", "ncnn_conf_l1_masked_seed1", "ncnn_conf_l1_masked_seed2"),
    "pncnn_masked_lr3e-3": ("pncnn_masked_lr3e-3", "pncnn_masked_lr3e-3_seed1"),
    "pncnn_masked_clip10": ("pncnn_masked_clip10", "pncnn_masked_clip10_seed1"),
}
# Runs trained at a lower learning rate (Run.learning_rate), each with the same recipe at the scale's lr:
# masked pNCNN first, then its (d) reference.
LR_PAIRS = (("pncnn_masked_lr3e-3", "pncnn_masked"), ("ncnn_conf_l1_masked_lr3e-3", "ncnn_conf_l1_masked"))


def is_baseline(run: Run) -> bool:
  """A run of the baseline comparison (BASELINES), not of the pNCNN family."""
  return run.group in ("baseline", "baseline_sweep")


def is_sensor_run(run: Run) -> bool:
  """A run of the sensor-robust model (SENSOR_RUNS), evaluated and shipped apart from the paper's runs."""
  return run.group == "sensors"


def sweep_recipe(scale: str) -> dict[str, Any]:
  """The baseline learning-rate sweep's short recipe: the scale's crops, batch and scenes, its first fifth of the
  steps (long: 1000), at a constant learning rate."""
  s = dict(SCALES[scale])
  s["num_epochs"] = max(1, s["num_epochs"] // 5)
  s["lr_decay_epochs"] = s["num_epochs"] + 1  # no drop
  return s


def finetune_recipe(scale: str) -> dict[str, Any]:
  """A fine-tuning run's recipe (Run.init_from): the scale's crops, batch and scenes, half its steps (long: 2500)
  at a tenth of its learning rate (the rate its runs end with), x0.1 again for the last fifth (long: 2000 steps at
  0.001, 500 at 0.0001)."""
  s = dict(SCALES[scale])
  s["num_epochs"] = max(1, s["num_epochs"] // 2)
  s["lr_decay_epochs"] = max(1, s["num_epochs"] * 4 // 5)
  s["learning_rate"] = s["learning_rate"] * 0.1
  return s


def recipe(run: Run, scale: str) -> dict[str, Any]:
  """The recipe a run trains with at `scale`: the scale's, the sweep's short one for a sweep run, or the
  fine-tuning one for a run started from other weights."""
  if run.group == "baseline_sweep":
    return sweep_recipe(scale)
  return finetune_recipe(scale) if run.init_from else SCALES[scale]


BASELINE_LR_FILE = "baseline_lr.json"  # <workdir>/baseline_lr.json: the sweep's choice, once its runs finished


def baseline_learning_rate(workdir: pathlib.Path, scale: str) -> dict[str, Any]:
  """The baselines' learning rate: of the finished sweep runs, the one with the lowest final validation RMSE
  ({"learning_rate", "val_rmse": {run: rmse}, "scale"}, also written to <workdir>/BASELINE_LR_FILE). ValueError
  while a sweep run is not finished."""
  missing = [r.name for r in BASELINE_SWEEP if not finished(workdir, r, scale)]
  if missing:
    raise ValueError(f"the baselines' learning rate comes from the sweep runs {', '.join(missing)}, not finished in "
                     f"{workdir}: train them first (--only {','.join(r.name for r in BASELINE_SWEEP)})")
  rmse = {}
  for r in BASELINE_SWEEP:
    rows = [json.loads(line) for line in (run_dir(workdir, r) / "metrics.jsonl").read_text().splitlines()]
    rmse[r.name] = [row["rmse"] for row in rows if row.get("split") == "val"][-1]
  best = min(BASELINE_SWEEP, key=lambda r: rmse[r.name])
  choice = {"learning_rate": best.learning_rate, "val_rmse": rmse, "scale": scale,
            "judged_on": f"the final validation RMSE [mm] on {SCALES[scale]['val_scenes']} validation scenes"}
  (workdir / BASELINE_LR_FILE).write_text(json.dumps(choice, indent=1) + "\n")
  return choice


def _baseline_base_config(run: Run) -> ml_collections.ConfigDict:
  """configs/synthetic.py's data and recipe fields around a baseline variant (pncnn_jax.baselines)."""
  config = from_config.load_config(f"{configs_dir() / 'synthetic.py'}:pncnn")
  with config.unlocked():
    config.variant = run.variant
    if run.members:
      config.ensemble = ml_collections.ConfigDict(dict(
          num_members=run.members, seeds=(), subset_fraction=1.0, train_member_map="vmap", rules=("mean",),
          select_rule="mean", mle_variance=0.1, mle_steps=500, mle_learning_rate=0.05, calibration_split=""))
  return config


def run_config(run: Run, scale: str, cache_dir: str | None = None,
               workdir: pathlib.Path | None = None) -> ml_collections.ConfigDict:
  """configs/synthetic.py:<variant> with the scale's recipe, the run's seed, c0 option, learning rate and gradient
  clipping. A baseline run whose learning rate comes from the sweep reads it from `workdir`
  (`baseline_learning_rate`); without a workdir it keeps the scale's (enough to load or evaluate it)."""
  s = recipe(run, scale)
  if is_baseline(run):
    config = _baseline_base_config(run)
  else:
    config = from_config.load_config(f"{configs_dir() / 'synthetic.py'}:{run.variant}")
  with config.unlocked():
    config.seed = run.seed
    config.loss = run.loss
    config.model.mask_input_confidence = run.masked
    config.model.detach_variance_input = run.detach
    apply_recipe(config, s)
    if run.learning_rate == BASELINE_LR_FROM_SWEEP:
      if workdir is not None:
        config.learning_rate = baseline_learning_rate(workdir, scale)["learning_rate"]
    elif run.learning_rate:
      config.learning_rate = run.learning_rate
    config.grad_clip_norm = run.grad_clip_norm
    config.init_from = run.init_from
    config.data.sensors.train = config.data.sensors.eval = run.sensors
    config.data.synthetic_cache_dir = cache_dir or ""
    config.progress_bar = False
    config.log_every_steps = 50
  return config


def configs_dir() -> pathlib.Path:
  """The configs the runs start from: the packaged ones (pncnn_jax/configs/, installed with the package)."""
  return cli.CONFIG_DIR


def build_caches(workdir: pathlib.Path, scale: str, workers: int = 1) -> str:
  """Renders the training, validation and test scenes of the recipe once (data/synthetic_cache.py), with
  `workers` processes; returns the cache dir."""
  from pncnn_jax.data import sparsify, synthetic, synthetic_cache  # pylint: disable=g-import-not-at-top
  s, full = SCALES[scale], synthetic.SyntheticConfig()
  cache_dir = workdir / "scene_cache"
  for split, stream, (h, w), size in (("train", 0, s["train_crop"], s["train_scenes"]),
                                      ("val", 1, s["eval_crop"], s["val_scenes"]),
                                      ("test", 2, s["eval_crop"], s["test_scenes"])):
    top, left = sparsify.crop_offsets(full.height, full.width, h, w, "center")
    window = (top, left, h, w)
    path = cache_dir / synthetic_cache.cache_name(split, 0, window)
    if not path.exists():
      print(f"rendering {size} {split} scenes at {h}x{w} into {path} (once)", flush=True)
    synthetic_cache.build(path, seed=0, stream=stream, window=window, size=size, progress=True, workers=workers)
  return str(cache_dir)


def run_dir(workdir: pathlib.Path, run: Run) -> pathlib.Path:
  return workdir / "runs" / run.name


def finished(workdir: pathlib.Path, run: Run, scale: str) -> bool:
  """True when the run's metrics.jsonl has its final validation row (`runner.finished`)."""
  r = recipe(run, scale)
  return runner.finished(run_dir(workdir, run), r["steps_per_epoch"] * r["num_epochs"])


FINAL_WEIGHTS = "final_weights"  # <run>/final_weights.{npz,json}: the final variables in pncnn_jax.pretrained form


def final_weights(workdir: pathlib.Path, run: Run) -> tuple[pathlib.Path, pathlib.Path]:
  d = run_dir(workdir, run)
  return d / f"{FINAL_WEIGHTS}.npz", d / f"{FINAL_WEIGHTS}.json"


def write_final_weights(workdir: pathlib.Path, run: Run, scale: str) -> None:
  """Keeps a finished run's last-step variables beside its checkpoints (once): with metrics.jsonl, config.json,
  wall_time.json and device.json they are what evaluating, reporting and shipping the run need, so the folder
  can move between machines without its checkpoints (optimizer state included, ~3x larger)."""
  from pncnn_jax import pretrained  # pylint: disable=g-import-not-at-top
  from pncnn_jax.checkpoints import loader  # pylint: disable=g-import-not-at-top
  npz, _ = final_weights(workdir, run)
  if npz.exists() or not finished(workdir, run, scale):
    return
  loaded = loader.load(run_dir(workdir, run), step="latest", variant=run.variant)
  manifest = {"name": run.name, "variant": run.variant, "mask_input_confidence": run.masked, "seed": run.seed,
              "step": loaded.meta.get("step"), "scale": scale, "config": loaded.meta.get("config")}
  pretrained.save(jax_to_numpy(loaded.variables), manifest, run_dir(workdir, run), FINAL_WEIGHTS)


def jax_to_numpy(tree: Any) -> Any:
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  return jax.tree.map(np.asarray, tree)


# The runs a scale trains when --only is not given, for a scale meant for some runs only (default: every run).
# 'longer': the required runs whose validation curve docs/results/RESULTS_LONG.md marks as still falling at 5000 steps.
SCALE_RUNS: dict[str, tuple[str, ...]] = {"longer": ("ncnn_conf_l2", "pncnn_masked", "pncnn_exp")}


def select(only: str | None, scale: str | None = None) -> list[Run]:
  """The runs named in a comma-separated list (a name of RUN_GROUPS stands for its runs); for an empty one, those of
  SCALE_RUNS[scale] (all of them when the
  scale has no such entry)."""
  if not only:
    return [RUNS_BY_NAME[n] for n in SCALE_RUNS[scale]] if scale in SCALE_RUNS else list(RUNS)
  names = [n for n in only.split(",") if n]
  unknown = [n for n in names if n not in RUNS_BY_NAME and n not in RUN_GROUPS]
  if unknown:
    raise ValueError(f"--only: unknown run(s) {unknown}; known: {', '.join([*RUNS_BY_NAME, *RUN_GROUPS])}")
  out: list[Run] = []
  for n in names:
    out += [r for r in RUN_GROUPS.get(n, (RUNS_BY_NAME.get(n),)) if r not in out]
  return out


def apply_recipe(config: ml_collections.ConfigDict, recipe: Mapping[str, Any]) -> None:
  """Sets a reproduction recipe's fields on an unlocked config: batch_size, steps_per_epoch, num_epochs,
  lr_decay_epochs, learning_rate, train_crop / eval_crop (height, width), train_scenes / val_scenes (the synthetic
  scene counts); used by pncnn_jax.experiments.runs and pncnn_jax.experiments.flow.reproduce."""
  for key in ("batch_size", "steps_per_epoch", "num_epochs", "lr_decay_epochs", "learning_rate"):
    config[key] = recipe[key]
  config.data.train_crop_height, config.data.train_crop_width = recipe["train_crop"]
  config.data.eval_crop_height, config.data.eval_crop_width = recipe["eval_crop"]
  config.data.synthetic_size = recipe["train_scenes"]
  config.data.eval_synthetic_size = recipe["val_scenes"]


# The shipped models by the recipe they were trained with (the demo and the results pages say which).


def by_scale(dataset: str = "synthetic", root: str | os.PathLike | None = None) -> dict[tuple[str, int], list[str]]:
  """The shipped names grouped by the recipe their manifests name: {(scale, steps): [names], ...}."""
  from pncnn_jax import pretrained  # pylint: disable=g-import-not-at-top
  d = pathlib.Path(root or pretrained.ROOT) / dataset
  groups: dict[tuple[str, int], list[str]] = {}
  for name in pretrained.available(dataset, root):
    m = json.loads((d / f"{name}.json").read_text())
    groups.setdefault((m.get("scale", "?"), m.get("step", "?")), []).append(name)
  return groups


def describe_scales(names=None, dataset: str = "synthetic", root: str | os.PathLike | None = None) -> str:
  """"`cpu` scale, 1000 steps: `a`, `b`; ..." for the shipped models (of `names`, when given), by `by_scale`."""
  keep = lambda group: [n for n in group if names is None or n in names]  # noqa: E731
  return "; ".join(f"`{scale}` scale, {steps} steps: " + ", ".join(f"`{n}`" for n in keep(group))
                   for (scale, steps), group in by_scale(dataset, root).items() if keep(group))
