"""Run Snakemake, first removing the lock a killed run left behind, and say in one line when
the run was interrupted.

`python -m lengthgen.support.unlock snakemake --cores all ...` (what `make run` calls). Snakemake locks
its working directory while it runs and removes the lock when it ends; a run killed with SIGKILL
(or by an out-of-memory killer, or a closed laptop lid's shutdown) cannot, and the next run stops
on it. A lock is stale when no live Snakemake process works in this directory: then it is removed
with `snakemake --unlock` (same arguments) and the run goes on. When one is alive and runs the
same configuration (the same --configfile files), stop in one line naming it; a run of another
configuration writes another results directory, so this one goes on beside it (Snakemake's own
locks still refuse any output the two share).

Snakemake runs as a child, its output and exit status passed through. When Ctrl-C (SIGINT, which
the terminal sends to every process of the run) or SIGTERM (passed on to Snakemake) stops the run,
the last line says so and that rerunning resumes it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

LOCKS = Path(".snakemake/locks")


def is_snakemake(argv: list[str]) -> bool:
    """`snakemake ...`, `python .../bin/snakemake ...` or `python -m snakemake ...`."""
    names = [os.path.basename(arg) for arg in argv[:2]]
    return "snakemake" in names or argv[1:3] == ["-m", "snakemake"]


def is_job(argv: list[str]) -> bool:
    """`python -m lengthgen <stage> ...`: a job a Snakemake run started, which a SIGKILL to
    Snakemake alone leaves running."""
    return argv[1:3] == ["-m", "lengthgen"]


def live_processes(workdir: Path, match) -> list[int]:
    """Process ids of the live processes working in `workdir` whose command line `match`es."""
    workdir, pids = workdir.resolve(), []
    if not Path("/proc/self/cwd").exists():  # no /proc (macOS): any such process may be this run's
        ps = subprocess.run(["ps", "-Ao", "pid=,command="], capture_output=True, text=True).stdout
        return [int(line.split()[0]) for line in ps.splitlines() if match(line.split()[1:])]
    for proc in Path("/proc").glob("[0-9]*"):
        try:  # a zombie (killed, not yet reaped) has an empty command line: not alive
            argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
            if argv and match(argv) and Path(os.readlink(proc / "cwd")) == workdir:
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return sorted(pids)


def configfiles(argv: list[str], workdir: Path) -> frozenset[Path]:
    """The --configfile (--configfiles) paths of a Snakemake command line, resolved."""
    files, taking = set(), False
    for arg in argv[1:]:
        if arg in ("--configfile", "--configfiles"):
            taking = True
        elif arg.startswith("--configfile="):
            files.add(arg.split("=", 1)[1])
        elif arg.startswith("-"):
            taking = False
        elif taking:
            files.add(arg)
    return frozenset((workdir / f).resolve() for f in files)


def _argv(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def clear_stale_lock(command: list[str], workdir: Path) -> int:
    """0 when `command` may run: no lock, a stale one now removed, or live runs of other
    configurations only; 1 when a live run of the same configuration holds it."""
    if not (workdir / LOCKS).is_dir() or not any((workdir / LOCKS).iterdir()):
        return 0
    pids = live_processes(workdir, is_snakemake)
    if pids:
        mine = configfiles(command, workdir)
        same = [pid for pid in pids if configfiles(_argv(pid), workdir) == mine]
        if not same:
            return 0
        print(f"lengthgen: a run of this configuration (Snakemake, pid {', '.join(map(str, same))}) is already "
              f"running in {workdir}; wait for it to end, or stop it first", file=sys.stderr)
        return 1
    jobs = live_processes(workdir, is_job)
    if jobs:  # rerunning them now would have two processes write the same outputs
        print(f"lengthgen: a job of a killed run (pid {', '.join(map(str, jobs))}) is still running in {workdir}; "
              "wait for it to end, or stop it first", file=sys.stderr)
        return 1
    print("lengthgen: a killed run left Snakemake's lock behind and no Snakemake is running here; "
          "unlocking (snakemake --unlock) and going on", file=sys.stderr)
    done = subprocess.run([*command, "--unlock"], cwd=workdir, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"lengthgen: snakemake --unlock failed ({last})", file=sys.stderr)
    return done.returncode


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m lengthgen.support.unlock snakemake [ARGS...]", file=sys.stderr)
        return 2
    try:
        code = clear_stale_lock(argv, Path.cwd())
        return code or run(argv)
    except FileNotFoundError:
        print(f"lengthgen: error: {argv[0]}: command not found (is the virtual environment on PATH?)", file=sys.stderr)
        return 127


def run(argv: list[str]) -> int:
    """Snakemake's exit status; after an interrupt, one line that says a rerun resumes."""
    child, got = None, []

    def on_signal(signum, frame):
        got.append(signum)
        if signum != signal.SIGINT and child is not None:  # Ctrl-C reached Snakemake already
            child.send_signal(signum)

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        child = subprocess.Popen(argv)
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if got:
        print(f"lengthgen: run interrupted ({signal.Signals(got[0]).name}); rerun the same command to resume: "
              "finished jobs are kept and training resumes from its last checkpoint", file=sys.stderr)
    return 128 - code if code < 0 else code  # killed by a signal: the shell's status for it


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
