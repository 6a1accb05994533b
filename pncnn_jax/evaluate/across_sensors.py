"""Evaluation across sensors: one depth model on one evaluation split seen by a list of sensors, one table.

A sensor is a name of `pncnn_jax.data.sensors` (a sensor or a mixture): the LiDAR presets rendered on the synthetic
scenes (hdl64, hdl32, vlp16, os1_32, os1_128), every k-th laser of the dataset's own LiDAR (thin2, thin4: synthetic
and KITTI), random dropout, visual-odometry points (vo, vo_015), range noise and outliers. For each sensor the
config's evaluation split is read with `data.sensors.eval` set to it: the same scenes and the same ground truth,
only the sparse input changes. The depth evaluator scores each; the rows, one per sensor:

  density [%]        the input density (`pncnn_jax.data.input_contract.input_density`: the share of the pixels with
                     a measurement within the rows spanned by measurements, what predict states per frame), mean
                     over the images
  mae, rmse          mean of per-image values (KITTI metric set: mm; NYU: m)
  ause_pncnn         AUSE of the sigma ranking, the paper's normalisation (docs/SPEC.md §8.2)
  ause_shared_max    the same curves over one shared maximum; ause_none [m] unnormalised (docs/SPEC.md §8.2a)
  auce, nll          calibration of sigma (AUCE over 99 levels; Gaussian NLL per pixel)
  coverage_95 [%]    the share of the valid pixels with |t - mu| <= 1.96 sigma (a calibrated sigma: 95)
  auroc_disturbed    AUROC of -c0 for the disturbed input points (synthetic scenes; None without any)

and, for each of these but the density, `<key>_ratio`: the value over the reference sensor's (by default the
first sensor: the model's training sensor); for nll, which can be negative, `nll_diff`, the difference instead.
A model without a calibrated sigma (not trained with a probabilistic loss) has no auce, nll or coverage_95.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jax.sharding import Mesh

from pncnn_jax import from_config
from pncnn_jax.data import input_contract, pipeline
from pncnn_jax.data import sensors as sensors_lib
from pncnn_jax.evaluate import depth, protocol

ALPHA_95 = 0.05  # the miscoverage of mu +- 1.96 sigma
COLUMNS = ("density", "mae", "rmse", "ause_pncnn", "ause_shared_max", "ause_none", "auce", "nll", "coverage_95",
           "auroc_disturbed")
RATIO_KEYS = tuple(k for k in COLUMNS if k not in ("density", "nll"))
UNITS_EXTRA = {"density": "%", "coverage_95": "%", "ause_none": "m"}


class SensorDepthEvaluator(depth.DepthEvaluator):
  """The depth evaluator, also reporting the input density and the ±1.96 sigma coverage of one sensor's batches.

  Its result's details add `density` (`input_contract.input_density`, mean over images) and `coverage_95` (the
  share of valid pixels within mu ± 1.96 sigma: the depth evaluator's AUCE coverage curve at alpha = 0.05; None
  without a calibrated sigma).
  """

  def start(self) -> None:
    super().start()
    self._density: list[float] = []

  def update(self, rows, out, index):
    super().update(rows, out, index)
    self._density += input_contract.input_density(np.asarray(rows["sparse"]), name="sparse",
                                                  layouts=(input_contract.BHW1,)).tolist()

  def result(self) -> protocol.Result:
    res = super().result()  # its details hold the AUSE normalisations and the AUCE's coverage curve
    cal = res.details["calibration"]
    at = None if cal is None else int(np.argmin(np.abs(cal.alphas - ALPHA_95)))
    res.details.update(density=float(np.mean(self._density)),
                       coverage_95=None if cal is None else float(cal.coverage[at]))
    return res


def sensor_row(result: protocol.Result) -> dict[str, Any]:
  """One sensor's row of the table from its `SensorDepthEvaluator` result (units as the module doc says)."""
  s, d = result.summary(), result.details
  scale = 100.0  # shares in %
  row = {"density": d["density"] * scale, "mae": s["mae"], "rmse": s["rmse"], "ause_pncnn": s["ause_pncnn"],
         "ause_shared_max": d["ause_shared_max"], "ause_none": d["ause_none"], "auce": s.get("auce"),
         "nll": s.get("nll"), "coverage_95": None if d["coverage_95"] is None else d["coverage_95"] * scale,
         "auroc_disturbed": s.get("auroc_disturbed")}
  if row["auroc_disturbed"] is not None and not np.isfinite(row["auroc_disturbed"]):
    row["auroc_disturbed"] = None  # no disturbed point (or none clean): nothing to rank
  row["num_images"] = s["num_images"]
  return row


def with_ratios(rows: Mapping[str, Mapping[str, Any]], reference: str) -> dict[str, dict[str, Any]]:
  """The rows with `<key>_ratio` (value / the reference row's) for RATIO_KEYS and `nll_diff`; None where either is
  missing or the reference's is 0."""
  if reference not in rows:
    raise ValueError(f"reference sensor {reference!r} is not one of the sensors evaluated ({', '.join(rows)})")
  ref = rows[reference]
  out = {}
  for name, row in rows.items():
    r = dict(row)
    for k in RATIO_KEYS:
      a, b = row.get(k), ref.get(k)
      r[f"{k}_ratio"] = None if a is None or b is None or b == 0 else float(a) / float(b)
    a, b = row.get("nll"), ref.get("nll")
    r["nll_diff"] = None if a is None or b is None else float(a) - float(b)
    out[name] = r
  return out


def cell(row: Mapping[str, Any], key: str) -> str:
  v = row.get(key)
  if v is None:
    return "-"
  text = f"{v:.0f}" if key in ("mae", "rmse") and abs(v) >= 100 else f"{v:.4g}"
  if key in ("density", "coverage_95"):
    text = f"{v:.3g}"
  if key in RATIO_KEYS and row.get(f"{key}_ratio") is not None:
    text += f" ({row[f'{key}_ratio']:.2f}×)"
  elif key == "nll" and row.get("nll_diff") is not None:
    text += f" ({row['nll_diff']:+.2f})"
  return text


class SensorsResult(protocol.Result):
  """A `protocol.Result` whose table shows each value with its ratio to the reference sensor's in brackets."""

  def table(self, name: str | None = None) -> str:
    del name  # one model: its name heads the report, the rows are sensors
    keys = [k for k in self.columns if any(r.get(k) is not None for r in self.rows.values())]
    head = [self.header] + [f"{k} [{self.units[k]}]" if k in self.units else k for k in keys]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sensor, row in self.rows.items():
      lines.append("| " + " | ".join([sensor] + [cell(row, k) for k in keys]) + " |")
    return "\n".join(lines)


def sensor_config(config, sensor: str):
  """A copy of `config` whose evaluation split is seen by `sensor` (a one-line ValueError for a name that
  `pncnn_jax.data.sensors` does not know or that the dataset cannot make)."""
  pipeline.check_sensors(sensor, config.data.dataset)
  out = config.copy_and_resolve_references()
  with out.unlocked():
    out.data.sensors.eval = "" if sensor == "native" else sensor
  return out


def evaluate_sensors(model, variables: Any, config, sensors: Sequence[str], *, reference: str | None = None,
                     loss_name: str | None = None, mesh: Mesh | None = None, max_batches: int = -1,
                     progress: bool = False, num_panels: int = 0) -> SensorsResult:
  """Evaluates one depth model on the config's evaluation split seen by each of `sensors` (module doc).

  Args:
    model, variables: the depth network and its variables.
    config: the model's config (its loss decides sigma; its data block the split, crop and metric set).
    sensors: names of `pncnn_jax.data.sensors` ('native': the dataset's own sensor).
    reference: the sensor the ratios are taken to (default: the first of `sensors`).
    loss_name: the loss the model was trained with (decides sigma; default: the config variant's).
    mesh, max_batches, progress: as `protocol.evaluate_batches`.
    num_panels: keep this many qualitative panels per sensor (in the result's details `panels`, by sensor).

  Returns:
    A `SensorsResult` (evaluator 'sensors', header 'sensor'): one row per sensor, in order; details `per_sensor`
    ({sensor: the depth evaluator's Result}) and `reference`.
  """
  sensors = list(dict.fromkeys(sensors))
  if not sensors:
    raise ValueError("sensors: give at least one sensor name; valid names: " + ", ".join(sensors_lib.names()))
  reference = sensors[0] if reference is None else reference
  if reference not in sensors:
    raise ValueError(f"reference sensor {reference!r} is not one of the sensors {', '.join(sensors)}")
  configs = {s: sensor_config(config, s) for s in sensors}  # every name checked before the first evaluation
  evaluator = SensorDepthEvaluator.from_config(config, num_panels=num_panels,
                                               **({"loss_name": loss_name} if loss_name else {}))
  eval_fn = depth.make_eval_fn(model, config.metrics)
  evaluator.eval_fn = eval_fn
  per_sensor, rows = {}, {}
  for s in sensors:
    res = evaluator.run(model, variables, from_config.eval_iterator(configs[s]), mesh=mesh, max_batches=max_batches,
                        progress=progress)
    per_sensor[s] = res
    rows[s] = sensor_row(res)
  ms = protocol.get_metric_set(config.metrics)
  units = {**ms.units, **UNITS_EXTRA}
  rows = with_ratios(rows, reference)
  return SensorsResult(evaluator="sensors", rows=rows, units=units, columns=COLUMNS, header="sensor",
                       details={"per_sensor": per_sensor, "reference": reference},
                       report={"reference_sensor": reference, "metric_set": config.metrics})
