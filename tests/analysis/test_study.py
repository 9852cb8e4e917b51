"""A budget study's table: fit share, the spread and share of good seeds per length, steps and
early stops, CPU seconds, and its block in a document."""

import json

import pandas as pd
import pytest

from lengthgen.analysis import study
from lengthgen.support.errors import UserError


def _cell(root, task, scheme, seed, accs: dict, steps: int, stopped: str, cpu: float | None = 100.0):
    """One cell's sweep rows (two depth groups each at `accs[length]`), meta.json and benchmark."""
    run = root / f"runs/{task}/{scheme}/seed{seed}"
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"steps": steps, "stopped": stopped}))
    if cpu is not None:
        bench = root / f"benchmarks/train/{task}/{scheme}"
        bench.mkdir(parents=True, exist_ok=True)
        (bench / f"seed{seed}.tsv").write_text(f"s\th:m:s\n{cpu}\t0:01:40\n")
    return [{"task": task, "scheme": scheme, "seed": seed, "length": n, "k": pd.NA, "depth": d, "examples": 250,
             "accuracy": acc} for n, acc in accs.items() for d in (1, 2)]


def _study(tmp_path, rows):
    (tmp_path / "tables").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "tables/length_sweep.csv", index=False)
    return study.study_table(tmp_path)


def test_the_table_counts_fits_good_seeds_and_early_stops(tmp_path):
    rows = []
    # the control: 3 seeds, one unfit at 1x; at 4x one seed good, two not; all but seed 0 cut at max_steps
    for seed, (one, four) in enumerate([(1.0, 0.95), (0.96, 0.40), (0.80, 0.30)]):
        steps, stopped = (7000, "converged") if seed == 0 else (8000, "max_steps")
        rows += _cell(tmp_path, "s8000", "pointer", seed, {8: one, 32: four}, steps, stopped, cpu=400.0 + seed)
    for seed in range(3):
        rows += _cell(tmp_path, "s8000", "ppc", seed, {8: 1.0, 32: 0.99}, 1500 + 100 * seed, "converged", cpu=90.0)
    table = _study(tmp_path, rows)
    lines = {line.split(" | ")[1]: line for line in table.splitlines()[2:]}
    assert "| s8000 | pointer | 2/3 | 1/3 | 0.40 [0.30-0.95], 1/3 | 8000 [7000-8000] | 1/3 | 401 |" == lines["pointer"]
    assert "| s8000 | ppc | 3/3 | 3/3 | 0.99 [0.99-0.99], 3/3 | 1600 [1500-1700] | 3/3 | 90 |" == lines["ppc"]
    assert table.splitlines()[0].count("32 (median [range], >= 0.9)") == 1


def test_a_missing_run_folder_and_settings_at_different_lengths_are_named(tmp_path):
    rows = _cell(tmp_path, "a", "ppc", 0, {8: 1.0, 32: 1.0}, 10, "converged")
    rows += [{**r, "task": "b"} for r in rows]  # task b has no run folder
    with pytest.raises(UserError, match="runs/b/ppc/seed0/meta.json: no such file"):
        _study(tmp_path, rows)
    rows = _cell(tmp_path / "x", "c", "ppc", 0, {8: 1.0, 16: 1.0}, 10, "converged")
    rows += _cell(tmp_path / "x", "d", "ppc", 0, {8: 1.0, 32: 1.0}, 10, "converged")
    with pytest.raises(UserError, match="different lengths"):
        _study(tmp_path / "x", rows)


def test_the_block_is_written_between_its_markers_and_a_missing_block_is_one_error(tmp_path):
    doc = tmp_path / "protocol.md"
    doc.write_text("before\n<!-- study: results-x -->\nold\n<!-- end study -->\nafter\n")
    study.write_block(doc, "results-x", "| new |\n")
    assert doc.read_text() == "before\n<!-- study: results-x -->\n| new |\n<!-- end study -->\nafter\n"
    with pytest.raises(UserError, match="no block '<!-- study: results-y -->'"):
        study.write_block(doc, "results-y", "| new |")
