"""lengthgen.digest: what a stage's code digest follows, without running Snakemake."""

import re
import textwrap

import pytest

from lengthgen import digest

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
    train = {p.name for p in digest.stage_files("lengthgen.train")}
    assert {"train.py", "model.py", "datasets.py"} <= train
    assert not {"cli.py", "__main__.py", "decode.py", "claims.py"} & train
    sweep = {p.name for p in digest.stage_files("lengthgen.evaluate")}
    assert "decode.py" in sweep and "train.py" not in sweep  # sweeps do not rerun for a training edit
    claims = {p.name for p in digest.stage_files("lengthgen.scorecard")}
    assert {"scorecard.py", "claims.py", "stats.py"} <= claims and "cli.py" not in claims


def _stages() -> dict[str, str]:
    """The workflow's stages and their entry modules, read from CODE in workflow/rules/common.smk."""
    text = (digest.PACKAGE_DIR.parents[1] / "workflow/rules/common.smk").read_text()
    block = text[text.index("CODE = {"):text.index("}.items()")]
    return dict(re.findall(r'"(\w+)": "([\w.]+)"', block))


# Which stages' digests an edit of each file changes: the rules with those `code` params rerun,
# and Snakemake reruns what follows them (tests/test_workflow.py checks that end to end for a
# few of these files).
@pytest.mark.parametrize(("relpath", "expected"), [
    ("train.py", {"train"}),
    ("attention.py", {"attention"}),
    ("language/attention.py", {"language_attention"}),
    ("attention_report.py", {"attention_report", "claims"}),
    ("language/influence.py", {"influence", "language_attention"}),
    ("language/report.py", {"language_report"}),
    ("language/scores.py", {"language_scores", "claims"}),
    ("figures.py", {"figures"}),
    ("tasks/sparse_parity.py", {"data", "train", "evaluate", "attention"}),
])
def test_an_edit_changes_exactly_the_digests_of_the_stages_that_import_it(relpath, expected):
    path = digest.PACKAGE_DIR / relpath
    changed = {stage for stage, module in _stages().items() if path in digest.stage_files(f"lengthgen.{module}")}
    assert changed == expected
