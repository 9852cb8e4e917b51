"""`lengthgen diff`: moved cells between a commit and the working tree, on two synthetic
versions of a table in a scratch git repository."""

import json
import os
import re
import subprocess
import sys

import pytest

OLD = "task,scheme,seed,length,k,examples,accuracy\nt,rope,0,20,1,100,1.0000\nt,rope,0,40,1,100,0.9000\n" \
      "t,rope,1,20,1,100,0.5000\n"
NEW = "task,scheme,seed,length,k,examples,accuracy\nt,rope,0,20,1,100,1.0000\nt,rope,0,40,1,100,0.8500\n" \
      "t,rope,0,80,1,100,0.7000\n"


def _commit_all(repo_dir, message: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=repo_dir, check=True, capture_output=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message], cwd=repo_dir,
                   check=True, capture_output=True)


@pytest.fixture
def history(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "results/tables").mkdir(parents=True)
    (tmp_path / "results/tables/length_sweep.csv").write_text(OLD)
    _commit_all(tmp_path, "old")
    (tmp_path / "results/tables/length_sweep.csv").write_text(NEW)
    return tmp_path


def _diff(repo_root, cwd, *args):
    env = {**os.environ, "PYTHONPATH": str(repo_root / "src")}
    return subprocess.run([sys.executable, "-m", "lengthgen", "diff", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


@pytest.mark.subprocess
def test_moved_added_and_removed_cells_are_listed(repo, history):
    done = _diff(repo, history, "--rev", "HEAD")
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert "3 cell(s) moved beyond 0.0" in out
    assert "accuracy" in out and "0.90" in out and "0.85" in out  # the moved value, old and new
    lines = out.splitlines()
    assert any("80" in line and "(row)" in line and "absent" in line for line in lines)  # added row
    assert any(" 1 " in f" {line} " and "(row)" in line and "present" in line for line in lines)  # removed row
    assert not any(" 20 " in line and "accuracy" in line for line in lines)  # unchanged cell not listed


@pytest.mark.subprocess
def test_tolerance_hides_small_moves_and_clean_tree_exits_zero(repo, history):
    (history / "results/tables/length_sweep.csv").write_text(OLD.replace("0.9000", "0.9040"))
    assert _diff(repo, history, "--rev", "HEAD", "--tolerance", "0.01").returncode == 0
    moved = _diff(repo, history, "--rev", "HEAD", "--tolerance", "0.001")
    assert moved.returncode == 1 and "0.904" in moved.stdout


@pytest.mark.subprocess
def test_unknown_revision_is_one_line(repo, history):
    done = _diff(repo, history, "--rev", "nosuchrev")
    assert done.returncode == 2
    assert done.stderr.startswith("lengthgen: error: git show nosuchrev:") and "Traceback" not in done.stderr


@pytest.mark.parametrize(("tables", "expected"), [
    ("results-smoke/tables", "results-smoke/tables: no such folder"),
    ("results/figures", "results/figures: no tables (*.csv) in it"),
    ("results/other", "results/other: none of its 1 table(s) exists at HEAD"),
])
@pytest.mark.subprocess
def test_nothing_to_compare_fails_in_one_line(repo, history, tables, expected):
    """A missing folder, one without tables, or tables never committed: not "nothing moved"."""
    (history / "results/figures").mkdir()
    (history / "results/other").mkdir()
    (history / "results/other/length_sweep.csv").write_text(NEW)
    done = _diff(repo, history, "--rev", "HEAD", "--tables", tables)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"lengthgen: error: {expected}") and len(done.stderr.splitlines()) == 1


def test_language_tables_match_rows_on_model_method_positions_and_k():
    """influence.csv has many rows per k: rows are matched on (model, method, positions, k), so
    one moved value is one moved cell, not every row of its k misaligned."""
    import io

    import pandas as pd

    from lengthgen.analysis.diff import moved_cells

    head = "model,method,positions,k,loss_mean\n"
    old = head + "long,greedy,true,1,5.17\nlong,random,true,1,5.52\nshort,greedy,shared,1,5.03\n"
    new = head + "long,greedy,true,1,5.17\nshort,greedy,shared,1,5.00\nlong,random,true,1,5.52\n"
    moved = moved_cells(*(pd.read_csv(io.StringIO(t), dtype=str) for t in (old, new)), tolerance=0.0)
    assert moved[["model", "method", "column", "old", "new"]].values.tolist() == [
        ["short", "greedy", "loss_mean", "5.03", "5.00"]]


@pytest.mark.subprocess
def test_a_change_of_machine_or_library_is_named_before_the_cells(repo, history):
    """Cells that moved because the runs ran on another CPU or torch are not a code change: the
    diff says so first, from provenance.json."""
    def provenance(devices, torch):
        record = {"devices": [devices], "git_commit": "abc", "numpy": "2.4.6", "python": "3.11.7", "torch": torch}
        return json.dumps(record) + "\n"

    (history / "results/provenance.json").write_text(provenance("cpu (1 threads)", "2.13.0+cpu"))
    _commit_all(history, "provenance")
    same = _diff(repo, history, "--rev", "HEAD").stdout
    assert "provenance.json" not in same  # the same conditions: nothing to say

    (history / "results/provenance.json").write_text(provenance("cpu (1 threads, AVX512)", "2.13.0+cpu"))
    out = _diff(repo, history, "--rev", "HEAD").stdout.splitlines()
    assert out[0].startswith("results/provenance.json: the runs' records differ since HEAD")
    assert out[1] == "  devices: ['cpu (1 threads)'] -> ['cpu (1 threads, AVX512)']"
    assert not any(line.strip().startswith(("torch", "git_commit")) for line in out)


@pytest.mark.parametrize("text, expected", [
    ("{not json", r"^lengthgen: error: results/provenance.json: not JSON \("),
    ("[1, 2]", r"^lengthgen: error: results/provenance.json: expected a JSON object of run conditions, got list$"),
])
@pytest.mark.subprocess
def test_a_broken_provenance_record_is_one_line(repo, history, text, expected):
    (history / "results/provenance.json").write_text('{"devices": ["cpu (1 threads)"]}\n')
    _commit_all(history, "provenance")
    (history / "results/provenance.json").write_text(text)
    done = _diff(repo, history, "--rev", "HEAD")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert re.match(expected, done.stderr.strip()), done.stderr


def test_an_entry_one_record_lacks_is_named_as_not_recorded(tmp_path, monkeypatch):
    from lengthgen.analysis import diff

    record = tmp_path / "provenance.json"
    record.write_text('{"devices": ["cpu (1 threads, AVX512)"], "torch": "2.13.0+cpu"}')
    monkeypatch.setattr(diff, "bytes_at", lambda rev, path: b'{"devices": ["cpu (1 threads, AVX512)"]}')
    assert diff.changed_conditions("HEAD", record) == ["torch: (not recorded) -> 2.13.0+cpu"]
