"""Units by power: every deciding row's same-word agreement between two simulated independent
runs (units resampled whole), and the split-half check of a run's claim words."""

import numpy as np
import pandas as pd
import pytest
import yaml

from lengthgen import config, plan
from lengthgen.analysis import power


def _run(tmp_path, schema, effects: dict, seeds: int = 12, spread: float = 0.02):
    """A results directory of one E1 task trained on a mixture of k = 1..3 to n = 10, tested at
    10, 20 and 40: per scheme, accuracy beyond training falls by `effects[scheme]` from k = 1 to
    k = 3, each model's fall drawn around it with sd `spread`."""
    given = {"tasks": [{"name": "t", "kind": "sparse_parity", "schemes": sorted(effects),
                        "seeds": list(range(seeds)), "eval": {"lengths": [10, 20, 40]},
                        "params": {"k": 3, "k_mode": "mixture", "n_min": 4, "n_max": 10}}],
             "schemes": {s: {"encoding": "rope"} for s in effects}, "language": None, "attention": None}
    cfg = config.validate(given, schema)
    cfg["claims"]["stats"].update(n_boot=400, n_perm=400)
    (tmp_path / "tables").mkdir()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    rng, rows = np.random.default_rng(0), []
    for scheme, effect in effects.items():
        for seed in range(seeds):
            fall = effect + rng.normal(0, spread)
            for k in (1, 2, 3):
                for n in (10, 20, 40):
                    acc = 1.0 if n == 10 else float(np.clip(0.9 - fall * (k - 1) / 2, 0, 1))
                    rows.append({"task": "t", "scheme": scheme, "seed": seed, "length": n, "k": k, "depth": pd.NA,
                                 "examples": 500, "accuracy": acc})
    pd.DataFrame(rows).to_csv(tmp_path / "tables/length_sweep.csv", index=False)
    return power.Run(tmp_path, plan.claims_plan)


def test_a_clear_row_agrees_and_a_row_at_its_floor_does_not(tmp_path, schema):
    """A fall of 0.4 (floor 0.1) gives PASS in every simulated run; a fall at the floor, with a
    spread between models, gives PASS and INCONCLUSIVE by turns: agreement well below 0.9."""
    run = _run(tmp_path, schema, {"rope": 0.4, "alibi": 0.1}, spread=0.08)
    table = power.agreement(run, [1.0], n_sim=20, n_perm=200, n_boot=200)
    by = table.set_index(table["check"].str.split(":").str[0])
    assert by.loc["rope", "agreement"] == 1.0 and by.loc["rope", "p_pass"] == 1.0
    assert by.loc["alibi", "agreement"] < 0.9
    assert np.allclose(table[["p_pass", "p_fail", "p_inconclusive"]].sum(axis=1), 1.0)
    text = power.agreement_table(run, table)
    assert "| 12 | 1.00 ± 0.00 | 12 |" in text and "more than 12: not decidable at this cost" in text


def test_resampled_units_keep_each_seeds_rows_together(tmp_path, schema):
    run = _run(tmp_path, schema, {"rope": 0.4, "alibi": 0.1})
    sweep, _, _ = run.resampled(2.0, np.random.default_rng(1))
    assert sorted(sweep["seed"].unique()) == list(range(24))
    per_unit = sweep.groupby("seed")["scheme"].nunique()
    assert (per_unit == 2).all()  # every scheme of a drawn seed came with it: pairs stay paired


def test_the_split_half_check_names_the_rows_whose_halves_disagree(tmp_path, schema):
    run = _run(tmp_path, schema, {"rope": 0.4})
    text = power.split_half(run)
    assert "| claim 1 sparsity | reproduced (1 PASS) | reproduced (1 PASS) | reproduced (1 PASS) |" in text
    assert "differs between the halves: 0." in text


def test_a_run_without_its_config_is_named(tmp_path):
    with pytest.raises(power.UserError, match="config.yaml: no such file; run the grid first"):
        power.Run(tmp_path, plan.claims_plan)


def test_the_table_goes_into_its_block_and_a_missing_block_is_named(tmp_path):
    doc = tmp_path / "protocol.md"
    doc.write_text("a\n<!-- power: results -->\nold\n<!-- end power -->\nb\n")
    power.write_block(doc, "results", "| new |")
    assert doc.read_text() == "a\n<!-- power: results -->\n| new |\n<!-- end power -->\nb\n"
    with pytest.raises(power.UserError, match="no block '<!-- power: results-confirm -->'"):
        power.write_block(doc, "results-confirm", "x")


def test_a_row_that_agrees_only_below_its_units_needs_more_not_fewer(tmp_path, schema):
    """INCONCLUSIVE for want of units, a row agrees at half the units; that says nothing of what
    it needs: the count is the fewest from which every larger multiple agrees."""
    run = _run(tmp_path, schema, {"rope": 0.4})
    check = next(iter(run.words(run.claims["stats"])))
    words = {"p_pass": 0.0, "p_fail": 1.0, "p_inconclusive": 0.0}
    table = pd.DataFrame([{"check": check, "observed": "FAIL", "factor": f, **words, "agreement": a}
                          for f, a in ((0.5, 0.95), (1.0, 0.6), (2.0, 0.95))])
    assert "| 24 |" in power.agreement_table(run, table).splitlines()[-1]
    table.loc[2, "agreement"] = 0.6
    assert "more than 24: not decidable" in power.agreement_table(run, table)
    # INCONCLUSIVE at half the units (too few), FAIL from the run's units on: it needs the 12
    table = table.assign(agreement=1.0)
    table.loc[0, ["p_fail", "p_inconclusive"]] = [0.0, 1.0]
    assert power.agreement_table(run, table).splitlines()[-1].endswith("| 12 |")
    steady = table.assign(observed="INCONCLUSIVE", p_fail=0.0, p_inconclusive=1.0)
    assert "INCONCLUSIVE at every count to 24: not decidable" in power.agreement_table(run, steady)


def _one_of_ten(predictive: bool, n_truth: int = 20000):
    """Ten units, one of them 1; a run draws one unit and reads PASS when it is the 1. Plug-in,
    every run has P(PASS) = 0.1, so two agree with 0.1^2 + 0.9^2 = 0.82. Predictive, a truth
    holds K ~ Binomial(10, 0.1) ones, p = K / 10, and E[p^2 + (1 - p)^2] = 1 - 2 E[p] + 2 E[p^2]
    = 1 - 0.2 + 2 (0.009 + 0.01) = 0.838: the effect's own uncertainty makes words differ less
    often here, because it widens the chance of truths with no 1 at all."""
    units = np.array([1] + [0] * 9)

    def truth_of(rng):
        return rng.choice(units, size=10) if predictive else units

    found = power.two_stage(truth_of, lambda truth, rng: rng.choice(truth, size=1),
                            lambda run, _: {"row": "PASS" if run[0] == 1 else "FAIL"}, ["row"], n_truth, seed=1)
    return found["row"]


def test_the_predictive_step_gives_the_known_agreement_and_its_monte_carlo_error():
    plug_in, predictive = _one_of_ten(False), _one_of_ten(True)
    for found, exact in ((plug_in, 0.82), (predictive, 0.838)):
        assert abs(found["agreement"] - exact) < 4 * found["mc_se"]
        # two runs of a truth agree or not: the error is that of a share over 20,000 truths
        assert found["mc_se"] == pytest.approx(np.sqrt(exact * (1 - exact) / 20000), rel=0.1)
    assert plug_in["p"]["PASS"] == pytest.approx(0.1, abs=0.01)


def test_the_table_shows_each_agreement_with_its_monte_carlo_error(tmp_path, schema):
    run = _run(tmp_path, schema, {"rope": 0.4})
    table = power.agreement(run, [1.0], n_sim=4, n_perm=200, n_boot=200)
    assert (table["agreement"] == 1.0).all() and (table["mc_se"] == 0.0).all()
    assert "| 1.00 ± 0.00 |" in power.agreement_table(run, table)


def test_processes_sharing_the_truths_give_the_same_numbers(tmp_path, schema):
    run = _run(tmp_path, schema, {"rope": 0.4})
    alone = power.agreement(run, [1.0, 2.0], n_sim=3, n_perm=100, n_boot=100)
    shared = power.agreement(run, [1.0, 2.0], n_sim=3, n_perm=100, n_boot=100, jobs=2)
    pd.testing.assert_frame_equal(alone, shared)
