"""The rows a finished run's tables must hold, for a run without a record of its outputs.

A run's record (lengthgen.support.record) catches any change to a table's bytes. A run from
before records, a copied tables/ folder or a table the record does not list has none, and a CSV
cut at a line break still parses: the tools that read a finished run would then count the rows
that are left. So they also check what the run's own resolved config (`<results>/config.yaml`,
written beside its tables) says must be there:

- the scorecard (`claims.csv`) has rows for each of the paper's three claims (a claim the grid
  does not run has its N/A row) and for each experiment the config runs;
- the length sweep (`length_sweep.csv`) has every cell of the grid at every test length, each
  cell of a task with as many rows as the others (the k or depth rows of a length).

A folder without the run's config (a copied tables/ folder, tables made by hand) is not checked.
A coarse guard, by design: it names a table that lost rows, not one whose numbers were edited.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from lengthgen.support.errors import UserError

CLAIMS = ("1 sparsity", "2 coupling", "3 language")  # every scorecard has rows for the three
TASK_EXPERIMENT = {"sparse_parity": "E1", "scratchpad_parity": "E2", "variable_assignment": "E3"}


def run_config(results: Path) -> dict | None:
    """The run's resolved config, or None when the folder has none (a copied tables/ folder)."""
    path = results / "config.yaml"
    if not path.is_file():
        return None
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return None  # not this check's to judge: the run's config is not one of its tables
    return cfg if isinstance(cfg, dict) else None


def claims_missing(table: pd.DataFrame, cfg: dict | None) -> list[str]:
    """What the scorecard lacks: claims, then experiments the config runs (nothing without a config)."""
    if cfg is None:
        return []
    missing = [f"claim {c!r}" for c in CLAIMS if c not in set(table.get("claim", ()))]
    runs = {TASK_EXPERIMENT[t.get("kind")] for t in cfg.get("tasks") or [] if t.get("kind") in TASK_EXPERIMENT}
    if cfg.get("language"):
        runs.add("E4")
    cells = table.get("experiment", pd.Series(dtype=str)).dropna()
    listed = {e.strip() for cell in cells for e in str(cell).split(",")}  # "E2, E3": one N/A row for both
    return missing + [f"experiment {e}" for e in sorted(runs - listed)]


def sweep_missing(table: pd.DataFrame, cfg: dict | None) -> list[str]:
    """What the length sweep lacks: cells, lengths of a cell, rows of a cell."""
    if cfg is None or not {"task", "scheme", "seed", "length"} <= set(table.columns):
        return []
    rows = table.groupby(["task", "scheme", "seed"]).size()
    lengths = table.groupby(["task", "scheme", "seed"])["length"].agg(set)
    out = []
    for task in cfg.get("tasks") or []:
        want = set(task.get("eval", {}).get("lengths") or [])
        full = max((rows.get((task["name"], s, seed), 0) for s in task["schemes"] for seed in task["seeds"]), default=0)
        for scheme in task["schemes"]:
            for seed in task["seeds"]:
                key = (task["name"], scheme, seed)
                if key not in rows:
                    out.append(f"cell {task['name']}/{scheme}/seed{seed}")
                elif not want <= lengths[key]:
                    out.append(f"lengths {sorted(want - lengths[key])} of {task['name']}/{scheme}/seed{seed}")
                elif rows[key] < full:
                    out.append(f"{full - rows[key]} row(s) of {task['name']}/{scheme}/seed{seed}")
    return out


CHECKS = {"claims.csv": claims_missing, "length_sweep.csv": sweep_missing}


def check(table: str | Path) -> None:
    """A UserError naming `table` (a run's tables/claims.csv or tables/length_sweep.csv) and the
    first rows it lacks; other files pass."""
    table = Path(table)
    if table.name not in CHECKS or table.parent.name != "tables" or not table.is_file():
        return
    try:
        frame = pd.read_csv(table, keep_default_na=False, dtype={"claim": str, "experiment": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError):
        frame = pd.DataFrame()
    missing = CHECKS[table.name](frame, run_config(table.parent.parent))
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise UserError(f"{table}: lacks rows the run's config asks for ({'; '.join(missing[:3])}{more}): "
                        "cut or edited since the run wrote it; rerun the workflow to rebuild it "
                        "(or restore it: git checkout -- <file>)")
