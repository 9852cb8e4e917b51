"""lengthgen.support.digest: what a stage's code digest follows, without running Snakemake."""

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
    assert not {"cli.py", "__main__.py", "decode.py", "claims.py"} & train
    sweep = {p.name for p in digest.stage_files("lengthgen.evaluation.sweep")}
    assert "decode.py" in sweep and "train.py" not in sweep  # sweeps do not rerun for a training edit
    claims = {p.name for p in digest.stage_files("lengthgen.analysis.scorecard")}
    assert {"scorecard.py", "claims.py", "stats.py"} <= claims and "cli.py" not in claims


CLI_EDITS = {  # an edit of cli.py -> the stages whose digests it changes
    "# a comment": ('def cmd_claims(a) -> None:\n', 'def cmd_claims(a) -> None:  # a comment\n', set()),
    "a default": ('"--train-max", type=int, default=1,', '"--train-max", type=int, default=2,', {"claims"}),
    "a call": ("aggregate.provenance(a.out, a.meta)", "aggregate.provenance(a.out, a.meta[::-1])", {"aggregate"}),
    "a shared helper": ('missing = [k for k in keys if k not in obj]', 'missing = [k for k in keys if k in obj]',
                        {"data", "train", "train_stack", "evaluate", "language_attention", "language", "figures"}),
    "a tool": ("return diff.diff_tables(a.rev, a.tables, a.tolerance)", "return 0", set()),
}


@pytest.mark.parametrize("edit", CLI_EDITS)
def test_an_edit_of_the_command_line_changes_the_digests_of_the_stages_it_can_change(tmp_path, monkeypatch, edit):
    old, new, expected = CLI_EDITS[edit]
    text = digest.CLI.read_text()
    assert text.count(old) == 1, old

    def digests(cli_text, name):
        (tmp_path / name).write_text(cli_text)
        monkeypatch.setattr(digest, "CLI", tmp_path / name)
        return {stage: digest.stage_digest(f"lengthgen.{module}") for stage, module in _stages().items()}

    before = digests(text, "before.py")
    after = digests(text.replace(old, new), "after.py")
    assert {stage for stage in before if before[stage] != after[stage]} == expected


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
