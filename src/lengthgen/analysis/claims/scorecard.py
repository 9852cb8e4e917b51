"""The scorecard's two pages, claims.csv and claims.md, from every claim's rows."""

from __future__ import annotations

import math

import pandas as pd

from lengthgen.analysis.claims.rows import DESCRIPTIVE, NOT_MEASURED, heading, verdict
from lengthgen.support import markdown
from lengthgen.support.fileio import atomic_paths

COLUMNS = ["claim", "experiment", "check", "value", "ci_low", "ci_high", "p", "n", "threshold", "result", "detail"]

RUN_KINDS = {
    "exploratory": "exploratory: this grid's results shaped the rules; `make confirm` decides them",
    "confirmatory": "confirmatory: fresh model seeds and fresh data, which no decision has seen",
}


def _scorecard_cells(r) -> list:
    ci = "" if math.isnan(r.ci_low) else f"[{r.ci_low:.4f}, {r.ci_high:.4f}]"
    p = "" if math.isnan(r.p) else f"{r.p:.4f}"
    result = r.result if r.result in (DESCRIPTIVE, NOT_MEASURED) else f"**{r.result}**"
    value = "" if math.isnan(r.value) else f"{r.value:.4f}"
    return [r.claim, r.experiment, r.check, value, ci, p, r.n, r.threshold, result, r.detail]


def write_scorecard(rows: list[dict], csv_out, md_out, run: str = "exploratory") -> None:
    """claims.csv and claims.md, renamed into place together: never one page of a new
    scorecard beside the other of an old one."""
    df = pd.DataFrame(rows, columns=COLUMNS)
    lines = ["# Claims scorecard\n", f"Run: {RUN_KINDS[run]}.\n"]
    lines += [f"- {heading(c)}: {verdict(rows, c)}" for c in sorted(df["claim"].unique())]
    lines += ["", *markdown.table(["claim", "experiment", "check", "value", "95% CI", "p", "n", "threshold", "result",
                                   "detail"], (_scorecard_cells(r) for r in df.itertuples()))]
    with atomic_paths([csv_out, md_out]) as (csv_tmp, md_tmp):
        df.to_csv(csv_tmp, index=False, float_format="%.4f", lineterminator="\n")
        md_tmp.write_text("\n".join(lines) + "\n")
