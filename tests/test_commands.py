"""lengthgen.commands: the table the command line's parser is built from, and the checks of its
JSON arguments (each a one-line error, before any stage runs)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO

from lengthgen import cli, commands
from lengthgen.support import schema

CELL = {"task": "t", "scheme": "nope", "seed": 0, "scheme_options": {}, "model": {}, "train": {}, "device": "cpu",
        "threads": 1}


def test_every_subcommand_runs_its_function_and_every_function_has_a_subcommand():
    names = [command.name for command in commands.COMMANDS]
    functions = {name for name in vars(cli) if name.startswith("cmd_")}
    assert len(set(names)) == len(names)
    assert {f"cmd_{name.replace('-', '_')}" for name in names} == functions
    subparsers = cli.parser()._subparsers._group_actions[0].choices
    assert list(subparsers) == names


def _rule_flags() -> list[tuple[str, str, set[str]]]:
    """(rule file, subcommand, the flags its shell command passes) for every lengthgen call of the
    workflow's rules."""
    found = []
    for path in sorted((REPO / "workflow/rules").glob("*.smk")):
        text = path.read_text()
        for match in re.finditer(r'"python -m lengthgen ([a-z-]+)', text):
            rest = text[match.end():]
            end = re.search(r"\n\S|\n    \w+:|python -m lengthgen", rest)
            shell = "".join(re.findall(r'"([^"]*)"', '"' + rest[:end.start() if end else None]))
            found.append((path.name, match.group(1), set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", shell))))
    return found


def test_every_flag_the_workflow_passes_is_declared():
    declared = {command.name: {flag for flags, _ in command.args for flag in flags} for command in commands.COMMANDS}
    calls = _rule_flags()
    assert len(calls) >= 20
    for rule_file, name, flags in calls:
        assert flags and flags <= declared[name], (rule_file, name, flags - declared[name])


SLICE_ERRORS = {  # argv -> the one line it ends in
    ("train", "--cell", "{}"): "--cell: JSON lacks key(s) task, scheme, seed, scheme_options, model, train, device, "
                               "threads",
    ("train", "--cell", "[1]"): "--cell: expected a JSON object",
    ("train", "--cell", json.dumps({k: v for k, v in CELL.items() if k != "threads"})): "--cell: JSON lacks key(s) "
                                                                                         "threads",
    ("train-stack", "--cells", "{}"): "--cells: expected a JSON list of cells",
    ("train-stack", "--cells", "[]"): "--cells: expected a JSON list of cells",
    ("train-stack", "--cells", json.dumps([CELL, {"task": "t"}])):
        "--cells: JSON lacks key(s) scheme, seed, scheme_options, model, train, device, threads",
    ("sweep", "--eval", '{"device": "cpu"}'): "--eval: JSON lacks key(s) threads, batch_size",
    ("generate", "--task", '{"name": "x"}'): "--task: JSON lacks key(s) kind, params, split, seed",
    ("train-lm", "--spec", '{"name": "long"}'): "--spec: JSON lacks key(s) context, model, train, seed, device, "
                                                "threads",
    ("language-attention", "--config", '{"T_long": 8}'): "--config: JSON lacks key(s) T_short, k, seed, device, "
                                                         "threads",
    ("figure", "--claims", '{"stats": {"alpha": 2}}'): "config.claims.stats.alpha: 2 is greater than the maximum "
                                                       "of 0.5",
    ("claims", "--config", '{"sparsity": 1}'): "config.claims.sparsity: 1 is not of type 'object'",
}
OTHER_ARGS = {"train": ["--data", "d", "--out-dir", "o", "--checkpoint", "c"],
              "train-stack": ["--data", "d", "--out-dirs", "o", "--checkpoint", "c"],
              "sweep": ["--model", "m", "--data", "d", "--out", "o"], "generate": ["--out", "o"],
              "train-lm": ["--tokenizer", "t", "--tokens", "t", "--out-dir", "o", "--checkpoint", "c"],
              "language-attention": ["--long", "l", "--scores", "s", "--tokenizer", "t", "--tokens", "t", "--out", "o"],
              "figure": ["--sweep-csv", "s", "--tasks", "a", "--train-max", "1", "--out", "o"],
              "claims": ["--sweep-csv", "s", "--csv", "c", "--md", "m"]}


@pytest.mark.parametrize("argv", SLICE_ERRORS, ids=lambda argv: f"{argv[0]} {argv[2][:20]}")
def test_a_json_argument_without_what_its_stage_reads_ends_in_one_line(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    assert cli.main([*argv, *OTHER_ARGS[argv[0]]]) == 2
    assert capsys.readouterr().err == f"lengthgen: error: {SLICE_ERRORS[argv]}\n"
    assert not list(tmp_path.iterdir())


def test_the_claims_section_is_filled_from_the_schema():
    given = {"sparsity": {"fit_min": 0.5}}
    args = cli.parser().parse_args(["figure", "--claims", json.dumps(given), *OTHER_ARGS["figure"]])
    assert args.claims == schema.section("claims", given)
    assert args.claims["sparsity"]["fit_min"] == 0.5 and "stats" in args.claims


def test_a_slice_is_passed_on_as_given():
    cells = [CELL, {**CELL, "seed": 1, "gpu": False}]
    args = cli.parser().parse_args(["train-stack", "--cells", json.dumps(cells), *OTHER_ARGS["train-stack"]])
    assert args.cells == cells


def test_the_slices_the_workflow_makes_hold_every_key_their_stage_declares():
    """The declared keys are a subset of what lengthgen.config builds for the stage, on the
    default config: a key dropped there, or declared here and never built, fails."""
    from lengthgen import config as lgconfig

    schema = lgconfig.load_yaml(REPO / "workflow/schemas/config.schema.yaml")
    run = lgconfig.load_run_config(REPO, {}, [], schema)
    task = run["tasks"][0]["name"]
    cell = lgconfig.cell_slice(run, task, run["tasks"][0]["schemes"][0], 0)
    made = {"generate": ("--task", lgconfig.data_slice(run, task, "train")), "train": ("--cell", cell),
            "train-stack": ("--cells", [cell, {**cell, "seed": 1}]), "sweep": ("--eval", lgconfig.eval_slice(run)),
            "train-lm": ("--spec", lgconfig.lm_slice(run, "long", 0))}
    for name, (flag, value) in made.items():
        args = cli.parser().parse_args([name, flag, json.dumps(value), *OTHER_ARGS[name]])
        assert getattr(args, flag[2:]) == value
