"""Code digests: which source files a stage depends on, hashed.

Snakemake cannot see edits to imported modules, so each rule passes the digest of the
files its stage imports as a param. The set is the transitive closure of `lengthgen`
imports found by parsing (not importing) the entry module, so it costs milliseconds at DAG
build and needs no torch.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


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


def stage_files(entry: str) -> list[Path]:
    """Source files reachable from module `entry` through `lengthgen` imports."""
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


# Every rule runs its stage through these, so an edit to them reruns everything.
ENTRY_POINTS = [PACKAGE_DIR / "__main__.py", PACKAGE_DIR / "cli.py"]


def stage_digest(entry: str) -> str:
    h = hashlib.sha256()
    for path in sorted(set(stage_files(entry)) | set(ENTRY_POINTS)):
        h.update(path.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]
