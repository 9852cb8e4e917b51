"""Aggregation of per-cell sweeps into diffable tables.

Tables are long format, sorted by their key columns, with floats at fixed precision and
nothing machine-specific in them; provenance goes to its own JSON file.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from lengthgen.support import identity, markdown
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import (
    atomic_path,
    canonical_json,
    corrupt_table,
    read_intermediate,
    remove_stale,
    write_text,
)

KEYS = ["task", "scheme", "seed", "length", "k", "depth"]  # those a table has, in this order
AXES = ["k", "depth"]  # second axes of a test set, beside length
PRECISION = 4


def keys_of(df: pd.DataFrame) -> list[str]:
    return [k for k in KEYS if k in df.columns]


SWEEP_COLUMNS = ["task", "scheme", "seed", "length", "accuracy"]  # what every reader of the sweep uses


def parse_csv(raw: bytes, where: str, what: str, **read_csv) -> pd.DataFrame:
    """The CSV table in `raw`, the bytes of the file `where` (a path, or a path at a commit);
    bytes that are no CSV table (not UTF-8 text, a line with more fields than the header, none
    at all) are a UserError naming `where` and, where it is known, the line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:  # decoded here, not by pandas, which says where in its buffer only
        line = raw.count(b"\n", 0, err.start) + 1
        raise UserError(f"{where}: line {line}: not UTF-8 text, expected {what}") from None
    try:
        df = pd.read_csv(io.StringIO(text), **read_csv)
    except pd.errors.EmptyDataError:
        raise UserError(f"{where}: empty file, expected {what}") from None
    except pd.errors.ParserError as err:
        raise UserError(f"{where}: {_parser_problem(err)}, expected {what}") from None
    if "index_col" not in read_csv and not isinstance(df.index, pd.RangeIndex):
        # pandas takes extra fields on the first row for index columns, silently, where it
        # refuses them on any later row
        fields, header = len(df.columns) + df.index.nlevels, len(df.columns)
        raise UserError(f"{where}: line 2: {fields} fields where the header has {header}, expected {what}")
    return df


_FIELDS = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def _parser_problem(err: Exception) -> str:
    text = str(err).strip()
    if m := _FIELDS.search(text):
        return f"line {m[2]}: {m[3]} fields where the header has {m[1]}"
    return f"not a CSV table ({text.rpartition('C error: ')[2].splitlines()[0]})"


def read_table(path, columns: list[str], what: str, rows: bool = True, **read_csv) -> pd.DataFrame:
    """A table of this pipeline; UserError naming the file when it is no CSV table (parse_csv),
    another table, or (with `rows`) empty: a stage must not plot or judge what it was not
    meant to read. In a job of the workflow such a table is removed, with the scorecard pages
    made from the tables (fileio.corrupt_table), so that rerunning rebuilds them."""
    try:
        df = parse_csv(Path(path).read_bytes(), str(path), what, **read_csv)
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise UserError(f"{path}: not {what}: no column(s) {', '.join(missing)}")
        if rows and df.empty:
            raise UserError(f"{path}: {what} without rows")
    except UserError as err:
        raise corrupt_table(path, err) from None
    return df


def read_sweep(path, tasks=None) -> pd.DataFrame:
    """<results_dir>/tables/length_sweep.csv with its axes as integers (empty where a task has
    none); with `tasks`, only their rows, and every one of them must have some: a table without
    them was made for another configuration."""
    df = read_table(path, SWEEP_COLUMNS, "the length-sweep table", dtype={axis: "Int32" for axis in AXES})
    if tasks is None:
        return df
    absent = sorted(set(tasks) - set(df["task"]))
    if absent:
        held = ", ".join(sorted(set(df["task"])))
        raise UserError(f"{path}: no rows of task(s) {', '.join(absent)} (it holds {held}): "
                        "a table of another configuration; rerun the workflow to rebuild it")
    return df[df["task"].isin(tasks)]


def sweep_identity(path) -> str | None:
    """The identity token a sweep records (lengthgen.evaluation.sweep), None if it records none."""
    import pyarrow.parquet as pq

    value = (pq.read_schema(path).metadata or {}).get(identity.SWEEP_KEY)
    return value.decode() if value else None


def _cells_of(df: pd.DataFrame) -> list[str]:
    """`task/scheme/seed<n>` of each cell a sweep has rows of."""
    cells = df[["task", "scheme", "seed"]].drop_duplicates().itertuples(index=False)
    return [identity.cell_key(*cell) for cell in cells]


def check_cells(sweep_paths, frames: list[pd.DataFrame], expected=None) -> None:
    """Each cell's rows come from one sweep, and (with `expected`, one identity token per path)
    each sweep is of the cell it is read for: a sweep of another cell would count that cell twice
    in the means and drop its own."""
    seen = {}
    for path, df in zip(sweep_paths, frames, strict=True):
        for cell in _cells_of(df):
            if cell in seen:
                raise UserError(f"{path}: holds rows of {cell}, and so does {seen[cell]}; each cell's rows must "
                                "come from its own sweep: delete the misplaced sweep (or model.pt) and rerun")
            seen[cell] = path
    for path, df, token in zip(sweep_paths, frames, expected or [None] * len(frames), strict=True):
        check_recorded_cell(path, df, token, "the sweep")


def check_recorded_cell(path, df: pd.DataFrame, token: str | None, what: str) -> None:
    """A cell's table (`what`: the sweep, the attention table) holds rows of the cell it records
    only, and (with `token`) records the cell it is read for."""
    held = sweep_identity(path)
    if held is not None and _cells_of(df) != [identity.key(held)]:
        raise UserError(f"{path}: rows of {', '.join(_cells_of(df))} in {what} of {identity.describe(held)}; "
                        "delete it and rerun")
    identity.check(path, held, token, what, "delete it and rerun the workflow to redo it")


def collect(sweep_paths, expected=None) -> pd.DataFrame:
    """All sweeps in one long table; a task without k (or depth) leaves that column empty.
    `expected`: the identity token of the cell each sweep is for (lengthgen.support.identity)."""
    frames = [read_intermediate(p, pd.read_parquet, "sweep") for p in sweep_paths]
    check_cells(sweep_paths, frames, expected)
    df = pd.concat(frames, ignore_index=True)
    for axis in AXES:
        if axis in df.columns:
            df[axis] = df[axis].astype("Int32")
    keys = keys_of(df)
    df = df[keys + [c for c in df.columns if c not in keys]]  # keys first, whichever sweep came first
    return df.sort_values(keys, kind="stable").reset_index(drop=True)


def write_csv(df: pd.DataFrame, path) -> None:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False, float_format=f"%.{PRECISION}f", lineterminator="\n")


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample std and median over seeds per (task, scheme, length, k or depth), and the
    test draw's own sampling error: each model's binomial standard error sqrt(p(1-p)/examples),
    averaged over seeds, to set beside the spread over seeds."""
    keys = [k for k in keys_of(df) if k != "seed"]
    df = df.assign(test_se=(df["accuracy"] * (1 - df["accuracy"]) / df["examples"]) ** 0.5)
    grouped = df.groupby(keys, sort=True, dropna=False)
    out = grouped["accuracy"].agg(["mean", "std", "median", "count"]).join(grouped["test_se"].mean())
    return out.reset_index().rename(columns={"count": "seeds"}).fillna({"std": 0.0})


def summary_markdown(summary: pd.DataFrame) -> str:
    """One table per task: rows scheme (x k or depth), columns test lengths, cells mean ± std
    over seeds and, in brackets, the binomial standard error of one test draw."""
    parts = ["# Length sweep: exact match (mean ± std over seeds [test-draw standard error])\n"]
    for task, df in summary.groupby("task", sort=True):
        axes = [a for a in AXES if a in df.columns and df[a].notna().any()]
        rows = ["scheme", *axes]
        lengths = sorted(df["length"].unique())
        body = []
        for key, g in df.groupby(rows, sort=True):
            by_len = g.set_index("length")
            body.append([*key, *(_cell(by_len.loc[n]) if n in by_len.index else "" for n in lengths)])
        parts.append(f"\n## {task}\n")
        parts += markdown.table([*rows, *(f"n={n}" for n in lengths)], body)
    return "\n".join(parts) + "\n"


def _cell(row) -> str:
    return f"{row['mean']:.3f} ± {row['std']:.3f} [{row['test_se']:.3f}]"


def aggregate(sweep_paths, csv_out, md_out, expected=None, stale=()) -> pd.DataFrame:
    """`stale`: files made from the tables (the scorecard), removed first (fileio.remove_stale)."""
    remove_stale(stale)
    df = collect(sweep_paths, expected)
    write_csv(df, csv_out)
    write_text(md_out, summary_markdown(summarize(df)))
    return df


def _read_json(path):
    return json.loads(Path(path).read_text())


def provenance(out, meta_paths=()) -> None:
    """Git commit, library versions and devices: kept out of the tables on purpose."""
    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "src"], capture_output=True, text=True).stdout)
    except (OSError, subprocess.CalledProcessError):
        # a copy of the tree without its .git (a compute node's): the commit it was copied from, if given
        commit, dirty = os.environ.get("LENGTHGEN_GIT_COMMIT", "unknown"), None
    devices = sorted({read_intermediate(p, _read_json, "meta.json record")["device"] for p in meta_paths})
    info = {
        "git_commit": commit,
        "src_modified": dirty,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "devices": devices,
    }
    write_text(out, canonical_json(info) + "\n")
