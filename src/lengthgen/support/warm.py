"""Warm start: local jobs fork from one process that has already imported torch.

`import torch` takes seconds of every training and sweep job, a large share of a short job's
time (docs/performance.md has the measurement). For a local Snakemake run the
workflow starts one server (`start`, from `onstart`); each `python -m lengthgen ...` job then
sends its argv, working directory, environment and standard streams over a Unix socket, and
a fork of the server runs the command with them. lengthgen's own modules are imported after
the fork, from disk, so an edited src/ is always what runs; the server holds only torch (and
numpy) and never runs a torch op, so no thread pool, RNG or CUDA state is inherited. Not pandas
or pyarrow: they import quickly, and pyarrow starts an allocator thread, which a fork does not copy.

Nothing changes for the job's caller: the exit status and stdout/stderr (the log files) are
the worker's, and a job ended by any signal takes its worker with it. A job runs cold (in its
own process, as without a server) whenever the server is absent or differs from it: another
interpreter, sys.path or start-up environment (conda environments, PYTHONHASHSEED, OMP_*), or
another cgroup (a SLURM job, which must not run inside the server's).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ENV = "LENGTHGEN_WARM"  # the server's socket path; jobs run warm when it is set
PREFIX = "lengthgen-warm-"  # of the server's folder in the temporary directory
SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path on Linux (sun_path, less its NUL)
PRELOAD = ("torch",)
_HEADER = struct.Struct(">I")


def _cgroup() -> str:
    try:
        return Path("/proc/self/cgroup").read_text()
    except OSError:
        return ""


# Variables read when the interpreter or torch's libraries start (hash seed, thread counts, ...):
# a job that sets them differently must start its own interpreter.
_START_ENV = ("PYTHON", "OMP_", "MKL_", "KMP_", "OPENBLAS", "TORCH", "PYTORCH", "LD_")


def _identity() -> dict:
    """What server and job must share for a fork of one to stand in for the other."""
    return {"prefix": sys.prefix, "executable": os.path.realpath(sys.executable), "path": sys.path,
            "cgroup": _cgroup(), "environment": {k: v for k, v in os.environ.items() if k.startswith(_START_ENV)}}


# -- the job's side -------------------------------------------------------------------------


def forward(argv: list[str]) -> int | None:
    """Run `python -m lengthgen argv` in a fork of the server; its exit status, or None when
    there is no server to use (the caller then runs the command itself)."""
    path = os.environ.get(ENV)
    if not path:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    replies = conn.makefile("rb")  # one JSON object per line: the worker's pid, then its status
    try:
        conn.connect(path)
        umask = os.umask(0)
        os.umask(umask)
        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask, **_identity()}
        payload = json.dumps(request).encode()
        socket.send_fds(conn, [_HEADER.pack(len(payload))], [0, 1, 2])
        conn.sendall(payload)
    except OSError:
        conn.close()
        return None
    started = _reply(replies)
    if "pid" not in started:  # refused (not the same environment), or no worker: run cold
        conn.close()
        return None
    # A signal that ends this process ends the worker too: it watches this end of the socket.
    # Ctrl-C ends the wait in one line, not a KeyboardInterrupt traceback in the job's log;
    # SIGTERM ends this process by the signal, silently, as it ends a cold job.
    handler = signal.signal(signal.SIGINT, _interrupt)
    try:
        status = _reply(replies)
    except _Interrupted as sig:
        conn.close()
        return interrupted(sig.args[0])
    finally:
        signal.signal(signal.SIGINT, handler)
    if "exit" not in status:
        print(f"lengthgen: error: the job's warm-start worker (pid {started['pid']}) ended without an exit status "
              "(killed?); rerun the same command to redo this job", file=sys.stderr)
        return 1
    return status["exit"]


class _Interrupted(Exception):
    pass


def _interrupt(signum, frame) -> None:
    raise _Interrupted(signum)


def interrupted(signum: int) -> int:
    """Say in one line that the job was stopped and a rerun resumes it; its exit status."""
    print(f"lengthgen: interrupted ({signal.Signals(signum).name}); rerunning the workflow resumes this job",
          file=sys.stderr, flush=True)
    return 128 + signum


def _reply(replies) -> dict:
    """The next line from the server or worker, or {} if the connection ended without one."""
    try:
        line = replies.readline()
        return json.loads(line) if line.endswith(b"\n") else {}
    except (OSError, ValueError):
        return {}


# -- the server's side ----------------------------------------------------------------------


def serve(path: str, parent: int, entry: Callable[[list[str]], int]) -> None:
    """Accept jobs on the socket at `path` until the `parent` process (Snakemake) exits, or a
    signal ends the server; then remove the socket's folder (`stop` may never run). A worker
    runs a job's argv with `entry` (the command line's main, handed in by it: this module
    imports no lengthgen module, so that the command line may import it)."""
    # SIGTERM (what `stop` sends) and SIGHUP unwind through the `finally` instead of ending the
    # process where it stands; a fork resets them before it runs a job (`_become`). Ctrl-C
    # reaches the server with the rest of the run: Snakemake's shutdown stops it, untorn.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _serve(path, parent, entry)
    finally:
        shutil.rmtree(Path(path).parent, ignore_errors=True)


def _exit_on_signal(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _serve(path: str, parent: int, entry) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)  # bound before the imports: an early job waits for them, not imports too
    started = time.perf_counter()
    for name in PRELOAD:
        __import__(name)
    _log(f"serving {path}; preloaded {', '.join(PRELOAD)} in {time.perf_counter() - started:.1f} s")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    listener.settimeout(1.0)
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(10.0)  # a request is sent at once; a stalled job must not stall the rest
        _handle(listener, conn, entry)
    _log("parent exited; stopping")
    listener.close()


def _handle(listener: socket.socket, conn: socket.socket, entry) -> None:
    """Fork a worker for the job on `conn`, or tell it to run cold."""
    request, fds = _read_request(conn)
    command = " ".join((request or {}).get("argv", [])[:1])
    differ = [key for key, value in _identity().items() if request and request.get(key) != value]
    pid = None
    if request and not differ and len(fds) == 3:
        try:
            pid = os.fork()
        except OSError as err:
            differ = [f"fork ({err})"]
    if pid == 0:
        listener.close()
        _worker(conn, request, fds, entry)  # never returns
    if pid:
        _log(f"{command}: worker {pid}")
    elif request:
        _log(f"{command}: runs cold ({', '.join(differ) or 'streams'} differ)")
        with contextlib.suppress(OSError):
            conn.sendall(b'{"refused": true}\n')
    for fd in fds:
        os.close(fd)
    conn.close()


def _read_request(conn: socket.socket) -> tuple[dict | None, list[int]]:
    """The job's request and its three stream descriptors, or (None, fds) if it broke off."""
    fds = []
    try:
        header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
        (size,) = _HEADER.unpack(header)
        payload = b""
        while len(payload) < size:
            chunk = conn.recv(size - len(payload))
            if not chunk:
                raise ConnectionError("the job closed the socket mid-request")
            payload += chunk
        return json.loads(payload), fds
    except (OSError, ValueError, struct.error) as err:
        _log(f"bad request ({err})")
        return None, fds


def _worker(conn: socket.socket, request: dict, fds: list[int], entry) -> None:
    """In the fork: become the job, run it, report its status, exit."""
    code = 1
    try:
        _become(request, fds)
        conn.settimeout(None)
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        threading.Thread(target=_exit_with_job, args=(conn,), daemon=True).start()
        code = _run(entry, request["argv"])
        conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)  # never unwind into the server's loop


def _become(request: dict, fds: list[int]) -> None:
    """Take the job's streams, directory, umask, environment and argv."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    sys.stdin, sys.stdout, sys.stderr = (open(fd, mode, closefd=False, buffering=1 if fd else -1)
                                         for fd, mode in ((0, "r"), (1, "w"), (2, "w")))
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)  # a signal the job passes on ends the worker
    _name_worker(request["argv"])  # before the environment changes: setproctitle finds argv's memory beside it
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(ENV)  # the job itself runs here; anything it starts runs cold
    sys.argv = ["lengthgen", *request["argv"]]
    for name in [m for m in sys.modules if m == "lengthgen" or m.startswith("lengthgen.")]:
        del sys.modules[name]  # the server's copy may be older than src/: import it afresh


def _name_worker(argv: list[str]) -> None:
    """Show the worker as the job it runs (`ps`, `pgrep -a`, `top`), not with the server's command
    line, which a fork keeps: a user who kills a process should know which one it is."""
    outputs = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in ("--out", "--out-dir", "--csv")]
    title = f"lengthgen worker: {argv[0] if argv else '?'} {' '.join(outputs[:1])} (warm start, server {os.getppid()})"
    try:
        import setproctitle  # the command line; without it, the 15-character name alone
    except ImportError:
        with contextlib.suppress(OSError):
            Path("/proc/self/comm").write_text("lengthgen-job")
        return
    setproctitle.setproctitle(" ".join(title.split()))


def _run(entry, argv: list[str]) -> int:
    """`python -m lengthgen argv` in this process: the exit status it would have."""
    try:
        code = entry(argv)
    except SystemExit as exit_:  # as the interpreter maps it to a status
        code = 0 if exit_.code is None else exit_.code
        if not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    return code


def _exit_with_job(conn: socket.socket) -> None:
    """The job sends nothing after its request: end of stream means it was killed."""
    while conn.recv(1):
        pass
    os._exit(1)


def _log(msg: str) -> None:
    print(f"lengthgen warm start [{os.getpid()}]: {msg}", file=sys.stderr, flush=True)


# -- the workflow's side ----------------------------------------------------------------------


# What Snakemake's shell sets for a job of `threads` threads, before the job's interpreter starts.
THREAD_ENV = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def start(log_path, threads: int) -> tuple[subprocess.Popen, Path] | None:
    """Start a server for this process's jobs of `threads` threads and point them at it (ENV);
    see `stop`. None (and jobs run cold) when it cannot start: a speed-up must never fail a run.
    First removes the folders that killed runs left (`remove_stale`)."""
    removed = remove_stale()
    if removed:
        print(f"lengthgen: removed {len(removed)} warm-start folder(s) that killed runs left in "
              f"{removed[0].parent}", file=sys.stderr)
    root = Path(tempfile.gettempdir())
    longest = len(os.fsencode(root / f"{PREFIX}{os.getpid()}-{'x' * 8}" / "socket"))  # mkdtemp adds 8
    if longest > SOCKET_PATH_MAX:
        print(f"lengthgen: warm start off (a socket in {root} would need a {longest}-byte path, over the "
              f"{SOCKET_PATH_MAX} a Unix socket takes; set TMPDIR to a shorter folder); every job imports "
              "torch itself", file=sys.stderr)
        return None
    # 0700: this user's jobs only. The name holds this process's pid, the server.pid file the
    # server's: a folder is stale once both are gone.
    directory = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    python = shutil.which("python") or sys.executable  # the interpreter the jobs' `python` is
    try:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a") as log:
            argv = [python, "-m", "lengthgen", "warm-server", str(directory / "socket"), str(os.getpid())]
            server = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                      env={**{k: v for k, v in os.environ.items() if k != ENV},
                                           **dict.fromkeys(THREAD_ENV, str(threads))})
    except OSError as err:
        print(f"lengthgen: warm start off ({err}); every job imports torch itself", file=sys.stderr)
        shutil.rmtree(directory, ignore_errors=True)
        return None
    (directory / "server.pid").write_text(f"{server.pid}\n")
    os.environ[ENV] = str(directory / "socket")
    return server, directory


def wait_ready(server: subprocess.Popen, log_path, timeout_s: float = 120.0) -> None:
    """Block until `server` (from `start`) has made its imports. The workflow never waits (an
    early job queues on the socket); a measurement of warm jobs must. Only this server's own
    line counts (the log is appended to by every server), and a server that dies ends the wait."""
    log, deadline = Path(log_path), time.monotonic() + timeout_s
    ready = f"[{server.pid}]: serving "
    while True:
        text = log.read_text() if log.exists() else ""
        if any(ready in line and "preloaded" in line for line in text.splitlines()):
            return
        status = server.poll()
        if status is not None or time.monotonic() > deadline:
            what = f"exited with status {status}" if status is not None else f"was not ready after {timeout_s:g} s"
            last = text.strip().splitlines()[-1] if text.strip() else "(empty)"
            raise RuntimeError(f"{log}: the warm-start server (pid {server.pid}) {what}; last line: {last}")
        time.sleep(0.05)


# A folder that records no process (a server that wrote no server.pid) is stale when no server answers
# on its socket; without a socket, once it is this old (a server binds its socket at once).
LEGACY_GRACE_S = 600


def remove_stale(tmp=None) -> list[Path]:
    """Remove this user's warm-start folders in the temporary directory whose processes are all
    gone: those of a run killed with its server (SIGKILL to the process group, an out-of-memory
    kill), which nothing else removes. A live run's folder is kept. The removed folders."""
    removed = []
    for directory in sorted(Path(tmp or tempfile.gettempdir()).glob(f"{PREFIX}*")):
        try:
            mine = directory.is_dir() and not directory.is_symlink() and directory.stat().st_uid == os.getuid()
            stale = mine and _stale(directory)
        except OSError:  # removed meanwhile
            continue
        if stale:
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed


def _stale(directory: Path) -> bool:
    pids = _owners(directory)
    if pids:
        return not any(map(_alive, pids))
    path = directory / "socket"  # a folder without server.pid: does a server listen on its socket?
    if path.exists():
        return not _listening(path)
    return time.time() - directory.stat().st_mtime > LEGACY_GRACE_S


def _listening(path: Path) -> bool:
    """Whether a socket is bound at `path`: looked up in /proc/net/unix, so that a live server
    sees no connection; without it (macOS), by connecting."""
    try:
        table = Path("/proc/net/unix").read_text()
    except OSError:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect(str(path))
            return True
        except OSError:
            return False
    return any(line.endswith(f" {path}") for line in table.splitlines())


def _owners(directory: Path) -> list[int]:
    """The run that made the folder (pid in its name) and its server (server.pid)."""
    pids = []
    creator = directory.name.removeprefix(PREFIX).split("-")[0]
    if "-" in directory.name.removeprefix(PREFIX) and creator.isdigit():
        pids.append(int(creator))
    with contextlib.suppress(OSError, ValueError):
        pids.append(int((directory / "server.pid").read_text()))
    return pids


def _alive(pid: int) -> bool:
    """Whether `pid` runs. A zombie has ended (its parent, where nothing reaps orphans, may never
    wait for it); a pid reused by another process counts as alive, which only keeps a folder."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process has that pid now
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):  # no /proc (macOS): os.kill said it exists
        return True


def stop(server: subprocess.Popen, directory: Path) -> None:
    os.environ.pop(ENV, None)
    server.terminate()
    server.wait()
    shutil.rmtree(directory, ignore_errors=True)

