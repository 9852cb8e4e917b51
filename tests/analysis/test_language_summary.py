"""E4's summary table (influence.csv): the gap recovered and the mean losses, by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthgen.analysis import language_summary


def _scores() -> pd.DataFrame:
    """Four scored tokens and one unscored, with hand-picked losses."""
    df = pd.DataFrame({"L_long": [1.0, 1.0, 2.0, 0.0, 3.0], "L_short": [3.0, 2.0, 3.0, 1.0, 3.0]})
    df["gap"] = df["L_short"] - df["L_long"]
    df["scored"] = [True, True, True, True, False]
    df["L_greedy_1"] = [2.0, 1.5, 2.5, 0.5, np.nan]  # recovers 0.5 of each gap
    df["L_attention_1"] = [2.5, 1.5, 3.0, 1.0, np.nan]  # 0.25, 0.5, 0, 0
    df["L_random_1"] = [3.0, 2.0, 3.0, 1.0, np.nan]  # 0
    df["short_window"] = [4.0, 4.0, 4.0, 4.0, np.nan]
    df["short_true_1"] = [3.0, 3.0, 3.0, 3.0, np.nan]
    df["short_coupled_1"] = [5.0, 5.0, 5.0, 5.0, np.nan]
    return df


def test_summary_rows_hold_hand_computed_recovery():
    s = language_summary.summarize(_scores(), [1]).set_index(["model", "method", "positions", "k"])
    assert s.loc[("long", "greedy", "true", 1), "recovered_median"] == pytest.approx(0.5)
    assert s.loc[("long", "attention", "true", 1), "recovered_median"] == pytest.approx(0.125)
    assert s.loc[("long", "full", "true", 0), "targets"] == 4  # the unscored token is left out
    assert s.loc[("short", "greedy", "coupled", 1), "loss_mean"] == pytest.approx(5.0)
