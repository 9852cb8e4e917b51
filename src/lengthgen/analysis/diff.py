"""`make diff REV=<commit>`: which cells of results/tables moved between a commit and the
working tree. Rows are matched on their key columns; a value moved when it differs by
more than the tolerance (or is a non-number that changed). Added and removed rows count."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd

from lengthgen.analysis.aggregate import parse_csv
from lengthgen.support.errors import UserError

# The key columns of our tables: E1-E3 (task ... depth), the scorecard (claim, check), E4's
# influence.csv (model, method, positions, k), language_train.csv (model, seed, step) and
# language_scores.csv (seed, index: a token of a pair), and attention.csv (task ... depth, then
# layer, head, metric).
KEY_COLUMNS = ("task", "scheme", "seed", "length", "k", "depth", "claim", "check", "model", "method", "positions",
               "step", "index", "layer", "head", "metric")


# What provenance.json records besides the commit: when one of these differs, cells can move by
# rounding alone (an AVX2 and an AVX-512 machine train the same commit to different models).
RUN_CONDITIONS = ("devices", "torch", "numpy", "pandas", "python")


def bytes_at(rev: str, path: Path) -> bytes | None:
    """The file at `path` as committed in `rev`, or None if it did not exist there. Bytes: a
    file that is not text is the table's error (aggregate.parse_csv), not git's."""
    try:
        done = subprocess.run(["git", "show", f"{rev}:{path.as_posix()}"], capture_output=True, check=True)
    except subprocess.CalledProcessError as err:
        stderr = err.stderr.decode(errors="replace")
        if "does not exist" in stderr or "exists on disk, but not in" in stderr:
            return None
        raise UserError(f"git show {rev}:{path}: {stderr.strip().splitlines()[-1]}") from None
    return done.stdout


def changed_conditions(rev: str, provenance: Path) -> list[str]:
    """How the records of the runs behind the two versions of the tables differ, from
    provenance.json: one line per differing entry, none when either side has no record."""
    old_raw = bytes_at(rev, provenance)
    if old_raw is None or not provenance.exists():
        return []
    old, new = _record(old_raw, f"{provenance} at {rev}"), _record(provenance.read_bytes(), str(provenance))
    return [f"{key}: {old.get(key, '(not recorded)')} -> {new.get(key, '(not recorded)')}"
            for key in RUN_CONDITIONS if old.get(key) != new.get(key)]


def _record(raw: bytes, where: str) -> dict:
    try:
        record = json.loads(raw)
    except ValueError as err:  # UnicodeDecodeError too
        raise UserError(f"{where}: not JSON ({err})") from None
    if not isinstance(record, dict):
        raise UserError(f"{where}: expected a JSON object of run conditions, got {type(record).__name__}")
    return record


def _read(raw: bytes, where: str) -> pd.DataFrame:
    """Cells as the text in the file, so moved values print exactly as committed."""
    return parse_csv(raw, where, "a CSV table", dtype=str, keep_default_na=False)


def moved_cells(old: pd.DataFrame, new: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """One row per moved cell: the key columns, the column name, old and new values."""
    keys = [c for c in new.columns if c in KEY_COLUMNS and c in old.columns]
    merged = old.merge(new, on=keys, how="outer", suffixes=("_old", "_new"), indicator=True)
    rows = []
    for _, r in merged.iterrows():
        key = {k: r[k] for k in keys}
        if r["_merge"] != "both":
            rows.append({**key, "column": "(row)", "old": "absent" if r["_merge"] == "right_only" else "present",
                         "new": "present" if r["_merge"] == "right_only" else "absent"})
            continue
        for col in (c for c in new.columns if c not in keys and c in old.columns):
            a, b = r[f"{col}_old"], r[f"{col}_new"]
            if _moved(a, b, tolerance):
                rows.append({**key, "column": col, "old": a, "new": b})
    return pd.DataFrame(rows)


def _tables(tables_dir: Path) -> list[Path]:
    """The CSV tables in `tables_dir`; UserError when there is no such folder or no table in it."""
    if not tables_dir.is_dir():
        raise UserError(f"{tables_dir}: no such folder; expected the tables of a run (<results_dir>/tables)")
    tables = sorted(tables_dir.glob("*.csv"))
    if not tables:
        raise UserError(f"{tables_dir}: no tables (*.csv) in it; run the workflow first")
    return tables


def _moved(a: str, b: str, tolerance: float) -> bool:
    try:
        return abs(float(a) - float(b)) > tolerance
    except (TypeError, ValueError):
        return a != b


def diff_tables(rev: str, tables_dir, tolerance: float, out=print) -> int:
    """Print the moved cells per table; return 1 if any moved, else 0. Nothing to compare (no
    folder, no tables in it, none of them at `rev`) is a UserError: silence would read as
    "nothing moved"."""
    tables_dir = Path(tables_dir)
    tables = _tables(tables_dir)
    committed = {path: bytes_at(rev, path) for path in tables}
    if all(raw is None for raw in committed.values()):
        raise UserError(f"{tables_dir}: none of its {len(tables)} table(s) exists at {rev}; nothing to compare "
                        "(were they ever committed?)")
    provenance = tables_dir.parent / "provenance.json"
    conditions = changed_conditions(rev, provenance)
    if conditions:
        out(f"{provenance}: the runs' records differ since {rev}, so cells can move by rounding alone "
            "(records before 2026-11-22 do not name the CPU's instruction set):")
        for line in conditions:
            out(f"  {line}")
    any_moved = False
    for path, raw in committed.items():
        if raw is None:
            out(f"{path}: new since {rev}")
            any_moved = True
            continue
        moved = moved_cells(_read(raw, f"{path} at {rev}"), _read(path.read_bytes(), str(path)), tolerance)
        if len(moved):
            any_moved = True
            out(f"{path}: {len(moved)} cell(s) moved beyond {tolerance} since {rev}")
            out(moved.to_string(index=False))
        else:
            out(f"{path}: unchanged within {tolerance}")
    return 1 if any_moved else 0
