"""A budget study's table: per setting (a task of the study's grid) and scheme, how many seeds fit
at 1x, how their exact match spreads at each longer length, whether training reached its early
stop or was cut by max_steps, and what a model cost. A fit at 1x counts twice: by exact match
alone, and as the claims count it, only where training ended at its early stop.

`python -m lengthgen.analysis.study RESULTS_DIR [--write FILE]` reads the run's sweep table and,
from its run folders, each cell's meta.json (steps, how it stopped) and the job's benchmark
record (CPU seconds). A bimodal outcome is a share of seeds to estimate, so each length shows
the share at >= `good` beside the median and range, never a mean alone. The study's 1x is each
task's shortest test length, its longest training length (config/e3-study.yaml tests from there).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from lengthgen.analysis.aggregate import read_sweep
from lengthgen.support import markdown
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import write_text


def per_seed(sweep: pd.DataFrame) -> pd.DataFrame:
    """Exact match per (task, scheme, seed, length): the mean over depth groups."""
    return sweep.groupby(["task", "scheme", "seed", "length"], as_index=False)["accuracy"].mean()


def training_record(results: Path, task: str, scheme: str, seed: int) -> dict:
    """A cell's steps and stop (meta.json) and the CPU seconds of its training job."""
    meta_path = results / f"runs/{task}/{scheme}/seed{seed}/meta.json"
    if not meta_path.exists():
        raise UserError(f"{meta_path}: no such file; the study's run folders are needed, not only its tables")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    bench = results / f"benchmarks/train/{task}/{scheme}/seed{seed}.tsv"
    cpu = float(pd.read_csv(bench, sep="\t")["s"].iloc[0]) if bench.exists() else float("nan")
    return {"steps": meta["steps"], "converged": meta["stopped"] == "converged", "cpu_s": cpu}


def _spread(values: pd.Series, good: float) -> str:
    """`median [min-max], share >= good` of one length's per-seed exact match."""
    share = int((values >= good).sum())
    return f"{values.median():.2f} [{values.min():.2f}-{values.max():.2f}], {share}/{len(values)}"


def setting_rows(sweep: pd.DataFrame, results: Path, fit_min: float, good: float) -> tuple[list[str], list[list]]:
    """The table's header and one row per (task, scheme). Every setting of a study is tested at the
    same lengths, the first its 1x, so that its columns compare."""
    seeds = per_seed(sweep)
    lengths = sorted(seeds["length"].unique())
    if any(set(g["length"]) != set(lengths) for _, g in seeds.groupby("task")):
        raise UserError("the study's settings are tested at different lengths; give every task the same eval.lengths")
    header = ["setting", "scheme", "fit at 1x", "fit, trained to the end",
              *(f"{n} (median [range], >= {good:g})" for n in lengths[1:]),
              "steps (median [range])", "early stop", "CPU s per model (median)"]
    body = []
    for (task, scheme), g in seeds.groupby(["task", "scheme"], sort=True):
        acc = g.pivot(index="seed", columns="length", values="accuracy")
        record = pd.DataFrame([training_record(results, task, scheme, s) for s in acc.index])
        fits = (acc[lengths[0]] >= fit_min).to_numpy()
        ended = fits & record["converged"].to_numpy()  # a fit is a training that ended (protocol.md)
        body.append([task, scheme, f"{int(fits.sum())}/{len(acc)}", f"{int(ended.sum())}/{len(acc)}",
                     *(_spread(acc[n], good) for n in lengths[1:]),
                     f"{record['steps'].median():.0f} [{record['steps'].min()}-{record['steps'].max()}]",
                     f"{int(record['converged'].sum())}/{len(record)}", f"{record['cpu_s'].median():.0f}"])
    return header, body


def study_table(results_dir, fit_min: float = 0.95, good: float = 0.9) -> str:
    results = Path(results_dir)
    sweep = read_sweep(results / "tables/length_sweep.csv")
    header, body = setting_rows(sweep, results, fit_min, good)
    return "\n".join(markdown.table(header, body)) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lengthgen.analysis.study", description=__doc__.splitlines()[0])
    p.add_argument("results", help="the study's results folder (tables/ and runs/)")
    p.add_argument("--fit-min", type=float, default=0.95, help="exact match at 1x that counts as a fit")
    p.add_argument("--good", type=float, default=0.9, help="exact match that counts as generalizing")
    p.add_argument("--write", help="Markdown file whose block '<!-- study: RESULTS -->' ... '<!-- end study -->' "
                                   "gets the table")
    a = p.parse_args(argv)
    try:
        table = study_table(a.results, a.fit_min, a.good)
        if a.write:
            write_block(a.write, a.results, table)
        else:
            sys.stdout.write(table)
    except UserError as err:
        print(f"lengthgen: error: {err}", file=sys.stderr)
        return 2
    return 0


def write_block(path, results_dir: str, text: str) -> None:
    """Put `text` into the block `<!-- study: RESULTS_DIR -->` ... `<!-- end study -->` of `path`."""
    try:
        write_text(path, markdown.replace_block(Path(path).read_text(encoding="utf-8"), "study", results_dir, text))
    except ValueError as err:
        raise UserError(f"{path}: {err}") from None


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
