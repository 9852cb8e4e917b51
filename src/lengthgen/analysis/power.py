"""Seeds by power: how many models the claim-1 rule needs to reach its verdict.

From runs already made, each scheme's fitted models and their claim-1 points (one per k). A
simulated replication draws m models with replacement from those observed (a model trained on
a mixture of k is drawn whole, with all its k; with one model per k, m models per k), so the
seed-to-seed spread is the measured one, bimodal as it is, and applies the registered rule
(`claims.trend_test`: the trend's permutation p and the effect's interval against its floor);
the power at m is the share of replications that PASS.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from lengthgen.analysis import claims
from lengthgen.analysis.aggregate import read_sweep
from lengthgen.support.errors import UserError


def observed_points(results_dirs: list) -> tuple[pd.DataFrame, dict]:
    """The claim-1 points of the runs in `results_dirs` together (their sweeps pooled: runs on
    disjoint seeds), judged as the first run's recorded config.yaml judges them. Returns the
    points and that config's `claims` section."""
    cfg = yaml.safe_load((Path(results_dirs[0]) / "config.yaml").read_text(encoding="utf-8"))
    tasks = [t for t in cfg["tasks"] if t["kind"] == "sparse_parity"]
    if not tasks:
        raise UserError(f"{results_dirs[0]}/config.yaml: no sparse_parity task, so no claim-1 test")
    train_max = max(t["params"]["n_max"] for t in tasks)
    parts = [read_sweep(Path(d) / "tables/length_sweep.csv").assign(run=i) for i, d in enumerate(results_dirs)]
    sweep = pd.concat(parts, ignore_index=True)
    sweep = sweep[sweep["task"].isin([t["name"] for t in tasks])]
    # models of different runs stay different models even where their seeds coincide
    sweep = sweep.assign(task=sweep["task"] + "#" + sweep["run"].astype(str)).drop(columns="run")
    return claims.claim1_points(sweep, train_max, cfg["claims"]["sparsity"]), cfg["claims"]


def simulated(points: pd.DataFrame, m: int, rng: np.random.Generator) -> pd.DataFrame:
    """One replication's points: m models drawn with replacement from those observed."""
    if claims.paired(points):
        models = points[["task", "seed"]].drop_duplicates().to_numpy()
        picked = models[rng.integers(0, len(models), size=m)]
        parts = [points[(points["task"] == t) & (points["seed"] == s)].assign(task="sim", seed=i)
                 for i, (t, s) in enumerate(picked)]
        return pd.concat(parts, ignore_index=True)
    parts = []
    for k, g in points.groupby("k"):
        acc = rng.choice(g["accuracy"].to_numpy(), size=m, replace=True)
        parts.append(pd.DataFrame({"task": f"sim_k{k}", "seed": np.arange(m), "k": k, "accuracy": acc}))
    return pd.concat(parts, ignore_index=True)


def power(points: pd.DataFrame, m: int, cfg: dict, n_sim: int, n_perm: int) -> float:
    """Share of `n_sim` simulated replications with m models (per k, for one model per k) that
    the registered rule PASSes; `cfg` is the config's `claims` section."""
    st = {**cfg["stats"], "n_perm": n_perm, "n_boot": min(cfg["stats"]["n_boot"], 1000)}
    rng = np.random.default_rng(st["seed"])
    ks = sorted(int(k) for k in points["k"].unique())
    passes = 0
    for i in range(n_sim):
        sim = simulated(points, m, rng)
        draws = claims.k_draws(sim, ks, {**st, "seed": st["seed"] + i})
        passes += claims.trend_test(sim, ks, draws, cfg["sparsity"], {**st, "seed": st["seed"] + i})["result"] == "PASS"
    return passes / n_sim


def table(points: pd.DataFrame, ms: list[int], cfg: dict, n_sim: int = 200, n_perm: int = 2000) -> pd.DataFrame:
    rows = [{"scheme": scheme, "models": m, "power": power(g, m, cfg, n_sim, n_perm)}
            for scheme, g in points.groupby("scheme", sort=True) for m in ms]
    return pd.DataFrame(rows)
