"""Aggregation of per-cell sweeps into diffable tables.

Tables are long format, sorted by their key columns, with floats at fixed precision and
nothing machine-specific in them; provenance goes to its own JSON file.
"""

from __future__ import annotations

import platform
import subprocess

import numpy as np
import pandas as pd

from lengthgen.fileio import atomic_path, canonical_json, write_text

KEYS = ["task", "scheme", "seed", "length", "k"]
PRECISION = 4


def collect(sweep_paths) -> pd.DataFrame:
    df = pd.concat([pd.read_parquet(p) for p in sweep_paths], ignore_index=True)
    return df.sort_values(KEYS, kind="stable").reset_index(drop=True)


def write_csv(df: pd.DataFrame, path) -> None:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False, float_format=f"%.{PRECISION}f", lineterminator="\n")


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample std over seeds per (task, scheme, length, k)."""
    keys = [k for k in KEYS if k != "seed"]
    out = df.groupby(keys, sort=True)["accuracy"].agg(["mean", "std", "count"]).reset_index()
    return out.rename(columns={"count": "seeds"}).fillna({"std": 0.0})


def summary_markdown(summary: pd.DataFrame) -> str:
    """One table per task: rows scheme x k, columns test lengths, cells mean ± std."""
    parts = ["# Length sweep: accuracy (mean ± std over seeds)\n"]
    for task, df in summary.groupby("task", sort=True):
        lengths = sorted(df["length"].unique())
        parts.append(f"\n## {task}\n\n| scheme | k | " + " | ".join(f"n={n}" for n in lengths) + " |")
        parts.append("|---|---|" + "---|" * len(lengths))
        for (scheme, k), g in df.groupby(["scheme", "k"], sort=True):
            by_len = g.set_index("length")
            cells = [f"{by_len.at[n, 'mean']:.3f} ± {by_len.at[n, 'std']:.3f}" if n in by_len.index else ""
                     for n in lengths]
            parts.append(f"| {scheme} | {k} | " + " | ".join(cells) + " |")
    return "\n".join(parts) + "\n"


def aggregate(sweep_paths, csv_out, md_out) -> pd.DataFrame:
    df = collect(sweep_paths)
    write_csv(df, csv_out)
    write_text(md_out, summary_markdown(summarize(df)))
    return df


def provenance(out, meta_paths=()) -> None:
    """Git commit, library versions and devices: kept out of the tables on purpose."""
    import json

    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "src"], capture_output=True, text=True).stdout)
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", None
    devices = sorted({json.loads(open(p).read())["device"] for p in meta_paths})
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
