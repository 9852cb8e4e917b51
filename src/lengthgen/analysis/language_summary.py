"""E4's summary tables: per (model, method, positions, k), the mean loss over the scored tokens
of every pair of language models and the gap recovered (results/tables/influence.csv), and the
language models' validation curves (language_train.csv). No torch and no plotting: the figures
are reporting/language.py's."""

from __future__ import annotations

import pandas as pd

from lengthgen.support.fileio import read_intermediate

SUMMARY_KEYS = ["model", "method", "positions", "k"]
METHODS = ("greedy", "null", "attention", "random")


def recovered(scored: pd.DataFrame, method: str, k: int) -> pd.Series:
    """Fraction of each token's gap L_short - L_long that k tokens chosen by `method` recover."""
    return (scored["L_short"] - scored[f"L_{method}_{k}"]) / scored["gap"]


def summarize(scores: pd.DataFrame, ks: list) -> pd.DataFrame:
    """One row per (model, method, positions, k): mean loss over the scored tokens and, for the
    long model's selections, the distribution of the gap recovered."""
    scored = scores[scores["scored"]]
    rows = [_row("long", "full", "true", 0, scored["L_long"]), _row("long", "window", "true", 0, scored["L_short"])]
    for method in (m for m in METHODS if f"L_{m}_{ks[0]}" in scored):
        for k in ks:
            rows.append(_row("long", method, "true", k, scored[f"L_{method}_{k}"], recovered(scored, method, k)))
    for model in (m for m in ("short", "pose") if f"{m}_window" in scored):
        rows.append(_row(model, "window", "true", 0, scored[f"{model}_window"]))
        for positions in ("true", "coupled"):
            rows += [_row(model, "greedy", positions, k, scored[f"{model}_{positions}_{k}"]) for k in ks]
    return pd.DataFrame(rows).sort_values(SUMMARY_KEYS, kind="stable").reset_index(drop=True)


def _row(model, method, positions, k, loss: pd.Series, rec: pd.Series | None = None) -> dict:
    rec = pd.Series(dtype=float) if rec is None else rec
    return {
        "model": model, "method": method, "positions": positions, "k": k, "targets": int(loss.notna().sum()),
        "loss_mean": loss.mean(), "recovered_median": rec.median(), "recovered_mean": rec.mean(),
        "recovered_q25": rec.quantile(0.25), "recovered_q75": rec.quantile(0.75),
    }


def training_curves(logs: dict) -> pd.DataFrame:
    """Validation loss (and the training loss at the same steps) per language model, from
    {(name, seed): train_log.parquet}."""
    parts = []
    for (name, seed), path in sorted(logs.items()):
        log = read_intermediate(path, pd.read_parquet, "training log")
        parts.append(log.dropna(subset=["validation_loss"]).assign(model=name, seed=seed)[
            ["model", "seed", "step", "loss", "validation_loss"]])
    return pd.concat(parts, ignore_index=True)


def read_scores(paths) -> pd.DataFrame:
    """Every pair's score table, one after another (each row carries its pair's seed)."""
    return pd.concat([read_intermediate(p, pd.read_parquet, "score table") for p in paths], ignore_index=True)
