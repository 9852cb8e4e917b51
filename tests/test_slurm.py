"""The workflow on a real one-node SLURM cluster through profiles/slurm.

The main test stands up munged, slurmctld and slurmd on this machine (tests/slurm_cluster.py),
runs the smoke grid with `--profile profiles/slurm` plus a test profile, cancels one training
job mid-run with `scancel` and checks that Snakemake's retry resumes it from its checkpoint and
completes it; that every non-local job ran inside a SLURM batch job (the controller's log,
`scontrol show job` and each job's own log agree) while the aggregation rules ran locally; and
that results/tables/ is byte-identical to a local run of the same configuration. It needs root
and the Debian packages slurmctld, slurmd, slurm-client and munge, and skips with one line
otherwise. A quick dry run checks the profile's resource expressions without any SLURM, and
three tests check that what a run killed mid-test leaves (its processes, its munge directory,
its link at /etc/slurm/slurm.conf) is undone, and only that.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import slurm_cluster
import yaml
from conftest import SMOKE_RESULTS, VENV_BIN, copy_workflow, venv_env
from slurm_cluster import HEADER, SlurmCluster, unavailable

LOCAL_RULES = {"aggregate", "training_table", "claims", "figure", "provenance", "record", "all"}
# One training job of this task and scheme (whichever seed first runs with a checkpoint) is
# cancelled mid-run; the task trains longer than in smoke.yaml (see _test_config).
VICTIM_TASK, VICTIM_SCHEME = "smoke_k2", "alibi"
CHECKPOINT = SMOKE_RESULTS + "/checkpoints/{task}/{scheme}/seed{seed}/last.pt"
TRAIN_LOG = SMOKE_RESULTS + "/logs/train/{task}/{scheme}/seed{seed}.log"


# Test-only settings over profiles/slurm (a later --profile wins key by key).
TEST_PROFILE = {
    "slurm-init-seconds-before-status-checks": 2,  # first status check after 2 s, not 40 s
    "slurm-status-command": "squeue",  # no accounting daemon here; MinJobAge keeps jobs visible
    "slurm-keep-successful-logs": True,  # the test reads every job's log
    "slurm-delete-logfiles-older-than": 0,
    # two sweeps per SLURM job, side by side on the node's 2 CPUs: short group jobs that
    # finish one after another keep the plugin's status checks frequent
    "group-components": {"sweeps": 2},
}


def _comment(task, scheme, seed) -> str:
    """The plugin's `sbatch --comment` for a training job."""
    return f"rule_train_wildcards_{task}_{scheme}_{seed}"


def _test_config(workdir: Path) -> Path:
    """config/smoke.yaml with the victim's task trained long enough (and without early stop) to
    be cancelled between its first checkpoint and its end. Both runs use this file. Its E1
    tasks only and no attention stage: this test is about SLURM, and E2/E3 decoding, E4 and the
    attention stage run in test_workflow."""
    cfg = yaml.safe_load((workdir / "config/smoke.yaml").read_text())
    cfg["tasks"] = [task for task in cfg["tasks"] if task["kind"] == "sparse_parity"]
    cfg["language"] = None
    cfg["attention"] = None
    cfg["seeds"] = [0]  # three cells: two sweep groups (of 2 and 1) and one retried training job
    for task in cfg["tasks"]:
        if task["name"] == VICTIM_TASK:
            task["train"] = {"max_steps": 400, "checkpoint_every": 50, "early_stop": {"patience": 0}}
    path = workdir / "config/slurm_test.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _expected_cluster_jobs(config_path: Path) -> set[tuple[str, str]]:
    """(rule, wildcards) of every non-local job of the grid, as Snakemake prints them."""
    cfg = yaml.safe_load(config_path.read_text())
    own_test = cfg.get("test_sets", "per_seed") == "per_seed"  # each seed's own test draw
    own_train = cfg.get("train_sets", "per_seed") == "per_seed"  # and training set
    # the attention stage runs unless the config turns it off (attention: null)
    cell_rules = ("train", "length_sweep") + (("attention",) if cfg.get("attention", {}) is not None else ())
    jobs = set()
    for task in cfg["tasks"]:
        splits = [f"train-seed{s}" for s in cfg["seeds"]] if own_train else ["train"]
        splits += [f"test-seed{s}" for s in cfg["seeds"]] if own_test else ["test"]
        for split in splits:
            jobs.add(("generate_dataset", f"task={task['name']}, split={split}"))
        for scheme in task["schemes"]:
            for seed in cfg["seeds"]:
                for rule in cell_rules:
                    jobs.add((rule, f"task={task['name']}, scheme={scheme}, seed={seed}"))
    return jobs


def _executed_jobs(text: str, local: bool) -> set[tuple[str, str]]:
    """(rule, wildcards) of the `rule X:` (or, with local, `localrule X:`) blocks of a log."""
    head = "localrule" if local else "rule"
    jobs, rule = set(), None
    for line in text.splitlines():
        stripped = line.strip()
        if m := re.fullmatch(r"(localrule|rule) (\w+):", stripped):
            rule = m.group(2) if m.group(1) == head else None
            if rule:
                jobs.add((rule, ""))
        elif rule and (m := re.fullmatch(r"wildcards: (.*)", stripped)):
            jobs.discard((rule, ""))
            jobs.add((rule, m.group(1)))
            rule = None
    return jobs


def _minutes(limit: str) -> int:
    """A SLURM time limit ([D-]HH:MM:SS) in minutes."""
    days, _, hms = limit.rpartition("-")
    h, m, _s = (int(x) for x in hms.split(":"))
    return int(days or 0) * 1440 + h * 60 + m


def _scontrol_jobs(cluster: SlurmCluster) -> dict[str, dict[str, str]]:
    out = cluster.run("scontrol", "-o", "show", "job").stdout
    jobs = {}
    for line in out.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobId" in fields:
            jobs[fields["JobId"]] = fields
    return jobs


def _squeue(cluster: SlurmCluster) -> list[tuple[str, str, str]]:
    done = cluster.run("squeue", "-h", "-t", "all", "-o", "%i|%T|%k", timeout=10, check=False)
    return [tuple(line.split("|", 2)) for line in done.stdout.splitlines() if line.count("|") == 2]


def _run_on_cluster(cluster: SlurmCluster, workdir: Path, config: Path, timeout: float) -> tuple[int, str, dict]:
    """Run the workflow through SLURM; scancel the first training job of the victim task that
    runs and has written a checkpoint (the earliest one, so that its retry does not lengthen
    the run). Returns (exit code, Snakemake's output, {"jobid", "seed"} of the cancelled job)."""
    seeds = yaml.safe_load(config.read_text())["seeds"]
    cell = {"task": VICTIM_TASK, "scheme": VICTIM_SCHEME}
    profile = workdir / "profiles/slurm_test"
    profile.mkdir()
    (profile / "config.yaml").write_text(yaml.safe_dump(TEST_PROFILE))
    out_path = workdir / "snakemake.out"
    cancelled = {}
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            [str(VENV_BIN / "snakemake"), "--profile", "profiles/slurm", "--profile", "profiles/slurm_test",
             "--configfile", str(config.relative_to(workdir))],
            cwd=workdir, env=cluster.env(venv_env()), stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.send_signal(signal.SIGINT)  # on SIGTERM Snakemake would wait for running jobs
                proc.wait(timeout=30)
                break
            with_checkpoint = [s for s in seeds if (workdir / CHECKPOINT.format(seed=s, **cell)).exists()]
            if not cancelled and with_checkpoint:
                running = {comment: jid for jid, state, comment in _squeue(cluster) if state == "RUNNING"}
                for seed in with_checkpoint:
                    if jid := running.get(_comment(seed=seed, **cell)):
                        cluster.cancel(jid)
                        cancelled = {"jobid": jid, "seed": seed}
                        break
            time.sleep(0.25)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out_path.read_text(errors="replace"), cancelled


@pytest.fixture
def cluster(tmp_path):
    """A running one-node cluster; stopped (daemons by PID, /etc/slurm/slurm.conf restored)
    however the test ends, SIGTERM included."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    cluster = SlurmCluster(tmp_path / "slurm")
    try:
        try:
            cluster.start()
        except TimeoutError as err:  # another run holds the cluster lock
            pytest.skip(str(err))
        yield cluster
    finally:
        leftovers = cluster.stop()
        signal.signal(signal.SIGTERM, previous)
    assert not cluster.marked_pids(), "processes of the test cluster outlived it"
    assert not leftovers, f"had to kill leftover processes of the test cluster: {leftovers}"


def _system_paths(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """SYSTEM_CONF and BACKUP_CONF moved into tmp_path."""
    system = tmp_path / "etc" / "slurm.conf"
    system.parent.mkdir()
    backup = system.with_name("slurm.conf.backup")
    monkeypatch.setattr(slurm_cluster, "SYSTEM_CONF", system)
    monkeypatch.setattr(slurm_cluster, "BACKUP_CONF", backup)
    return system, backup


@pytest.mark.parametrize("moved_aside", [None, "site", "leftover", "site, not yet linked"])
def test_a_killed_runs_configuration_link_is_undone(tmp_path, monkeypatch, moved_aside):
    """A run killed before stop() leaves a link to its configuration (whose controller is gone)
    and maybe the site's file moved aside, itself a leftover when runs were killed twice; or,
    killed between the two, the site's file moved aside and no link."""
    system, backup = _system_paths(tmp_path, monkeypatch)
    old = tmp_path / "old-run" / "slurm.conf"
    old.parent.mkdir()
    old.write_text(f"{HEADER}\nClusterName=lengthgen-test\n")
    if moved_aside != "site, not yet linked":
        system.symlink_to(old)
    if moved_aside and moved_aside.startswith("site"):
        backup.write_text("ClusterName=site\n")
    elif moved_aside == "leftover":
        backup.symlink_to(tmp_path / "gone" / "slurm.conf")  # its scratch directory was removed
    assert slurm_cluster.repair_system_conf()
    assert not backup.exists() and not backup.is_symlink()
    if moved_aside and moved_aside.startswith("site"):
        assert not system.is_symlink() and system.read_text() == "ClusterName=site\n"
    else:
        assert not system.exists() and not system.is_symlink()


@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_site_configuration_is_not_a_leftover(tmp_path, monkeypatch, kind):
    system, backup = _system_paths(tmp_path, monkeypatch)
    site = tmp_path / "site.conf"
    site.write_text("ClusterName=site\n")
    if kind == "file":
        system.write_text(site.read_text())
    else:
        system.symlink_to(site)
    assert not slurm_cluster.repair_system_conf()
    assert system.is_symlink() == (kind == "link") and system.read_text() == "ClusterName=site\n"
    assert not backup.exists()


@pytest.mark.subprocess
def test_a_killed_runs_processes_and_files_are_removed_when_no_run_holds_the_lock(tmp_path, monkeypatch):
    """What conftest does at the start of a session, on stand-ins: the marker, lock, munge
    directory and configuration paths are the test's own, so a real cluster is never touched."""
    if os.geteuid() != 0:
        pytest.skip("repair_unless_busy acts as root only")
    system, _ = _system_paths(tmp_path, monkeypatch)
    real_marker, real_lock = slurm_cluster.MARKER, slurm_cluster.LOCK_FILE
    # this process's own: the same test in another session on this machine must not end ours
    monkeypatch.setattr(slurm_cluster, "MARKER", f"{real_marker}_UNDER_TEST_{os.getpid()}")
    monkeypatch.setattr(slurm_cluster, "LOCK_FILE", tmp_path / "cluster.lock")
    monkeypatch.setattr(slurm_cluster, "MUNGE_PARENT", tmp_path)
    (tmp_path / f"{slurm_cluster.MUNGE_PREFIX}abc").mkdir()
    (tmp_path / "old-run.conf").write_text(f"{HEADER}\n")
    system.symlink_to(tmp_path / "old-run.conf")
    # The bystander stands for a live run's process, so it holds the real lock as that run
    # would: else another session's start (conftest's repair_unless_busy) rightly ends it.
    live = os.open(real_lock, os.O_RDWR | os.O_CREAT, 0o600)
    with contextlib.suppress(BlockingIOError):  # held by a live run, which protects it as well
        fcntl.flock(live, fcntl.LOCK_EX | fcntl.LOCK_NB)
    marked = [subprocess.Popen(["sleep", "60"], env={**os.environ, slurm_cluster.MARKER: cluster})
              for cluster in ("killed", "killed")]
    bystander = subprocess.Popen(["sleep", "60"], env={**os.environ, real_marker: "other"})
    try:
        # Popen returns before a child's environ is readable: scan only once all three show it
        assert sorted(slurm_cluster.wait_marked(2, "killed")) == sorted(p.pid for p in marked)
        deadline = time.monotonic() + 30
        while f"{real_marker}=other".encode() not in slurm_cluster.environ(bystander.pid):
            assert time.monotonic() < deadline, "the bystander's marker did not show in /proc within 30 s"
            time.sleep(0.02)
        held = os.open(tmp_path / "cluster.lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(held, fcntl.LOCK_EX)  # another run holds the lock: its cluster is alive
        assert slurm_cluster.repair_unless_busy() == [] and system.is_symlink()
        os.close(held)
        undone = slurm_cluster.repair_unless_busy()
        assert undone == ["processes of its cluster (2)", "munge directories (1)", f"its link at {system}"]
        assert [p.wait(timeout=10) for p in marked] == [-signal.SIGKILL] * 2
        assert bystander.poll() is None and not system.exists()
        assert not list(tmp_path.glob(f"{slurm_cluster.MUNGE_PREFIX}*"))
    finally:
        for proc in (*marked, bystander):
            proc.kill()
            proc.wait()
        os.close(live)


@pytest.mark.workflow
def test_slurm_profile_resources_by_dry_run(workflow_copy):
    """The profile's expressions as Snakemake evaluates them: a GPU only with device: cuda."""

    def planned(*extra):
        env = venv_env()
        done = subprocess.run(
            [str(VENV_BIN / "snakemake"), "-n", "--profile", "profiles/slurm", "--configfile", "config/smoke.yaml",
             *extra],
            cwd=workflow_copy, env=env, capture_output=True, text=True, timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        text, rule, out = done.stdout + done.stderr, None, {}
        for line in text.splitlines():
            if m := re.fullmatch(r"(?:local)?rule (\w+):", line.strip()):
                rule = m.group(1)
            elif rule and (m := re.fullmatch(r"resources: (.*)", line.strip())):
                out.setdefault(rule, dict(kv.split("=", 1) for kv in m.group(1).split(", ")))
        return out

    cpu = planned()
    assert cpu["train"]["runtime"] == "240" and cpu["train"]["mem_mb"] == "8000" and cpu["train"]["gpu"] == "0"
    assert cpu["length_sweep"]["runtime"] == "30" and cpu["length_sweep"]["gpu"] == "0"
    assert cpu["generate_dataset"]["runtime"] == "30" and "gpu" not in cpu["generate_dataset"]
    gpu = planned("--config", "device=cuda")  # stack: auto, so training is one stacked job per (task, scheme)
    stacked = [rule for rule in gpu if rule.startswith(("train_seeds_", "length_sweep_seeds_"))]  # one job per stack
    assert {r.split("_seeds_")[0] for r in stacked} == {"train", "length_sweep"}
    assert all(gpu[rule]["gpu"] == "1" for rule in stacked)


@pytest.mark.slurm
@pytest.mark.slow
def test_smoke_grid_through_slurm_with_a_cancelled_job(cluster, tmp_path):
    started = time.monotonic()
    workdir = copy_workflow(tmp_path / "wf")
    config = _test_config(workdir)
    # The local reference run of the same configuration goes on beside the SLURM run, niced:
    # it takes the CPU the SLURM run leaves idle while the plugin waits between status checks.
    local = copy_workflow(tmp_path / "local")
    shutil.copy2(config, local / "config/slurm_test.yaml")
    with open(tmp_path / "local.out", "w") as local_out:
        local_run = subprocess.Popen(
            ["nice", "-n", "10", str(VENV_BIN / "snakemake"), "-c2", "--configfile", "config/slurm_test.yaml"],
            cwd=local, env=venv_env(), stdin=subprocess.DEVNULL, stdout=local_out, stderr=subprocess.STDOUT,
        )
    try:
        rc, log, cancelled = _run_on_cluster(cluster, workdir, config, timeout=360)
        slurm_seconds = time.monotonic() - started
        local_rc = local_run.wait(timeout=max(60.0, 420 - (time.monotonic() - started)))
    finally:
        if local_run.poll() is None:
            local_run.kill()
            local_run.wait()
    assert rc == 0, log[-4000:]
    assert local_rc == 0, (tmp_path / "local.out").read_text()[-3000:]
    assert cancelled, f"no training job of {VICTIM_TASK} was seen running with a checkpoint\n{log[-3000:]}"
    victim_comment = _comment(VICTIM_TASK, VICTIM_SCHEME, cancelled["seed"])

    # -- every submission, as the controller saw it -----------------------------------------
    jobs = _scontrol_jobs(cluster)
    submitted = set(re.findall(r"_slurm_rpc_submit_batch_job: JobId=(\d+)", cluster.ctld_log.read_text()))
    assert submitted == set(jobs), (submitted, sorted(jobs))
    assert set(re.findall(r"has been submitted with SLURM jobid (\d+)", log)) == set(jobs)
    assert len({j["JobName"] for j in jobs.values()}) == 1, "one Snakemake run, one SLURM job name"
    states = {jid: j["JobState"] for jid, j in jobs.items()}
    assert states[cancelled["jobid"]] == "CANCELLED", states
    assert all(s == "COMPLETED" for jid, s in states.items() if jid != cancelled["jobid"]), states
    assert not [j for j in jobs.values() if any(j.get("Comment", "").startswith(f"rule_{r}") for r in LOCAL_RULES)]
    assert all("gpu" not in j.get("TRES", "") for j in jobs.values()), "no GPU unless asked for"

    # -- the cancelled job was resubmitted with more time and resumed from its checkpoint --
    victim = sorted((int(jid), j) for jid, j in jobs.items() if j.get("Comment") == victim_comment)
    assert [j["JobState"] for _, j in victim] == ["CANCELLED", "COMPLETED"], victim
    assert [_minutes(j["TimeLimit"]) for _, j in victim] == [240, 480], "runtime: 240 * attempt"
    train_log = (workdir / TRAIN_LOG.format(task=VICTIM_TASK, scheme=VICTIM_SCHEME, seed=cancelled["seed"])).read_text()
    assert re.search(r"resumed from step [1-9]\d*", train_log), train_log
    assert "stopped at step 400 (max_steps)" in train_log, train_log

    # -- what ran inside which SLURM job, from each job's own log -------------------------
    inside = {}
    for jid, job in jobs.items():
        job_log = Path(job["StdOut"])
        assert job_log.is_file(), f"no log for SLURM job {jid}"
        inside[jid] = _executed_jobs(job_log.read_text(errors="replace"), local=False)
    expected = _expected_cluster_jobs(config)
    completed = set().union(*(inside[jid] for jid, s in states.items() if s == "COMPLETED"))
    assert completed == expected, completed ^ expected
    sweeps = {jid: sum(rule == "length_sweep" for rule, _ in ran) for jid, ran in inside.items()}
    assert sorted(n for n in sweeps.values() if n) == [1, 2], "three sweeps, two group jobs"
    assert all(jobs[jid]["NumCPUs"] == str(n) for jid, n in sweeps.items() if n), "a group asks for its members' CPUs"
    assert not {rule for ran in inside.values() for rule, _ in ran} & LOCAL_RULES, "aggregation ran in SLURM"
    assert LOCAL_RULES <= {rule for rule, _ in _executed_jobs(log, local=True)}, "aggregation did not run"

    # -- the same tables as the local run of the same configuration -----------------------
    first, second = workdir / SMOKE_RESULTS / "tables", local / SMOKE_RESULTS / "tables"
    names = sorted(p.name for p in first.iterdir())
    assert names and names == sorted(p.name for p in second.iterdir())
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    print(f"SLURM run {slurm_seconds:.0f} s, whole test {time.monotonic() - started:.0f} s; processes of the "
          f"cancelled job ended as its cgroup would have: {cluster.contained}")
