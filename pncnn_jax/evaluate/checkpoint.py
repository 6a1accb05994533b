"""The one entry that evaluates a checkpoint: `evaluate_checkpoint`, what `eval.py` (`pncnn-eval`) does.

For every config (a depth model, an ensemble, a flow model, any registered task): the config's evaluator
(`protocol.evaluator_for`) loads the checkpoint through the one loader (`checkpoints.loader.load`: identity and
finite-weight checks), evaluates the config's eval split (or KITTI PNG pairs) with the shared batch loop, prints its
table and writes its reports into one locked output folder.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import jax

from pncnn_jax import from_config
from pncnn_jax.checkpoints import identity as identity_lib
from pncnn_jax.evaluate import across_sensors, depth, pairs, protocol
from pncnn_jax.runtime import cli, run_files

REPORT_FILES = ("results.json", "results.csv", "results.md")  # every evaluation's, besides its figures


def checkpoint_tag(checkpoint: str) -> str:
  """The short name of a checkpoint for folders and tables: 'best', 'latest', a path's file name without its
  extensions ('synthetic:a' -> 'synthetic_a'), the members of an ensemble joined by '+'."""
  if checkpoint in ("best", "latest"):
    return checkpoint
  return "+".join(pathlib.Path(c.strip().replace(":", "_")).name.split(".")[0] for c in checkpoint.split(","))


def check_sensors_request(evaluator: protocol.Evaluator, config, sensors: Sequence[str],
                          reference_sensor: str | None, pairs_dir: str | None) -> None:
  """A one-line ValueError naming --sensors when an evaluation across sensors cannot run as asked."""
  if not sensors:
    raise ValueError("--sensors: give sensor names separated by commas (e.g. hdl64,hdl32,vlp16,vo_015)")
  if pairs_dir:
    raise ValueError("--sensors evaluates the config's split seen by other sensors; --pairs_dir frames have one "
                     "sensor (give one or the other)")
  if type(evaluator) is not depth.DepthEvaluator:  # pylint: disable=unidiomatic-typecheck
    raise ValueError(f"--sensors evaluates one depth model; config variant {config.variant!r} is evaluated by the "
                     f"{evaluator.name!r} evaluator")
  for s in sensors:
    across_sensors.sensor_config(config, s)  # an unknown name or one the dataset cannot make: one line
  if reference_sensor is not None and reference_sensor not in sensors:
    raise ValueError(f"--reference_sensor {reference_sensor!r} is not one of --sensors ({', '.join(sensors)})")


def evaluate_checkpoint(config, workdir: str | None, checkpoint: str = "best", *, pairs_dir: str | None = None,
                        output_dir: str | None = None, progress: bool | None = None,
                        allow_mismatch: bool = False, allow_fallback: bool = False, overwrite: bool = False,
                        sensors: Sequence[str] | None = None, reference_sensor: str | None = None
                        ) -> tuple[protocol.Result, dict[str, str]]:
  """What `eval.py` does: loads the checkpoint, evaluates the config's eval split (or KITTI PNG pairs under
  `pairs_dir`), prints the table and writes the reports to `output_dir` (default `<workdir>/eval_<checkpoint>`):
  results.{json,csv,md} and the evaluator's figures (`protocol.Result.write`).

  The checkpoint (any kind, `loader.load`, shipped names 'synthetic:<name>' included; for an ensemble config its
  members separated by commas, or 'best' / 'latest' of an ensemble run) must have been trained as the config says
  (`config.identity`: dataset, or 'kitti_depth' with `pairs_dir`; variant; loss; input scaling), else
  `config.IdentityMismatchError` unless `allow_mismatch`. The model is the config's, except the settings that are
  part of what the weights were trained as (`protocol.WEIGHT_SETTINGS`), taken from the checkpoint when it records
  them. `allow_fallback`: a step of a training run that cannot be restored is replaced by the newest that can,
  with a warning (`loader.load`); the report records the step evaluated.

  The output folder is this evaluation's while it runs (`run_files.WorkdirLock`: a second eval.py, predict or bag
  command on it stops at once, naming it) and records its writer in pncnn_writer.json (the checkpoint, its step and
  weights' sha256, the data and metric settings): reports of another checkpoint or other settings there are
  refused in one line (`run_files.OutputOwnedError`), or replaced with `overwrite`. An empty `output_dir` or
  `workdir` ("", an unset shell variable) is a ValueError. `progress`: a progress bar on stderr (None: only when
  stderr is a terminal; eval.py --progress auto|on|off)."""
  run_files.require_path(output_dir, "--output")
  run_files.require_path(workdir, "--workdir")
  if not pairs_dir:
    from_config.check_data(config, training=False)  # DatasetNotFoundError before the checkpoint loads
  evaluator = protocol.evaluator_for(config)
  if sensors is not None:
    check_sensors_request(evaluator, config, sensors, reference_sensor, pairs_dir)
  tag = checkpoint_tag(checkpoint)
  if output_dir is None:
    if not workdir:
      raise ValueError("give --workdir (or an output directory) for the reports")
    output_dir = str(pathlib.Path(workdir) / f"eval_{tag}")
  run_files.check_writable(output_dir)  # before the checkpoint loads and the evaluation runs
  out = pathlib.Path(os.path.abspath(output_dir))
  top = out  # the outermost folder this call creates (out, or an ancestor: <workdir>/eval_best of a new workdir)
  while not top.parent.exists():
    top = top.parent
  created = not out.exists()
  out.mkdir(parents=True, exist_ok=True)
  lock = run_files.WorkdirLock(out, flag="--output", what="evaluation") if jax.process_index() == 0 else None
  try:
    if lock is not None:
      lock.acquire()
    progress = cli.progress_enabled("auto") if progress is None else progress  # None: on a terminal only
    return _evaluate_into(evaluator, config, workdir, checkpoint, out, tag, pairs_dir=pairs_dir, progress=progress,
                          allow_mismatch=allow_mismatch, allow_fallback=allow_fallback, overwrite=overwrite,
                          claim=lock is not None, sensors=sensors, reference_sensor=reference_sensor)
  except BaseException:
    if lock is not None:
      lock.release()
      lock = None
    if created:  # a refused evaluation leaves no folder behind, nor the parents it made
      for folder in (out, *out.parents):
        if any(folder.iterdir()):
          break
        folder.rmdir()
        if folder == top:
          break
    raise
  finally:
    if lock is not None:
      lock.release()


def _evaluate_into(evaluator: protocol.Evaluator, config, workdir, checkpoint, out: pathlib.Path, tag: str, *,
                   pairs_dir, progress: bool, allow_mismatch: bool, allow_fallback: bool, overwrite: bool,
                   claim: bool, sensors: Sequence[str] | None = None, reference_sensor: str | None = None
                   ) -> tuple[protocol.Result, dict[str, str]]:
  """`evaluate_checkpoint` into the locked folder `out`."""
  expect = identity_lib.identity(config)
  if pairs_dir:
    expect["dataset"] = "kitti_depth"
  loaded = evaluator.load(config, checkpoint, workdir=workdir, expect=expect, allow_mismatch=allow_mismatch,
                          allow_fallback=allow_fallback,
                          against="--config with --pairs_dir" if pairs_dir else "--config")
  data = pairs_dir or f"{config.data.dataset}/{config.data.eval_split}"
  if claim:  # which checkpoint (its weights) and which evaluation wrote the reports
    record = {"command": "eval.py", "checkpoint": checkpoint,
              "model": {"weights_sha256": run_files.weights_digest(loaded.variables), "step": loaded.meta.get("step")},
              "settings": {"data": data, "metrics": config.metrics, "num_eval_batches": config.num_eval_batches,
                           "eval_crop": [config.data.eval_crop, config.data.eval_crop_height,
                                         config.data.eval_crop_width], "variant": config.variant,
                           **({"sensors": list(sensors), "reference_sensor": reference_sensor or sensors[0]}
                              if sensors else {})}}
    run_files.claim_output(out, record, overwrite=overwrite,
                           has_outputs=any((out / f).exists() for f in (*REPORT_FILES, *evaluator.files)))
  if sensors:
    result = across_sensors.evaluate_sensors(loaded.model, loaded.variables, config, sensors,
                                           reference=reference_sensor, max_batches=config.num_eval_batches,
                                           progress=progress)
  else:
    if pairs_dir:
      batches = pairs.kitti_pair_batches(pairs_dir, (config.data.eval_crop_height, config.data.eval_crop_width))
    else:
      batches = from_config.eval_iterator(config)
    result = evaluator.run(loaded.model, loaded.variables, batches, max_batches=config.num_eval_batches,
                           progress=progress)
  name = f"{config.variant}@{tag}"
  extra = {"checkpoint": checkpoint, "checkpoint_step": loaded.meta.get("step"), "variant": config.variant,
           "loss": from_config.variant_loss(config), "data": data, "checkpoint_identity": loaded.identity,
           "identity_mismatch_allowed": bool(allow_mismatch)}
  paths = result.write(out, name, extra)
  if jax.process_index() == 0:
    print(result.table(name))
    print("wrote " + ", ".join(paths.values()))
  return result, paths
