"""The HTML report's own pages: the claims scorecard and the summary as HTML tables (the report
viewer shows HTML and images, and only offers Markdown, YAML or JSON for download), and the
run's effective configuration beside its provenance.

Each page stands alone. Its styles apply only inside its own `lengthgen` element, so the
scorecard can also be inlined into the report's landing page without restyling the viewer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2
import markupsafe
import yaml

from lengthgen.analysis import claims
from lengthgen.analysis.aggregate import read_table
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import atomic_paths, corrupt_table, read_intermediate

CLAIMS_COLUMNS = ["claim", "check", "value", "threshold", "result", "detail"]  # what every scorecard has
# The scorecard's verdicts, in the tally's order; `descriptive` rows show the numbers behind one.
RESULTS = ("PASS", "FAIL", "INCONCLUSIVE", "N/A", "descriptive")

STYLE = """\
.lengthgen { font: 14px/1.4 system-ui, sans-serif; color: #111; }
.lengthgen table { border-collapse: collapse; margin: 0.4em 0 1.2em; }
.lengthgen th, .lengthgen td { border: 1px solid #d0d4da; padding: 2px 7px; text-align: left; vertical-align: top; }
.lengthgen th { background: #f1f3f5; }
.lengthgen table.scorecard { font-size: 13px; width: 100%; }
.lengthgen table.scorecard td:nth-child(2) { min-width: 10em; }
.lengthgen table.scorecard td:last-child { min-width: 16em; overflow-wrap: anywhere; }
.lengthgen td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.lengthgen td.result { font-weight: 700; text-align: center; white-space: nowrap; }
.lengthgen .pass { background: #c6efce; color: #0b5d1e; }
.lengthgen .fail { background: #ffc7ce; color: #9c0006; }
.lengthgen .inconclusive { background: #ffeb9c; color: #6b5200; }
.lengthgen .na { background: #e9ecef; color: #495057; }
.lengthgen .descriptive { background: #f8f9fa; color: #6c757d; font-weight: 400; }
.lengthgen ul.verdicts { margin: 0.3em 0 0.8em; padding-left: 1.2em; }
.lengthgen .tally span { display: inline-block; padding: 1px 8px; margin-right: 6px; font-weight: 700; }
.lengthgen pre { background: #f8f9fa; border: 1px solid #d0d4da; padding: 8px; overflow-x: auto; font-size: 12px; }
/* Inlined into the report's landing page: the text and table take what the rule graph leaves
   and the graph moves below them where the window is too narrow for both (else the table runs
   under it), and the viewer's centred pane starts at the top left, or a long or wide scorecard
   would push the title out of reach. */
.prose:has(.lengthgen) { max-width: 72rem; }
.py-2:has(.lengthgen) { min-width: 0; }
.flex.gap-3:has(.lengthgen) { flex-wrap: wrap; }
.h-screen.overflow-auto:has(.lengthgen) { align-items: flex-start; justify-content: flex-start; }
"""


def result_class(result: str) -> str:
    classes = {"PASS": "pass", "FAIL": "fail", "INCONCLUSIVE": "inconclusive", "descriptive": "descriptive"}
    return classes.get(result, "na")


# The pages' markup, as Jinja2 templates that escape every value they are given (autoescape): a
# check's text or a config value holding `<` or `&` shows as written. Kept here, not in files
# beside the module, so the report stage's code digest covers them.
_JINJA = jinja2.Environment(autoescape=True, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                            undefined=jinja2.StrictUndefined)
PAGE = _JINJA.from_string("""\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ title }}</title>
<style>
{{ style }}</style>
</head>
<body>
<div class="lengthgen">
{{ body }}</div>
</body>
</html>
""")
TABLE = _JINJA.from_string("""\
<table class="{{ css }}">
<thead><tr>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr></thead>
<tbody>
{% for row in rows %}
<tr>{% for text, cls in row %}<td{% if cls %} class="{{ cls }}"{% endif %}>{{ text }}</td>{% endfor %}</tr>
{% endfor %}
</tbody>
</table>
""")
TALLY = _JINJA.from_string("""\
<p class="tally">{{ label }}: {% for r, n in counts %}
<span class="{{ result_class(r) }}">{{ n }} {{ r }}</span>{% endfor %}</p>
""")
SCORECARD = _JINJA.from_string("""\
<h2>Claims scorecard</h2>
<ul class="verdicts">{% for heading, verdict in verdicts %}<li><b>{{ heading }}</b>: {{ verdict }}</li>{% endfor %}</ul>
""")
RUN = _JINJA.from_string("""\
<h2>Effective configuration</h2>
<p>The configuration files merged, with every default filled in, as the rules saw it.</p>
<pre>{{ config_yaml }}</pre>
<h2>Provenance</h2>
<p>The commit, library versions and devices of the runs behind these results (provenance.json).</p>
<pre>{{ provenance }}</pre>
""")


def _page(title: str, body: str) -> str:
    """`body` is markup these templates made, so it goes in unescaped."""
    return PAGE.render(title=title, style=markupsafe.Markup(STYLE), body=markupsafe.Markup(body))


def _table(header: list[str], rows: list[list[tuple[str, str]]], css: str = "") -> str:
    """`rows`: cells as (text, class); the template escapes the text."""
    return TABLE.render(header=header, rows=rows, css=css)


def scorecard(claims_csv) -> str:
    """The scorecard as an HTML page: each claim's verdict line, a tally, then one row per check
    (its 95% CI, p and n where the scorecard has them), the result cell coloured: PASS green,
    FAIL red, INCONCLUSIVE amber, N/A grey, descriptive rows plain."""
    df = read_table(claims_csv, CLAIMS_COLUMNS, "the claims scorecard", dtype=str, keep_default_na=False)
    rows = df.to_dict("records")
    verdicts = [(claims.heading(c), claims.verdict(rows, c)) for c in sorted(df["claim"].unique())]
    paper = df["claim"].isin(claims.EXPERIMENTS)  # the README's verdict table counts these rows only
    tally = (_tally("the paper's claims", df.loc[paper, "result"].value_counts())
             + (_tally("beyond the paper", df.loc[~paper, "result"].value_counts()) if (~paper).any() else ""))
    tests = "ci_low" in df.columns  # a scorecard of statistical tests: interval, p and units
    # no experiment column: the verdict lines above name each experiment, and a column would widen
    # the page past a 1,400 px window
    header = ["claim", "check", "value", *(["95% CI", "p", "n"] if tests else []), "threshold", "result", "detail"]

    def cells(r: dict) -> list[tuple[str, str]]:
        out = [(r["claim"], ""), (r["check"], ""), (r["value"], "num")]
        if tests:
            ci = f"[{r['ci_low']}, {r['ci_high']}]" if r["ci_low"] else ""
            out += [(ci, "num"), (r["p"], "num"), (r["n"], "num")]
        return out + [(r["threshold"], ""), (r["result"], f"result {result_class(r['result'])}"), (r["detail"], "")]

    body = SCORECARD.render(verdicts=verdicts) + tally + _table(header, [cells(r) for r in rows], css="scorecard")
    return _page("Claims scorecard", body)


def _tally(label: str, counts) -> str:
    """One line of counts per result (PASS, FAIL, INCONCLUSIVE always; N/A, descriptive where present)."""
    shown = [(r, counts.get(r, 0)) for r in RESULTS if r in counts or r in RESULTS[:3]]
    return TALLY.render(label=label, counts=shown, result_class=result_class)


HEADING = _JINJA.from_string("<h{{ level }}>{{ text }}</h{{ level }}>\n")
PARAGRAPH = _JINJA.from_string("<p>{{ text }}</p>\n")
_CELL = re.compile(r"^(\d+(?:\.\d+)?) ± ")


def summary(summary_md) -> str:
    """summary.md (headings and pipe tables, as aggregate.summary_markdown writes it) as HTML;
    each accuracy cell is shaded by its mean, so that where a scheme breaks down shows at once."""
    parts, table = [], []

    def flush():
        if table:
            header, *rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table
                             if not re.fullmatch(r"\|(?:-+\|)+", line.strip())]
            parts.append(_table(header, [[(c, _shade(c)) for c in row] for row in rows], css="summary"))
            table.clear()

    for line in _summary_lines(summary_md):
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if m := re.match(r"^(#{1,3}) (.*)", line):
            level = len(m.group(1)) + 1  # the page's title is h1
            parts.append(HEADING.render(level=level, text=m.group(2)))
        elif line.strip():
            parts.append(PARAGRAPH.render(text=line))
    flush()
    return _page("Length sweep summary", "".join(parts))


def _summary_lines(summary_md) -> list[str]:
    try:
        return Path(summary_md).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise corrupt_table(summary_md, UserError(f"{summary_md}: not UTF-8 text, expected the summary")) from None


def _shade(cell: str) -> str:
    """A class by mean accuracy: >= 0.9 pass-green, <= 0.6 fail-red, between amber."""
    m = _CELL.match(cell)
    if not m:
        return ""
    mean = float(m.group(1))
    return "num " + ("pass" if mean >= 0.9 else "fail" if mean <= 0.6 else "inconclusive")


def run_page(config: dict, provenance_json) -> tuple[str, str]:
    """(the effective configuration as YAML, an HTML page of it and of the provenance record)."""
    config_yaml = yaml.safe_dump(config, sort_keys=False, default_flow_style=None, width=100)
    record = read_intermediate(provenance_json, lambda path: json.loads(Path(path).read_bytes()), "provenance record")
    provenance = json.dumps(record, indent=2, sort_keys=True)
    body = RUN.render(config_yaml=config_yaml, provenance=provenance)
    return config_yaml, _page("Configuration and provenance", body)


def write_pages(claims_csv, summary_md, provenance_json, config: dict, out: dict) -> None:
    """out: scorecard, summary, run (HTML pages) and config (YAML) -> path."""
    config_yaml, run_html = run_page(config, provenance_json)
    pages = {"scorecard": scorecard(claims_csv), "summary": summary(summary_md), "run": run_html, "config": config_yaml}
    with atomic_paths([out[name] for name in pages]) as temporaries:
        for tmp, text in zip(temporaries, pages.values(), strict=True):
            tmp.write_text(text)
