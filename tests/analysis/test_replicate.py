"""Two scorecards side by side: matched row for row, the best-baseline name ignored, a
differing verdict named, descriptive rows left out."""

import pandas as pd
import pytest

from lengthgen.analysis import replicate
from lengthgen.analysis.claims import COLUMNS
from lengthgen.support.errors import UserError


def card(path, rows):
    blank = {column: "" for column in COLUMNS} | {"value": 0.0, "n": 0}
    full = [blank | r for r in rows]
    pd.DataFrame(full, columns=COLUMNS).to_csv(path, index=False)
    return path


MAIN = [{"claim": "1 sparsity", "check": "rope: Spearman", "value": -0.9, "result": "PASS"},
        {"claim": "1 sparsity", "check": "rope at n=96", "value": 0.3, "result": "descriptive"},
        {"claim": "2 coupling", "check": "e3: ppc - best scheme without coupled IDs (pointer)", "value": 0.0,
         "result": "FAIL"}]


def test_same_verdicts_replicate_whatever_baseline_was_best(tmp_path):
    other = [dict(MAIN[0], value=-0.7), dict(MAIN[2], check="e3: ppc - best scheme without coupled IDs (pose)")]
    ok = replicate.run(card(tmp_path / "a.csv", MAIN), card(tmp_path / "b.csv", other), tmp_path / "r.md")
    text = (tmp_path / "r.md").read_text()
    assert ok and "- claim 1 sparsity: default reproduced (1 PASS); replicate reproduced (1 PASS); every verdict" \
        " replicates" in text
    assert "rope at n=96" not in text and "| 2 coupling | e3: ppc - best scheme without coupled IDs | FAIL" in text


def test_a_differing_verdict_is_named_and_fails(tmp_path):
    other = [dict(MAIN[0], result="FAIL"), MAIN[2]]
    assert not replicate.run(card(tmp_path / "a.csv", MAIN), card(tmp_path / "b.csv", other), tmp_path / "r.md")
    text = (tmp_path / "r.md").read_text()
    assert "1 row(s) differ" in text and "| **no** |" in text


def test_a_missing_scorecard_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="b.csv: scorecard not found"):
        replicate.run(card(tmp_path / "a.csv", MAIN), tmp_path / "b.csv", tmp_path / "r.md")
