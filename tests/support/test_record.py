"""A run's record of its tables and figures: written, verified, a damaged file healed or refused."""

import json
import subprocess

import pytest
from conftest import PYTHON, REPO, venv_env

from lengthgen.support import record
from lengthgen.support.errors import UserError

CLAIMS = "claim,experiment,check,value,ci_low,ci_high,p,n,threshold,result,detail\n" + "".join(
    f"1 sparsity,E1,row {i},0.5,,,,3,-,PASS,\n" for i in range(20))


@pytest.fixture
def run(tmp_path):
    """A finished run: two tables and a figure, recorded."""
    (tmp_path / "tables").mkdir()
    (tmp_path / "figures").mkdir()
    (tmp_path / "tables/claims.csv").write_text(CLAIMS)
    (tmp_path / "tables/summary.md").write_text("| a |\n|---|\n| 1 |\n")
    (tmp_path / "figures/sparse_parity.png").write_bytes(b"\x89PNG" + bytes(range(256)))
    (tmp_path / "provenance.json").write_text("{}")
    record.write(tmp_path)
    return tmp_path


def test_the_record_holds_every_table_and_figure_one_a_line(run):
    text = (run / "checksums.json").read_text()
    assert sorted(json.loads(text)["sha256"]) == ["figures/sparse_parity.png", "tables/claims.csv", "tables/summary.md"]
    assert len(text.splitlines()) == 4 + 3  # the braces, and one line a file, so a diff names the file
    assert record.damaged(run) == [] and record.heal(run) == []


@pytest.mark.parametrize("damage", ["truncated at a line", "one cell edited", "garbled"])
def test_a_file_damaged_since_the_run_is_named_and_removed_once(run, damage):
    claims = run / "tables/claims.csv"
    raw = claims.read_bytes()
    claims.write_bytes({"truncated at a line": raw[: raw.index(b"row 9")],
                        "one cell edited": raw.replace(b"row 3,0.5", b"row 3,0.9"),
                        "garbled": b"\x89\x00" * 40}[damage])
    assert record.damaged(run) == [claims]
    (run / "tables/claims.html").write_text("<table>")  # made from the tables
    assert record.heal(run) == [f"{claims}: does not match its record ({run / 'checksums.json'}): removed, with "
                                "the scorecard pages made from the tables; this run rebuilds it"]
    assert not claims.exists() and not (run / "tables/claims.html").exists() and (run / "tables/summary.md").exists()
    assert record.heal(run) == []  # a missing file is for Snakemake to rebuild, not damage


def test_a_damaged_figure_goes_alone(run):
    figure = run / "figures/sparse_parity.png"
    figure.write_bytes(b"\x89PNG")
    assert record.heal(run) == [f"{figure}: does not match its record ({run / 'checksums.json'}): removed; "
                                "this run rebuilds it"]
    assert (run / "tables/claims.csv").exists()


def test_a_damaged_record_is_removed_and_named(run):
    (run / "checksums.json").write_text('{"sha256": ')
    lines = record.heal(run)
    assert lines == [f"{run / 'checksums.json'}: not a record of checksums, expected "
                     '{"sha256": {path: digest}}: removed; this run writes it again']
    assert not (run / "checksums.json").exists() and (run / "tables/claims.csv").exists()


def test_a_run_without_a_record_is_not_healed_but_its_scorecard_is_checked_for_rows(tmp_path):
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables/claims.csv").write_text("x")
    (tmp_path / "tables/summary.md").write_text("x")
    (tmp_path / "config.yaml").write_text("tasks: []\n")  # the run's own config: its scorecard has 3 claims
    assert record.heal(tmp_path) == [] and record.check(tmp_path / "tables/summary.md") is None
    # tests/support/test_expected.py: the rows a run's config asks for
    with pytest.raises(UserError, match="claims.csv: lacks rows the run's config asks for"):
        record.check(tmp_path / "tables/claims.csv")


def test_check_refuses_a_damaged_table_in_one_line_and_keeps_it(run):
    claims = run / "tables/claims.csv"
    record.check(claims)  # intact
    claims.write_text(CLAIMS[:150])
    with pytest.raises(UserError, match=r"claims.csv: does not match its record \(.*checksums.json\): damaged"):
        record.check(claims)
    with pytest.raises(UserError):
        record.check_tables(run / "tables")
    assert claims.read_text() == CLAIMS[:150]
    record.check(run / "provenance.json")  # not in tables/ or figures/: not recorded


def _lengthgen(*args, cwd):
    return subprocess.run([PYTHON, "-m", "lengthgen", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env=venv_env(PYTHONPATH=str(REPO / "src")))


@pytest.mark.subprocess
def test_verdict_and_diff_refuse_a_cut_scorecard_and_leave_the_readme_alone(run):
    """A scorecard cut at a line break is a valid CSV: without the record, the README's verdict
    would be rewritten from half the rows."""
    claims = run / "tables/claims.csv"
    readme = run / "README.md"
    readme.write_text("before\n")
    claims.write_bytes(claims.read_bytes()[:200])
    for args in (["verdict", claims, "--readme", readme], ["diff", "--rev", "HEAD", "--tables", run / "tables"]):
        done = _lengthgen(*args, cwd=run)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.splitlines() == [
            f"lengthgen: error: {claims}: does not match its record ({run / 'checksums.json'}): damaged since the "
            "run wrote it; rerun the workflow to rebuild it (or restore it: git checkout -- <file>)"]
    assert readme.read_text() == "before\n"
