"""`make diff REV=<commit>`: what moved in a run's tables (<results_dir>/tables) between a commit
and the working tree, most telling first:

1. the scorecard (claims.csv): each claim whose word changed (`claim 1 sparsity: reproduced ->
   partly reproduced`) and each row whose result changed, with its old and new value and
   interval, or "claim words unchanged" / "no row's result moved";
2. when the two runs' provenance.json differ in devices or library versions, how: the same commit
   trains to different rounding on another CPU instruction set or torch build;
3. one line per table: cells moved, the largest move (column, row, old -> new), rows added and
   removed;
4. the moved cells, largest move first (text changes, added and removed rows before numbers), at
   most SHOWN lines in all unless `--all`; each column as wide as what it shows.

Rows are matched on their key columns (KEY_COLUMNS); a value moved when it differs by more than
the tolerance, or is a non-number that changed.

Exit status of `python -m lengthgen diff`: 0 nothing moved, 1 something moved, 2 could not compare
(no such folder, no tables in it, none of them at REV, a table or record that cannot be read, a
bad revision), in one line on stderr. `make diff` fails (make's own status, 2) in both of the last
two cases, as make does for any command that exits nonzero.
"""

from __future__ import annotations

import json
import re
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

SCORECARD = "claims.csv"
SHOWN = 50  # moved cells printed by default, all tables together


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


def tables_at(rev: str, tables_dir: Path) -> list[str]:
    """The names of the CSV tables in `tables_dir` as committed in `rev` (none if it had no such folder)."""
    try:
        done = subprocess.run(["git", "ls-tree", "--name-only", rev, f"{tables_dir.as_posix()}/"],
                              capture_output=True, check=True, text=True)
    except subprocess.CalledProcessError as err:
        raise UserError(f"git ls-tree {rev} {tables_dir}: {err.stderr.strip().splitlines()[-1]}") from None
    return sorted(Path(line).name for line in done.stdout.splitlines() if line.endswith(".csv"))


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


def _keys(old: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    return [c for c in new.columns if c in KEY_COLUMNS and c in old.columns]


def moved_cells(old: pd.DataFrame, new: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """One row per moved cell, in the order of the two tables' rows merged on their keys: the key
    columns, the column name ("(row)" for a row added or removed), old and new values, and
    `move`, the absolute change of a number (infinite for anything else). A table without key
    columns is compared line by line."""
    keys = _keys(old, new)
    columns = [*keys, "column", "old", "new", "move"]
    if not keys:  # no row identity: the table is compared row by row
        old, new = old.assign(**{"(line)": range(len(old))}), new.assign(**{"(line)": range(len(new))})
        keys, columns = ["(line)"], ["(line)", *columns]
    merged = new.merge(old, on=keys, how="outer", suffixes=("_new", "_old"), indicator=True, sort=False)
    parts = []
    both = merged[merged["_merge"] == "both"]
    for col in (c for c in new.columns if c not in keys and c in old.columns):
        a, b = both[f"{col}_old"], both[f"{col}_new"]
        x, y = pd.to_numeric(a, errors="coerce"), pd.to_numeric(b, errors="coerce")
        numbers = x.notna() & y.notna()
        move = (x - y).abs().where(numbers, float("inf"))
        hit = (numbers & (move > tolerance)) | (~numbers & (a != b))
        if hit.any():
            parts.append(pd.DataFrame({**{k: both.loc[hit, k] for k in keys}, "column": col, "old": a[hit],
                                       "new": b[hit], "move": move[hit]}))
    for side, old_word, new_word in (("left_only", "absent", "present"), ("right_only", "present", "absent")):
        rows = merged[merged["_merge"] == side]
        if len(rows):
            parts.append(pd.DataFrame({**{k: rows[k] for k in keys}, "column": "(row)", "old": old_word,
                                       "new": new_word, "move": float("inf")}))
    if not parts:
        return pd.DataFrame(columns=columns)
    moved = pd.concat(parts)
    order = {i: n for n, i in enumerate(merged.index)}  # the merged table's row order, then column order
    moved = moved.assign(_row=moved.index.map(order)).sort_values("_row", kind="stable")
    return moved.drop(columns="_row").reset_index(drop=True)[columns]


def _tables(tables_dir: Path) -> list[Path]:
    """The CSV tables in `tables_dir`; UserError when there is no such folder or no table in it."""
    if not tables_dir.is_dir():
        raise UserError(f"{tables_dir}: no such folder; expected the tables of a run (<results_dir>/tables)")
    tables = sorted(tables_dir.glob("*.csv"))
    if not tables:
        raise UserError(f"{tables_dir}: no tables (*.csv) in it; run the workflow first")
    return tables


# -- the scorecard: claim words and rows -------------------------------------------------------


def _scorecard_rows(df: pd.DataFrame | None, where: str) -> list[dict]:
    if df is None:
        return []
    missing = [c for c in ("claim", "check", "result") if c not in df.columns]
    if missing:
        raise UserError(f"{where}: not a scorecard: no column(s) {', '.join(missing)}")
    return df.to_dict("records")


def claim_words(rows: list[dict]) -> dict[str, str]:
    """Each claim's word as the scorecard's head gives it (lengthgen.analysis.claims.verdict),
    without its counts: `partly reproduced`, or per experiment `partly reproduced: E2 reproduced;
    E3 undecided`."""
    from lengthgen.analysis.claims import verdict

    return {claim: re.sub(r" \([^()]*\)", "", verdict(rows, claim)) for claim in sorted({r["claim"] for r in rows})}


def _value(row: dict | None) -> str:
    if row is None:
        return "absent"
    low, high = row.get("ci_low", ""), row.get("ci_high", "")
    return f"{row.get('value', '') or '-'}" + (f" [{low}, {high}]" if low or high else "")


def scorecard_lines(old: list[dict], new: list[dict]) -> list[str]:
    """The claims whose word changed, then the rows whose result changed (matched on claim and
    check), with old and new value and interval; a line saying so when none did."""
    from lengthgen.analysis.claims import heading

    before, after = claim_words(old), claim_words(new)
    lines = [f"  {heading(c)}: {before.get(c, 'absent')} -> {after.get(c, 'absent')}"
             for c in sorted(before.keys() | after.keys()) if before.get(c) != after.get(c)]
    lines = lines or ["  claim words unchanged"]
    old_rows, new_rows = ({(r["claim"], r["check"]): r for r in rows} for rows in (old, new))
    moved = []
    for key in [*new_rows, *(k for k in old_rows if k not in new_rows)]:
        a, b = old_rows.get(key), new_rows.get(key)
        was, now = (r["result"] if r else "absent" for r in (a, b))
        if was != now:
            moved.append(f"  {key[0]} | {key[1]}: {was} -> {now} (value {_value(a)} -> {_value(b)})")
    return lines + (moved or ["  no row's result moved"])


# -- the tables and their cells ----------------------------------------------------------------


def _row_key(cell: pd.Series, keys: list[str]) -> str:
    return " ".join(f"{k}={cell[k]}" for k in keys if cell[k] != "")


def table_line(name: str, old: pd.DataFrame, new: pd.DataFrame, moved: pd.DataFrame) -> str:
    """One table: cells moved of those compared, the largest move, rows added and removed,
    columns added and removed."""
    keys = [c for c in moved.columns if c not in ("column", "old", "new", "move")]
    added, removed = (int(((moved["column"] == "(row)") & (moved["old"] == w)).sum()) for w in ("absent", "present"))
    cells = moved[moved["column"] != "(row)"]
    columns = [c for c in new.columns if c not in keys and c in old.columns]
    compared = (len(new) - added) * len(columns)
    text = f"{name}: {len(cells)} of {compared} cells moved"
    if len(cells):
        numbers = cells[cells["move"] != float("inf")]
        top = numbers.loc[numbers["move"].idxmax()] if len(numbers) else cells.iloc[0]
        text += f"; largest: {top['column']} at {_row_key(top, keys)}: {top['old']} -> {top['new']}"
    text += f"; rows: {added} added, {removed} removed"
    gone, new_columns = [c for c in old.columns if c not in new.columns], [c for c in new.columns if c not in old]
    if new_columns or gone:
        text += f"; columns added: {', '.join(new_columns) or '-'}, removed: {', '.join(gone) or '-'}"
    return text


def shares(counts: list[int], limit: int | None) -> list[int]:
    """How many of each table's moved cells to print: all with no limit; else `limit` in all,
    split evenly, what a table does not need going to the others."""
    if limit is None:
        return list(counts)
    given, left = [0] * len(counts), limit
    while left > 0 and any(g < c for g, c in zip(given, counts, strict=True)):
        open_ = [i for i, (g, c) in enumerate(zip(given, counts, strict=True)) if g < c]
        each = max(left // len(open_), 1)
        for i in open_:
            take = min(each, counts[i] - given[i], left)
            given[i], left = given[i] + take, left - take
    return given


def cell_lines(moved: pd.DataFrame, n: int) -> list[str]:
    """The `n` largest moves of a table, largest first (text changes, added and removed rows
    first, then numbers): a header and one line per cell, each column as wide as what it shows
    here (a key column empty in every line left out) and the last, `old -> new`, not padded."""
    shown = moved.assign(_order=range(len(moved))).sort_values(["move", "_order"], ascending=[False, True],
                                                               kind="stable").head(n)
    keys = [c for c in moved.columns if c not in ("column", "old", "new", "move") and (shown[c] != "").any()]
    rows = [[*keys, "column", "old -> new"]] + [[*(str(r[k]) for k in keys), str(r["column"]),
                                                  f"{r['old']} -> {r['new']}"] for r in shown.to_dict("records")]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  " + "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
            for row in rows]


def diff_tables(rev: str, tables_dir, tolerance: float, out=print, limit: int | None = SHOWN) -> int:
    """Print what moved (see the module's docstring): the scorecard's words and rows, the runs'
    conditions where they differ, a line per table, then at most `limit` moved cells (None: all).
    Return 1 if anything moved, else 0. Nothing to compare (no folder, no tables in it, none of
    them at `rev`) is a UserError, as is a table that cannot be read: silence would read as
    "nothing moved". Everything is read before anything is printed."""
    tables_dir = Path(tables_dir)
    tables = _tables(tables_dir)
    committed = {path: bytes_at(rev, path) for path in tables}
    if all(raw is None for raw in committed.values()):
        raise UserError(f"{tables_dir}: none of its {len(tables)} table(s) exists at {rev}; nothing to compare "
                        "(were they ever committed?)")
    gone = [name for name in tables_at(rev, tables_dir) if not (tables_dir / name).exists()]
    provenance = tables_dir.parent / "provenance.json"
    conditions = changed_conditions(rev, provenance)

    compared = {}  # path -> (old, new, moved); old None: new since rev
    for path, raw in committed.items():
        new = _read(path.read_bytes(), str(path))
        old = None if raw is None else _read(raw, f"{path} at {rev}")
        compared[path] = (old, new, None if old is None else moved_cells(old, new, tolerance))
    scorecard = tables_dir / SCORECARD
    lines = []
    if scorecard in compared:
        old, new, _ = compared[scorecard]
        old_rows = _scorecard_rows(old, f"{scorecard} at {rev}")
        new_rows = _scorecard_rows(new, str(scorecard))
        lines += [f"{scorecard}: claim words and results since {rev}"
                  + (" (new since then)" if old is None else "") + ":", *scorecard_lines(old_rows, new_rows)]
    else:
        lines.append(f"{tables_dir}: no scorecard ({SCORECARD}), so no claim words to compare")
    if conditions:
        lines += ["", f"{provenance}: the runs' records differ since {rev}, so cells can move by rounding alone "
                      "(records before 2026-11-22 do not name the CPU's instruction set):",
                  *(f"  {line}" for line in conditions)]

    # the scorecard first, then the other tables by name
    order = sorted(compared, key=lambda p: (p.name != SCORECARD, p.name))
    lines += ["", f"{tables_dir} since {rev} (a move: a change beyond {tolerance}):"]
    any_moved = bool(gone)
    for path in order:
        old, new, moved = compared[path]
        if old is None:
            lines.append(f"  {path.name}: new since {rev} ({len(new)} rows)")
            any_moved = True
        elif len(moved) or set(old.columns) != set(new.columns):
            lines.append(f"  {table_line(path.name, old, new, moved)}")
            any_moved = True
        else:
            lines.append(f"  {path.name}: unchanged")
    lines += [f"  {name}: removed since {rev}" for name in gone]

    with_cells = [p for p in order if compared[p][2] is not None and len(compared[p][2])]
    counts = [len(compared[p][2]) for p in with_cells]
    if with_cells:
        given = shares(counts, limit)
        hidden = sum(counts) - sum(given)
        lines += ["", f"moved cells, largest first: {sum(given)} of {sum(counts)}"
                      + (" (--all shows every one)" if hidden else "")]
        for path, n, count in zip(with_cells, given, counts, strict=True):
            if n:
                lines += [f"{path} ({n} of {count}):", *cell_lines(compared[path][2], n)]
    for line in lines:
        out(line)
    return 1 if any_moved else 0
