"""A run's record of its outputs: the SHA-256 of every table and figure it wrote.

The record (`<results>/checksums.json`, beside `provenance.json`) is written by the workflow's
last job, once every table and figure is final, and read before the next run plans. A file that
does not match it (truncated, edited by hand, garbled, half-copied) is named in one line and
removed then, in the main Snakemake process before any job starts, so that the job that made it
remakes it and Snakemake remakes what was made from it (their input is then newer): no job finds
a damaged table, and no two jobs race to heal one. A valid but incomplete file (a CSV cut at a
line break) is what this catches that reading cannot.

The tools that read a finished run (`lengthgen verdict`, `lengthgen diff`, the report) refuse a
table that fails its record instead of removing it: they make nothing that could replace it.

A missing file is not damage (Snakemake rebuilds it). A table with no record (a run from before
records, a partial copy) is checked for the rows its run's config asks for instead
(lengthgen.support.expected) by the tools that read it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from lengthgen.support import expected
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import MADE_FROM_TABLES, write_text

RECORD = "checksums.json"
RECORDED = ("tables", "figures")  # the folders of a run's results whose every file is recorded


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def recorded_files(results: Path) -> list[Path]:
    """The files under the run's tables/ and figures/, sorted (dotfiles and partial writes left out)."""
    files = []
    for folder in RECORDED:
        files += [p for p in (results / folder).rglob("*") if p.is_file() and not p.name.startswith(".")]
    return sorted(files)


def write(results: str | Path) -> Path:
    """Record every table and figure now under `results`; returns the record's path."""
    results = Path(results)
    sums = {p.relative_to(results).as_posix(): sha256(p) for p in recorded_files(results)}
    out = results / RECORD
    # One file a line, so that `git diff` of a remade run shows which of them moved.
    write_text(out, json.dumps({"sha256": sums}, indent=1, sort_keys=True) + "\n")
    return out


def read(results: str | Path) -> dict[str, str] | None:
    """{relative path: sha256} of the run's record; None when there is none. A record that is not
    one is a UserError naming it."""
    path = Path(results) / RECORD
    if not path.exists():
        return None
    try:
        sums = json.loads(path.read_bytes().decode("utf-8"))["sha256"]
        if not (isinstance(sums, dict) and all(isinstance(v, str) for v in sums.values())):
            raise ValueError
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise UserError(f"{path}: not a record of checksums, expected {{\"sha256\": {{path: digest}}}}") from None
    return sums


def damaged(results: str | Path) -> list[Path]:
    """The recorded files present under `results` whose bytes differ from the record."""
    results = Path(results)
    sums = read(results) or {}
    paths = {results / rel: digest for rel, digest in sorted(sums.items())}
    return [path for path, digest in paths.items() if path.is_file() and sha256(path) != digest]


def heal(results: str | Path) -> list[str]:
    """Remove every damaged file under `results`, a damaged table with the scorecard pages made
    from the tables beside it (fileio.MADE_FROM_TABLES, as a job that cannot read a table does),
    and a damaged record (it is written again at the end of the run); one line for each. Called
    once, before a run plans."""
    results = Path(results)
    try:
        bad = damaged(results)
    except UserError as err:
        (results / RECORD).unlink()
        return [f"{err}: removed; this run writes it again"]
    lines = []
    for path in bad:
        pages = [path.parent / name for name in MADE_FROM_TABLES] if path.parent.name == "tables" else []
        pages = [page for page in pages if page != path and page.exists()]
        for gone in (path, *pages):
            gone.unlink()
        also = ", with the scorecard pages made from the tables" if pages else ""
        lines.append(f"{path}: does not match its record ({results / RECORD}): removed{also}; this run rebuilds it")
    return lines


def check(table: str | Path) -> None:
    """A UserError naming `table` when the record of the run it belongs to (the results directory
    above its tables/ or figures/ folder) says its bytes have changed since the run wrote it."""
    table = Path(table)
    if table.parent.name not in RECORDED:
        return
    results = table.parent.parent
    sums = read(results)
    rel = table.relative_to(results).as_posix()
    if sums is None or rel not in sums or not table.is_file():
        expected.check(table)  # no record of it: at least the rows the run's config asks for
        return
    if sha256(table) != sums[rel]:
        raise UserError(
            f"{table}: does not match its record ({results / RECORD}): damaged since the run wrote it; "
            "rerun the workflow to rebuild it (or restore it: git checkout -- <file>)"
        )


def check_tables(folder: str | Path) -> None:
    """check() for every recorded file in `folder` (a run's tables/ or figures/)."""
    folder = Path(folder)
    for path in sorted(folder.glob("*")) if folder.is_dir() else []:
        check(path)
