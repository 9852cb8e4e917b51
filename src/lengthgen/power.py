"""Seeds by power: how many models per k the claim-1 test needs to reach its verdict.

From a sweep already run, each scheme's fitted models give one point each (the claim-1
statistic). A simulated replication draws m points per k from those observed (with
replacement: the seed-to-seed spread as measured, bimodal as it is) and runs the same
one-sided permutation test; the power at m is the share of replications with p <= alpha.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from lengthgen import stats
from lengthgen.aggregate import read_sweep
from lengthgen.claims import claim1_points
from lengthgen.errors import UserError


def observed_points(results_dirs: list) -> tuple[pd.DataFrame, dict]:
    """The claim-1 points of the runs in `results_dirs` together (their sweeps pooled: runs on
    disjoint seeds), judged as the first run's recorded config.yaml judges them. Returns the
    points and that config's `claims.stats`."""
    cfg = yaml.safe_load((Path(results_dirs[0]) / "config.yaml").read_text(encoding="utf-8"))
    tasks = [t for t in cfg["tasks"] if t["kind"] == "sparse_parity"]
    if not tasks:
        raise UserError(f"{results_dirs[0]}/config.yaml: no sparse_parity task, so no claim-1 test")
    train_max = max(t["params"]["n_max"] for t in tasks)
    sweep = pd.concat([read_sweep(Path(d) / "tables/length_sweep.csv") for d in results_dirs], ignore_index=True)
    sweep = sweep[sweep["task"].isin([t["name"] for t in tasks])]
    return claim1_points(sweep, train_max, cfg["claims"]["sparsity"]), cfg["claims"]["stats"]


def power(points: pd.DataFrame, m: int, st: dict, n_sim: int, n_perm: int) -> float:
    """Share of `n_sim` simulated replications with m models per k whose p <= alpha."""
    rng = np.random.default_rng(st["seed"])
    by_k = {k: g["accuracy"].to_numpy() for k, g in points.groupby("k")}
    ks = np.repeat(sorted(by_k), m)
    hits = 0
    for i in range(n_sim):
        y = np.concatenate([rng.choice(by_k[k], size=m, replace=True) for k in sorted(by_k)])
        rho, p = stats.permutation_spearman(ks, y, "less", n_perm, seed=st["seed"] + i)
        hits += bool(rho < 0 and p <= st["alpha"])
    return hits / n_sim


def table(points: pd.DataFrame, ms: list[int], st: dict, n_sim: int = 400, n_perm: int = 2000) -> pd.DataFrame:
    rows = [{"scheme": scheme, "models_per_k": m, "power": power(g, m, st, n_sim, n_perm)}
            for scheme, g in points.groupby("scheme", sort=True) for m in ms]
    return pd.DataFrame(rows)
