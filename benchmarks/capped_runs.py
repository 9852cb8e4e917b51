"""The trainings a run cut at `max_steps`, and whether any had stopped learning: the work a
plateau rule could have saved.

    python benchmarks/capped_runs.py results-confirm

A stopping rule may end a run early only where the run provably cannot change its outcome: a
training loss that has plateaued far from fitting. For each model that ran to its cap, this
prints the step where its training accuracy (mean of the last 100 steps) first reached 0.5 and
0.9, that accuracy at the cap and its rise over the last quarter of the steps, and its exact
match at 1x (the sweep's shortest length). None of these models is a fit (a fit is a training
that ended, docs/protocol.md); a run still rising at its cap is learning, not on a plateau, and
no rule that stops only plateaus would have stopped it.
"""

import argparse
import json
from pathlib import Path

import pandas as pd

WINDOW = 100  # steps in the running mean of the logged training accuracy


def capped(results: Path) -> pd.DataFrame:
    rows = []
    for meta_path in sorted((results / "runs").glob("*/*/seed*/meta.json")):
        meta = json.loads(meta_path.read_text())
        if meta.get("stopped") != "max_steps":
            continue
        log = pd.read_parquet(meta_path.with_name("train_log.parquet"))
        sweep = pd.read_parquet(meta_path.with_name("sweep.parquet")).sort_values("length")
        acc = log["accuracy"].rolling(WINDOW, min_periods=1).mean()
        quarter = acc.iloc[-len(acc) // 4]
        rows.append({"task": meta["cell"]["task"], "scheme": meta["cell"]["scheme"], "seed": meta["cell"]["seed"],
                     "steps": meta["steps"], "to 0.5": _first(log["step"], acc, 0.5),
                     "to 0.9": _first(log["step"], acc, 0.9), "at cap": round(acc.iloc[-1], 3),
                     "last quarter's rise": round(acc.iloc[-1] - quarter, 3),
                     "exact match at 1x": round(float(sweep["accuracy"].iloc[0]), 3)})
    return pd.DataFrame(rows)


def _first(steps: pd.Series, acc: pd.Series, level: float):
    above = steps[acc >= level]
    return int(above.iloc[0]) if len(above) else "never"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a run's results directory (its runs/ kept)")
    args = parser.parse_args()
    table = capped(args.results)
    print(table.to_markdown(index=False) if len(table) else "no training ran to its max_steps")
