"""Code digests: which source files a stage depends on, hashed.

Snakemake cannot see edits to imported modules, so each rule passes the digest of the
files its stage imports as a param. The set is the transitive closure of `lengthgen`
imports found by parsing (not importing) the entry module, so it costs milliseconds at DAG
build and needs no torch.

What is hashed is each file's syntax tree without docstrings, not its bytes: comments,
docstrings, blank lines and line breaks do not change what a stage computes, so editing them
reruns nothing. Of the command line (`cli.py`, and `commands.py`, its table of subcommands), a
stage's digest holds what can change its output: the subcommand functions that call its module,
the helpers they use, and their subcommands' entries of the table with the definitions these name
(a default or a type the rule does not override); an edit of another subcommand, of the error
handling or of a tool (diff) reruns nothing.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path
from typing import NamedTuple

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] != "lengthgen":
        return None
    base = PACKAGE_DIR.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path) -> frozenset[str]:
    """Modules `path` imports. Parsed once per file version: the stages share most files, and
    every Snakemake start (each cluster job's too) computes all stages' digests."""
    stat = path.stat()
    return _parsed_imports(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _parsed_imports(path: Path, mtime_ns: int, size: int) -> frozenset[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            # `from lengthgen.tasks import sparse_parity` imports a submodule.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def stage_files(entry: str, kind: str | None = None) -> list[Path]:
    """Source files reachable from module `entry` through `lengthgen` imports. The task registry
    finds its modules by listing its package, so no import names them: for a stage that reads
    the registry, `kind` adds that one task's module (and what it imports). A cell's digest then
    follows its own task, and editing or adding another task reruns none of its cells."""
    if _module_file(entry) is None:  # a renamed module would otherwise digest nothing, and never rerun
        raise ValueError(f"{entry}: no such module in {PACKAGE_DIR}")
    files = _reachable(entry)
    if kind is not None and PACKAGE_DIR / "tasks" / "__init__.py" in files:
        files = sorted({*files, *_reachable(f"lengthgen.tasks.{kind}")})
    return files


def _reachable(entry: str) -> list[Path]:
    todo, seen = [entry], {}
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if path is None or path in seen.values():
            continue
        seen[name] = path
        todo.extend(_imports(path))
        parent = name.rpartition(".")[0]
        if parent:
            todo.append(parent)  # importing a.b runs a/__init__.py too
    return sorted(seen.values())


def code_text(path: Path) -> str:
    """What of `path` is hashed: its syntax tree with docstrings removed, without line numbers."""
    stat = path.stat()
    return _code_text(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _code_text(path: Path, mtime_ns: int, size: int) -> str:
    return ast.dump(_without_docstrings(ast.parse(path.read_text(), str(path))), annotate_fields=False,
                    include_attributes=False)


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return tree


CLI = PACKAGE_DIR / "cli.py"
COMMANDS = PACKAGE_DIR / "commands.py"
TABLE = "COMMANDS"  # commands.py's table of subcommands, one entry each


def cli_text(entry: str) -> str:
    """What of the command line (`cli.py` and its table of subcommands, `commands.py`) can change
    the output of a stage whose module is `entry`: the top-level functions that import `entry`
    (its subcommands' `cmd_*`), the table's entries of the subcommands they run, and the
    top-level functions and names these use, as syntax trees without docstrings."""
    versions = tuple((path, path.stat().st_mtime_ns, path.stat().st_size) for path in (CLI, COMMANDS))
    return _cli_text(entry, versions)


@functools.cache
def _cli_text(entry: str, versions: tuple) -> str:
    units = [unit for version in versions for unit in _cli_units(*version)]
    defined = {name: unit for unit in units for name in unit.defines}
    commands = {name for name, unit in defined.items() if entry in unit.imports}
    chosen = [unit for unit in units if unit.dispatches & commands]
    todo, kept = [*commands, *(name for unit in chosen for name in unit.uses)], set()
    while todo:
        name = todo.pop()
        if name in defined and name not in kept:
            kept.add(name)
            todo.extend(defined[name].uses)
    return "\n".join(unit.text for unit in units if unit.defines & kept or unit in chosen)


class _Unit(NamedTuple):
    """A top-level statement of cli.py or commands.py, or one entry of the table of subcommands."""

    defines: frozenset[str]
    imports: frozenset[str]
    dispatches: frozenset[str]
    uses: frozenset[str]
    text: str


@functools.cache
def _cli_units(path: Path, mtime_ns: int, size: int) -> tuple[_Unit, ...]:
    """A file of the command line in units, parsed once per version: every stage's digest reads it."""
    units = []
    for node in _without_docstrings(ast.parse(path.read_text(), str(path))).body:
        entries = _table_entries(node)
        if entries is None:
            units.append(_unit(node, defines=frozenset(_defined(node))))
        else:
            units += [_unit(entry, dispatches=frozenset({_function_of(entry)})) for entry in entries]
    return tuple(units)


def _table_entries(node: ast.stmt) -> list[ast.Call] | None:
    """The entries of the table of subcommands, when `node` assigns it."""
    if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [TABLE]:
        return [entry for entry in node.value.elts if isinstance(entry, ast.Call)]
    return None


def _function_of(entry: ast.Call) -> str:
    """The function of cli.py that runs an entry's subcommand: `cmd_x_y` for `x-y`, its name."""
    return "cmd_" + entry.args[0].value.replace("-", "_")


def _unit(node: ast.AST, defines=frozenset(), dispatches=frozenset()) -> _Unit:
    return _Unit(defines=defines, imports=frozenset(_imported(node)), dispatches=dispatches,
                 uses=frozenset(_names(node)), text=ast.dump(node, annotate_fields=False, include_attributes=False))


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [name.id for t in targets for name in ast.walk(t) if isinstance(name, ast.Name)]
    return []


def _imported(node: ast.AST) -> set[str]:
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.ImportFrom) and sub.module:
            found |= {sub.module, *(f"{sub.module}.{alias.name}" for alias in sub.names)}
        elif isinstance(sub, ast.Import):
            found |= {alias.name for alias in sub.names}
    return found


def _names(node: ast.AST) -> set[str]:
    return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}


def stage_digest(entry: str, kind: str | None = None) -> str:
    """The digest of `stage_files(entry, kind)`: their paths and code."""
    h = hashlib.sha256()
    for path in stage_files(entry, kind):
        h.update(path.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + code_text(path).encode() + b"\0")
    h.update(b"cli.py\0" + cli_text(entry).encode())
    return h.hexdigest()[:16]
