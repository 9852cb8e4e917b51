"""The attention analysis's figure, from its table (tables/attention.csv) alone, so it reruns by
itself."""

from __future__ import annotations

import pandas as pd

from lengthgen.analysis import attention
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import save_png

MEASURES = (("attribution", "attribution on dependencies"),
            ("attention", "attention mass on dependencies\n(best head, last layer)"))


def _language_panels(df: pd.DataFrame, axes) -> None:
    """E4's column: per layer of the long models (mean over heads, and its best head; each head
    first averaged over the pairs of models), the overlap of the attention top k with the greedy
    influential tokens, and the attention mass on them."""
    per_head = df.dropna(subset=["layer"]).groupby(["layer", "head", "metric"])["value"].mean().reset_index()
    whole = df[df["layer"].isna()].groupby("metric")["value"].mean()
    k = int(round(whole["chance"] * df["length"].iloc[0]))
    for ax, metrics, chance in ((axes[0], ("jaccard",), "jaccard_chance"), (axes[1], ("mass", "topk_mass"), "chance")):
        for metric, color in zip(metrics, ("C0", "C1"), strict=False):
            g = per_head[per_head["metric"] == metric].groupby("layer")["value"]
            label = {"jaccard": f"Jaccard, top {k} vs greedy {k}", "mass": f"on the greedy {k}",
                     "topk_mass": f"top {k} mass"}[metric]
            ax.plot(g.mean().index, g.mean().values, marker="o", color=color, label=f"{label} (mean head)")
            ax.plot(g.max().index, g.max().values, marker="^", ls="--", color=color, label=f"{label} (best head)")
        ax.axhline(whole[chance], color="grey", ls=":", lw=0.9)
        ax.set_xticks(sorted(per_head["layer"].unique()))
        ax.set_xlabel("layer of the long model")
        ax.legend(fontsize=6)
    tokens, pairs = int(df.groupby("seed")["examples"].first().sum()), df["seed"].nunique()
    axes[0].set_title(f"E4 long language model{'s' if pairs > 1 else ''}\n({tokens} scored tokens, {pairs} "
                      f"pair{'s' if pairs > 1 else ''})")


def figure(csv, kinds: dict, out) -> None:
    """Attribution and attention mass on the dependency set against test length: one column per
    experiment (E1's tasks together, one line per k; E2 and E3 one line per scheme), mean over
    seeds with a bootstrap 95% band; dotted, what a uniform row would put there."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    df = attention.read(csv)
    language, df = df[df["task"] == attention.LANGUAGE], df[df["task"] != attention.LANGUAGE]
    unknown = sorted(set(df["task"]) - set(kinds))
    if unknown:
        raise UserError(f"{csv}: task(s) {', '.join(unknown)} not in this configuration; rerun the workflow")
    models = attention.per_model(df)
    ks = df.dropna(subset=["k"]).groupby("task")["k"].first() if "k" in df.columns else pd.Series(dtype="Int32")
    models["panel"] = [attention.EXPERIMENTS[kinds[t]] if kinds[t] == "sparse_parity"  # E1's tasks share a panel
                       else f"{attention.EXPERIMENTS.get(kinds[t], '')}\n({t})" for t in models["task"]]
    models["line"] = [f"k={ks[t]}" if kinds[t] == "sparse_parity" and t in ks else s
                      for t, s in zip(models["task"], models["scheme"], strict=True)]
    panels = sorted(models["panel"].unique(), key=lambda p: (not p.startswith("E1"), p))
    sns.set_theme(style="whitegrid", context="paper")
    columns = len(panels) + (not language.empty)
    fig, axes = plt.subplots(2, columns, figsize=(3.4 * columns, 5.6), squeeze=False, sharey="row")
    if not language.empty:
        _language_panels(language, axes[:, -1])
    for col, panel in enumerate(panels):
        sub = models[models["panel"] == panel].sort_values("line")
        lines = sorted(sub["line"].unique())
        palette = dict(zip(lines, sns.color_palette("viridis" if lines[0].startswith("k=") else "tab10",
                                                    n_colors=len(lines)), strict=True))
        for row, (measure, label) in enumerate(MEASURES):
            ax = axes[row, col]
            sns.lineplot(data=sub, x="length", y=measure, hue="line", hue_order=lines, palette=palette,
                         errorbar=("ci", 95), n_boot=1000, seed=0, marker="o", ax=ax, legend=row == 0)
            for line, g in sub.groupby("line"):
                chance = g.groupby("length")["chance"].mean()
                ax.plot(chance.index, chance.values, ls=":", lw=0.9, color=palette[line])
            lengths = sorted(sub["length"].unique())
            ax.set_xscale("log", base=2)
            ax.set_xticks(lengths, [str(n) for n in lengths])
            ax.minorticks_off()
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("test length n")
            ax.set_ylabel(label if col == 0 else "")
            ax.set_title(panel if row == 0 else "")
            if row == 0 and ax.get_legend():
                ax.legend(fontsize=7, title=None)
    fig.suptitle("Attention sparsity: mass on the tokens each target depends on\n(mean over seeds, 95% band; "
                 "dotted: a uniform row)", y=1.0)
    fig.tight_layout()
    save_png(fig, out, dpi=130)
