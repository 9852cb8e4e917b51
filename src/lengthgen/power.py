"""Seeds by power: how many models per k the claim-1 test needs to reach its verdict.

From a sweep already run, each scheme's fitted models give one point each (the claim-1
statistic). A simulated replication draws m points per k from those observed (with
replacement: the seed-to-seed spread as measured, bimodal as it is) and runs the same
one-sided permutation test; the power at m is the share of replications with p <= alpha.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lengthgen import stats
from lengthgen.claims import fitted


def claim1_points(sweep: pd.DataFrame, tasks: list[str], train_max: int, cfg: dict) -> pd.DataFrame:
    """One row per fitted model: scheme, k and its mean accuracy over the long test lengths."""
    sweep = sweep[sweep["task"].isin(tasks)]
    sweep = sweep[fitted(sweep, train_max, cfg["fit_min"])]
    long = sweep[sweep["length"] >= cfg["min_length_ratio"] * train_max]
    return long.groupby(["scheme", "task", "seed", "k"])["accuracy"].mean().reset_index()


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
