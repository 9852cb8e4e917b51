"""Whether each model trained to its end: the early stop, or the `max_steps` cap.

A model counts as fitted only when it fits its training lengths at the end of its training, and
a run cut by `max_steps` has not ended: whether more steps would have fitted it, or unfitted it,
is unknown, and two models compared must be trained to the end on the same budget
(docs/protocol.md, "A fit is a training that ended"). Each cell's `meta.json` says how its
training stopped; `tables/training.csv` gathers them (task, scheme, seed, steps, stopped, final
batch loss and accuracy), and the claims stage marks every sweep row of a capped model, which
the fit checks then leave out.

A run without the table (made before it existed) is judged by accuracy alone; its scorecard says
nothing of how its models stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from lengthgen.support.errors import UserError
from lengthgen.support.fileio import atomic_path

COLUMNS = ["task", "scheme", "seed", "steps", "stopped", "final_loss", "final_accuracy"]
ENDED = "converged"  # loop.run's word for an early stop; "max_steps" for the cap
TO_END = "trained_to_end"  # the sweep column the claims stage adds


def row(meta_path: Path, expected: tuple[str, str, int]) -> dict:
    """The table's row of one cell, from its meta.json; a UserError when it is another cell's."""
    try:
        meta = json.loads(Path(meta_path).read_text(encoding="utf-8"))
        cell = meta["cell"]
        found = (cell["task"], cell["scheme"], int(cell["seed"]))
        values = {k: meta[k] for k in ("steps", "stopped", "final_loss", "final_accuracy")}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{meta_path}: not a training's meta.json ({type(err).__name__}: {err}); "
                        "delete it and rerun the workflow to retrain the cell") from None
    if found != tuple(expected):
        raise UserError(f"{meta_path}: holds cell {'/'.join(map(str, found))}, expected "
                        f"{'/'.join(map(str, expected))}; delete it and rerun the workflow")
    return dict(zip(("task", "scheme", "seed"), found, strict=True)) | values


def write(meta_paths: list, cells: list[tuple[str, str, int]], csv_out) -> pd.DataFrame:
    """tables/training.csv: one row per cell, in the grid's order."""
    if len(meta_paths) != len(cells):
        raise UserError(f"training table: {len(meta_paths)} meta.json files for {len(cells)} cells")
    table = pd.DataFrame([row(p, c) for p, c in zip(meta_paths, cells, strict=True)], columns=COLUMNS)
    with atomic_path(csv_out) as tmp:
        table.to_csv(tmp, index=False, float_format="%.6g")
    return table


def read(path) -> pd.DataFrame:
    from lengthgen.analysis.aggregate import read_table

    return read_table(path, COLUMNS, "a training table", dtype={"task": str, "scheme": str, "stopped": str})


def mark(sweep: pd.DataFrame, training: pd.DataFrame | None) -> pd.DataFrame:
    """The sweep with column `trained_to_end` (False for a model cut by max_steps); unchanged
    without a training table. A cell missing from the table counts as cut: nothing says it ended."""
    if training is None:
        return sweep
    ended = training.assign(**{TO_END: training["stopped"] == ENDED})[["task", "scheme", "seed", TO_END]]
    out = sweep.merge(ended, on=["task", "scheme", "seed"], how="left", validate="many_to_one")
    out[TO_END] = out[TO_END].astype("boolean").fillna(False).astype(bool)
    return out


def capped(sweep: pd.DataFrame) -> pd.MultiIndex:
    """(task, scheme, seed) of every model the sweep marks as cut by max_steps (none unmarked)."""
    if TO_END not in sweep:
        return pd.MultiIndex.from_tuples([], names=["task", "scheme", "seed"])
    # rows of a run without a training table (runs pooled by `lengthgen power`) are unmarked: judged by accuracy
    ended = sweep[TO_END].astype("boolean").fillna(True).astype(bool)
    cut = sweep.loc[~ended, ["task", "scheme", "seed"]].drop_duplicates()
    return pd.MultiIndex.from_frame(cut)


def read_marked(sweep: pd.DataFrame, tables: Path) -> pd.DataFrame:
    """`mark` with the run's tables/training.csv when the run has one (power, replicate)."""
    path = Path(tables) / "training.csv"
    return mark(sweep, read(path) if path.exists() else None)
