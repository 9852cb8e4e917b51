"""The import structure of src/lengthgen: its packages and top-level modules in one order, each
importing only from itself and from those before it, no import cycle, no `_private` name
imported from another module, and one transformer forward, in model/. The order is the table
in docs/design.md; a package or top-level module missing from ORDER fails here, so a new one is
placed on purpose. Each check is also run on a small planted package, to show that it fails."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "src/lengthgen"

# Reading tables (analysis, reporting) comes right after support, before anything that imports
# torch: judging or drawing a result needs no model and reruns no training when edited.
ORDER = ["support", "analysis", "reporting", "tasks", "datasets", "config", "plan", "layout", "model", "training",
         "evaluation", "language", "notebook", "commands", "cli", "__main__", "__init__"]


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """`tasks.needle` for tasks/needle.py, `tasks` for tasks/__init__.py, `__init__` for the root's."""
    parts = path.relative_to(package).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def unit_of(module: str) -> str:
    """The package or top-level module that `module` belongs to."""
    return module.split(".")[0]


def _target(known: dict[str, Path], base: str, name: str) -> str:
    """What `from lengthgen.<base> import <name>` imports: the submodule, if there is one."""
    sub = f"{base}.{name}" if base else name
    return sub if sub in known else base or "__init__"


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module's imports of other modules of the package, found by parsing."""
    known, graph = modules(package), {}
    root = package.name
    for name, path in known.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == root:
                base = node.module.removeprefix(root).lstrip(".")
                found |= {_target(known, base, a.name) for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name.removeprefix(root).lstrip(".") or "__init__" for a in node.names
                          if a.name.split(".")[0] == root}
        graph[name] = found - {name}
    return graph


def unplaced(graph: dict[str, set[str]], order: list[str]) -> list[str]:
    return sorted(m for m in graph if unit_of(m) not in order)


def upward_imports(graph: dict[str, set[str]], order: list[str], module: str) -> list[str]:
    """The modules that `module` imports from a unit after its own."""
    mine = order.index(unit_of(module))
    return sorted(t for t in graph[module] if order.index(unit_of(t)) > mine)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports between packages and top-level modules: a cycle here is one between modules
    of two packages that need not be a cycle of modules (a imports b.x, b.y imports a)."""
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        units.setdefault(unit_of(module), set()).update(unit_of(t) for t in targets)
    return {u: targets - {u} for u, targets in units.items()}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(path: Path, package: Path = PACKAGE) -> list[str]:
    """The `_private` names that the module at `path` takes from another module of the package:
    a function, class or constant by import or by attribute (`optim._load`), or a private module
    (`tasks/_common.py`) from outside the package that holds it."""
    known, root = modules(package), package.name
    me = module_name(path, package)
    my_package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found, bound = [], set()

    def module_ok(target: str) -> bool:
        private_parts = [i for i, p in enumerate(target.split(".")) if _private(p)]
        if not private_parts:
            return True
        holder = ".".join(target.split(".")[: private_parts[0]])
        return my_package == holder or my_package.startswith(f"{holder}.")

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == root:
            base = node.module.removeprefix(root).lstrip(".")
            if base and not module_ok(base):
                found.append(base)
            for a in node.names:
                target = _target(known, base, a.name)
                if target != (base or "__init__"):  # a submodule
                    bound.add(a.asname or a.name)
                    if not module_ok(target):
                        found.append(target)
                elif _private(a.name):
                    found.append(f"{base}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == root:
                    target = a.name.removeprefix(root).lstrip(".")
                    bound.add(a.asname or a.name)
                    if target and not module_ok(target):
                        found.append(target)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and _private(node.attr) and ast.unparse(node.value) in bound:
            found.append(f"{ast.unparse(node.value)}.{node.attr}")
    return sorted(found)


GRAPH = import_graph()
MODULES = modules()

def test_every_package_and_top_level_module_has_its_place_in_the_order():
    assert not unplaced(GRAPH, ORDER), "add them to ORDER (and to the table in docs/design.md)"
    assert sorted(ORDER) == sorted({unit_of(m) for m in GRAPH}), "ORDER names a unit that is gone"


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down_the_order(module):
    assert not upward_imports(GRAPH, ORDER, module), f"{module} ({unit_of(module)}) imports a later unit"


def test_no_import_cycle():
    assert not cycles(GRAPH), "modules that import each other"
    assert not cycles(unit_graph(GRAPH)), "packages that import each other"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_is_imported_from_another_module(module):
    assert not private_imports(MODULES[module])


# -- each check against a planted violation -------------------------------------------------


def _plant(tmp_path, files: dict[str, str]) -> Path:
    package = tmp_path / "lengthgen"
    for rel, text in {"__init__.py": "", **files}.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    return package


PLANTED_ORDER = ["support", "analysis", "model", "cli", "__init__"]


def test_an_upward_import_is_found(tmp_path):
    package = _plant(tmp_path, {
        "support/__init__.py": "", "support/files.py": "import os\n",
        "analysis/__init__.py": "", "analysis/claims.py": "from lengthgen.support.files import os\n",
        "model/__init__.py": "", "model/net.py": "from lengthgen.analysis import claims\n",
        "analysis/stats.py": "from lengthgen.model.net import Net\nimport lengthgen.cli\n",
        "cli.py": "from lengthgen.analysis import stats\n"})
    graph = import_graph(package)
    assert graph["analysis.stats"] == {"model.net", "cli"}
    assert upward_imports(graph, PLANTED_ORDER, "analysis.stats") == ["cli", "model.net"]
    assert upward_imports(graph, PLANTED_ORDER, "model.net") == []  # down the order
    assert upward_imports(graph, PLANTED_ORDER, "analysis.claims") == []


def test_a_unit_missing_from_the_order_is_found(tmp_path):
    package = _plant(tmp_path, {"support/__init__.py": "", "plots/__init__.py": "", "plots/draw.py": "x = 1\n"})
    assert unplaced(import_graph(package), PLANTED_ORDER) == ["plots", "plots.draw"]


def test_a_cycle_is_found_within_a_package_and_across_packages(tmp_path):
    package = _plant(tmp_path, {
        "support/__init__.py": "",
        "support/warm.py": "def serve():\n    from lengthgen.cli import main\n",
        "cli.py": "from lengthgen.support.warm import serve\n",
        "analysis/__init__.py": "",
        "analysis/a.py": "from lengthgen.analysis import b\n",
        "analysis/b.py": "from lengthgen.analysis.c import f\n",
        "analysis/c.py": "import lengthgen.analysis.a\n",
        "analysis/d.py": "from lengthgen.analysis import a\n"})
    assert cycles(import_graph(package)) == [["analysis.a", "analysis.b", "analysis.c"], ["cli", "support.warm"]]


def test_a_cycle_of_packages_is_found_where_no_module_cycle_is(tmp_path):
    package = _plant(tmp_path, {
        "analysis/__init__.py": "", "analysis/aggregate.py": "x = 1\n",
        "analysis/scorecard.py": "from lengthgen.language import scores\n",
        "language/__init__.py": "", "language/scores.py": "from lengthgen.analysis.aggregate import x\n"})
    graph = import_graph(package)
    assert cycles(graph) == [] and cycles(unit_graph(graph)) == [["analysis", "language"]]


def test_a_private_name_from_another_module_is_found(tmp_path):
    package = _plant(tmp_path, {
        "training/__init__.py": "",
        "training/optim.py": "def _load(p):\n    return p\n\ndef load(p):\n    return _load(p)\n",
        "training/loop.py": "from lengthgen.training.optim import _load, load\n",
        "training/train.py": "from lengthgen.training import optim\n\nx = optim._load('m.pt'), optim.load\n",
        "tasks/__init__.py": "",
        "tasks/_common.py": "def draw():\n    pass\n",
        "tasks/needle.py": "from lengthgen.tasks._common import draw\nfrom lengthgen.tasks import _common\n",
        "datasets.py": "from lengthgen.tasks._common import draw\n",
        "config.py": "from lengthgen.tasks import _common\nimport lengthgen.tasks._common\n"})
    found = {m: private_imports(p, package) for m, p in modules(package).items()}
    assert found["training.loop"] == ["training.optim._load"]
    assert found["training.train"] == ["optim._load"]
    assert found["tasks.needle"] == []  # a private module, inside its own package
    assert found["datasets"] == ["tasks._common"]
    assert found["config"] == ["tasks._common", "tasks._common"]
    assert found["training.optim"] == []  # its own private name


# -- one transformer forward -------------------------------------------------------------------

# The parts of a transformer forward: a module that reaches for them writes its own forward.
FORWARD_PARTS = {"scaled_dot_product_attention", "blocks", "heads", "written_out", "ln1", "ln2", "ln_f"}


def forward_parts(source: str) -> set[str]:
    return {n.attr for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)} & FORWARD_PARTS


@pytest.mark.parametrize("module", [m for m in MODULES if unit_of(m) != "model"])
def test_no_module_outside_model_writes_a_transformer_forward(module):
    assert not forward_parts(MODULES[module].read_text()), f"{module} reaches into the model's blocks"


def test_the_check_catches_a_forward_written_out_elsewhere():
    hand_written = ("def last_attention(model, x, ids):\n    for block in model.blocks:\n"
                    "        q, k, _ = block.attn.heads(block.ln1(x), ids)\n        x = block(x, ids)\n")
    assert forward_parts(hand_written) == {"blocks", "heads", "ln1"}
