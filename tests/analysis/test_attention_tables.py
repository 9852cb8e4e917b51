"""The attention analysis's table, figure and scorecard rows, on made-up cells: the table is
long and sorted, the figure is drawn, the Spearman row passes, fails or cannot tell as the
numbers say, and it is never counted as a claim of the paper."""

import numpy as np
import pandas as pd
import pytest

from lengthgen.analysis import attention as attention_report
from lengthgen.analysis import claims
from lengthgen.analysis.verdict import verdict_table
from lengthgen.reporting import attention as attention_figure
from lengthgen.support.fileio import write_parquet

LENGTHS = (12, 96)
STATS = {"alpha": 0.01, "level": 0.95, "n_boot": 200, "n_perm": 2000, "seed": 0}


def _cell(path, task, scheme, seed, attribution, mass, axis=None):
    """One cell's attention.parquet: 2 layers x 2 heads, the four attention metrics, the
    attribution and chance rows, at each length (and at each value of `axis`, e.g. k=1)."""
    cols = {name: [] for name in ["task", "scheme", "seed", "length", *(axis or {}), "layer", "head", "metric",
                                  "value", "examples", "targets"]}
    for n in LENGTHS:
        entries = [(layer, head, m, mass * (head + 1) / 2 if m == "mass" else 0.5)
                   for layer in (0, 1) for head in (0, 1) for m in ("mass", "topk_mass", "entropy", "rank")]
        entries += [(None, None, "attribution_mass", attribution), (None, None, "chance", 1 / n)]
        for layer, head, metric, value in entries:
            for name, v in (("task", task), ("scheme", scheme), ("seed", seed), ("length", n), *(axis or {}).items(),
                            ("layer", layer), ("head", head), ("metric", metric), ("value", value),
                            ("examples", 4), ("targets", 4)):
                cols[name].append(v)
    write_parquet(path, cols)
    return path


def _sweep(models: dict) -> pd.DataFrame:
    """A sweep table: each (task, scheme, seed) fits at 12 and has the given accuracy at 96."""
    rows = [{"task": t, "scheme": s, "seed": seed, "length": n, "k": pd.NA, "depth": pd.NA,
             "accuracy": 1.0 if n == 12 else acc} for (t, s, seed), acc in models.items() for n in LENGTHS]
    return pd.DataFrame(rows)


@pytest.fixture
def table(tmp_path):
    paths = [_cell(tmp_path / f"a{seed}.parquet", "parity_k1", "rope", seed, 0.1 + 0.1 * seed, 0.2, {"k": 1})
             for seed in range(3)]
    paths += [_cell(tmp_path / "b.parquet", "assign", "ppc", 0, 0.5, 0.4, {"depth": 2})]
    csv = tmp_path / "attention.csv"
    df = attention_report.aggregate(paths[::-1], csv)
    return csv, df


def test_table_is_long_sorted_and_keeps_empty_axes_empty(table):
    csv, df = table
    read = attention_report.read(csv)
    assert list(read.columns) == ["task", "scheme", "seed", "length", "k", "depth", "layer", "head", "metric",
                                  "value", "examples", "targets"]
    assert read["task"].tolist()[0] == "assign" and read["k"].isna().sum() == (read["task"] == "assign").sum()
    assert read.loc[read["metric"] == "chance", "layer"].isna().all()
    assert len(read) == 4 * len(LENGTHS) * (2 * 2 * 4 + 2)
    models = attention_report.per_model(read)
    one = models[(models["task"] == "parity_k1") & (models["seed"] == 2) & (models["length"] == 96)].iloc[0]
    assert one["attribution"] == pytest.approx(0.3) and one["attention"] == pytest.approx(0.2)  # head 1's 2 x 0.2 / 2
    assert one["chance"] == pytest.approx(1 / 96, abs=1e-4)  # the table keeps 4 decimals


def _language(path):
    """E4's rows as lengthgen.language.attention writes them: 2 layers x 2 heads, the mean row."""
    keys = [(layer, head, m) for layer in (0, 1) for head in (0, 1) for m in ("jaccard", "mass", "topk_mass")]
    keys += [(None, None, m) for m in ("jaccard", "mass", "topk_mass", "chance", "jaccard_chance")]
    fixed = {"task": "language", "scheme": "long", "seed": 0, "length": 128, "examples": 50, "targets": 50}
    cols = {name: [v] * len(keys) for name, v in fixed.items()}
    cols |= {"layer": [k[0] for k in keys], "head": [k[1] for k in keys], "metric": [k[2] for k in keys],
             "value": [4 / 128 if k[2] == "chance" else 0.3 for k in keys]}
    write_parquet(path, cols)
    return path


@pytest.mark.parametrize("with_language", [False, True])
def test_figure_is_drawn(table, tmp_path, with_language):
    csv, df = table
    if with_language:
        parts = [*sorted(tmp_path.glob("*.parquet")), _language(tmp_path / "lang.parquet")]
        attention_report.aggregate(parts, csv)
    out = tmp_path / "attention.png"
    attention_figure.figure(csv, {"parity_k1": "sparse_parity", "assign": "variable_assignment"}, out)
    assert out.stat().st_size > 10_000


def _rows(tmp_path, accuracy, n_models=8, min_models=5):
    """Analysis rows for n_models E1 models whose attribution at 96 rises with the seed."""
    paths = [_cell(tmp_path / f"c{s}.parquet", "parity_k1", "rope", s, 0.05 * s, 0.1, {"k": 1})
             for s in range(n_models)]
    attn = attention_report.per_model(attention_report.collect(paths))
    sweep = _sweep({("parity_k1", "rope", s): accuracy(s) for s in range(n_models)})
    experiments = {"E1 sparse parity": {"tasks": {"parity_k1": 12}, "fit_min": 0.95}}
    return claims.attention_checks(attn, sweep, experiments, {"min_models": min_models, "min_spread": 0.05}, STATS)


def test_attribution_that_tracks_accuracy_passes_and_the_attention_row_is_descriptive(tmp_path):
    rows = _rows(tmp_path, lambda s: 0.5 + 0.05 * s)
    assert [r["claim"] for r in rows] == [claims.ANALYSIS] * 2
    assert rows[0]["result"] == "PASS" and rows[0]["value"] == 1.0 and rows[0]["n"] == 8
    assert "n=96" in rows[0]["check"] and "attribution" in rows[0]["check"]
    assert rows[1]["result"] == "descriptive"  # attention mass is equal everywhere: constant side


def test_attribution_unrelated_to_accuracy_fails_with_its_numbers(tmp_path):
    rng = np.random.default_rng(3)
    acc = dict(enumerate(rng.permutation(8) / 10 + 0.1))
    rows = _rows(tmp_path, lambda s: acc[s])
    assert rows[0]["result"] == "FAIL" and rows[0]["p"] > 0.01 and not np.isnan(rows[0]["value"])


def test_exact_match_without_spread_cannot_tell(tmp_path):
    """0.994-1.000 across the models: no ordering to correlate with, whatever the attribution."""
    rows = _rows(tmp_path, lambda s: 0.994 + 0.00075 * s)
    assert rows[0]["result"] == "INCONCLUSIVE" and rows[0]["detail"].startswith("exact match spans less than 0.05")


def test_six_perfectly_ordered_models_cannot_tell_at_the_registered_minimum(tmp_path, schema):
    """Six models reach one-sided p <= 0.01 only when ordered perfectly (rho 0.89 does not), so
    the schema's min_models (8) calls six INCONCLUSIVE, not a FAIL of a rho near 0.9."""
    default = schema["properties"]["claims"]["properties"]["attention"]["properties"]["min_models"]["default"]
    rows = _rows(tmp_path, lambda s: 0.5 + 0.05 * s, n_models=6, min_models=default)
    assert rows[0]["result"] == "INCONCLUSIVE" and "6 fitted models; needs 8" in rows[0]["detail"]
    assert _rows(tmp_path, lambda s: 0.5 + 0.05 * s, n_models=8, min_models=default)[0]["result"] == "PASS"


def test_too_few_fitted_models_cannot_tell(tmp_path):
    rows = _rows(tmp_path, lambda s: 0.5 + 0.05 * s, n_models=4)
    assert rows[0]["result"] == "INCONCLUSIVE" and "4 fitted models; needs 5" in rows[0]["detail"]


def test_the_analysis_is_never_counted_as_a_claim_of_the_paper():
    rows = [{"claim": "1 sparsity", "result": "PASS"}, {"claim": claims.ANALYSIS, "result": "FAIL"}]
    table = verdict_table(rows)
    assert "analysis" not in table and "| 1 sparsity | E1 | reproduced (1 PASS) |" in table
    assert claims.verdict(rows, claims.ANALYSIS).startswith("beyond the paper")
    assert claims.heading(claims.ANALYSIS) == "analysis attention"
    assert claims.heading("1 sparsity") == "claim 1 sparsity"


def test_diff_matches_attention_rows_on_layer_head_and_metric():
    """attention.csv has many rows per cell and length: `lengthgen diff` matches them on
    layer, head and metric too, so one moved value is one moved cell."""
    import io

    from lengthgen.analysis.diff import moved_cells

    head = "task,scheme,seed,length,k,depth,layer,head,metric,value\n"
    old = head + "t,rope,0,12,1,,0,0,mass,0.5\nt,rope,0,12,1,,0,1,mass,0.4\nt,rope,0,12,1,,,,chance,0.1\n"
    new = head + "t,rope,0,12,1,,0,1,mass,0.3\nt,rope,0,12,1,,,,chance,0.1\nt,rope,0,12,1,,0,0,mass,0.5\n"
    moved = moved_cells(*(pd.read_csv(io.StringIO(t), dtype=str, keep_default_na=False) for t in (old, new)), 0.0)
    assert moved[["layer", "head", "metric", "old", "new"]].values.tolist() == [["0", "1", "mass", "0.4", "0.3"]]
