"""The evaluator protocol (pncnn_jax/evaluate/protocol.py): the one batch loop pads, shards and drops the padding;
several hosts stay in step; a `Result` writes its table, csv, JSON and figures; an evaluator registered by name is
found as the core's are (the extension seam), and each config gets its evaluator."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from pncnn_jax import evaluate, from_config
from pncnn_jax.evaluate import protocol

from conftest import REPO, TEST_XLA_FLAGS


@jax.jit
def _affine(variables, x):
  return 2.0 * x + variables["w"]


class Rows(protocol.Evaluator):
  """A toy evaluation (a task's evaluator in miniature): y = 2 x + w per row on the devices; the host keeps every
  row it is given, and the shapes and shardings the device step saw."""

  step_keys = ("x",)

  def __init__(self):
    self.seen = []

  def inputs(self, batch, index):
    return {"x": np.asarray(batch["x"], np.float32), "label": np.asarray(batch["label"])}

  def step(self, model):
    del model  # the toy needs none

    def step(variables, x):
      self.seen.append((x.shape, x.sharding.spec))
      return {"y": _affine(variables, x)}

    return step

  def start(self):
    self.rows, self.outs = [], []

  def update(self, rows, out, index):
    self.rows.append(dict(rows))
    self.outs.append(out)

  def result(self):
    x = np.concatenate([r["x"] for r in self.rows])
    return protocol.Result(evaluator=self.name, rows={"all": {"num_rows": len(x), "sum_x": float(x.sum())}},
                           units={"sum_x": "m"}, columns=("num_rows", "sum_x"), details={"x": x})


protocol.register_evaluator("test_rows", Rows)


def _batch(sizes, start=0):
  out, k = [], start
  for n in sizes:
    x = np.arange(k, k + n, dtype=np.float32)[:, None, None, None] * np.ones((1, 2, 3, 1), np.float32)
    out.append({"x": x, "label": np.arange(k, k + n), "name": np.asarray([f"img{i}" for i in range(k, k + n)])})
    k += n
  return out


def test_the_loop_pads_odd_batches_shards_them_and_drops_the_padding():
  """Batches of 3 and 1 rows on the suite's 2 host devices: the device step sees 4 and 2 rows split over 'data';
  `update` gets exactly the real rows, their outputs and (one host) the batches' other entries."""
  assert jax.device_count() == 2
  evaluator = Rows()
  result = evaluator.run(None, {"w": np.float32(0.5)}, _batch((3, 1)))
  assert [s for s, _ in evaluator.seen] == [(4, 2, 3, 1), (2, 2, 3, 1)]
  assert all(spec == P("data") for _, spec in evaluator.seen)
  assert [len(r["x"]) for r in evaluator.rows] == [3, 1] and [len(o["y"]) for o in evaluator.outs] == [3, 1]
  for rows, out in zip(evaluator.rows, evaluator.outs):
    np.testing.assert_array_equal(out["y"], 2.0 * rows["x"] + 0.5)
  np.testing.assert_array_equal(np.concatenate([r["label"] for r in evaluator.rows]), [0, 1, 2, 3])
  assert list(evaluator.rows[1]["name"]) == ["img3"]  # one host: the batch's entries the step does not read
  assert result.summary() == {"num_rows": 4, "sum_x": 36.0} and result.evaluator == "test_rows"
  np.testing.assert_array_equal(result.x[:, 0, 0, 0], [0, 1, 2, 3])  # details read as attributes
  with pytest.raises(AttributeError, match="this test_rows result has no 'panels'; its details: x"):
    result.panels  # noqa: B018
  again = Rows().run(None, {"w": np.float32(0.0)}, _batch((3, 1)), max_batches=1)
  assert again.summary()["num_rows"] == 3


def test_a_result_writes_its_table_csv_json_and_figures(tmp_path):
  drawn = []

  def draw(path, name):
    assert path.suffix == ".png" and path.name.startswith(".")  # a temporary name with the file's suffix
    drawn.append(name)
    path.write_bytes(b"png")

  result = protocol.Result(
      evaluator="depth", rows={"member 0": {"mae": 1.5, "auce": None, "nll": float("nan")},
                               "mean": {"mae": 1.25, "auce": 0.1, "nll": 2.0}},
      units={"mae": "mm"}, columns=("mae", "rmse", "auce", "nll"), header="member / fusion",
      report={"metric_set": "kitti"}, figures={"curve": ("curve.png", draw), "panels": ("panels.png", None)})
  (tmp_path / "panels.png").write_bytes(b"an earlier evaluation's")
  paths = result.write(tmp_path, "ens@best", {"checkpoint": "best"})
  assert sorted(paths) == ["csv", "curve", "json", "md"] and drawn == ["ens@best"]
  assert not (tmp_path / "panels.png").exists()  # not drawn this time: the stale one is gone
  table = (tmp_path / "results.md").read_text().splitlines()
  assert table[0] == "| member / fusion | mae [mm] | auce | nll |"  # rmse: no row has it
  assert (tmp_path / "results.csv").read_text().splitlines() == ["name,mae,auce,nll", "member 0,1.5,,nan",
                                                                 "mean,1.25,0.1,2.0"]
  payload = json.loads((tmp_path / "results.json").read_text())
  assert payload["name"] == "ens@best" and payload["evaluator"] == "depth" and payload["checkpoint"] == "best"
  assert payload["results"] == {"mae": 1.5, "auce": None, "nll": None}  # strict JSON: NaN is null
  assert list(payload["rows"]) == ["member 0", "mean"] and payload["metric_set"] == "kitti"
  single = protocol.Result(evaluator="x", rows={"model": {"mae": 1.0}}, units={}, columns=("mae",))
  assert single.table("pncnn@best").splitlines()[2] == "| pncnn@best | 1 |"  # a single row takes the model's name


def test_evaluators_are_found_by_name_as_an_extension_registers_them():
  assert protocol.get_evaluator("test_rows") is Rows and Rows.name == "test_rows"
  assert {"depth", "ensemble", "ensemble_calibration", "flow", "predictive", "test_rows"} <= set(evaluate.EVALUATORS)
  with pytest.raises(ValueError, match="unknown evaluator 'nope'; valid names: depth, ensemble"):
    protocol.get_evaluator("nope")
  with pytest.raises(ValueError, match="expected an Evaluator subclass"):
    protocol.register_evaluator("not_one", dict)
  with pytest.raises(ValueError, match="evaluator 'depth' is registered already"):
    protocol.register_evaluator("depth", Rows)


@pytest.mark.parametrize("config,evaluator", [("synthetic.py:pncnn", "depth"), ("kitti.py:ncnn_conf_l1", "depth"),
                                              ("ensemble_synthetic.py:pncnn", "ensemble"),
                                              ("flow_synthetic.py:flow_pncnn", "flow")])
def test_every_config_gets_its_evaluator(config, evaluator):
  cfg = from_config.load_config(f"{REPO}/configs/{config}")
  built = protocol.evaluator_for(cfg)
  assert protocol.evaluator_name(cfg) == evaluator and type(built) is protocol.get_evaluator(evaluator)
  assert built.loss_name == from_config.variant_loss(cfg)


_HOST = r"""
import json, sys
import numpy as np
from pncnn_jax.runtime import distributed
distributed.initialize(f"localhost:{sys.argv[1]}", 2, int(sys.argv[2]))
sys.path.insert(0, sys.argv[3])
import jax
import test_protocol as t
pid = jax.process_index()
sizes = {0: (3, 1), 1: (2,)}[pid]  # host 1 runs out of batches first, and its one batch is smaller
evaluator = t.Rows()
result = evaluator.run(None, {"w": np.float32(0.5)}, t._batch(sizes, start=100 * pid))
print(json.dumps({"labels": [r["label"].tolist() for r in evaluator.rows],
                  "y": [o["y"][:, 0, 0, 0].tolist() for o in evaluator.outs], "summary": result.summary()}))
"""


@pytest.mark.slow
def test_two_hosts_stay_in_step_and_both_see_every_row(tmp_path):
  """Two processes of one device each: host 0 has batches of 3 and 1 rows, host 1 one of 2. The loop runs two
  global batches on both (host 1 passes an empty one when its batches ran out), pads every host's part to the same
  size, and each host's `update` gets the real rows of both, in global order."""
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu", PNCNN_NO_HUGEPAGES="1",
             XLA_FLAGS=TEST_XLA_FLAGS.replace("device_count=2", "device_count=1"))
  procs = [subprocess.Popen([sys.executable, "-c", _HOST, str(port), str(i), str(REPO / "tests" / "evaluate")],
                            cwd=REPO / "tests", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(2)]
  outs = []
  for p in procs:
    try:
      out, err = p.communicate(timeout=300)
    finally:
      if p.poll() is None:
        p.kill()
    assert p.returncode == 0, err[-3000:]
    outs.append(json.loads(out.strip().splitlines()[-1]))
  assert outs[0] == outs[1]  # every host sees the same rows and outputs
  assert outs[0]["labels"] == [[0, 1, 2, 100, 101], [3]]
  assert outs[0]["y"] == [[0.5, 2.5, 4.5, 200.5, 202.5], [6.5]]
  assert outs[0]["summary"] == {"num_rows": 6, "sum_x": 6 * 207.0}  # 2 x 3 pixels a row
