"""Every module of src/lengthgen has tests under its own name (tests/<package>/test_<module>.py)
or a row in docs/design.md's "Where each module is tested" naming the files that test it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "src/lengthgen"
SECTION = "## Where each module is tested"


def own_test_file(module: Path, package: Path = PACKAGE) -> Path:
    rel = module.relative_to(package)
    return Path("tests", *rel.parts[:-1], f"test_{rel.stem.lstrip('_')}.py")


def has_code(path: Path) -> bool:
    """Whether a module holds more than its docstring (a package's bare __init__.py does not)."""
    body = ast.parse(path.read_text()).body
    return any(not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) for node in body)


def table_rows(design: str) -> dict[str, list[str]]:
    """The rows of design.md's table: module -> the test files it names."""
    section = design.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+\.py)` \| (.+) \|$", section, flags=re.M)
    return {module: re.findall(r"`([^`]+)`", files) for module, files in rows}


def missing(package: Path, repo: Path, table: dict[str, list[str]]) -> list[str]:
    """Modules with code that have neither a test file of their own name nor a row."""
    found = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        if has_code(path) and not (repo / own_test_file(path, package)).is_file() and name not in table:
            found.append(name)
    return found


TABLE = table_rows((REPO / "docs/design.md").read_text())


def test_every_module_has_its_own_test_file_or_a_row():
    assert not missing(PACKAGE, REPO, TABLE), f"add its tests, or a row under {SECTION!r} in docs/design.md"


@pytest.mark.parametrize("module", sorted(TABLE))
def test_each_row_names_a_module_and_test_files_that_exist(module):
    assert (PACKAGE / module).is_file(), f"{module}: no such module"
    assert not (REPO / own_test_file(PACKAGE / module)).is_file(), f"{module} has its own test file; drop its row"
    assert TABLE[module] and all((REPO / f).is_file() for f in TABLE[module]), TABLE[module]


def test_no_two_test_files_share_a_name():
    """pytest imports a test file by its name alone: a second file of that name is an error."""
    names = [p.name for p in (REPO / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_a_module_without_tests_or_a_row_is_found(tmp_path):
    package, repo = tmp_path / "src/lengthgen", tmp_path
    for rel, text in {"__init__.py": '"""The package."""\n', "model/__init__.py": '"""Models."""\n',
                      "model/net.py": "x = 1\n", "model/heads.py": "y = 2\n", "tasks/_common.py": "z = 3\n",
                      "cli.py": "def main():\n    pass\n"}.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    (repo / "tests/model").mkdir(parents=True)
    (repo / "tests/model/test_net.py").write_text("")
    (repo / "tests/tasks").mkdir(parents=True)
    (repo / "tests/tasks/test_common.py").write_text("")
    table = table_rows(f"# Design\n\n{SECTION}\n\n| module | tested in |\n|---|---|\n"
                      "| `cli.py` | `tests/test_bad_input.py` |\n\n## Next\n\n| `model/heads.py` | `x` |\n")
    assert table == {"cli.py": ["tests/test_bad_input.py"]}  # a table in the next section is not read
    assert missing(package, repo, table) == ["model/heads.py"]
