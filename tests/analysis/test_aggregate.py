"""The run's provenance (analysis/aggregate.provenance): kept out of the tables, and naming the
commit even where the tree was copied without its .git."""

import json

from lengthgen.analysis import aggregate


def test_a_tree_without_git_records_the_commit_it_was_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no repository here: git rev-parse fails
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.setenv("LENGTHGEN_GIT_COMMIT", "0123abc")
    aggregate.provenance(tmp_path / "p.json")
    info = json.loads((tmp_path / "p.json").read_text())
    assert info["git_commit"] == "0123abc" and info["src_modified"] is None and info["devices"] == []
    monkeypatch.delenv("LENGTHGEN_GIT_COMMIT")
    aggregate.provenance(tmp_path / "p.json")
    assert json.loads((tmp_path / "p.json").read_text())["git_commit"] == "unknown"
