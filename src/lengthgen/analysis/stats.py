"""The statistics the claims are decided with: rank correlation with a permutation p,
bootstrap intervals and a three-way verdict on an interval.

scipy.stats does what it can: ranks, the correlation, the plain permutation test. Two designs
have no scipy counterpart and are written here: permutations *within* blocks (the k of one
mixture-trained model are not exchangeable with another model's) and the hierarchical bootstrap
(models, then documents, then tokens).

Every random draw comes from numpy's PCG64 seeded by the caller, so a verdict is a function of
the tables alone: the same on any CPU and any run. The rules themselves (which statistic, which
alpha, how many resamples) are set in the config schema; docs/protocol-history.md records when each was
registered and what it replaced.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import scipy.stats

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"


def spearman(x, y) -> float:
    """Spearman rank correlation (average ranks for ties); nan when either side is constant."""
    return _rank_pearson(_ranks(x), _ranks(y))


def _ranks(v) -> np.ndarray:
    return scipy.stats.rankdata(np.asarray(v, dtype=float))


def _rank_pearson(rx: np.ndarray, ry: np.ndarray) -> float:
    return float(scipy.stats.pearsonr(rx, ry).statistic) if rx.std() > 0 and ry.std() > 0 else float("nan")


def _rank_correlation(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    """Pearson correlation of rank vectors along `axis`, for scipy's vectorized resampling."""
    a, b = a - a.mean(axis=axis, keepdims=True), b - b.mean(axis=axis, keepdims=True)
    return (a * b).sum(axis=axis) / np.sqrt((a * a).sum(axis=axis) * (b * b).sum(axis=axis))


def permutation_spearman(x, y, alternative: str = "less", n_perm: int = 10000, seed: int = 0) -> tuple[float, float]:
    """Spearman(x, y) and its one-sided permutation p (scipy.stats.permutation_test, y's pairing
    with x shuffled): the chance, under exchangeable y, of a correlation at least as extreme
    (`less`: as negative). Exact over every ordering when there are at most `n_perm` of them;
    beyond, (1 + hits) / (1 + n_perm) over `n_perm` seeded shuffles, which never reports p = 0."""
    rx, ry = _ranks(x), _ranks(y)
    rho = _rank_pearson(rx, ry)
    if math.isnan(rho):
        return rho, float("nan")
    # one sample, so only y's order is permuted: n! orderings, as in scipy's own correlation example
    test = scipy.stats.permutation_test((ry,), lambda b, axis=-1: _rank_correlation(rx, b, axis),
                                        permutation_type="pairings", vectorized=True, n_resamples=n_perm,
                                        alternative=alternative, rng=np.random.default_rng(seed))
    return rho, float(test.pvalue)


def block_permutation_spearman(x, y, blocks, alternative: str = "less", n_perm: int = 10000,
                               seed: int = 0) -> tuple[float, float]:
    """Spearman(x, y) over all points, with a one-sided p from `n_perm` seeded permutations of y
    *within* each block (e.g. the k of one model trained on a mixture of k): points of one model
    are not independent, so only their order within the model is exchangeable under the null.
    (1 + hits) / (1 + n_perm), never 0; nan when either side is constant."""
    rx, ry = _ranks(x), _ranks(y)  # permuting y within blocks permutes its ranks
    rho = _rank_pearson(rx, ry)
    if math.isnan(rho):
        return rho, float("nan")
    rng = np.random.default_rng(seed)
    perms = np.tile(ry, (n_perm, 1))
    for members in pd.Series(np.arange(len(ry))).groupby(np.asarray(blocks), sort=True).groups.values():
        idx = np.asarray(members)
        perms[:, idx] = rng.permuted(perms[:, idx], axis=1)
    sign = -1.0 if alternative == "less" else 1.0
    hits = int(np.sum(sign * _correlations(rx, perms) >= sign * rho - 1e-12))  # ties count as extreme
    return rho, (1 + hits) / (1 + n_perm)


def _correlations(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Pearson correlation of x with each row of ys (rows are orderings of one vector)."""
    xc = x - x.mean()
    yc = ys - ys.mean(axis=1, keepdims=True)
    return (yc @ xc) / np.sqrt((xc * xc).sum() * (yc * yc).sum(axis=1))


def percentile_ci(draws: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    lo, hi = np.quantile(np.asarray(draws, dtype=float), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def hierarchical_draws(values, units: list, statistic, n_boot: int, seed: int, resample_values: bool = True):
    """(n_boot,) `statistic` of pooled resamples of `values` (1-D), drawn level by level as the
    data were: the outer units (units[0], e.g. model seeds) with replacement, then within each
    drawn unit its units of the next level (units[1], e.g. documents) with replacement, and so
    on; then, with `resample_values`, the values of each drawn innermost unit with replacement
    (else all of them). A unit drawn twice brings two independent draws of what it holds. Each
    level's spread thus enters the interval, which a bootstrap of the values alone leaves out
    when values of one unit are alike. `units`: one label array per level, as long as values."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return np.full(n_boot, np.nan)
    frame = pd.DataFrame({level: np.asarray(labels) for level, labels in enumerate(units)})
    # node ids per level, numbered in sorted order of their labels: children of a node are contiguous
    ids = [frame.groupby(list(range(level + 1)), sort=True).ngroup().to_numpy() for level in range(len(units))]
    children = []  # per level but the last: (first child, number of children) of each node
    for parent, child in itertools.pairwise(ids):
        span = pd.Series(child).groupby(parent).agg(["min", "max"])
        children.append((span["min"].to_numpy(), (span["max"] - span["min"] + 1).to_numpy()))
    order = np.argsort(ids[-1], kind="stable")  # the values of each innermost unit, contiguous
    sizes = np.bincount(ids[-1])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rng = np.random.default_rng(seed)

    def pick(first: np.ndarray, count: np.ndarray, draw: bool) -> np.ndarray:
        """For each (first, count) range, `count` members: drawn with replacement, or all."""
        base = np.repeat(first, count)
        if draw:
            return base + (rng.random(len(base)) * np.repeat(count, count)).astype(np.int64)
        return base + np.arange(len(base)) - np.repeat(np.cumsum(count) - count, count)

    n_top = int(ids[0].max()) + 1
    out = np.empty(n_boot)
    for b in range(n_boot):
        nodes = rng.integers(0, n_top, n_top)
        for first, count in children:
            nodes = pick(first[nodes], count[nodes], True)
        out[b] = statistic(values[order[pick(starts[nodes], sizes[nodes], resample_values)]])
    return out


def group_mean_ci(groups: dict, n_boot: int, seed: int, level: float = 0.95) -> dict:
    """Per group (e.g. k): its values resampled with replacement, `n_boot` times; returns the
    (n_boot,) means of each group, from one generator, for intervals of means and differences."""
    rng = np.random.default_rng(seed)
    out = {}
    for key in sorted(groups):
        vals = np.asarray(groups[key], dtype=float)
        out[key] = vals[rng.integers(0, len(vals), size=(n_boot, len(vals)))].mean(axis=1)
    return out


def paired_mean_draws(table: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """(n_boot, columns) resampled column means of `table`, whose rows (e.g. models) are drawn
    with replacement as wholes, so columns measured on the same row stay paired."""
    values = table.to_numpy(dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(values), size=(n_boot, len(values)))
    return pd.DataFrame(values[idx].mean(axis=1), columns=table.columns)


def seed_binomial_means(accuracy, examples, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot,) resampled means over seeds of a per-seed proportion, in two stages: seeds with
    replacement (seed-to-seed spread), then each chosen seed's test set as a binomial draw of its
    own size (test-set sampling error). An interval from these covers both sources."""
    acc, n = np.asarray(accuracy, dtype=float), np.asarray(examples, dtype=int)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(acc), size=(n_boot, len(acc)))
    return (rng.binomial(n[pick], acc[pick]) / n[pick]).mean(axis=1)


def paired_seed_means(accuracy, examples, n_boot: int, seed: int, min_units: int) -> np.ndarray:
    """(n_boot, schemes) resampled means for schemes compared on the same model seeds, paired by
    seed: each resample draws the seeds (rows) with replacement, every scheme (column) then takes
    the drawn seeds it fitted (accuracy not NaN), each as a binomial draw of its test set, as
    `seed_binomial_means` does. A seed is a model with its own data draw, so the schemes of one
    seed share what that draw did to them. Where a scheme has fewer than `min_units` fitted seeds
    among the drawn ones its mean is undefined (NaN): see `interval_with_undefined`."""
    acc, n = np.asarray(accuracy, dtype=float), np.asarray(examples, dtype=int)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, acc.shape[0], size=(n_boot, acc.shape[0]))
    a, m = acc[pick], n[pick]  # (n_boot, seeds, schemes)
    fitted = ~np.isnan(a)
    hits = rng.binomial(np.where(fitted, m, 0), np.where(fitted, a, 0.0))
    count = fitted.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (hits / np.maximum(m, 1)).sum(axis=1) / count
    means[count < min_units] = np.nan
    return means


def interval_with_undefined(draws, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of draws some of which are undefined (NaN). An undefined draw
    counts against whichever verdict it could change: as the lowest value for the lower end and
    the highest for the upper end. So when more than (1 - level) / 2 of them are undefined the
    interval is unbounded (NaN here) on both sides and `interval_verdict` says INCONCLUSIVE: the
    data cannot decide. With none undefined it is `percentile_ci`."""
    d = np.asarray(draws, dtype=float)
    undefined = np.isnan(d)
    if not undefined.any():
        return percentile_ci(d, level)
    if undefined.mean() > (1 - level) / 2:
        return math.nan, math.nan
    lo = np.quantile(np.where(undefined, -np.inf, d), (1 - level) / 2, method="lower")
    hi = np.quantile(np.where(undefined, np.inf, d), (1 + level) / 2, method="higher")
    return float(lo), float(hi)


def interval_verdict(lo: float, hi: float, threshold: float, direction: str) -> str:
    """PASS when the whole interval is on the claim's side of `threshold` (`>=` or `<=`), FAIL
    when the whole interval is on the other side, INCONCLUSIVE when it straddles: the data
    cannot tell which."""
    if math.isnan(lo) or math.isnan(hi):
        return INCONCLUSIVE
    if direction == ">=":
        return PASS if lo >= threshold else FAIL if hi < threshold else INCONCLUSIVE
    if direction == "<=":
        return PASS if hi <= threshold else FAIL if lo > threshold else INCONCLUSIVE
    if direction == ">":
        return PASS if lo > threshold else FAIL if hi <= threshold else INCONCLUSIVE
    raise ValueError(f"interval_verdict: unknown direction {direction!r}")
