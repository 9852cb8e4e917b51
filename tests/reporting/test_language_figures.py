"""reporting/language.py: E4's stage writes its two tables and draws its three figures from every
pair's score table and the language models' training logs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthgen.analysis import language_summary
from lengthgen.reporting import language

KS = [1, 2]


def _pair(path, seed: int, n: int = 40) -> pd.DataFrame:
    """A pair's score table as influence.score writes it: screened tokens, half of them scored."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"seed": seed, "index": np.arange(n), "L_long": rng.uniform(2, 3, n)})
    df["L_short"] = df["L_long"] + rng.uniform(0, 1.5, n)
    df["gap"] = df["L_short"] - df["L_long"]
    df["scored"] = df["gap"] > 0.5
    for k in KS:
        for method, share in (("greedy", 0.6), ("null", 0.3), ("attention", 0.4), ("random", 0.1)):
            df[f"L_{method}_{k}"] = np.where(df["scored"], df["L_short"] - share * k / 2 * df["gap"], np.nan)
        for positions in ("true", "coupled"):
            df[f"short_{positions}_{k}"] = np.where(df["scored"], df["L_short"] - 0.1 * k, np.nan)
    df["short_window"] = np.where(df["scored"], df["L_short"] + 0.2, np.nan)
    df.to_parquet(path, index=False)
    return df


def _log(path, offset: float) -> None:
    steps = np.arange(0, 60, 10)
    pd.DataFrame({"step": steps, "loss": 5 - steps / 20 + offset,
                  "validation_loss": np.where(steps % 20 == 0, 5.2 - steps / 20 + offset, np.nan)}).to_parquet(path)


def test_the_stage_writes_the_tables_and_draws_every_figure(tmp_path):
    pairs = [tmp_path / f"seed{s}.parquet" for s in (0, 1)]
    scores = pd.concat([_pair(p, s) for s, p in enumerate(pairs)], ignore_index=True)
    logs = {}
    for name, seed in (("long", 0), ("short", 0), ("long", 1), ("short", 1)):
        logs[(name, seed)] = tmp_path / f"{name}{seed}.parquet"
        _log(logs[(name, seed)], 0.1 * seed)
    cfg = {"language": {"influence": {"k": KS, "delta": 0.5}}, "claims": {"recovered_min": 0.5}}
    figures = {name: tmp_path / f"{name}.png" for name in ("gap", "recovered", "short_model")}
    language.run(pairs, logs, cfg, tmp_path / "influence.csv", tmp_path / "language_train.csv", figures)

    summary = pd.read_csv(tmp_path / "influence.csv")
    expected = language_summary.summarize(scores, KS)
    assert list(summary.columns) == list(expected.columns) and len(summary) == len(expected)
    greedy = summary.query("model == 'long' and method == 'greedy' and k == 2")
    assert greedy["recovered_median"].iloc[0] == pytest.approx(0.6)  # share * k / 2 of each gap
    curves = pd.read_csv(tmp_path / "language_train.csv")
    assert len(curves) == 4 * 3 and set(curves["model"]) == {"long", "short"}  # validation steps only
    for path in figures.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
