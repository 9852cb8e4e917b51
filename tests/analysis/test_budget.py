"""A fit is a training that ended: the training table from each cell's meta.json, and the claims
leaving out a model cut by max_steps whatever its accuracy (PASS, FAIL and INCONCLUSIVE rows)."""

import json

import pandas as pd
import pytest

from lengthgen.analysis import budget
from lengthgen.analysis.claims import coupling_checks, fitted, sparsity_checks
from lengthgen.support.errors import UserError

ST = {"alpha": 0.01, "level": 0.95, "n_boot": 2000, "n_perm": 5000, "seed": 0}
COUPLING = {"length_ratio": 2, "assignment_length_ratio": 2, "coupled_min": 0.9, "index_max": 0.1, "fit_min": 0.95,
            "min_fitted": 3, "closure_min": 0.5, "min_headroom": 0.1, "match_tolerance": 0.05}
COPY = {"positions": "index", "position_head": "pointer"}
OPTS = {"pointer": COPY, "pc": {"positions": "coupled", "position_head": "pointer", "feed_ids": "oracle"},
        "ppc": {"positions": "coupled", "position_head": "pointer"}}
CONTROL = "ppc - the copy-head control, paired by seed"
SEEDS = (0, 1, 2, 3, 4, 5)


def _meta(path, task, scheme, seed, stopped="converged", steps=900):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cell": {"task": task, "scheme": scheme, "seed": seed}, "steps": steps,
                                "stopped": stopped, "final_loss": 1e-4, "final_accuracy": 1.0}))
    return path


def test_the_training_table_is_one_row_per_cell_in_the_grids_order(tmp_path):
    cells = [("e3", "ppc", 0), ("e3", "pointer", 0)]
    paths = [_meta(tmp_path / "a.json", *cells[0]), _meta(tmp_path / "b.json", *cells[1], "max_steps", 8000)]
    budget.write(paths, cells, tmp_path / "training.csv")
    table = budget.read(tmp_path / "training.csv")
    assert table[["task", "scheme", "seed", "steps", "stopped"]].values.tolist() == [
        ["e3", "ppc", 0, 900, "converged"], ["e3", "pointer", 0, 8000, "max_steps"]]


def test_a_meta_json_of_another_cell_or_none_at_all_is_named_in_one_line(tmp_path):
    other = _meta(tmp_path / "m.json", "e3", "ppc", 1)
    with pytest.raises(UserError, match=r"m.json: holds cell e3/ppc/1, expected e3/ppc/0; delete it"):
        budget.write([other], [("e3", "ppc", 0)], tmp_path / "t.csv")
    other.write_text("{")
    with pytest.raises(UserError, match=r"m.json: not a training's meta.json \(JSONDecodeError"):
        budget.write([other], [("e3", "ppc", 1)], tmp_path / "t.csv")
    assert not (tmp_path / "t.csv").exists()


def _training(stops: dict) -> pd.DataFrame:
    """{(scheme, seed): stopped} for task e3; every other cell converged."""
    return pd.DataFrame([{"task": "e3", "scheme": s, "seed": seed, "steps": 1, "stopped": stops.get((s, seed),
                         "converged"), "final_loss": 0.0, "final_accuracy": 1.0}
                         for s in OPTS for seed in SEEDS])


def _e3(ppc20, control20, stops=None):
    ones = [1] * len(SEEDS)
    acc = {("pc", 10): ones, ("pc", 20): ones, ("ppc", 10): ones, ("ppc", 20): ppc20, ("pointer", 10): ones,
           ("pointer", 20): control20}
    sweep = pd.DataFrame([{"task": "e3", "scheme": s, "seed": seed, "length": n, "depth": 1, "examples": 500,
                           "accuracy": a[i]} for (s, n), a in acc.items() for i, seed in enumerate(SEEDS)])
    sweep = budget.mark(sweep, None if stops is None else _training(stops))
    task = {"kind": "variable_assignment", "n_max": 10, "scheme_options": OPTS, "answer_format": "statements",
            "max_position": 100, "test_tokens": {"10": 52, "15": 72, "20": 92}}
    rows = coupling_checks(sweep, {"e3": task}, COUPLING, ST)
    return next(r for r in rows if CONTROL in r["check"])


def test_a_control_cut_by_max_steps_is_no_fit_whatever_its_accuracy():
    ppc, control = [0.99, 1.0, 0.995, 1.0, 0.99, 1.0], [1.0, 1.0, 0.99, 1.0, 1.0, 0.995]
    assert _e3(ppc, control)["result"] == "PASS"  # no training table: accuracy alone, as before
    assert _e3(ppc, control, stops={})["result"] == "PASS"  # every model ended
    cut = _e3(ppc, control, stops={("pointer", s): "max_steps" for s in (1, 2, 3, 5)})
    assert cut["result"] == "INCONCLUSIVE"  # 2 of 6 control seeds left: fewer than min_fitted 3
    assert "pointer 2 of 6 (4 cut by max_steps)" in cut["detail"]
    fail = _e3([0.8, 0.82, 0.78, 0.8, 0.79, 0.81], control, stops={("pointer", 3): "max_steps"})
    assert fail["result"] == "FAIL" and fail["n"] == 5  # ppc clearly below the 5 controls that ended


def test_a_cell_missing_from_the_training_table_counts_as_cut():
    sweep = pd.DataFrame([{"task": "e3", "scheme": "ppc", "seed": s, "length": 10, "accuracy": 1.0} for s in (0, 9)])
    marked = budget.mark(sweep, _training({}))
    assert marked[budget.TO_END].tolist() == [True, False]
    assert list(budget.capped(marked)) == [("e3", "ppc", 9)]


def test_claim_1_leaves_out_a_model_cut_by_max_steps():
    rows = [{"task": "mix", "scheme": "rope", "seed": seed, "length": n, "k": k, "examples": 500,
             "accuracy": 1.0 if n == 10 else 0.9 - 0.15 * k + 0.01 * seed}
            for seed in range(6) for k in (1, 2, 3) for n in (10, 80, 160)]
    sweep = pd.DataFrame(rows)
    training = pd.DataFrame([{"task": "mix", "scheme": "rope", "seed": s, "steps": 1,
                              "stopped": "max_steps" if s < 4 else "converged", "final_loss": 0.0,
                              "final_accuracy": 1.0} for s in range(6)])
    cfg = {"min_length_ratio": 8, "fit_min": 0.95, "min_models_per_k": 3, "effect_floor": 0.1}
    trend = [r for r in sparsity_checks(sweep, ["mix"], 10, cfg, ST) if r["result"] != "descriptive"]
    assert [r["result"] for r in trend] == ["PASS"]
    marked = budget.mark(sweep, training)
    assert fitted(marked, 10, 0.95).sum() == 2 * 9  # the two models that ended
    rows = sparsity_checks(marked, ["mix"], 10, cfg, ST)
    assert [r["result"] for r in rows if r["result"] != "descriptive"] == ["INCONCLUSIVE"]
    fit_row = rows[0]
    assert fit_row["value"] == pytest.approx(2 / 6, abs=1e-4)
    assert fit_row["detail"].endswith("cut by max_steps: mix/rope/seed0, mix/rope/seed1, mix/rope/seed2, "
                                      "mix/rope/seed3")


def test_runs_pooled_with_a_run_without_a_training_table_mark_only_their_own_models():
    marked = budget.mark(pd.DataFrame([{"task": "e3", "scheme": "ppc", "seed": 0, "length": 10}]),
                         _training({("ppc", 0): "max_steps"}))
    unmarked = pd.DataFrame([{"task": "e3", "scheme": "ppc", "seed": 1, "length": 10}])
    assert list(budget.capped(pd.concat([marked, unmarked], ignore_index=True))) == [("e3", "ppc", 0)]
