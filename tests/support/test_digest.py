"""lengthgen.support.digest: what a stage's code digest follows, without running Snakemake."""

import ast
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from lengthgen.support import digest

SOURCE = textwrap.dedent('''
    """A module."""

    import math


    def area(r):
        """Of a circle."""
        return math.pi * r * r  # pi r squared
''')


def _digest_of(tmp_path, text):
    path = tmp_path / "m.py"
    path.write_text(text)
    return digest.code_text(path)


def test_comments_docstrings_and_layout_do_not_change_the_digest(tmp_path):
    edited = SOURCE.replace('"""A module."""', '"""Another word."""').replace("# pi r squared", "")
    edited = "# a new comment\n\n" + edited.replace("return math.pi * r * r", "return (math.pi *\n        r * r)")
    assert _digest_of(tmp_path, edited) == _digest_of(tmp_path, SOURCE)


def test_a_code_edit_changes_the_digest(tmp_path):
    edits = (SOURCE.replace("r * r", "r ** 2"), SOURCE + "X = 1\n", SOURCE.replace("import math", "import cmath"))
    for edited in edits:
        assert _digest_of(tmp_path, edited) != _digest_of(tmp_path, SOURCE), edited


def test_a_function_left_with_only_its_docstring_keeps_its_body(tmp_path):
    only_doc = 'def f():\n    """Nothing else."""\n'
    assert _digest_of(tmp_path, only_doc) == _digest_of(tmp_path, "def f():\n    pass\n")


def test_stage_files_follow_imports_and_leave_out_the_command_line_shim():
    train = {p.name for p in digest.stage_files("lengthgen.training.train")}
    assert {"train.py", "transformer.py", "datasets.py"} <= train
    assert not {"cli.py", "__main__.py", "decode.py", "sparsity.py"} & train
    sweep = {p.name for p in digest.stage_files("lengthgen.evaluation.sweep")}
    assert "decode.py" in sweep and "train.py" not in sweep  # sweeps do not rerun for a training edit
    claims = {p.relative_to(digest.PACKAGE_DIR).as_posix() for p in digest.stage_files("lengthgen.analysis.scorecard")}
    assert {"analysis/scorecard.py", "analysis/claims/__init__.py", "analysis/stats.py"} <= claims
    assert "cli.py" not in claims


CLI_EDITS = {  # an edit of the command line -> the stages whose digests it changes
    "# a comment": ("cli.py", "def cmd_claims(a) -> None:\n", "def cmd_claims(a) -> None:  # a comment\n", set()),
    "a docstring": ("commands.py", '"""A required path argument (most arguments are one)."""', '"""Paths."""', set()),
    "a default": ("commands.py", '"--train-max", type=int, default=1,', '"--train-max", type=int, default=2,',
                  {"claims"}),
    "one slice's keys": ("commands.py", '"--eval", "device threads batch_size"', '"--eval", "device threads"',
                         {"evaluate"}),
    "a shared argument": ("commands.py", 'STALE = arg("--stale", nargs="*", default=[],',
                          'STALE = arg("--stale", nargs="+", default=[],',
                          {"aggregate", "attention_report", "language_scores"}),
    "the claims section": ("commands.py", 'CLAIMS_SECTION = _section("claims")', 'CLAIMS_SECTION = _json',
                           {"claims", "figures"}),
    "a call": ("cli.py", "aggregate.provenance(a.out, a.meta)", "aggregate.provenance(a.out, a.meta[::-1])",
               {"aggregate"}),
    "a shared helper": ("commands.py", "missing = [k for k in keys if k not in obj]",
                        "missing = [k for k in keys if k in obj]",
                        {"data", "train", "train_stack", "evaluate", "language_attention", "language"}),
    "a tool": ("cli.py", "return diff.diff_tables(a.rev, a.tables, a.tolerance, limit=None if a.all else diff.SHOWN)",
               "return 0", set()),
    "a tool's declaration": ("commands.py", '"--tolerance", type=float, default=0.0,',
                             '"--tolerance", type=float, default=0.1,', set()),
    "a new statement": ("commands.py", "\nCOMMANDS = (", "\nUNUSED = 1\nCOMMANDS = (", set()),
}


@pytest.mark.parametrize("edit", CLI_EDITS)
def test_an_edit_of_the_command_line_changes_the_digests_of_the_stages_it_can_change(tmp_path, monkeypatch, edit):
    name, old, new, expected = CLI_EDITS[edit]
    files = {"cli.py": "CLI", "commands.py": "COMMANDS"}
    text = {attr: getattr(digest, attr).read_text() for attr in files.values()}
    assert text[files[name]].count(old) == 1, old

    def digests(folder, edited):
        (tmp_path / folder).mkdir()
        for attr, original in text.items():
            path = tmp_path / folder / f"{attr}.py"
            path.write_text(original.replace(old, new) if edited and attr == files[name] else original)
            monkeypatch.setattr(digest, attr, path)
        return {stage: digest.stage_digest(f"lengthgen.{module}") for stage, module in _stages().items()}

    before, after = digests("before", False), digests("after", True)
    assert {stage for stage in before if before[stage] != after[stage]} == expected


SUBCOMMANDS = {  # each stage's subcommands (those whose functions import its module)
    "data": {"generate"}, "train": {"train"}, "train_stack": {"train-stack"}, "evaluate": {"sweep"},
    "attention": {"attention"}, "attention_report": {"aggregate-attention"},
    "attention_figure": {"figure-attention"}, "language_attention": {"language-attention"},
    "aggregate": {"aggregate", "provenance"}, "claims": {"claims"}, "report": {"report-pages"},
    "figures": {"figure"}, "corpus": {"fetch-corpus", "corpus"}, "tokenizer": {"tokenizer", "tokenize"},
    "language": {"train-lm"}, "influence": {"score"}, "language_report": {"influence-report"},
    "language_scores": {"language-scores"}, "record": {"record"}, "training_table": {"training-table"},
}


def test_a_stage_s_digest_holds_its_subcommands_entries_and_no_other():
    stat = digest.COMMANDS.stat()
    entries = {unit.text: unit for unit in digest._cli_units(digest.COMMANDS, stat.st_mtime_ns, stat.st_size)
               if unit.dispatches}
    assert len(entries) == len(_parser_stages())
    for stage, module in _stages().items():
        text = digest.cli_text(f"lengthgen.{module}")
        held = {name for entry, unit in entries.items() if entry in text for name in unit.dispatches}
        assert held == {f"cmd_{sub.replace('-', '_')}" for sub in SUBCOMMANDS[stage]}, stage


def test_cli_py_and_commands_py_define_no_name_twice():
    """A stage's digest follows names through both files as one namespace."""
    defined = [{name for node in ast.parse(path.read_text()).body for name in digest._defined(node)}
               for path in (digest.CLI, digest.COMMANDS)]
    assert not defined[0] & defined[1]


def _parser_stages() -> list[str]:
    from lengthgen import commands

    return [command.name for command in commands.COMMANDS]


def _stages() -> dict[str, str]:
    """The workflow's stages and their entry modules, read from CODE in workflow/rules/common.smk."""
    text = (digest.PACKAGE_DIR.parents[1] / "workflow/rules/common.smk").read_text()
    block = text[text.index("STAGES = {"):text.index("CODE = {")]
    return dict(re.findall(r'"(\w+)": "([\w.]+)"', block))


# Which stages' digests an edit of each file changes: the rules with those `code` params rerun,
# and Snakemake reruns what follows them (tests/test_workflow.py checks that end to end for a
# few of these files).
@pytest.mark.parametrize(("relpath", "expected"), [
    ("training/train.py", {"train", "train_stack"}),
    ("evaluation/attention.py", {"attention"}),
    ("language/attention.py", {"language_attention"}),
    ("analysis/attention.py", {"attention_report", "attention_figure", "claims"}),
    ("reporting/attention.py", {"attention_figure"}),
    ("language/influence.py", {"influence", "language_attention"}),
    ("reporting/language.py", {"language_report"}),
    ("analysis/language_summary.py", {"language_report"}),
    ("analysis/language_scores.py", {"language_scores", "claims"}),
    # every module of the claims package: the figures and the report import it too
    *((f"analysis/claims/{name}.py", {"claims", "figures", "report"})
      for name in ("__init__", "rows", "sparsity", "coupling", "language", "attention", "scorecard")),
    ("reporting/figures.py", {"figures"}),
    ("tasks/sparse_parity.py", {"data", "train", "train_stack", "evaluate", "attention"}),
    ("tasks/_common.py", {"data", "train", "train_stack", "evaluate", "attention"}),
    ("model/checkpoint.py", {"train", "train_stack", "evaluate", "attention", "language", "influence",
                             "language_attention"}),
    ("training/optim.py", {"train", "train_stack", "language", "influence", "language_attention"}),
    # in the rules that read the whole grid (`planned`), never in a stage's own digest
    ("layout.py", set()),
    ("plan.py", set()),
])
def test_an_edit_changes_exactly_the_digests_of_the_stages_that_import_it(relpath, expected):
    """For a sparse-parity cell (a task module counts for its own task's cells only)."""
    path = digest.PACKAGE_DIR / relpath
    changed = {stage for stage, module in _stages().items()
               if path in digest.stage_files(f"lengthgen.{module}", "sparse_parity")}
    assert changed == expected


@pytest.mark.subprocess
def test_editing_or_adding_a_task_leaves_the_other_tasks_digests(tmp_path):
    """In a copy of the package: a new task module and an edit of another task's leave a
    sparse-parity cell's digests as they were; an edit of sparse_parity.py changes them."""
    package = tmp_path / "lengthgen"
    shutil.copytree(digest.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import sys; from lengthgen.support.digest import stage_digest; "
            "print(*(stage_digest(m, k) for m in ('lengthgen.datasets', 'lengthgen.training.train') "
            "for k in ('sparse_parity', 'needle')))")

    def digests():
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(tmp_path)},
                             capture_output=True, text=True, check=True).stdout.split()
        return {"sparse_parity": out[0::2], "needle": out[1::2]}

    before = digests()
    shutil.copy(package / "tasks/needle.py", package / "tasks/another_needle.py")
    (package / "tasks/needle.py").write_text((package / "tasks/needle.py").read_text() + "\n_EDITED = 1\n")
    after = digests()
    assert after["sparse_parity"] == before["sparse_parity"] and after["needle"] != before["needle"]
    (package / "tasks/sparse_parity.py").write_text((package / "tasks/sparse_parity.py").read_text() + "\nX = 1\n")
    assert digests()["sparse_parity"] != before["sparse_parity"]
