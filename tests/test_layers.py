"""The import direction between the package's layers: stages above the model above the tasks,
and the analysis (tables, claims, figures, reports) never reaching down into model or training
code, so that judging or drawing a result needs no torch and reruns no training when edited.
The layers are listed in docs/design.md; a module missing from LAYERS fails here, so a new
module is placed on purpose."""

import ast

import pytest
from conftest import REPO

PACKAGE = REPO / "src/lengthgen"

LAYERS = {
    # support: no lengthgen imports beyond each other
    "support": {"errors", "fileio", "identity", "progress", "device", "markdown", "digest", "unlock", "schema"},
    "tasks": {"tasks", "datasets", "config"},
    "model": {"model", "positions", "loop", "training_loop"},
    "stages": {"train", "stacked", "evaluate", "decode", "attention", "language"},
    "analysis": {"aggregate", "stats", "claims", "scale", "attention_report", "scorecard", "power", "replicate",
                 "verdict", "diff", "report", "figures", "docblocks", "language.scores", "language.report"},
    # entry points (the warm server runs the command line): may import anything
    "entry": {"cli", "__main__", "__init__", "notebook", "warm"},
}
ORDER = ["support", "tasks", "model", "stages", "analysis", "entry"]


def layer_of(module: str) -> str:
    for name in (module, module.split(".")[0]):  # a listed submodule first, then its package
        for layer, names in LAYERS.items():
            if name in names:
                return layer
    raise AssertionError(f"lengthgen.{module}: in no layer of tests/test_layers.py")


def imports(path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lengthgen"):
            base = node.module.removeprefix("lengthgen").lstrip(".")
            for a in node.names:  # `from lengthgen.language import scores` imports a submodule
                sub = f"{base}.{a.name}".lstrip(".")
                found.add(sub if _is_module(sub) else base)
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("lengthgen.") for a in node.names if a.name.startswith("lengthgen.")}
    return found


def _is_module(name: str) -> bool:
    path = PACKAGE.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def module_name(path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    return ".".join(rel.parts)


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_imports_point_down_the_layers(path):
    name = module_name(path)
    mine = ORDER.index(layer_of(name))
    for target in imports(path):
        theirs = layer_of(target)
        if layer_of(name) == "analysis":
            assert theirs in ("support", "analysis"), f"{name} (analysis) imports {target} ({theirs})"
        elif layer_of(name) != "entry":
            assert ORDER.index(theirs) <= mine, f"{name} ({layer_of(name)}) imports {target} ({theirs})"


def test_the_check_catches_an_analysis_module_that_imports_training(tmp_path):
    bad = tmp_path / "claims.py"
    bad.write_text("from lengthgen import train\nfrom lengthgen.model import Transformer\n")
    found = imports(bad)
    assert found == {"train", "model"} and {layer_of(t) for t in found} == {"stages", "model"}
