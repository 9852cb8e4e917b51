"""The report's own pages (lengthgen.reporting.html): the scorecard and the summary as HTML tables with
their verdicts coloured, the run's configuration and provenance; a bad input ends in one line."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import error_lines, run_lengthgen
from html_tables import parse

from lengthgen.reporting import html as report

CLAIMS = """\
claim,check,value,ci_low,ci_high,p,n,threshold,result,detail
1 sparsity,"rope at n=96 (8x): Spearman(k, accuracy)",-1.0000,-1.0000,-0.8000,0.0010,24,<= -0.8,PASS,"k=1: 1.000"
1 sparsity,rope at n=96 (8x): accuracy(k=1) - accuracy(k=3),0.0527,,,,0,>= 0.3,FAIL,k=1 <b>bold</b>
2 coupling,ppc - best index scheme,0.2100,0.0500,0.4000,,8,>= 0.3,INCONCLUSIVE,seeds disagree
2 coupling,ppc at n=8: exact match,0.9000,,,,8,-,descriptive,the numbers behind it
3 language,influential tokens in natural language (E4): not in this grid,,,,,0,-,N/A,no task
"""
# A scorecard without statistical tests (no interval, p or n), as older runs wrote.
PLAIN_CLAIMS = """\
claim,check,value,threshold,result,detail
1 sparsity,every model fits at n=12 (1x): smallest accuracy,1.0000,>= 0.95,PASS,27 of 27 models
"""


def test_scorecard_is_a_table_with_every_row_and_a_coloured_verdict(tmp_path):
    from lengthgen.analysis.claims import verdict

    (tmp_path / "claims.csv").write_text(CLAIMS)
    page = parse(report.scorecard(tmp_path / "claims.csv"))
    [table] = [t for t in page.tables if t["class"] == "scorecard"]
    header, *rows = table["rows"]
    assert [c for c, _ in header] == ["claim", "check", "value", "95% CI", "p", "n", "threshold", "result", "detail"]
    assert len(rows) == len(CLAIMS.splitlines()) - 1
    assert [c for c, _ in rows[0]] == ["1 sparsity", "rope at n=96 (8x): Spearman(k, accuracy)", "-1.0000",
                                       "[-1.0000, -0.8000]", "0.0010", "24", "<= -0.8", "PASS", "k=1: 1.000"]
    assert [row[7] for row in rows] == [("PASS", "result pass"), ("FAIL", "result fail"),
                                        ("INCONCLUSIVE", "result inconclusive"), ("descriptive", "result descriptive"),
                                        ("N/A", "result na")]
    assert rows[1][8][0] == "k=1 <b>bold</b>"  # text from the table is escaped, never markup
    assert rows[1][3][0] == "" and rows[4][2][0] == ""  # no interval, no value: empty, not "nan"
    text = "".join(page.text)
    assert "1 PASS1 FAIL1 INCONCLUSIVE1 N/A1 descriptive" in text
    records = [{"claim": "1 sparsity", "result": r} for r in ("PASS", "FAIL")]  # the claim's verdict rows
    assert verdict(records, "1 sparsity").startswith("partly reproduced")
    assert f"claim 1 sparsity: {verdict(records, '1 sparsity')}" in text


def test_scorecard_without_statistical_tests_has_no_interval_columns(tmp_path):
    (tmp_path / "claims.csv").write_text(PLAIN_CLAIMS)
    [table] = [t for t in parse(report.scorecard(tmp_path / "claims.csv")).tables if t["class"] == "scorecard"]
    header, row = table["rows"]
    assert [c for c, _ in header] == ["claim", "check", "value", "threshold", "result", "detail"]
    assert row[4] == ("PASS", "result pass")


def test_summary_tables_keep_every_cell_and_shade_by_mean(tmp_path):
    md = tmp_path / "summary.md"
    md.write_text("# Length sweep: exact match (mean ± std over seeds)\n\n\n## task_a\n\n"
                  "| scheme | k | n=12 | n=24 |\n|---|---|---|---|\n"
                  "| nope | 1 | 1.000 ± 0.000 | 0.750 ± 0.100 |\n| rope | 1 | 0.500 ± 0.020 |  |\n\n"
                  "## task_b\n\n| scheme | n=8 |\n|---|---|\n| ppc | 0.950 ± 0.010 |\n")
    page = parse(report.summary(md))
    assert [t["class"] for t in page.tables] == ["summary", "summary"]
    a, b = (t["rows"] for t in page.tables)
    assert [c for c, _ in a[0]] == ["scheme", "k", "n=12", "n=24"]
    assert a[1] == [("nope", ""), ("1", ""), ("1.000 ± 0.000", "num pass"), ("0.750 ± 0.100", "num inconclusive")]
    assert a[2] == [("rope", ""), ("1", ""), ("0.500 ± 0.020", "num fail"), ("", "")]
    assert b == [[("scheme", ""), ("n=8", "")], [("ppc", ""), ("0.950 ± 0.010", "num pass")]]
    assert "task_a" in "".join(page.text) and "task_b" in "".join(page.text)


def test_run_page_holds_the_effective_config_and_provenance(tmp_path):
    (tmp_path / "provenance.json").write_text('{"git_commit": "abc123", "torch": "2.13.0+cpu"}')
    config = {"results_dir": "results-x", "seeds": [0, 1], "tasks": [{"name": "t", "params": {"k": 2}}]}
    config_yaml, page = report.run_page(config, tmp_path / "provenance.json")
    assert yaml.safe_load(config_yaml) == config
    text = "".join(parse(page).text)
    assert "results_dir: results-x" in text and '"git_commit": "abc123"' in text


def _pages_args(tmp_path, claims, provenance) -> list:
    (tmp_path / "summary.md").write_text("# Length sweep\n")
    return ["report-pages", "--claims", claims, "--summary", tmp_path / "summary.md", "--provenance", provenance,
            "--config", json.dumps({"seeds": [0]}), "--scorecard-html", tmp_path / "out/claims.html",
            "--summary-html", tmp_path / "out/summary.html", "--run-html", tmp_path / "out/run.html",
            "--config-yaml", tmp_path / "out/config.yaml"]


@pytest.mark.parametrize(("case", "claims", "provenance", "needle"), [
    ("empty_scorecard", "", "{}", "claims.csv: empty file"),
    ("sweep_as_scorecard", "task,scheme,seed\nx,y,0\n", "{}", "claims.csv: not the claims scorecard"),
    ("broken_provenance", CLAIMS, "{not json", "provenance.json: not a readable provenance record (JSONDecodeError"),
])
def test_report_pages_of_bad_input_end_in_one_line(tmp_path, case, claims, provenance, needle):
    (tmp_path / "claims.csv").write_text(claims)
    (tmp_path / "provenance.json").write_text(provenance)
    proc = run_lengthgen(*_pages_args(tmp_path, tmp_path / "claims.csv", tmp_path / "provenance.json"), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    [line] = error_lines(proc.stderr)
    assert needle in line
    assert not (tmp_path / "out").exists()  # nothing written


def test_report_pages_write_all_four(tmp_path):
    (tmp_path / "claims.csv").write_text(CLAIMS)
    (tmp_path / "provenance.json").write_text("{}")
    proc = run_lengthgen(*_pages_args(tmp_path, tmp_path / "claims.csv", tmp_path / "provenance.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["claims.html", "config.yaml", "run.html",
                                                                     "summary.html"]


def test_the_report_tallies_the_paper_s_claims_as_the_readme_does(repo, committed_results):
    """On the committed scorecard: the report's tally of the paper's claims is the README verdict
    table's column sums, and the analyses beyond the paper are tallied apart."""
    import re as regex

    text = "".join(parse(report.scorecard(committed_results / "results-confirm/tables/claims.csv")).text)
    readme = (repo / "README.md").read_text()
    block = readme.split("<!-- verdict: generated by")[1].split("<!-- verdict: end -->")[0]
    header, _, *rows = [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()[1:] if line]
    for result in ("PASS", "FAIL", "INCONCLUSIVE"):
        total = sum(int(row[header.index(result)]) for row in rows) if result in header else 0
        assert regex.search(rf"the paper's claims: .*?(?<!\d){total} {result}", text), (result, total, text[:400])
    assert "beyond the paper: " in text
