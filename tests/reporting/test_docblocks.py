"""The numbers the docs quote from a run are generated from its committed tables: every
generated block in README.md and docs/ is what its generator makes of them now. The tables are
read as committed at HEAD (conftest.committed_results): `make run` on another CPU rewrites the
working tree's by rounding, and the committed docs still quote the committed run."""

import pytest

from lengthgen.reporting import docblocks
from lengthgen.support.errors import UserError

DOCS = ["docs/results.md", "docs/protocol.md", "docs/performance.md", "docs/design.md",
        "docs/protocol-history.md", "docs/performance-archive.md"]


@pytest.mark.parametrize("name", DOCS)
def test_generated_blocks_match_the_committed_tables(repo, committed_results, name):
    text = (repo / name).read_text()
    assert docblocks.render(text, committed_results) == text, (
        f"{name}: run python -m lengthgen.reporting.docblocks {name} and commit the tables with it")


def test_results_md_quotes_the_default_and_the_confirmatory_run_from_blocks(repo):
    blocks = docblocks.BLOCK.findall((repo / "docs/results.md").read_text())
    assert {(name, results) for _, name, results, _, _ in blocks} >= {
        ("claim1", "results"), ("claim-words", "results"), ("claim-words", "results-confirm"),
        ("e1-means", "results-confirm"), ("claim1", "results-confirm"), ("claim2", "results-confirm"),
        ("e3", "results-confirm"), ("claim3", "results-confirm"), ("scale", "results-scale"),
        ("needle", "results-scale")}


def test_a_block_is_rewritten_and_an_unknown_one_is_named(committed_results):
    stale = "before\n<!-- generated: claim-words results -->\nold\n<!-- end generated -->\nafter\n"
    fresh = docblocks.render(stale, committed_results)
    assert fresh.startswith("before\n<!-- generated: claim-words results -->\n- claim 1 sparsity: ")
    assert fresh.endswith("<!-- end generated -->\nafter\n") and "old" not in fresh
    with pytest.raises(UserError, match="generated block 'nope': unknown"):
        docblocks.render("<!-- generated: nope results -->\n<!-- end generated -->", committed_results)
