"""The package's structure: its import graph has no cycle and follows the layers below; modules stay small.

Every `import` of a pncnn_jax module counts, including those inside functions (a function-level import is how a
cycle hides). Parsed with `ast`, nothing is imported.
"""

import ast
import pathlib

import pytest

from conftest import REPO

PACKAGE = REPO / "pncnn_jax"
# Each module may import only modules of its own layer or lower ones (and never upward). A new module goes into the
# layer of what it is about; see README "Layout".
LAYERS = [
    ["hostmem", "compile_cache", "cli", "distributed", "viz", "flow_viz", "run_files", "conv", "prng", "data.sparsify",
     "data.io", "pretrained"],
    ["cpu_kernels", "uncertainty", "data.raycast", "data.synthetic", "data.synthetic_cache", "data.kitti_depth",
     "data.nyu_depth", "data.build", "data.flow_scene", "data.flow_synthetic"],
    ["layers", "metrics", "flow_metrics", "data.pipeline", "data"],
    ["models", "flow"],
    ["losses", "flow_losses", "torch_pickle", "torch_names", "checkpointing", "sharding"],
    ["config", "convert", "train_step"],
    ["loader", "fusion", "paper"],
    ["evaluate", "flow_eval"],
    ["ensemble", "predict", "export"],
    ["train", "results", "ensemble_train"],
    ["report", "report_figures", "report_distance", "report_why", "flow_report", "claims", "carry"],
    ["demo", "reproduce", "flow_reproduce"],
]
MAX_LINES = 400
EXEMPT_FROM_SIZE: set[str] = set()


def _module_name(path: pathlib.Path) -> str:
  rel = path.relative_to(PACKAGE).with_suffix("")
  parts = list(rel.parts)
  if parts[-1] == "__init__":
    parts = parts[:-1]
  return ".".join(parts)


def _relative(module: str) -> str | None:
  return module[len("pncnn_jax."):] if module.startswith("pncnn_jax.") else None


def import_graph() -> dict[str, set[str]]:
  """{module: the pncnn_jax modules it imports}, names relative to the package ('data.io', 'train', ...)."""
  modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
  graph: dict[str, set[str]] = {}
  for name, path in modules.items():
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module:
        # `from pncnn_jax.a import x` depends on the submodule a.x when there is one, else on a itself.
        targets = [f"{node.module}.{a.name}" if _relative(f"{node.module}.{a.name}") in modules else node.module
                   for a in node.names]
      else:
        continue
      for t in map(_relative, targets):
        if t in modules and t != name:
          deps.add(t)
    graph[name] = deps
  return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  state: dict[str, int] = {}
  stack: list[str] = []

  def visit(n):
    state[n] = 1
    stack.append(n)
    for m in sorted(graph[n]):
      if state.get(m) == 1:
        return stack[stack.index(m):] + [m]
      if m not in state:
        found = visit(m)
        if found:
          return found
    state[n] = 2
    stack.pop()
    return None

  for n in sorted(graph):
    if n not in state:
      found = visit(n)
      if found:
        return found
  return None


def test_the_cycle_finder_finds_a_cycle():
  assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
  assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_import_graph_has_no_cycle():
  graph = import_graph()
  assert {"train", "evaluate", "ensemble", "config", "layers"} <= set(graph)  # the parser sees the package
  assert "train_step" in graph["train"] and "evaluate" in graph["train"]
  cycle = _find_cycle(graph)
  assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_imports_only_go_down_the_layers():
  graph = import_graph()
  level = {m: i for i, layer in enumerate(LAYERS) for m in layer}
  unplaced = sorted(set(graph) - set(level) - {""})
  assert not unplaced, f"modules without a layer in tests/test_structure.py LAYERS: {unplaced}"
  upward = [f"{m} (layer {level[m]}) imports {d} (layer {level[d]})" for m, deps in graph.items() if m
            for d in deps if level[d] > level[m]]
  assert not upward, "imports up the layers: " + "; ".join(upward)


@pytest.mark.parametrize("path", sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")))
def test_modules_stay_small(path):
  if path in EXEMPT_FROM_SIZE:
    pytest.skip("exempt (see EXEMPT_FROM_SIZE)")
  n = len((PACKAGE / path).read_text().splitlines())
  assert n <= MAX_LINES, f"pncnn_jax/{path} has {n} lines (> {MAX_LINES}): split it along its concerns"
