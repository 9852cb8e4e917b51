"""The README's verdict table: the scorecard (claims.csv) counted per claim.

`python -m lengthgen.verdict [results/tables/claims.csv]` prints it; tests/test_readme.py checks
that the README holds exactly what the committed scorecard gives, so the two cannot drift.
"""

from __future__ import annotations

import csv
import sys
from collections import Counter

# Scorecard results in the order a reader looks for them; any other result follows, sorted.
ORDER = ("PASS", "FAIL", "INCONCLUSIVE", "N/A")
EXPERIMENTS = {"1 sparsity": "E1", "2 coupling": "E2, E3", "3 language": "E4"}


def verdict_table(rows: list[dict]) -> str:
    """Markdown: one row per claim, its verdict, the number of checks and how many gave each
    result (descriptive rows, which are no verdicts, are not counted)."""
    from lengthgen.claims import DESCRIPTIVE, verdict

    rows = [r for r in rows if r["result"] != DESCRIPTIVE]
    counts: dict[str, Counter] = {}
    for row in rows:
        counts.setdefault(row["claim"], Counter())[row["result"]] += 1
    seen = {result for c in counts.values() for result in c}
    results = [r for r in ORDER if r in seen] + sorted(seen - set(ORDER))
    lines = ["| claim | experiments | verdict | checks | " + " | ".join(results) + " |",
             "|---|---|---|---|" + "---|" * len(results)]
    for claim in sorted(counts):
        c = counts[claim]
        cells = [claim, EXPERIMENTS.get(claim, ""), verdict(rows, claim), str(sum(c.values()))]
        cells += [str(c[r]) for r in results]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    path = argv[0] if argv else "results/tables/claims.csv"
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        print(f"lengthgen: error: {path}: {err.strerror}", file=sys.stderr)
        return 2
    if not rows or not {"claim", "result"} <= set(rows[0]):
        print(f"lengthgen: error: {path}: not a scorecard (expected columns claim and result)", file=sys.stderr)
        return 2
    sys.stdout.write(verdict_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
