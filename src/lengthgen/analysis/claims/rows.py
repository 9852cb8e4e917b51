"""The scorecard's rows and words, shared by every claim's module: a row (`make_row`) and its
experiment (`tag`), the verdict words and constants, and the one rule from outcomes to a
claim word (`claim_word`, `verdict`)."""

from __future__ import annotations

import math

import pandas as pd

from lengthgen.analysis.stats import FAIL, INCONCLUSIVE, PASS

DESCRIPTIVE, NOT_MEASURED = "descriptive", "N/A"


def make_row(claim, check, value, threshold, result, detail, ci=(math.nan, math.nan), p=math.nan, n=0) -> dict:
    return {"claim": claim, "experiment": "", "check": check, "value": _r(value), "ci_low": _r(ci[0]),
            "ci_high": _r(ci[1]), "p": _r(p), "n": int(n), "threshold": threshold, "result": result, "detail": detail}


def tag(rows: list[dict], experiment: str) -> list[dict]:
    """The rows with the experiment they come from (E1..E4): claim words are decided per experiment."""
    return [{**r, "experiment": experiment} for r in rows]


def _r(x) -> float:
    return round(float(x), 4)


def model_names(rows: pd.DataFrame) -> str:
    """'task/scheme/seedN, ...' of the distinct models among sweep rows ('' for none)."""
    models = rows[["task", "scheme", "seed"]].drop_duplicates().itertuples(index=False)
    return ", ".join(f"{t}/{s}/seed{seed}" for t, s, seed in models)


# Claims whose experiments this grid does not run: listed, so the scorecard always covers
# every claim of the paper and says plainly which ones it did not measure.
EXPERIMENTS = {"1 sparsity": "E1", "2 coupling": "E2, E3", "3 language": "E4"}
NOT_IN_GRID = {
    "1 sparsity": "sparse parity (E1)",
    "2 coupling": "position coupling and PPC (E2 parity with scratchpad, E3 variable assignment)",
    "3 language": "influential tokens in natural language (E4)",
}


def unmeasured_rows(claims) -> list[dict]:
    return [{**make_row(claim, f"{NOT_IN_GRID[claim]}: not in this grid", math.nan, "-", NOT_MEASURED,
                    "no task of this experiment configured"), "experiment": EXPERIMENTS[claim]} for claim in claims]


def heading(claim: str) -> str:
    """How a verdict line names a claim of the paper, or an analysis beyond it."""
    return f"claim {claim}" if claim in NOT_IN_GRID else claim


# -- claim words ------------------------------------------------------------------------------

REPRODUCED, PARTLY, NOT_REPRODUCED, UNDECIDED = "reproduced", "partly reproduced", "not reproduced", "undecided"
_LEVEL = {PASS: "pass", REPRODUCED: "pass", FAIL: "fail", NOT_REPRODUCED: "fail", INCONCLUSIVE: "open",
          UNDECIDED: "open", PARTLY: "partial"}


def claim_word(outcomes) -> str:
    """The one rule from outcomes to a claim word, used at two levels: a claim's verdict rows
    within one experiment (PASS / FAIL / INCONCLUSIVE), then its experiments' words. Every
    outcome passes: reproduced. Every outcome open (INCONCLUSIVE, undecided): undecided. No pass
    at all, and at least one fail: not reproduced. Anything else (a pass beside a fail or an
    open outcome): partly reproduced. An open outcome alone never makes "not reproduced"."""
    levels = [_LEVEL[o] for o in outcomes]
    if not levels:
        raise ValueError("claim_word: no outcomes")
    if all(lv == "pass" for lv in levels):
        return REPRODUCED
    if all(lv == "open" for lv in levels):
        return UNDECIDED
    if "pass" not in levels and "partial" not in levels:
        return NOT_REPRODUCED
    return PARTLY


def verdict(rows: list[dict], claim: str) -> str:
    """One line per claim: its word (`claim_word`) with the results it counts; where the claim
    spans several experiments (claim 2: E2 and E3), each experiment's word follows. An analysis
    beyond the paper reproduces nothing: its line only counts its results."""
    mine = [r for r in rows if r["claim"] == claim and r["result"] in (PASS, FAIL, INCONCLUSIVE)]
    if not mine:
        return "not measured"
    if claim not in NOT_IN_GRID:
        return f"beyond the paper, not one of its claims ({_tally(mine)})"
    by_exp: dict[str, list[dict]] = {}
    for r in mine:
        by_exp.setdefault(r.get("experiment") or "", []).append(r)
    words = {exp: claim_word([r["result"] for r in rs]) for exp, rs in sorted(by_exp.items())}
    word = claim_word(words.values())
    if len(words) == 1:
        return f"{word} ({_tally(mine)})"
    return f"{word}: " + "; ".join(f"{exp} {w} ({_tally(by_exp[exp])})" for exp, w in words.items())


def _tally(rows: list[dict]) -> str:
    results = [r["result"] for r in rows]
    return ", ".join(f"{results.count(x)} {x}" for x in (PASS, FAIL, INCONCLUSIVE) if x in results)
