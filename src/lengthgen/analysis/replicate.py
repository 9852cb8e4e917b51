"""Does a verdict replicate? The scorecards of two runs of one grid (the default, and the same
grid on disjoint model seeds, or on another CPU) side by side, row for row.

Rows are matched by claim and check; a check that names the best baseline it was compared
with ("... (pointer)") matches whichever baseline the other run found best, and says so.
"""

from __future__ import annotations

import re

import pandas as pd

from lengthgen.analysis.aggregate import read_table
from lengthgen.analysis.claims import DESCRIPTIVE, heading, verdict
from lengthgen.support import markdown
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import write_text

_BEST = re.compile(r" \(([A-Za-z0-9_]+)\)$")


def read_scorecard(path) -> pd.DataFrame:
    try:
        df = read_table(path, ["claim", "check", "value", "result"], "a scorecard", keep_default_na=False)
    except FileNotFoundError:
        raise UserError(f"{path}: scorecard not found; run that configuration first") from None
    df = df[df["result"] != DESCRIPTIVE].copy()
    df["key"] = df["check"].str.replace(_BEST, "", regex=True)
    return df


def compare(main: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
    both = main.merge(other, on=["claim", "key"], how="outer", suffixes=("_main", "_other"), sort=True)
    both["replicates"] = both["result_main"] == both["result_other"]
    return both


def report(main: pd.DataFrame, other: pd.DataFrame, names=("default", "replicate")) -> str:
    both = compare(main, other)
    lines = [f"# Replication: {names[0]} against {names[1]}\n"]
    for claim in sorted(both["claim"].unique()):
        rows = both[both["claim"] == claim]
        same = bool(rows["replicates"].all())
        lines.append(f"- {heading(claim)}: {names[0]} {verdict(main.to_dict('records'), claim)}; {names[1]} "
                     f"{verdict(other.to_dict('records'), claim)}; "
                     + ("every verdict replicates" if same else f"{int((~rows['replicates']).sum())} row(s) differ"))
    body = [[r.claim, r.key, _cell(r.value_main, r.result_main), _cell(r.value_other, r.result_other),
             "yes" if r.replicates else "**no**"] for r in both.itertuples()]
    lines += ["", *markdown.table(["claim", "check", *names, "replicates"], body)]
    return "\n".join(lines) + "\n"


def _cell(value, result) -> str:
    if pd.isna(result):
        return "(absent)"
    return f"{result} ({value})" if value != "" and not pd.isna(value) else str(result)


def run(main_csv, other_csv, out, names=("default", "replicate")) -> bool:
    main, other = read_scorecard(main_csv), read_scorecard(other_csv)
    text = report(main, other, names)
    write_text(out, text)
    print(text, end="")
    return bool(compare(main, other)["replicates"].all())
