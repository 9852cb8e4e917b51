"""Job start: whole `python -m lengthgen` commands, cold against warm (lengthgen.support.warm).

Each command runs as a subprocess, as a Snakemake job runs it: cold (the job imports torch
itself) and warm (the job forks from a warm-start server that has), alternating, median over
rounds. The difference is what the default run's training and sweep jobs each save.

Commands, on the embedded default's first variable_assignment task (E3), in a scratch directory:
  help   `lengthgen diff --help`: interpreter start and argument parsing alone
  train  `lengthgen train` of one cell for 20 steps on a 2,000-example training set
  sweep  `lengthgen sweep` of a model of the default size at random init on the default test set
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from common import ROOT, VENV_BIN, Options, Section, md_table, median
from stages import default_config, save_random_checkpoint

NAME = "job_start"
TITLE = "Job start: lengthgen commands cold and warm (warm start)"


def commands(cfg: dict, tmp: Path) -> dict[str, list[str]]:
    from lengthgen import config as lgconfig
    from lengthgen import datasets
    from lengthgen.support.fileio import canonical_json

    task = next(t for t in cfg["tasks"] if t["kind"] == "variable_assignment")
    train, test = tmp / "train.parquet", tmp / "test.parquet"
    datasets.generate(lgconfig.data_slice(cfg, task["name"], "train") | {"train_examples": 2000}, "train",
                      cfg["data_seed"], train)
    datasets.generate(lgconfig.data_slice(cfg, task["name"], "test"), "test", cfg["eval_seed"], test,
                      train_path=train)
    _, meta = datasets.read(test)
    scheme = task["schemes"][0]  # whichever E3 scheme the config trains first
    save_random_checkpoint(tmp / "model.pt", cfg, task, scheme, meta)
    cell = lgconfig.cell_slice(cfg, task["name"], scheme, 0)
    cell["train"] = {**cell["train"], "max_steps": 20}
    python = [str(VENV_BIN / "python"), "-m", "lengthgen"]
    return {
        "help": [*python, "diff", "--help"],
        "train": [*python, "train", "--cell", canonical_json(cell), "--data", str(train), "--out-dir",
                  str(tmp / "run"), "--checkpoint", str(tmp / "last.pt")],
        "sweep": [*python, "sweep", "--model", str(tmp / "model.pt"), "--data", str(test), "--eval",
                  canonical_json(lgconfig.eval_slice(cfg)), "--out", str(tmp / "sweep.parquet")],
    }


def run_once(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def start_server(tmp: Path):
    from lengthgen.support import warm

    log = tmp / "warm.log"
    handle = warm.start(log, 1)
    if handle is None:
        raise RuntimeError("the warm-start server could not start (see the message above)")
    warm.wait_ready(handle[0], log)
    return handle


def run(opts: Options) -> Section:
    from lengthgen.support import warm

    cfg = default_config()
    saved = dict(os.environ)
    os.environ.update(PYTHONPATH=str(ROOT / "src"), PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                      **dict.fromkeys(warm.THREAD_ENV, "1"))  # as Snakemake's shell sets them for a job
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="lengthgen-bench-start-") as d:
            tmp = Path(d)
            cmds = commands(cfg, tmp)
            handle = start_server(tmp)
            try:
                warm_env = dict(os.environ)
                cold_env = {k: v for k, v in warm_env.items() if k != warm.ENV}
                for name, command in cmds.items():
                    times = {"cold": [], "warm": []}
                    for _ in range(2 if opts.quick else 5):
                        times["cold"].append(run_once(command, cold_env))
                        times["warm"].append(run_once(command, warm_env))
                    cold, hot = median(times["cold"]), median(times["warm"])
                    rows.append({"command": name, "cold_s": cold, "warm_s": hot, "saved_s": cold - hot,
                                 "ratio": cold / hot, "runs": len(times["cold"]),
                                 "cold_min": min(times["cold"]), "warm_min": min(times["warm"])})
            finally:
                warm.stop(*handle)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    md = ("Whole commands as subprocesses, cold and warm alternating (median; min in the CSV). `saved` is "
          "what each training or sweep job of a local run gains:\n\n"
          + md_table(rows, [("command", "command"), ("cold_s", "cold s"), ("warm_s", "warm s"),
                            ("saved_s", "saved s"), ("ratio", "cold / warm"), ("runs", "runs")]))
    return Section(NAME, TITLE, rows, md)
