"""The claims stage: reads the run's tables, asks `claims` for every check's rows, and writes
the scorecard. The checks themselves (statistics, thresholds, verdict words) live in
`claims`; this module only decides which of them a run measured."""

from __future__ import annotations

from lengthgen.analysis import attention as attention_report
from lengthgen.analysis import budget, claims, language_scores
from lengthgen.analysis import scale as beyond
from lengthgen.analysis.aggregate import read_sweep


def build(sweep_csv, sparse_tasks: list[str], train_max: int, cfg: dict, coupling: dict, language, attention,
          csv_out, md_out, log=print, scale: dict | None = None, needle: dict | None = None,
          training=None) -> None:
    """Write claims.csv and claims.md from the sweep table and, where run, E4's per-token table
    (`language`: tables/language_scores.csv), the attention table (`attention`), and the
    analyses beyond the paper: E1 at several model sizes (`scale`: {task: "LxD"}) and the needle
    task (`needle`: {task: n_max}); `training` (tables/training.csv) says which models were cut by
    max_steps. `cfg` is the config's claims section with every key (the
    command line fills it from the schema)."""
    scale, needle = scale or {}, needle or {}
    sweep = read_sweep(sweep_csv, sorted({*sparse_tasks, *coupling, *scale, *needle}))
    sweep = budget.mark(sweep, budget.read(training) if training else None)  # a model cut by max_steps is unfit
    scores = language_scores.read(language) if language else None
    # per_model is read here, not in claims/: the paper's figures import claims, and an edit of
    # the attention table's code must not rerun them
    models = attention_report.per_model(attention_report.read(attention)) if attention else None
    rows = judge(sweep, scores, models, sparse_tasks, train_max, coupling, cfg, scale, needle)
    claims.write_scorecard(rows, csv_out, md_out, cfg.get("run", "exploratory"))
    for claim in sorted({r["claim"] for r in rows}):
        log(f"{claims.heading(claim)}: {claims.verdict(rows, claim)}")


def judge(sweep, scores, attention_models, sparse_tasks: list[str], train_max: int, coupling: dict, cfg: dict,
          scale: dict | None = None, needle: dict | None = None) -> list[dict]:
    """Every row of the scorecard from the run's tables (as read): what `build` writes, and what
    `lengthgen power` recomputes on resampled units."""
    scale, needle = scale or {}, needle or {}
    rows = claims.sparsity_checks(sweep, sparse_tasks, train_max, cfg["sparsity"], cfg["stats"]) if sparse_tasks else []
    rows += claims.coupling_checks(sweep, coupling, cfg["coupling"], cfg["stats"]) if coupling else []
    rows += beyond.scale_checks(sweep, scale, train_max, cfg["sparsity"], cfg["stats"])
    rows += beyond.needle_checks(sweep, needle, cfg["sparsity"], cfg["stats"])
    if scores is not None:
        rows += claims.language_checks(scores, cfg["language"], cfg["stats"])
    if attention_models is not None:
        rows += attention_rows(attention_models, sweep, sparse_tasks, train_max, coupling, cfg)
    ran = {"1 sparsity": sparse_tasks, "2 coupling": coupling, "3 language": scores is not None}
    missing = [claim for claim, tasks in ran.items() if not tasks]
    return sorted(rows + claims.unmeasured_rows(missing), key=lambda r: r["claim"])


def attention_rows(models, sweep, sparse_tasks, train_max, coupling: dict, cfg: dict) -> list[dict]:
    """The attention analysis's rows (`models`: attention_report.per_model of the attention
    table): E1 (the sparse tasks together), then each E2/E3 kind."""
    experiments = {}
    if sparse_tasks:
        experiments["E1 sparse parity"] = {"tasks": dict.fromkeys(sparse_tasks, train_max),
                                           "fit_min": cfg["sparsity"]["fit_min"]}
    for name, info in sorted(coupling.items()):
        label = attention_report.EXPERIMENTS[info["kind"]]
        experiments.setdefault(label, {"tasks": {}, "fit_min": cfg["coupling"]["fit_min"]})["tasks"][name] = \
            info["n_max"]
    return claims.attention_checks(models, sweep, experiments, cfg["attention"], cfg["stats"])
