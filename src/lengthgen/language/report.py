"""E4 tables and figures from the per-token scores of every pair of language models (pooled)
and the language models' training logs."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from lengthgen.analysis.aggregate import write_csv  # noqa: E402
from lengthgen.support.fileio import read_intermediate, save_png  # noqa: E402

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


# -- figures ---------------------------------------------------------------------------------


def gap_figure(scores: pd.DataFrame, delta: float, out) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    gap = scores["gap"]
    ax.hist(gap, bins=60, color="0.5")
    ax.axvline(delta, color="C3", linestyle="--", label=f"delta = {delta} ({(gap > delta).mean():.1%} above)")
    ax.set_yscale("log")
    ax.set(xlabel="L_short - L_long (nats)", ylabel="validation tokens",
           title=f"Gain from long context ({len(gap)} tokens, {_pairs(scores)})")
    ax.legend(frameon=False)
    _save(fig, out)


def recovered_figure(scores: pd.DataFrame, ks: list, threshold: float, out) -> None:
    scored = scores[scores["scored"]]
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for i, method in enumerate(m for m in METHODS if f"L_{m}_{ks[0]}" in scored):
        rec = [recovered(scored, method, k) for k in ks]
        label = LABELS.get(method, method)
        ax.plot(ks, [r.median() for r in rec], marker="o", color=f"C{i}", label=label)
        ax.fill_between(ks, [r.quantile(0.25) for r in rec], [r.quantile(0.75) for r in rec], color=f"C{i}",
                        alpha=0.15)
    ax.axhline(threshold, color="0.3", linestyle=":", label=f"claim 3 bar ({threshold})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set(xlabel="k distant tokens", ylabel="gap recovered (median, IQR)",
           title=f"Influential tokens ({len(scored)} tokens with a gap, {_pairs(scored)})")
    ax.legend(frameon=False)
    _save(fig, out)


def short_model_figure(summary: pd.DataFrame, out) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for i, model in enumerate(m for m in ("short", "pose") if m in set(summary["model"])):
        rows = summary[summary["model"] == model]
        window = rows[rows["method"] == "window"]["loss_mean"].iloc[0]
        for positions, style in (("coupled", "-"), ("true", "--")):
            part = rows[(rows["method"] == "greedy") & (rows["positions"] == positions)]
            ax.plot([0, *part["k"]], [window, *part["loss_mean"]], style, marker="o", color=f"C{i}",
                    label=f"{model} model, {positions} positions")
    long_rows = summary[summary["model"] == "long"].set_index("method")["loss_mean"]
    ax.axhline(long_rows["full"], color="0.3", linestyle=":", label="long model, full context")
    ax.set(xlabel="k greedy tokens shown beside the short window", ylabel="mean loss (nats)",
           title="Short-context models given the influential tokens")
    ax.legend(frameon=False, fontsize=8)
    _save(fig, out)


LABELS = {"null": "null (greedy, another document's tokens)", "random": "random (expectation)"}


def _pairs(scores: pd.DataFrame) -> str:
    n = scores["seed"].nunique()
    return f"{n} model pair{'s' if n != 1 else ''}"


def _save(fig, out) -> None:
    fig.tight_layout()
    save_png(fig, out, dpi=120, tight=False)


def run(score_paths, train_logs: dict, cfg: dict, csv, train_csv, figures: dict) -> None:
    """influence.csv, language_train.csv and the three E4 figures, over every pair's scores.
    `train_logs`: {(name, seed): train_log.parquet}."""
    scores = read_scores(score_paths)
    ks = sorted(cfg["language"]["influence"]["k"])
    summary = summarize(scores, ks)
    write_csv(summary, csv)
    write_csv(training_curves(train_logs), train_csv)
    gap_figure(scores, cfg["language"]["influence"]["delta"], figures["gap"])
    recovered_figure(scores, ks, cfg["claims"]["recovered_min"], figures["recovered"])
    short_model_figure(summary, figures["short_model"])
