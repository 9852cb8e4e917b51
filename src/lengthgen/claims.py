"""The claims scorecard: each claim of the paper decided by a statistical test fixed in the
config before the run, with its value, interval or p, the number of units it rests on, and
PASS, FAIL or INCONCLUSIVE. A run states by itself whether it reproduced the paper.

Fit first: a model (claim 1) or a scheme (claim 2) enters a length comparison only if it fits
its training lengths. A comparison with an unfit party is INCONCLUSIVE, never PASS, since a
model that never learned the task fails at every length and says nothing about length.
Rows marked `descriptive` show the numbers behind a verdict; they are not verdicts.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lengthgen import stats
from lengthgen.fileio import atomic_path, write_text
from lengthgen.stats import FAIL, INCONCLUSIVE, PASS, spearman  # noqa: F401 (spearman: re-exported)

DESCRIPTIVE, NOT_MEASURED = "descriptive", "N/A"
COLUMNS = ["claim", "check", "value", "ci_low", "ci_high", "p", "n", "threshold", "result", "detail"]


def _row(claim, check, value, threshold, result, detail, ci=(math.nan, math.nan), p=math.nan, n=0) -> dict:
    return {"claim": claim, "check": check, "value": _r(value), "ci_low": _r(ci[0]), "ci_high": _r(ci[1]),
            "p": _r(p), "n": int(n), "threshold": threshold, "result": result, "detail": detail}


def _r(x) -> float:
    return round(float(x), 4)


def model_names(rows: pd.DataFrame) -> str:
    """'task/scheme/seedN, ...' of the distinct models among sweep rows ('' for none)."""
    models = rows[["task", "scheme", "seed"]].drop_duplicates().itertuples(index=False)
    return ", ".join(f"{t}/{s}/seed{seed}" for t, s, seed in models)


def _model_accuracy_at(sweep: pd.DataFrame, length: int) -> pd.Series:
    """Accuracy of each model (task, scheme, seed) at `length`, mean over k or depth."""
    return sweep[sweep["length"] == length].groupby(["task", "scheme", "seed"])["accuracy"].mean()


def fitted(sweep: pd.DataFrame, train_max: int, fit_min: float):
    """Per row of the sweep: whether its model fit its training lengths (True when untested)."""
    low = _model_accuracy_at(sweep, train_max).loc[lambda acc: acc < fit_min].index
    return ~pd.MultiIndex.from_frame(sweep[["task", "scheme", "seed"]]).isin(low)


# -- claim 1: sparsity ------------------------------------------------------------------------


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
    """Claim 1, one verdict per scheme: one point per fitted model (its mean accuracy over the
    test lengths of at least `min_length_ratio` x training); PASS when Spearman(k, point) is
    negative with one-sided permutation p <= alpha, FAIL when not, INCONCLUSIVE when fewer
    than two k have `min_models_per_k` fitted models. Models trained on a mixture of k give one
    point per (model, k). The per-length means follow as descriptive rows."""
    sweep = sweep[sweep["task"].isin(sparse_tasks)]
    sweep = sweep.assign(fits=fitted(sweep, train_max, cfg["fit_min"]))
    rows = [_fit_row(sweep, train_max, cfg["fit_min"])]
    long = sorted(n for n in sweep["length"].unique() if n >= cfg["min_length_ratio"] * train_max)
    if not long:
        longest = int(sweep["length"].max()) if len(sweep) else 0
        return rows + [_row("1 sparsity", f"no test length >= {cfg['min_length_ratio']:g}x the training length "
                            f"{train_max}", math.nan, "-", NOT_MEASURED, f"longest test length {longest}")]
    points = claim1_points(sweep, train_max, cfg)
    for scheme, g in sweep.groupby("scheme", sort=True):
        rows.append(_trend_row(scheme, g, points[points["scheme"] == scheme], cfg, st))
        fit = g[g["fits"]]
        for n in long:
            by_k = fit[fit["length"] == n].groupby("k")["accuracy"].mean().sort_index()
            detail = ", ".join(f"k={k}: {v:.3f}" for k, v in by_k.items())
            drop = by_k.iloc[0] - by_k.iloc[-1] if len(by_k) else math.nan
            models = len(fit.loc[fit["length"] == n, ["task", "seed"]].drop_duplicates())
            rows.append(_row("1 sparsity", f"{scheme} at n={n} ({n / train_max:g}x): mean accuracy, smallest k - "
                             "largest k", drop, "-", DESCRIPTIVE, detail, n=models))
    return rows


def _fit_row(sweep: pd.DataFrame, train_max: int, fit_min: float) -> dict:
    """How many models fit their training lengths: accuracy at the longest, mean over k."""
    acc = _model_accuracy_at(sweep, train_max)
    if acc.empty:
        return _row("1 sparsity", f"models that fit at n={train_max} (1x)", math.nan, "-", NOT_MEASURED,
                    f"no test length equals the longest training length {train_max}")
    low = acc[acc < fit_min]
    detail = "below: " + ", ".join(f"{t}/{s}/seed{seed} {a:.3f}" for (t, s, seed), a in low.items()) if len(low) else ""
    return _row("1 sparsity", f"models that fit at n={train_max} (1x): fraction", (acc >= fit_min).mean(),
                f">= {fit_min} each", DESCRIPTIVE, detail, n=len(acc))


def _trend_row(scheme: str, g: pd.DataFrame, points: pd.DataFrame, cfg: dict, st: dict) -> dict:
    """The scheme's verdict from its sweep rows `g` and its claim-1 `points`."""
    lo_ratio = cfg["min_length_ratio"]
    check = f"{scheme}: Spearman(k, mean accuracy at n >= {lo_ratio:g}x), one point per fitted model"
    threshold = f"p <= {st['alpha']:g} (one-sided)"
    counts = points.groupby("k").size()
    unfit = model_names(g[~g["fits"]])
    left_out = f"; left out, unfit: {unfit}" if unfit else ""
    enough = counts[counts >= cfg["min_models_per_k"]]
    if len(enough) < 2:
        return _row("1 sparsity", check, math.nan, threshold, INCONCLUSIVE,
                    f"fitted models per k: {_counts(counts)}; needs {cfg['min_models_per_k']} at two or more k"
                    + left_out, n=len(points))
    points = points[points["k"].isin(enough.index)]
    rho, p = stats.permutation_spearman(points["k"], points["accuracy"], "less", st["n_perm"], st["seed"])
    ks = sorted(enough.index)
    draws = stats.group_mean_ci({k: points.loc[points["k"] == k, "accuracy"] for k in ks}, st["n_boot"], st["seed"])
    effect = points.loc[points["k"] == ks[0], "accuracy"].mean() - points.loc[points["k"] == ks[-1], "accuracy"].mean()
    ci = stats.percentile_ci(draws[ks[0]] - draws[ks[-1]], st["level"])
    result = PASS if p <= st["alpha"] and rho < 0 else FAIL
    means = ", ".join(f"k={k}: {points.loc[points['k'] == k, 'accuracy'].mean():.3f}" for k in ks)
    detail = (f"effect acc(k={ks[0]}) - acc(k={ks[-1]}) {effect:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]; {means}; "
              f"models per k: {_counts(counts)}{left_out}")
    return _row("1 sparsity", check, rho, threshold, result, detail, p=p, n=len(points))


def _counts(counts: pd.Series) -> str:
    return ", ".join(f"k={k}: {c}" for k, c in counts.items()) or "none"


# -- claim 2: coupling ------------------------------------------------------------------------


def scheme_role(opts: dict) -> str:
    """ppc (predicts its IDs), pc (oracle coupled IDs, fed back by the task's rule) or index
    (every scheme without coupled IDs, a pointer/copy head included)."""
    if opts["positions"] != "coupled":
        return "index"
    predicts = opts["position_head"] != "none" and opts.get("feed_ids", "predicted") == "predicted"
    return "ppc" if predicts else "pc"


class _Scheme:
    """One scheme of one task: its per-seed exact match at 1x and at the compared length."""

    def __init__(self, sweep: pd.DataFrame, task: str, scheme: str, n_max: int, n: int, fit_min: float):
        g = sweep[(sweep["task"] == task) & (sweep["scheme"] == scheme)]
        self.name = scheme
        self.fit_by_seed = g[g["length"] == n_max].groupby("seed")["accuracy"].mean()
        at = g[g["length"] == n].groupby("seed")
        self.acc, self.examples = at["accuracy"].mean(), at["examples"].sum()
        self.fit = float(self.fit_by_seed.median()) if len(self.fit_by_seed) else math.nan
        self.fits = self.fit >= fit_min

    def draws(self, st: dict) -> np.ndarray:
        """Resampled means. Every scheme of a task draws the same seed indices (one generator
        seed), so differences between schemes are paired by model seed."""
        return stats.seed_binomial_means(self.acc.values, self.examples.values, st["n_boot"], st["seed"])

    def fit_note(self) -> str:
        lo = float(self.fit_by_seed.min()) if len(self.fit_by_seed) else math.nan
        return f"{self.name} {self.fit:.2f} (min {lo:.2f})"


def coupling_checks(sweep: pd.DataFrame, tasks: dict, cfg: dict, st: dict) -> list[dict]:
    """Claim 2 at `length_ratio` x each task's longest training length n_max. Fit first: every
    scheme's median exact match over seeds at n_max must reach `fit_min`. Each value is a mean
    over seeds with a bootstrap interval over seeds and test examples, judged on the interval.
    E2: coupled schemes reach `coupled_min`, index schemes stay at most `index_max`. E3: ppc
    beats the best fitted scheme without coupled IDs (the pointer/copy control included) by
    `margin`, and stays within `match_tolerance` of pc (oracle IDs)."""
    rows = []
    for task, info in sorted(tasks.items()):
        n_max = info["n_max"]
        n = int(round(cfg["length_ratio"] * n_max))
        label = f"{task} ({info['answer_format']} answers)" if info.get("answer_format") else task
        where = f"{label} at n={n} ({cfg['length_ratio']:g}x)"
        lengths = set(sweep.loc[sweep["task"] == task, "length"])
        if n not in lengths or n_max not in lengths:
            rows.append(_row("2 coupling", f"{where}: not tested", math.nan, "-", NOT_MEASURED,
                             f"add {n_max} and {n} to eval.lengths"))
            continue
        names = sorted(sweep.loc[sweep["task"] == task, "scheme"].unique())
        schemes = {s: _Scheme(sweep, task, s, n_max, n, cfg["fit_min"]) for s in names}
        roles = {s: scheme_role(info["scheme_options"][s]) for s in names}
        rows.append(_fit_summary(label, n_max, schemes, cfg))
        if info["kind"] == "scratchpad_parity":
            rows += [_parity_row(where, schemes[s], roles[s], cfg, st) for s in names]
        else:
            rows += _assignment_rows(where, schemes, roles, cfg, st)
    return rows


def _fit_summary(label: str, n_max: int, schemes: dict, cfg: dict) -> dict:
    fit = [s for s in schemes.values() if s.fits]
    detail = "median (min) over seeds: " + ", ".join(s.fit_note() for s in schemes.values())
    return _row("2 coupling", f"{label} at n={n_max} (1x): schemes that fit", len(fit) / len(schemes),
                f">= {cfg['fit_min']} median each", DESCRIPTIVE, detail, n=len(schemes))


def _parity_row(where: str, s: _Scheme, role: str, cfg: dict, st: dict) -> dict:
    coupled = role != "index"
    direction, threshold = (">=", cfg["coupled_min"]) if coupled else ("<=", cfg["index_max"])
    check = f"{where}: {s.name} ({role}) exact match"
    value, ci = float(s.acc.mean()), stats.percentile_ci(s.draws(st), st["level"])
    seeds = ", ".join(f"{v:.3f}" for v in s.acc.values)
    if not s.fits:
        return _row("2 coupling", check, value, f"{direction} {threshold}", INCONCLUSIVE,
                    f"unfit at 1x: {s.fit_note()}; per seed {seeds}", ci, n=len(s.acc))
    return _row("2 coupling", check, value, f"{direction} {threshold} (interval)",
                stats.interval_verdict(*ci, threshold, direction), f"per seed {seeds}", ci, n=len(s.acc))


def _assignment_rows(where: str, schemes: dict, roles: dict, cfg: dict, st: dict) -> list[dict]:
    draws = {name: s.draws(st) for name, s in schemes.items()}
    baselines = [s for name, s in schemes.items() if roles[name] == "index"]
    rows = []
    for ppc in (s for name, s in schemes.items() if roles[name] == "ppc"):
        fitted_base = [b for b in baselines if b.fits]
        unfit = [b for b in baselines if not b.fits] + ([] if ppc.fits else [ppc])
        best = max(fitted_base, key=lambda b: b.acc.mean(), default=None)
        rows.append(_difference_row(f"{where}: {ppc.name} - best scheme without coupled IDs"
                                    + (f" ({best.name})" if best else ""), ppc, best, draws, unfit,
                                    cfg["margin"], st, baselines))
        for pc in (s for name, s in schemes.items() if roles[name] == "pc"):
            rows.append(_difference_row(f"{where}: {ppc.name} - {pc.name} (oracle IDs)", ppc, pc, draws,
                                        [x for x in (ppc, pc) if not x.fits], -cfg["match_tolerance"], st, [pc]))
    return rows


def _difference_row(check, a: _Scheme, b: _Scheme | None, draws, unfit, threshold, st, compared) -> dict:
    """a - b at the compared length, judged on its interval against `threshold`. A FAIL stands
    whatever the unfit schemes are (a fitted one already reaches a); a PASS needs every compared
    scheme fitted, else INCONCLUSIVE."""
    named = ", ".join(f"{s.name} {s.acc.mean():.3f}" for s in [a, *compared])
    unfit_note = "unfit at 1x: " + ", ".join(s.fit_note() for s in unfit) if unfit else ""
    if b is None or not a.fits:
        return _row("2 coupling", check, math.nan, f">= {threshold:g}", INCONCLUSIVE,
                    "; ".join(x for x in (unfit_note or "no fitted scheme to compare", named) if x))
    value = float(a.acc.mean() - b.acc.mean())
    ci = stats.percentile_ci(draws[a.name] - draws[b.name], st["level"])
    result = stats.interval_verdict(*ci, threshold, ">=")
    if result == PASS and unfit:
        result = INCONCLUSIVE
    return _row("2 coupling", check, value, f">= {threshold:g} (interval)", result,
                "; ".join(x for x in (unfit_note, named) if x), ci, n=len(a.acc) + len(b.acc))


# -- claim 3: language ------------------------------------------------------------------------


def language_checks(scores: pd.DataFrame, cfg: dict, st: dict) -> list[dict]:
    """Claim 3 (E4) from the per-token scores of the tokens with a gap L_short - L_long above
    delta (`scored`), each judged on a bootstrap interval over those tokens: greedy k tokens
    recover `recovered_min` of the gap (median); attention beats random at every k (paired:
    the median of per-token differences); the short model does better with the greedy tokens
    than with its window alone (paired mean)."""
    k, s = cfg["greedy_k"], scores[scores["scored"]]
    level, n_boot, seed = st["level"], st["n_boot"], st["seed"]
    gap = (s["L_short"] - s["L_long"]).to_numpy()
    recovered = {(m, j): (s["L_short"].to_numpy() - s[f"L_{m}_{j}"].to_numpy()) / gap
                 for m in ("greedy", "attention", "random") for j in _ks(s, m)}
    where = f"{len(s)} tokens with L_short - L_long > delta"
    rows = []
    if ("greedy", k) in recovered:
        v = recovered[("greedy", k)]
        ci = stats.bootstrap(v, np.median, n_boot, seed, level)
        result = stats.interval_verdict(*ci, cfg["recovered_min"], ">=")
        rows.append(_row("3 language", f"greedy k={k}: median gap recovered", np.median(v),
                         f">= {cfg['recovered_min']} (interval)", result, where, ci, n=len(v)))
    for j in sorted(j for m, j in recovered if m == "attention"):
        if ("random", j) in recovered:
            d = recovered[("attention", j)] - recovered[("random", j)]
            ci = stats.bootstrap(d, np.median, n_boot, seed + j, level)
            rows.append(_row("3 language", f"attention - random at k={j}: median per-token difference in gap "
                             "recovered", np.median(d), "> 0 (interval)", stats.interval_verdict(*ci, 0.0, ">"),
                             f"paired over {where}", ci, n=len(d)))
    positions = "coupled" if cfg["short_coupled"] else "true"
    if "short_window" in s and f"short_{positions}_{k}" in s:
        d = (s["short_window"] - s[f"short_{positions}_{k}"]).to_numpy()
        ci = stats.bootstrap(d, np.mean, n_boot, seed, level)
        rows.append(_row("3 language", f"short model: loss(window) - loss(window + {k} greedy tokens, {positions} IDs)",
                         d.mean(), "> 0 (interval)", stats.interval_verdict(*ci, 0.0, ">"),
                         f"paired mean over {where}", ci, n=len(d)))
    return rows


def _ks(scored: pd.DataFrame, method: str) -> list[int]:
    prefix = f"L_{method}_"
    return sorted(int(c[len(prefix):]) for c in scored.columns if c.startswith(prefix))


# -- beyond the paper: attention sparsity ------------------------------------------------------

ANALYSIS = "analysis attention"  # not a claim of the paper: never counted in its verdicts


def attention_checks(models: pd.DataFrame, sweep: pd.DataFrame, experiments: dict, cfg: dict, st: dict) -> list[dict]:
    """Per experiment ({label: {"tasks": {name: n_max}, "fit_min": f}}), over its fitted models
    (`models`: attention_report.per_model of the attention table): Spearman between the
    attribution on the dependency set at each task's longest test length and exact match there
    (mean over k or depth), one-sided permutation p; PASS when positive with p <= alpha, FAIL
    otherwise, INCONCLUSIVE below `min_models` fitted models or when either side is constant.
    The attention mass (best head of the last layer) follows as a descriptive row: a first
    probe found it unrelated to accuracy at SEP."""
    rows = []
    for label, exp in experiments.items():
        points = _attention_points(models, sweep, exp)
        fit = points[points["fits"]]
        unfit = model_names(points[~points["fits"]])
        note = f"; left out, unfit: {unfit}" if unfit else ""
        lengths = "/".join(str(n) for n in sorted(points["length"].unique())) or "-"
        for measure, what in (("attribution", "attribution on dependencies"),
                              ("attention", "attention mass on dependencies (best head, last layer)")):
            check = f"{label} at n={lengths}: Spearman({what}, exact match), one point per fitted model"
            threshold = f"> 0, p <= {st['alpha']:g} (one-sided)"
            verdict = measure == "attribution"  # the attention mass is shown, not judged
            rows.append(_association_row(check, fit, measure, threshold, cfg, st, note, verdict))
    return rows


def _attention_points(models: pd.DataFrame, sweep: pd.DataFrame, exp: dict) -> pd.DataFrame:
    """One row per model of the experiment at its task's longest test length: the attention
    measures, its exact match there and whether it fit its training lengths."""
    parts = []
    for task, n_max in sorted(exp["tasks"].items()):
        m = models[models["task"] == task]
        if m.empty:
            continue
        m = m[m["length"] == m["length"].max()]
        s = sweep[sweep["task"] == task]
        acc = s.groupby(["task", "scheme", "seed", "length"])["accuracy"].mean().round(12).rename("accuracy")  # ties
        fits = s.assign(fits=fitted(s, n_max, exp["fit_min"])).groupby(["task", "scheme", "seed"])["fits"].all()
        parts.append(m.join(acc, on=["task", "scheme", "seed", "length"]).join(fits, on=["task", "scheme", "seed"]))
    if not parts:
        return pd.DataFrame(columns=["task", "scheme", "seed", "length", "attribution", "attention", "accuracy",
                                     "fits"])
    out = pd.concat(parts, ignore_index=True)
    return out.assign(fits=out["fits"].fillna(False).astype(bool) & out["accuracy"].notna())


def _association_row(check, fit: pd.DataFrame, measure: str, threshold, cfg, st, note, verdict: bool) -> dict:
    if len(fit) < cfg["min_models"]:
        return _row(ANALYSIS, check, math.nan, threshold, INCONCLUSIVE if verdict else DESCRIPTIVE,
                    f"{len(fit)} fitted models; needs {cfg['min_models']}{note}", n=len(fit))
    rho, p = stats.permutation_spearman(fit[measure], fit["accuracy"], "greater", st["n_perm"], st["seed"])
    detail = (f"{measure} {fit[measure].min():.3f}-{fit[measure].max():.3f}, exact match "
              f"{fit['accuracy'].min():.3f}-{fit['accuracy'].max():.3f}{note}")
    if math.isnan(rho):
        result = INCONCLUSIVE if verdict else DESCRIPTIVE
        return _row(ANALYSIS, check, rho, threshold, result, "a side is constant: " + detail, n=len(fit))
    result = (PASS if rho > 0 and p <= st["alpha"] else FAIL) if verdict else DESCRIPTIVE
    return _row(ANALYSIS, check, rho, threshold if verdict else "-", result, detail, p=p, n=len(fit))


# -- the scorecard ----------------------------------------------------------------------------

# Claims whose experiments this grid does not run: listed, so the scorecard always covers
# every claim of the paper and says plainly which ones it did not measure.
NOT_IN_GRID = {
    "1 sparsity": "sparse parity (E1)",
    "2 coupling": "position coupling and PPC (E2 parity with scratchpad, E3 variable assignment)",
    "3 language": "influential tokens in natural language (E4)",
}


def unmeasured_rows(claims) -> list[dict]:
    return [_row(claim, f"{NOT_IN_GRID[claim]}: not in this grid", math.nan, "-", NOT_MEASURED,
                 "no task of this experiment configured") for claim in claims]


def heading(claim: str) -> str:
    """How a verdict line names a claim of the paper, or an analysis beyond it."""
    return f"claim {claim}" if claim in NOT_IN_GRID else claim


def verdict(rows: list[dict], claim: str) -> str:
    """One line per claim: reproduced only when every verdict row passes. An analysis beyond
    the paper reproduces nothing: its line only counts its results."""
    results = [r["result"] for r in rows if r["claim"] == claim and r["result"] in (PASS, FAIL, INCONCLUSIVE)]
    if not results:
        return "not measured"
    counts = ", ".join(f"{results.count(x)} {x}" for x in (PASS, FAIL, INCONCLUSIVE) if x in results)
    if claim not in NOT_IN_GRID:
        return f"beyond the paper, not one of its claims ({counts})"
    if all(r == PASS for r in results):
        return f"reproduced ({counts})"
    if all(r == INCONCLUSIVE for r in results):
        return f"not reproduced: undecided ({counts})"
    return f"not reproduced ({counts})"


def write_scorecard(rows: list[dict], csv_out, md_out) -> None:
    df = pd.DataFrame(rows, columns=COLUMNS)
    with atomic_path(csv_out) as tmp:
        df.to_csv(tmp, index=False, float_format="%.4f", lineterminator="\n")
    lines = ["# Claims scorecard\n"]
    lines += [f"- {heading(c)}: {verdict(rows, c)}" for c in sorted(df["claim"].unique())]
    lines += ["", "| claim | check | value | 95% CI | p | n | threshold | result | detail |", "|" + "---|" * 9]
    for r in df.itertuples():
        ci = "" if math.isnan(r.ci_low) else f"[{r.ci_low:.4f}, {r.ci_high:.4f}]"
        p = "" if math.isnan(r.p) else f"{r.p:.4f}"
        result = r.result if r.result in (DESCRIPTIVE, NOT_MEASURED) else f"**{r.result}**"
        value = "" if math.isnan(r.value) else f"{r.value:.4f}"
        lines.append(f"| {r.claim} | {r.check} | {value} | {ci} | {p} | {r.n} | {r.threshold} | {result} | "
                     f"{r.detail} |")
    write_text(md_out, "\n".join(lines) + "\n")
