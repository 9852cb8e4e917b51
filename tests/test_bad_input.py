"""Bad input: every mistake a user can make ends with one line naming the key or file,
exit status non-zero, no traceback, and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO, error_lines, run_lengthgen, run_snakemake

# A valid task to start from; each case breaks one thing.
GOOD_TASK = {
    "name": "bad_case",
    "kind": "sparse_parity",
    "schemes": ["rope"],
    "train_examples": 100,
    "params": {"k": 2, "n_min": 6, "n_max": 10},
    "eval": {"lengths": [10, 20], "examples": 10},
}


def _task(**changes) -> dict:
    task = json.loads(json.dumps(GOOD_TASK))
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            task[outer][inner] = value
        else:
            task[key] = value
    return task


ASSIGNMENT = {
    "name": "bad_assignment",
    "kind": "variable_assignment",
    "schemes": ["ppc"],
    "train_examples": 100,
    "params": {"n_min": 4, "n_max": 6, "depth_max": 3, "variables": 16},
    "eval": {"lengths": [6, 12], "examples": 10},
}
PPC_SCHEMES = {"ppc": {"encoding": "rope", "positions": "coupled", "position_head": "pointer"}}


def _params(**params) -> dict:
    """An override whose task is ASSIGNMENT with changed params."""
    return {"tasks": [{**ASSIGNMENT, "params": {**ASSIGNMENT["params"], **params}}]}


# (id, config override, distinctive substring of the error line)
CONFIG_CASES = [
    ("unknown_task_kind", {"tasks": [_task(kind="sparse_parityy")]}, "tasks[0].kind"),
    ("unknown_scheme", {"tasks": [_task(schemes=["rope", "xpos"])]}, "tasks[0].schemes"),
    ("k_larger_than_n_min", {"tasks": [_task(**{"params.k": 7})]}, "tasks[0].params.k"),
    ("empty_eval_lengths", {"tasks": [_task(**{"eval.lengths": []})]}, "tasks[0].eval.lengths"),
    ("zero_max_steps", {"tasks": [_task()], "train": {"max_steps": 0}}, "config.train.max_steps"),
    ("negative_seed", {"tasks": [_task()], "seeds": [0, -1]}, "config.seeds[1]"),
    ("negative_data_seed", {"tasks": [_task()], "data_seed": -5}, "config.data_seed"),
    ("max_position_too_small", {"tasks": [_task()], "model": {"max_position": 4}}, "tasks[0].model.max_position"),
    ("typo_top_level_key", {"tasks": [_task()], "seeeds": [0]}, "'seeeds'"),
    ("results_dir_trailing_slash", {"tasks": [_task()], "results_dir": "results/"}, "config.results_dir"),
    ("device_not_in_enum", {"tasks": [_task()], "device": "gpu"}, "config.device"),
    ("task_zero_max_steps", {"tasks": [_task(train={"max_steps": 0})]}, "tasks[0].train.max_steps"),
    # E2/E3: impossible depth for N, training sequences beyond max_position, PPC without coupled IDs
    ("depth_exceeds_statements", {"tasks": [ASSIGNMENT], "schemes": PPC_SCHEMES} | _params(depth_max=5),
     "tasks[0].params.depth_max"),
    ("too_few_variables", {"tasks": [ASSIGNMENT], "schemes": PPC_SCHEMES} | _params(variables=6),
     "tasks[0].params.variables"),
    ("coupled_max_position_too_small", {"tasks": [{**ASSIGNMENT, "model": {"max_position": 12}}],
                                        "schemes": PPC_SCHEMES}, "tasks[0].model.max_position"),
    ("ppc_on_task_without_coupled_ids", {"tasks": [_task(schemes=["ppc"])], "schemes": PPC_SCHEMES},
     "scheme 'ppc' needs coupled position IDs"),
    ("head_without_coupled_positions", {"tasks": [{**ASSIGNMENT, "schemes": ["ptr"]}], "schemes": {"ptr": {
        "encoding": "rope", "position_head": "classifier"}}}, "config.schemes.ptr.position_head"),
    ("pointer_on_task_without_coupled_ids", {"tasks": [_task(schemes=["ptr"])], "schemes": {"ptr": {
        "encoding": "rope", "position_head": "pointer"}}}, "scheme 'ptr' needs coupled position IDs"),
    ("unknown_scheme_override", {"tasks": [{**ASSIGNMENT, "scheme_options": {"pcc": {"copy": True}}}],
                                 "schemes": PPC_SCHEMES}, "tasks[0].scheme_options: unknown scheme 'pcc'"),
    # E4: the short context must be shorter; k cannot exceed the distant window
    ("short_not_below_long", {"tasks": [_task()], "language": {"T_long": 64, "T_short": 64}},
     "config.language.T_short: 64 must be below T_long (64)"),
    ("k_beyond_distant_window", {"tasks": [_task()], "language": {"T_long": 40, "T_short": 36,
                                                                   "influence": {"k": [1, 8]}}},
     "config.language.influence.k: 8 exceeds the distant window"),
    ("greedy_k_not_scored", {"tasks": [_task()], "language": {"influence": {"k": [1, 2]}}},
     "config.claims.language.greedy_k: 4"),
    ("scoring_without_greedy", {"tasks": [_task()], "language": {"influence": {"methods": ["random"]}}},
     "config.language.influence.methods: must include greedy"),
    ("unknown_corpus_source", {"tasks": [_task()], "language": {"corpus": {"source": "c4"}}},
     "config.language.corpus.source"),
]


def assert_one_line_error(proc, needle: str, prefix: str = "lengthgen: error:") -> str:
    assert proc.returncode != 0, f"exit status 0\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = error_lines(proc.stderr, prefix)
    assert len(lines) == 1, f"expected one line starting {prefix!r} in stderr:\n{proc.stderr}"
    assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def temp_files(root: Path) -> list[Path]:
    """Leftovers of fileio.atomic_path (".<name>.tmp<pid>") anywhere under root."""
    return [p for p in root.rglob(".*") if ".tmp" in p.name]


@pytest.mark.parametrize("override,needle", [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_bad_config(tmp_path, schema, override, needle):
    """Each case as the Snakefile reads a --configfile (lengthgen.config.load_run_config, under
    config.yaml): one UserError naming the key and the file that set it."""
    from lengthgen import config
    from lengthgen.support.errors import UserError

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(override))
    with pytest.raises(UserError) as err:
        config.load_run_config(REPO, override, [bad], schema)
    assert needle in str(err.value) and "\n" not in str(err.value)


# Through Snakemake, one case of the schema's and one of the cross-key checks: the Snakefile
# turns the UserError above into one line, exit status non-zero, nothing written.
SNAKEMAKE_CASES = [c for c in CONFIG_CASES if c[0] in ("unknown_task_kind", "depth_exceeds_statements")]


@pytest.mark.workflow
@pytest.mark.parametrize("override,needle", [c[1:] for c in SNAKEMAKE_CASES], ids=[c[0] for c in SNAKEMAKE_CASES])
def test_bad_config_through_snakemake(tmp_path, override, needle):
    wf = tmp_path / "wf"
    wf.mkdir()
    (wf / "bad.yaml").write_text(yaml.safe_dump(override))
    proc = run_snakemake(wf, "-n", "-c1", "--configfile", "bad.yaml", timeout=120)
    line = assert_one_line_error(proc, needle)
    assert "bad.yaml" in line
    assert not (wf / "results").exists()


GOOD = [{"tasks": [_task()]}, {"tasks": [ASSIGNMENT], "schemes": PPC_SCHEMES}]


@pytest.mark.parametrize("good", GOOD, ids=["sparse_parity", "variable_assignment"])
def test_good_config_control(tmp_path, schema, good):
    """The unbroken tasks pass validation, so each case above fails for its one change."""
    from lengthgen import config

    (tmp_path / "good.yaml").write_text(yaml.safe_dump(good))
    loaded = config.load_run_config(REPO, good, [tmp_path / "good.yaml"], schema)
    assert loaded["tasks"][0]["name"] == good["tasks"][0]["name"]


@pytest.mark.workflow
def test_good_config_control_through_snakemake(tmp_path):
    good = GOOD[0]
    wf = tmp_path / "wf"
    wf.mkdir()
    (wf / "good.yaml").write_text(yaml.safe_dump(good))
    proc = run_snakemake(wf, "-n", "-c1", "--configfile", "good.yaml", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "lengthgen: error:" not in proc.stderr
    assert not (wf / "results").exists()


# Cross-key checks, on lengthgen.config directly (test_bad_config shows that the workflow turns
# its UserError into the one line): (id, override, the error's start).
CROSS_KEY_CASES = [
    ("options_for_a_scheme_not_run", {"tasks": [{**ASSIGNMENT, "scheme_options": {"pc": {"copy": True}}}],
                                      "schemes": {**PPC_SCHEMES, "pc": {"encoding": "rope"}}},
     "config.tasks[0].scheme_options.pc: the task does not run 'pc'"),
    ("bad_option_names_its_path", {"tasks": [{**ASSIGNMENT, "scheme_options": {"ppc": {"cpy": True}}}],
                                   "schemes": PPC_SCHEMES}, "config.tasks[0].scheme_options.ppc:"),
    ("training_beyond_max_position", {"tasks": [_task(**{"params.n_max": 40}, model={"max_position": 40})]},
     "config.tasks[0].model.max_position: 40 is below the longest sequence (n = 40: 43 tokens)"),
    ("test_beyond_an_ape_table", {"tasks": [_task(schemes=["ape"], **{"eval.lengths": [8, 80]},
                                                  model={"max_position": 40})]},
     "config.tasks[0].model.max_position: 40 is below the longest sequence (n = 80: 83 tokens), which 'ape' looks up"),
    ("files_without_a_path", {"tasks": [_task()], "language": {"corpus": {"source": "files"}}},
     "config.language.corpus.path: source files needs"),
]


@pytest.mark.parametrize("override,start", [c[1:] for c in CROSS_KEY_CASES], ids=[c[0] for c in CROSS_KEY_CASES])
def test_cross_key_config_errors_name_their_key(override, start):
    from lengthgen import config
    from lengthgen.support.errors import UserError

    root = Path(__file__).resolve().parents[1]
    schema = config.load_yaml(root / "workflow/schemas/config.schema.yaml")
    base = yaml.safe_load((root / "config.yaml").read_text())
    with pytest.raises(UserError) as err:
        config.validate({**base, **override}, schema)
    assert str(err.value).startswith(start), str(err.value)


def test_the_schema_defaults_are_config_yaml_values():
    """The schema documents each key with its default. Those defaults are config.yaml's own values
    (the grid aside: tasks, the named schemes, and language, which is null unless set), so that
    neither file misleads about the other."""
    from lengthgen import config

    root = Path(__file__).resolve().parents[1]
    schema = config.load_yaml(root / "workflow/schemas/config.schema.yaml")
    base = yaml.safe_load((root / "config.yaml").read_text())
    full = config.validate(base, schema)
    bare = config.validate({"tasks": base["tasks"], "schemes": base["schemes"], "language": {}}, schema)
    assert {k: v for k, v in bare.items() if k != "tasks"} == {k: v for k, v in full.items() if k != "tasks"}


# -- CLI ----------------------------------------------------------------------------------

EVAL = json.dumps({"device": "cpu", "threads": 1, "batch_size": 100})


def test_train_on_corrupted_parquet(tmp_path, tiny_cell):
    data = tmp_path / "corrupt.parquet"
    data.write_bytes(np.random.default_rng(0).bytes(2048))
    out_dir, ckpt = tmp_path / "run", tmp_path / "ckpt" / "last.pt"
    proc = run_lengthgen(
        "train",
        "--cell",
        json.dumps(tiny_cell(task="tiny")),
        "--data",
        data,
        "--out-dir",
        out_dir,
        "--checkpoint",
        ckpt,
        cwd=tmp_path,
    )
    assert_one_line_error(proc, str(data))
    assert not (out_dir / "model.pt").exists()
    assert not ckpt.exists()
    assert not temp_files(tmp_path)


def test_sweep_with_model_of_another_task(tmp_path, tiny_cell, write_sparse_parity):
    from lengthgen.training.train import train

    a = write_sparse_parity("task_a")
    b = write_sparse_parity("task_b")
    run_dir = tmp_path / "runs" / "task_a"
    train(tiny_cell(task="task_a", max_steps=2), a["train"], run_dir, tmp_path / "ckpt.pt", log=lambda _msg: None)
    model = run_dir / "model.pt"
    assert model.exists()
    out = tmp_path / "sweep.parquet"
    proc = run_lengthgen("sweep", "--model", model, "--data", b["test"], "--eval", EVAL, "--out", out, cwd=tmp_path)
    line = assert_one_line_error(proc, str(model))
    assert "task_a" in line and "task_b" in line
    assert not out.exists()
    assert not temp_files(tmp_path)


def test_sweep_with_missing_model(tmp_path, tiny_dataset):
    model = tmp_path / "nowhere" / "model.pt"
    out = tmp_path / "sweep.parquet"
    proc = run_lengthgen(
        "sweep", "--model", model, "--data", tiny_dataset["test"], "--eval", EVAL, "--out", out, cwd=tmp_path
    )
    assert_one_line_error(proc, str(model))
    assert not out.exists()
    assert not temp_files(tmp_path)


def test_generate_with_invalid_json(tmp_path):
    out = tmp_path / "data" / "train.parquet"
    proc = run_lengthgen("generate", "--task", '{"name": "x", kind: sparse_parity}', "--out", out, cwd=tmp_path)
    # argparse reports this one ("lengthgen generate: error: argument --task: ...")
    assert_one_line_error(proc, "--task", prefix="lengthgen generate: error:")
    assert "not valid JSON" in proc.stderr
    assert not out.exists()
    assert not out.parent.exists()
    assert not temp_files(tmp_path)


# -- E4 inputs ------------------------------------------------------------------------------


def _corpus(tmp_path, texts: dict) -> Path:
    for name, text in texts.items():
        (tmp_path / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "docs" / name).write_text(text)
    return tmp_path / "docs"


@pytest.mark.parametrize(("case", "files", "needle"), [
    ("missing", {}, "no files match"),
    ("empty", {"a.txt": "  \n", "b.txt": ""}, "no documents"),
    ("corrupted_shard", {"a.jsonl": '{"text": "fine"}\n{"text": broken\n'}, "a.jsonl"),
])
def test_corpus_bad_input(tmp_path, case, files, needle):
    docs = _corpus(tmp_path, files)
    pattern = str(docs / "*.jsonl") if case == "corrupted_shard" else str(docs / "*.txt")
    out = tmp_path / "out" / "corpus.parquet"
    proc = run_lengthgen("corpus", "--config", json.dumps({"source": "files", "path": pattern}), "--out", out,
                         cwd=tmp_path)
    assert_one_line_error(proc, needle)
    assert not out.exists() and not temp_files(tmp_path)


@pytest.mark.subprocess
def test_corpus_hub_id_offline(tmp_path):
    out = tmp_path / "corpus.parquet"
    cfg = {"source": "openwebtext", "dataset": "Skylion007/openwebtext", "max_documents": 10}
    proc = subprocess_with_env(["corpus", "--config", json.dumps(cfg), "--out", str(out)], tmp_path,
                               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    line = assert_one_line_error(proc, "language.corpus.dataset")
    assert "language.corpus.path" in line  # says how to point at local shards
    assert not out.exists()


def subprocess_with_env(args, cwd, **env):
    import subprocess

    from conftest import PYTHON, REPO, venv_env

    return subprocess.run([PYTHON, "-m", "lengthgen", *args], cwd=cwd, text=True, capture_output=True,
                          env=venv_env(PYTHONPATH=str(REPO / "src"), **env), timeout=300)


def test_score_with_a_token_stream_of_another_tokenizer(tmp_path):
    """Models and streams made with one tokenizer, scored with another: one line, nothing written."""
    from lengthgen.language import corpus, lm, tokenizer

    rng = np.random.default_rng(0)
    docs = _corpus(tmp_path, {f"d{i}.txt": " ".join(rng.choice(["a", "bb", "ccc", "dd"], 200)) for i in range(12)})
    corpus.build({"source": "files", "path": str(docs / "*.txt"), "validation_fraction": 0.3}, tmp_path / "c.parquet")
    tokenizer.train({"kind": "bpe", "vocab_size": 270}, tmp_path / "c.parquet", tmp_path / "one.json")
    tokenizer.train({"kind": "gpt2"}, tmp_path / "c.parquet", tmp_path / "two.json")
    tokenizer.tokenize(tmp_path / "one.json", tmp_path / "c.parquet", tmp_path / "tokens")
    spec = {"name": "long", "context": 8, "pose_target": None, "seed": 0, "device": "cpu", "threads": 1,
            "model": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 32, "dropout": 0.0, "max_position": 64},
            "train": {"batch_size": 2, "lr": 1e-3, "min_lr_ratio": 0.1, "weight_decay": 0.0, "warmup_steps": 1,
                      "max_steps": 2, "grad_clip": 1.0, "checkpoint_every": 5, "eval_every": 2, "eval_windows": 2}}
    lm.train_lm(spec, tmp_path / "one.json", tmp_path / "tokens", tmp_path / "m", tmp_path / "ck.pt", log=print)
    cfg = {"T_long": 8, "T_short": 4, "device": "cpu", "threads": 1, "models": ["long"],
           "influence": {"screen": 10, "targets": 2, "delta": 0.0, "k": [1], "methods": ["greedy"],
                         "coupling": "shared", "seed": 0, "batch_size": 8, "targets_per_batch": 2}}
    out = tmp_path / "scores.parquet"
    proc = run_lengthgen("score", "--config", json.dumps(cfg), "--long", tmp_path / "m" / "model.pt",
                         "--tokenizer", tmp_path / "two.json", "--tokens", tmp_path / "tokens", "--out", out,
                         cwd=tmp_path)
    assert_one_line_error(proc, "tokens.json: token stream was made with tokenizer")
    assert not out.exists() and not temp_files(tmp_path)


# -- tables that are empty, another table, or another configuration's --------------------

SMOKE_SPARSE = ["smoke_k1", "smoke_k2"]


@pytest.fixture
def tables(committed_results) -> Path:
    """The default's tables as committed (the working tree's may be another CPU's run)."""
    return committed_results / "results/tables"


def _bad_table(tmp_path, tables: Path, case: str) -> tuple[Path, str]:
    """(a table a stage is given by mistake, the words its error line must hold)."""
    if case == "another_configuration":  # the default's sweep, read for the smoke grid's tasks
        return tables / "length_sweep.csv", "no rows of task(s) smoke_k1, smoke_k2"
    path = tmp_path / "length_sweep.csv"
    text = {"empty": "", "header_only": (tables / "length_sweep.csv").read_text().splitlines()[0] + "\n",
            "claims_table": (tables / "claims.csv").read_text()}[case]
    path.write_text(text)
    return path, {"empty": "empty file", "header_only": "without rows", "claims_table": "no column(s) task"}[case]


def _claims_config(schema) -> str:
    from lengthgen.config import fill_defaults

    claims = {}
    fill_defaults(claims, schema["properties"]["claims"], schema)
    return json.dumps(claims)


BAD_TABLES = ["empty", "header_only", "claims_table", "another_configuration"]


@pytest.mark.parametrize("case", BAD_TABLES)
@pytest.mark.parametrize("kind", ["sparse_parity", "coupling"])
def test_figure_of_a_bad_table(tmp_path, tables, case, kind):
    table, needle = _bad_table(tmp_path, tables, case)
    out = tmp_path / "figure.png"
    proc = run_lengthgen("figure", "--kind", kind, "--sweep-csv", table, "--tasks", *SMOKE_SPARSE,
                         "--train-max", *(["10"] * (2 if kind == "coupling" else 1)), "--out", out, cwd=tmp_path)
    line = assert_one_line_error(proc, str(table))
    assert needle in line
    assert not out.exists() and not temp_files(tmp_path)


@pytest.mark.parametrize("case", BAD_TABLES)
def test_claims_of_a_bad_table(tmp_path, tables, schema, case):
    table, needle = _bad_table(tmp_path, tables, case)
    csv, md = tmp_path / "claims.csv", tmp_path / "claims.md"
    proc = run_lengthgen("claims", "--sweep-csv", table, "--sparse-tasks", *SMOKE_SPARSE, "--train-max", "10",
                         "--config", _claims_config(schema), "--csv", csv, "--md", md, cwd=tmp_path)
    line = assert_one_line_error(proc, str(table))
    assert needle in line
    assert not csv.exists() and not md.exists() and not temp_files(tmp_path)


def test_figure_and_claims_of_their_own_table(tmp_path, tables, schema):
    """The control: the same commands on the default's own table and tasks succeed."""
    sweep, out = tables / "length_sweep.csv", tmp_path / "figure.png"
    sparse = ["sparse_parity"]
    proc = run_lengthgen("figure", "--sweep-csv", sweep, "--tasks", *sparse, "--train-max", "12", "--out", out,
                         cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 10_000
    csv, md = tmp_path / "claims.csv", tmp_path / "claims.md"
    proc = run_lengthgen("claims", "--sweep-csv", sweep, "--sparse-tasks", *sparse, "--train-max", "12",
                         "--config", _claims_config(schema), "--csv", csv, "--md", md, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "PASS" in csv.read_text()
