"""Claim 1 (E1, sparse parity): accuracy beyond the training lengths falls with the number k of
tokens the answer depends on. `fitted` (whether a model fits its training lengths) is also
the attention rows'."""

from __future__ import annotations

import itertools
import math

import pandas as pd

from lengthgen.analysis import budget, stats
from lengthgen.analysis.claims.rows import DESCRIPTIVE, NOT_MEASURED, make_row, model_names, tag
from lengthgen.analysis.stats import FAIL, INCONCLUSIVE, PASS


def _model_accuracy_at(sweep: pd.DataFrame, length: int) -> pd.Series:
    """Accuracy of each model (task, scheme, seed) at `length`: mean over depth within each k,
    then its worst k. A model trained on a mixture of k fits only when it fits every k."""
    keys = ["task", "scheme", "seed", *(["k"] if "k" in sweep else [])]  # a grid without E1 has no k column
    per_k = sweep[sweep["length"] == length].groupby(keys, dropna=False)["accuracy"].mean()
    return per_k.groupby(level=["task", "scheme", "seed"]).min()


def fitted(sweep: pd.DataFrame, train_max: int, fit_min: float):
    """Per row of the sweep: whether its model fit its training lengths (True when untested) at
    the end of its training (a model the sweep marks as cut by max_steps does not: budget.py)."""
    low = _model_accuracy_at(sweep, train_max).loc[lambda acc: acc < fit_min].index
    models = pd.MultiIndex.from_frame(sweep[["task", "scheme", "seed"]])
    return ~(models.isin(low) | models.isin(budget.capped(sweep)))


def claim1_points(sweep: pd.DataFrame, train_max: int, cfg: dict) -> pd.DataFrame:
    """The test's points: one per fitted model and k, its mean accuracy over the test lengths of
    at least `min_length_ratio` x training. Columns scheme, task, seed, k, accuracy."""
    long = sweep["length"] >= cfg["min_length_ratio"] * train_max
    fits = fitted(sweep, train_max, cfg["fit_min"])
    points = sweep[long & fits].groupby(["scheme", "task", "seed", "k"])["accuracy"].mean().reset_index()
    # Rounded far below any accuracy's resolution (1 / examples): two models with the same
    # accuracies stay tied for Spearman's ranks whatever order their means were summed in.
    return points.assign(accuracy=points["accuracy"].round(12))


def sparsity_checks(sweep: pd.DataFrame, sparse_tasks: list[str], train_max: int, cfg: dict, st: dict) -> list[dict]:
    """Claim 1, one verdict per scheme over every k of the grid (`trend_row`), then, as
    descriptive rows, the adjacent contrasts k against k + 1 with model-level intervals and, at
    every length beyond training, the per-k means and acc(k_min) - acc(k_max) with its interval."""
    sweep = sweep[sweep["task"].isin(sparse_tasks)]
    sweep = sweep.assign(fits=fitted(sweep, train_max, cfg["fit_min"]))
    rows = [_fit_row(sweep, train_max, cfg["fit_min"])]
    long = sorted(n for n in sweep["length"].unique() if n >= cfg["min_length_ratio"] * train_max)
    if not long:
        longest = int(sweep["length"].max()) if len(sweep) else 0
        return tag(rows + [make_row("1 sparsity", f"no test length >= {cfg['min_length_ratio']:g}x the training length "
                                f"{train_max}", math.nan, "-", NOT_MEASURED, f"longest test length {longest}")], "E1")
    points = claim1_points(sweep, train_max, cfg)
    beyond = sorted(n for n in sweep["length"].unique() if n > train_max)
    for scheme, g in sweep.groupby("scheme", sort=True):
        mine = points[points["scheme"] == scheme]
        ks = sorted(int(k) for k in g["k"].dropna().unique())
        draws = k_draws(mine, ks, st)
        rows.append(trend_row(scheme, g, mine, ks, draws, cfg, st))
        rows += _adjacent_rows(scheme, mine, ks, draws, cfg, st)
        rows += _length_rows(scheme, g[g["fits"]], beyond, train_max, ks, st)
    return tag(rows, "E1")


def _fit_row(sweep: pd.DataFrame, train_max: int, fit_min: float) -> dict:
    """How many models fit their training lengths (every k at the longest), per scheme and k."""
    at = sweep[sweep["length"] == train_max]
    if at.empty:
        return make_row("1 sparsity", f"models that fit at n={train_max} (1x)", math.nan, "-", NOT_MEASURED,
                    f"no test length equals the longest training length {train_max}")
    acc = _model_accuracy_at(sweep, train_max)
    cut = acc.index.isin(budget.capped(sweep))  # cut by max_steps: unfit whatever its accuracy
    at = at.assign(cut=pd.MultiIndex.from_frame(at[["task", "scheme", "seed"]]).isin(budget.capped(sweep)))
    per_k = at.groupby(["scheme", "k", "task", "seed"]).agg(accuracy=("accuracy", "mean"), cut=("cut", "any"))
    fits = per_k["accuracy"].ge(fit_min) & ~per_k["cut"]
    counts = fits.groupby(level=["scheme", "k"]).agg(["sum", "size"])
    rates = "; ".join(f"{scheme} " + ", ".join(f"k={int(k)} {r['sum']}/{r['size']}" for (_, k), r in c.iterrows())
                      for scheme, c in counts.groupby(level="scheme"))
    low = acc[(acc < fit_min) & ~cut]
    below = ", ".join(f"{t}/{s}/seed{seed} {a:.3f}" for (t, s, seed), a in low.items())
    capped = ", ".join(f"{t}/{s}/seed{seed}" for t, s, seed in acc.index[cut])
    detail = f"fitted per k: {rates}" + (f"; below: {below}" if below else "") + (
        f"; cut by max_steps: {capped}" if capped else "")
    return make_row("1 sparsity", f"models that fit at n={train_max} (1x, every k): fraction",
                    ((acc >= fit_min) & ~cut).mean(), f">= {fit_min} each", DESCRIPTIVE, detail, n=len(acc))


def k_draws(points: pd.DataFrame, ks: list[int], st: dict) -> pd.DataFrame | None:
    """(n_boot, k) resampled mean accuracy per k, over models: models trained on a mixture of k
    are resampled whole (their k stay paired); one model per k, each k's models apart."""
    if points.empty or not set(ks) <= set(points["k"]):
        return None
    if paired(points):
        table = points.pivot_table(index=["task", "seed"], columns="k", values="accuracy").dropna()
        return stats.paired_mean_draws(table[ks], st["n_boot"], st["seed"])
    groups = {k: points.loc[points["k"] == k, "accuracy"] for k in ks}
    return pd.DataFrame(stats.group_mean_ci(groups, st["n_boot"], st["seed"]))


def paired(points: pd.DataFrame) -> bool:
    """Whether each model carries several k (trained on a mixture), so its points pair by model."""
    return bool((points.groupby(["task", "seed"])["k"].nunique() > 1).all())


def _blocks(points: pd.DataFrame) -> pd.Series:
    """The permutation test's blocks: a model trained on a mixture of k is a block of its own (only
    its k are exchangeable); models of one k each share one block (they are exchangeable)."""
    model = points["task"] + "/" + points["seed"].astype(str)
    several = points.groupby(["task", "seed"])["k"].transform("nunique") > 1
    return model.where(several, "one k per model")


def trend_row(scheme: str, g: pd.DataFrame, points: pd.DataFrame, ks: list[int], draws, cfg: dict,
               st: dict) -> dict:
    """The scheme's verdict over the grid's k (registered in docs/protocol.md): PASS when
    Spearman(k, point) is negative with one-sided permutation p <= alpha AND the effect
    acc(k_min) - acc(k_max) has its interval's lower end at or above `effect_floor`; FAIL when
    the evidence is against the claim (the interval lies below the floor, or accuracy rises with
    k with p <= alpha); INCONCLUSIVE otherwise, and when a k has fewer than `min_models_per_k`
    fitted models."""
    lo_ratio, floor = cfg["min_length_ratio"], cfg["effect_floor"]
    span = f"k={ks[0]}..{ks[-1]}" if ks else "k"
    check = (f"{scheme}: accuracy at n >= {lo_ratio:g}x falls with k ({span}): acc(k={ks[0] if ks else '?'}) - "
             f"acc(k={ks[-1] if ks else '?'}), one point per fitted model and k")
    threshold = f"Spearman p <= {st['alpha']:g} (one-sided) and CI low >= {floor:g}"
    counts = points.groupby("k").size().reindex(ks, fill_value=0)
    unfit = model_names(g[~g["fits"]])
    left_out = f"; left out, unfit: {unfit}" if unfit else ""
    if len(ks) < 2 or (counts < cfg["min_models_per_k"]).any() or draws is None:
        return make_row("1 sparsity", check, math.nan, threshold, INCONCLUSIVE,
                    f"fitted models per k: {_counts(counts)}; needs {cfg['min_models_per_k']} at every k of "
                    f"two or more" + left_out, n=len(points))
    t = trend_test(points, ks, draws, cfg, st)
    design = "within-model permutation (mixture)" if t["paired"] else "permutation over models"
    detail = (f"Spearman {t['rho']:.3f} ({design}); " + ", ".join(f"k={k}: {t['means'][k]:.3f}" for k in ks)
              + f"; models per k: {_counts(counts)}{left_out}")
    return make_row("1 sparsity", check, t["effect"], threshold, t["result"], detail, t["ci"], t["p"], n=len(points))


def trend_test(points: pd.DataFrame, ks: list[int], draws: pd.DataFrame, cfg: dict, st: dict) -> dict:
    """The registered claim-1 rule on one scheme's points (see `trend_row`); the scorecard and
    the sparsity_test figure both call it, so they cannot disagree."""
    blocks = _blocks(points)
    rho, p_less = stats.block_permutation_spearman(points["k"], points["accuracy"], blocks, "less", st["n_perm"],
                                                   st["seed"])
    _, p_more = stats.block_permutation_spearman(points["k"], points["accuracy"], blocks, "greater", st["n_perm"],
                                                 st["seed"])
    means = points.groupby("k")["accuracy"].mean()
    ci = stats.percentile_ci(draws[ks[0]] - draws[ks[-1]], st["level"])
    floor = cfg["effect_floor"]
    if p_less <= st["alpha"] and ci[0] >= floor:
        result = PASS
    elif ci[1] < floor or p_more <= st["alpha"]:
        result = FAIL
    else:
        result = INCONCLUSIVE
    return {"rho": rho, "p": p_less, "effect": float(means[ks[0]] - means[ks[-1]]), "ci": ci, "means": means,
            "result": result, "paired": paired(points)}


def _adjacent_rows(scheme: str, points: pd.DataFrame, ks: list[int], draws, cfg: dict, st: dict) -> list[dict]:
    """acc(k) - acc(k + 1) beyond training with model-level intervals: where the order holds."""
    if draws is None:
        return []
    means = points.groupby("k")["accuracy"].mean()
    rows = []
    for a, b in itertools.pairwise(ks):
        ci = stats.percentile_ci(draws[a] - draws[b], st["level"])
        rows.append(make_row("1 sparsity", f"{scheme}: acc(k={a}) - acc(k={b}) at n >= {cfg['min_length_ratio']:g}x",
                         means[a] - means[b], "-", DESCRIPTIVE, f"k={a}: {means[a]:.3f}, k={b}: {means[b]:.3f}", ci,
                         n=int((points["k"] == a).sum() + (points["k"] == b).sum())))
    return rows


def _length_rows(scheme: str, fit: pd.DataFrame, beyond: list[int], train_max: int, ks: list[int],
                 st: dict) -> list[dict]:
    """At every test length beyond training, whether the rule pools it or not: acc(k_min) -
    acc(k_max) over the fitted models, with the same model-level interval as the verdict's, so
    a reader sees where along the length axis the design can tell the k apart."""
    rows = []
    for n in beyond:
        at = fit[fit["length"] == n].groupby(["task", "seed", "k"])["accuracy"].mean().reset_index()
        by_k = at.groupby("k")["accuracy"].mean().sort_index()
        detail = ", ".join(f"k={int(k)}: {v:.3f}" for k, v in by_k.items())
        drop = by_k.iloc[0] - by_k.iloc[-1] if len(by_k) else math.nan
        draws = k_draws(at, ks, st) if len(ks) > 1 else None
        ci = stats.percentile_ci(draws[ks[0]] - draws[ks[-1]], st["level"]) if draws is not None else (math.nan,) * 2
        models = len(at[["task", "seed"]].drop_duplicates())
        rows.append(make_row("1 sparsity", f"{scheme} at n={n} ({n / train_max:g}x): mean accuracy, smallest k - "
                             "largest k", drop, "-", DESCRIPTIVE, detail, ci, n=models))
    return rows


def _counts(counts: pd.Series) -> str:
    return ", ".join(f"k={int(k)}: {c}" for k, c in counts.items()) or "none"
