"""Shared fixtures and helpers for the lengthgen tests.

Everything here is small on purpose: the tests must run on two busy CPU cores.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import traceback
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
# The interpreter running pytest is the venv's; its bin/ also holds `snakemake`.
VENV_BIN = Path(sys.prefix) / "bin" if (Path(sys.prefix) / "bin" / "snakemake").exists() else REPO / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable

# What a scratch copy of the workflow needs to run.
# resources/ holds the fetched offline corpus (E4), when the repo has it: copied, not fetched again.
WORKFLOW_ITEMS = ("Snakefile", "config.yaml", "config", "workflow", "src", "profiles", "environment.yml", "resources")
# A run's outputs (every configuration's results_dir) are never copied.
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".snakemake", "results", "results-*")
# Where config/smoke.yaml's runs write.
SMOKE_RESULTS = yaml.safe_load((REPO / "config/smoke.yaml").read_text())["results_dir"]

# Defaults of $defs/train in workflow/schemas/config.schema.yaml.
TRAIN_DEFAULTS = {
    "batch_size": 64,
    "lr": 0.001,
    "min_lr_ratio": 0.1,
    "weight_decay": 0.01,
    "warmup_steps": 50,
    "max_steps": 3000,
    "grad_clip": 1.0,
    "checkpoint_every": 200,
    "log_every": 100,
    "early_stop": {"accuracy": 1.0, "loss": None, "patience": 20},
}

# A model small enough to train a few steps in well under a second.
TINY_MODEL = {"n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 32, "dropout": 0.0, "max_position": 64}

# Defaults of $defs/sparse_parity_params.
SPARSE_PARITY_DEFAULTS = {"k": 1, "k_mode": "fixed", "n_min": 10, "n_max": 20, "locality": None}


# The modules that take minutes, longest first. `make test` runs the files on two workers
# (pytest-xdist, one file per worker at a time), which take them in collection order: started
# last, the longest would run alone at the end.
LONGEST_FIRST = ("test_workflow.py", "test_identity.py", "test_slurm.py", "test_fresh_clone.py", "test_stacked.py",
                 "test_unlock.py", "test_resume.py")


def pytest_collection_modifyitems(session, config, items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its order


def pytest_sessionstart(session) -> None:
    """Undo what a SLURM test run killed mid-test left: its daemons, and its configuration link,
    which names a controller that is gone (every Snakemake start below would wait ~9 s for it)."""
    from slurm_cluster import repair_unless_busy

    undone = repair_unless_busy()
    if undone:
        print(f"\nconftest: a SLURM test run was killed before its teardown; removed {', '.join(undone)}",
              file=sys.stderr)


# -- helpers ------------------------------------------------------------------------------


def copy_workflow(dst) -> Path:
    """Copy what the workflow needs from the repo into `dst` (items already there are kept)."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_ITEMS:
        src, target = REPO / name, dst / name
        if target.exists() or not src.exists():
            continue
        if src.is_dir():
            shutil.copytree(src, target, ignore=_IGNORE)
        else:
            shutil.copy2(src, target)
    return dst


def committed_results(dst, repo=REPO, rev: str = "HEAD") -> Path:
    """Write every results directory of `repo` (its tracked top-level `results*/`) as committed
    at `rev` into `dst`, figures aside; return `dst`. The tests of committed artifacts (the docs'
    generated blocks, the README's verdict, the notebook's example, the committed scorecards)
    read these, never the working tree's tables: `make run` on another CPU rewrites those, and
    rounding may move their values and even a claim word. Outside a git checkout (an unpacked
    archive) the files as shipped are the committed ones."""
    dst, repo = Path(dst), Path(repo)
    dst.mkdir(parents=True, exist_ok=True)

    def git(*args) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True)

    if git("rev-parse", "--is-inside-work-tree").returncode != 0:
        for src in sorted(p for p in repo.glob("results*") if p.is_dir()):
            for item in src.iterdir():  # a run's own files and its tables; not its runs or data
                if item.is_file():
                    (dst / src.name).mkdir(exist_ok=True)
                    shutil.copy2(item, dst / src.name / item.name)
                elif item.name == "tables":
                    shutil.copytree(item, dst / src.name / "tables", dirs_exist_ok=True)
        return dst
    listed = git("ls-tree", "-z", "--name-only", rev)
    if listed.returncode != 0:
        raise RuntimeError(f"git ls-tree {rev}: {listed.stderr.decode(errors='replace').strip()}")
    names = [n for n in listed.stdout.decode().split("\0") if n.startswith("results")]
    archive = git("archive", "--format=tar", rev, "--", *names, ":(exclude,glob)*/figures/**")
    if archive.returncode != 0:
        raise RuntimeError(f"git archive {rev}: {archive.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dst, filter="data")
    return dst


def venv_env(**extra) -> dict:
    """The current environment with the venv's bin/ first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    if "SLURM_CONF" not in env and not os.path.exists("/etc/slurm/slurm.conf"):
        # With slurm-client installed the SLURM plugin runs `scontrol show config` whenever
        # Snakemake starts; with no configuration Slurm would look for a controller through DNS.
        env["SLURM_CONF"] = "/dev/null"
    env.update(extra)
    return env


def run_snakemake(workdir, *args, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run `snakemake *args` in a scratch copy of the workflow at `workdir` (no timeout by default)."""
    workdir = copy_workflow(workdir)
    return subprocess.run(
        [str(VENV_BIN / "snakemake"), *map(str, args)],
        cwd=workdir,
        env=venv_env(),
        text=True,
        capture_output=True,
        timeout=timeout,
    )


def run_lengthgen(*args, cwd=None, timeout: float | None = 300, env=None, fresh: bool = False
                  ) -> subprocess.CompletedProcess:
    """Run the command `python -m lengthgen *args` (as the rules do); `env`: variables to add,
    e.g. the results directory the workflow gives its jobs. In this process by default, through
    the function `python -m lengthgen` calls (lengthgen.cli.main): a new interpreter importing
    torch costs seconds per call. `fresh`: in a new interpreter, as a job runs it."""
    if fresh:
        return subprocess.run([PYTHON, "-m", "lengthgen", *map(str, args)], cwd=cwd, text=True, capture_output=True,
                              env=venv_env(PYTHONPATH=str(REPO / "src"), **(env or {})), timeout=timeout)
    from lengthgen.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _environment(cwd, env or {}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
        except Exception:  # what a job would print as a traceback
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess(["python", "-m", "lengthgen", *map(str, args)], code, out.getvalue(),
                                       err.getvalue())


@contextlib.contextmanager
def _environment(cwd, env: dict):
    """Run in `cwd` with `env` added to the environment (no warm-start server), then restore both."""
    old_cwd, old_env = os.getcwd(), dict(os.environ)
    os.environ.update({k: str(v) for k, v in env.items()})
    os.environ.pop("LENGTHGEN_WARM", None)
    try:
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)


def error_lines(stderr: str, prefix: str = "lengthgen: error:") -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(prefix)]


def sparse_parity_task(name="tiny", *, train_examples=64, lengths=(10, 14), examples=8, **params) -> dict:
    """A validated-looking sparse_parity task entry (params and eval with defaults filled)."""
    return {
        "name": name,
        "kind": "sparse_parity",
        "params": {**SPARSE_PARITY_DEFAULTS, "k": 2, "n_min": 6, "n_max": 10, **params},
        "train_examples": train_examples,
        "eval": {"lengths": list(lengths), "examples": examples, "k": None},
    }


def data_slice(task: dict, split: str, seed: int) -> dict:
    """The shape of lengthgen.config.data_slice for `task`."""
    out = {"name": task["name"], "kind": task["kind"], "params": task["params"], "split": split, "seed": seed}
    if split == "train":
        out["train_examples"] = task["train_examples"]
    else:
        out["eval"] = task["eval"]
    return out


def write_dataset(directory, task: dict, data_seed: int = 1234, eval_seed: int = 4321) -> dict:
    """Generate train.parquet and test.parquet of `task` into `directory`; return their paths."""
    from lengthgen import datasets

    directory = Path(directory)
    train, test = directory / "train.parquet", directory / "test.parquet"
    datasets.generate(data_slice(task, "train", data_seed), "train", data_seed, train)
    datasets.generate(data_slice(task, "test", eval_seed), "test", eval_seed, test, train_path=train)
    return {"train": train, "test": test, "task": task, "dir": directory}


def scheme_options(**options) -> dict:
    """A scheme entry with the schema's defaults filled in."""
    from lengthgen import config as lgconfig

    schema = lgconfig.load_yaml(REPO / "workflow/schemas/config.schema.yaml")
    options = copy.deepcopy(options)
    lgconfig.fill_defaults(options, schema["$defs"]["scheme"], schema)
    return options


def make_cell(task="tiny", scheme="rope", seed=0, encoding=None, model=None, device="cpu", threads=1,
              options=None, **train):
    """A cell dict for lengthgen.training.train.train (shape of lengthgen.config.cell_slice).

    Tiny by default: a one-layer model trained for 2 steps; keyword args override train keys;
    `options` adds scheme keys (positions, position_head, gaps, ...).
    """
    train_cfg = copy.deepcopy(TRAIN_DEFAULTS)
    train_cfg.update(batch_size=8, warmup_steps=1, max_steps=2, checkpoint_every=1000, log_every=1000)
    train_cfg["early_stop"] = {"accuracy": 1.0, "loss": None, "patience": 0}
    train_cfg.update(train)
    enc = encoding or {"nope": "none"}.get(scheme, scheme)
    return {
        "task": task,
        "scheme": scheme,
        "seed": seed,
        "scheme_options": scheme_options(encoding=enc, **(options or {})),
        "model": {**TINY_MODEL, **(model or {})},
        "train": train_cfg,
        "device": device,
        "threads": threads,
    }


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture
def short_tmp():
    """A temporary directory with a short path, for a warm-start server's socket: pytest's
    tmp_path can be longer than the 107 bytes a Unix socket's path takes."""
    path = Path(tempfile.mkdtemp(prefix="lg-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session", name="committed_results")
def committed_results_fixture(tmp_path_factory) -> Path:
    """A directory holding `results/`, `results-confirm/` and `results-scale/` as committed at
    HEAD (tables, config.yaml, provenance.json; no figures): see committed_results above."""
    return committed_results(tmp_path_factory.mktemp("committed"))


@pytest.fixture(scope="session")
def schema() -> dict:
    from lengthgen.config import load_yaml

    return load_yaml(REPO / "workflow/schemas/config.schema.yaml")


@pytest.fixture
def tiny_cell():
    """Builder: tiny_cell(task=..., scheme=..., seed=..., **train_overrides) -> cell dict."""
    return make_cell


@pytest.fixture
def tiny_task():
    """Builder: tiny_task(name=..., train_examples=..., lengths=..., examples=..., **params)."""
    return sparse_parity_task


@pytest.fixture
def write_sparse_parity(tmp_path):
    """Builder: write_sparse_parity(name="tiny", subdir=None, data_seed=..., **task_kwargs) -> paths."""

    def make(name="tiny", subdir=None, data_seed=1234, eval_seed=4321, **task_kwargs):
        task = sparse_parity_task(name, **task_kwargs)
        return write_dataset(tmp_path / (subdir or name), task, data_seed=data_seed, eval_seed=eval_seed)

    return make


@pytest.fixture
def tiny_dataset(write_sparse_parity) -> dict:
    """A tiny sparse_parity train+test pair in tmp_path: {"train", "test", "task", "dir"}."""
    return write_sparse_parity()


@pytest.fixture
def workflow_copy(tmp_path) -> Path:
    """A scratch copy of the workflow (Snakefile, config, workflow/, src/, profiles/)."""
    return copy_workflow(tmp_path / "wf")
