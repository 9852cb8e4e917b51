"""The notebook entry points: lengthgen.load_sweep reproduces the summary table's numbers from the
committed results (as committed at HEAD: conftest.committed_results); lengthgen.load_model is
tested on a smoke run in test_workflow.py."""

from __future__ import annotations

import pytest

import lengthgen


def summary_cell(summary_md, task: str, row: list[str], column: str) -> str:
    """The cell of summary.md's table of `task` in the row whose key cells are `row`."""
    lines = summary_md.read_text().splitlines()
    start = lines.index(f"## {task}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")), len(lines))
    table = [[c.strip() for c in line.strip("|").split("|")] for line in lines[start:end]
             if line.startswith("|") and not line.startswith("|---")]
    header = table[0]
    [cells] = [r for r in table[1:] if r[: len(row)] == row]
    return cells[header.index(column)]


@pytest.mark.parametrize(("task", "scheme", "length", "k"), [("scratchpad_parity", "pc", 32, None),
                                                             ("sparse_parity", "rope", 96, 3)])
def test_load_sweep_reproduces_the_committed_summary(committed_results, task, scheme, length, k):
    """The README's example: a summary cell is the mean ± std over seeds of load_sweep's rows."""
    sweep = lengthgen.load_sweep(committed_results / "results")
    cell = sweep.query(f"task == '{task}' and scheme == '{scheme}' and length == {length}")
    cell = cell if k is None else cell[cell["k"] == k]
    assert cell["seed"].nunique() == len(cell) > 1
    key = [scheme] if task == "scratchpad_parity" else [scheme, str(int(cell["k"].iloc[0]))]
    expected = summary_cell(committed_results / "results/tables/summary.md", task, key, f"n={length}")
    assert expected.startswith(f"{cell.accuracy.mean():.3f} ± {cell.accuracy.std():.3f} [")


def test_load_sweep_of_a_missing_results_dir_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="length_sweep.csv"):
        lengthgen.load_sweep(tmp_path / "results-nowhere")
