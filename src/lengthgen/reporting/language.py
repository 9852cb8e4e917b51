"""E4's figures, and the stage that writes them with E4's summary tables
(analysis/language_summary.py), from the per-token scores of every pair of language models
(pooled) and the language models' training logs."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from lengthgen.analysis.aggregate import write_csv  # noqa: E402
from lengthgen.analysis.language_summary import (  # noqa: E402
    METHODS,
    read_scores,
    recovered,
    summarize,
    training_curves,
)
from lengthgen.support.fileio import save_png  # noqa: E402


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
