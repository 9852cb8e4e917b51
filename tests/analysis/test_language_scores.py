"""E4's per-token table (tables/language_scores.csv): made from the pairs' score tables, checked
to be of their pairs; and each committed scorecard's claim-3 rows recomputed from the committed
table with the function the scorecard uses."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from lengthgen.analysis import language_scores as scores
from lengthgen.analysis.claims import language_checks
from lengthgen.support.errors import UserError


def _pair(path: Path, seed: int, n: int = 6) -> pd.DataFrame:
    """A pair's score table as influence.score writes it: screened rows, some scored."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"index": np.arange(100, 100 + n), "token": 1, "L_long": rng.uniform(1, 2, n)})
    df["L_short"] = df["L_long"] + rng.uniform(0.1, 1, n)
    df = df.assign(seed=seed, document=np.arange(n) % 3, gap=df["L_short"] - df["L_long"], scored=np.arange(n) % 2 == 0)
    for column in ("L_greedy_1", "L_null_1", "L_random_1", "short_window", "short_coupled_1"):
        df[column] = np.where(df["scored"], rng.uniform(1, 3, n), np.nan)
    df["greedy_distances"] = [[5]] * n
    df.to_parquet(path, index=False)
    return df


def test_the_table_holds_every_pairs_scored_tokens_rounded(tmp_path):
    pairs = [_pair(tmp_path / f"seed{s}.parquet", s) for s in (4, 3)]
    scores.run([tmp_path / "seed4.parquet", tmp_path / "seed3.parquet"], [4, 3], tmp_path / "t.csv")
    table = scores.read(tmp_path / "t.csv")
    assert list(table.columns) == [*scores.COLUMNS, "L_greedy_1", "L_null_1", "L_random_1", "short_window",
                                   "short_coupled_1"]
    assert table["seed"].tolist() == [3, 3, 3, 4, 4, 4]  # by pair, then stream index
    want = pd.concat([p[p["scored"]] for p in pairs[::-1]])
    assert table["L_null_1"].to_numpy() == pytest.approx(want["L_null_1"].to_numpy(), abs=5e-7)
    text = pd.read_csv(tmp_path / "t.csv", dtype=str)
    assert (text["L_greedy_1"].str.split(".").str[1].str.len() == scores.DECIMALS).all()


def test_a_pairs_table_of_another_seed_stops_in_one_line(tmp_path):
    _pair(tmp_path / "seed0.parquet", 1)
    with pytest.raises(UserError, match=r"seed0.parquet: scores of model seed\(s\) \[1\], expected 0"):
        scores.collect([tmp_path / "seed0.parquet"], [0])


@pytest.mark.parametrize("results", ["results", "results-confirm"])
def test_committed_claim_3_rows_recompute_from_the_committed_scores(committed_results, results):
    """The committed scorecard's claim-3 rows, recomputed from the committed per-token table
    with the run's own claims config (its config.yaml): a table or scorecard edited, regenerated
    apart, or missing fails here."""
    tables = committed_results / results / "tables"
    for path in (tables / "language_scores.csv", tables / "claims.csv", committed_results / results / "config.yaml"):
        assert path.exists(), (f"{path.relative_to(committed_results)}: not committed; run the workflow and commit "
                               "its tables")
    cfg = yaml.safe_load((committed_results / results / "config.yaml").read_text())["claims"]
    rows = pd.DataFrame(language_checks(scores.read(tables / "language_scores.csv"), cfg["language"], cfg["stats"]))
    committed = pd.read_csv(tables / "claims.csv", keep_default_na=False)
    committed = committed[committed["claim"] == "3 language"].reset_index(drop=True)
    assert rows["check"].tolist() == committed["check"].tolist()
    assert rows["result"].tolist() == committed["result"].tolist()
    assert rows["n"].tolist() == committed["n"].astype(int).tolist()
    assert rows["detail"].tolist() == committed["detail"].tolist()
    for column in ("value", "ci_low", "ci_high"):
        got = rows[column].to_numpy(dtype=float)
        want = pd.to_numeric(committed[column]).to_numpy(dtype=float)
        assert np.allclose(got, want, atol=1e-9, equal_nan=True), column
