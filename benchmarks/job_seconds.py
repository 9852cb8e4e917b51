"""Job-seconds by stage and task, from the `benchmark:` files a run leaves in <results>/benchmarks.

    python benchmarks/job_seconds.py results-confirm

Prints a markdown table (jobs, total and median seconds per job) for docs/performance.md.
The files hold each job's wall time (column `s`), so the sum is the run's CPU-job cost, not
its wall time: two jobs run side by side on 2 cores.
"""

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path


def job_seconds(results: Path) -> dict[tuple[str, str], list[float]]:
    """{(stage, task): [seconds of each job]}; the language stage's files name their step."""
    out = defaultdict(list)
    for tsv in sorted((results / "benchmarks").rglob("*.tsv")):
        parts = tsv.relative_to(results / "benchmarks").parts
        task = parts[1] if len(parts) > 2 else tsv.stem
        with tsv.open() as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        out[(parts[0], task)] += [float(r["s"]) for r in rows]
    return out


def table(by_stage: dict[tuple[str, str], list[float]]) -> str:
    lines = ["| stage | task | jobs | job-seconds | median per job (s) |", "|---|---|---:|---:|---:|"]
    for (stage, task), secs in sorted(by_stage.items()):
        lines.append(f"| {stage} | {task} | {len(secs)} | {sum(secs):,.0f} | {statistics.median(secs):.1f} |")
    total = [s for secs in by_stage.values() for s in secs]
    lines.append(f"| all | | {len(total)} | {sum(total):,.0f} | {statistics.median(total):.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a run's results directory")
    print(table(job_seconds(parser.parse_args().results)))
