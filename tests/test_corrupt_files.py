"""Files that fail to read or write. An intermediate the workflow wrote (a dataset, a checkpoint,
a sweep, meta.json) that is torn or corrupt ends the stage that reads it in one line naming it,
and is removed when it lies under the run's results directory, so that rerunning the same
command rebuilds it; a user's own file is never removed. (The workflow end to end: the truncated
sweep in tests/support/test_identity.py.)"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_lengthgen
from test_bad_input import assert_one_line_error, temp_files

from lengthgen.support import fileio
from lengthgen.support.errors import CorruptIntermediate, UserError, WriteFailed

EVAL = json.dumps({"device": "cpu", "threads": 1, "batch_size": 100})
# The pages made from the tables, which a rebuild of a table removes first (--stale).
STALE = ("claims.csv", "claims.md", "claims.html", "summary.html")


@pytest.fixture
def results(tmp_path):
    """A results directory, and the variable the workflow gives its jobs to name it."""
    root = tmp_path / "results"
    root.mkdir()
    return root, {fileio.RESULTS_ENV: str(root)}


def _torn(path, data: bytes):
    """`data` cut to half its bytes at `path`, as a full disk or a killed copy leaves a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[: len(data) // 2])
    return path


def _parquet_bytes(tmp_path) -> bytes:
    fileio.write_parquet(tmp_path / "whole.parquet", {"task": ["t"] * 50, "accuracy": np.linspace(0, 1, 50)})
    return (tmp_path / "whole.parquet").read_bytes()


# -- the helper ----------------------------------------------------------------------------------


def test_a_corrupt_intermediate_is_removed_only_under_the_results(tmp_path, results, monkeypatch):
    root, env = results
    monkeypatch.setenv(fileio.RESULTS_ENV, env[fileio.RESULTS_ENV])
    data = _parquet_bytes(tmp_path)
    import pyarrow.parquet as pq

    inside, outside = _torn(root / "runs/a/sweep.parquet", data), _torn(tmp_path / "mine/sweep.parquet", data)
    with pytest.raises(CorruptIntermediate) as err:
        fileio.read_intermediate(inside, pq.read_table, "sweep")
    assert str(err.value).startswith(f"{inside}: not a readable sweep (ArrowInvalid: ")
    assert str(err.value).endswith("; removed it: rerun the workflow to rebuild it") and "\n" not in str(err.value)
    assert not inside.exists()
    with pytest.raises(CorruptIntermediate, match="delete it and rerun the workflow to rebuild it$"):
        fileio.read_intermediate(outside, pq.read_table, "sweep")
    assert outside.exists()
    monkeypatch.delenv(fileio.RESULTS_ENV)  # run by hand: nothing is removed
    inside = _torn(inside, data)
    with pytest.raises(CorruptIntermediate, match="delete it"):
        fileio.read_intermediate(inside, pq.read_table, "sweep")
    assert inside.exists()


@pytest.mark.parametrize("error", [PermissionError(errno.EACCES, "Permission denied", "meta.json"),
                                   OSError(errno.EIO, "Input/output error"), MemoryError(),
                                   ImportError("no module named pyarrow"), TypeError("a bug")],
                         ids=["no_permission", "io_error", "out_of_memory", "missing_library", "bug"])
def test_what_is_not_the_files_fault_leaves_it_alone(results, monkeypatch, error):
    """No permission, a disk that fails to read, a missing library, a bug: the file may be whole,
    so it stays, and the error is passed on as it was."""
    root, env = results
    monkeypatch.setenv(fileio.RESULTS_ENV, env[fileio.RESULTS_ENV])
    path = root / "meta.json"
    path.write_text("{}")

    def failing(p):
        raise error

    with pytest.raises(type(error)):
        fileio.read_intermediate(path, failing, "meta.json record")
    assert path.exists()


# -- the stages, as the workflow runs them ---------------------------------------------------------


def test_aggregate_of_a_truncated_sweep_removes_it_and_the_scorecard(tmp_path, results):
    root, env = results
    sweep = _torn(root / "runs/t/rope/seed0/sweep.parquet", _parquet_bytes(tmp_path))
    tables = root / "tables"
    tables.mkdir()
    for name in STALE:
        (tables / name).write_text("of the old table\n")
    proc = run_lengthgen("aggregate", "--sweeps", sweep, "--csv", tables / "length_sweep.csv", "--md",
                         tables / "summary.md", "--stale", *(tables / n for n in STALE), cwd=tmp_path, env=env)
    line = assert_one_line_error(proc, f"{sweep}: not a readable sweep (ArrowInvalid: ")
    assert line.endswith("removed it: rerun the workflow to rebuild it")
    assert not sweep.exists()
    assert list(tables.iterdir()) == []  # neither the table nor what was made from the old one
    assert not temp_files(tmp_path)


@pytest.mark.parametrize("table", ["length_sweep.csv", "claims.csv"])
def test_a_corrupt_table_is_removed_with_every_page_made_from_the_tables(tmp_path, results, table):
    """The pipeline's own table, unreadable: removed with the whole scorecard (not claims.csv and
    claims.md with claims.html left), so that the rerun rebuilds them; other files stay."""
    root, env = results
    tables = root / "tables"
    tables.mkdir()
    for name in (*STALE, "length_sweep.csv", "summary.md"):
        (tables / name).write_text("made by the run\n")
    (tables / table).write_bytes(b"\x89garbage\x00\n" * 8)
    if table == "length_sweep.csv":
        proc = run_lengthgen("figure", "--kind", "coupling", "--sweep-csv", tables / table, "--tasks", "t",
                             "--train-max", "5", "--out", root / "figures/coupling.png", cwd=tmp_path, env=env)
    else:
        proc = run_lengthgen(*_report_pages_args(root), cwd=tmp_path, env=env)
    line = assert_one_line_error(proc, f"{tables / table}: line 1: not UTF-8 text")
    assert line.endswith("removed it and the scorecard pages made from it: rerun the workflow to rebuild them")
    left = {p.name for p in tables.iterdir()}
    assert left == {"length_sweep.csv", "summary.md"} - {table}
    assert not temp_files(tmp_path)


def _report_pages_args(root) -> list:
    (root / "provenance.json").write_text("{}")
    out = root / "tables"
    return ["report-pages", "--claims", out / "claims.csv", "--summary", out / "summary.md", "--provenance",
            root / "provenance.json", "--config", "{}", "--scorecard-html", out / "claims.html", "--summary-html",
            out / "summary.html", "--run-html", root / "run.html", "--config-yaml", root / "config.yaml"]


@pytest.mark.parametrize("damage", ["truncated", "random_bytes"])
def test_sweep_of_a_corrupt_model_removes_it(tmp_path, results, damage):
    root, env = results
    whole = tmp_path / "whole.pt"
    torch.save({"model_args": {}, "state_dict": {"w": torch.zeros(64, 64)}}, whole)
    data = whole.read_bytes() if damage == "truncated" else np.random.default_rng(0).bytes(4096) * 2
    model = _torn(root / "runs/t/rope/seed0/model.pt", data)
    out = root / "runs/t/rope/seed0/sweep.parquet"
    proc = run_lengthgen("sweep", "--model", model, "--data", root / "data/t/test.parquet", "--eval", EVAL,
                         "--out", out, cwd=tmp_path, env=env)
    line = assert_one_line_error(proc, f"{model}: ")
    assert line.endswith("removed it: rerun the workflow to rebuild it")
    assert not model.exists() and not out.exists() and not temp_files(tmp_path)


def test_train_on_a_truncated_dataset_removes_it(tmp_path, results, tiny_cell, tiny_dataset):
    root, env = results
    data = _torn(root / "data/tiny/train.parquet", tiny_dataset["train"].read_bytes())
    out_dir = root / "runs/tiny/rope/seed0"
    proc = run_lengthgen("train", "--cell", json.dumps(tiny_cell(task="tiny")), "--data", data, "--out-dir",
                         out_dir, "--checkpoint", root / "checkpoints/last.pt", cwd=tmp_path, env=env)
    assert_one_line_error(proc, f"{data}: not a readable Parquet dataset (")
    assert not data.exists() and not (out_dir / "model.pt").exists() and not temp_files(tmp_path)


@pytest.mark.subprocess
def test_provenance_of_a_torn_meta_json_removes_it(tmp_path, results):
    root, env = results
    meta = _torn(root / "runs/t/rope/seed0/meta.json", json.dumps({"device": "cpu", "steps": 12}).encode())
    out = root / "provenance.json"
    proc = run_lengthgen("provenance", "--meta", meta, "--out", out, cwd=tmp_path, env=env)
    assert_one_line_error(proc, f"{meta}: not a readable meta.json record (JSONDecodeError: ")
    assert not meta.exists() and not out.exists()


def test_a_users_corrupt_corpus_shard_is_never_removed(tmp_path, results):
    """The corpus stage reads the user's files: a corrupt one is named, and left where it is, even
    inside the results directory."""
    root, env = results
    shard = _torn(root / "shards/a.parquet", _parquet_bytes(tmp_path))
    out = root / "language/corpus.parquet"
    proc = run_lengthgen("corpus", "--config", json.dumps({"source": "files", "path": str(root / "shards/*.parquet")}),
                         "--out", out, cwd=tmp_path, env=env)
    assert_one_line_error(proc, "a.parquet: not a readable Parquet file")
    assert shard.exists() and not out.exists()


# -- writes the operating system refuses ---------------------------------------------------------


def test_a_full_disk_names_the_output_and_the_free_bytes(tmp_path, monkeypatch):
    """write() on a full disk names no file: the error names the output, not the temporary file,
    and the temporary file, half-written, is removed."""
    import pathlib
    import re
    import shutil

    written = []

    def full(self, text, *args, **kwargs):
        written.append(self)
        self.write_bytes(text.encode()[: len(text) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    out = tmp_path / "tables" / "summary.md"
    with pytest.raises(WriteFailed) as err:
        fileio.write_text(out, "x" * 1000)
    message = str(err.value)
    assert message.startswith(f"{out}: cannot write: No space left on device (") and "\n" not in message
    assert message.endswith("bytes free there); free some space and rerun")
    free = int(re.search(r"\(([\d,]+) bytes free there\)", message).group(1).replace(",", ""))
    assert abs(free - shutil.disk_usage(tmp_path).free) < 1 << 30  # this file system's, not a made-up number
    assert written and written[0] != out and not written[0].exists()  # the temporary file, removed
    assert not out.exists()


@pytest.mark.subprocess
def test_a_read_only_folder_ends_the_stage_in_one_line(tmp_path, monkeypatch, capsys):
    import os

    from lengthgen import cli

    def read_only(src, dst):
        raise OSError(errno.EROFS, "Read-only file system", str(src), str(dst))

    monkeypatch.setattr(os, "replace", read_only)
    out = tmp_path / "results" / "provenance.json"
    assert cli.main(["provenance", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"lengthgen: error: {out}: cannot write: Read-only file system; make its folder writable and rerun\n"
    assert not out.exists() and not temp_files(tmp_path)


def test_an_inputs_error_inside_a_write_stays_the_inputs(tmp_path):
    """A missing input read while the output is written is not a failed write of the output."""
    out = tmp_path / "out.csv"
    with pytest.raises(FileNotFoundError) as err, fileio.atomic_path(out):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(tmp_path / "input.csv"))
    assert err.value.filename == str(tmp_path / "input.csv")
    assert not out.exists() and not temp_files(tmp_path)


# -- committed tables that are no CSV table: diff, replicate, verdict -----------------------------

SCORECARD = "claim,check,value,result\n1 sparsity,rope: trend,-0.9,PASS\n2 coupling,ppc at n=20,0.1,FAIL\n"
# (the damaged bytes, the words of the error line after the file's name)
DAMAGE = {
    "random_bytes": (SCORECARD.encode() + np.random.default_rng(0).bytes(256), "line 4: not UTF-8 text"),
    # pandas reads extra fields on the first row as an index, on a later row as an error: both are named
    "ragged_first_row": (SCORECARD.replace("-0.9,PASS", "-0.9,PASS,extra").encode(),
                         "line 2: 5 fields where the header has 4"),
    "ragged": (SCORECARD.replace("0.1,FAIL", "0.1,FAIL,extra").encode(), "line 3: 5 fields where the header has 4"),
}


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.subprocess
def test_diff_of_a_damaged_table_names_it_and_the_line(tmp_path, damage):
    import subprocess

    raw, words = DAMAGE[damage]
    table = tmp_path / "results/tables/claims.csv"
    table.parent.mkdir(parents=True)
    table.write_text(SCORECARD)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "good"], cwd=tmp_path, check=True)
    table.write_bytes(raw)
    proc = run_lengthgen("diff", "--rev", "HEAD", cwd=tmp_path)
    assert_one_line_error(proc, f"results/tables/claims.csv: {words}, expected a CSV table")
    subprocess.run([*git, "commit", "-qam", "damaged"], cwd=tmp_path, check=True)
    table.write_text(SCORECARD)  # the damage is now the committed side's
    proc = run_lengthgen("diff", "--rev", "HEAD", cwd=tmp_path)
    assert_one_line_error(proc, f"results/tables/claims.csv at HEAD: {words}, expected a CSV table")


@pytest.mark.parametrize("damage", DAMAGE)
def test_replicate_of_a_damaged_scorecard_names_it_and_the_line(tmp_path, damage):
    raw, words = DAMAGE[damage]
    bad, good, out = tmp_path / "claims.csv", tmp_path / "other.csv", tmp_path / "replication.md"
    bad.write_bytes(raw)
    good.write_text(SCORECARD)
    proc = run_lengthgen("replicate", "--main", bad, "--other", good, "--out", out, cwd=tmp_path)
    assert_one_line_error(proc, f"{bad}: {words}, expected a scorecard")
    assert not out.exists() and not temp_files(tmp_path)


@pytest.mark.parametrize("damage", DAMAGE)
def test_verdict_of_a_damaged_scorecard_names_it_and_the_line(tmp_path, damage, capsys):
    from lengthgen.analysis.verdict import main

    raw, words = DAMAGE[damage]
    bad = tmp_path / "claims.csv"
    bad.write_bytes(raw)
    assert main([str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"lengthgen: error: {bad}: {words}, expected a scorecard\n" and captured.out == ""


def test_a_checkpoint_on_a_full_disk_names_the_checkpoint(tmp_path, monkeypatch):
    """torch.save's own file writer reports a full disk as a RuntimeError naming no file;
    save_tensors serializes in memory, so the write's OSError names the checkpoint."""
    import pathlib

    from lengthgen.model.checkpoint import save_tensors

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    out = tmp_path / "runs" / "model.pt"
    with pytest.raises(WriteFailed) as err:
        save_tensors(out, {"w": torch.zeros(3)})
    assert str(err.value).startswith(f"{out}: cannot write: No space left on device (")
    assert not out.exists() and not list(out.parent.iterdir())


def test_a_set_of_pages_is_swapped_in_whole_or_not_at_all(tmp_path):
    pages = [tmp_path / "claims.csv", tmp_path / "claims.html"]
    for page in pages:
        page.write_text("old\n")
    with pytest.raises(RuntimeError), fileio.atomic_paths(pages) as temporaries:
        temporaries[0].write_text("new\n")
        raise RuntimeError("killed before the second page")
    assert [p.read_text() for p in pages] == ["old\n", "old\n"] and not temp_files(tmp_path)
    with fileio.atomic_paths(pages) as temporaries:
        for tmp in temporaries:
            tmp.write_text("new\n")
    assert [p.read_text() for p in pages] == ["new\n", "new\n"] and not temp_files(tmp_path)


def test_a_full_disk_before_the_run_is_named_in_one_line(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    fileio.check_free_space(tmp_path / "results")  # this disk has room
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=4096))
    with pytest.raises(UserError, match=rf"^{tmp_path / 'results'}: the disk is full \(4,096 bytes free on its "
                                        r"file system, under the 10,485,760 a run needs to start\); free some space "
                                        r"and rerun$"):
        fileio.check_free_space(tmp_path / "results")


def test_a_disk_full_after_a_failed_run_is_named_and_one_with_room_is_not(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    assert fileio.full_disk(tmp_path / "results") is None
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=0))
    assert fileio.full_disk(tmp_path / "results") == (
        f"{tmp_path / 'results'}: the disk filled during the run (0 bytes free on its file system): the jobs that "
        "failed could not write their outputs or logs; free some space and rerun the same command")


def test_a_read_only_results_folder_is_named_with_what_to_do(tmp_path, monkeypatch):
    root = tmp_path / "results-smoke"
    (root / "tables").mkdir(parents=True)
    (root / "tables/claims.csv").write_text("claim\n")
    fileio.check_writable(root)
    # as a non-root user sees a folder after chmod -R a-w (root may write anything)
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path).name != "claims.csv")
    with pytest.raises(UserError, match=rf"^{root}: read-only \({root}/tables/claims.csv cannot be written\); make it "
                                        rf"writable \(chmod -R u\+w {root}\) or set results_dir to a folder you can "
                                        r"write, and rerun$"):
        fileio.check_writable(root)
