"""Numbers in the docs that come from a run, generated from its committed tables.

A Markdown file holds blocks `<!-- generated: NAME RESULTS_DIR -->` ... `<!-- end generated -->`;
each holds exactly what GENERATORS[NAME] makes of RESULTS_DIR's tables. After a run,
`PYTHONPATH=src python -m lengthgen.reporting.docblocks docs/results.md` rewrites them in place;
tests/reporting/test_docblocks.py fails when a block and its tables disagree, so prose that quotes a run
cannot drift from it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

from lengthgen.analysis.aggregate import read_sweep, read_table
from lengthgen.support import markdown
from lengthgen.support.errors import UserError

BLOCK = re.compile(r"(<!-- generated: (\S+) (\S+) -->\n)(.*?)(<!-- end generated -->)", flags=re.S)


def _claims(results: Path) -> pd.DataFrame:
    return read_table(results / "tables/claims.csv", ["claim", "check", "result"], "the claims scorecard",
                      dtype=str, keep_default_na=False)


def k_means(results: Path, kind: str = "sparse_parity") -> str:
    """Mean accuracy over the fitted models of the tasks of `kind` (E1's by default) per scheme
    and k at each test length."""
    import yaml

    from lengthgen.analysis import budget, claims

    cfg = yaml.safe_load((results / "config.yaml").read_text(encoding="utf-8"))  # the run's own config
    tasks = [t for t in cfg["tasks"] if t["kind"] == kind]
    train_max = max(t["params"]["n_max"] for t in tasks)
    sweep = read_sweep(results / "tables/length_sweep.csv", [t["name"] for t in tasks])
    sweep = budget.read_marked(sweep, results / "tables")  # a model cut by max_steps is no fit, as in the scorecard
    sweep = sweep[claims.fitted(sweep, train_max, cfg["claims"]["sparsity"]["fit_min"])]
    means = sweep.groupby(["scheme", "k", "length"])["accuracy"].mean().unstack("length")
    models = sweep.groupby(["scheme", "k"])[["task", "seed"]].apply(lambda g: len(g.drop_duplicates()))
    lengths = list(means.columns)
    body = [[f"`{scheme}`", int(k), *(f"{row[n]:.3f}" for n in lengths), models[(scheme, k)]]
            for (scheme, k), row in means.iterrows()]
    lines = markdown.table(["scheme", "k", *(f"n = {n} ({n / train_max:g}×)" for n in lengths), "models"], body)
    return "\n".join(lines) + "\n"


def claim_rows(results: Path, claim: str, descriptive: bool = False, experiment: str | None = None) -> str:
    """The scorecard's rows of one claim (of one experiment): check, value, interval, p, n, result."""
    df = _claims(results)
    df = df[(df["claim"] == claim) & ((df["result"] != "descriptive") | descriptive)]
    if experiment is not None:
        df = df[df["experiment"] == experiment]
    lines = markdown.table(["check", "value", "95% CI", "p", "n", "result"],
                           ([r.check, r.value, f"[{r.ci_low}, {r.ci_high}]" if r.ci_low else "", r.p, r.n, r.result]
                            for r in df.itertuples()))
    return "\n".join(lines) + "\n"


def claim_words(results: Path) -> str:
    """Each claim's line from the scorecard's head (its word and counts)."""
    from lengthgen.analysis.claims import heading, verdict

    rows = _claims(results).to_dict("records")
    return "".join(f"- {heading(c)}: {verdict(rows, c)}\n" for c in sorted({r["claim"] for r in rows}))


GENERATORS = {
    "e1-means": k_means,
    "needle-means": lambda results: k_means(results, "needle"),
    "scale": lambda results: claim_rows(results, "analysis scale", descriptive=True),
    "needle": lambda results: claim_rows(results, "analysis needle"),
    "claim1": lambda results: claim_rows(results, "1 sparsity"),
    "claim2": lambda results: claim_rows(results, "2 coupling"),
    "e3": lambda results: claim_rows(results, "2 coupling", descriptive=True, experiment="E3"),
    "claim3": lambda results: claim_rows(results, "3 language"),
    "claim-words": claim_words,
}


def render(text: str, root: Path) -> str:
    """`text` with every generated block rewritten from the tables under `root`."""

    def fill(m: re.Match) -> str:
        name, results = m.group(2), root / m.group(3)
        if name not in GENERATORS:
            raise UserError(f"generated block {name!r}: unknown (one of {', '.join(GENERATORS)})")
        return m.group(1) + GENERATORS[name](results) + m.group(5)

    return BLOCK.sub(fill, text)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lengthgen.reporting.docblocks", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", help="Markdown files whose generated blocks to rewrite")
    p.add_argument("--root", default=".", help="the directory the blocks' results directories are under")
    args = p.parse_args(argv)
    try:
        for name in args.files:
            path = Path(name)
            path.write_text(render(path.read_text(), Path(args.root)))
    except (UserError, OSError) as err:
        print(f"lengthgen: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
