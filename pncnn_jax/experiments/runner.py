"""The research wing's one runner: a task's run table, trained and evaluated with the task's evaluators.

Each task of the paper's experiments (the depth runs, `pncnn_jax.experiments.evaluate_runs`; the baselines,
`pncnn_jax.experiments.baselines`; sparse flow, `pncnn_jax.experiments.flow.reproduce`) describes its evaluation as a
`Table`: its `Entry`s, one per result of its page (a run, an oracle, an ensemble, a cost measurement), each with what
it measures (a registered evaluator of `pncnn_jax.evaluate.protocol` run on the entry's model and scenes) and when
its cache goes stale, and how the entries' values make the page's summary. `evaluate_all(workdir, table)` measures
each entry once and caches it as `<workdir>/eval/<name>.json` (`cached`: redone when older than what it measures or
written by another EVAL_VERSION); with `evaluate=False` (the report stage) it only reads the caches.

A task whose runs are one recipe per name (flow) keeps them in a `RunTable`: where each run lives
(`<workdir>/runs/<name>`), when it is finished (its final validation row), `train_runs` and the convergence rule
shared with the depth runs (`convergence`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

import ml_collections

from pncnn_jax import pretrained

EVAL_VERSION = 2  # bump when what an evaluation measures changes: cached evaluations of another version are redone
# (A measurement added beside the others, which the report shows only where present, needs no bump.)
# "converged": the best validation error of the last 30 % of the phase before the lr drop moved by less than this
FLAT_TOLERANCE = 0.02


@dataclasses.dataclass(frozen=True)
class Entry:
  """One result of a task's page, cached as `<workdir>/eval/<name>.json`.

  Attributes:
    name: its cache file and its key in the values `Table.summarise` gets.
    measure: measures it (loads its model, runs its evaluator) -> a JSON-able dict; None: only read from the cache.
    fresh_after: a cache older than this (the newest checkpoint it measures, seconds since the epoch) is redone.
    require: keys a cached value must hold (what a newer evaluation added), else it is redone.
    evaluate: measure it even in the report stage (True), never (False), or as the table's run says (None).
  """

  name: str
  measure: Callable[[], dict[str, Any]] | None
  fresh_after: float = 0.0
  require: tuple[str, ...] = ()
  evaluate: bool | None = None


@dataclasses.dataclass(frozen=True)
class Table:
  """A task's run table: its entries, and `summarise(values)` -> the summary its page writer takes, from
  {entry name: its value, or None when it was neither measured nor cached}."""

  entries: Sequence[Entry]
  summarise: Callable[[dict[str, dict[str, Any] | None]], dict[str, Any]]


def cached(path: pathlib.Path, fresh_after: float, compute: Callable[[], dict[str, Any]],
           require: Sequence[str] = ()) -> dict[str, Any]:
  """The evaluation at `path` if written after `fresh_after` by this EVAL_VERSION and holding the keys `require`
  (what a newer evaluation added), else compute() written there."""
  if path.exists() and path.stat().st_mtime >= fresh_after:
    value = json.loads(path.read_text())
    if value.get("eval_version") == EVAL_VERSION and all(k in value for k in require):
      return value
  value = {**compute(), "eval_version": EVAL_VERSION}
  tmp = path.with_suffix(".tmp")
  tmp.write_text(json.dumps(value, indent=1, default=pretrained.json_default) + "\n")
  tmp.replace(path)
  return value


def read_or_measure(path: pathlib.Path, fresh_after: float, compute: Callable[[], dict[str, Any]] | None, *,
                    evaluate: bool, require: Sequence[str] = ()) -> dict[str, Any] | None:
  """What a workdir measures at `path` (`cached`, with `evaluate` and a `compute`), or measured there before (the
  report stage); None if neither."""
  if evaluate and compute is not None:
    return cached(path, fresh_after, compute, require)
  return json.loads(path.read_text()) if path.exists() else None


def evaluate_all(workdir: pathlib.Path, table: Table, *, evaluate: bool = True) -> dict[str, Any]:
  """Every entry of `table` measured (or, with evaluate=False, read) in order, each cached in <workdir>/eval/;
  returns `table.summarise` of their values."""
  (workdir / "eval").mkdir(parents=True, exist_ok=True)
  values = {}
  for e in table.entries:
    values[e.name] = read_or_measure(workdir / "eval" / f"{e.name}.json", e.fresh_after, e.measure,
                                     evaluate=evaluate if e.evaluate is None else e.evaluate, require=e.require)
  return table.summarise(values)


def checkpoint_time(rundir: pathlib.Path, weights: pathlib.Path | None = None) -> float:
  """When a run last changed: its newest checkpoint, else the file `weights` (its final weights), else 0."""
  ck = rundir / "checkpoints"
  if ck.is_dir():
    return max((p.stat().st_mtime for p in ck.iterdir()), default=0.0)
  return weights.stat().st_mtime if weights is not None and weights.exists() else 0.0


def git_commit() -> str | None:
  """The checkout's commit (the pages record which code measured them), None outside git."""
  try:
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                          cwd=pathlib.Path(__file__).resolve().parent).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return None


# ----------------------------------------------------------------------------------------------------------------
# Runs


def validation_rows(rundir: pathlib.Path) -> list[dict[str, Any]]:
  """The validation rows of a run's metrics.jsonl, one per step (the last written wins), by step."""
  rows = [json.loads(line) for line in (rundir / "metrics.jsonl").read_text().splitlines()]
  return sorted({r["step"]: r for r in rows if r.get("split") == "val"}.values(), key=lambda r: r["step"])


def finished(rundir: pathlib.Path, total_steps: int) -> bool:
  """True when the run's metrics.jsonl has its final validation row (of step `total_steps`)."""
  path = rundir / "metrics.jsonl"
  if not path.exists():
    return False
  for line in path.read_text().splitlines():
    row = json.loads(line)
    if row.get("split") == "val" and row.get("step") == total_steps:
      return True
  return False


def convergence(rundir: pathlib.Path, decay_step: int, metric: str = "rmse", beside: str = "mae") -> dict[str, Any]:
  """The validation curve [(step, metric, beside)] and whether it is flat: the best `metric` of the last 30 % of
  the phase before the lr drop (at `decay_step`) is within FLAT_TOLERANCE (relative) of the best before it (best,
  not last: one diverged validation must not decide; the lr drop afterwards only polishes). A curve still falling
  more than that is reported as not converged."""
  curve = [(r["step"], r[metric], r.get(beside)) for r in validation_rows(rundir)]
  phase = [c for c in curve if c[0] <= decay_step]
  ref_step = decay_step - 0.3 * decay_step
  earlier = [c[1] for c in phase if c[0] <= ref_step]
  late = [c[1] for c in phase if c[0] > ref_step]
  change = (min(late) - min(earlier)) / min(earlier) if earlier and late else None
  return {"val_curve": curve, f"{metric}_change_last_30pct": change,
          "flat": change is not None and abs(change) < FLAT_TOLERANCE}


@dataclasses.dataclass(frozen=True)
class RunTable:
  """A task's runs, one recipe per run name.

  Attributes:
    known: every run name the task can train (what --only accepts).
    default: the runs a plain command trains.
    config: name -> the run's config.
  """

  known: Sequence[str]
  default: Sequence[str]
  config: Callable[[str], ml_collections.ConfigDict]

  def run_dir(self, workdir: pathlib.Path, name: str) -> pathlib.Path:
    return workdir / "runs" / name

  def total_steps(self, name: str) -> int:
    config = self.config(name)
    return int(config.steps_per_epoch) * int(config.num_epochs)

  def decay_step(self, name: str) -> int:
    config = self.config(name)
    return int(config.steps_per_epoch) * int(config.lr_decay_epochs)

  def finished(self, workdir: pathlib.Path, name: str) -> bool:
    return finished(self.run_dir(workdir, name), self.total_steps(name))

  def select(self, only: str) -> list[str]:
    """The runs of a comma-separated --only (default: `default`); an unknown name is a ValueError naming the known."""
    names = [n for n in only.split(",") if n] if only else list(self.default)
    unknown = [n for n in names if n not in self.known]
    if unknown:
      raise ValueError(f"--only: unknown run(s) {unknown}; known: {', '.join(self.known)}")
    return names


def train_runs(workdir: pathlib.Path, table: RunTable, names: Sequence[str],
               sitting: Callable[[pathlib.Path, RunTable, str], Any] | None = None) -> None:
  """Trains (or resumes) each run of `names` in `<workdir>/runs/<name>` (`training.loop.train_and_evaluate`);
  finished runs are skipped. `sitting(rundir, table, name)`: a context manager around each training (the task's
  account of its time)."""
  import contextlib  # pylint: disable=g-import-not-at-top

  from pncnn_jax.training import loop  # pylint: disable=g-import-not-at-top
  for name in names:
    if table.finished(workdir, name):
      print(f"[{name}] finished", flush=True)
      continue
    print(f"[{name}] training ({table.total_steps(name)} steps)", flush=True)
    rundir = table.run_dir(workdir, name)
    with (sitting(rundir, table, name) if sitting is not None else contextlib.nullcontext()):
      loop.train_and_evaluate(table.config(name), rundir)

