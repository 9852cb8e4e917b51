"""Workflow overhead: wall time of Snakemake deciding what to run.

All timings are of the whole command a user types (`snakemake -n ...`: interpreter start,
config validation, source digests, DAG, file and metadata checks, printing the plan), run
as a subprocess, median over rounds that alternate between the cases.

Cases (scratch copies of the workflow, so the real results/ are untouched):
  paper         `snakemake -n --configfile config/paper.yaml`, nothing built yet
  large         the same on a generated grid of >= 1000 jobs (paper.yaml has fewer; quick
                mode uses a smaller one)
  default       `snakemake -n` of the embedded default, nothing built yet
  noop_default  `snakemake -n` of the default after every output exists and is recorded as up
                to date (empty files made, then `snakemake --touch --forceall`, which also
                writes Snakemake's metadata: params, code, inputs): the no-op rerun, without
                minutes of training
  noop_large    (full mode) the same no-op on the generated grid
  noop_smoke    (--with-smoke-run) the smoke grid really run once, then `snakemake -n`
and, read-only in the checkout itself:
  main          `snakemake -n --nolock` of the default config against the real results/
                (a no-op only if the default run is complete and current; the job count says)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from common import ROOT, VENV_BIN, Options, Section, md_table, median

NAME = "workflow_overhead"
TITLE = "Workflow overhead: Snakemake dry runs and no-ops"
COPY = ["Snakefile", "config.yaml", "config", "workflow", "src", "profiles", "environment.yml"]
TARGET_JOBS = 1000


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def snakemake(args: list[str], cwd: Path, timeout: int = 900) -> tuple[float, int, str]:
    start = time.perf_counter()
    out = subprocess.run([str(VENV_BIN / "snakemake"), *args], cwd=cwd, env=_env(), capture_output=True,
                         text=True, timeout=timeout)
    return time.perf_counter() - start, out.returncode, out.stdout + out.stderr


def job_count(output: str) -> int | None:
    if "Nothing to be done" in output:
        return 0
    m = re.findall(r"^total\s+(\d+)\s*$", output, flags=re.M)
    return int(m[-1]) if m else None


def scratch_copy(prefix: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"lengthgen-bench-{prefix}-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, root / name)
    return root


def large_grid(paper: dict, n_tasks: int, seeds: int) -> dict:
    """paper.yaml with its tasks repeated under new names and more seeds, on this machine's device:
    `--touch` starts a run, whose machine check refuses paper.yaml's `device: cuda` where torch
    sees no GPU (on one, `auto` is cuda and the grid stacks its seeds as paper.yaml does)."""
    cfg = {k: v for k, v in paper.items() if not str(k).startswith("_")}
    cfg["device"] = "auto"
    base = cfg["tasks"]
    cfg["tasks"] = [{**base[i % len(base)], "name": f"{base[i % len(base)]['name']}_r{i}"} for i in range(n_tasks)]
    cfg["seeds"] = list(range(seeds))
    return cfg


def expected_jobs(cfg: dict) -> int:
    cells = sum(len(t["schemes"]) for t in cfg["tasks"]) * len(cfg["seeds"])
    return 2 * cells + 2 * len(cfg["tasks"]) + 5  # train+sweep per cell, 2 datasets per task, 5 final


def populate(cwd: Path, config_args: list[str]) -> tuple[int, float, str]:
    """Make every output of the grid exist and be recorded as up to date, without running it."""
    _, rc, out = snakemake(["-n", *config_args], cwd)
    if rc:
        raise RuntimeError(f"dry run failed in {cwd}:\n{out[-2000:]}")
    outputs = set()
    for line in out.splitlines():
        if line.startswith("    output: "):
            outputs.update(p.strip() for p in line.removeprefix("    output: ").split(","))
    for p in outputs:
        path = cwd / p
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    # --forceall: without it, --touch records no metadata for jobs whose outputs feed later jobs
    seconds, rc, out = snakemake(["--cores", "1", "--touch", "--forceall", *config_args], cwd)
    if rc:
        raise RuntimeError(f"snakemake --touch failed in {cwd}:\n{out[-2000:]}")
    return len(outputs), seconds, out


def slurm_probe() -> str | None:
    """The SLURM plugin runs `scontrol show config` whenever Snakemake starts; with a SLURM
    configuration whose controller does not answer, that waits ~9 s and hides in every number."""
    env = _env()
    if shutil.which("scontrol", path=env["PATH"]) is None:
        return None
    start = time.perf_counter()
    try:
        subprocess.run(["scontrol", "show", "config"], env=env, capture_output=True, timeout=15)
    except subprocess.TimeoutExpired:
        pass
    seconds = time.perf_counter() - start
    note = f"`scontrol show config`, which the SLURM plugin runs at every Snakemake start, took {seconds:.2f} s"
    if seconds > 1:
        note += (" — **every time above includes this wait**: a SLURM configuration names a controller that "
                 "does not answer (README, Scaling out)")
    return note


def run(opts: Options) -> Section:
    rounds = 1 if opts.quick else 3
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    paper_jobs = expected_jobs(paper)
    # quick: a few hundred jobs to exercise the code; full: the smallest grid of >= TARGET_JOBS jobs
    seeds = 10
    n_tasks = 3 if opts.quick else 1
    while not opts.quick and expected_jobs(large_grid(paper, n_tasks, seeds)) < TARGET_JOBS:
        n_tasks += 1
    large = large_grid(paper, n_tasks, seeds)

    empty = scratch_copy("empty")
    dirs = [empty]
    notes = ["scratch copies of the workflow in the system temp folder, removed afterwards"]
    probe = slurm_probe()
    if probe:
        notes.append(probe)
    missing = []
    try:
        (empty / "config" / "bench_large.yaml").write_text(yaml.safe_dump(large, sort_keys=False))
        cases = {
            "paper": (empty, ["-n", "--configfile", "config/paper.yaml"]),
            "large": (empty, ["-n", "--configfile", "config/bench_large.yaml"]),
            "default": (empty, ["-n"]),
            "main": (ROOT, ["-n", "--nolock"]),
        }
        # no-ops: a scratch copy per grid whose outputs all exist and are recorded as up to date
        for name, config_args in [("noop_default", []), ("noop_large", ["--configfile", "config/bench_large.yaml"])]:
            if name == "noop_large" and opts.quick:
                continue
            d = scratch_copy(name)
            dirs.append(d)
            (d / "config" / "bench_large.yaml").write_text(yaml.safe_dump(large, sort_keys=False))
            populated, touch_s, _ = populate(d, config_args)
            notes.append(f"{name} set-up: {populated} outputs created empty, then `snakemake --touch --forceall` "
                         f"({touch_s:.1f} s, not part of the timing)")
            cases[name] = (d, ["-n", *config_args])
        if opts.context.get("smoke_run"):
            smoke = scratch_copy("smoke")
            dirs.append(smoke)
            s, rc, out = snakemake(["--cores", "2", "--configfile", "config/smoke.yaml"], smoke)
            notes.append(f"noop_smoke set-up: the smoke grid really run once ({s:.0f} s, rc {rc}), so its outputs "
                         "and metadata are real")
            cases["noop_smoke"] = (smoke, ["-n", "--configfile", "config/smoke.yaml"])
        times = {k: [] for k in cases}
        jobs, rcs = {}, {}
        for _ in range(rounds):
            for name, (cwd, args) in cases.items():
                s, rc, out = snakemake(args, cwd)
                times[name].append(s)
                jobs[name], rcs[name] = job_count(out), rc
                m = re.search(r"^(\d+) jobs have missing provenance/metadata", out, flags=re.M)
                if m and name.startswith("noop") and (name, m.group(1)) not in missing:
                    missing.append((name, m.group(1)))
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)

    describe = {
        "paper": "`snakemake -n --configfile config/paper.yaml` (scratch, nothing built)",
        "large": f"generated grid: paper.yaml x {n_tasks} tasks x {seeds} seeds (scratch, nothing built)",
        "noop_default": "`snakemake -n`, embedded default, every output present (`--touch`): a no-op (scratch)",
        "noop_large": "the generated grid, every output present (`--touch`): a no-op (scratch)",
        "default": "`snakemake -n`, embedded default (scratch, nothing built)",
        "main": "`snakemake -n --nolock` in the checkout, against the real results/",
        "noop_smoke": "`snakemake -n --configfile config/smoke.yaml` after a real run: a no-op (scratch)",
    }
    rows = []
    for name in cases:
        t = times[name]
        j = jobs[name]
        rows.append({
            "case": name, "what": describe[name], "jobs": j if j is not None else "?", "rc": rcs[name],
            "runs": len(t), "seconds_median": median(t), "seconds_min": min(t), "seconds_max": max(t),
            "ms_per_job": 1000 * median(t) / j if j else float("nan"),
        })
    main = next(r for r in rows if r["case"] == "main")
    main_state = (
        "a true no-op (results/ complete and current)" if main["jobs"] == 0 else
        f"**not a no-op**: the default run in the checkout is incomplete or out of date, so the dry run plans "
        f"{main['jobs']} jobs (other engineers are editing and running it concurrently)"
    )
    planned = jobs["paper"] or paper_jobs  # the dry run's own count (the estimate leaves out E4's jobs)
    large_text = (
        f"paper.yaml has {planned} jobs (< {TARGET_JOBS}), so a generated grid of {jobs['large']} jobs is "
        "timed as well" if planned < TARGET_JOBS else
        f"paper.yaml has {planned} jobs; a generated grid of {jobs['large']} jobs is timed as well, with its no-op"
    )
    if opts.quick:
        large_text += " (quick mode: a smaller generated grid, below the target)"
    for name, count in missing:
        notes.append(f"{name}: Snakemake reports that {count} jobs have missing provenance/metadata after "
                     "`--touch`; for those only output times are checked, so this no-op slightly understates one "
                     "after real runs")
    md = "\n\n".join([
        f"Wall time of the whole command, median of {rounds} alternating round(s). {large_text}. "
        f"`main`: {main_state}.",
        md_table(rows, [("case", "case"), ("what", "what"), ("jobs", "jobs"), ("seconds_median", "s (median)"),
                        ("seconds_min", "min"), ("seconds_max", "max"), ("ms_per_job", "ms/job"), ("rc", "rc")]),
        "\n".join(f"- {n}" for n in notes),
    ])
    return Section(NAME, TITLE, rows, md)
