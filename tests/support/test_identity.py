"""A cell's files belong to that cell. Each fault is injected as it was found:
another cell's model.pt copied into a cell, `device: cuda` on a machine without CUDA, a
truncated dataset, and a SIGKILLed `--forcerun train` run. Each ends in one line naming the
file or key, exit status non-zero and nothing half-written, and once the fault is undone a rerun
gives tables byte-identical to an uninterrupted run's. The stages' checks are also tested on
their own (sweep, aggregate, the machine check, the warm-start folders)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from conftest import PYTHON, REPO, VENV_BIN, copy_workflow, error_lines, run_lengthgen, venv_env
from test_bad_input import assert_one_line_error, temp_files

from lengthgen import config as lgconfig
from lengthgen.support import identity, warm
from lengthgen.support.errors import UserError
from lengthgen.support.unlock import is_job, live_processes

EVAL = json.dumps({"device": "cpu", "threads": 1, "batch_size": 100})


# -- the sweep: the model must be the cell's ---------------------------------------------------


@pytest.fixture
def two_cells(tmp_path, tiny_cell, tiny_dataset):
    """Two trained cells of one task, nope seed 0 and alibi seed 1: {name: (cell, model path)}."""
    from lengthgen.training.train import train

    out = {}
    for scheme, seed in (("nope", 0), ("alibi", 1)):
        cell = tiny_cell(task="tiny", scheme=scheme, seed=seed)
        run_dir = tmp_path / "runs" / "tiny" / scheme / f"seed{seed}"
        train(cell, tiny_dataset["train"], run_dir, tmp_path / "ckpt.pt", log=lambda _msg: None)
        out[scheme] = (cell, run_dir / "model.pt")
    return out


def _sweep(model, data, out, expect):
    return run_lengthgen("sweep", "--model", model, "--data", data, "--eval", EVAL, "--out", out, "--expect", expect,
                         cwd=out.parent)


def test_sweep_of_another_cells_model_stops_in_one_line(tmp_path, two_cells, tiny_dataset):
    """The bad case: alibi seed 1's model.pt in the nope seed 0 cell."""
    nope, alibi = two_cells["nope"], two_cells["alibi"]
    out = tmp_path / "runs/tiny/nope/seed0/sweep.parquet"
    proc = _sweep(alibi[1], tiny_dataset["test"], out, identity.of_cell(nope[0]))
    line = assert_one_line_error(proc, str(alibi[1]))
    assert "holds the model of tiny/alibi/seed1 (config " in line and "expected tiny/nope/seed0 (config " in line
    assert not out.exists() and not temp_files(tmp_path)


def test_sweep_of_the_cell_under_another_config_stops(tmp_path, tiny_cell, two_cells, tiny_dataset):
    """Same task, scheme and seed, but trained under other settings: the config digest differs."""
    cell, model = two_cells["nope"]
    other = tiny_cell(task="tiny", scheme="nope", seed=0, max_steps=3)
    out = tmp_path / "sweep.parquet"
    line = assert_one_line_error(_sweep(model, tiny_dataset["test"], out, identity.of_cell(other)), str(model))
    assert f"(config {identity.fingerprint(cell)})" in line and f"(config {identity.fingerprint(other)})" in line
    assert not out.exists()


def test_sweep_of_its_own_cell_records_the_identity(tmp_path, two_cells, tiny_dataset):
    from lengthgen.analysis.aggregate import sweep_identity

    cell, model = two_cells["nope"]
    out = tmp_path / "sweep.parquet"
    proc = _sweep(model, tiny_dataset["test"], out, identity.of_cell(cell))
    assert proc.returncode == 0, proc.stderr
    assert sweep_identity(out) == identity.of_cell(cell)


def test_a_malformed_identity_is_refused_by_argparse(tmp_path, two_cells, tiny_dataset):
    proc = _sweep(two_cells["nope"][1], tiny_dataset["test"], tmp_path / "s.parquet", "tiny/nope/0")
    assert_one_line_error(proc, "--expect", prefix="lengthgen sweep: error:")


# -- aggregation: one sweep per cell, each the cell's -----------------------------------------


@pytest.fixture
def sweeps(tmp_path, two_cells, tiny_dataset):
    """Each cell's sweep at its own path: {scheme: (token, sweep path)}."""
    from lengthgen.evaluation.sweep import length_sweep

    out = {}
    for scheme, (cell, model) in two_cells.items():
        path = model.parent / "sweep.parquet"
        token = identity.of_cell(cell)
        length_sweep(model, tiny_dataset["test"], path, json.loads(EVAL), log=lambda _msg: None, expect=token)
        out[scheme] = (token, path)
    return out


def _aggregate(tmp_path, paths, tokens):
    csv, md = tmp_path / "tables/length_sweep.csv", tmp_path / "tables/summary.md"
    proc = run_lengthgen("aggregate", "--sweeps", *paths, "--expect", *tokens, "--csv", csv, "--md", md, cwd=tmp_path)
    return proc, csv, md


def test_aggregate_refuses_a_cells_rows_twice_naming_both_files(tmp_path, sweeps):
    (nope_token, nope), (alibi_token, alibi) = sweeps["nope"], sweeps["alibi"]
    shutil.copy(alibi, nope)  # alibi seed 1's sweep in the nope seed 0 cell
    proc, csv, md = _aggregate(tmp_path, [nope, alibi], [nope_token, alibi_token])
    line = assert_one_line_error(proc, "holds rows of tiny/alibi/seed1")
    assert str(nope) in line and str(alibi) in line
    assert not csv.exists() and not md.exists() and not temp_files(tmp_path)


def test_aggregate_refuses_a_sweep_of_another_cell(tmp_path, sweeps):
    """Without a duplicate (alibi's own sweep is not among the inputs): the one at nope's path is alibi's."""
    (nope_token, nope), (_, alibi) = sweeps["nope"], sweeps["alibi"]
    shutil.copy(alibi, nope)
    proc, csv, _ = _aggregate(tmp_path, [nope], [nope_token])
    line = assert_one_line_error(proc, str(nope))
    assert "holds the sweep of tiny/alibi/seed1" in line and "expected tiny/nope/seed0" in line
    assert not csv.exists()


def test_aggregate_refuses_a_sweep_without_identity(tmp_path, sweeps):
    """A sweep written before identities were recorded (or by hand): its rows alone say nothing
    of the config it was made under."""
    import pyarrow.parquet as pq

    token, path = sweeps["nope"]
    pq.write_table(pq.read_table(path).replace_schema_metadata(None), path)
    proc, csv, _ = _aggregate(tmp_path, [path], [token])
    line = assert_one_line_error(proc, f"{path}: records no cell identity (the sweep), expected tiny/nope/seed0")
    assert line.endswith("delete it and rerun the workflow to redo it") and not csv.exists()


def test_aggregate_of_the_right_sweeps(tmp_path, sweeps):
    proc, csv, md = _aggregate(tmp_path, [sweeps[s][1] for s in ("nope", "alibi")],
                               [sweeps[s][0] for s in ("nope", "alibi")])
    assert proc.returncode == 0, proc.stderr
    assert "tiny,alibi,1," in csv.read_text() and "tiny,nope,0," in csv.read_text()
    assert "identity" not in csv.read_text().splitlines()[0]  # recorded beside the columns, not in them


# -- E4: a language model must be the one it is scored as -----------------------------------


def test_score_with_another_language_model_stops_in_one_line(tmp_path):
    """The short model's model.pt where the long model's should be."""
    import numpy as np

    from lengthgen.language import corpus, lm, tokenizer

    rng = np.random.default_rng(0)
    for i in range(12):
        (tmp_path / "docs").mkdir(exist_ok=True)
        (tmp_path / "docs" / f"d{i}.txt").write_text(" ".join(rng.choice(["a", "bb", "ccc", "dd"], 200)))
    corpus.build({"source": "files", "path": str(tmp_path / "docs/*.txt"), "validation_fraction": 0.3},
                 tmp_path / "c.parquet")
    tokenizer.train({"kind": "bpe", "vocab_size": 270}, tmp_path / "c.parquet", tmp_path / "tok.json")
    tokenizer.tokenize(tmp_path / "tok.json", tmp_path / "c.parquet", tmp_path / "tokens")
    base = {"pose_target": None, "seed": 0, "device": "cpu", "threads": 1,
            "model": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 32, "dropout": 0.0, "max_position": 64},
            "train": {"batch_size": 2, "lr": 1e-3, "min_lr_ratio": 0.1, "weight_decay": 0.0, "warmup_steps": 1,
                      "max_steps": 2, "grad_clip": 1.0, "checkpoint_every": 5, "eval_every": 2, "eval_windows": 2}}
    specs = {"long": {**base, "name": "long", "context": 8}, "short": {**base, "name": "short", "context": 4}}
    for name, spec in specs.items():
        lm.train_lm(spec, tmp_path / "tok.json", tmp_path / "tokens", tmp_path / name, tmp_path / f"{name}.pt",
                    log=lambda _msg: None)
    cfg = {"T_long": 8, "T_short": 4, "device": "cpu", "threads": 1, "models": ["long", "short"],
           "influence": {"screen": 10, "targets": 2, "delta": 0.0, "k": [1], "methods": ["greedy"],
                         "coupling": "shared", "seed": 0, "batch_size": 8, "targets_per_batch": 2}}
    out, wrong = tmp_path / "scores.parquet", tmp_path / "short" / "model.pt"
    proc = run_lengthgen("score", "--config", json.dumps(cfg), "--long", wrong, "--short",
                         f"short={tmp_path / 'short' / 'model.pt'}", "--tokenizer", tmp_path / "tok.json",
                         "--tokens", tmp_path / "tokens", "--expect", *map(identity.of_lm, specs.values()),
                         "--out", out, cwd=tmp_path)
    line = assert_one_line_error(proc, f"{wrong}: holds the language model of language/short (config ")
    assert "expected language/long (config " in line
    assert not out.exists() and not temp_files(tmp_path)


# -- the machine check ------------------------------------------------------------------------


def _config(**changes) -> dict:
    return {"device": "auto", "language": None, **changes}


def test_cuda_without_cuda_is_refused_naming_the_key(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=r"^config\.device: cuda, but torch .* sees no CUDA device on this machine"):
        lgconfig.check_machine(_config(device="cuda"), {"train", "aggregate"})
    lgconfig.check_machine(_config(device="cuda"), {"aggregate", "figure"})  # no job uses the device
    lgconfig.check_machine(_config(device="auto"), {"train"})
    for stacked in ("length_sweep_seeds_0_1", "attention_seeds_0_1"):  # a run of a stack's evaluation alone
        with pytest.raises(UserError, match=r"^config\.device: cuda"):
            lgconfig.check_machine(_config(device="cuda"), {stacked})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    lgconfig.check_machine(_config(device="cuda"), {"train_seeds_0_1"})


def test_a_corpus_path_missing_here_is_refused(tmp_path):
    corpus = {"source": "files", "path": str(tmp_path / "*.txt")}
    with pytest.raises(UserError, match=r"^config\.language\.corpus\.path: no files match"):
        lgconfig.check_machine(_config(language={"corpus": corpus}), {"corpus"})
    lgconfig.check_machine(_config(language={"corpus": corpus}), {"train"})  # the corpus is built already
    (tmp_path / "a.txt").write_text("text")
    lgconfig.check_machine(_config(language={"corpus": corpus}), {"corpus"})


# -- warm-start folders -----------------------------------------------------------------------


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


@pytest.mark.subprocess
def test_stale_warm_folders_are_removed_and_live_ones_kept(tmp_path):
    dead = _dead_pid()
    stale = tmp_path / f"{warm.PREFIX}{dead}-abc"
    live_run = tmp_path / f"{warm.PREFIX}{os.getpid()}-def"
    live_server = tmp_path / f"{warm.PREFIX}{dead}-ghi"
    for d in (stale, live_run, live_server):
        d.mkdir()
    (stale / "server.pid").write_text(f"{dead}\n")
    (live_server / "server.pid").write_text(f"{os.getpid()}\n")  # its run is gone, its server is not
    legacy = tmp_path / f"{warm.PREFIX}x1y2z3"  # an earlier version's: no pids, nothing listening
    legacy.mkdir()
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(legacy / "socket"))  # bound, never listening: connections are refused
    other = tmp_path / "unrelated"
    other.mkdir()
    assert warm.remove_stale(tmp_path) == [stale, legacy]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live_run.name, live_server.name, "unrelated"])


def _servers(tmp: Path) -> list[int]:
    return [int(p.read_text()) for p in tmp.glob(f"{warm.PREFIX}*/server.pid")]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _start_server(tmp_path, tmp: Path) -> tuple[subprocess.Popen, int, Path]:
    """A process that starts a warm-start server in TMPDIR `tmp`, as Snakemake's onstart does, and waits."""
    code = (f"import sys, time; sys.path.insert(0, {str(REPO / 'src')!r}); from lengthgen.support import warm; "
            f"server, directory = warm.start({str(tmp_path / 'warm.log')!r}, 1); "
            "print(server.pid, directory, flush=True); time.sleep(600)")
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True,
                           env=venv_env(PYTHONPATH=str(REPO / "src"), TMPDIR=str(tmp)))
    pid, directory = run.stdout.readline().split()
    return run, int(pid), Path(directory)


@pytest.mark.subprocess
def test_a_server_removes_its_folder_when_terminated(tmp_path, short_tmp):
    run, server, directory = _start_server(tmp_path, short_tmp)
    try:
        deadline = time.monotonic() + 60
        while not (directory / "socket").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(server, signal.SIGTERM)  # not through `stop`: the server removes its folder itself
        while _alive(server) or directory.exists():
            assert time.monotonic() < deadline, "the server left its folder"
            time.sleep(0.05)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()


def test_a_temporary_directory_too_long_for_a_socket_turns_warm_start_off(tmp_path, monkeypatch, capsys):
    """A Unix socket's path holds 107 bytes: under a longer TMPDIR the server could not bind, so
    jobs run cold, said in one line, with no folder left behind."""
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert warm.start(tmp_path / "warm.log", 1) is None
    err = capsys.readouterr().err
    assert err.startswith("lengthgen: warm start off (a socket in ") and err.count("\n") == 1
    assert "set TMPDIR to a shorter folder" in err and list(deep.iterdir()) == []


@pytest.mark.subprocess
def test_a_folder_left_by_a_killed_run_is_removed_by_the_next(tmp_path, short_tmp):
    tmp = short_tmp
    run, server, directory = _start_server(tmp_path, tmp)
    os.killpg(run.pid, signal.SIGKILL)  # the run and its server at once: nothing can clean up
    run.wait()
    deadline = time.monotonic() + 30
    while _alive(server):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert directory.exists(), "the fault: a SIGKILLed run's folder stays"
    assert (directory / "server.pid").read_text() == f"{server}\n"
    assert warm.remove_stale(tmp) == [directory]


# -- the faults, on a tiny grid ----------------------------------------------------------------

# Two schemes and two seeds of one task, trained a few steps, no language models.
TINY = {
    "results_dir": "results-identity",
    "seeds": [0, 1],
    "model": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 32},
    "train": {"max_steps": 12, "warmup_steps": 2, "checkpoint_every": 4, "log_every": 4,
              "early_stop": {"patience": 0}},
    "tasks": [{"name": "id_k1", "kind": "sparse_parity", "schemes": ["nope", "alibi"], "train_examples": 200,
               "params": {"k": 1, "n_min": 4, "n_max": 8}, "eval": {"lengths": [8, 16], "examples": 20}}],
    "schemes": {"nope": {"encoding": "none"}, "alibi": {"encoding": "alibi"}},
    "language": None,
}
RESULTS = TINY["results_dir"]
CELL = f"{RESULTS}/runs/id_k1/{{scheme}}/seed{{seed}}"
SNAKEMAKE = [str(VENV_BIN / "snakemake"), "--configfile", "tiny.yaml"]


def _snakemake(workdir, *args, cores=2, env=None, unlock=False) -> subprocess.CompletedProcess:
    """A run of the tiny grid; a run that a fault is to stop runs one job at a time (cores=1),
    so that one job meets it."""
    command = [*([PYTHON, "-m", "lengthgen.support.unlock"] if unlock else []), *SNAKEMAKE, f"-c{cores}", *args]
    return subprocess.run(command, cwd=workdir, env=env or venv_env(PYTHONPATH=str(workdir / "src")), text=True,
                          capture_output=True, timeout=600)


def _files(workdir) -> dict[str, bytes]:
    """Every file of the run's results directory (logs and benchmarks aside, which record times)."""
    root = workdir / RESULTS
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] not in ("logs", "benchmarks")}


def _tables(workdir) -> dict[str, bytes]:
    return {name: data for name, data in _files(workdir).items() if name.startswith("tables/")}


def _intermediates(workdir) -> list[str]:
    names = [f"data/id_k1/{s}-seed{seed}.parquet" for s in ("train", "test") for seed in (0, 1)]  # a draw per seed
    names += [f"runs/id_k1/{scheme}/seed{seed}/{f}" for scheme in ("nope", "alibi") for seed in (0, 1)
              for f in ("model.pt", "train_log.parquet", "meta.json", "sweep.parquet")]
    return [n for n in names if not (workdir / RESULTS / n).exists()]


def _assert_rerun_restores(workdir, baseline, *, env=None, unlock=False, then_done=False):
    """The rerun after the fault is undone: exit 0, every intermediate file back and the tables
    byte-identical to the uninterrupted run's (`then_done`: and nothing is left to do)."""
    done = _snakemake(workdir, env=env, unlock=unlock)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _intermediates(workdir) == []
    assert _tables(workdir) == baseline["tables"]
    if then_done:
        again = _snakemake(workdir, "-n")
        assert "Nothing to be done" in again.stdout + again.stderr, again.stdout[-2000:]
    return done


def _nothing_half_written(workdir, baseline) -> None:
    """Each table is the uninterrupted run's or gone (Snakemake removes a failed job's outputs),
    and no temporary file of an atomic write is left."""
    tables = _tables(workdir)
    assert tables == {name: data for name, data in baseline["tables"].items() if name in tables}
    assert not temp_files(workdir / RESULTS)


def _one_line(proc, needle: str) -> str:
    """The failed run's one error line, however often Snakemake shows the job's log."""
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = set(error_lines(proc.stderr)) | set(error_lines(proc.stdout))
    assert len(lines) == 1, proc.stderr[-3000:]
    line = lines.pop()
    assert needle in line, line
    return line


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """An uninterrupted run of the tiny grid; each test works on a copy of it."""
    workdir = copy_workflow(tmp_path_factory.mktemp("identity") / "wf")
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    done = _snakemake(workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"dir": workdir, "tables": _tables(workdir)}


@pytest.fixture
def run_copy(baseline, tmp_path) -> Path:
    """A copy of the finished run, its Snakemake records and file times included."""
    return Path(shutil.copytree(baseline["dir"], tmp_path / "wf", symlinks=True))


@pytest.mark.workflow
@pytest.mark.slow
def test_another_cells_model_in_a_cell_stops_the_run(run_copy, baseline):
    target = run_copy / CELL.format(scheme="nope", seed=0) / "model.pt"
    original = target.read_bytes()
    shutil.copy(run_copy / CELL.format(scheme="alibi", seed=1) / "model.pt", target)
    failed = _snakemake(run_copy, cores=1)
    line = _one_line(failed, f"{target.relative_to(run_copy)}: holds the model of id_k1/alibi/seed1 (config ")
    assert "expected id_k1/nope/seed0 (config " in line
    _nothing_half_written(run_copy, baseline)
    target.write_bytes(original)  # the fault undone
    _assert_rerun_restores(run_copy, baseline)


@pytest.mark.workflow
@pytest.mark.slow
def test_cuda_on_a_machine_without_it_stops_before_any_job(run_copy, baseline):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    before = _files(run_copy)
    failed = _snakemake(run_copy, "--config", "device=cuda", cores=1)
    _one_line(failed, "config.device: cuda, but torch")
    assert "rule train:" not in failed.stdout + failed.stderr  # no job started
    assert _files(run_copy) == before  # nothing deleted or written
    assert not (run_copy / ".snakemake/locks").exists() or not any((run_copy / ".snakemake/locks").iterdir())
    done = _snakemake(run_copy)  # the fault undone: the config as it was
    assert done.returncode == 0 and "Nothing to be done" in done.stdout + done.stderr
    assert _tables(run_copy) == baseline["tables"]


@pytest.mark.workflow
@pytest.mark.slow
def test_missing_files_after_a_failed_job_are_rebuilt(run_copy, baseline):
    """A truncated training set: the job that reads it fails after Snakemake removed its outputs.
    Restored (with its old time, as `cp -p` restores it), the rerun rebuilds what went missing."""
    data = run_copy / RESULTS / "data/id_k1/train-seed0.parquet"
    original, stat = data.read_bytes(), data.stat()
    data.write_bytes(original[: len(original) // 2])
    failed = _snakemake(run_copy, cores=1)
    _one_line(failed, f"{data.relative_to(run_copy)}: not a readable Parquet")
    missing = _intermediates(run_copy)
    assert missing, "the failed job's outputs were removed"
    _nothing_half_written(run_copy, baseline)
    data.write_bytes(original)
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    done = _assert_rerun_restores(run_copy, baseline, then_done=True)
    assert f"lengthgen: missing under the tables: {RESULTS}/" in done.stderr  # said, not only done


@pytest.mark.workflow
@pytest.mark.slow
def test_a_truncated_sweep_is_removed_and_the_same_command_rebuilds_it(run_copy, baseline):
    """A sweep cut to half its bytes: aggregation ends in one line naming it and removes it, and
    the scorecard goes with the table it came from; the same command, rerun with nothing undone
    by hand, rebuilds the sweep and gives the uninterrupted run's tables."""
    sweep = run_copy / CELL.format(scheme="alibi", seed=1) / "sweep.parquet"
    sweep.write_bytes(sweep.read_bytes()[: sweep.stat().st_size // 2])
    failed = _snakemake(run_copy, cores=1)
    line = _one_line(failed, f"{sweep.relative_to(run_copy)}: not a readable sweep (")
    assert line.endswith("removed it: rerun the workflow to rebuild it")
    assert not sweep.exists()
    tables = _tables(run_copy)
    assert "tables/length_sweep.csv" not in tables and not {n for n in tables if n.startswith("tables/claims.")}
    _nothing_half_written(run_copy, baseline)
    _assert_rerun_restores(run_copy, baseline, then_done=True)


@pytest.mark.workflow
@pytest.mark.slow
def test_a_sigkilled_forcerun_train_is_rebuilt_and_its_warm_folder_removed(run_copy, baseline, short_tmp):
    tmp = short_tmp  # this run's own temporary directory: its warm-start folder is seen alone
    env = venv_env(PYTHONPATH=str(run_copy / "src"), TMPDIR=str(tmp))
    run = subprocess.Popen([*SNAKEMAKE, "-c1", "--forcerun", "train"], cwd=run_copy, env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (_intermediates(run_copy) and list(tmp.glob(f"{warm.PREFIX}*"))):
            assert run.poll() is None, "the run ended before a training job started"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # Snakemake, its jobs and the warm-start server
        run.wait()
    deadline = time.monotonic() + 30
    while live_processes(run_copy, is_job) or any(map(_alive, _servers(tmp))):
        assert time.monotonic() < deadline, "the killed run's processes did not end"
        time.sleep(0.05)
    assert list(tmp.glob(f"{warm.PREFIX}*")) and _intermediates(run_copy), "the fault leaves both behind"
    done = _assert_rerun_restores(run_copy, baseline, env=env, unlock=True)  # as `make run` does
    assert f"lengthgen: removed 1 warm-start folder(s) that killed runs left in {tmp}" in done.stderr
    assert not list(tmp.glob(f"{warm.PREFIX}*"))
