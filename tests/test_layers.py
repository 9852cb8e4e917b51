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
    "support": {"support"},
    "tasks": {"tasks", "datasets", "config", "plan"},
    "model": {"model"},
    "stages": {"training", "evaluation", "language"},
    "analysis": {"analysis", "reporting", "language.scores", "language.report"},
    # entry points (the warm server runs the command line): may import anything
    "entry": {"cli", "__main__", "__init__", "notebook", "support.warm"},
}
ORDER = ["support", "tasks", "model", "stages", "analysis", "entry"]


def layer_of(module: str) -> str:
    parts = module.split(".")
    for name in (".".join(parts[:i]) for i in range(len(parts), 0, -1)):  # the longest listed prefix
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
    bad.write_text("from lengthgen.training import train\nfrom lengthgen.model.transformer import Transformer\n")
    found = imports(bad)
    assert found == {"training.train", "model.transformer"} and {layer_of(t) for t in found} == {"stages", "model"}


# The parts of a transformer forward: a module that reaches for them writes its own forward.
FORWARD_PARTS = {"scaled_dot_product_attention", "blocks", "heads", "written_out", "ln1", "ln2", "ln_f"}


def forward_parts(source: str) -> set[str]:
    return {n.attr for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)} & FORWARD_PARTS


@pytest.mark.parametrize("path", [p for p in MODULES if not module_name(p).startswith("model.")], ids=module_name)
def test_no_module_outside_model_writes_a_transformer_forward(path):
    assert not forward_parts(path.read_text()), f"{module_name(path)} reaches into the model's blocks"


def test_the_check_catches_a_forward_written_out_elsewhere():
    hand_written = ("def last_attention(model, x, ids):\n    for block in model.blocks:\n"
                    "        q, k, _ = block.attn.heads(block.ln1(x), ids)\n        x = block(x, ids)\n")
    assert forward_parts(hand_written) == {"blocks", "heads", "ln1"}
