"""`make gpu-check`: what one GPU does with this pipeline, in one command and one Markdown file.

Run it after the normal install on a machine with a CUDA device (no network needed once
`make fetch` has put the offline corpus in resources/). In order, each step timed:
  1. the smoke grid on CUDA and on CPU, in scratch copies of the workflow: the largest accuracy
     difference per table and whether every verdict word is the same (bf16 and CUDA kernels
     round differently, so numbers may move within TOLERANCE);
  2. the default grid on CUDA (stack: auto, gpu_jobs), from scratch: wall time and jobs per
     minute (with --quick, E1 alone: the default's sparse parity task);
  3. the stacked-training benchmark's CUDA rows (16 models stacked against one at a time);
  4. the test suite's fast part with CUDA visible, and the CUDA tests (tests/test_cuda.py).
The summary goes to benchmarks/results/gpu_check.md and is printed.
"""

from __future__ import annotations

import argparse
import datetime
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks/results/gpu_check.md"
ITEMS = ("Snakefile", "config.yaml", "config", "workflow", "src", "profiles", "environment.yml", "resources")
TOLERANCE = 0.05  # accuracy, per cell of the smoke grid's tables: bf16 against fp32 on tiny models


def copy_workflow(dst: Path) -> Path:
    for name in ITEMS:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__", ".snakemake", "results*"))
        elif src.exists():
            shutil.copy2(src, dst / name)
    return dst


def snakemake(workdir: Path, *args: str) -> tuple[float, str]:
    """Wall seconds and the output of one Snakemake run; SystemExit naming the log on failure."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "all", *args], cwd=workdir,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        log = workdir / "gpu-check-failure.log"
        log.write_text(done.stdout + done.stderr)
        raise SystemExit(f"lengthgen: error: gpu-check: snakemake {' '.join(args)} failed; see {log}")
    return seconds, done.stdout + done.stderr


def smoke_on_both(tmp: Path) -> list[str]:
    import pandas as pd

    sys.path.insert(0, str(ROOT / "src"))
    from lengthgen.analysis.claims import heading, verdict

    runs = {}
    for device in ("cuda", "cpu"):
        work = copy_workflow(tmp / f"smoke-{device}")
        seconds, _ = snakemake(work, "--configfile", "config/smoke.yaml", "--config", f"device={device}")
        runs[device] = (work / "results-smoke/tables", seconds)
    lines = [f"Smoke grid: CUDA {runs['cuda'][1]:.0f} s, CPU {runs['cpu'][1]:.0f} s (wall, from scratch)."]
    cuda, cpu = (pd.read_csv(runs[d][0] / "length_sweep.csv") for d in ("cuda", "cpu"))
    keys = ["task", "scheme", "seed", "length", "k", "depth"]
    both = cuda.merge(cpu, on=keys, suffixes=("_cuda", "_cpu"))
    worst = (both["accuracy_cuda"] - both["accuracy_cpu"]).abs().max()
    lines.append(f"- length_sweep.csv: {len(both)} cells, largest accuracy difference {worst:.3f} "
                 f"({'within' if worst <= TOLERANCE else 'BEYOND'} the tolerance {TOLERANCE})")
    cards = {d: pd.read_csv(runs[d][0] / "claims.csv", keep_default_na=False).to_dict("records") for d in runs}
    for claim in sorted({r["claim"] for r in cards["cpu"]}):
        words = {d: verdict(cards[d], claim) for d in cards}
        same = "same" if words["cuda"] == words["cpu"] else "DIFFERENT"
        lines.append(f"- {heading(claim)}: {same} (CUDA: {words['cuda']}; CPU: {words['cpu']})")
    return lines


def default_on_gpu(tmp: Path, quick: bool) -> list[str]:
    work = copy_workflow(tmp / "default")
    args = ["--config", "device=cuda", "results_dir=results-gpu"]
    if quick:  # a --configfile merges over config.yaml: the E1 task alone, no E4, no attention stage
        import yaml

        cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
        e1 = {"tasks": [t for t in cfg["tasks"] if t["kind"] == "sparse_parity"], "language": None, "attention": None}
        (work / "e1.yaml").write_text(yaml.safe_dump(e1))
        args = ["--configfile", "e1.yaml", *args]
    seconds, out = snakemake(work, *args)
    steps = re.findall(r"(\d+) of (\d+) steps", out)
    jobs = int(steps[-1][1]) if steps else 0
    what = "E1 of the default (--quick)" if quick else "the default grid"
    return [f"{what} on CUDA from scratch: {seconds / 60:.1f} min wall, {jobs} jobs, "
            f"{jobs / (seconds / 60):.1f} jobs per minute (2 AVX-512 CPU cores: 18.5-19 min for the previous grid)"]


def stacked_rows() -> list[str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch
    from stacked_training import measure

    rows = measure(torch.device("cuda"), 16, rounds=3, steps=20, ceiling=None)
    lines = ["| size | way | models | model-steps/s | ratio to one at a time |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['size']} | {r['way']} | {r['models']} | {r['model_steps_per_s']:.1f} "
                     f"| {r['vs_alone']:.2f} |")
    return lines


def tests_with_cuda() -> list[str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not slow and not slurm", "tests"], cwd=ROOT,
                          capture_output=True, text=True)
    last = (done.stdout.strip().splitlines() or ["no output"])[-1]
    return [f"Tests (the fast part and tests/test_cuda.py, CUDA visible): {last} in "
            f"{time.perf_counter() - started:.0f} s, exit status {done.returncode}"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="E1 alone for the default-grid step")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("lengthgen: error: gpu-check needs a CUDA device that torch sees (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return 2
    sections = [f"# GPU check\n\n{datetime.date.today()}, {torch.cuda.get_device_name(0)}, torch {torch.__version__}"]
    with tempfile.TemporaryDirectory() as tmp:
        for title, step in (("Smoke grid, CUDA against CPU", lambda: smoke_on_both(Path(tmp))),
                            ("Default grid on one GPU", lambda: default_on_gpu(Path(tmp), args.quick)),
                            ("Stacked training (16 models, bf16)", stacked_rows),
                            ("Test suite", tests_with_cuda)):
            started = time.perf_counter()
            body = "\n".join(step())
            sections.append(f"## {title} ({time.perf_counter() - started:.0f} s)\n\n{body}")
            print(sections[-1], flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n\n".join(sections) + "\n")
    print(f"summary: {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
