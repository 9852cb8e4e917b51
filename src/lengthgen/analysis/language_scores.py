"""E4's per-token table (tables/language_scores.csv): the scored tokens of every pair of language
models, one row each, with the losses the claim-3 rows read. The claims stage judges this file,
not the Parquet it is made from, so a committed scorecard can be recomputed from committed tables.

Columns: seed (the pair's model seed), document (the validation document holding the target, in
stream order), index (the target's place in the validation stream), gap (L_short - L_long),
L_long, L_short, then L_<method>_<k> (greedy, null, attention, random) and the short models'
<model>_window, <model>_true_<k>, <model>_coupled_<k>, rounded to 6 decimals. No torch here:
the claims stage imports it.
"""

from __future__ import annotations

import re

import pandas as pd

from lengthgen.analysis.aggregate import read_table
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import atomic_path, read_intermediate, remove_stale

KEYS = ["seed", "document", "index"]
COLUMNS = [*KEYS, "gap", "L_long", "L_short"]  # what every reader uses
DECIMALS = 6
_LOSS = re.compile(r"L_(greedy|null|attention|random)_\d+|(short|pose)_(window|true_\d+|coupled_\d+)")


def loss_columns(columns) -> list[str]:
    """The per-method and per-short-model loss columns among `columns`, in their order."""
    return [c for c in columns if _LOSS.fullmatch(c)]


def collect(paths, seeds) -> pd.DataFrame:
    """The scored rows of each pair's score table (`paths`, one per seed of `seeds`), checked
    to be of that seed: a table of another pair would be counted twice."""
    parts = []
    for path, seed in zip(paths, seeds, strict=True):
        df = read_intermediate(path, pd.read_parquet, "score table")
        held = sorted(int(x) for x in df["seed"].unique()) if "seed" in df else []
        if held != [int(seed)]:
            raise UserError(f"{path}: scores of model seed(s) {held or 'unknown'}, expected {seed}; delete it and "
                            "rerun the workflow")
        scored = df[df["scored"]]
        parts.append(scored[COLUMNS + loss_columns(scored.columns)])
    table = pd.concat(parts, ignore_index=True)
    return table.sort_values(["seed", "index"], kind="stable").reset_index(drop=True)


def write(table: pd.DataFrame, csv_out) -> None:
    with atomic_path(csv_out) as tmp:
        table.round(DECIMALS).to_csv(tmp, index=False, float_format=f"%.{DECIMALS}f", lineterminator="\n")


def read(path) -> pd.DataFrame:
    """tables/language_scores.csv, as the claim-3 rows read it."""
    return read_table(path, COLUMNS, "the per-token language scores", rows=False)


def run(paths, seeds, csv_out, stale=()) -> None:
    """`stale`: files made from the tables (the scorecard), removed first (fileio.remove_stale)."""
    remove_stale(stale)
    write(collect(paths, seeds), csv_out)
