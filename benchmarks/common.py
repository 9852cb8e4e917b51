"""Shared helpers of the benchmark suite: paths, timing, machine description, tables.

Timing rule (see README): every number is a median over runs that alternate between the
things being compared, in one process, so a slow spell of this shared machine hits all of
them alike instead of one.
"""

from __future__ import annotations

import csv
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
SRC = ROOT / "src"
VENV_BIN = Path(sys.executable).parent  # snakemake is run from the interpreter's own venv

if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))


@dataclass
class Options:
    quick: bool = False
    threads: list[int] = field(default_factory=lambda: [1, 2])
    context: dict = field(default_factory=dict)  # results one benchmark hands to another (the ceiling)


@dataclass
class Section:
    """What one benchmark returns: CSV rows and a Markdown fragment for results.md."""

    name: str
    title: str
    rows: list[dict]
    markdown: str
    seconds: float = 0.0


def median(xs) -> float:
    return float(statistics.median(xs))


def timed(fn: Callable[[], object], repeat: int = 1) -> float:
    """Seconds for `repeat` calls of fn."""
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return time.perf_counter() - start


def calibrate(fn: Callable[[], object], target_s: float, cap: int = 10_000) -> tuple[int, float]:
    """How many calls of fn take about target_s (at least 1), and the seconds of one call."""
    one = timed(fn)
    return max(1, min(cap, round(target_s / max(one, 1e-9)))), one


def alternate(runs: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Call each run in turn, `rounds` times (A, B, A, B, ...); each returns its measurement."""
    out: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            out[name].append(run())
    return out


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx_vnni")
                return [f for f in wanted if f in flags]
    except OSError:
        pass
    return []


def native_bf16() -> list[str]:
    """The bf16 instruction sets /proc/cpuinfo lists (AMX's, AVX-512's); [] where it lists none
    or cannot be read (another OS or architecture)."""
    return [f for f in cpu_flags() if f in ("amx_bf16", "avx512_bf16")]


def lm_spec(model: dict, context: int, batch: int, micro_batch_tokens: int | None = None) -> dict:
    """A language-model spec for `lm._step` on random tokens: constant lr, clipping at 1.0."""
    train = {"batch_size": batch, "lr": 1e-4, "weight_decay": 0.0, "warmup_steps": 0, "max_steps": 100,
             "min_lr_ratio": 1.0, "grad_clip": 1.0, "micro_batch_tokens": micro_batch_tokens}
    return {"context": context, "seed": 0, "pose_target": None, "model": model, "train": train}


def machine() -> dict:
    import torch

    info = {
        "cpu": cpu_model(),
        "cpu_flags": ", ".join(cpu_flags()) or "n/a",
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_default_threads": torch.get_num_threads(),
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "blas": _blas(torch),
        "load_average": load_average(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = "not installed (pip install -r benchmarks/requirements.txt)"
    try:
        out = subprocess.run([str(VENV_BIN / "snakemake"), "--version"], capture_output=True, text=True, timeout=60)
        info["snakemake"] = out.stdout.strip() or "n/a"
    except (OSError, subprocess.TimeoutExpired):
        info["snakemake"] = "n/a"
    return info


def _blas(torch) -> str:
    import re

    m = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return m.group(1) if m else "n/a"


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


def write_csv(name: str, rows: list[dict]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.csv"
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})
    return path


def _cell(v):
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def md_table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """A Markdown table of `rows`; columns are (key, header). Floats get 3 significant digits."""
    head = "| " + " | ".join(h for _, h in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    lines = [head, rule]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(k, "")) for k, _ in columns) + " |")
    return "\n".join(lines)


def _fmt(v) -> str:
    if isinstance(v, float):
        if v != v:  # nan
            return "–"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)
