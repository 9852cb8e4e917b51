"""Code digests: which source files a stage depends on, hashed.

Snakemake cannot see edits to imported modules, so each rule passes the digest of the
files its stage imports as a param. The set is the transitive closure of `lengthgen`
imports found by parsing (not importing) the entry module, so it costs milliseconds at DAG
build and needs no torch.

What is hashed is each file's syntax tree without docstrings, not its bytes: comments,
docstrings, blank lines and line breaks do not change what a stage computes, so editing them
reruns nothing. The command-line shim (`cli.py`, `__main__.py`) is in no digest: it parses
arguments and calls one function of the stage's module, and a changed flag changes the rule's
shell command, which Snakemake sees by itself.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

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
    tree = ast.parse(path.read_text(), str(path))
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
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def stage_digest(entry: str, kind: str | None = None) -> str:
    """The digest of `stage_files(entry, kind)`: their paths and code."""
    h = hashlib.sha256()
    for path in stage_files(entry, kind):
        h.update(path.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + code_text(path).encode() + b"\0")
    return h.hexdigest()[:16]
