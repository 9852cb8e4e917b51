"""The README's two commands in order on any CPU: `make run` rewrites the working tree's tables,
and on another instruction set rounding moves their values and can move a claim word; `make test`
still passes, because the tests of committed artifacts (the docs' generated blocks, the README's
verdict, the notebook's example, the committed scorecards) read the tables as committed at HEAD
(conftest.committed_results), never the working tree's.

Shown on a scratch git repository: this checkout's code, tests and docs with the committed tables,
committed, then its working-tree tables perturbed as another CPU's run leaves them. The real
repository is never written."""

from __future__ import annotations

import re
import shutil
import subprocess

import pandas as pd
import pytest
from conftest import PYTHON, REPO, committed_results, venv_env

# What the affected tests read besides the results directories.
ITEMS = ("src", "tests", "docs", "README.md", "pyproject.toml", "config.yaml", "config", "workflow")

# The tests of committed artifacts that read a run's tables (the slow or subprocess ones aside:
# they read the same directory through the same fixture).
AFFECTED = (
    "tests/reporting/test_docblocks.py",
    "tests/test_readme.py::test_readme_verdict_is_the_committed_scorecard",
    "tests/test_readme.py::test_verdict_rewrites_the_readme_block_in_place",
    "tests/reporting/test_html.py::test_the_report_tallies_the_paper_s_claims_as_the_readme_does",
    "tests/test_notebook.py",
    "tests/analysis/test_claims.py::test_power_draws_from_the_points_the_scorecard_tests",
    "tests/analysis/test_language_scores.py::test_committed_claim_3_rows_recompute_from_the_committed_scores",
)


def _git(cwd, *args) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


def _moved(text: str, by: float) -> str:
    """A cell's number moved by `by`, written with its own decimals (text stays as it is)."""
    try:
        value = float(text)
    except ValueError:
        return text
    decimals = len(text.split(".")[1]) if "." in text else 0
    return f"{min(value + by, 1.0) if value <= 1.0 else value + by:.{max(decimals, 4)}f}"


def another_cpus_run(root) -> None:
    """Leave the tables of `root`'s default and confirmatory runs as a run on another CPU may:
    every accuracy, value and interval moved in the last digits, one scorecard row's result
    (hence its claim's word) moved, the summary's numbers moved."""
    for run in ("results", "results-confirm"):
        tables = root / run / "tables"
        sweep = pd.read_csv(tables / "length_sweep.csv", dtype=str, keep_default_na=False)
        sweep["accuracy"] = sweep["accuracy"].map(lambda v: _moved(v, -0.0013))
        sweep.to_csv(tables / "length_sweep.csv", index=False)
        claims = pd.read_csv(tables / "claims.csv", dtype=str, keep_default_na=False)
        for column in ("value", "ci_low", "ci_high"):
            claims[column] = claims[column].map(lambda v: _moved(v, 0.0021))
        first_pass = claims.index[claims["result"] == "PASS"][0]
        claims.loc[first_pass, "result"] = "INCONCLUSIVE"
        claims.to_csv(tables / "claims.csv", index=False)
        summary = tables / "summary.md"
        summary.write_text(re.sub(r"\b0\.(\d{3})\b", lambda m: f"0.{(int(m.group(1)) + 7) % 1000:03d}",
                                  summary.read_text()))
        scores = pd.read_csv(tables / "language_scores.csv", dtype=str, keep_default_na=False)
        for column in [c for c in scores.columns if c.startswith("L_")]:
            scores[column] = scores[column].map(lambda v: _moved(v, 0.0004))
        scores.to_csv(tables / "language_scores.csv", index=False)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A git repository of this checkout's code, tests and docs and the committed tables, with
    its working-tree tables then made another CPU's."""
    root = tmp_path_factory.mktemp("anycpu") / "lengthgen"
    root.mkdir()
    for name in ITEMS:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, root / name)
    committed_results(root)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "committed tables")
    another_cpus_run(root)
    return root


def test_the_perturbation_is_one_the_working_tree_reading_would_fail_on(scratch):
    """The control: read from the working tree, the docs' blocks and the README's verdict no
    longer hold; the committed tables are untouched by it."""
    from lengthgen.analysis.verdict import BLOCK, verdict_table
    from lengthgen.reporting import docblocks

    assert _git(scratch, "status", "--porcelain", "--", "results", "results-confirm").count("\n") == 8
    text = (scratch / "docs/results.md").read_text()
    assert docblocks.render(text, scratch) != text
    readme_block = BLOCK.search((scratch / "README.md").read_text()).group(2)
    rows = pd.read_csv(scratch / "results-confirm/tables/claims.csv", dtype=str, keep_default_na=False)
    assert verdict_table(rows.to_dict("records")) != readme_block
    committed = committed_results(scratch.parent / "committed", repo=scratch)
    assert docblocks.render(text, committed) == text


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_checks_of_committed_artifacts_pass_after_another_cpus_run(scratch):
    """About ten seconds of CPU: a pytest of the affected tests in the scratch repository."""
    done = subprocess.run([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", *AFFECTED], cwd=scratch,
                          env=venv_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", done.stdout) and " failed" not in done.stdout, done.stdout[-2000:]
