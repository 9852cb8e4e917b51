"""`lengthgen diff`: what moved between a commit and the working tree, on synthetic versions of
the tables in a scratch git repository: the scorecard's claim words and rows first, a line per
table, then the cells (capped unless --all, columns as wide as their contents), and the exit
status (0 nothing moved, 1 something moved, 2 could not compare)."""

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import run_lengthgen

from lengthgen.analysis import diff

OLD = "task,scheme,seed,length,k,examples,accuracy\nt,rope,0,20,1,100,1.0000\nt,rope,0,40,1,100,0.9000\n" \
      "t,rope,1,20,1,100,0.5000\n"
NEW = "task,scheme,seed,length,k,examples,accuracy\nt,rope,0,20,1,100,1.0000\nt,rope,0,40,1,100,0.8500\n" \
      "t,rope,0,80,1,100,0.7000\n"

HEADER = "claim,experiment,check,value,ci_low,ci_high,p,n,threshold,result,detail\n"
SCORECARD = HEADER + (
    "1 sparsity,E1,rope: falls with k,0.2000,0.1500,0.2400,0.0000,96,p <= 0.01,PASS,long detail\n"
    "1 sparsity,E1,alibi: falls with k,0.1900,0.1400,0.2300,0.0000,96,p <= 0.01,PASS,long detail\n"
    "1 sparsity,E1,models that fit,1.0000,,,,72,>= 0.95,descriptive,\n"
    "2 coupling,E2,ppc at n=20,0.9000,0.8000,0.9500,0.0010,12,>= 0.8,PASS,\n"
    "2 coupling,E3,pointer at n=20,0.9100,0.8100,0.9600,0.0010,12,>= 0.8,PASS,\n")


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


@pytest.fixture
def scored(history):
    """A history whose tables hold a scorecard too, committed with the old sweep."""
    (history / "results/tables/length_sweep.csv").write_text(OLD)
    (history / "results/tables/claims.csv").write_text(SCORECARD)
    _commit_all(history, "scorecard")
    return history


def _diff(repo_root, cwd, *args):
    env = {**os.environ, "PYTHONPATH": str(repo_root / "src")}
    return subprocess.run([sys.executable, "-m", "lengthgen", "diff", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


def _lines(cwd, *args) -> tuple[int, list[str]]:
    """`lengthgen diff --rev HEAD *args` in this process: its status and stdout's lines."""
    done = run_lengthgen("diff", "--rev", "HEAD", *args, cwd=cwd)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, done.stdout.splitlines()


# -- 1. claim words and scorecard rows first ----------------------------------------------------


def test_moved_claim_words_and_rows_come_first(scored):
    """After a run on another CPU one row's result moves: its claim's word and the row, with old
    and new value and interval, are the first lines, ahead of thousands of moved cells."""
    many = "".join(f"t,rope,{seed},{n},1,100,0.{seed:02d}{n % 100:02d}\n" for seed in range(40) for n in range(40))
    (scored / "results/tables/attention.csv").write_text(OLD.split("\n")[0] + "\n" + many)
    _commit_all(scored, "a big table")
    (scored / "results/tables/attention.csv").write_text(
        OLD.split("\n")[0] + "\n" + many.replace(",100,0.", ",100,1."))
    (scored / "results/tables/claims.csv").write_text(
        SCORECARD.replace("0.1900,0.1400,0.2300,0.0000,96,p <= 0.01,PASS", "0.1700,0.0900,0.2300,0.0200,96,p <= 0.01,"
                                                                             "INCONCLUSIVE"))
    status, out = _lines(scored)
    assert status == 1
    head = out[:15]
    assert head[0] == "results/tables/claims.csv: claim words and results since HEAD:"
    assert "  claim 1 sparsity: reproduced -> partly reproduced" in head
    assert ("  1 sparsity | alibi: falls with k: PASS -> INCONCLUSIVE (value 0.1900 [0.1400, 0.2300] -> "
            "0.1700 [0.0900, 0.2300])") in head
    assert not any("claim 2 coupling" in line for line in out)  # its word did not move
    assert len(out) < 100  # 1,600 moved cells, 50 shown


def test_claim_words_name_each_experiment_of_a_claim_that_spans_two(scored):
    (scored / "results/tables/claims.csv").write_text(
        SCORECARD.replace("0.9100,0.8100,0.9600,0.0010,12,>= 0.8,PASS", "0.7000,0.6000,0.8000,0.0400,12,>= 0.8,FAIL"))
    _, out = _lines(scored)
    assert ("  claim 2 coupling: reproduced: E2 reproduced; E3 reproduced -> partly reproduced: E2 reproduced; "
            "E3 not reproduced") in out[:15]


def test_unmoved_words_and_results_are_said_so(scored):
    (scored / "results/tables/claims.csv").write_text(SCORECARD.replace("0.2000,0.1500", "0.2010,0.1495"))
    status, out = _lines(scored)
    assert status == 1
    assert out[:3] == ["results/tables/claims.csv: claim words and results since HEAD:", "  claim words unchanged",
                       "  no row's result moved"]
    assert "  claims.csv: 2 of 45 cells moved; largest: value at claim=1 sparsity check=rope: falls with k: " \
           "0.2000 -> 0.2010; rows: 0 added, 0 removed" in out


def test_a_row_added_or_removed_from_the_scorecard_is_a_moved_result(scored):
    lines = SCORECARD.splitlines(keepends=True)
    added = "3 language,E4,attention beats random,0.0400,0.0200,0.0600,0.0010,12,> 0,PASS,\n"
    (scored / "results/tables/claims.csv").write_text("".join([*lines[:4], lines[5], added]))
    _, out = _lines(scored)
    assert "  claim 3 language: absent -> reproduced" in out
    assert "  2 coupling | ppc at n=20: PASS -> absent (value 0.9000 [0.8000, 0.9500] -> absent)" in out
    assert "  3 language | attention beats random: absent -> PASS (value absent -> 0.0400 [0.0200, 0.0600])" in out


def test_tables_without_a_scorecard_say_so_in_one_line(history):
    status, out = _lines(history)
    assert status == 1 and out[0] == "results/tables: no scorecard (claims.csv), so no claim words to compare"


# -- 2. one line per table ---------------------------------------------------------------------


def test_one_line_per_table_with_its_largest_move_and_rows(scored):
    (scored / "results/tables/length_sweep.csv").write_text(NEW)
    (scored / "results/tables/extra.csv").write_text("a,b\n1,2\n")
    _, out = _lines(scored)
    start = out.index("results/tables since HEAD (a move: a change beyond 0.0):")
    assert out[start + 1:start + 4] == [
        "  claims.csv: unchanged",
        "  extra.csv: new since HEAD (1 rows)",
        "  length_sweep.csv: 1 of 4 cells moved; largest: accuracy at task=t scheme=rope seed=0 length=40 k=1: "
        "0.9000 -> 0.8500; rows: 1 added, 1 removed"]


def test_a_table_removed_or_a_column_added_is_a_move(scored):
    (scored / "results/tables/length_sweep.csv").write_text(OLD.replace("accuracy\n", "accuracy,loss\n", 1)
                                                           .replace("1.0000\n", "1.0000,0.1\n", 1))
    _commit_all(scored, "a column")
    (scored / "results/tables/length_sweep.csv").write_text(OLD)
    (scored / "results/tables/claims.csv").unlink()
    status, out = _lines(scored)
    assert status == 1
    assert "  length_sweep.csv: 0 of 6 cells moved; rows: 0 added, 0 removed; columns added: -, removed: loss" in out
    assert "  claims.csv: removed since HEAD" in out


# -- 3. the cells: capped, --all, columns as wide as their contents --------------------------


def _many_moves(root, rows: int) -> None:
    text = OLD.split("\n")[0] + "\n" + "".join(f"t,rope,{i},20,1,100,0.5000\n" for i in range(rows))
    (root / "results/tables/length_sweep.csv").write_text(text)
    _commit_all(root, "many")
    (root / "results/tables/length_sweep.csv").write_text(
        OLD.split("\n")[0] + "\n" + "".join(f"t,rope,{i},20,1,100,{0.5 + i / 1000:.4f}\n" for i in range(rows)))


def test_cells_are_capped_largest_first_and_all_shows_every_one(history):
    _many_moves(history, 120)
    _, out = _lines(history)
    start = out.index("moved cells, largest first: 50 of 119 (--all shows every one)")
    assert out[start + 1] == "results/tables/length_sweep.csv (50 of 119):"
    cells = out[start + 3:]
    assert len(cells) == 50 and cells[0].split()[-3:] == ["0.5000", "->", "0.6190"]  # seed 119: the largest
    _, every = _lines(history, "--all")
    assert "moved cells, largest first: 119 of 119" in every
    assert len(every[every.index("results/tables/length_sweep.csv (119 of 119):") + 2:]) == 119


def test_the_cap_is_shared_among_the_tables_that_moved():
    assert diff.shares([51547, 40, 3], 50) == [24, 23, 3]
    assert diff.shares([10, 2], 50) == [10, 2]
    assert diff.shares([100, 100], None) == [100, 100]
    assert sum(diff.shares([7] * 9, 50)) == 50


def test_columns_are_as_wide_as_their_contents(scored):
    """A long value (a scorecard's detail) widens no column: only the key columns are padded, to
    their longest shown value, and the last (old -> new) is not padded at all."""
    detail = "x" * 400
    (scored / "results/tables/claims.csv").write_text(SCORECARD.replace("PASS,long detail\n", f"PASS,{detail}\n", 1)
                                                      .replace("0.9000,0.8000", "0.9100,0.8000"))
    _, out = _lines(scored)
    start = out.index("results/tables/claims.csv (2 of 2):")
    header, first, second = out[start + 1:start + 4]
    assert header.split() == ["claim", "check", "column", "old", "->", "new"]
    assert header.index("check") == first.index("1 sparsity") + len("1 sparsity  ") == second.index("2 coupling") + 12
    assert first.endswith(f"detail  long detail -> {detail}") and second.endswith("value   0.9000 -> 0.9100")
    assert second.index("value") == header.index("column") == 2 + 10 + 2 + 18 + 2
    assert not any(line != line.rstrip() for line in out)
    assert max(len(line) for line in out if detail not in line) < 150


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


# -- 4. exit status: 0 nothing moved, 1 something moved, 2 could not compare -------------------


@pytest.mark.subprocess
def test_moved_added_and_removed_cells_are_listed_with_status_1(repo, history):
    done = _diff(repo, history, "--rev", "HEAD")
    assert done.returncode == 1, done.stderr
    out = done.stdout.splitlines()
    assert "  length_sweep.csv: 1 of 4 cells moved; largest: accuracy at task=t scheme=rope seed=0 length=40 k=1: " \
           "0.9000 -> 0.8500; rows: 1 added, 1 removed" in out
    cells = out[out.index("results/tables/length_sweep.csv (3 of 3):") + 1:]
    assert [line.split() for line in cells] == [
        ["task", "scheme", "seed", "length", "k", "column", "old", "->", "new"],
        ["t", "rope", "0", "80", "1", "(row)", "absent", "->", "present"],
        ["t", "rope", "1", "20", "1", "(row)", "present", "->", "absent"],
        ["t", "rope", "0", "40", "1", "accuracy", "0.9000", "->", "0.8500"]]


@pytest.mark.subprocess
def test_tolerance_hides_small_moves_and_clean_tree_exits_zero(repo, history):
    (history / "results/tables/length_sweep.csv").write_text(OLD.replace("0.9000", "0.9040"))
    clean = _diff(repo, history, "--rev", "HEAD", "--tolerance", "0.01")
    assert clean.returncode == 0 and "  length_sweep.csv: unchanged" in clean.stdout.splitlines()
    assert "moved cells" not in clean.stdout
    moved = _diff(repo, history, "--rev", "HEAD", "--tolerance", "0.001")
    assert moved.returncode == 1 and "0.904" in moved.stdout


@pytest.mark.subprocess
def test_unknown_revision_is_one_line(repo, history):
    done = _diff(repo, history, "--rev", "nosuchrev")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("lengthgen: error: git show nosuchrev:") and "Traceback" not in done.stderr


@pytest.mark.parametrize(("tables", "expected"), [
    ("results-smoke/tables", "results-smoke/tables: no such folder"),
    ("results/figures", "results/figures: no tables (*.csv) in it"),
    ("results/other", "results/other: none of its 1 table(s) exists at HEAD"),
])
def test_nothing_to_compare_fails_in_one_line(history, tables, expected):
    """A missing folder, one without tables, or tables never committed: not "nothing moved"."""
    (history / "results/figures").mkdir()
    (history / "results/other").mkdir()
    (history / "results/other/length_sweep.csv").write_text(NEW)
    done = run_lengthgen("diff", "--rev", "HEAD", "--tables", tables, cwd=history)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"lengthgen: error: {expected}") and len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(("table", "text", "expected"), [
    ("length_sweep.csv", "a,b\n1,2,3,4\n", "results/tables/length_sweep.csv: line 2: 4 fields where the header has 2"),
    ("claims.csv", "claim,value\n1 sparsity,0.1\n", "results/tables/claims.csv: not a scorecard: no column(s) "
                                                    "check, result"),
])
def test_a_garbled_table_is_status_2_and_prints_nothing_else(scored, table, text, expected):
    """Everything is read before anything is printed: a garbled table is one line on stderr,
    not half a report."""
    (scored / "results/tables/length_sweep.csv").write_text(NEW)
    (scored / "results/tables" / table).write_text(text)
    done = run_lengthgen("diff", "--rev", "HEAD", cwd=scored)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.startswith(f"lengthgen: error: {expected}") and len(done.stderr.splitlines()) == 1


def test_the_exit_statuses_are_documented_alike(repo):
    """The module, the command's help, the Makefile's line and the README give the same three."""
    from lengthgen import commands

    [entry] = [c for c in commands.COMMANDS if c.name == "diff"]
    assert "0: nothing moved, 1: something moved, 2: could not compare" in entry.help
    assert "0 nothing moved, 1 something moved, 2 could not compare" in " ".join(diff.__doc__.split())
    makefile = " ".join(line.lstrip("# ") for line in (repo / "Makefile").read_text().splitlines())
    assert "`python -m lengthgen diff` exits 0 when nothing moved, 1 when something did, 2 when it could not " \
           "compare" in makefile
    readme = " ".join((repo / "README.md").read_text().split())
    assert ("`python -m lengthgen diff` exits 0 when nothing moved, 1 when something did, 2 when it could not "
            "compare") in readme


# -- provenance ----------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_a_change_of_machine_or_library_is_named_before_the_tables(repo, history):
    """Cells that moved because the runs ran on another CPU or torch are not a code change: the
    diff says so, from provenance.json, before its line per table and the cells."""
    def provenance(devices, torch):
        record = {"devices": [devices], "git_commit": "abc", "numpy": "2.4.6", "python": "3.11.7", "torch": torch}
        return json.dumps(record) + "\n"

    (history / "results/provenance.json").write_text(provenance("cpu (1 threads)", "2.13.0+cpu"))
    _commit_all(history, "provenance")
    same = _diff(repo, history, "--rev", "HEAD").stdout
    assert "provenance.json" not in same  # the same conditions: nothing to say

    (history / "results/provenance.json").write_text(provenance("cpu (1 threads, AVX512)", "2.13.0+cpu"))
    out = _diff(repo, history, "--rev", "HEAD").stdout.splitlines()
    at = next(i for i, line in enumerate(out) if line.startswith("results/provenance.json: the runs' records differ"))
    assert at < out.index("results/tables since HEAD (a move: a change beyond 0.0):")
    assert out[at + 1] == "  devices: ['cpu (1 threads)'] -> ['cpu (1 threads, AVX512)']"
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
    record = tmp_path / "provenance.json"
    record.write_text('{"devices": ["cpu (1 threads, AVX512)"], "torch": "2.13.0+cpu"}')
    monkeypatch.setattr(diff, "bytes_at", lambda rev, path: b'{"devices": ["cpu (1 threads, AVX512)"]}')
    assert diff.changed_conditions("HEAD", record) == ["torch: (not recorded) -> 2.13.0+cpu"]
