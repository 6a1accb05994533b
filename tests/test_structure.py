"""The package's shape (docs/develop/layout.md): folders by concern whose imports only go down, no import cycle,
the extension and the research wing kept apart, and folders of a readable size.

Every `import` of a pncnn_jax module counts, including those inside functions (a function-level import is how a
cycle hides) and the package `__init__` files an import runs. Parsed with `ast`, nothing is imported.
"""

import ast
import os
import pathlib

import pytest

from conftest import REPO

PACKAGE = REPO / "pncnn_jax"
# The units of the package, lowest first: a folder (its modules and __init__) or a top-level module. A module may
# import modules of its own unit or of lower layers, never of its own layer's other units or higher ones.
LAYERS = [
    ["runtime"],                                   # flags, host memory, compile cache, mesh, run files, registries
    ["data", "pretrained", "uncertainty", "viz"],  # datasets and pipeline; shipped weights; AUSE/AUCE; figures
    ["nn"],                                        # NConv numerics and the Flax networks
    ["losses", "metrics"],
    ["from_config"],                               # config -> model, loss, data streams
    ["checkpoints"],
    ["evaluate"],
    ["ensemble"],
    ["training", "inference"],
    ["flow", "baselines"],                         # extensions (sparse flow; the dense baselines): each registers
                                                   # itself, nothing imports it
    ["configs"],                                   # the recipes --config reads (by path): the flow config imports
                                                   # the flow variants
    ["experiments"],                               # the paper's claims: nothing else imports it
    ["", "layers", "predict", "export", "convert", "demo", "loader"],  # the package door and the user aliases
]
# Modules that stand for a moved module (`runtime.alias`): the package never imports them; their target counts as
# their import.
ALIASES = {"layers": "nn.layers", "predict": "inference.predict", "export": "inference.export",
           "convert": "checkpoints.convert", "demo": "experiments.demo", "loader": "checkpoints.loader"}
MAX_MODULES_PER_FOLDER = 12  # past this, a concern wants a folder of its own


def _module_name(path: pathlib.Path, package: pathlib.Path = PACKAGE) -> str:
  rel = path.relative_to(package).with_suffix("")
  parts = list(rel.parts)
  if parts[-1] == "__init__":
    parts = parts[:-1]
  return ".".join(parts)


def _relative(module: str) -> str | None:
  if module == "pncnn_jax":
    return ""
  return module[len("pncnn_jax."):] if module.startswith("pncnn_jax.") else None


def _alias_target(tree: ast.AST) -> str | None:
  for node in ast.walk(tree):
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "alias" and len(node.args) == 2:
      return _relative(node.args[1].value)
  return None


def import_graph(package: pathlib.Path = PACKAGE) -> dict[str, set[str]]:
  """{module: the pncnn_jax modules importing it runs}, names relative to the package ('data.io', 'nn', ...).

  An import of 'a.b.c' from outside folder 'a' also runs the package inits 'a' and 'a.b', which count."""
  modules = {_module_name(p, package): p for p in package.rglob("*.py")}
  graph: dict[str, set[str]] = {}
  for name, path in modules.items():
    tree = ast.parse(path.read_text())
    targets = []
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        targets += [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module:
        # `from pncnn_jax.a import x` depends on the submodule a.x when there is one, else on a itself.
        targets += [f"{node.module}.{a.name}" if _relative(f"{node.module}.{a.name}") in modules else node.module
                    for a in node.names]
    deps = set()
    alias_target = _alias_target(tree)
    rels = [_relative(t) for t in targets] + ([alias_target] if alias_target else [])
    for t in rels:
      if t is None or t not in modules:
        continue
      parts = t.split(".") if t else []
      for k in range(1, len(parts)):  # the package inits the import runs, outside the importer's own package
        init = ".".join(parts[:k])
        if init in modules and not (name == init or name.startswith(init + ".")):
          deps.add(init)
      deps.add(t)
    deps.discard(name)
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


def unit(module: str) -> str:
  return module.split(".")[0]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
  level = {u: i for i, layer in enumerate(LAYERS) for u in layer}
  unplaced = sorted({unit(m) for m in graph} - set(level))
  assert not unplaced, f"units without a layer in tests/test_structure.py LAYERS: {unplaced}"
  return [f"{m} ({unit(m)}, layer {level[unit(m)]}) imports {d} ({unit(d)}, layer {level[unit(d)]})"
          for m, deps in sorted(graph.items()) for d in sorted(deps)
          if unit(d) != unit(m) and level[unit(d)] >= level[unit(m)] and m not in ALIASES]


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
  """The longest path of imports (the graph has no cycle)."""
  memo: dict[str, list[str]] = {}

  def from_(n):
    if n not in memo:
      memo[n] = [n] + max((from_(d) for d in graph[n]), key=len, default=[])
    return memo[n]

  return max((from_(n) for n in graph), key=len)


def test_the_checks_find_what_they_look_for(tmp_path):
  """The cycle finder, the layer rule and the package-init edges on a made-up package."""
  assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
  assert _find_cycle({"a": {"b"}, "b": set()}) is None
  pkg = tmp_path / "pncnn_jax"
  (pkg / "nn").mkdir(parents=True)
  (pkg / "__init__.py").write_text("")
  (pkg / "nn" / "__init__.py").write_text("from pncnn_jax.nn import models\n")
  (pkg / "nn" / "models.py").write_text("def f():\n  from pncnn_jax import losses\n")  # a function-level import
  (pkg / "losses.py").write_text("from pncnn_jax.nn import models\n")
  graph = import_graph(pkg)
  assert graph["losses"] == {"nn", "nn.models"}  # the folder's __init__ runs too
  assert _find_cycle(graph) in (["losses", "nn", "nn.models", "losses"], ["losses", "nn.models", "losses"],
                                ["nn", "nn.models", "losses", "nn"], ["nn.models", "losses", "nn.models"])
  assert layer_violations(graph) == ["nn.models (nn, layer 2) imports losses (losses, layer 3)"]


def test_import_graph_has_no_cycle():
  graph = import_graph()
  assert {"training.loop", "evaluate", "ensemble.members", "from_config", "nn.layers", "flow"} <= set(graph)
  assert "training.step" in graph["training.loop"] and "evaluate" in graph["training.loop"]
  cycle = _find_cycle(graph)
  assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_imports_only_go_down_the_layers():
  upward = layer_violations(import_graph())
  assert not upward, "imports up (or across) the layers: " + "; ".join(upward)


def test_the_research_wing_and_the_extension_stay_apart():
  """Nothing outside experiments/ imports it (the `demo` alias is a door for `python -m pncnn_jax.demo`);
  nothing outside flow/ and experiments/ imports flow/ (but its config, configs/flow_synthetic.py), nor baselines/
  outside baselines/ and experiments/: the core reaches the extensions through its registries."""
  graph = import_graph()
  into_experiments = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                            if unit(d) == "experiments" and unit(m) != "experiments" and m != "demo")
  assert not into_experiments, into_experiments
  into_flow = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                     if unit(d) == "flow" and unit(m) not in ("flow", "experiments")
                     and m != "configs.flow_synthetic")
  assert not into_flow, into_flow
  into_baselines = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                          if unit(d) == "baselines" and unit(m) not in ("baselines", "experiments"))
  assert not into_baselines, into_baselines


def test_aliases_stand_for_existing_modules_and_nothing_imports_them():
  graph = import_graph()
  for name, target in ALIASES.items():
    assert _alias_target(ast.parse((PACKAGE / f"{name}.py").read_text())) == target
    assert target in graph
  users = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps if d in ALIASES and m not in ALIASES)
  assert not users, f"the package imports a user alias instead of the module: {users}"


def test_folders_stay_readable():
  crowded = {}
  for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and (p / "__init__.py").exists())]:
    n = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
    if n > MAX_MODULES_PER_FOLDER:
      crowded[str(folder.relative_to(REPO))] = n
  assert not crowded, f"folders with more than {MAX_MODULES_PER_FOLDER} modules (make a folder per concern): {crowded}"


def test_tests_mirror_the_package():
  """A test file in a folder of tests/ tests that folder of the package (tests/bench: the benchmark scripts)."""
  folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
  for p in (REPO / "tests").iterdir():
    if p.is_dir() and p.name not in ("__pycache__",):
      assert p.name in folders | {"bench"}, f"tests/{p.name}/ mirrors no folder of pncnn_jax/"


def module_name_violations(source: str, path: str, package: pathlib.Path = PACKAGE) -> list[str]:
  """`from pncnn_jax.P import m as a` binds a module under a name of its own: `a` (less a leading _) is m, <last
  part of P>_m or m_lib, and is not the name of another top-level package or module of pncnn_jax (a user alias that
  stands for m itself is fine). A package's __init__ may import its own submodules under their names."""
  modules = {_module_name(p, package) for p in package.rglob("*.py")}
  top = {m.split(".")[0] for m in modules if m}
  out = []
  for node in ast.walk(ast.parse(source)):
    if not (isinstance(node, ast.ImportFrom) and node.module and _relative(node.module) is not None):
      continue
    for a in node.names:
      rel = ".".join(p for p in (_relative(node.module), a.name) if p)
      if rel not in modules:
        continue  # a function, class or constant
      bound, name = (a.asname or a.name).lstrip("_"), a.name.lstrip("_")  # a private module: _m (or m)
      parent = node.module.rsplit(".", 1)[-1]
      own = a.asname is None and pathlib.Path(path).name == "__init__.py" and pathlib.Path(path).parent.name == parent
      if bound not in {name, f"{parent}_{name}", f"{name}_lib"}:
        out.append(f"{path}:{node.lineno}: {rel} imported as {a.asname!r} (use {a.name}, {parent}_{a.name} or "
                   f"{a.name}_lib)")
      elif bound in top and rel != bound and ALIASES.get(bound) != rel and not own:
        out.append(f"{path}:{node.lineno}: {rel} imported as {bound!r}, the name of pncnn_jax.{bound}")
  return out


def test_the_module_name_rule_finds_old_names_and_shadowing():
  src = ("from pncnn_jax.experiments import runs as paper\nfrom pncnn_jax.ensemble import members as ensemble\n"
         "from pncnn_jax.flow import losses\nfrom pncnn_jax.training import step as training_step\n"
         "from pncnn_jax.inference import completer as completer_lib\nfrom pncnn_jax.nn import layers\n"
         "from pncnn_jax.losses import precision_of as p\n")
  got = module_name_violations(src, "x.py")
  assert len(got) == 3 and "runs imported as 'paper'" in got[0] and "'ensemble'" in got[1], got
  assert "flow.losses imported as 'losses', the name of pncnn_jax.losses" in got[2]


def test_modules_are_imported_under_their_own_names():
  """No alias restates a module's old name or shadows a package (package, tests, bench, configs, the commands)."""
  files = [*PACKAGE.rglob("*.py"), *(REPO / "tests").rglob("*.py"), *(REPO / "bench").glob("*.py"),
           *(REPO / "configs").glob("*.py"), REPO / "train.py", REPO / "eval.py"]
  bad = [v for f in files for v in module_name_violations(f.read_text(), str(f))]
  assert not bad, "\n".join(bad)


# Test files about the project as a whole rather than one module (tests/test_<topic>.py, or a prefix of the name).
TEST_TOPICS = {"bad_inputs", "commands", "configs", "docs", "notebook", "packaging", "readme", "structure"}


def test_test_files_are_named_after_their_modules():
  """tests/<folder>/test_<name>.py tests pncnn_jax/<folder>/: <name>, or a prefix of it cut at an underscore, is one
  of that folder's modules or subpackages (or the package of a folder with only an __init__), or a topic of
  TEST_TOPICS; so no test file keeps the name of a module that has moved."""
  bad = []
  for t in sorted((REPO / "tests").rglob("test_*.py")):
    rel = t.relative_to(REPO / "tests")
    if rel.parts[0] == "bench":
      continue
    folder = PACKAGE.joinpath(*rel.parent.parts)
    names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    names |= {folder.name} if rel.parent.parts else set()
    parts = t.stem[len("test_"):].split("_")
    prefixes = {"_".join(parts[:k]) for k in range(1, len(parts) + 1)}
    if not prefixes & (names | TEST_TOPICS):
      bad.append(str(rel))
  assert not bad, f"test files named after no module of their folder: {bad}"


def test_test_files_have_unique_names():
  """The test folders have no __init__.py, so pytest imports each test file by its basename: two files of one name
  (tests/test_evaluate.py and tests/flow/test_evaluate.py) stop the collection of one of them with an error."""
  seen: dict[str, list[str]] = {}
  for t in sorted((REPO / "tests").rglob("*.py")):
    if t.name != "__init__.py":
      seen.setdefault(t.name, []).append(str(t.relative_to(REPO)))
  assert not {k: v for k, v in seen.items() if len(v) > 1 and k != "conftest.py"}


@pytest.mark.parametrize("module", ["runtime.cli", "runtime.hostmem", "runtime.registry", "runtime.alias", ""])
def test_light_modules_import_no_jax(module):
  """The package door and what runs before jax is configured import neither jax nor the rest of the package."""
  graph = import_graph()
  assert not graph[module] - {"runtime", "runtime.alias"}, graph[module]
  source = (PACKAGE / (module.replace(".", "/") + ".py" if module else "__init__.py")).read_text()
  assert not any(isinstance(n, (ast.Import, ast.ImportFrom)) and any(
      a.name.split(".")[0] == "jax" for a in n.names) or (isinstance(n, ast.ImportFrom) and n.module == "jax")
      for n in ast.walk(ast.parse(source)))


@pytest.mark.xdist_group("grouping_probe")
def test_xdist_groups_keep_their_tests_together(request):
  """Under `make test` (pytest-xdist, --dist loadgroup) the tests of one `xdist_group` run in one worker, so that
  what they share (a trained run, a compiled model) is made once. xdist marks their node ids with the group; on
  pytest 9.2 that mark is lost and the groups silently split (pyproject.toml pins pytest below 9.2)."""
  if os.environ.get("PYTEST_XDIST_WORKER") is None or not getattr(request.config.option, "loadgroup", False):
    pytest.skip("not run by pytest-xdist with --dist loadgroup (make test)")
  assert request.node.nodeid.endswith("@grouping_probe"), request.node.nodeid

