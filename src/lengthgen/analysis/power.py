"""Units by power: how many models (and data draws) each deciding row needs to reach the same
word in two independent runs.

`agreement` (every deciding row) is predictive: the run's effects are estimates, so each
simulation first draws a plausible truth (the run's units with replacement: a model seed with
its own training and test draws; an E4 pair of language models), then two independent runs from
that truth (a multiple of the run's unit count, drawn with replacement), recomputes each run's
whole scorecard with the registered rules, and counts whether the two give a row the same word.
Centring every simulated run on the observed effect (plug-in, `predictive=False`) leaves the
effect's own uncertainty out and flatters a row near its threshold.

Claim 1's power (below, `power`):

From runs already made, each scheme's fitted models and their claim-1 points (one per k). A
simulated replication draws m models with replacement from those observed (a model trained on
a mixture of k is drawn whole, with all its k; with one model per k, m models per k), so the
seed-to-seed spread is the measured one, bimodal as it is, and applies the registered rule
(`claims.trend_test`: the trend's permutation p and the effect's interval against its floor);
the power at m is the share of replications that PASS.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from lengthgen.analysis import budget, claims
from lengthgen.analysis.aggregate import read_sweep
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import write_text


def observed_points(results_dirs: list) -> tuple[pd.DataFrame, dict]:
    """The claim-1 points of the runs in `results_dirs` together (their sweeps pooled: runs on
    disjoint seeds), judged as the first run's recorded config.yaml judges them. Returns the
    points and that config's `claims` section."""
    cfg = yaml.safe_load((Path(results_dirs[0]) / "config.yaml").read_text(encoding="utf-8"))
    tasks = [t for t in cfg["tasks"] if t["kind"] == "sparse_parity"]
    if not tasks:
        raise UserError(f"{results_dirs[0]}/config.yaml: no sparse_parity task, so no claim-1 test")
    train_max = max(t["params"]["n_max"] for t in tasks)
    parts = [budget.read_marked(read_sweep(Path(d) / "tables/length_sweep.csv"), Path(d) / "tables").assign(run=i)
             for i, d in enumerate(results_dirs)]
    sweep = pd.concat(parts, ignore_index=True)
    sweep = sweep[sweep["task"].isin([t["name"] for t in tasks])]
    # models of different runs stay different models even where their seeds coincide
    sweep = sweep.assign(task=sweep["task"] + "#" + sweep["run"].astype(str)).drop(columns="run")
    return claims.claim1_points(sweep, train_max, cfg["claims"]["sparsity"]), cfg["claims"]


def simulated(points: pd.DataFrame, m: int, rng: np.random.Generator) -> pd.DataFrame:
    """One replication's points: m models drawn with replacement from those observed."""
    if claims.paired(points):
        models = points[["task", "seed"]].drop_duplicates().to_numpy()
        picked = models[rng.integers(0, len(models), size=m)]
        parts = [points[(points["task"] == t) & (points["seed"] == s)].assign(task="sim", seed=i)
                 for i, (t, s) in enumerate(picked)]
        return pd.concat(parts, ignore_index=True)
    parts = []
    for k, g in points.groupby("k"):
        acc = rng.choice(g["accuracy"].to_numpy(), size=m, replace=True)
        parts.append(pd.DataFrame({"task": f"sim_k{k}", "seed": np.arange(m), "k": k, "accuracy": acc}))
    return pd.concat(parts, ignore_index=True)


def power(points: pd.DataFrame, m: int, cfg: dict, n_sim: int, n_perm: int) -> float:
    """Share of `n_sim` simulated replications with m models (per k, for one model per k) that
    the registered rule PASSes; `cfg` is the config's `claims` section."""
    st = {**cfg["stats"], "n_perm": n_perm, "n_boot": min(cfg["stats"]["n_boot"], 1000)}
    rng = np.random.default_rng(st["seed"])
    ks = sorted(int(k) for k in points["k"].unique())
    passes = 0
    for i in range(n_sim):
        sim = simulated(points, m, rng)
        draws = claims.k_draws(sim, ks, {**st, "seed": st["seed"] + i})
        passes += claims.trend_test(sim, ks, draws, cfg["sparsity"], {**st, "seed": st["seed"] + i})["result"] == "PASS"
    return passes / n_sim


def table(points: pd.DataFrame, ms: list[int], cfg: dict, n_sim: int = 200, n_perm: int = 2000) -> pd.DataFrame:
    rows = [{"scheme": scheme, "models": m, "power": power(g, m, cfg, n_sim, n_perm)}
            for scheme, g in points.groupby("scheme", sort=True) for m in ms]
    return pd.DataFrame(rows)


# -- every deciding row: same-word agreement between two independent runs ----------------------

WORDS = (claims.PASS, claims.FAIL, claims.INCONCLUSIVE)


class Run:
    """A run's tables as the scorecard reads them, and what it judges them with (its own
    recorded config.yaml). Its units: each task's model seeds (a seed with its own training and
    test draws, under train_sets: per_seed) and E4's pairs of language models."""

    def __init__(self, results_dir, plan_of):
        """`plan_of(config)`: which tasks each claim is judged on (lengthgen.plan.claims_plan)."""
        from lengthgen.analysis import attention as attention_report
        from lengthgen.analysis import language_scores

        root = Path(results_dir)
        cfg = yaml.safe_load(_read(root / "config.yaml"))
        self.claims = rules_for(cfg["claims"])
        self.kinds = {t["name"]: t["kind"] for t in cfg["tasks"]}
        self.plan = plan_of(cfg)
        self.sweep = budget.read_marked(read_sweep(root / "tables/length_sweep.csv"), root / "tables")
        scores, attention = root / "tables/language_scores.csv", root / "tables/attention.csv"
        self.scores = language_scores.read(scores) if cfg.get("language") and scores.exists() else None
        self.models = (attention_report.per_model(attention_report.read(attention))
                       if cfg.get("attention") and attention.exists() else None)
        self.units = _units_of(self.sweep, self.scores)

    def with_tables(self, sweep, scores, models) -> Run:
        """This run's design and rules on other tables (a simulated truth): units recounted."""
        other = copy.copy(self)
        other.sweep, other.scores, other.models = sweep, scores, models
        other.units = _units_of(sweep, scores)
        return other

    def rows(self, st: dict, sweep=None, scores=None, models=None) -> list[dict]:
        """The scorecard's rows of these (or the given) tables."""
        from lengthgen.analysis.scorecard import judge

        cfg = {**self.claims, "stats": st}
        return judge(self.sweep if sweep is None else sweep, self.scores if scores is None else scores,
                     self.models if models is None else models, self.plan["sparse_tasks"], self.plan["train_max"],
                     self.plan["coupling"], cfg)

    def words(self, st: dict, sweep=None, scores=None, models=None) -> dict:
        """{check: result} of the deciding rows of the scorecard of these (or the given) tables."""
        return {_key(r): r["result"] for r in self.rows(st, sweep, scores, models) if r["result"] in WORDS}

    def half(self, which: int) -> tuple:
        """The tables of the first (0) or second (1) half of each task's units and of E4's pairs,
        in seed order: two runs that share nothing but the design."""
        picks = {name: units[which * (len(units) // 2): (which + 1) * (len(units) // 2) or None]
                 for name, units in self.units.items()}
        sweep = self.sweep[[seed in picks[t] for t, seed in zip(self.sweep["task"], self.sweep["seed"], strict=True)]]
        models = None if self.models is None else self.models[
            [seed in picks.get(t, []) for t, seed in zip(self.models["task"], self.models["seed"], strict=True)]]
        scores = None if self.scores is None else self.scores[self.scores["seed"].isin(picks["E4 pairs"])]
        return sweep, scores, models

    def resampled(self, factor: float, rng: np.random.Generator) -> tuple:
        """One simulated independent run: round(factor x units) units of each task (and of E4's
        pairs) drawn with replacement, each keeping all its rows (every scheme of a seed shares
        its draw, so paired comparisons stay paired), relabelled as distinct units."""
        picks = {name: rng.choice(units, size=max(1, round(factor * len(units)))) for name, units in self.units.items()}
        sweep = _relabel(self.sweep, picks, "task")
        models = None if self.models is None else _relabel(self.models, picks, "task")
        scores = None
        if self.scores is not None:
            scores = _relabel(self.scores.assign(_unit="E4 pairs"), picks, "_unit").drop(columns="_unit")
        return sweep, scores, models


def _units_of(sweep: pd.DataFrame, scores: pd.DataFrame | None) -> dict:
    """Each task's model seeds and E4's pairs."""
    units = {task: sorted(g["seed"].unique()) for task, g in sweep.groupby("task")}
    if scores is not None:
        units["E4 pairs"] = sorted(scores["seed"].unique())
    return units


def rules_for(recorded: dict) -> dict:
    """The rules a run is judged by: those it recorded, or, for a run that predates today's
    registered rules (its claims section fails today's schema), today's (config.yaml's)."""
    from lengthgen.support import schema

    try:
        return schema.section("claims", recorded)
    except UserError:
        today = yaml.safe_load(_read(Path(__file__).parents[3] / "config.yaml"))["claims"]
        return schema.section("claims", today)


def _read(path: Path) -> str:
    if not path.exists():
        raise UserError(f"{path}: no such file; run the grid first (it records its config beside its tables)")
    return path.read_text(encoding="utf-8")


def _key(row: dict) -> str:
    """A row's check without the best baseline it happened to name, so replications compare."""
    return re.sub(r" \([a-z_0-9]+\)$", "", row["check"])


def _relabel(df: pd.DataFrame, picks: dict, by: str) -> pd.DataFrame:
    """The rows of the picked seeds of each group `by`, the i-th pick relabelled seed i."""
    parts = []
    for name, g in df.groupby(by, sort=False):
        seeds = g.groupby("seed")
        parts += [seeds.get_group(seed).assign(seed=i) for i, seed in enumerate(picks.get(name, []))]
    return pd.concat(parts, ignore_index=True)


def two_stage(truth_of, run_of, words_of, checks, n_truth: int, per_truth: int = 2, seed: int = 0,
              jobs: int = 1) -> dict:
    """Per check: how often each word came out of all simulated runs, and the probability that
    two runs drawn from one truth give the same word, averaged over `n_truth` truths, with its
    Monte-Carlo standard error. Truth i has its own generator, seeded (seed, i), so the numbers do
    not depend on `jobs` (processes sharing the truths): `truth_of(rng)` draws a truth,
    `run_of(truth, rng)` a run from it and `words_of(run, j)` the {check: word} of the j-th run
    of all (a check it lacks reads INCONCLUSIVE). Each truth's `per_truth` runs give the unbiased
    same-word share of their pairs, sum c(c-1) / (m(m-1))."""

    def simulate(i: int) -> list[dict]:
        rng = np.random.default_rng([seed, i])
        truth = truth_of(rng)
        return [words_of(run_of(truth, rng), i * per_truth + j) for j in range(per_truth)]

    counts = {check: dict.fromkeys(WORDS, 0) for check in checks}
    same = {check: [] for check in checks}
    for outs in _mapped(simulate, n_truth, jobs):
        for check in checks:
            got = [w.get(check, claims.INCONCLUSIVE) for w in outs]
            for w in got:
                counts[check][w] += 1
            same[check].append(sum(got.count(w) * (got.count(w) - 1) for w in WORDS) / (per_truth * (per_truth - 1)))
    runs = n_truth * per_truth
    return {check: {"p": {w: c / runs for w, c in counts[check].items()}, "agreement": float(np.mean(same[check])),
                    "mc_se": float(np.std(same[check], ddof=1) / np.sqrt(n_truth)) if n_truth > 1 else np.nan}
            for check in checks}


_TASK = None  # the function a forked worker maps: inherited, never pickled


def _call(i: int):
    return _TASK(i)


def _mapped(fn, n: int, jobs: int) -> list:
    """[fn(0), ..., fn(n - 1)], on `jobs` forked processes when more than one (each scorecard is
    seconds of pure computation, so processes, not threads)."""
    global _TASK
    if jobs <= 1 or n <= 1:
        return [fn(i) for i in range(n)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    _TASK = fn
    try:
        with ProcessPoolExecutor(min(jobs, n), mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_call, range(n), chunksize=1))
    finally:
        _TASK = None


def agreement(run: Run, factors: list[float], n_sim: int = 400, n_perm: int = 1000,
              n_boot: int = 1000, predictive: bool = True, per_truth: int = 2, jobs: int = 1) -> pd.DataFrame:
    """Per deciding row and unit factor: how often each word comes out of the simulated runs, and
    the probability that two independent runs give the same word, from `n_sim` truths (each the
    run's units drawn with replacement; the run itself when not `predictive`) of `per_truth`
    runs each, with its Monte-Carlo standard error; `jobs` processes share the truths."""
    st = {**run.claims["stats"], "n_perm": n_perm, "n_boot": n_boot}
    observed = run.words(run.claims["stats"])

    def truth_of(rng) -> Run:
        return run.with_tables(*run.resampled(1.0, rng)) if predictive else run

    rows = []
    for index, factor in enumerate(factors):
        # each scorecard its own resampling seed, apart for every factor
        first = st["seed"] + index * n_sim * per_truth
        found = two_stage(truth_of, lambda truth, rng, f=factor: truth.resampled(f, rng),
                          lambda tables, j, first=first: run.words({**st, "seed": first + j}, *tables),
                          list(observed), n_sim, per_truth, seed=st["seed"] + index, jobs=jobs)
        rows += [{"check": check, "observed": observed[check], "factor": factor,
                  **{f"p_{w.lower()}": r["p"][w] for w in WORDS}, "agreement": r["agreement"], "mc_se": r["mc_se"]}
                 for check, r in found.items()]
    return pd.DataFrame(rows)


def agreement_table(run: Run, table: pd.DataFrame, target: float = 0.9) -> str:
    """The Markdown table: per deciding row, its units in the run, the agreement at each factor,
    and the units it needs for `target` (or that the factors tried do not reach it)."""
    factors = sorted(table["factor"].unique())
    lines = ["| check | word | units | " + " | ".join(f"agreement at {f:g}x (± MC se)" for f in factors) + " | needs |",
             "|---|---|---|" + "---|" * len(factors) + "---|"]
    for check, g in table.groupby("check", sort=False):
        g = g.set_index("factor")
        units = _units(run, check)
        # the fewest units from which on every multiple tried gives the run's word, and agrees on it:
        # a row that is INCONCLUSIVE for want of units agrees well below them, on another word
        steady = {f: g.loc[f, "agreement"] >= target and _modal(g.loc[f]) == g.iloc[0]["observed"] for f in factors}
        held = [f for i, f in enumerate(factors) if all(steady[x] for x in factors[i:])]
        if not held:
            needs = f"more than {round(factors[-1] * units)}: not decidable at this cost"
        elif g.iloc[0]["observed"] == claims.INCONCLUSIVE:  # steady, but undecided: no count decides it
            needs = f"INCONCLUSIVE at every count to {round(factors[-1] * units)}: not decidable at this cost"
        else:
            needs = f"{round(held[0] * units)}"
        cells = " | ".join(_cell(g.loc[f]) for f in factors)
        lines.append(f"| {check} | {g.iloc[0]['observed']} | {units} | {cells} | {needs} |")
    return "\n".join(lines)


def _cell(row: pd.Series) -> str:
    """An agreement with its Monte-Carlo standard error, where the table has one."""
    se = row.get("mc_se", np.nan)
    return f"{row['agreement']:.2f}" + ("" if pd.isna(se) else f" ± {se:.2f}")


def _modal(row: pd.Series) -> str:
    """The word a row's simulated runs gave most often."""
    return max(WORDS, key=lambda w: row[f"p_{w.lower()}"])


def _units(run: Run, check: str) -> int:
    """The units a row rests on: E4's pairs for claim 3; for a claim-1 row (it names a scheme)
    the seeds of claim 1's tasks; for the attention analysis, of its experiment's tasks; else of
    the task the row names."""
    if check.startswith(("greedy", "attention - random", "short model")):
        return len(run.units.get("E4 pairs", []))
    kind = {"E1": "sparse_parity", "E2": "scratchpad_parity", "E3": "variable_assignment"}.get(check.split(" ")[0])
    if kind:
        tasks = [t for t, k in run.kinds.items() if k == kind]
    else:
        tasks = [t for t in run.units if check.startswith(f"{t} ")] or run.plan["sparse_tasks"]
    return max(len(run.units.get(t, [])) for t in tasks)


def split_half(run: Run) -> str:
    """Markdown: each claim's word on the whole run and on each half of its units, then the
    deciding rows whose word differs between the halves."""
    st = run.claims["stats"]
    whole, halves = run.rows(st), [run.rows(st, *run.half(i)) for i in (0, 1)]
    claim_names = sorted({r["claim"] for r in whole})
    lines = ["| claim | whole run | first half | second half |", "|---|---|---|---|"]
    lines += [f"| {claims.heading(c)} | " + " | ".join(claims.verdict(rows, c) for rows in (whole, *halves)) + " |"
              for c in claim_names]
    words = [{_key(r): r["result"] for r in rows if r["result"] in WORDS} for rows in halves]
    differ = [(k, words[0][k], words[1].get(k, "-")) for k in words[0] if words[1].get(k) != words[0][k]]
    lines += ["", f"Deciding rows whose word differs between the halves: {len(differ)}."]
    if differ:
        lines += ["", "| check | first half | second half |", "|---|---|---|"]
        lines += [f"| {k} | {a} | {b} |" for k, a, b in differ]
    return "\n".join(lines)


def write_block(path, results_dir: str, text: str) -> None:
    """Put `text` between `<!-- power: RESULTS_DIR -->` and `<!-- end power -->` in `path`."""
    doc = Path(path).read_text(encoding="utf-8")
    start, end = f"<!-- power: {results_dir} -->\n", "<!-- end power -->"
    if start not in doc or end not in doc.split(start, 1)[1]:
        raise UserError(f"{path}: no block '{start.strip()}' ... '{end}' to write the table into")
    head, rest = doc.split(start, 1)
    write_text(path, head + start + text + "\n" + end + rest.split(end, 1)[1])
