"""The claims scorecard: each claim of the paper as a check with its measured value,
its threshold from the config, and PASS or FAIL. A run states by itself whether it
reproduced the paper."""

from __future__ import annotations

import pandas as pd

from lengthgen.aggregate import summarize
from lengthgen.fileio import atomic_path, write_text


def spearman(x, y) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    rx, ry = pd.Series(x).rank(), pd.Series(y).rank()
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(rx.corr(ry))


def sparsity_checks(sweep: pd.DataFrame, sparse_tasks: list[str], cfg: dict) -> list[dict]:
    """Claim 1, per scheme: at the longest test length, accuracy falls with k."""
    df = summarize(sweep[sweep["task"].isin(sparse_tasks)])
    rows = []
    for scheme, g in df.groupby("scheme", sort=True):
        longest = g[g["length"] == g["length"].max()]
        by_k = longest.groupby("k")["mean"].mean().sort_index()
        rho = spearman(by_k.index, by_k.values)
        drop = float(by_k.iloc[0] - by_k.iloc[-1])
        acc = ", ".join(f"k={k}: {v:.3f}" for k, v in by_k.items())
        n = int(longest["length"].iloc[0])
        ok_rho = rho <= cfg["spearman_max"]
        rows.append(_row("claim 1: sparsity", f"{scheme}: Spearman(k, accuracy) at n={n}", rho,
                         f"<= {cfg['spearman_max']}", ok_rho, acc))
        rows.append(_row("claim 1: sparsity", f"{scheme}: accuracy(k={by_k.index[0]}) - accuracy(k={by_k.index[-1]}) at n={n}",
                         drop, f">= {cfg['min_drop']}", drop >= cfg["min_drop"], acc))
    return rows


def _row(claim, check, value, threshold, ok, detail) -> dict:
    return {"claim": claim, "check": check, "value": round(value, 4), "threshold": threshold,
            "result": "PASS" if ok else "FAIL", "detail": detail}


def write_scorecard(rows: list[dict], csv_out, md_out) -> None:
    df = pd.DataFrame(rows, columns=["claim", "check", "value", "threshold", "result", "detail"])
    with atomic_path(csv_out) as tmp:
        df.to_csv(tmp, index=False, float_format="%.4f", lineterminator="\n")
    lines = ["# Claims scorecard\n", "| claim | check | value | threshold | result | detail |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.claim} | {r.check} | {r.value:.4f} | {r.threshold} | **{r.result}** | {r.detail} |" for r in df.itertuples()]
    write_text(md_out, "\n".join(lines) + "\n")
