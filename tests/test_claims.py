"""Claim 1 checks on synthetic sweeps: a falling curve passes, a flat one fails, one k is
N/A, and only test lengths of at least min_length_ratio x the training length are judged."""

import pandas as pd
import pytest

from lengthgen.claims import coupling_checks, sparsity_checks, spearman, unmeasured_rows, write_scorecard

CFG = {"spearman_max": -0.8, "min_drop": 0.3, "min_length_ratio": 8, "fit_min": 0.95}


def trend(rows):
    """The trend checks, without the first row (whether every model fits)."""
    assert rows[0]["check"].startswith("every model fits")
    return rows[1:]


def sweep(acc_by_k_and_length, schemes=("rope",), seeds=(0, 1)):
    rows = [{"task": f"t_k{k}", "scheme": s, "seed": seed, "length": n, "k": k, "examples": 100, "accuracy": a}
            for s in schemes for seed in seeds for (k, n), a in acc_by_k_and_length.items()]
    return pd.DataFrame(rows)

def test_falling_accuracy_passes_and_short_lengths_are_not_judged():
    df = sweep({(1, 10): 1.0, (2, 10): 1.0, (3, 10): 1.0, (1, 80): 0.95, (2, 80): 0.8, (3, 80): 0.55})
    rows = trend(sparsity_checks(df, ["t_k1", "t_k2", "t_k3"], train_max=10, cfg=CFG))
    assert [r["check"] for r in rows] == ["rope at n=80 (8x): Spearman(k, accuracy)",
                                          "rope at n=80 (8x): accuracy(k=1) - accuracy(k=3)"]
    assert [r["result"] for r in rows] == ["PASS", "PASS"]
    assert rows[0]["value"] == -1.0 and rows[1]["value"] == pytest.approx(0.4)

def test_small_drop_fails_even_when_ordered():
    df = sweep({(1, 80): 1.0, (2, 80): 0.9, (3, 80): 0.8})
    rows = trend(sparsity_checks(df, ["t_k1", "t_k2", "t_k3"], train_max=10, cfg=CFG))
    assert [r["result"] for r in rows] == ["PASS", "FAIL"]

def test_rising_accuracy_fails_and_single_k_is_not_applicable():
    rising = trend(sparsity_checks(sweep({(1, 80): 0.5, (2, 80): 0.9}), ["t_k1", "t_k2"], train_max=10, cfg=CFG))
    assert [r["result"] for r in rising] == ["FAIL", "FAIL"]
    single = trend(sparsity_checks(sweep({(1, 80): 0.5}), ["t_k1"], train_max=10, cfg=CFG))
    assert [r["result"] for r in single] == ["N/A"]

def test_spearman_matches_hand_computed_ranks():
    assert spearman([1, 2, 3, 4], [0.9, 0.95, 0.6, 0.5]) == pytest.approx(-0.8)
    assert spearman([1, 2, 3], [1.0, 1.0, 0.8]) == pytest.approx(-0.8660, abs=1e-4)


def test_claims_without_an_experiment_are_listed_as_not_measured():
    rows = unmeasured_rows(["2 coupling", "3 language"])
    assert [r["claim"] for r in rows] == ["2 coupling", "3 language"]
    assert all(r["result"] == "N/A" and "not in this grid" in r["check"] for r in rows)


def test_scorecard_markdown_is_a_well_formed_table(tmp_path):
    rows = trend(sparsity_checks(sweep({(1, 80): 1.0, (2, 80): 0.5}), ["t_k1", "t_k2"], train_max=10, cfg=CFG))
    write_scorecard(rows + unmeasured_rows(["3 language"]), tmp_path / "c.csv", tmp_path / "c.md")
    lines = (tmp_path / "c.md").read_text().splitlines()[2:]
    assert lines[1] == "|---|---|---|---|---|---|"
    assert all(line.count("|") == 7 for line in lines), lines


def test_no_long_enough_length_is_said_not_skipped():
    rows = trend(sparsity_checks(sweep({(1, 20): 1.0, (2, 20): 0.5}), ["t_k1", "t_k2"], train_max=10, cfg=CFG))
    assert [r["result"] for r in rows] == ["N/A"] and "no test length >= 8x" in rows[0]["check"]


def test_mixture_models_are_judged_one_model_at_a_time():
    rows = [{"task": task, "scheme": "rope", "seed": 0, "length": 80, "k": k, "examples": 10, "accuracy": acc}
            for task, accs in (("K2", [1.0, 0.5]), ("K3", [0.6, 0.6, 0.6])) for k, acc in enumerate(accs, start=1)]
    checks = trend(sparsity_checks(pd.DataFrame(rows), ["K2", "K3"], train_max=10, cfg=CFG))
    assert [(r["check"].split(" at ")[0], r["result"]) for r in checks] == [
        ("rope/K2", "PASS"), ("rope/K2", "PASS"), ("rope/K3", "FAIL"), ("rope/K3", "FAIL")]


def test_fixed_and_mixture_models_in_one_grid_are_judged_apart():
    """Fixed-k tasks (one k each) are compared with each other, a mixture task on its own: a
    mixture model's flat curve must not average into the fixed models' falling one."""
    fixed = sweep({(1, 80): 1.0, (2, 80): 0.8, (3, 80): 0.5})
    flat = pd.DataFrame([{"task": "K3", "scheme": "rope", "seed": 0, "length": 80, "k": k, "examples": 10,
                          "accuracy": 0.6} for k in (1, 2, 3)])
    checks = trend(sparsity_checks(pd.concat([fixed, flat]), ["t_k1", "t_k2", "t_k3", "K3"], train_max=10, cfg=CFG))
    assert [(r["check"].split(" at ")[0], r["result"]) for r in checks] == [
        ("rope", "PASS"), ("rope", "PASS"), ("rope/K3", "FAIL"), ("rope/K3", "FAIL")]
    assert checks[1]["value"] == pytest.approx(0.5)


def test_fit_row_names_each_model_that_did_not_fit_its_training_lengths():
    """A model at chance at the training length would drag its k's mean down and fake a trend:
    the first row fails and names it; none at the training length is N/A, all fit is PASS."""
    df = sweep({(1, 10): 1.0, (3, 10): 1.0, (1, 80): 1.0, (3, 80): 0.5})
    df.loc[(df["k"] == 3) & (df["seed"] == 0) & (df["length"] == 10), "accuracy"] = 0.49
    fit = sparsity_checks(df, ["t_k1", "t_k3"], train_max=10, cfg=CFG)[0]
    assert (fit["result"], fit["value"]) == ("FAIL", pytest.approx(0.49))
    assert fit["detail"] == "3 of 4 models: below, t_k3/rope/seed0 0.490"
    df.loc[df["length"] == 10, "accuracy"] = 0.96
    assert sparsity_checks(df, ["t_k1", "t_k3"], train_max=10, cfg=CFG)[0]["result"] == "PASS"
    assert sparsity_checks(df, ["t_k1", "t_k3"], train_max=12, cfg=CFG)[0]["result"] == "N/A"


def test_trend_rows_leave_out_a_model_that_did_not_fit():
    """A k = 3 seed at chance everywhere (0.5) makes a flat curve look like a fall of 0.3: the
    trend rows judge the fitted seed alone (drop 0.1, FAIL) and name the one left out."""
    df = sweep({(1, 10): 1.0, (3, 10): 1.0, (1, 80): 1.0, (3, 80): 0.9})
    df.loc[(df["k"] == 3) & (df["seed"] == 0), "accuracy"] = 0.5
    rows = trend(sparsity_checks(df, ["t_k1", "t_k3"], train_max=10, cfg=CFG))
    assert rows[1]["value"] == pytest.approx(0.1) and rows[1]["result"] == "FAIL"
    assert rows[1]["detail"] == "k=1: 1.000, k=3: 0.900; left out, unfit: t_k3/rope/seed0"
    other = trend(sparsity_checks(df.assign(scheme="nope"), ["t_k1", "t_k3"], train_max=10, cfg=CFG))
    assert other[1]["detail"].endswith("t_k3/nope/seed0")
    df.loc[df["k"] == 3, "accuracy"] = 0.5  # no k = 3 model fits: one k is left, no trend to judge
    (row,) = trend(sparsity_checks(df, ["t_k1", "t_k3"], train_max=10, cfg=CFG))
    assert row["result"] == "N/A" and row["detail"] == "k=1: 1.000; left out, unfit: t_k3/rope/seed0, t_k3/rope/seed1"
    df["accuracy"] = 0.5  # no model fits at all
    (row,) = trend(sparsity_checks(df, ["t_k1", "t_k3"], train_max=10, cfg=CFG))
    assert row["check"].endswith("no model fits") and row["detail"].startswith("left out, unfit: t_k1/rope/seed0")


# -- claim 2 -------------------------------------------------------------------------------

COUPLING = {"length_ratio": 2, "coupled_min": 0.5, "index_max": 0.1, "fit_min": 0.95, "margin": 0.3}
ROLES = {"rope": {"positions": "index", "position_head": "none"},
         "pose": {"positions": "index", "position_head": "none"},
         "pc": {"positions": "coupled", "position_head": "none"},
         "ppc": {"positions": "coupled", "position_head": "pointer"}}


def coupling_sweep(task, acc, depths=(None,), seeds=(0, 1, 2)):
    """acc: {(scheme, length): [accuracy per seed]}"""
    rows = [{"task": task, "scheme": s, "seed": seed, "length": n, "depth": d, "accuracy": a[i]}
            for (s, n), a in acc.items() for i, seed in enumerate(seeds) for d in depths]
    return pd.DataFrame(rows)


def info(kind, schemes):
    return {"kind": kind, "n_max": 10, "scheme_options": {s: ROLES[s] for s in schemes}}


def test_scratchpad_coupling_uses_the_median_over_seeds_at_2x():
    df = coupling_sweep("e2", {("pc", 20): [0.9, 0.6, 0.0], ("ppc", 20): [0.4, 0.45, 1.0],
                               ("rope", 20): [0.0, 0.05, 0.9], ("pc", 10): [1, 1, 1]})
    rows = coupling_checks(df, {"e2": info("scratchpad_parity", ["pc", "ppc", "rope"])}, COUPLING)
    got = {r["check"].split(": ")[1]: (r["value"], r["result"]) for r in rows}
    assert got == {"pc (pc) exact match": (0.6, "PASS"), "ppc (ppc) exact match": (0.45, "FAIL"),
                   "rope (index) exact match": (0.05, "PASS")}


def test_assignment_needs_ppc_to_fit_and_beat_the_best_index_scheme_pose_included():
    df = coupling_sweep("e3", {("ppc", 10): [1.0, 0.96, 0.97], ("ppc", 20): [0.8, 0.7, 0.9],
                               ("rope", 20): [0.1, 0.1, 0.1], ("pose", 20): [0.55, 0.55, 0.6]}, depths=(1, 2))
    e3 = {**info("variable_assignment", ["ppc", "rope", "pose"]), "answer_format": "chain"}
    rows = coupling_checks(df, {"e3": e3}, COUPLING)
    assert [r["result"] for r in rows] == ["PASS", "FAIL"]
    assert all(r["check"].startswith("e3 (chain answers) at n=") for r in rows)
    assert rows[0]["value"] == pytest.approx(0.97)
    assert "best index scheme (pose)" in rows[1]["check"] and rows[1]["value"] == pytest.approx(0.25)


def test_coupling_without_the_2x_length_is_not_applicable():
    df = coupling_sweep("e2", {("pc", 10): [1, 1, 1], ("pc", 40): [1, 1, 1]})
    rows = coupling_checks(df, {"e2": info("scratchpad_parity", ["pc"])}, COUPLING)
    assert [r["result"] for r in rows] == ["N/A"]


def test_sparse_parity_figure_leaves_out_the_models_the_scorecard_leaves_out(tmp_path, monkeypatch):
    from lengthgen import figures

    df = sweep({(1, 10): 1.0, (2, 10): 1.0, (1, 80): 0.9, (2, 80): 0.7})
    df.loc[(df["task"] == "t_k2") & (df["seed"] == 1), "accuracy"] = 0.5  # at chance: unfit
    df.assign(depth=pd.NA).to_csv(tmp_path / "sweep.csv", index=False)
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda grid, out: drawn.update(data=grid.data,
                                                                         title=grid.figure.get_suptitle()))
    figures.sparse_parity(tmp_path / "sweep.csv", ["t_k1", "t_k2"], 10, tmp_path / "f.png", fit_min=0.95)
    kept = set(drawn["data"][["task", "seed"]].itertuples(index=False, name=None))
    assert kept == {("t_k1", 0), ("t_k1", 1), ("t_k2", 0)}
    assert "left out (accuracy < 0.95 at n = 10): t_k2/rope/seed1" in drawn["title"]
    figures.sparse_parity(tmp_path / "sweep.csv", ["t_k1", "t_k2"], 10, tmp_path / "f.png")  # no fit_min: all
    assert len(drawn["data"]) == len(df) and "left out" not in drawn["title"]
    df.assign(accuracy=0.5, depth=pd.NA).to_csv(tmp_path / "sweep.csv", index=False)  # no model fits: all drawn
    figures.sparse_parity(tmp_path / "sweep.csv", ["t_k1", "t_k2"], 10, tmp_path / "f.png", fit_min=0.95)
    assert len(drawn["data"]) == len(df) and "no model fits (accuracy < 0.95 at n = 10)" in drawn["title"]
