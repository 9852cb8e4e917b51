"""Claim 2 (E2 parity with scratchpad, E3 variable assignment): position coupling, with its IDs
predicted (ppc) or given (pc), generalizes in length where index positions do not."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lengthgen.analysis import budget, stats
from lengthgen.analysis.claims.rows import DESCRIPTIVE, NOT_MEASURED, make_row, tag
from lengthgen.analysis.stats import FAIL, INCONCLUSIVE, PASS


def scheme_role(opts: dict) -> str:
    """ppc (predicts its IDs), pc (oracle coupled IDs, fed back by the task's rule) or index
    (every scheme without coupled IDs, a pointer/copy head included)."""
    if opts["positions"] != "coupled":
        return "index"
    predicts = opts["position_head"] != "none" and opts.get("feed_ids", "predicted") == "predicted"
    return "ppc" if predicts else "pc"


class _Scheme:
    """One scheme of one task: its per-seed exact match at 1x and at the compared length. It
    fits when at least `min_fitted` of its seeds fit (a median over seeds made a baseline that
    fits in 4 of 9 seeds unfit at any seed count), and only its fitted seeds are compared."""

    def __init__(self, sweep: pd.DataFrame, task: str, scheme: str, n_max: int, n: int, fit_min: float,
                 min_fitted: int):
        g = sweep[(sweep["task"] == task) & (sweep["scheme"] == scheme)]
        self.name = scheme
        self.fit_by_seed = g[g["length"] == n_max].groupby("seed")["accuracy"].mean()
        self.cut = set(budget.capped(g).get_level_values("seed"))  # cut by max_steps: never fitted
        at = g[g["length"] == n].groupby("seed")
        self.acc, self.examples = at["accuracy"].mean(), at["examples"].sum()
        # how often the IDs a ppc predicts are the true ones (NaN for schemes that predict none)
        self.id_acc = at["position_accuracy"].mean() if "position_accuracy" in g else pd.Series(dtype=float)
        self.fitted = self.acc[self.fit_seeds(fit_min)]  # exact match of the seeds that fit at 1x
        self.fits = len(self.fitted) >= min_fitted

    def fit_seeds(self, fit_min: float) -> list:
        """The seeds whose model fits at 1x when its training ended (not cut by max_steps): only
        they are compared (an unfit model says nothing)."""
        return [seed for seed, acc in self.fit_by_seed.items()
                if acc >= fit_min and seed not in self.cut and seed in self.acc.index]

    def draws(self, st: dict, seeds=None) -> np.ndarray:
        """Resampled means over `seeds` (all by default). Every scheme of a task draws the same
        seed indices (one generator seed), so differences over the same seeds are paired."""
        seeds = list(self.acc.index) if seeds is None else seeds
        if not seeds:
            return np.full(st["n_boot"], math.nan)
        return stats.seed_binomial_means(self.acc[seeds].values, self.examples[seeds].values, st["n_boot"], st["seed"])

    def fit_note(self) -> str:
        cut = f" ({len(self.cut)} cut by max_steps)" if self.cut else ""
        return f"{self.name} {len(self.fitted)} of {len(self.fit_by_seed)}{cut}"


def coupling_checks(sweep: pd.DataFrame, tasks: dict, cfg: dict, st: dict) -> list[dict]:
    """Claim 2 at `length_ratio` x each task's longest training length n_max. Fit first: a
    scheme fits when at least `min_fitted` of its seeds reach `fit_min` at n_max, and only those
    seeds are compared. Each value is a mean over seeds with a bootstrap interval over seeds and
    test examples, judged on the interval. E2: coupled schemes reach `coupled_min`, index
    schemes stay at most `index_max`. E3: ppc closes at least `closure_min` of each fitted
    baseline's shortfall from exact match (the copy-head control, the best plain index scheme),
    and stays within `match_tolerance` of pc (oracle IDs)."""
    rows = []
    for task, info in sorted(tasks.items()):
        rows += tag(_task_coupling_rows(sweep, task, info, cfg, st), KIND_EXPERIMENT[info["kind"]])
    return rows


KIND_EXPERIMENT = {"scratchpad_parity": "E2", "variable_assignment": "E3"}


def _task_coupling_rows(sweep: pd.DataFrame, task: str, info: dict, cfg: dict, st: dict) -> list[dict]:
    n_max = info["n_max"]
    ratio = cfg["length_ratio"] if info["kind"] == "scratchpad_parity" else cfg["assignment_length_ratio"]
    n = int(round(ratio * n_max))
    label = f"{task} ({info['answer_format']} answers)" if info.get("answer_format") else task
    where = f"{label} at n={n} ({ratio:g}x)"
    lengths = set(sweep.loc[sweep["task"] == task, "length"])
    if n not in lengths or n_max not in lengths:
        return [make_row("2 coupling", f"{where}: not tested", math.nan, "-", NOT_MEASURED,
                     f"add {n_max} and {n} to eval.lengths")]
    names = sorted(sweep.loc[sweep["task"] == task, "scheme"].unique())
    schemes = {s: _Scheme(sweep, task, s, n_max, n, cfg["fit_min"], cfg["min_fitted"]) for s in names}
    roles = {s: scheme_role(info["scheme_options"][s]) for s in names}
    rows = [_fit_summary(label, n_max, schemes, cfg)]
    if info["kind"] == "scratchpad_parity":
        return rows + [_parity_row(where, schemes[s], roles[s], cfg, st) for s in names]
    opts = info["scheme_options"]
    coverage = id_coverage(info, n)
    rows += [_with_coverage(row, *coverage) for row in _assignment_rows(where, schemes, roles, opts, cfg, st)]
    # the same comparisons at the other test lengths, as numbers, not verdicts: where along the
    # length axis each scheme breaks down
    for m in sorted(lengths - {n_max, n}):
        at = {s: _Scheme(sweep, task, s, n_max, m, cfg["fit_min"], cfg["min_fitted"]) for s in names}
        coverage = id_coverage(info, m)[0]
        rows += [{**row, "threshold": "-", "result": DESCRIPTIVE, "detail": f"{coverage}; {row['detail']}"}
                 for row in _assignment_rows(f"{label} at n={m} ({m / n_max:g}x)", at, roles, opts, cfg, st)
                 if row["result"] != NOT_MEASURED]
    return rows


def _with_coverage(row: dict, coverage: str, beyond: bool) -> dict:
    """A judged E3 row names the IDs training covered. Beyond them it decides nothing: its test
    asks for IDs no training example had, which measures ID extrapolation, and neither position
    coupling nor the paper claims that (its IDs are trained up to the maximum)."""
    if row["result"] not in (PASS, FAIL, INCONCLUSIVE):
        return row
    if not beyond:
        return {**row, "detail": f"{coverage}; {row['detail']}"}
    return {**row, "result": INCONCLUSIVE, "detail": f"beyond training coverage: {coverage}; {row['detail']}"}


def id_coverage(info: dict, n: int) -> tuple[str, bool]:
    """What IDs training covered (gaps spread them up to max_position - 1) against the longest
    test sequence at n, and whether the test reaches beyond them."""
    longest = info["test_tokens"][str(n)]  # JSON keys
    covered = info["max_position"]
    note = f"training IDs 0-{covered - 1} (max_position {covered}), test sequences to {longest} tokens"
    return note, longest > covered


def _fit_summary(label: str, n_max: int, schemes: dict, cfg: dict) -> dict:
    fit = [s for s in schemes.values() if s.fits]
    detail = f"seeds at >= {cfg['fit_min']:g}: " + ", ".join(s.fit_note() for s in schemes.values())
    return make_row("2 coupling", f"{label} at n={n_max} (1x): schemes that fit", len(fit) / len(schemes),
                f">= {cfg['min_fitted']} fitted seeds each", DESCRIPTIVE, detail, n=len(schemes))


def _parity_row(where: str, s: _Scheme, role: str, cfg: dict, st: dict) -> dict:
    """One scheme's exact match over its fitted seeds only, judged on its interval; INCONCLUSIVE
    unless the scheme fits (its median seed does)."""
    coupled = role != "index"
    direction, threshold = (">=", cfg["coupled_min"]) if coupled else ("<=", cfg["index_max"])
    check = f"{where}: {s.name} ({role}) exact match, fitted seeds"
    seeds = s.fit_seeds(cfg["fit_min"])
    unfit = [f"seed{seed} {s.fit_by_seed[seed]:.2f}" for seed in s.fit_by_seed.index if seed not in seeds]
    left_out = f"; left out, unfit at 1x: {', '.join(unfit)}" if unfit else ""
    if not s.fits:  # fewer than min_fitted fitted seeds: too few models to say what the scheme does
        return make_row("2 coupling", check, math.nan, f"{direction} {threshold}", INCONCLUSIVE,
                    f"unfit at 1x: {s.fit_note()}{left_out}", n=len(seeds))
    value, ci = float(s.acc[seeds].mean()), stats.percentile_ci(s.draws(st, seeds), st["level"])
    per_seed = ", ".join(f"{s.acc[seed]:.3f}" for seed in seeds)
    return make_row("2 coupling", check, value, f"{direction} {threshold} (interval)",
                stats.interval_verdict(*ci, threshold, direction), f"per fitted seed {per_seed}{left_out}", ci,
                n=len(seeds))


def _assignment_rows(where: str, schemes: dict, roles: dict, opts: dict, cfg: dict, st: dict) -> list[dict]:
    """ppc's own exact match (>= coupled_min: it generalizes), then ppc against each kind of
    baseline without coupled IDs, a row each, paired by model seed: the copy-head control (ppc's
    pointer and copy head on index positions), within match_tolerance of it (what predicting the
    IDs costs against the copy mechanism alone, which a control trained to the end holds at exact
    match), and the plain index schemes the paper compares against, which must be beaten by
    closure_min of their shortfall. A baseline kind not in the grid gets an N/A row."""
    # each scheme over its fitted seeds only: an unfit model says nothing about length
    draws = {name: s.draws(st, s.fit_seeds(cfg["fit_min"])) for name, s in schemes.items()}
    index = [name for name in schemes if roles[name] == "index"]
    kinds = {"copy-head control": [schemes[s] for s in index if opts[s]["position_head"] != "none"],
             "best plain index scheme": [schemes[s] for s in index if opts[s]["position_head"] == "none"]}
    rows = []
    for ppc in (s for name, s in schemes.items() if roles[name] == "ppc"):
        rows.append(_parity_row(where, ppc, "ppc", cfg, st))
        for kind, baselines in kinds.items():
            control = kind == "copy-head control"
            check = (f"{where}: {ppc.name} - the {kind}, paired by seed" if control
                     else f"{where}: {ppc.name} against the {kind}: share of its shortfall closed, paired by seed")
            threshold = -cfg["match_tolerance"] if control else cfg["closure_min"]
            if not baselines:
                rows.append(make_row("2 coupling", check, math.nan, f">= {threshold:g}", NOT_MEASURED,
                                     "no such scheme in this grid"))
                continue
            best = max((b for b in baselines if b.fits), key=lambda b: draws[b.name].mean(), default=None)
            # compared: ppc and the best fitted baseline; an unfit baseline is named, never compared
            unfit = ([b for b in baselines if not b.fits] if best is None else []) + ([] if ppc.fits else [ppc])
            rows.append(_paired_row(check + (f" ({best.name})" if best else ""), ppc, best, unfit, cfg, st,
                                    baselines, closure=not control))
        rows += _predicted_id_rows(where, ppc)
        rows += [_oracle_row(where, ppc, pc, opts[pc.name], draws, cfg, st)
                 for name, pc in schemes.items() if roles[name] == "pc"]
    return rows


def _predicted_id_rows(where: str, ppc: _Scheme) -> list[dict]:
    """How often the IDs ppc predicts and feeds back are the true ones (descriptive)."""
    ids = ppc.id_acc.reindex(ppc.fitted.index).dropna()
    if ids.empty:
        return []
    return [make_row("2 coupling", f"{where}: {ppc.name}'s predicted IDs: fraction right, fitted seeds",
                     float(ids.mean()), "-", DESCRIPTIVE, "per fitted seed " + ", ".join(f"{v:.3f}" for v in ids),
                     n=len(ids))]


def _oracle_row(where: str, ppc: _Scheme, pc: _Scheme, pc_opts: dict, draws, cfg: dict, st: dict) -> dict:
    """ppc - pc (the same model fed the true IDs) >= -match_tolerance: predicting costs little.
    With a copy head the tokens come from where the pointer points whatever IDs are fed, so the
    two exact matches are equal by construction: such a row compares nothing (N/A)."""
    check = f"{where}: {ppc.name} - {pc.name} (oracle IDs)"
    if pc_opts.get("copy"):
        return make_row("2 coupling", check, math.nan, f">= {-cfg['match_tolerance']:g}", NOT_MEASURED,
                        f"{pc.name} copies with the pointer, so its exact match is ppc's by construction")
    return _difference_row(check, ppc, pc, draws, [x for x in (ppc, pc) if not x.fits], -cfg["match_tolerance"], st,
                           [pc])


def _compared(a: _Scheme, compared, unfit) -> tuple[dict, str, str]:
    """The fitted seeds' mean of each scheme, and the detail's notes naming them and the unfit."""
    mean = {s.name: float(s.fitted.mean()) if len(s.fitted) else math.nan for s in [a, *compared]}
    named = "fitted seeds' means: " + ", ".join(f"{s.name} {mean[s.name]:.3f}" for s in [a, *compared])
    unfit_note = "unfit at 1x (fitted seeds): " + ", ".join(s.fit_note() for s in unfit) if unfit else ""
    return mean, named, unfit_note


def _difference_row(check, a: _Scheme, b: _Scheme | None, draws, unfit, threshold, st, compared) -> dict:
    """a - b at the compared length, judged on its interval against `threshold`. A FAIL stands
    whatever the unfit schemes are (a fitted one already reaches a); a PASS needs every compared
    scheme fitted, else INCONCLUSIVE."""
    mean, named, unfit_note = _compared(a, compared, unfit)
    if b is None or not a.fits:
        return make_row("2 coupling", check, math.nan, f">= {threshold:g}", INCONCLUSIVE,
                    "; ".join(x for x in (unfit_note or "no fitted scheme to compare", named) if x))
    value, ci = mean[a.name] - mean[b.name], stats.percentile_ci(draws[a.name] - draws[b.name], st["level"])
    result = stats.interval_verdict(*ci, threshold, ">=")
    if result == PASS and unfit:
        result = INCONCLUSIVE
    return make_row("2 coupling", check, value, f">= {threshold:g} (interval)", result,
                "; ".join(x for x in (unfit_note, named) if x), ci,
                n=len(a.fitted) + len(b.fitted))


def paired_draws(a: _Scheme, b: _Scheme, cfg: dict, st: dict) -> tuple[np.ndarray, np.ndarray, list]:
    """Resampled means of a and b over the seeds where both fit, paired by seed: the seeds are
    drawn as blocks (a seed is one data draw that both models of it trained on), then each
    model's test set as a binomial draw. A resample with fewer than `min_fitted` such seeds is
    undefined (NaN): `stats.interval_with_undefined` counts it against the row."""
    seeds = sorted(set(a.acc.index) & set(b.acc.index))
    both = set(a.fit_seeds(cfg["fit_min"])) & set(b.fit_seeds(cfg["fit_min"]))
    acc = np.array([[a.acc[s], b.acc[s]] if s in both else [math.nan, math.nan] for s in seeds]).reshape(-1, 2)
    examples = np.array([[a.examples[s], b.examples[s]] for s in seeds], dtype=int).reshape(-1, 2)
    means = stats.paired_seed_means(acc, examples, st["n_boot"], st["seed"], cfg["min_fitted"])
    return means[:, 0], means[:, 1], [s for s in seeds if s in both]


def _paired_row(check, a: _Scheme, b: _Scheme | None, unfit, cfg, st, compared, closure: bool) -> dict:
    """a against baseline b over the seeds where both fit, paired by seed. `closure`: the share of
    b's shortfall from exact match that a closes, (a - b) / (1 - b), at least `closure_min` (a
    baseline within `min_headroom` of exact match leaves nothing to close: INCONCLUSIVE); else
    a - b at least -`match_tolerance`. Judged on the interval, resamples with fewer than
    `min_fitted` paired seeds counted against the row; a PASS needs every compared scheme fitted."""
    threshold = cfg["closure_min"] if closure else -cfg["match_tolerance"]
    _, named, unfit_note = _compared(a, compared, unfit)
    if b is None or not a.fits:
        return make_row("2 coupling", check, math.nan, f">= {threshold:g}", INCONCLUSIVE,
                        "; ".join(x for x in (unfit_note or "no fitted scheme to compare", named) if x))
    da, db, pairs = paired_draws(a, b, cfg, st)
    mean_a, mean_b = (float(s.acc[pairs].mean()) if pairs else math.nan for s in (a, b))
    headroom = 1.0 - mean_b
    if closure:
        value = (mean_a - mean_b) / max(headroom, 1e-9)
        ci = stats.interval_with_undefined((da - db) / np.maximum(1.0 - db, 1e-9), st["level"])
    else:
        value, ci = mean_a - mean_b, stats.interval_with_undefined(da - db, st["level"])
    result = stats.interval_verdict(*ci, threshold, ">=")
    if result == PASS and unfit:
        result = INCONCLUSIVE
    named = (f"{len(pairs)} seeds where both fit (resamples with fewer than {cfg['min_fitted']} count against the"
             f" row); {a.name} - {b.name} {mean_a - mean_b:.3f}; {named}")
    if closure and headroom < cfg["min_headroom"]:
        result = INCONCLUSIVE
        named = f"no headroom: {b.name} within {cfg['min_headroom']:g} of exact match; {named}"
    return make_row("2 coupling", check, value, f">= {threshold:g} (interval)", result,
                    "; ".join(x for x in (unfit_note, named) if x), ci, n=len(pairs))
