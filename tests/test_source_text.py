"""Comments and docstrings explain the code as it is: no project history, dates or machine
timings in src/, workflow/, profiles/ or the Snakefile (measurements live in docs/performance.md,
where they carry their machine and date)."""

import ast
import io
import re
import tokenize

import pytest
from conftest import REPO

NARRATION = [r"\b20\d\d-\d\d-\d\d\b", r"\bearlier (version|session|machine)", r"\bas before\b", r"\bno longer\b",
             r"\bused to\b", r"\bissue \d", r"\d+(\.\d+)?\s?[-–]\s?\d+(\.\d+)?\s?(ms|s)\b",
             r"\d+(\.\d+)?\s?(ms|s) (of every|instead of)",
             # Measurements told as a story ("the fastest measured", "it took", "was a third of").
             r"\b(fastest|slowest|best) measured\b", r"\b(costs?|took|takes) about\b", r"\bit took\b",
             r"\b(markedly|much|a little|several times|\d+(\.\d+)?\s?[x×]) (faster|slower)\b",
             r"\b(faster|slower) than\b", r"\b(was|were) (a third|a half|a quarter|\d+(\.\d+)?\s?%)",
             r"\b\d+(\.\d+)?\s?% of the time\b"]


def python_prose(path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file."""
    source = path.read_text()
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    return out


def other_prose(path) -> list[tuple[int, str]]:
    """(line, text) of every line of a Snakemake or YAML file that is, or ends in, a comment, and
    of the YAML schema's descriptions (whole lines)."""
    return [(i, line) for i, line in enumerate(path.read_text().splitlines(), 1)
            if "#" in line or path.name.endswith("schema.yaml")]


FILES = sorted([*(REPO / "src").rglob("*.py"), *(REPO / "workflow").rglob("*.smk"),
                *(REPO / "workflow").rglob("*.yaml"), *(REPO / "profiles").rglob("*.yaml"), REPO / "Snakefile"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_source_prose_does_not_narrate_history_or_timings(path):
    prose = python_prose(path) if path.suffix == ".py" else other_prose(path)
    found = [(line, m.group(0)) for line, text in prose for pattern in NARRATION
             for m in re.finditer(pattern, text, flags=re.I)]
    assert not found, found


def test_the_check_finds_narration(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text('"""Made faster on 2026-11-22: 2.3-2.9 s of every job."""\n# an earlier version did this\n')
    texts = " ".join(text for _, text in python_prose(path))
    assert all(re.search(p, texts, flags=re.I) for p in (NARRATION[0], NARRATION[1], NARRATION[6]))


@pytest.mark.parametrize("text", [
    "the rotary step of a small model costs about 40% of the time it took that way",
    "Padding was a third of the tokens of a training batch",
    "4 MB on CPU (the fastest measured at 2,048 tokens); chunks of a few rows were markedly slower",
    "256 ran 768 sequences 1.3x faster than one batch",
])
def test_the_check_finds_measurements_told_as_a_story(tmp_path, text):
    path = tmp_path / "sample.py"
    path.write_text(f"# {text}\nx = 1\n")
    assert any(re.search(p, t, flags=re.I) for _, t in python_prose(path) for p in NARRATION)
