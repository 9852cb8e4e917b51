"""A real one-node SLURM cluster on this machine, for tests/test_slurm.py.

munged (private socket, fresh key), slurmctld and slurmd run as root in the foreground,
started as background processes and stopped by their PIDs. Configuration, state, spool,
logs and the munge socket live in a scratch directory of the test's own; the daemons listen
on free ports and everything is addressed at 127.0.0.1 only. See shared/SLURM.md for why each
setting is there.

The one global change is `/etc/slurm/slurm.conf`: inside every job the executor plugin clears
all `SLURM_*` variables (SLURM_CONF included) before its inner `srun`, so the configuration
must be readable at the default path. It is a symlink to the scratch configuration while the
cluster runs; whatever was there before is moved aside and put back on `stop()`. A file lock
keeps two test runs on one machine from sharing that path. A run killed before `stop()` leaves
its daemons, its munge directory and its link behind; `repair_unless_busy()`, called by conftest
at the start of every session, undoes all three when no other run holds the lock (and every
`start()` repairs the link).

Every process started here (daemons, and through them slurmstepd and the jobs) carries the
environment variable MARKER=<this cluster's id>; `stop()` ends any of them still alive by PID,
so nothing is left behind even when a job or a daemon misbehaved.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

SBIN = "/usr/sbin:/sbin:/usr/bin:/bin"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "srun")
MARKER = "LENGTHGEN_SLURM_TEST_CLUSTER"
KILL_WAIT = 30  # seconds from a cancel to SIGKILL: Slurm's default KillWait
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
BACKUP_CONF = SYSTEM_CONF.with_name("slurm.conf.lengthgen-test-backup")
LOCK_FILE = Path("/tmp/lengthgen-slurm-test.lock")
HEADER = "# one-node test cluster written by tests/slurm_cluster.py"
MUNGE_PARENT, MUNGE_PREFIX = Path("/tmp"), "lengthgen-munge-"  # + a random suffix


def _which(name: str) -> str | None:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:{SBIN}")


def unavailable() -> str | None:
    """Why a cluster cannot be stood up here (one line), or None when it can."""
    if os.name != "posix" or os.geteuid() != 0:
        return "the SLURM test needs root (it runs munged, slurmctld and slurmd)"
    missing = [n for n in (*DAEMONS, *CLIENTS) if _which(n) is None]
    if missing:
        return (
            f"SLURM is not installed (missing {', '.join(missing)}); "
            "apt-get install slurmctld slurmd slurm-client munge"
        )
    return None


def _present(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _left_by_a_test(path: Path) -> bool:
    """Whether `path` is a link to a test cluster's configuration (or a dangling link)."""
    if not path.is_symlink():
        return False
    try:
        with open(path) as f:
            return f.readline().rstrip("\n") == HEADER
    except OSError:  # dangling: its scratch directory is gone
        return True


def environ(pid: int) -> list[bytes]:
    """The NAME=value entries of process `pid`'s environment; [] if gone or not readable, and
    also for a moment after `subprocess.Popen` returns: the kernel lets Popen return once exec
    has begun, before it has set up the new program's environment (see `wait_marked`)."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def marked_pids(cluster_id: str | None = None) -> list[int]:
    """PIDs of live processes carrying the marker of cluster `cluster_id` (of any, if None)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if any(v.startswith(f"{MARKER}=".encode()) and (cluster_id is None or v == f"{MARKER}={cluster_id}".encode())
               for v in environ(int(entry.name))):
            pids.append(int(entry.name))
    return pids


def _describe(pid: int) -> str:
    """`pid (parent P, N s old): command line`, from /proc; what is readable of it."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks, uptime = int(fields[19]), float(Path("/proc/uptime").read_text().split()[0])
        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
        return f"{pid} (parent {fields[1]}, {age:.0f} s old): {cmdline}"
    except (OSError, IndexError, ValueError):
        return str(pid)


def wait_marked(n: int, cluster_id: str | None = None, timeout: float = 30.0) -> list[int]:
    """`marked_pids(cluster_id)` once it finds at least `n` processes. For tests that have just
    started marked processes: until a child is past exec, its environ reads empty."""
    deadline = time.monotonic() + timeout
    while len(pids := marked_pids(cluster_id)) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pids)} of {n} processes marked {MARKER}={cluster_id} seen in /proc "
                               f"within {timeout:.0f} s")
        time.sleep(0.02)
    return pids


def repair_system_conf() -> bool:
    """Undo what a run killed before its `stop()` left at SYSTEM_CONF (its link, and the
    original moved aside; or, killed between the two, the original alone moved aside); whether
    there was any. Call with the lock held. Why it matters: the link names a controller that is
    gone, and every `scontrol` then waits ~9 s for it; the SLURM plugin runs `scontrol show
    config` whenever Snakemake starts, so every Snakemake command would pay that."""
    found = False
    while True:
        if _left_by_a_test(SYSTEM_CONF):
            SYSTEM_CONF.unlink()
        elif _present(SYSTEM_CONF) or not _present(BACKUP_CONF):
            return found
        found = True
        if _present(BACKUP_CONF):  # the original, or a link of a run killed before this one
            BACKUP_CONF.rename(SYSTEM_CONF)


def repair_unless_busy() -> list[str]:
    """As root, when no other test run holds the lock: end the processes of a killed run's
    cluster, remove its munge directory and `repair_system_conf()`; what there was to undo."""
    if os.name != "posix" or os.geteuid() != 0:
        return []
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # a running cluster's link and daemons are not leftovers
        os.close(fd)
        return []
    try:
        orphans = marked_pids()  # no live run holds the lock, so these belong to a killed one
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        undone = [f"processes of its cluster ({len(orphans)})"] if orphans else []
        munge_dirs = list(MUNGE_PARENT.glob(f"{MUNGE_PREFIX}*"))
        for path in munge_dirs:
            shutil.rmtree(path, ignore_errors=True)
        undone += [f"munge directories ({len(munge_dirs)})"] if munge_dirs else []
        return undone + ([f"its link at {SYSTEM_CONF}"] if repair_system_conf() else [])
    finally:
        os.close(fd)  # releases the flock


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_line(slurmd: str) -> tuple[str, str]:
    """(node name, NodeName=... line) from `slurmd -C`, with memory a little below the real one."""
    out = subprocess.run([slurmd, "-C"], capture_output=True, text=True, timeout=30, check=True).stdout
    fields = dict(item.split("=", 1) for item in out.splitlines()[0].split())
    fields["RealMemory"] = str(int(int(fields["RealMemory"]) * 0.8))
    name = fields.pop("NodeName")
    line = " ".join([f"NodeName={name}", "NodeAddr=127.0.0.1", *(f"{k}={v}" for k, v in fields.items())])
    return name, line


class SlurmCluster:
    """Start with `start()`, always `stop()` (idempotent; safe after a failed start)."""

    def __init__(self, root: Path, lock_timeout: float = 240.0):
        self.root = Path(root)
        self.lock_timeout = lock_timeout
        self.id = secrets.token_hex(8)
        self.conf = self.root / "etc" / "slurm.conf"
        self.log_dir = self.root / "log"
        self.ctld_log = self.log_dir / "slurmctld.log"
        self.procs: dict[str, subprocess.Popen] = {}
        self._lock_fd: int | None = None
        self._linked = False
        self._made_etc_dir = False
        self._moved_aside = False
        self.munge_dir: Path | None = None
        self.cancelled: set[str] = set()  # jobs the test cancelled (cancel())
        self.contained: list[str] = []  # their processes killed as a cgroup would have

    # -- environment ---------------------------------------------------------------------

    def env(self, base: dict | None = None) -> dict:
        """`base` (default os.environ) with this cluster's SLURM_CONF and marker."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{env.get('PATH', '')}:{SBIN}"
        env["SLURM_CONF"] = str(self.conf)
        env[MARKER] = self.id
        for key in ("SLURM_JOB_ID", "SLURM_JOBID", "SBATCH_PARTITION", "SLURM_CONF_SERVER"):
            env.pop(key, None)
        return env

    def run(self, *cmd: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), env=self.env(), capture_output=True, text=True, timeout=timeout, check=check)

    def cancel(self, jobid: str) -> None:
        """`scancel` a job, then end what is left of it as a cluster with cgroup process tracking
        would. This cluster tracks a job's processes by parentage (proctrack/linuxproc: no cgroups
        here), and a process whose parent has already died is no longer found: in one loaded run
        of the SLURM tests the job step's Snakemake outlived its cancelled job by six minutes.
        So, KILL_WAIT seconds after the cancel (Slurm's KillWait), every process still carrying
        the job's SLURM_JOB_ID is killed, as the job's cgroup would be."""
        self.run("scancel", jobid)
        self.cancelled.add(jobid)
        threading.Thread(target=self._contain, args=(jobid, KILL_WAIT), daemon=True).start()

    def _contain(self, jobid: str, after: float) -> list[str]:
        """Kill the processes of cancelled job `jobid` still alive `after` seconds from now."""
        time.sleep(after)
        tag = f"SLURM_JOB_ID={jobid}".encode()
        killed = []
        for pid in self.marked_pids():
            if tag in environ(pid):
                what = _describe(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(what)
        self.contained += killed
        return killed

    # -- start ---------------------------------------------------------------------------

    def start(self) -> SlurmCluster:
        self._acquire_lock()
        for sub in ("etc", "log", "state", "spool", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # munged wants every directory above its socket searchable by all (pytest's tmp
        # directories are 0700) and the socket's own not writable by others: a 0711
        # directory straight under /tmp, removed by stop()
        munge_dir = self.munge_dir = Path(tempfile.mkdtemp(prefix=MUNGE_PREFIX, dir=MUNGE_PARENT))
        os.chmod(munge_dir, 0o711)
        key = munge_dir / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(1024))  # a fresh key, never the system's
        socket_path = munge_dir / "munge.socket"
        self._spawn("munged", [
            _which("munged"), "--foreground", f"--socket={socket_path}", f"--key-file={key}",
            f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={self.log_dir / 'munged.log'}",
            f"--seed-file={munge_dir / 'munged.seed'}", "--origin=127.0.0.1", "--num-threads=2",
        ])
        self._wait(lambda: socket_path.exists(), 15, "munged did not create its socket")

        name, node = _node_line(_which("slurmd"))
        self.node = name
        (self.root / "etc" / "plugstack.conf").write_text("")
        self.conf.write_text("\n".join([
            HEADER,
            "ClusterName=lengthgen-test",
            f"SlurmctldHost={name}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={socket_path}",
            "MailProg=/bin/true",
            "ReturnToService=2",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            f"JobCompType=jobcomp/filetxt\nJobCompLoc={self.log_dir / 'jobcomp.txt'}",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SchedulerType=sched/backfill",
            # finished jobs stay visible to squeue/scontrol for an hour: the plugin's squeue
            # status checks need >= 3x the first check delay; the test reads them at the end
            "MinJobAge=3600",
            "MaxJobCount=10000",
            f"PlugStackConfig={self.root / 'etc' / 'plugstack.conf'}",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'run' / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.ctld_log}",
            f"SlurmdLogFile={self.log_dir / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            node,
            # without DefMemPerCPU a job that asks for no memory takes the whole node
            f"PartitionName=test Nodes={name} Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=500",
            "",
        ]))
        self._link_system_conf()
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", name])
        self._wait(self._node_idle, 60, "the node did not become idle")
        return self

    def _spawn(self, name: str, cmd: list[str]) -> None:
        out = open(self.log_dir / f"{name}.out", "wb")  # noqa: SIM115 (closed with the process)
        self.procs[name] = subprocess.Popen(
            cmd, env=self.env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}: {self.tail(name)}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{what} within {timeout:.0f} s: {self.tail('slurmctld')} {self.tail('slurmd')}")

    def _node_idle(self) -> bool:
        done = self.run("sinfo", "-h", "-o", "%T", timeout=10, check=False)
        return done.returncode == 0 and done.stdout.strip() == "idle"

    def tail(self, name: str, n: int = 1500) -> str:
        for path in (self.log_dir / f"{name}.log", self.log_dir / f"{name}.out"):
            if path.exists() and path.stat().st_size:
                return path.read_text(errors="replace")[-n:]
        return ""

    # -- the global config path and the lock ---------------------------------------------

    def _acquire_lock(self) -> None:
        self._lock_fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self._lock_fd)
                    self._lock_fd = None
                    raise TimeoutError(f"another SLURM test held {LOCK_FILE} for {self.lock_timeout:.0f} s") from None
                time.sleep(1)

    def _link_system_conf(self) -> None:
        repair_system_conf()
        if not SYSTEM_CONF.parent.exists():
            SYSTEM_CONF.parent.mkdir(parents=True)
            self._made_etc_dir = True
        if SYSTEM_CONF.exists() or SYSTEM_CONF.is_symlink():
            SYSTEM_CONF.rename(BACKUP_CONF)
            self._moved_aside = True
        os.symlink(self.conf, SYSTEM_CONF)
        self._linked = True

    def _restore_system_conf(self) -> None:
        if self._linked:
            if SYSTEM_CONF.is_symlink() and os.readlink(SYSTEM_CONF) == str(self.conf):
                SYSTEM_CONF.unlink()
            self._linked = False
        if self._moved_aside:
            BACKUP_CONF.rename(SYSTEM_CONF)
            self._moved_aside = False
        if self._made_etc_dir:
            try:
                SYSTEM_CONF.parent.rmdir()
            except OSError:
                pass
            self._made_etc_dir = False

    # -- stop ----------------------------------------------------------------------------

    def marked_pids(self) -> list[int]:
        """PIDs of live processes carrying this cluster's marker (daemons, slurmstepd, jobs)."""
        return marked_pids(self.id)

    def stop(self) -> list[str]:
        """Cancel jobs, stop the daemons by PID, end anything left; return what it had to kill
        (PID, parent, age and command line of each)."""
        try:
            if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
                self.run("scancel", "--full", "--user=root", timeout=15, check=False)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    q = self.run("squeue", "-h", "-o", "%i", timeout=10, check=False)
                    if q.returncode != 0 or not q.stdout.strip():
                        break
                    time.sleep(0.5)
        except (subprocess.SubprocessError, OSError):
            pass
        for name in reversed(DAEMONS):  # slurmd, slurmctld, then munged
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for jobid in sorted(self.cancelled):  # what a cgroup would have ended (cancel())
            self._contain(jobid, 0)
        # A job's slurmstepd ends shortly after slurmd: on a loaded machine (the other test
        # worker busy) that takes seconds. Only what outlives the wait counts as left over.
        deadline = time.monotonic() + 20
        while self.marked_pids() and time.monotonic() < deadline:
            time.sleep(0.25)
        killed = []
        for _ in range(3):
            left = self.marked_pids()
            if not left:
                break
            for pid in left:
                what = _describe(pid)  # before the kill: which process it was, for the test's message
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(what)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        self._restore_system_conf()
        if self.munge_dir is not None:
            shutil.rmtree(self.munge_dir, ignore_errors=True)
            self.munge_dir = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
        return killed
