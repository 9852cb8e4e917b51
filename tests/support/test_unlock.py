"""`make run` after a killed run: the lock a SIGKILLed Snakemake left is removed and the run goes
on; a live Snakemake of the same configuration stops the run in one line, one of another
configuration does not."""

import contextlib
import os
import signal
import subprocess
import time

import pytest
import yaml
from conftest import PYTHON, REPO, VENV_BIN, copy_workflow, venv_env

from lengthgen.support.unlock import is_job, is_snakemake, live_processes

# One short training cell, no language models: the run lasts long enough to be killed mid-way.
TINY = {
    "seeds": [0],
    "model": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 32},
    "train": {"max_steps": 200, "warmup_steps": 5, "checkpoint_every": 50, "log_every": 50,
              "early_stop": {"patience": 0}},
    "tasks": [{"name": "lock_k1", "kind": "sparse_parity", "schemes": ["nope"], "train_examples": 500,
               "params": {"k": 1, "n_min": 4, "n_max": 8}, "eval": {"lengths": [8, 16], "examples": 20}}],
    "language": None,
}


def test_snakemake_command_lines_are_recognised():
    assert is_snakemake(["/venv/bin/python", "/venv/bin/snakemake", "--cores", "all"])
    assert is_snakemake(["snakemake", "-n"])
    assert is_snakemake(["python3", "-m", "snakemake", "--unlock"])
    assert not is_snakemake(["python", "-m", "lengthgen", "train", "--cell", "{}"])
    assert not is_snakemake(["vim", "Snakefile"])
    assert is_job(["python", "-m", "lengthgen", "train", "--cell", "{}"])
    assert not is_job(["python", "-m", "lengthgen.support.unlock", "snakemake"])
    assert not is_job(["python", "-m", "lengthgen", "warm-server", "/tmp/x/socket", "123"])


def test_configfiles_of_a_command_line_are_resolved(tmp_path):
    from lengthgen.support.unlock import configfiles

    argv = ["python", "snakemake", "--cores", "1", "--configfile", "a.yaml", "b.yaml", "-n", "--configfile=c.yaml"]
    assert configfiles(argv, tmp_path) == {tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "c.yaml"}
    assert configfiles(["snakemake", "--cores", "all"], tmp_path) == frozenset()


def _wrapped(workdir) -> list[str]:
    snakemake = [str(VENV_BIN / "snakemake"), "--cores", "1", "--configfile", "tiny.yaml"]
    return [PYTHON, "-m", "lengthgen.support.unlock", *snakemake]


def _run(workdir, command) -> subprocess.CompletedProcess:
    env = venv_env(PYTHONPATH=str(workdir / "src"))
    return subprocess.run(command, cwd=workdir, env=env, text=True, capture_output=True, timeout=600)


def _locked(workdir) -> bool:
    locks = workdir / ".snakemake/locks"
    return locks.is_dir() and any(locks.iterdir())


@pytest.mark.slow
@pytest.mark.workflow
def test_a_killed_run_is_unlocked_and_goes_on_but_a_live_one_is_not(tmp_path):
    workdir = copy_workflow(tmp_path / "wf")
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    first = subprocess.Popen(_wrapped(workdir)[3:], cwd=workdir, env=venv_env(), start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not _locked(workdir):
            assert first.poll() is None, "snakemake ended before it locked the directory"
            assert time.monotonic() < deadline, "snakemake never locked the directory"
            time.sleep(0.1)
        # a live run of the same configuration holds the lock: stop, in one line naming it
        blocked = _run(workdir, _wrapped(workdir))
        assert blocked.returncode == 1, blocked.stderr
        assert blocked.stderr.strip() == (
            f"lengthgen: a run of this configuration (Snakemake, pid {first.pid}) is already running in "
            f"{workdir.resolve()}; wait for it to end, or stop it first")
        # another configuration (its own results_dir) goes on beside it: here planned, not run
        (workdir / "other.yaml").write_text(yaml.safe_dump({**TINY, "results_dir": "results-other"}))
        other = _run(workdir, [PYTHON, "-m", "lengthgen.support.unlock", str(VENV_BIN / "snakemake"), "-n",
                               "--cores", "1", "--configfile", "other.yaml"])
        assert other.returncode == 0, other.stderr
        assert "results-other/runs/lock_k1/nope/seed0/model.pt" in other.stdout + other.stderr
        first.send_signal(signal.SIGKILL)  # no chance to remove its lock
        first.wait()
    finally:
        try:  # what the killed run had started (a training job, the warm-start server)
            os.killpg(first.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert _locked(workdir), "the killed run should have left its lock behind"
    deadline = time.monotonic() + 30
    while live_processes(workdir, is_job):  # until the killed jobs are gone from /proc
        assert time.monotonic() < deadline, "the killed run's jobs did not end"
        time.sleep(0.1)

    resumed = _run(workdir, _wrapped(workdir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    notes = [line for line in resumed.stderr.splitlines() if line.startswith("lengthgen: a killed run")]
    assert notes == ["lengthgen: a killed run left Snakemake's lock behind and no Snakemake is running here; "
                     "unlocking (snakemake --unlock) and going on"]
    assert not _locked(workdir)
    again = _run(workdir, [*_wrapped(workdir), "-n"])
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    assert "lengthgen: a killed run" not in again.stderr


@pytest.mark.subprocess
def test_a_job_the_killed_run_left_running_stops_the_next_run(tmp_path):
    """SIGKILL to Snakemake alone leaves its jobs running: the lock is stale, but rerunning them
    now would have two processes write the same outputs."""
    workdir = tmp_path / "wf"
    (workdir / ".snakemake/locks").mkdir(parents=True)
    (workdir / ".snakemake/locks/0.output.lock").write_text("results/tables/claims.md\n")
    fake = tmp_path / "fake" / "lengthgen"  # a `python -m lengthgen train` that only waits
    fake.mkdir(parents=True)
    (fake / "__main__.py").write_text("import time\ntime.sleep(60)\n")
    job = subprocess.Popen([PYTHON, "-m", "lengthgen", "train"], cwd=workdir, env=venv_env(PYTHONPATH=str(fake.parent)))
    try:
        # Popen returns before a child's cmdline is readable in /proc: start once the job shows
        deadline = time.monotonic() + 30
        while job.pid not in live_processes(workdir, is_job):
            assert time.monotonic() < deadline, "the job's command line did not show in /proc within 30 s"
            time.sleep(0.02)
        blocked = subprocess.run([PYTHON, "-m", "lengthgen.support.unlock", "snakemake", "--cores", "1"], cwd=workdir,
                                 env=venv_env(PYTHONPATH=str(REPO / "src")), capture_output=True, text=True)
    finally:
        job.kill()
        job.wait()
    assert blocked.returncode == 1
    assert blocked.stderr == (f"lengthgen: a job of a killed run (pid {job.pid}) is still running in {workdir}; "
                              "wait for it to end, or stop it first\n")
    assert (workdir / ".snakemake/locks/0.output.lock").exists()


@pytest.mark.subprocess
def test_an_interrupted_run_ends_in_one_line_with_the_child_status(tmp_path):
    """SIGTERM to the wrapper reaches the command it runs; the last line says a rerun resumes."""
    sleeper = [PYTHON, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    proc = subprocess.Popen([PYTHON, "-m", "lengthgen.support.unlock", *sleeper], cwd=tmp_path, env=venv_env(
        PYTHONPATH=str(REPO / "src")), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "started\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.strip().splitlines() == ["lengthgen: run interrupted (SIGTERM); rerun the same command to resume: "
                                        "finished jobs are kept and training resumes from its last checkpoint"]


def test_a_stage_stopped_by_ctrl_c_says_so_in_one_line(monkeypatch, capsys):
    from lengthgen import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_diff", interrupted)
    assert cli.main(["diff", "--rev", "HEAD"]) == 128 + signal.SIGINT
    assert capsys.readouterr().err == "lengthgen: interrupted (SIGINT); rerunning the workflow resumes this job\n"


def _wrapper(tmp_path, *command, **popen) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "lengthgen.support.unlock", *command], cwd=tmp_path,
                            env=venv_env(PYTHONPATH=str(REPO / "src")), text=True, **popen)


@pytest.mark.subprocess
def test_a_second_run_of_one_configuration_started_at_once_is_told_it_is_running(tmp_path):
    """Before the first run's Snakemake has made its lock (here it never does), the second run of
    the same --configfile stops in lengthgen's line, not on Snakemake's lock error; another
    configuration goes on."""
    holds = [PYTHON, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(60)", "--configfile", "a.yaml"]
    first, held = _wrapper(tmp_path, *holds, stdout=subprocess.PIPE), None
    try:
        held = int(first.stdout.readline())
        runs = [PYTHON, "-c", "print('ran')", "--configfile"]
        second = _wrapper(tmp_path, *runs, "a.yaml", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = second.communicate(timeout=60)
        assert (second.returncode, out) == (1, ""), err
        assert err == (f"lengthgen: a run of this configuration is already running in {tmp_path}; wait for it to "
                       "end, or stop it first\n")
        other = _wrapper(tmp_path, *runs, "b.yaml", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert other.communicate(timeout=60) == ("ran\n", "") and other.returncode == 0
    finally:
        first.kill()
        first.wait()
        if held:  # in a process group of its own: the wrapper's SIGKILL leaves it
            os.kill(held, signal.SIGKILL)


@pytest.mark.subprocess
def test_an_interrupt_stops_the_whole_run_at_once_and_leaves_no_process(tmp_path):
    """SIGTERM (what make passes on) interrupts the run's process group, as Ctrl-C would, rather
    than wait for its jobs: a job and a server that ignores Ctrl-C (the warm-start server) are
    gone when the wrapper returns, and what the shutdown prints is held back for one line."""
    job = "import time; time.sleep(60)"
    server = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"
    run = (f"import signal, subprocess, sys, time; ps = [subprocess.Popen([sys.executable, '-c', c]) for c in "
           f"({job!r}, {server!r})]; print(*(p.pid for p in ps), flush=True); "
           "signal.signal(signal.SIGINT, lambda *a: print('Error in rule train: ...', file=sys.stderr) or "
           "[p.wait() for p in ps[:1]] and sys.exit(1)); time.sleep(60)")
    proc = _wrapper(tmp_path, PYTHON, "-c", run, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pids = [int(pid) for pid in proc.stdout.readline().split()]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.splitlines() == ["lengthgen: run interrupted (SIGTERM); rerun the same command to resume: finished "
                                "jobs are kept and training resumes from its last checkpoint"]
    time.sleep(0.5)  # reaped by init
    for pid in pids:
        state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
        assert state in ("", "Z"), f"pid {pid} is still running ({state})"


def _state(pid: int) -> str:
    return subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()[:1]


@pytest.mark.subprocess
def test_ctrl_z_suspends_the_run_and_fg_resumes_it(tmp_path):
    """Snakemake runs in a process group of its own, which the terminal's Ctrl-Z does not reach:
    the wrapper passes it on, and the SIGCONT of `fg`."""
    ticks = "import os, time\nprint(os.getpid(), flush=True)\nfor _ in range(20):\n    time.sleep(0.1)"
    proc, child = _wrapper(tmp_path, PYTHON, "-c", ticks, stdout=subprocess.PIPE, start_new_session=True), None
    try:
        child = int(proc.stdout.readline())
        os.killpg(proc.pid, signal.SIGTSTP)  # as the terminal sends it, to the foreground group
        deadline = time.monotonic() + 10
        while (_state(proc.pid), _state(child)) != ("T", "T"):
            assert time.monotonic() < deadline, (_state(proc.pid), _state(child))
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=30) == 0
    finally:
        for group in (proc.pid, child):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.killpg(group, signal.SIGKILL)
