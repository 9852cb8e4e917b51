"""Beyond the paper: attention sparsity. Whether the models' attribution on the dependency set
goes with their exact match; its rows are never counted toward a claim of the paper."""

from __future__ import annotations

import math

import pandas as pd

from lengthgen.analysis import stats
from lengthgen.analysis.claims.rows import DESCRIPTIVE, make_row, model_names, tag
from lengthgen.analysis.claims.sparsity import fitted
from lengthgen.analysis.stats import FAIL, INCONCLUSIVE, PASS

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
            row = _association_row(check, fit, measure, threshold, cfg, st, note, verdict)
            rows += tag([row], label.split()[0])
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
        return make_row(ANALYSIS, check, math.nan, threshold, INCONCLUSIVE if verdict else DESCRIPTIVE,
                    f"{len(fit)} fitted models; needs {cfg['min_models']}{note}", n=len(fit))
    rho, p = stats.permutation_spearman(fit[measure], fit["accuracy"], "greater", st["n_perm"], st["seed"])
    detail = (f"{measure} {fit[measure].min():.3f}-{fit[measure].max():.3f}, exact match "
              f"{fit['accuracy'].min():.3f}-{fit['accuracy'].max():.3f}{note}")
    if math.isnan(rho) or fit["accuracy"].max() - fit["accuracy"].min() < cfg["min_spread"]:
        # exact match from 0.994 to 1.000 has no spread for a rank correlation to find
        result = INCONCLUSIVE if verdict else DESCRIPTIVE
        why = "a side is constant" if math.isnan(rho) else f"exact match spans less than {cfg['min_spread']:g}"
        return make_row(ANALYSIS, check, rho, threshold if verdict else "-", result, f"{why}: {detail}", n=len(fit))
    result = (PASS if rho > 0 and p <= st["alpha"] else FAIL) if verdict else DESCRIPTIVE
    return make_row(ANALYSIS, check, rho, threshold if verdict else "-", result, detail, p=p, n=len(fit))
