"""Figures from the aggregated tables (never from raw runs, so they rerun alone)."""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")  # headless: clusters and CI have no display

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from lengthgen.analysis import claims  # noqa: E402
from lengthgen.analysis.aggregate import read_sweep  # noqa: E402
from lengthgen.support.fileio import save_png  # noqa: E402


def sparse_parity(sweep_csv, tasks: list[str], train_max: int, out, fit_min: float | None = None) -> None:
    """Accuracy against test length: one panel per scheme, one line per k, seed band. With
    `fit_min`, as in the scorecard, models below it at the longest training length are left
    out (one at chance everywhere would pull a mean down as if k had) and named in the title."""
    df = read_sweep(sweep_csv, tasks)
    schemes = sorted(df["scheme"].unique())  # a scheme whose models are all left out keeps its panel
    df, unfit, note = _fitted_only(df, train_max, fit_min)
    several_models_per_k = df.groupby("k")["task"].nunique().max() > 1
    sns.set_theme(style="whitegrid", context="paper")
    grid = sns.relplot(
        data=df, x="length", y="accuracy", hue="k", col="scheme", col_order=schemes,
        row="task" if several_models_per_k else None, kind="line", errorbar=("ci", 95), n_boot=2000, seed=0,
        estimator="mean", marker="o", palette="viridis", height=2.8, aspect=1.1, facet_kws={"sharey": True},
    )
    _mark_unfit(grid, unfit, several_models_per_k)
    lengths = sorted(df["length"].unique())
    for ax in grid.axes.flat:
        _length_axis(ax, lengths, train_max, (0.25, 1.02))  # a constant answer scores about 0.5; bands may dip lower
    _finish(grid, "test length n", ["Sparse parity: accuracy vs length (mean over fitted seeds, band = bootstrap 95% "
                                    "CI of the mean; dotted grey: unfit models)", *note], out)


def _fitted_only(df, train_max: int, fit_min: float | None):
    """The rows of the models that fit (the scorecard's rule), those of the rest, and the title
    lines naming the rest."""
    if fit_min is None:
        return df, df.iloc[:0], []
    fits = claims.fitted(df, train_max, fit_min)
    if fits.all():
        return df, df.iloc[:0], []
    if not fits.any():  # nothing would be left to draw: draw every model and say so
        return df, df.iloc[:0], [f"no model fits (accuracy < {fit_min:g} at n = {train_max}): every model drawn"]
    names = claims.model_names(df[~fits])
    return df[fits], df[~fits], textwrap.wrap(f"left out (accuracy < {fit_min:g} at n = {train_max}): {names}", 110)


def _mark_unfit(grid, unfit, by_task: bool) -> None:
    """Each unfit model's own curve, dotted grey on its scheme's panel: visible, not averaged in."""
    for (task, scheme, _), g in unfit.groupby(["task", "scheme", "seed"]):
        ax = grid.axes_dict.get((task, scheme) if by_task else scheme)
        if ax is not None:
            g = g.groupby("length")["accuracy"].mean()
            ax.plot(g.index, g.values, color="grey", lw=0.8, ls=":", zorder=1)


def sparsity_test(sweep_csv, tasks: list[str], train_max: int, out, cfg: dict, st: dict) -> None:
    """The statistic that decides claim 1, per scheme: each fitted model's mean accuracy at the
    long lengths against k (one line per model trained on a mixture of k), the mean per k with
    its bootstrap 95% CI, and the registered rule's effect, interval, p and verdict in the
    panel's title (claims.trend_test: the scorecard's numbers, same rule, same seeds)."""
    points = claims.claim1_points(read_sweep(sweep_csv, tasks), train_max, cfg)
    schemes = sorted(points["scheme"].unique())
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, max(1, len(schemes)), figsize=(3.0 * max(1, len(schemes)), 2.8), sharey=True,
                             squeeze=False)
    for ax, scheme in zip(axes.flat, schemes, strict=False):
        g = points[points["scheme"] == scheme].assign(model=lambda d: d["task"] + "/" + d["seed"].astype(str))
        ks = sorted(int(k) for k in g["k"].unique())
        sns.lineplot(data=g, x="k", y="accuracy", units="model", estimator=None, ax=ax, color="grey", alpha=0.35,
                     lw=0.8)
        sns.pointplot(data=g, x="k", y="accuracy", ax=ax, errorbar=("ci", 95), n_boot=st["n_boot"], seed=st["seed"],
                      color="black", markers="D", linestyles="-", native_scale=True)
        title = f"{scheme}\n{g['model'].nunique()} models"
        if len(ks) >= 2:
            t = claims.trend_test(g, ks, claims.k_draws(g, ks, st), cfg, st)
            title = (f"{scheme}: {t['result']}\neffect {t['effect']:.2f} [{t['ci'][0]:.2f}, {t['ci'][1]:.2f}], "
                     f"p = {t['p']:.4f}\n{g['model'].nunique()} models")
        ax.set_title(title, fontsize=9)
        ax.set_xticks(ks)
        ax.set_ylim(0.25, 1.02)
    axes.flat[0].set_ylabel(f"mean accuracy, n >= {cfg['min_length_ratio']:g}x")
    fig.suptitle(f"Claim 1 test: effect acc(k min) - acc(k max); PASS when p <= {st['alpha']:g} and the CI clears "
                 f"{cfg['effect_floor']:g}", y=1.17)
    save_png(fig, out, dpi=150)


def coupling(sweep_csv, tasks: dict, out) -> None:
    """Exact match against test length: one panel per task, one line per scheme, seed band
    (depths averaged within a seed). `tasks`: name -> longest training length."""
    df = read_sweep(sweep_csv, list(tasks))
    df = df.groupby(["task", "scheme", "seed", "length"], as_index=False)["accuracy"].mean()
    sns.set_theme(style="whitegrid", context="paper")
    grid = sns.relplot(
        data=df, x="length", y="accuracy", hue="scheme", style="scheme", col="task", col_order=sorted(tasks),
        kind="line", errorbar=("ci", 95), n_boot=2000, seed=0, estimator="mean", markers=True, height=2.8,
        aspect=1.1,
        facet_kws={"sharey": True, "sharex": False},
    )
    for task, ax in grid.axes_dict.items():
        _length_axis(ax, sorted(df.loc[df["task"] == task, "length"].unique()), tasks[task], (-0.02, 1.02))
    grid.set_titles(col_template="{col_name}")
    grid.set_axis_labels("test length (bits n / statements N)", "exact match")
    grid.figure.suptitle("Position coupling: exact match vs length (mean over seeds, band = bootstrap 95% CI of the "
                         "mean)", y=1.03)
    _save(grid, out)


def scale(sweep_csv, sizes: dict[str, str], train_max: int, out, cfg: dict, st: dict) -> None:
    """Claim 1's statistic per model size: each fitted model's mean accuracy beyond
    `min_length_ratio` x training against k, one line per size (mean, bootstrap 95% CI), one
    panel per scheme. `sizes`: E1 task -> "LxD"."""
    from lengthgen.analysis.scale import size_order

    points = claims.claim1_points(read_sweep(sweep_csv, list(sizes)), train_max, cfg)
    points = points.assign(size=points["task"].map(sizes))
    order = [s for s in size_order(sizes) if s in set(points["size"])]
    sns.set_theme(style="whitegrid", context="paper")
    grid = sns.relplot(
        data=points, x="k", y="accuracy", hue="size", hue_order=order, col="scheme", kind="line", marker="o",
        errorbar=("ci", 95), n_boot=st["n_boot"], seed=st["seed"], estimator="mean", palette="rocket_r",
        height=2.8, aspect=1.0, facet_kws={"sharey": True},
    )
    for ax in grid.axes.flat:
        ax.set_xticks(sorted(points["k"].unique()))
        ax.set_ylim(0.25, 1.02)
    grid.set_titles(col_template="{col_name}")
    grid.set_axis_labels("k (sparsity)", f"mean accuracy, n >= {cfg['min_length_ratio']:g}x")
    grid.legend.set_title("layers x width")
    sns.move_legend(grid, "lower left", bbox_to_anchor=(0.2, 0.17), frameon=True)  # where k = 1 leaves room
    grid.figure.suptitle("Beyond the paper: the sparsity effect per model size\n(fitted models; band = bootstrap "
                         "95% CI of the mean)", y=1.08)
    _save(grid, out)


def needle(sweep_csv, tasks: dict, out, fit_min: float | None = None) -> None:
    """Needle retrieval: accuracy against haystack length, one line per k (needles the answer
    combines), one panel per task and scheme, fitted models only. `tasks`: name -> n_max."""
    df = read_sweep(sweep_csv, list(tasks))
    parts = [_fitted_only(df[df["task"] == t], n_max, fit_min) for t, n_max in tasks.items()]
    fit = pd.concat([p[0] for p in parts])
    note = [line for p in parts for line in p[2]]
    sns.set_theme(style="whitegrid", context="paper")
    grid = sns.relplot(
        data=fit, x="length", y="accuracy", hue="k", row="task", col="scheme", kind="line", errorbar=("ci", 95),
        n_boot=2000, seed=0, estimator="mean", marker="o", palette="viridis", height=2.8, aspect=1.1,
        facet_kws={"sharey": True},
    )
    for (task, _), ax in grid.axes_dict.items():
        _length_axis(ax, sorted(fit.loc[fit["task"] == task, "length"].unique()), tasks[task], (-0.02, 1.02))
    _finish(grid, "haystack length n", ["Beyond the paper: needle retrieval vs haystack length (fitted models; band = "
                                        "bootstrap 95% CI of the mean)", *note], out)


def _length_axis(ax, lengths: list, train_max: int, ylim: tuple) -> None:
    """Test lengths on a log2 axis, ticked where tested; a dashed line at the longest trained."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.axvline(train_max, color="grey", lw=0.8, ls="--")
    ax.set_ylim(*ylim)


def _finish(grid, xlabel: str, title: list[str], out) -> None:
    """Row-by-column titles, axis labels and a title whose extra lines (notes) push it up."""
    grid.set_titles(row_template="{row_name}", col_template="{col_name}")
    grid.set_axis_labels(xlabel, "accuracy")
    grid.figure.suptitle("\n".join(title), y=1.03 + 0.09 * (len(title) - 1))
    _save(grid, out)


def _save(grid, out) -> None:
    save_png(grid.figure, out, dpi=150)
