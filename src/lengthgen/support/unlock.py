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

Two runs of one configuration started together: the first holds a lock of its configuration
(`flock` on a file in .snakemake/, released by the kernel however the run ends) from before
Snakemake starts, so the second stops in the same one line, never on Snakemake's own lock error
(whose advice, --unlock, would break the live run).

Snakemake runs as a child in a process group of its own, its output and exit status passed
through. Ctrl-C (SIGINT), SIGTERM (what `make` passes on when it is stopped) and SIGHUP reach
this process alone; it interrupts Snakemake's group (Snakemake and its jobs) with SIGINT, so that
running jobs stop now rather than finish (Snakemake's own SIGTERM waits for them), waits for
Snakemake's shutdown with its output held back (the interrupted jobs' errors, which say nothing
new), ends what of the group is left, and prints one line, last: that a rerun resumes the run.
A second signal kills the group at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pty
import signal
import subprocess
import sys
import termios
import threading
from pathlib import Path

LOCKS = Path(".snakemake/locks")


def is_snakemake(argv: list[str]) -> bool:
    """`snakemake ...`, `python .../bin/snakemake ...` or `python -m snakemake ...`."""
    names = [os.path.basename(arg) for arg in argv[:2]]
    return "snakemake" in names or argv[1:3] == ["-m", "snakemake"]


def is_job(argv: list[str]) -> bool:
    """`python -m lengthgen <stage> ...`: a job a Snakemake run started, which a SIGKILL to
    Snakemake alone leaves running (not its warm-start server, which ends with its run)."""
    return argv[1:3] == ["-m", "lengthgen"] and argv[3:4] != ["warm-server"]


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


@contextlib.contextmanager
def claim(command: list[str], workdir: Path):
    """Yield whether this process now holds the run lock of `command`'s configuration (held until
    the block ends, or the process does); False when another run of it holds the lock."""
    key = hashlib.sha256("\0".join(sorted(map(str, configfiles(command, workdir)))).encode()).hexdigest()[:16]
    path = workdir / ".snakemake" / f"lengthgen-run-{key}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path, "a")  # noqa: SIM115 (held open for the block)
    except OSError:  # a folder this user cannot write: Snakemake, which must write there too, says so
        yield True
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def _same_configuration(command: list[str], workdir: Path) -> list[int]:
    """The live Snakemake processes in `workdir` that run `command`'s configuration."""
    mine = configfiles(command, workdir)
    return [pid for pid in live_processes(workdir, is_snakemake) if configfiles(_argv(pid), workdir) == mine]


def _already_running(pids: list[int], workdir: Path) -> int:
    which = f" (Snakemake, pid {', '.join(map(str, pids))})" if pids else ""
    print(f"lengthgen: a run of this configuration{which} is already running in {workdir}; wait for it to end, "
          "or stop it first", file=sys.stderr)
    return 1


def clear_stale_lock(command: list[str], workdir: Path) -> int:
    """0 when `command` may run: no lock, a stale one now removed, or live runs of other
    configurations only; 1 when a live run of the same configuration holds it."""
    if not (workdir / LOCKS).is_dir() or not any((workdir / LOCKS).iterdir()):
        return 0
    if live_processes(workdir, is_snakemake):
        same = _same_configuration(command, workdir)
        return _already_running(same, workdir) if same else 0
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
    workdir = Path.cwd()
    try:
        with claim(argv, workdir) as mine:
            if not mine:
                return _already_running(_same_configuration(argv, workdir), workdir)
            return clear_stale_lock(argv, workdir) or run(argv)
    except FileNotFoundError:
        print(f"lengthgen: error: {argv[0]}: command not found (is the virtual environment on PATH?)", file=sys.stderr)
        return 127


def run(argv: list[str]) -> int:
    """Snakemake's exit status; after an interrupt, one line that says a rerun resumes."""
    got, child = [], None

    def on_signal(signum, frame):
        got.append(signum)
        if child is not None:
            _interrupt(child, again=len(got) > 1)

    def on_suspend(signum, frame):  # Ctrl-Z, then `fg`: the terminal's signals reach this process alone
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTSTP if signum == signal.SIGTSTP else signal.SIGCONT)
        if signum == signal.SIGTSTP:
            os.kill(os.getpid(), signal.SIGSTOP)

    handlers = {signal.SIGINT: on_signal, signal.SIGTERM: on_signal, signal.SIGHUP: on_signal,
                signal.SIGTSTP: on_suspend, signal.SIGCONT: on_suspend}
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    relays = []
    try:
        streams = [_stream(fd) for fd in (1, 2)]
        child = subprocess.Popen(argv, process_group=0, stdout=streams[0][1], stderr=streams[1][1])
        for (read, write), fd in zip(streams, (1, 2), strict=True):
            os.close(write)
            relays.append(threading.Thread(target=_relay, args=(read, fd, got), daemon=True))
            relays[-1].start()
        if got:  # a signal before `child` was set
            _interrupt(child, again=False)
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if child is not None:
            with contextlib.suppress(ProcessLookupError):  # what of its group is left: a job, the warm server
                os.killpg(child.pid, signal.SIGTERM)
    for relay in relays:
        relay.join(timeout=10)
    if got:
        print(f"lengthgen: run interrupted ({signal.Signals(got[0]).name}); rerun the same command to resume: "
              "finished jobs are kept and training resumes from its last checkpoint", file=sys.stderr)
        return 128 + got[0]
    return 128 - code if code < 0 else code  # killed by a signal: the shell's status for it


def _interrupt(child: subprocess.Popen, again: bool) -> None:
    """Ctrl-C to Snakemake and its jobs (its process group): they stop now. Again: kill them."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL if again else signal.SIGINT)


def _stream(fd: int) -> tuple[int, int]:
    """(read end, write end) for the child's stream `fd`: a terminal of its own where this
    process writes to one (so that Snakemake still colours its output), else a pipe."""
    if not os.isatty(fd):
        return os.pipe()
    read, write = pty.openpty()
    attrs = termios.tcgetattr(write)
    attrs[1] &= ~termios.OPOST  # bytes as written: the real terminal does its own newline translation
    termios.tcsetattr(write, termios.TCSANOW, attrs)
    return read, write


def _relay(read: int, fd: int, interrupted: list) -> None:
    """Copy the child's stream to `fd` until it ends; after an interrupt, drop it (the shutdown's
    messages: each interrupted job's error, Snakemake's summary of them)."""
    while True:
        try:
            data = os.read(read, 65536)
        except OSError:  # a terminal's end when its last writer closes it (EIO)
            data = b""
        if not data:
            break
        while data and not interrupted:  # a write a signal interrupts may take part of the bytes
            try:
                data = data[os.write(fd, data):]
            except OSError:
                break
    os.close(read)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
