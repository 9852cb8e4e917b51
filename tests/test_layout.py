"""Where a run's files are (lengthgen.layout): the cell grid, E4's files, the intermediates
and which of them a run rebuilds."""

from pathlib import Path

import pytest

from lengthgen import config, layout

E1 = {"name": "e1", "kind": "sparse_parity", "schemes": ["rope", "nope"], "eval": {"lengths": [6, 12]},
      "params": {"k": 1, "n_min": 4, "n_max": 6}}
LANGUAGE = {"seeds": [0, 1], "models": ["long", "short"], "tokenizer": {"vocab_size": 512}, "T_long": 32,
            "T_short": 8}


def _config(schema, results_dir="results", **top):
    raw = {"tasks": [E1], "seeds": [0, 1], "schemes": {"rope": {"encoding": "rope"}, "nope": {"encoding": "none"}},
           "language": None, "results_dir": results_dir, **top}
    return config.validate(raw, schema)


def test_the_grid_is_every_task_scheme_and_seed_in_order(schema):
    cfg = _config(schema)
    assert layout.cells(cfg) == [("e1", "rope", 0), ("e1", "rope", 1), ("e1", "nope", 0), ("e1", "nope", 1)]
    assert layout.cell_paths(cfg, "runs/{task}/{scheme}/seed{seed}/sweep.parquet")[1] == \
        "results/runs/e1/rope/seed1/sweep.parquet"
    tokens = layout.cell_tokens(cfg)
    assert tokens[2] == config.cell_token(cfg, "e1", "nope", 0) and len(set(tokens)) == 4


@pytest.mark.parametrize(("sets", "expected"), [
    ("per_seed", ["test-seed0", "test-seed1", "train-seed0", "train-seed1"]),
    ("shared", ["test", "train"]),
])
def test_the_datasets_are_each_seeds_own_draws_or_the_shared_ones(schema, sets, expected):
    cfg = _config(schema, train_sets=sets, test_sets=sets)
    assert layout.datasets(cfg) == [f"results/data/e1/{split}.parquet" for split in expected]


def test_e4s_files_are_each_models_and_each_pairs_and_none_without_e4(schema):
    cfg = _config(schema, language=LANGUAGE)
    assert layout.language_model_keys(cfg) == [("long", 0), ("short", 0), ("long", 1), ("short", 1)]
    assert layout.language_models(cfg, "meta.json")[1] == "results/language/models/short/seed0/meta.json"
    assert layout.pair_scores(cfg) == [f"results/language/scores/seed{s}.parquet" for s in (0, 1)]
    assert layout.language_score_table(cfg) == ["results/tables/language_scores.csv"]
    assert len(layout.language_tables(cfg)) == 3 and len(layout.language_attention_tables(cfg)) == 2
    bare = _config(schema, attention=None)
    assert not (layout.language_model_keys(bare) or layout.pair_scores(bare) or layout.language_tables(bare)
                or layout.language_attention_tables(bare) or layout.attention_outputs(bare)
                or layout.attention_table(bare))
    assert layout.attention_outputs(cfg) == ["results/tables/attention.csv", "results/figures/attention.png"]


def test_the_intermediates_are_every_file_the_tables_are_made_from(schema):
    cfg = _config(schema, language=LANGUAGE)
    files = layout.intermediates(cfg)
    cell_files = len(layout.CELL_FILES) + 1  # and attention.parquet, the attention analysis being on
    language = 2 + len(layout.TOKEN_FILES) + 4 * len(layout.LM_FILES) + 2 + 2  # corpus, tokenizer, ..., attention
    assert len(files) == len(set(files)) == 4 + 4 * cell_files + language
    assert "results/runs/e1/nope/seed1/attention.parquet" in files and "results/language/tokens/tokens.json" in files
    assert not [f for f in files if "/tables/" in f or f.startswith("resources/")]
    assert len(layout.intermediates(_config(schema, attention=None))) == 4 + 4 * len(layout.CELL_FILES)


def _touch(*paths):
    for path in map(Path, paths):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def test_missing_intermediates_are_named_only_when_lost_under_the_tables(schema, tmp_path):
    cfg = _config(schema, str(tmp_path), attention=None)
    files = layout.intermediates(cfg)
    assert layout.missing_intermediates(cfg) == (files, "")  # a first run
    _touch(tmp_path / "tables/length_sweep.csv")
    assert layout.missing_intermediates(cfg) == (files, "")  # a fresh clone, or after `make clean`
    _touch(*files[1:])
    lost = f"lengthgen: missing under the tables: {files[0]}"
    assert layout.missing_intermediates(cfg) == (files[:1], f"{lost}; a run rebuilds it")
    Path(files[3]).unlink()
    assert layout.missing_intermediates(cfg) == ([files[0], files[3]], f"{lost} and 1 more; a run rebuilds them")
    _touch(files[0], files[3])
    assert layout.missing_intermediates(cfg) == ([], "")


def test_the_pages_made_from_the_tables_are_the_scorecards(schema):
    assert layout.made_from_tables(_config(schema, "out")) == [
        "out/tables/claims.csv", "out/tables/claims.md", "out/tables/claims.html", "out/tables/summary.html"]
