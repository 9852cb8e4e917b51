"""Config files are read by lengthgen, not only by Snakemake: a missing file, a YAML syntax error
and a wrong type end in one line naming the file (and line, column, or key); config.yaml is found
beside the Snakefile, and a run from a subdirectory of the checkout is refused in one line."""

import shutil
import subprocess

import pytest
from conftest import VENV_BIN, error_lines, run_lengthgen, run_snakemake

from lengthgen import config
from lengthgen.support.errors import UserError


def test_a_yaml_syntax_error_names_the_file_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("results_dir: x\ntasks: [a\n  b: 1\n")
    with pytest.raises(UserError, match=rf"^{bad}:3:4: not valid YAML \(did not find expected ',' or '\]'\)$"):
        config.load_yaml(bad)


def test_a_missing_file_and_a_non_mapping_are_named(tmp_path):
    with pytest.raises(UserError, match=r"nope.yaml: file not found$"):
        config.load_yaml(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(UserError, match=r"list.yaml: expected a mapping of config keys, found a YAML list$"):
        config.load_yaml(tmp_path / "list.yaml")


def test_a_file_that_is_not_utf8_or_has_no_keys_is_named(tmp_path):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("seeds: [0]\n# caf\u00e9\n".encode("latin-1"))
    with pytest.raises(UserError, match=rf"^{latin}:2: not UTF-8 text \(byte 0xe9\); save the file as UTF-8$"):
        config.load_yaml(latin)
    for text in ("", "# only a comment\n"):
        (tmp_path / "empty.yaml").write_text(text)
        with pytest.raises(UserError, match=r"empty.yaml: empty, expected a mapping of config keys$"):
            config.load_yaml(tmp_path / "empty.yaml")


@pytest.mark.parametrize(("key", "value", "words"), [
    ("results_dir", "my results", "'my results' must not be empty, contain spaces or end in /"),
    ("name", "task a", "'task a' must be letters, digits and _ only (no spaces)"),
])
def test_a_value_of_the_wrong_form_is_said_in_words(repo, schema, key, value, words):
    cfg = config.load_yaml(repo / "config.yaml")
    if key == "name":
        cfg["tasks"][0]["name"] = value
    else:
        cfg[key] = value
    with pytest.raises(UserError) as err:
        config.validate(cfg, schema)
    assert str(err.value).endswith(f": {words}") and "^" not in str(err.value)


def test_check_config_is_one_line_and_status_2(tmp_path):
    (tmp_path / "bad.yaml").write_text("seeds: [1, 2\n")
    done = run_lengthgen("check-config", "bad.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert error_lines(done.stderr) == ["lengthgen: error: bad.yaml:2:1: not valid YAML (did not find expected ',' "
                                        "or ']')"]


@pytest.mark.workflow
def test_a_wrong_type_names_the_key_and_the_file_or_option_that_set_it(workflow_copy):
    (workflow_copy / "wrong.yaml").write_text("seeds: 3\n")
    done = run_snakemake(workflow_copy, "-n", "-c1", "--configfile", "wrong.yaml")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert error_lines(done.stderr) == [
        f"lengthgen: error: config.seeds: 3 is not of type 'array' (set in {workflow_copy / 'wrong.yaml'})"]
    done = run_snakemake(workflow_copy, "-n", "-c1", "--config", "seeds=3")
    assert error_lines(done.stderr) == ["lengthgen: error: config.seeds: 3 is not of type 'array' (set by --config)"]


@pytest.mark.workflow
def test_a_syntax_error_in_config_yaml_names_its_line(workflow_copy):
    path = workflow_copy / "config.yaml"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, "oops: [1"]) + "\n")
    done = run_snakemake(workflow_copy, "-n", "-c1")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    (line,) = error_lines(done.stderr)
    assert line.startswith(f"lengthgen: error: {path}:{len(lines) + 2}:1: not valid YAML")


@pytest.mark.workflow
def test_the_snakefile_reads_its_own_config_from_anywhere_but_a_subdirectory(workflow_copy, tmp_path):
    inside = workflow_copy / "workflow"
    done = subprocess.run([str(VENV_BIN / "snakemake"), "-n", "-c1", "-s", "../Snakefile"], cwd=inside,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert error_lines(done.stderr) == [f"lengthgen: error: {inside.resolve()}: inside the checkout but not its root; "
                                        f"run from {workflow_copy.resolve()} (or pass --directory "
                                        f"{workflow_copy.resolve()})"]
    assert not (inside / "results").exists() and not (inside / "resources").exists()
    elsewhere = tmp_path / "scratch"
    elsewhere.mkdir()
    done = subprocess.run([str(VENV_BIN / "snakemake"), "-n", "-c1", "-s", str(workflow_copy / "Snakefile"),
                           "--configfile", str(workflow_copy / "config/smoke.yaml")], cwd=elsewhere,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # the smoke grid's own settings over the checkout's config.yaml: config.yaml was read
    assert "results-smoke/runs/smoke_k1/nope/seed0/model.pt" in done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")
@pytest.mark.subprocess
def test_make_run_with_a_missing_config_names_it(repo):
    done = subprocess.run(["make", "-o", ".venv/.installed", "run", "CONFIG=config/nope.yaml"], cwd=repo,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert error_lines(done.stderr) == ["lengthgen: error: config/nope.yaml: file not found"]


def test_the_confirmatory_grid_runs_the_defaults_design_with_more_units_on_unseen_seeds(repo, schema):
    """config/confirm.yaml repeats the default's tasks (a list replaces whole): each entry must
    equal the default's but for its seeds, so the confirmatory run decides the registered design
    and not a drifted copy; its model seeds and data seeds are none the default uses."""
    from lengthgen import config

    base = config.load_yaml(repo / "config.yaml")
    confirm = config.load_yaml(repo / "config/confirm.yaml")
    default = config.validate(base, schema)
    merged = config.validate(config._deep_merge(base, confirm), schema)
    for mine, theirs in zip(merged["tasks"], default["tasks"], strict=True):
        assert {**mine, "seeds": None} == {**theirs, "seeds": None}, mine["name"]
        assert len(mine["seeds"]) > len(theirs["seeds"]) and not set(mine["seeds"]) & set(theirs["seeds"])
    assert (merged["data_seed"], merged["eval_seed"]) != (default["data_seed"], default["eval_seed"])
    assert merged["claims"] == {**default["claims"], "run": "confirmatory"}


def test_each_model_seed_trains_on_its_own_draw_and_a_shared_test_needs_a_shared_training_set(schema):
    given = {"tasks": [{"name": "t", "kind": "sparse_parity", "schemes": ["rope"], "eval": {"lengths": [6, 12]},
                        "params": {"k": 1, "n_min": 4, "n_max": 6}}], "schemes": {"rope": {"encoding": "rope"}}}
    cfg = config.validate(given, schema)
    assert config.train_split(cfg, 3) == "train-seed3" and config.training_set_of(cfg, "test-seed3") == "train-seed3"
    slices = [config.data_slice(cfg, "t", f"train-seed{s}") for s in (0, 1)]
    assert slices[0]["split"] == "train" and [s["seed"] for s in slices] == [[cfg["data_seed"], s] for s in (0, 1)]
    shared = {**cfg, "train_sets": "shared", "test_sets": "shared"}
    assert config.train_split(shared, 3) == "train" and config.training_set_of(shared, "test") == "train"
    with pytest.raises(UserError, match=r"^config.test_sets: shared needs train_sets: shared"):
        config.validate({**given, "test_sets": "shared"}, schema)


@pytest.mark.parametrize(("text", "overrides", "results_dir"), [
    ("seeds: [7]\n", (), "results-mine"),
    ("seeds: [7]\nresults_dir: results-x\n", (), "results-x"),
    ("seeds: [7]\n", ("results_dir",), "results"),  # --config results_dir=... is applied by the loader
    ("warm_start: false\n", (), "results"),  # changes no output: the default's results are its own
])
def test_a_variant_without_its_own_results_dir_writes_results_of_its_name(repo, schema, tmp_path, text,
                                                                          overrides, results_dir):
    variant = tmp_path / "mine.yaml"
    variant.write_text(text)
    given = config.load_yaml(variant)
    effective = config.load_run_config(repo, given, [variant], schema, overrides=overrides)
    moved, note = config.variant_results_dir(repo, effective, [variant], schema, overrides=overrides)
    assert moved["results_dir"] == results_dir
    assert {**moved, "results_dir": None} == {**effective, "results_dir": None}
    if results_dir == "results-mine":
        assert note == (f"lengthgen: note: {variant} sets no results_dir: this run writes results-mine/, not the "
                        "default configuration's results/ (set results_dir to choose another)")
    else:
        assert note is None


@pytest.mark.workflow
def test_the_note_comes_before_the_run_and_the_default_tables_are_left_alone(workflow_copy):
    (workflow_copy / "mine.yaml").write_text("seeds: [7]\n")
    done = run_snakemake(workflow_copy, "-n", "-c1", "--configfile", "mine.yaml")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    [note] = [i for i, line in enumerate(lines) if line.startswith("lengthgen: note: mine.yaml sets no results_dir")]
    assert not any(line.startswith(("rule ", "localrule ", "Job stats")) for line in lines[:note])
    planned = done.stdout + done.stderr
    assert "results-mine/tables/claims.md" in planned and " results/tables/" not in planned


def test_stack_blocks_group_each_tasks_seeds_and_are_empty_when_nothing_is_stacked():
    tasks = [{"name": "a", "seeds": [2, 0, 1, 3]}, {"name": "b", "seeds": [0, 1]}]
    cpu = {"tasks": tasks, "stack": "auto", "device": "cpu", "gpu_jobs": 1}
    assert config.stack_blocks(cpu) == {}
    assert config.stack_blocks({**cpu, "stack": 2}) == {(0, 1): ["a", "b"], (2, 3): ["a"]}
    assert config.stack_blocks({**cpu, "stack": "auto", "device": "cuda"}) == {(0, 1, 2, 3): ["a"], (0, 1): ["b"]}
