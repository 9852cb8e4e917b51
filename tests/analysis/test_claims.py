"""The claim tests on synthetic sweeps with known answers: a clear trend passes, a flat one
fails, too few fitted models are inconclusive; an unfit baseline never makes a PASS; the
statistics agree with hand computation and exact enumeration."""

import itertools

import numpy as np
import pandas as pd
import pytest

from lengthgen.analysis import stats
from lengthgen.analysis.claims import (
    coupling_checks,
    fitted,
    language_checks,
    scheme_role,
    sparsity_checks,
    unmeasured_rows,
    verdict,
    write_scorecard,
)

ST = {"alpha": 0.01, "level": 0.95, "n_boot": 2000, "n_perm": 5000, "seed": 0}
SPARSITY = {"min_length_ratio": 8, "fit_min": 0.95, "min_models_per_k": 3, "effect_floor": 0.1}


def sweep(acc, seeds=range(4), schemes=("rope",), noise=0.0):
    """acc: {(k, length): accuracy}; seed i adds i * noise (so seeds differ)."""
    return pd.DataFrame([{"task": f"t_k{k}", "scheme": s, "seed": seed, "length": n, "k": k, "examples": 500,
                          "accuracy": min(1.0, a + seed * noise)}
                         for s in schemes for seed in seeds for (k, n), a in acc.items()])


def trend_rows(rows):
    return [r for r in rows if "one point per fitted model" in r["check"] and r["result"] != "descriptive"]


FALLING = {(1, 10): 1.0, (2, 10): 1.0, (3, 10): 1.0, (1, 80): 0.95, (2, 80): 0.75, (3, 80): 0.55,
           (1, 160): 0.9, (2, 160): 0.7, (3, 160): 0.5}


# -- statistics ---------------------------------------------------------------------------


def test_spearman_matches_hand_computed_ranks():
    assert stats.spearman([1, 2, 3, 4], [0.9, 0.95, 0.6, 0.5]) == pytest.approx(-0.8)
    assert stats.spearman([1, 2, 3], [1.0, 1.0, 0.8]) == pytest.approx(-0.8660, abs=1e-4)


def test_permutation_p_is_exact_on_a_small_case_and_agrees_with_enumeration_on_a_larger_one():
    # Five distinct values perfectly reversed: only 1 of the 120 orderings is as negative.
    rho, p = stats.permutation_spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1], "less", n_perm=1000)
    assert rho == pytest.approx(-1.0) and p == pytest.approx(1 / 120)
    # Nine points with ties in k: beyond exact enumeration, so it samples; checked against all 9!.
    x, y = [1, 1, 1, 2, 2, 2, 3, 3, 3], [0.9, 1.0, 0.8, 0.7, 0.85, 0.6, 0.75, 0.5, 0.65]
    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    perms = np.array(list(itertools.permutations(ry)))
    xc, yc = rx - rx.mean(), perms - perms.mean(axis=1, keepdims=True)
    rhos = (yc @ xc) / np.sqrt((xc**2).sum() * (yc**2).sum(axis=1))
    exact = np.mean(rhos <= stats.spearman(x, y) + 1e-12)
    _, sampled = stats.permutation_spearman(x, y, "less", n_perm=20000, seed=3)
    assert 0.01 < exact < 0.2 and sampled == pytest.approx(exact, abs=0.006)


def test_interval_verdict_is_three_way():
    assert stats.interval_verdict(0.92, 0.99, 0.9, ">=") == "PASS"
    assert stats.interval_verdict(0.5, 0.8, 0.9, ">=") == "FAIL"
    assert stats.interval_verdict(0.85, 0.95, 0.9, ">=") == "INCONCLUSIVE"
    assert stats.interval_verdict(0.0, 0.05, 0.1, "<=") == "PASS"
    assert stats.interval_verdict(0.2, 0.4, 0.1, "<=") == "FAIL"


def test_seed_binomial_means_cover_both_spreads():
    one = stats.seed_binomial_means([0.5, 0.5, 0.5], [100, 100, 100], 4000, seed=0)
    two = stats.seed_binomial_means([0.2, 0.5, 0.8], [100, 100, 100], 4000, seed=0)
    assert one.mean() == pytest.approx(0.5, abs=0.01) and 0.01 < one.std() < 0.05  # test sets alone
    assert two.std() > 3 * one.std()  # seed-to-seed spread adds to it


# -- claim 1 ------------------------------------------------------------------------------


def test_a_clear_trend_passes_with_its_effect_and_interval():
    (row,) = trend_rows(sparsity_checks(sweep(FALLING, noise=0.01), ["t_k1", "t_k2", "t_k3"], 10, SPARSITY, ST))
    assert row["result"] == "PASS" and row["p"] <= 0.01 and row["n"] == 12 and row["experiment"] == "E1"
    assert row["value"] == pytest.approx(0.4) and row["ci_low"] >= 0.1
    assert row["check"].startswith("rope: accuracy at n >= 8x falls with k (k=1..3): acc(k=1) - acc(k=3)")
    assert "(permutation over models)" in row["detail"]


def test_a_flat_trend_fails():
    flat = {key: (1.0 if n == 10 else 0.7) for key, n in ((key, key[1]) for key in FALLING)}
    (row,) = trend_rows(sparsity_checks(sweep(flat, noise=0.01), ["t_k1", "t_k2", "t_k3"], 10, SPARSITY, ST))
    assert row["result"] == "FAIL" and row["p"] > 0.01 and row["ci_high"] < 0.1


def test_a_non_monotone_sweep_fails():
    """k = 2 far below k = 1 and k = 3: no monotone effect from the sparsest to the densest k."""
    bent = {**FALLING, (2, 80): 0.4, (2, 160): 0.4, (3, 80): 0.95, (3, 160): 0.9}
    (row,) = trend_rows(sparsity_checks(sweep(bent, noise=0.01), ["t_k1", "t_k2", "t_k3"], 10, SPARSITY, ST))
    assert row["result"] == "FAIL" and row["p"] > 0.01


def test_a_significant_slope_below_the_effect_floor_fails():
    tiny = {**FALLING, (2, 80): 0.94, (3, 80): 0.93, (2, 160): 0.89, (3, 160): 0.88}
    (row,) = trend_rows(sparsity_checks(sweep(tiny, seeds=range(8), noise=0.001), ["t_k1", "t_k2", "t_k3"], 10,
                                        SPARSITY, ST))
    assert row["p"] <= 0.01 and row["value"] == pytest.approx(0.02, abs=0.005)
    assert row["result"] == "FAIL"


def test_accuracy_rising_with_k_fails():
    rising = {(k, n): (1.0 if n == 10 else 1.45 - a) for (k, n), a in FALLING.items()}
    (row,) = trend_rows(sparsity_checks(sweep(rising, noise=0.01), ["t_k1", "t_k2", "t_k3"], 10, SPARSITY, ST))
    assert row["result"] == "FAIL" and row["value"] < 0


def test_an_effect_whose_interval_straddles_the_floor_is_inconclusive():
    rng = np.random.default_rng(1)
    acc = sweep(FALLING, seeds=range(6))
    long = acc["length"] > 10
    acc.loc[long, "accuracy"] = acc.loc[long, "k"].map({1: 0.62, 2: 0.56, 3: 0.5}) + rng.normal(0, 0.1, long.sum())
    (row,) = trend_rows(sparsity_checks(acc, ["t_k1", "t_k2", "t_k3"], 10, SPARSITY, ST))
    assert row["ci_low"] < 0.1 <= row["ci_high"] and row["result"] == "INCONCLUSIVE"


def test_two_fitted_models_per_k_are_inconclusive_never_pass():
    df = sweep(FALLING, seeds=range(2), noise=0.01)
    (row,) = trend_rows(sparsity_checks(df, ["t_k1", "t_k2", "t_k3"], 10, SPARSITY, ST))
    assert row["result"] == "INCONCLUSIVE" and "k=1: 2, k=2: 2, k=3: 2" in row["detail"]


def test_a_largest_k_without_enough_fitted_models_is_inconclusive():
    df = sweep(FALLING, seeds=range(5), noise=0.005)
    df.loc[(df["k"] == 3) & (df["seed"] < 3), "accuracy"] = 0.5  # three of five k = 3 models at chance
    rows = sparsity_checks(df, ["t_k1", "t_k2", "t_k3"], 10, SPARSITY, ST)
    (row,) = trend_rows(rows)
    assert row["result"] == "INCONCLUSIVE" and "k=3: 2" in row["detail"]
    assert "rope k=1 5/5, k=2 5/5, k=3 2/5" in rows[0]["detail"]


def mixture_sweep(acc_by_k, seeds=range(6), noise=0.02, fit=1.0):
    """One model per seed trained on a mixture: {k: accuracy beyond training}, plus a per-seed
    level shared by all k of that model (what pairing by model removes)."""
    rng = np.random.default_rng(0)
    rows = []
    for seed in seeds:
        level = rng.normal(0, 0.15)
        for k, a in acc_by_k.items():
            rows.append({"task": "mix", "scheme": "rope", "seed": seed, "length": 10, "k": k, "examples": 500,
                         "accuracy": fit})
            for n in (80, 160):
                rows.append({"task": "mix", "scheme": "rope", "seed": seed, "length": n, "k": k, "examples": 500,
                             "accuracy": float(np.clip(a + level + rng.normal(0, noise), 0, 1))})
    return pd.DataFrame(rows)


def test_a_mixture_model_is_resampled_and_permuted_as_a_whole():
    df = mixture_sweep({1: 0.8, 2: 0.7, 3: 0.6, 4: 0.5})
    rows = sparsity_checks(df, ["mix"], 10, SPARSITY, ST)
    (row,) = trend_rows(rows)
    assert row["result"] == "PASS" and "(within-model permutation (mixture))" in row["detail"]
    assert row["n"] == 24 and row["value"] == pytest.approx(0.3, abs=0.05)
    adjacent = [r for r in rows if " - acc(k=" in r["check"] and r["result"] == "descriptive"]
    assert [r["check"].split(":")[1].split(" at")[0].strip() for r in adjacent] == [
        "acc(k=1) - acc(k=2)", "acc(k=2) - acc(k=3)", "acc(k=3) - acc(k=4)"]
    assert all(r["ci_low"] > 0 for r in adjacent)  # paired by model: the shared level cancels


def test_a_flat_mixture_fails_and_an_unfit_k_leaves_the_model_out():
    (row,) = trend_rows(sparsity_checks(mixture_sweep({1: 0.7, 2: 0.7, 3: 0.7, 4: 0.7}), ["mix"], 10, SPARSITY, ST))
    assert row["result"] == "FAIL"
    df = mixture_sweep({1: 0.8, 2: 0.7, 3: 0.6, 4: 0.5})
    df.loc[(df["seed"] == 0) & (df["k"] == 4) & (df["length"] == 10), "accuracy"] = 0.6
    rows = sparsity_checks(df, ["mix"], 10, SPARSITY, ST)
    (row,) = trend_rows(rows)
    assert row["n"] == 20 and "left out, unfit: mix/rope/seed0" in row["detail"]


def test_block_permutation_keeps_points_within_their_block():
    """Two blocks whose levels differ: an unrestricted permutation finds a 'trend' in the block
    levels; permuting within blocks, where k is balanced, finds none."""
    k = [1, 2, 1, 2]
    y = [0.9, 0.9, 0.1, 0.1]
    rho, p = stats.block_permutation_spearman(k, y, ["a", "a", "b", "b"], "less", 2000, 0)
    assert rho == pytest.approx(0.0) and p > 0.5


def test_unfit_models_are_left_out_and_named():
    df = sweep(FALLING, seeds=range(5), noise=0.005)
    df.loc[(df["k"] == 3) & (df["seed"] == 0), "accuracy"] = 0.5  # at chance everywhere
    rows = sparsity_checks(df, ["t_k1", "t_k2", "t_k3"], 10, SPARSITY, ST)
    fit = rows[0]
    assert fit["result"] == "descriptive" and fit["value"] == pytest.approx(14 / 15, abs=1e-4)
    assert fit["detail"] == "fitted per k: rope k=1 5/5, k=2 5/5, k=3 4/5; below: t_k3/rope/seed0 0.500"
    (row,) = trend_rows(rows)
    assert row["n"] == 14 and row["detail"].endswith("left out, unfit: t_k3/rope/seed0")


def test_per_length_rows_are_descriptive_not_verdicts():
    rows = sparsity_checks(sweep(FALLING, noise=0.01), ["t_k1", "t_k2", "t_k3"], 10, SPARSITY, ST)
    lengths = [r for r in rows if r["check"].startswith("rope at n=")]
    assert [r["check"].split(":")[0] for r in lengths] == ["rope at n=80 (8x)", "rope at n=160 (16x)"]
    assert {r["result"] for r in lengths} == {"descriptive"}


# -- claim 2 ------------------------------------------------------------------------------

COUPLING = {"length_ratio": 2, "assignment_length_ratio": 2, "coupled_min": 0.9, "index_max": 0.1, "fit_min": 0.95,
            "min_fitted": 2, "closure_min": 0.5, "min_headroom": 0.1, "match_tolerance": 0.05}
OPTS = {"rope": {"positions": "index", "position_head": "none"},
        "pose": {"positions": "index", "position_head": "none"},
        "pointer": {"positions": "index", "position_head": "pointer"},
        "pc": {"positions": "coupled", "position_head": "pointer", "feed_ids": "oracle"},
        "ppc": {"positions": "coupled", "position_head": "pointer"}}


def coupling_sweep(task, acc, seeds=(0, 1, 2), examples=500):
    """acc: {(scheme, length): [accuracy per seed]}"""
    return pd.DataFrame([{"task": task, "scheme": s, "seed": seed, "length": n, "depth": 1, "examples": examples,
                          "accuracy": a[i]} for (s, n), a in acc.items() for i, seed in enumerate(seeds)])


def info(kind, schemes):
    return {"kind": kind, "n_max": 10, "scheme_options": {s: OPTS[s] for s in schemes}}


def verdicts(rows):
    return {r["check"].split(": ", 1)[1]: r["result"] for r in rows if r["result"] != "descriptive"}


def test_roles_name_the_oracle_and_the_copy_control():
    assert [scheme_role(OPTS[s]) for s in ("rope", "pointer", "pc", "ppc")] == ["index", "index", "pc", "ppc"]
    assert scheme_role({"positions": "coupled", "position_head": "none"}) == "pc"


def test_scratchpad_unfit_index_baseline_is_inconclusive_never_pass():
    df = coupling_sweep("e2", {("pc", 10): [1, 1, 1], ("pc", 20): [1, 1, 1],
                               ("rope", 10): [0.0, 0.05, 0.2], ("rope", 20): [0, 0, 0]})
    rows = coupling_checks(df, {"e2": info("scratchpad_parity", ["pc", "rope"])}, COUPLING, ST)
    assert verdicts(rows) == {"pc (pc) exact match, fitted seeds": "PASS",
                              "rope (index) exact match, fitted seeds": "INCONCLUSIVE"}
    assert rows[-1]["detail"] == ("unfit at 1x: rope 0 of 3; left out, unfit at 1x: seed0 0.00, seed1 0.05, "
                                  "seed2 0.20")


def test_scratchpad_one_fitted_seed_of_three_is_no_fitted_scheme():
    """rope fits in one seed of three, below min_fitted 2: its row never rests on that one model."""
    df = coupling_sweep("e2", {("pc", 10): [1, 1, 1], ("pc", 20): [1, 1, 1],
                               ("rope", 10): [0.91, 0.94, 1.0], ("rope", 20): [0.0, 0.0, 0.0]})
    rows = coupling_checks(df, {"e2": info("scratchpad_parity", ["pc", "rope"])}, COUPLING, ST)
    assert rows[-1]["result"] == "INCONCLUSIVE" and rows[-1]["n"] == 1


def test_scratchpad_compares_fitted_seeds_only_seed_by_seed():
    """pose fits in two seeds of three (min_fitted 2): the unfit seed is left out, by name."""
    df = coupling_sweep("e2", {("pc", 10): [1, 1, 1], ("pc", 20): [1, 1, 1],
                               ("pose", 10): [1.0, 0.92, 1.0], ("pose", 20): [0.0, 0.6, 0.0]})
    rows = coupling_checks(df, {"e2": info("scratchpad_parity", ["pc", "pose"])}, COUPLING, ST)
    row = rows[-1]
    assert row["result"] == "PASS" and row["n"] == 2 and row["value"] == 0.0
    assert row["detail"] == "per fitted seed 0.000, 0.000; left out, unfit at 1x: seed1 0.92"


def test_a_baseline_that_fits_in_few_seeds_is_compared_once_enough_of_them_fit():
    """pose fits in 4 of 9 seeds: a median over seeds called it unfit at any seed count; counted,
    its 4 fitted seeds are a scheme (min_fitted 3), and 2 of 9 are not."""
    nine = tuple(range(9))
    fits = [1.0, 0.2, 1.0, 0.3, 0.99, 0.1, 0.97, 0.0, 0.5]
    df = coupling_sweep("e2", {("pc", 10): [1] * 9, ("pc", 20): [1] * 9, ("pose", 10): fits,
                               ("pose", 20): [0.0] * 9}, seeds=nine)
    cfg = {**COUPLING, "min_fitted": 3}
    row = coupling_checks(df, {"e2": info("scratchpad_parity", ["pc", "pose"])}, cfg, ST)[-1]
    assert row["result"] == "PASS" and row["n"] == 4
    few = df.assign(accuracy=np.where((df["scheme"] == "pose") & (df["length"] == 10) & (df["seed"] > 2), 0.0,
                                      df["accuracy"]))
    row = coupling_checks(few, {"e2": info("scratchpad_parity", ["pc", "pose"])}, cfg, ST)[-1]
    assert row["result"] == "INCONCLUSIVE" and row["detail"].startswith("unfit at 1x: pose 2 of 9")


def test_scratchpad_fitted_index_baseline_that_fails_at_2x_passes():
    df = coupling_sweep("e2", {("ppc", 10): [1, 1, 1], ("ppc", 20): [1.0, 0.98, 0.99],
                               ("rope", 10): [1, 0.99, 1], ("rope", 20): [0, 0.01, 0]})
    rows = coupling_checks(df, {"e2": info("scratchpad_parity", ["ppc", "rope"])}, COUPLING, ST)
    assert verdicts(rows) == {"ppc (ppc) exact match, fitted seeds": "PASS",
                              "rope (index) exact match, fitted seeds": "PASS"}
    assert rows[0]["result"] == "descriptive" and rows[0]["value"] == 1.0


def test_scratchpad_straddling_interval_is_inconclusive_and_a_clear_miss_fails():
    df = coupling_sweep("e2", {("pc", 10): [1, 1, 1], ("pc", 20): [0.95, 0.85, 0.9],
                               ("ppc", 10): [1, 1, 1], ("ppc", 20): [0.5, 0.4, 0.45]})
    rows = coupling_checks(df, {"e2": info("scratchpad_parity", ["pc", "ppc"])}, COUPLING, ST)
    assert verdicts(rows) == {"pc (pc) exact match, fitted seeds": "INCONCLUSIVE",
                              "ppc (ppc) exact match, fitted seeds": "FAIL"}


CONTROL = "ppc - the copy-head control, paired by seed"
PLAIN = "ppc against the best plain index scheme: share of its shortfall closed, paired by seed"
PPC = "ppc (ppc) exact match, fitted seeds"
E3 = {("ppc", 10): [1, 1, 0.99], ("ppc", 20): [0.95, 0.9, 0.97], ("pc", 10): [1, 1, 1], ("pc", 20): [0.96, 0.92, 0.97]}


def e3_rows(extra, max_position=100, seeds=(0, 1, 2), cfg=None):
    """E3 trained to n = 10 and judged at 20 (92 tokens): IDs inside max_position 100."""
    df = coupling_sweep("e3", {**E3, **extra}, seeds=seeds)
    schemes = sorted({s for s, _ in {**E3, **extra}})
    task = {**info("variable_assignment", schemes), "answer_format": "statements", "max_position": max_position,
            "test_tokens": {"10": 52, "15": 72, "20": 92}}
    return coupling_checks(df, {"e3": task}, cfg or COUPLING, ST)


def row_of(rows, name):
    return next(r for r in rows if r["check"].split(": ", 1)[1].startswith(name))


def test_assignment_fitted_baselines_far_below_ppc_pass():
    rows = e3_rows({("rope", 10): [1, 0.97, 1], ("rope", 20): [0.3, 0.2, 0.25],
                    ("pointer", 10): [1, 1, 1], ("pointer", 20): [0.4, 0.35, 0.5]})
    assert verdicts(rows) == {PPC: "PASS", CONTROL + " (pointer)": "PASS", PLAIN + " (rope)": "PASS",
                              "ppc - pc (oracle IDs)": "PASS"}
    assert rows[0]["check"].startswith("e3 (statements answers) at n=10 (1x)")
    assert rows[1]["detail"].startswith("training IDs 0-99 (max_position 100), test sequences to 92 tokens;")
    ppc, rope = np.mean([0.95, 0.9, 0.97]), np.mean([0.3, 0.2, 0.25])
    assert row_of(rows, PLAIN)["value"] == pytest.approx((ppc - rope) / (1 - rope), abs=1e-4)
    assert row_of(rows, CONTROL)["value"] == pytest.approx(ppc - np.mean([0.4, 0.35, 0.5]), abs=1e-4)


def test_ppcs_own_exact_match_passes_fails_and_straddles_coupled_min():
    for want, ppc in {"PASS": [1.0, 0.99, 1.0], "FAIL": [0.7, 0.75, 0.72], "INCONCLUSIVE": [0.95, 0.8, 0.97]}.items():
        assert row_of(e3_rows({("ppc", 20): ppc}), PPC)["result"] == want


def test_ppc_against_a_control_at_exact_match_is_judged_within_the_tolerance():
    """A control trained to the end holds at exact match: ppc within match_tolerance (0.05) of
    it passes, ppc clearly below fails, seeds that disagree about it straddle."""
    control = {("pointer", 10): [1, 1, 1], ("pointer", 20): [1.0, 1.0, 0.998]}
    cases = {"PASS": [0.99, 0.995, 1.0], "FAIL": [0.8, 0.82, 0.78], "INCONCLUSIVE": [0.9, 1.0, 0.99]}
    for want, ppc in cases.items():
        row = row_of(e3_rows({**control, ("ppc", 20): ppc}), CONTROL)
        assert row["result"] == want, (want, row)
        assert row["threshold"] == ">= -0.05 (interval)"


def test_the_control_row_is_paired_by_seed():
    """Seeds differ much (each is its own data draw), ppc tracks its own seed's control 0.01
    below: paired, the difference is -0.01 at every seed (PASS); resampling the two schemes
    apart would mix seeds and straddle the tolerance."""
    seeds = tuple(range(8))
    control = [1.0, 0.6, 0.9, 0.5, 0.8, 0.7, 0.95, 0.55]
    rows = e3_rows({("pc", 10): [1] * 8, ("pc", 20): [1] * 8, ("ppc", 10): [1] * 8,
                    ("ppc", 20): [c - 0.01 for c in control], ("pointer", 10): [1] * 8, ("pointer", 20): control},
                   seeds=seeds)
    row = row_of(rows, CONTROL)
    assert row["result"] == "PASS" and row["value"] == pytest.approx(-0.01, abs=1e-4)
    assert row["ci_high"] - row["ci_low"] < 0.05


def test_resamples_with_too_few_paired_seeds_count_against_the_row():
    """min_fitted 3, and the control fits in 3 of 4 seeds: about a third of the resamples hold
    fewer than 3 seeds where both fit, so the interval is unbounded: INCONCLUSIVE. With 10 of 12
    fitted the same effect decides."""
    cfg = {**COUPLING, "min_fitted": 3}
    four = {("pc", 10): [1] * 4, ("pc", 20): [1] * 4, ("ppc", 10): [1] * 4, ("ppc", 20): [0.6] * 4,
            ("pointer", 10): [1, 1, 1, 0.5], ("pointer", 20): [1.0] * 4}
    row = row_of(e3_rows(four, seeds=tuple(range(4)), cfg=cfg), CONTROL)
    assert row["result"] == "INCONCLUSIVE" and row["n"] == 3
    assert "resamples with fewer than 3 count against the row" in row["detail"]
    twelve = {k: (v * 3 if k != ("pointer", 10) else [1] * 10 + [0.5, 0.5]) for k, v in four.items()}
    row = row_of(e3_rows(twelve, seeds=tuple(range(12)), cfg=cfg), CONTROL)
    assert row["result"] == "FAIL" and row["n"] == 10


def test_assignment_closing_part_of_a_plain_baselines_shortfall_is_judged_on_its_interval():
    """rope at 0.75 leaves 0.25: a ppc at 0.99 closes 0.96 of it (PASS); at 0.80, 0.2 (FAIL);
    seeds that disagree about it straddle closure_min (INCONCLUSIVE)."""
    rope = {("rope", 10): [1, 1, 1], ("rope", 20): [0.74, 0.76, 0.75]}
    cases = {"PASS": [0.99, 0.99, 0.99], "FAIL": [0.8, 0.8, 0.8], "INCONCLUSIVE": [0.8, 1.0, 0.86]}
    for want, ppc in cases.items():
        row = row_of(e3_rows({**rope, ("ppc", 20): ppc}), PLAIN)
        assert row["result"] == want, (want, row)


def test_assignment_fitted_control_as_good_as_ppc_and_an_unfit_plain_scheme():
    rows = e3_rows({("rope", 10): [0.2, 0.3, 0.3], ("rope", 20): [0.1, 0.1, 0.1],
                    ("ppc", 20): [0.65, 0.6, 0.62], ("pc", 20): [0.65, 0.6, 0.62],
                    ("pointer", 10): [1, 1, 1], ("pointer", 20): [0.6, 0.58, 0.62]})
    got = verdicts(rows)
    assert got[CONTROL + " (pointer)"] == "PASS" and got[PPC] == "FAIL"
    assert got[PLAIN] == "INCONCLUSIVE"  # rope never fit: nothing to compare
    row = row_of(rows, PLAIN)
    assert "unfit at 1x (fitted seeds): rope 0 of 3" in row["detail"] and np.isnan(row["value"])


def test_a_plain_scheme_at_ceiling_leaves_no_headroom_to_decide():
    """rope at 0.94 leaves less than min_headroom to close: the row cannot tell."""
    rows = e3_rows({("rope", 10): [1, 1, 1], ("rope", 20): [0.94, 0.92, 0.96]})
    row = row_of(rows, PLAIN)
    assert row["result"] == "INCONCLUSIVE" and "no headroom: rope within 0.1 of exact match" in row["detail"]
    control = row_of(rows, CONTROL)
    assert control["result"] == "N/A" and control["detail"] == "no such scheme in this grid"


def test_assignment_compares_seeds_where_both_fit_only():
    """pointer's seed 4 is unfit at 1x (and perfect at 2x): left out with ppc's seed 4."""
    five = {("pc", 10): [1] * 5, ("pc", 20): [1] * 5, ("ppc", 10): [1] * 5, ("ppc", 20): [0.95, 0.9, 0.97, 0.9, 0.2],
            ("pointer", 10): [1, 1, 1, 1, 0.5], ("pointer", 20): [0.4, 0.4, 0.4, 0.4, 1.0]}
    row = row_of(e3_rows(five, seeds=tuple(range(5))), CONTROL)
    assert row["result"] == "PASS" and row["n"] == 4
    assert row["value"] == pytest.approx(np.mean([0.95, 0.9, 0.97, 0.9]) - 0.4, abs=1e-4)
    assert "4 seeds where both fit" in row["detail"] and "pointer 0.400" in row["detail"]


def test_assignment_beyond_the_training_coverage_decides_nothing():
    """Test sequences of 92 tokens when training IDs reached 59: the test asks for IDs no
    training example had, which is ID extrapolation, not the claim."""
    rows = e3_rows({("pointer", 10): [1, 1, 1], ("pointer", 20): [0.4, 0.35, 0.5]}, max_position=60)
    decided = [r for r in rows if r["result"] not in ("descriptive", "N/A")]
    assert decided and all(r["result"] == "INCONCLUSIVE" for r in decided)
    assert all(r["detail"].startswith("beyond training coverage: training IDs 0-59") for r in decided)


def test_pc_sharing_the_copy_head_compares_nothing():
    """pc fed the true IDs but copying where the pointer points has ppc's exact match by
    construction: its row is N/A, never a PASS that could not fail."""
    df = coupling_sweep("e3", {**E3, ("pc", 20): [0.95, 0.9, 0.97]})
    opts = {**info("variable_assignment", ["pc", "ppc"])["scheme_options"]}
    opts["pc"] = {**opts["pc"], "copy": True}
    task = {"kind": "variable_assignment", "n_max": 10, "scheme_options": opts, "answer_format": "statements",
            "max_position": 60, "test_tokens": {"10": 52, "20": 92}}
    row = next(r for r in coupling_checks(df, {"e3": task}, COUPLING, ST) if "oracle IDs" in r["check"])
    assert row["result"] == "N/A" and "by construction" in row["detail"]


def test_assignment_at_the_other_test_lengths_gives_numbers_not_verdicts():
    rows = e3_rows({("ppc", 15): [1, 1, 1], ("pc", 15): [1, 1, 1], ("pointer", 10): [1, 1, 1],
                    ("pointer", 15): [0.5, 0.5, 0.5], ("pointer", 20): [0.4, 0.35, 0.5]})
    at15 = [r for r in rows if "at n=15 (1.5x)" in r["check"]]
    checks = {r["check"].split(": ", 1)[1] for r in at15}
    assert checks == {PPC, CONTROL + " (pointer)", "ppc - pc (oracle IDs)"}
    assert all(r["result"] == "descriptive" and r["threshold"] == "-" for r in at15)
    control = next(r for r in at15 if "copy-head" in r["check"])
    assert control["value"] == pytest.approx(0.5) and control["detail"].startswith("training IDs 0-99")


def test_coupling_without_the_2x_length_is_not_measured():
    df = coupling_sweep("e2", {("pc", 10): [1, 1, 1], ("pc", 40): [1, 1, 1]})
    rows = coupling_checks(df, {"e2": info("scratchpad_parity", ["pc"])}, COUPLING, ST)
    assert [r["result"] for r in rows] == ["N/A"]


# -- claim 3 ------------------------------------------------------------------------------


LANGUAGE = {"greedy_k": 1, "recovered_min": 0.5, "null_share": 0.25, "short_coupled": True, "min_models": 3,
            "min_documents": 3}


def scores(seeds=3, documents=4, per_document=25, seed=0):
    """Scored tokens of `seeds` pairs, `per_document` in each of `documents` documents per pair:
    greedy recovers 0.8 of each gap, its null control about 0.1, attention 0.2-0.4, random about
    0; the short model gains 0.2 with coupled IDs, nothing with true ones."""
    rng = np.random.default_rng(seed)
    n = seeds * documents * per_document
    long, gap = rng.uniform(1, 3, n), rng.uniform(0.6, 2, n)
    df = pd.DataFrame({"seed": np.repeat(np.arange(seeds), documents * per_document),
                       "document": np.tile(np.repeat(np.arange(documents), per_document), seeds),
                       "index": np.arange(n), "L_long": long, "L_short": long + gap, "gap": gap})
    df["L_greedy_1"] = df["L_short"] - 0.8 * gap
    df["L_null_1"] = df["L_short"] - rng.uniform(0.0, 0.2, n) * gap
    df["L_attention_1"] = df["L_short"] - rng.uniform(0.2, 0.4, n) * gap
    df["L_random_1"] = df["L_short"] - rng.uniform(-0.1, 0.1, n) * gap
    df["short_window"] = 4.0 + rng.normal(0, 0.1, n)
    df["short_coupled_1"] = df["short_window"] - 0.2
    df["short_true_1"] = df["short_window"] + rng.normal(0, 0.5, n)
    return df


def results_of(rows) -> list[str]:
    return [r["result"] for r in rows]


def test_claim_3_clear_advantages_pass_on_hierarchical_intervals():
    rows = language_checks(scores(), LANGUAGE, ST)
    assert [r["check"].split(":")[0] for r in rows] == ["greedy k=1", "greedy - null control at k=1, beyond 0.25 "
                                                         "of the null's headroom",
                                                         "attention - random at k=1", "short model"]
    assert results_of(rows) == ["PASS"] * 4
    assert rows[0]["value"] == pytest.approx(0.8) and rows[0]["n"] == 3  # n: model pairs
    assert rows[1]["ci_low"] > 0.4 and rows[2]["ci_low"] > 0.1  # 0.7 - 0.25 x 0.9 per token
    assert "3 model pairs, 4 documents (at least 4 per pair), 300 tokens" in rows[0]["detail"]
    assert "per model 0.800 to 0.800" in rows[0]["detail"]
    hard = language_checks(scores(), {**LANGUAGE, "recovered_min": 0.9, "short_coupled": False}, ST)
    assert results_of(hard) == ["FAIL", "PASS", "PASS", "INCONCLUSIVE"]  # true IDs: noise around 0


def test_claim_3_greedy_no_better_than_its_null_control_fails():
    """Greedy among the target's own distant tokens recovers what greedy among another
    document's does: the selection alone explains it, and the null row says so."""
    df = scores()
    df["L_null_1"] = df["L_greedy_1"] + np.random.default_rng(1).normal(0, 0.05, len(df)) * df["gap"]
    rows = language_checks(df, LANGUAGE, ST)
    assert results_of(rows)[:2] == ["PASS", "FAIL"]
    assert rows[1]["ci_high"] <= 0  # greedy - null near 0, below a quarter of the null's headroom (0.05)


def test_claim_3_the_null_margin_scales_with_the_nulls_headroom():
    """A null that recovers 0.9 leaves 0.1: greedy at 0.99 adds 0.09, which a fixed margin of
    0.25 could never see and the scaled one (0.025) does (PASS); greedy 0.01 above the null does
    not (FAIL); pairs that disagree about it straddle (INCONCLUSIVE)."""
    df = scores()
    rng = np.random.default_rng(2)
    df["L_null_1"] = df["L_short"] - rng.uniform(0.88, 0.92, len(df)) * df["gap"]
    for want, greedy in (("PASS", 0.99), ("FAIL", 0.91)):
        row = language_checks(df.assign(L_greedy_1=df["L_short"] - greedy * df["gap"]), LANGUAGE, ST)[1]
        assert row["result"] == want, (want, row)
    split = df.assign(L_greedy_1=df["L_short"] - np.where(df["seed"] == 0, 0.9, 0.99) * df["gap"])
    assert language_checks(split, LANGUAGE, ST)[1]["result"] == "INCONCLUSIVE"


def test_claim_3_one_model_pair_is_inconclusive_never_pass():
    one = scores()
    one = one[one["seed"] == 0]
    rows = language_checks(one, LANGUAGE, ST)
    assert results_of(rows) == ["INCONCLUSIVE"] * 4
    assert rows[0]["value"] == pytest.approx(0.8) and "needs 3 model pairs" in rows[0]["detail"]
    assert "1 model pairs" in rows[0]["detail"] and rows[0]["n"] == 1


def test_claim_3_a_pair_with_too_few_documents_is_inconclusive():
    df = scores()
    df.loc[df["seed"] == 2, "document"] = df.loc[df["seed"] == 2, "document"] % 2  # two documents in pair 2
    rows = language_checks(df, LANGUAGE, ST)
    assert results_of(rows) == ["INCONCLUSIVE"] * 4 and "at least 2 per pair" in rows[0]["detail"]


def test_claim_3_model_spread_widens_the_interval_where_tokens_alone_would_not():
    """Pairs that disagree (greedy recovers 0.4, 0.6, 0.8 by pair): the interval spans the pairs,
    and a bar between them is INCONCLUSIVE, where the token bootstrap would PASS it."""
    df = scores()
    df["L_greedy_1"] = df["L_short"] - (0.4 + 0.2 * df["seed"]) * df["gap"]
    row = language_checks(df, {**LANGUAGE, "recovered_min": 0.5}, ST)[0]
    recovered = ((df["L_short"] - df["L_greedy_1"]) / df["gap"]).to_numpy()
    token_ci = stats.percentile_ci(stats.hierarchical_draws(recovered, [np.zeros(len(recovered))], np.median,
                                                            ST["n_boot"], ST["seed"]))
    assert token_ci[0] > 0.5  # tokens alone: a PASS
    assert row["result"] == "INCONCLUSIVE" and row["ci_low"] <= 0.45 and row["ci_high"] >= 0.75
    assert "per model 0.400 to 0.800" in row["detail"]


def test_claim_3_without_a_null_control_is_inconclusive():
    rows = language_checks(scores().drop(columns="L_null_1"), LANGUAGE, ST)
    assert rows[1]["result"] == "INCONCLUSIVE" and "not measured" in rows[1]["detail"]


def test_claim_3_attention_no_better_than_random_is_not_a_pass():
    df = scores()
    df["L_attention_1"] = df["L_random_1"] + np.random.default_rng(1).normal(0, 0.01, len(df))
    rows = language_checks(df, LANGUAGE, ST)
    assert rows[2]["result"] in ("INCONCLUSIVE", "FAIL")


def test_hierarchical_draws_resample_units_level_by_level():
    """Within-unit values alike and units apart: the interval reflects the units, not the number
    of values; sizes follow the drawn units; a single unit, values not resampled, is fixed."""
    seeds, docs = np.repeat([0, 1, 2], 40), np.tile(np.repeat([0, 1, 2, 3], 10), 3)
    values = seeds + docs * 0.01  # each pair's values alike
    draws = stats.hierarchical_draws(values, [seeds, docs], np.mean, 4000, 0)
    # pairs drawn with replacement: the mean of 3 draws from {0, 1, 2} ranges over 0..2 in thirds
    lo, hi = stats.percentile_ci(draws)
    assert lo < 0.5 and hi > 1.5 and draws.mean() == pytest.approx(1.015, abs=0.03)
    tokens_alone = stats.hierarchical_draws(values, [np.zeros(len(values))], np.mean, 4000, 0)  # one level: tokens
    token_lo, token_hi = stats.percentile_ci(tokens_alone)
    assert token_hi - token_lo < (hi - lo) / 3
    # a pair's share of the resample is its documents' sizes: unequal sizes carry through
    uneven = np.concatenate([np.zeros(10), np.ones(30)])
    sizes = stats.hierarchical_draws(uneven, [uneven, np.zeros(40)], len, 200, 1)
    assert set(sizes) <= {20.0, 40.0, 60.0}
    fixed = stats.hierarchical_draws(values, [np.zeros(120), np.zeros(120)], np.mean, 5, 2, resample_values=False)
    assert np.allclose(fixed, values.mean())
    again = stats.hierarchical_draws(values, [seeds, docs], np.mean, 4000, 0)
    assert np.array_equal(draws, again)


# -- the scorecard ------------------------------------------------------------------------


def test_claims_without_an_experiment_are_listed_as_not_measured():
    rows = unmeasured_rows(["2 coupling", "3 language"])
    assert [r["claim"] for r in rows] == ["2 coupling", "3 language"]
    assert all(r["result"] == "N/A" and "not in this grid" in r["check"] for r in rows)
    assert verdict(rows, "2 coupling") == "not measured"


def test_summary_line_says_undecided_when_every_check_is_inconclusive(tmp_path):
    df = sweep(FALLING, seeds=range(2), noise=0.01)
    rows = sparsity_checks(df, ["t_k1", "t_k2", "t_k3"], 10, SPARSITY, ST) + unmeasured_rows(["3 language"])
    assert verdict(rows, "1 sparsity") == "undecided (1 INCONCLUSIVE)"
    write_scorecard(rows, tmp_path / "c.csv", tmp_path / "c.md")
    text = (tmp_path / "c.md").read_text()
    assert "- claim 1 sparsity: undecided (1 INCONCLUSIVE)" in text
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert table[1] == "|---|---|---|---|---|---|---|---|---|---|"
    assert all(line.count("|") == 11 for line in table), table
    back = pd.read_csv(tmp_path / "c.csv")
    assert list(back.columns) == ["claim", "experiment", "check", "value", "ci_low", "ci_high", "p", "n", "threshold",
                                  "result", "detail"]


ORDER = ("PASS", "FAIL", "INCONCLUSIVE")
WORDS = {  # by which results occur among a claim's verdict rows
    ("PASS",): "reproduced", ("INCONCLUSIVE",): "undecided", ("FAIL",): "not reproduced",
    ("FAIL", "INCONCLUSIVE"): "not reproduced", ("PASS", "FAIL"): "partly reproduced",
    ("PASS", "INCONCLUSIVE"): "partly reproduced", ("PASS", "FAIL", "INCONCLUSIVE"): "partly reproduced",
}


@pytest.mark.parametrize("outcomes", [c for n in (1, 2, 3) for c in itertools.combinations_with_replacement(ORDER, n)])
def test_claim_words_follow_the_rule_on_every_combination_of_rows(outcomes):
    from lengthgen.analysis.claims import claim_word

    expected = WORDS[tuple(r for r in ORDER if r in outcomes)]
    assert claim_word(outcomes) == expected
    assert claim_word(reversed(outcomes)) == expected  # order does not matter


@pytest.mark.parametrize(("e2", "e3", "word"), [
    (["PASS", "PASS"], ["PASS"], "reproduced"),
    (["PASS", "PASS"], ["FAIL"], "partly reproduced"),
    (["PASS"], ["INCONCLUSIVE"], "partly reproduced"),
    (["FAIL"], ["INCONCLUSIVE"], "not reproduced"),
    (["INCONCLUSIVE"], ["INCONCLUSIVE"], "undecided"),
    (["PASS", "FAIL"], ["PASS"], "partly reproduced"),
])
def test_a_claim_over_two_experiments_names_each(e2, e3, word):
    rows = [{"claim": "2 coupling", "experiment": e, "result": r} for e, rs in (("E2", e2), ("E3", e3)) for r in rs]
    line = verdict(rows + [{"claim": "2 coupling", "experiment": "E2", "result": "descriptive"}], "2 coupling")
    assert line.startswith(word + ": E2 ")
    assert "; E3 " in line


def test_sparse_parity_figure_leaves_out_the_models_the_scorecard_leaves_out(tmp_path, monkeypatch):
    from lengthgen.reporting import figures

    df = sweep({(1, 10): 1.0, (2, 10): 1.0, (1, 80): 0.9, (2, 80): 0.7}, seeds=range(2))
    df.loc[(df["task"] == "t_k2") & (df["seed"] == 1), "accuracy"] = 0.5  # at chance: unfit
    df.assign(depth=pd.NA).to_csv(tmp_path / "sweep.csv", index=False)
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda grid, out: drawn.update(data=grid.data,
                                                                         title=grid.figure.get_suptitle()))
    figures.sparse_parity(tmp_path / "sweep.csv", ["t_k1", "t_k2"], 10, tmp_path / "f.png", fit_min=0.95)
    kept = set(drawn["data"][["task", "seed"]].itertuples(index=False, name=None))
    assert kept == {("t_k1", 0), ("t_k1", 1), ("t_k2", 0)}
    assert "left out (accuracy < 0.95 at n = 10): t_k2/rope/seed1" in drawn["title"]


CLAIMS_CFG = {"sparsity": SPARSITY, "stats": ST}


def test_power_is_high_for_a_clear_trend_and_nil_for_none():
    from lengthgen.analysis import power

    clear = pd.DataFrame({"scheme": "rope", "task": "t", "seed": [0, 1, 2, 3, 4, 5], "k": [1, 1, 2, 2, 3, 3],
                          "accuracy": [1.0, 0.98, 0.8, 0.82, 0.6, 0.62]})
    flat = clear.assign(accuracy=[0.7, 0.9, 0.9, 0.7, 0.8, 0.8])
    assert power.power(clear, 4, CLAIMS_CFG, n_sim=30, n_perm=500) == 1.0
    assert power.power(flat, 4, CLAIMS_CFG, n_sim=30, n_perm=500) < 0.1


def test_power_of_mixture_models_draws_whole_models():
    from lengthgen.analysis import power

    points = mixture_sweep({1: 0.8, 2: 0.7, 3: 0.6, 4: 0.5})
    points = points[points["length"] > 10].groupby(["scheme", "task", "seed", "k"], as_index=False)["accuracy"].mean()
    sim = power.simulated(points, 5, np.random.default_rng(0))
    assert all(sorted(g) == [1, 2, 3, 4] for _, g in sim.groupby("seed")["k"]) and sim["seed"].nunique() == 5
    assert power.power(points, 6, CLAIMS_CFG, n_sim=20, n_perm=500) >= 0.9


def test_power_draws_from_the_points_the_scorecard_tests(committed_results):
    """On the committed runs: as many points per scheme as the scorecard's claim-1 row counts,
    and the two runs pooled hold both runs' points."""
    from lengthgen.analysis import power

    counts = []
    for run in ("results", "results-confirm"):
        points, cfg = power.observed_points([committed_results / run])
        scorecard = pd.read_csv(committed_results / run / "tables/claims.csv")
        trend = scorecard[scorecard["check"].str.contains("falls with k") & (scorecard["result"] != "descriptive")]
        n = {row.check.split(":")[0]: row.n for row in trend.itertuples()}
        assert points.groupby("scheme").size().to_dict() == n and cfg["stats"]["alpha"] == 0.01
        counts.append(len(points))
    both, _ = power.observed_points([committed_results / "results", committed_results / "results-confirm"])
    assert len(both) == sum(counts)


def test_claim1_points_of_models_with_the_same_accuracies_are_tied():
    """Summed in another order the two means differ in the last bit (0.1 + 0.2 + 0.3 against
    0.3 + 0.2 + 0.1); a broken tie would move Spearman's rho."""
    from lengthgen.analysis.claims import claim1_points

    rows = [("t", "rope", seed, 1, n, acc) for seed, accs in ((0, (1.0, 0.1, 0.2, 0.3)), (1, (1.0, 0.3, 0.2, 0.1)))
            for n, acc in zip((10, 20, 40, 80), accs, strict=True)]
    sweep = pd.DataFrame(rows, columns=["task", "scheme", "seed", "k", "length", "accuracy"])
    assert sum((0.1, 0.2, 0.3)) != sum((0.3, 0.2, 0.1))
    points = claim1_points(sweep, 10, {"fit_min": 0.95, "min_length_ratio": 2})
    assert len(points) == 2 and points["accuracy"].iloc[0] == points["accuracy"].iloc[1]


def test_fit_is_judged_in_a_grid_without_e1():
    """A sweep of E2/E3 tasks alone has no k column (config/chain.yaml): each model's fit is
    still judged, by its mean exact match at its training length."""
    df = coupling_sweep("e3", {("ppc", 10): [1.0, 0.5, 1.0], ("ppc", 20): [0.9, 0.1, 0.8]})
    assert "k" not in df
    assert fitted(df, 10, 0.95).tolist() == [True, False, True, True, False, True]


@pytest.mark.workflow
@pytest.mark.subprocess
@pytest.mark.parametrize("run", ["results", "results-confirm"])
def test_the_committed_scorecard_is_what_todays_claims_code_makes_of_the_committed_tables(tmp_path, committed_results,
                                                                                          run):
    """The claims rule's own command (from a dry run with the run's recorded config), rerun on a
    copy of the committed tables: the scorecard comes out byte for byte, so no edit of the
    statistics (scipy's tests in place of hand-written ones, say) changes a committed number or
    verdict unnoticed."""
    import shlex
    import shutil
    import subprocess

    from conftest import copy_workflow, run_snakemake, venv_env

    copy_workflow(tmp_path)
    shutil.copytree(committed_results / run / "tables", tmp_path / run / "tables")
    # judged with the run's own recorded config: the design that made its tables, and its rules
    shutil.copy(committed_results / run / "config.yaml", tmp_path / run / "config.yaml")
    plan = run_snakemake(tmp_path, "-n", "-p", "--cores", "1", "--configfile", f"{run}/config.yaml", "--forcerun",
                         "claims", "--until", "claims", timeout=120)
    command = next(line for line in plan.stdout.splitlines() if "python -m lengthgen claims" in line)
    argv = shlex.split(command.split(" 2> ")[0].removeprefix("Shell command: "))
    argv[argv.index("--csv") + 1], argv[argv.index("--md") + 1] = "claims.csv", "claims.md"
    if not (committed_results / run / "tables/training.csv").exists():  # a run from before the training table:
        del argv[argv.index("--training"):argv.index("--training") + 2]  # judged by accuracy alone, as it was
    done = subprocess.run(argv, cwd=tmp_path, env=venv_env(PYTHONPATH=str(tmp_path / "src")), text=True,
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    committed = committed_results / run / "tables"
    if _same_libraries(committed_results / run / "provenance.json"):
        assert (tmp_path / "claims.csv").read_text() == (committed / "claims.csv").read_text()
        assert (tmp_path / "claims.md").read_text() == (committed / "claims.md").read_text()
        return
    # made with other numpy/pandas builds (a GPU node's): float sums may round in another last
    # bit and break a tie of ranks the other way, so every row's check, result and n must match,
    # every value within 1e-3, and a permutation p within 0.005
    got, want = (pd.read_csv(p, keep_default_na=False) for p in (tmp_path / "claims.csv", committed / "claims.csv"))
    keys = ["claim", "check", "result", "n", "threshold"]
    assert got[keys].equals(want[keys])
    for column, tolerance in (("value", 1e-3), ("ci_low", 1e-3), ("ci_high", 1e-3), ("p", 5e-3)):
        a, b = (pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float) for df in (got, want))
        assert np.allclose(a, b, atol=tolerance, equal_nan=True), column


def _same_libraries(provenance) -> bool:
    """Whether a run's numpy and pandas are this environment's (its provenance.json)."""
    import json

    recorded = json.loads(provenance.read_text())
    return (recorded["numpy"], recorded["pandas"]) == (np.__version__, pd.__version__)


def test_the_scorecards_two_pages_are_swapped_in_together(tmp_path, monkeypatch):
    """A failure while the Markdown page is written leaves the old CSV page too, not a new CSV
    beside an old Markdown page."""
    import pathlib

    from lengthgen.analysis.claims import write_scorecard

    csv, md = tmp_path / "claims.csv", tmp_path / "claims.md"
    csv.write_text("old csv\n")
    md.write_text("old md\n")

    def refuse(self, *args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr(pathlib.Path, "write_text", refuse)
    with pytest.raises(OSError, match="disk gone"):
        write_scorecard([], csv, md)
    assert csv.read_text() == "old csv\n" and md.read_text() == "old md\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claims.csv", "claims.md"]


def test_every_length_beyond_training_gets_its_effect_with_an_interval_pooled_or_not():
    """min_length_ratio 8 pools n = 80 and 160 only; n = 20 (2x), where every k holds its 1x
    accuracy, still gets its own row: an effect near 0 whose interval says the design cannot
    tell there, beside the pooled lengths' clear fall."""
    acc = {**FALLING, (1, 20): 0.95, (2, 20): 0.945, (3, 20): 0.94}
    rows = sparsity_checks(sweep(acc, seeds=range(6), noise=0.005), ["t_k1", "t_k2", "t_k3"], 10, SPARSITY, ST)
    per_length = {r["check"].split(" at ")[1].split(":")[0]: r for r in rows if "smallest k - largest k" in r["check"]}
    assert list(per_length) == ["n=20 (2x)", "n=80 (8x)", "n=160 (16x)"]
    assert per_length["n=20 (2x)"]["value"] == pytest.approx(0.01, abs=1e-6)
    assert per_length["n=20 (2x)"]["ci_high"] < 0.1 <= per_length["n=80 (8x)"]["ci_low"]
    assert all(r["result"] == "descriptive" and r["n"] == 18 for r in per_length.values())  # 6 per k
