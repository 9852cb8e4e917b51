"""The attention analysis's table, from the per-cell attention.parquet files, and the per-model
numbers that the scorecard and the figure (reporting/attention.py) read from it.

The table is long format (one row per cell, test group, layer, head and metric; layer and
head empty for the attribution and the chance rows), sorted, at the sweep table's precision.
"""

from __future__ import annotations

import pandas as pd

from lengthgen.analysis.aggregate import AXES, PRECISION, check_recorded_cell, keys_of, read_table
from lengthgen.support.fileio import atomic_path, read_intermediate, remove_stale

COLUMNS = ["task", "scheme", "seed", "length", "layer", "head", "metric", "value"]  # what every reader uses
LANGUAGE = "language"  # E4's rows: the long model's attention at the scored tokens
EXPERIMENTS = {"sparse_parity": "E1 sparse parity", "scratchpad_parity": "E2 parity with scratchpad",
               "variable_assignment": "E3 variable assignment"}


def collect(paths, expected=None, language=None) -> pd.DataFrame:
    """The cells' tables (each checked to be of its cell, as the sweeps are: `expected`, one
    identity token per path) and E4's (`language`, one per pair of language models, each
    checked by its own job) in one long table."""
    frames = [read_intermediate(p, pd.read_parquet, "attention table") for p in paths]
    for path, df, token in zip(paths, frames, expected or [None] * len(frames), strict=True):
        check_recorded_cell(path, df, token, "the attention table")  # recorded as a sweep records it
    frames += [read_intermediate(p, pd.read_parquet, "attention table") for p in language or []]
    df = pd.concat(frames, ignore_index=True)
    for axis in [*AXES, "layer", "head"]:
        if axis in df.columns:
            df[axis] = df[axis].astype("Int32")
    keys = [*keys_of(df), "layer", "head", "metric"]
    df = df[keys + [c for c in df.columns if c not in keys]]
    return df.sort_values(keys, kind="stable", na_position="last").reset_index(drop=True)


def aggregate(paths, csv_out, expected=None, language=None, stale=()) -> pd.DataFrame:
    """`stale`: files made from the table (the scorecard), removed first (fileio.remove_stale)."""
    remove_stale(stale)
    df = collect(paths, expected, language)
    with atomic_path(csv_out) as tmp:
        df.to_csv(tmp, index=False, float_format=f"%.{PRECISION}f", lineterminator="\n")
    return df


def read(path) -> pd.DataFrame:
    """tables/attention.csv with its integer axes."""
    return read_table(path, COLUMNS, "the attention table", dtype={a: "Int32" for a in [*AXES, "layer", "head"]})


def per_model(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, scheme, seed, length), means over the test groups (k or depth):
    `attribution` (attribution on the dependency set), `attention` (attention mass on it, the
    best head of the last layer: whether any head of the layer that feeds the answer finds it)
    and `chance` (a uniform row's mass)."""
    cell = ["task", "scheme", "seed", "length"]
    groups = [c for c in df.columns if c in AXES]

    def mean_over_groups(rows: pd.DataFrame, name: str) -> pd.Series:
        return rows.groupby(cell + groups, dropna=False)["value"].mean().groupby(cell).mean().rename(name)

    attribution = mean_over_groups(df[df["metric"] == "attribution_mass"], "attribution")
    chance = mean_over_groups(df[df["metric"] == "chance"], "chance")
    mass = df[df["metric"] == "mass"]
    last = mass["layer"] == mass.groupby(["task", "scheme", "seed"])["layer"].transform("max")
    best = mass[last].groupby(cell + groups + ["layer"], dropna=False)["value"].max().reset_index()
    attention = mean_over_groups(best, "attention")
    return pd.concat([attribution, attention, chance], axis=1).reset_index()
