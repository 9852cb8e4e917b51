"""The analyses beyond the paper on synthetic sweeps with known answers: claim 1's rule per
model size, the size interaction (grows, shrinks, no change), the needle rows, and that none
of them counts toward the paper's claims."""

import re

import numpy as np
import pandas as pd
import pytest
from conftest import run_snakemake
from test_claims import ST, mixture_sweep

from lengthgen.analysis import scale
from lengthgen.analysis.claims import verdict, write_scorecard

SPARSITY = {"min_length_ratio": 8, "fit_min": 0.95, "min_models_per_k": 3, "effect_floor": 0.1}
SIZES = {"e1_small": "1x32", "e1_mid": "2x64", "e1_large": "4x128"}


def sized(effects: dict[str, float], seeds=range(8)) -> pd.DataFrame:
    """One mixture-trained model per seed and size; accuracy beyond training falls from 0.9 at
    k=1 by the size's effect at k=4."""
    parts = []
    for task, effect in effects.items():
        acc = {k: 0.9 - effect * (k - 1) / 3 for k in (1, 2, 3, 4)}
        parts.append(mixture_sweep(acc, seeds=seeds).assign(task=task))
    return pd.concat(parts, ignore_index=True)


def interaction(rows) -> dict:
    (row,) = [r for r in rows if "effect at" in r["check"]]
    return row


def test_size_order_is_by_width_then_depth():
    assert scale.size_order({"a": "4x128", "b": "2x64", "c": "6x64", "d": "1x32"}) == ["1x32", "2x64", "6x64", "4x128"]


def test_an_effect_that_grows_with_size_is_read_as_growing():
    rows = scale.scale_checks(sized({"e1_small": 0.1, "e1_mid": 0.3, "e1_large": 0.5}), SIZES, 10, SPARSITY, ST)
    per_size = [r for r in rows if "one point per fitted model" in r["check"]]
    assert [r["check"].split()[0] for r in per_size] == ["1x32", "2x64", "4x128"]
    assert [r["result"] for r in per_size[1:]] == ["PASS", "PASS"]
    row = interaction(rows)
    assert row["value"] == pytest.approx(0.4, abs=0.05) and row["ci_low"] > 0
    assert row["detail"].startswith("grows with size") and row["result"] == "descriptive"
    assert {r["claim"] for r in rows} == {scale.SCALE}


def test_equal_effects_show_no_change_and_a_falling_one_shrinks():
    flat = interaction(scale.scale_checks(sized(dict.fromkeys(SIZES, 0.3)), SIZES, 10, SPARSITY, ST))
    assert flat["ci_low"] < 0 < flat["ci_high"] and flat["detail"].startswith("no change shown")
    falling = interaction(scale.scale_checks(sized({"e1_small": 0.5, "e1_mid": 0.3, "e1_large": 0.0}), SIZES, 10,
                                             SPARSITY, ST))
    assert falling["ci_high"] < 0 and falling["detail"].startswith("shrinks with size")


def test_a_size_without_enough_fitted_models_is_inconclusive_and_has_no_interaction():
    df = sized({"e1_small": 0.3, "e1_mid": 0.3, "e1_large": 0.3})
    df.loc[(df["task"] == "e1_large") & (df["length"] == 10) & (df["seed"] > 1), "accuracy"] = 0.6  # unfit
    rows = scale.scale_checks(df, SIZES, 10, SPARSITY, ST)
    large = [r for r in rows if r["check"].startswith("4x128")]
    assert large[0]["result"] == "INCONCLUSIVE"
    assert np.isnan(interaction(rows)["value"])


def test_one_size_is_no_scale_analysis():
    assert scale.scale_checks(sized({"e1_mid": 0.3}), {"e1_mid": "2x64"}, 10, SPARSITY, ST) == []


def test_needle_rows_run_claim_1s_rule_and_never_count_as_the_papers(tmp_path):
    df = mixture_sweep({1: 0.95, 2: 0.7, 3: 0.5}).assign(task="needle")
    rows = scale.needle_checks(df, {"needle": 10}, SPARSITY, ST)
    (trend,) = [r for r in rows if "one point per fitted model" in r["check"]]
    assert trend["result"] == "PASS" and trend["check"].startswith("needle: ")
    assert {r["claim"] for r in rows} == {scale.NEEDLE}
    assert verdict(rows, scale.NEEDLE).startswith("beyond the paper, not one of its claims (1 PASS")
    write_scorecard(rows, tmp_path / "claims.csv", tmp_path / "claims.md")
    assert "- analysis needle: beyond the paper" in (tmp_path / "claims.md").read_text()


@pytest.mark.workflow
def test_the_scale_config_plans_three_sizes_the_needle_and_their_figures(tmp_path):
    done = run_snakemake(tmp_path, "-n", "--forceall", "-c2", "-p", "--configfile", "config/scale.yaml")
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout + done.stderr
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))
    assert counts["train"] == "48" and counts["figure"] == "4"  # E1's two, scale, needle
    assert "--kind scale " in out and "--kind needle " in out
    sizes = '{"sparse_parity":"2x64","sparse_parity_3x96":"3x96","sparse_parity_4x128":"4x128"}'
    assert f"--scale '{sizes}'" in out and "--sparse-tasks sparse_parity " in out
