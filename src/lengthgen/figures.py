"""Figures from the aggregated tables (never from raw runs, so they rerun alone)."""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")  # headless: clusters and CI have no display

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from lengthgen import claims  # noqa: E402
from lengthgen.aggregate import read_sweep  # noqa: E402
from lengthgen.fileio import atomic_path  # noqa: E402


def sparse_parity(sweep_csv, tasks: list[str], train_max: int, out, fit_min: float | None = None) -> None:
    """Accuracy against test length: one panel per scheme, one line per k, seed band. With
    `fit_min`, as in the scorecard, models below it at the longest training length are left
    out (one at chance everywhere would pull a mean down as if k had) and named in the title."""
    df = read_sweep(sweep_csv)
    df = df[df["task"].isin(tasks)]
    schemes = sorted(df["scheme"].unique())  # a scheme whose models are all left out keeps its panel
    df, note = _fitted_only(df, train_max, fit_min)
    several_models_per_k = df.groupby("k")["task"].nunique().max() > 1
    sns.set_theme(style="whitegrid", context="paper")
    grid = sns.relplot(
        data=df, x="length", y="accuracy", hue="k", col="scheme", col_order=schemes,
        row="task" if several_models_per_k else None, kind="line", errorbar=("pi", 100), estimator="mean",
        marker="o", palette="viridis", height=2.8, aspect=1.1, facet_kws={"sharey": True},
    )
    lengths = sorted(df["length"].unique())
    for ax in grid.axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.minorticks_off()
        ax.axvline(train_max, color="grey", lw=0.8, ls="--")  # longest training length
        ax.set_ylim(0.25, 1.02)  # a constant answer scores about 0.5; bands may dip lower
    grid.set_titles(row_template="{row_name}", col_template="{col_name}")
    grid.set_axis_labels("test length n", "accuracy")
    title = "\n".join(["Sparse parity: accuracy vs length (mean over seeds, band = min..max)", *note])
    grid.figure.suptitle(title, y=1.03 + 0.09 * len(note))
    _save(grid, out)


def _fitted_only(df, train_max: int, fit_min: float | None):
    """The rows of the models that fit (the scorecard's rule) and the title lines naming the rest."""
    if fit_min is None:
        return df, []
    fits = claims.fitted(df, train_max, fit_min)
    if fits.all():
        return df, []
    if not fits.any():  # nothing would be left to draw: draw every model and say so
        return df, [f"no model fits (accuracy < {fit_min:g} at n = {train_max}): every model drawn"]
    names = claims.model_names(df[~fits])
    return df[fits], textwrap.wrap(f"left out (accuracy < {fit_min:g} at n = {train_max}): {names}", 110)


def coupling(sweep_csv, tasks: dict, out) -> None:
    """Exact match against test length: one panel per task, one line per scheme, seed band
    (depths averaged within a seed). `tasks`: name -> longest training length."""
    df = read_sweep(sweep_csv)
    df = df[df["task"].isin(list(tasks))]
    df = df.groupby(["task", "scheme", "seed", "length"], as_index=False)["accuracy"].mean()
    sns.set_theme(style="whitegrid", context="paper")
    grid = sns.relplot(
        data=df, x="length", y="accuracy", hue="scheme", style="scheme", col="task", col_order=sorted(tasks),
        kind="line", errorbar=("pi", 100), estimator="median", markers=True, height=2.8, aspect=1.1,
        facet_kws={"sharey": True, "sharex": False},
    )
    for task, ax in grid.axes_dict.items():
        lengths = sorted(df.loc[df["task"] == task, "length"].unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.minorticks_off()
        ax.axvline(tasks[task], color="grey", lw=0.8, ls="--")  # longest training length
        ax.set_ylim(-0.02, 1.02)
    grid.set_titles(col_template="{col_name}")
    grid.set_axis_labels("test length (bits n / statements N)", "exact match")
    grid.figure.suptitle("Position coupling: exact match vs length (median over seeds, band = min..max)", y=1.03)
    _save(grid, out)


def _save(grid, out) -> None:
    with atomic_path(out) as tmp:
        grid.figure.savefig(tmp, dpi=150, bbox_inches="tight", format="png", metadata={"Software": None})
    plt.close(grid.figure)
