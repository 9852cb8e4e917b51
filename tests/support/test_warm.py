"""Warm start (lengthgen.support.warm): a job forked from the server behaves as the same job run cold:
its streams, exit status and signals; a job started differently runs cold; a job
killed outright takes its worker with it; the server goes when its parent does."""

import ast
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, make_cell, sparse_parity_task, venv_env, write_dataset

from lengthgen.support import warm
from lengthgen.support.fileio import canonical_json

EVAL = canonical_json({"device": "cpu", "threads": 1, "batch_size": 8})


def _wait_for(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def _gone(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # a zombie has ended; only its parent's reaping is left


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A warm-start server for this module's jobs, as the workflow's `onstart` starts one."""
    log = tmp_path_factory.mktemp("warm") / "warm.log"
    saved = dict(os.environ)
    # the jobs' environment as Snakemake's shell makes it for a one-thread job
    os.environ.update(venv_env(PYTHONPATH=str(REPO / "src"), **dict.fromkeys(warm.THREAD_ENV, "1")))
    handle = warm.start(log, 1)
    assert handle is not None
    warm.wait_ready(handle[0], log, timeout_s=60)
    yield log
    warm.stop(*handle)
    os.environ.clear()
    os.environ.update(saved)
    assert not handle[1].exists(), "stop removes the socket's directory"


def _job(*args) -> list[str]:
    return [PYTHON, "-m", "lengthgen", *map(str, args)]


def _workers(log) -> list[tuple[str, int]]:
    return [(cmd, int(pid)) for cmd, pid in re.findall(r": (\S+): worker (\d+)$", log.read_text(), flags=re.M)]


@pytest.mark.subprocess
def test_a_job_runs_in_a_worker_with_its_streams_and_exit_status(server, tmp_path):
    before = len(_workers(server))
    bad = subprocess.run(_job("sweep", "--model", tmp_path / "missing.pt", "--data", "x", "--eval", EVAL,
                              "--out", tmp_path / "out.parquet"), capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr == f"lengthgen: error: {tmp_path / 'missing.pt'}: checkpoint not found\n"
    usage = subprocess.run(_job("diff", "--help"), capture_output=True, text=True)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: ") and usage.stderr == ""
    assert [cmd for cmd, _ in _workers(server)[before:]] == ["sweep", "diff"]


@pytest.mark.parametrize(("variable", "differ"), [
    ("PYTHONPATH", "path, environment"), ("PYTHONHASHSEED", "environment"), ("OMP_NUM_THREADS", "environment"),
])
@pytest.mark.subprocess
def test_a_job_started_differently_runs_cold(server, tmp_path, variable, differ):
    value = f"{REPO / 'src'}{os.pathsep}{tmp_path}" if variable == "PYTHONPATH" else "2"
    before = len(_workers(server))
    done = subprocess.run(_job("diff", "--help"), capture_output=True, text=True, env={**os.environ, variable: value})
    assert done.returncode == 0 and done.stdout.startswith("usage: ")
    assert len(_workers(server)) == before
    assert server.read_text().rstrip().endswith(f"diff: runs cold ({differ} differ)")


@pytest.fixture(scope="module")
def long_training(tmp_path_factory):
    """A training command that runs far longer than a test waits."""
    data = write_dataset(tmp_path_factory.mktemp("data"), sparse_parity_task(train_examples=256))
    cell = make_cell(max_steps=10**6, log_every=10**6)
    def command(out):
        return _job("train", "--cell", canonical_json(cell), "--data", data["train"], "--out-dir", out,
                    "--checkpoint", out / "last.pt")
    return command


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
@pytest.mark.subprocess
def test_a_signalled_job_ends_its_worker(server, tmp_path, long_training, signum):
    before = len(_workers(server))
    log = tmp_path / "train.log"
    with open(log, "w") as stderr:
        job = subprocess.Popen(long_training(tmp_path / "run"), stderr=stderr)
    _wait_for(lambda: "parameters on cpu" in log.read_text(), "training to start")
    (cmd, pid), = _workers(server)[before:]
    assert cmd == "train" and not _gone(pid)
    job.send_signal(signum)
    assert job.wait(timeout=30) == -signum, "the job ends as a cold one would, by the signal"
    _wait_for(lambda: _gone(pid), "the worker to end", timeout=10)
    assert not (tmp_path / "run" / "model.pt").exists()


@pytest.mark.subprocess
def test_a_worker_shows_as_its_job_and_a_killed_one_fails_its_job_with_what_to_do(server, tmp_path, long_training):
    """ps and pgrep -a show a worker as the job it runs, not as the server it forked from; a
    worker killed by hand (the job itself alive) fails its job in one line saying what to do."""
    before = len(_workers(server))
    log = tmp_path / "train.log"
    with open(log, "w") as stderr:
        job = subprocess.Popen(long_training(tmp_path / "run"), stderr=stderr)
    try:
        _wait_for(lambda: "parameters on cpu" in log.read_text(), "training to start")
        (_, pid), = _workers(server)[before:]
        shown = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        os.kill(pid, signal.SIGKILL)
        assert job.wait(timeout=30) == 1
    finally:
        job.kill()  # a failed check must not leave a training running (its worker ends with it)
    assert shown.startswith(f"lengthgen worker: train {tmp_path / 'run'} (warm start, server ")
    assert "warm-server" not in shown
    assert log.read_text().splitlines()[-1] == (
        f"lengthgen: error: the job's warm-start worker (pid {pid}) ended without an exit status (killed?); "
        "rerun the same command to redo this job")


@pytest.mark.subprocess
def test_the_server_ends_with_its_parent(tmp_path):
    code = (f"import sys; sys.path.insert(0, {str(REPO / 'src')!r}); from lengthgen.support import warm; "
            f"server, directory = warm.start({str(tmp_path / 'warm.log')!r}, 1); print(server.pid, directory)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=venv_env(PYTHONPATH=str(REPO / "src")))
    pid, directory = done.stdout.split()
    _wait_for(lambda: _gone(int(pid)), "the orphaned server to stop", timeout=30)
    assert "parent exited; stopping" in (tmp_path / "warm.log").read_text()
    assert not os.path.exists(directory), "it removes its socket's directory"


@pytest.mark.subprocess
def test_wait_ready_ends_at_a_dead_server_or_the_timeout_in_one_line(tmp_path):
    """A server that dies is reported at once with its last words; a stale line from an earlier
    server in the same (appended) log does not count as ready."""
    log = tmp_path / "warm.log"
    log.write_text("lengthgen warm start [1]: serving /x/socket; preloaded torch in 2.0 s\n")
    dies = "import sys; sys.stderr.write('ModuleNotFoundError: torch'); sys.exit(3)"
    with open(log, "a") as stderr:
        dead = subprocess.Popen([sys.executable, "-c", dies], stderr=stderr)
        dead.wait()
    with pytest.raises(RuntimeError, match=rf"^{re.escape(str(log))}: the warm-start server \(pid {dead.pid}\) exited "
                                           r"with status 3; last line: ModuleNotFoundError: torch$"):
        warm.wait_ready(dead, log, timeout_s=30)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(RuntimeError, match=rf"\(pid {alive.pid}\) was not ready after 0.2 s; last line: Module"):
            warm.wait_ready(alive, log, timeout_s=0.2)
    finally:
        alive.kill()
        alive.wait()


def test_the_server_imports_nothing_of_lengthgen():
    """The command line imports this module (its Ctrl-C line, the server subcommand): an import back
    would make the two a cycle."""
    tree = ast.parse((REPO / "src/lengthgen/support/warm.py").read_text())
    found = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    found += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [name for name in found if name.split(".")[0] == "lengthgen"]


@pytest.mark.subprocess
def test_a_worker_runs_the_entry_the_server_was_handed(short_tmp):
    socket_path = short_tmp / "socket"
    serve = ("import sys; from lengthgen.support import warm; "
             "warm.serve(sys.argv[1], int(sys.argv[2]), lambda argv: print('entry got', argv) or 7)")
    env = venv_env(PYTHONPATH=str(REPO / "src"))
    server = subprocess.Popen([PYTHON, "-c", serve, str(socket_path), str(os.getpid())], env=env,
                              stderr=subprocess.DEVNULL)
    try:
        _wait_for(socket_path.exists, "the server's socket")
        job = "import sys; from lengthgen.support import warm; sys.exit(warm.forward(['stage', '--x']))"
        done = subprocess.run([PYTHON, "-c", job], env={**env, warm.ENV: str(socket_path)}, capture_output=True,
                              text=True, timeout=120)
    finally:
        server.terminate()
        server.wait()
    assert (done.returncode, done.stdout) == (7, "entry got ['stage', '--x']\n"), done.stderr
