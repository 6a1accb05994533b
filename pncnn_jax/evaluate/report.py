"""How evaluation results are written: the one table code, the log-line values, strict JSON.

Pure formatting of rows of numbers (flat dicts, None where a quantity does not apply); `protocol.Result` writes its
table, csv and JSON through here, and `protocol.format_table` formats rows in a metric set's units.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pncnn_jax.runtime import run_files


def format_rows(rows: Mapping[str, Mapping[str, Any]], columns: Sequence[str], units: Mapping[str, str],
                header: str = "model", *, only_present: bool = True) -> str:
  """A markdown table, one row per named result, one column per key of `columns` (with `only_present`: those that
  some row has), its unit in brackets where `units` has one; cells by `run_files.format_value`."""
  keys = [k for k in columns if not only_present or any(k in r for r in rows.values())]
  return run_files.markdown_table(rows, keys, units, header)


def format_values(values: Mapping[str, Any], keys: Sequence[str], units: Mapping[str, str]) -> str:
  """'mae=1234 mm, rmse=2345 mm, ause_pncnn=0.05': the `keys` of `values` that are numbers, each with its unit from
  `units` (none for a unitless quantity), for the log lines of a training."""
  return ", ".join(f"{k}={values[k]:.4g}" + (f" {units[k]}" if k in units else "") for k in keys
                   if isinstance(values.get(k), (int, float)) and not isinstance(values.get(k), bool))


def strict_json(o: Any) -> Any:
  """`o` as strict JSON values (RFC 8259 has no Infinity or NaN): numpy scalars and arrays as Python numbers and
  lists, NaN as null, +-inf as the strings "inf" / "-inf" (as metrics.jsonl), other objects as their str."""
  if isinstance(o, np.ndarray):
    o = o.tolist()
  if isinstance(o, np.generic):
    o = o.item()
  if isinstance(o, Mapping):
    return {str(k): strict_json(v) for k, v in o.items()}
  if isinstance(o, (list, tuple)):
    return [strict_json(v) for v in o]
  if isinstance(o, float) and not math.isfinite(o):
    return None if math.isnan(o) else ("inf" if o > 0 else "-inf")
  if o is None or isinstance(o, (bool, int, float, str)):
    return o
  return str(o)
