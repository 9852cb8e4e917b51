"""Analyses beyond the paper, built on claim 1's registered rule: does the sparsity effect
change with model size, and does a second sparse task (needle-in-a-haystack retrieval) show it
too. Their rows are labelled "analysis ...": they never count toward the paper's claims.

Per model size (one E1 task per size), the claim-1 rule (`claims.trend_test`) on that size's
fitted models; per scheme, the interaction: the effect acc(k min) - acc(k max) at the largest
size minus the effect at the smallest, with a bootstrap interval from the two sizes' model
resamples (independent models, so independent draws).
"""

from __future__ import annotations

import math

import pandas as pd

from lengthgen.analysis import claims, stats

SCALE, NEEDLE = "analysis scale", "analysis needle"


def size_order(sizes: dict[str, str]) -> list[str]:
    """Size labels ("layers x width") from smallest to largest: by width, then depth."""
    return sorted(set(sizes.values()), key=lambda s: tuple(int(x) for x in s.split("x"))[::-1])


def scale_checks(sweep: pd.DataFrame, sizes: dict[str, str], train_max: int, cfg: dict, st: dict) -> list[dict]:
    """`sizes`: {E1 task: "LxD"}. Per scheme and size the claim-1 rule's row, then the interaction."""
    if len(set(sizes.values())) < 2:
        return []
    sweep = sweep[sweep["task"].isin(sizes)]
    sweep = sweep.assign(fits=claims.fitted(sweep, train_max, cfg["fit_min"]))
    points = claims.claim1_points(sweep, train_max, cfg)
    order = size_order(sizes)
    rows = []
    for scheme, g in sweep.groupby("scheme", sort=True):
        effects = {}
        for i, size in enumerate(order):
            tasks = [t for t, s in sizes.items() if s == size]
            mine = points[(points["scheme"] == scheme) & points["task"].isin(tasks)]
            ks = sorted(int(k) for k in g.loc[g["task"].isin(tasks), "k"].dropna().unique())
            # each size's models are resampled apart: its own seed keeps the draws independent
            draws = claims.k_draws(mine, ks, {**st, "seed": st["seed"] + 1000 * i})
            row = claims.trend_row(scheme, g[g["task"].isin(tasks)], mine, ks, draws, cfg, st)
            rows.append({**row, "claim": SCALE, "check": f"{size} " + row["check"]})
            enough = mine.groupby("k").size().reindex(ks, fill_value=0).min() >= cfg["min_models_per_k"]
            if draws is not None and len(ks) >= 2 and enough:  # the per-size rule's own minimum
                means = mine.groupby("k")["accuracy"].mean()
                models = len(mine[["task", "seed"]].drop_duplicates())
                effects[size] = (float(means[ks[0]] - means[ks[-1]]), draws[ks[0]] - draws[ks[-1]], models)
        rows.append(_interaction_row(scheme, order, effects, st))
    return claims.tag(rows, "E1 scale")


def _interaction_row(scheme: str, order: list[str], effects: dict, st: dict) -> dict:
    """effect(largest) - effect(smallest): where the sparsity effect grows, shrinks or stays flat."""
    small, large = order[0], order[-1]
    check = f"{scheme}: effect at {large} - effect at {small} (does the sparsity effect change with size?)"
    if small not in effects or large not in effects:
        return claims.make_row(SCALE, check, math.nan, "-", claims.DESCRIPTIVE,
                               f"too few fitted models at {small if small not in effects else large}")
    ci = stats.percentile_ci(effects[large][1].to_numpy() - effects[small][1].to_numpy(), st["level"])
    reading = "grows with size" if ci[0] > 0 else "shrinks with size" if ci[1] < 0 else "no change shown"
    per_size = ", ".join(f"{s}: {effects[s][0]:.3f}" for s in order if s in effects)
    return claims.make_row(SCALE, check, effects[large][0] - effects[small][0], "CI excludes 0", claims.DESCRIPTIVE,
                           f"{reading}; effect per size: {per_size}", ci, n=effects[large][2] + effects[small][2])


def needle_checks(sweep: pd.DataFrame, needle: dict[str, int], cfg: dict, st: dict) -> list[dict]:
    """`needle`: {needle task: its longest training haystack}. Claim 1's rule, per task, on a
    sparse task unlike parity: the answer depends on k needles whatever the haystack's length."""
    rows = []
    for task, train_max in sorted(needle.items()):
        for r in claims.sparsity_checks(sweep, [task], train_max, cfg, st):
            rows.append({**r, "claim": NEEDLE, "check": f"{task}: {r['check']}"})
    return claims.tag(rows, "needle")
