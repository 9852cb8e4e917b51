"""Where a run's files are, read from a resolved config: the cell grid, E4's language models and
their pairs, the tables the claims read, and the intermediate files the tables are made from,
of which `all` asks for the missing ones (docs/design.md, "Missing intermediate files are
rebuilt"). Every path is under the config's `results_dir`, so that one configuration never reads,
or takes for up to date, another's files."""

from __future__ import annotations

import os

from lengthgen import config as lgconfig
from lengthgen.support.fileio import MADE_FROM_TABLES

# What a cell's training and sweep write, under its runs/ directory.
CELL_FILES = ("model.pt", "train_log.parquet", "meta.json", "sweep.parquet")
LM_FILES = ("model.pt", "train_log.parquet", "meta.json")
TOKEN_FILES = ("train.npy", "train_docs.npy", "validation.npy", "validation_docs.npy", "tokens.json")
LANGUAGE_TABLES = ("influence.csv", "language_train.csv", "language_scores.csv")


def results(config: dict, path: str) -> str:
    return f"{config['results_dir']}/{path}"


def cells(config: dict) -> list[tuple[str, str, int]]:
    """Every (task, scheme, seed) of the grid."""
    return [(t["name"], s, seed) for t in config["tasks"] for s in t["schemes"] for seed in t["seeds"]]


def cell_paths(config: dict, pattern: str) -> list[str]:
    """`pattern` (with {task}, {scheme} and {seed}) for every cell, in the order of cells()."""
    return [results(config, pattern.format(task=t, scheme=s, seed=seed)) for t, s, seed in cells(config)]


def cell_tokens(config: dict) -> list[str]:
    """The identity each cell's checkpoint and sweep must record (lengthgen.support.identity), in
    the order of cells(): a file of another cell in a cell's directory would count as this one."""
    return [lgconfig.cell_token(config, t, s, seed) for t, s, seed in cells(config)]


def datasets(config: dict) -> list[str]:
    """Every training and test set the cells read (each seed's own draws, or the shared ones)."""
    splits = {(t, split(config, seed)) for t, _, seed in cells(config)
              for split in (lgconfig.train_split, lgconfig.test_split)}
    return [results(config, f"data/{t}/{split}.parquet") for t, split in sorted(splits)]


def language_model_keys(config: dict) -> list[tuple[str, int]]:
    """(model, seed) of every E4 language model: each model of `language.models` once per seed
    of `language.seeds` (one pair each); none when the config does not run E4."""
    lang = config["language"]
    return [(m, seed) for seed in lang["seeds"] for m in lang["models"]] if lang else []


def language_models(config: dict, name: str) -> list[str]:
    """File `name` of every E4 language model, in the order of language_model_keys()."""
    return [results(config, f"language/models/{m}/seed{seed}/{name}") for m, seed in language_model_keys(config)]


def _pair_paths(config: dict, pattern: str) -> list[str]:
    """`pattern` (with {seed}) for every pair of E4 language models; none when E4 does not run."""
    seeds = config["language"]["seeds"] if config["language"] else []
    return [results(config, pattern.format(seed=seed)) for seed in seeds]


def pair_scores(config: dict) -> list[str]:
    """Each pair's per-token scores."""
    return _pair_paths(config, "language/scores/seed{seed}.parquet")


def language_attention_tables(config: dict) -> list[str]:
    """Each pair's long-model attention at its scored tokens (when the attention analysis runs)."""
    return _pair_paths(config, "language/attention/seed{seed}.parquet") if config["attention"] else []


def language_tables(config: dict) -> list[str]:
    """E4's tables, when the config runs it."""
    return [results(config, f"tables/{name}") for name in LANGUAGE_TABLES] if config["language"] else []


def language_score_table(config: dict) -> list[str]:
    """E4's per-token table, which the claim-3 rows resample (none when E4 does not run)."""
    return [results(config, "tables/language_scores.csv")] if config["language"] else []


def attention_table(config: dict) -> list[str]:
    """What the claims read for the attention rows (none when `attention` is null)."""
    return [results(config, "tables/attention.csv")] if config["attention"] else []


def attention_outputs(config: dict) -> list[str]:
    """The attention analysis's table and figure (none when `attention` is null)."""
    return attention_table(config) + ([results(config, "figures/attention.png")] if config["attention"] else [])


def made_from_tables(config: dict) -> list[str]:
    """The pages of the tables folder made from its tables: the scorecard and the report's HTML
    of it and of the summary. A job that rebuilds a table removes them before it reads anything:
    Snakemake removes only a failed job's own outputs, so a failed aggregation would leave the
    old scorecard beside no table to back it. They are remade whenever that job runs anyway; a
    Snakemake-side fix (onerror) would miss killed runs."""
    return [results(config, f"tables/{name}") for name in MADE_FROM_TABLES]


def _language_intermediates(config: dict) -> list[str]:
    if not config["language"]:
        return []
    files = [results(config, f"language/{name}") for name in ("corpus.parquet", "tokenizer.json")]
    files += [results(config, f"language/tokens/{name}") for name in TOKEN_FILES]
    files += [f for name in LM_FILES for f in language_models(config, name)]
    return files + pair_scores(config) + language_attention_tables(config)


def intermediates(config: dict) -> list[str]:
    """Every file the tables are made from (not the fetched corpus archive, a download cache)."""
    names = CELL_FILES + (("attention.parquet",) if config["attention"] else ())
    files = datasets(config)
    for name in names:
        files += cell_paths(config, f"runs/{{task}}/{{scheme}}/seed{{seed}}/{name}")
    return files + _language_intermediates(config)


def missing_intermediates(config: dict) -> tuple[list[str], str]:
    """The intermediate files that are missing, and a line naming them when they were lost under
    existing tables ("" otherwise). Snakemake rebuilds a missing file only when a job that has to
    run asks for it, so one lost under up-to-date tables (removed by a job that then failed, or
    by a killed run) would stay missing while every later run said "Nothing to be done"; `all`
    asks for these instead, and what was made from them reruns. Only the missing ones: `all`
    prints its inputs. No line for a first run, a fresh clone or `make clean`, which have tables
    and none of the intermediates."""
    files = intermediates(config)
    missing = [f for f in files if not os.path.exists(f)]
    if not missing or len(missing) == len(files) or not os.path.exists(results(config, "tables/length_sweep.csv")):
        return missing, ""
    which = f"{missing[0]}; a run rebuilds it"
    if missing[1:]:
        which = f"{missing[0]} and {len(missing) - 1} more; a run rebuilds them"
    return missing, f"lengthgen: missing under the tables: {which}"
