"""A newcomer's first commands on a fresh `git clone` of this commit: the smoke grid, the
default's dry run and the report all exit 0 and leave the committed default results as they
are; the report, rendered in headless Chromium, shows the scorecard on the page it opens on."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
import struct
import subprocess

import pytest
from conftest import REPO, SMOKE_RESULTS, VENV_BIN, venv_env
from html_tables import parse

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

# The tracked results of the default configuration, which no other command may touch.
COMMITTED = ("results/tables", "results/figures", "results/provenance.json")
SMOKE = ["--configfile", "config/smoke.yaml"]
COMMANDS = {
    "smoke": ["--cores", "all", *SMOKE],
    "default dry run": ["-n", "--cores", "all"],
    "default report": ["--report", "results/report.html"],
    "smoke report": [*SMOKE, "--report", f"{SMOKE_RESULTS}/report.html"],
}


def digests(root) -> dict[str, str]:
    """sha256 of every file of COMMITTED under root."""
    out = {}
    for name in COMMITTED:
        path = root / name
        for f in sorted([path] if path.is_file() else path.rglob("*")):
            if f.is_file():
                out[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def git(*args, cwd=REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A clone of HEAD (what a newcomer gets; uncommitted edits are not in it) with the commands
    run in it: {"dir", "before", "after", "runs": {name: CompletedProcess}}."""
    dst = tmp_path_factory.mktemp("fresh") / "lengthgen"
    git("clone", "--quiet", "--no-checkout", str(REPO), str(dst))
    git("checkout", "--quiet", "--detach", git("rev-parse", "HEAD").strip(), cwd=dst)
    if (REPO / "resources").is_dir():  # the fetched corpus (not tracked): not fetched again
        shutil.copytree(REPO / "resources", dst / "resources")
    before, runs = digests(dst), {}
    for name, args in COMMANDS.items():
        runs[name] = subprocess.run([str(VENV_BIN / "snakemake"), *args], cwd=dst, env=venv_env(), text=True,
                                    capture_output=True)
    return {"dir": dst, "before": before, "after": digests(dst), "runs": runs}


def test_readme_commands_exit_0_and_leave_the_committed_results_alone(clone):
    for name, done in clone["runs"].items():
        assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}"
    assert clone["before"] and set(clone["before"]) == set(git("ls-files", *COMMITTED, cwd=clone["dir"]).split())
    assert clone["after"] == clone["before"]
    assert git("status", "--porcelain", "--untracked-files=no", cwd=clone["dir"]) == ""
    # the smoke grid wrote its own tables, and the report of each configuration exists
    assert (clone["dir"] / SMOKE_RESULTS / "tables/claims.csv").is_file()
    assert (clone["dir"] / "results/report.html").is_file() and (clone["dir"] / SMOKE_RESULTS / "report.html").is_file()


# -- the report in a real browser -----------------------------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("no Chromium on PATH (.ci/run installs Debian's chromium when root)")


def render(browser: str, page, tmp_path, *args) -> subprocess.CompletedProcess:
    done = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", *args,
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def scorecard_rows(dom: str) -> list[dict[str, tuple[str, str]]]:
    """The scorecard table's rows: column name -> (cell text, cell class)."""
    tables = [t["rows"] for t in parse(dom).tables if t["class"] == "scorecard"]
    assert len(tables) == 1, f"{len(tables)} scorecard tables in the page"
    header, *rows = tables[0]
    return [dict(zip([name for name, _ in header], row, strict=True)) for row in rows]


def assert_rows_match(rows, claims_csv) -> None:
    """Every check of claims.csv is a row of the page, in order, with its text, value, threshold,
    result and detail, the result's cell coloured by its class."""
    with open(claims_csv, newline="") as f:
        expected = list(csv.DictReader(f))
    assert expected and len(rows) == len(expected)
    for row, want in zip(rows, expected, strict=True):
        for column in ("claim", "check", "value", "threshold", "result", "detail"):
            assert row[column][0] == want[column], (column, row, want)
        result_class = {"N/A": "na"}.get(want["result"], want["result"].lower())
        assert row["result"][1] == f"result {result_class}", row


@pytest.mark.parametrize("results", ["results", SMOKE_RESULTS])
def test_report_landing_page_shows_the_scorecard_in_chromium(clone, tmp_path, results):
    """The page the report opens on (its workflow description) holds the scorecard; the
    scorecard's own result page (one click away) too. The screenshot is left in tmp_path."""
    browser = chromium()
    root = clone["dir"] / results
    landing = render(browser, root / "report.html", tmp_path, "--dump-dom").stdout
    assert "lengthgen: sparsity and length generalization" in landing  # the workflow description
    assert_rows_match(scorecard_rows(landing), root / "tables/claims.csv")
    page = render(browser, root / "tables/claims.html", tmp_path, "--dump-dom").stdout
    assert_rows_match(scorecard_rows(page), root / "tables/claims.csv")
    shot = tmp_path / "report.png"
    render(browser, root / "report.html", tmp_path, f"--screenshot={shot}", "--window-size=1400,1000")
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1400, 1000)
    print(f"screenshot: {shot}")


# Run in the rendered page: where the scorecard and the rule graph lie, once both are drawn.
MEASURE = """<script>
(function measure() {
  const table = document.querySelector("table.scorecard"), graph = document.getElementById("rulegraph");
  if (!table || !graph || !graph.querySelector("canvas")) { setTimeout(measure, 50); return; }
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const out = document.createElement("pre");
  out.id = "geometry";
  out.textContent = JSON.stringify({table: box(table), graph: box(graph),
                                    width: document.documentElement.clientWidth});
  document.body.appendChild(out);
})();
</script>
"""


@pytest.mark.parametrize("width", [1400, 1920])
def test_report_landing_page_keeps_the_scorecard_clear_of_the_rule_graph(clone, tmp_path, width):
    """On a laptop's and a desktop's window the scorecard neither runs under the rule graph
    (Snakemake's viewer puts it beside the text) nor past the window's right edge."""
    page = (clone["dir"] / "results/report.html").read_text(encoding="utf-8")
    end = page.rindex("</body>")
    probe = tmp_path / "report.html"
    probe.write_text(page[:end] + MEASURE + page[end:], encoding="utf-8")
    dom = render(chromium(), probe, tmp_path, "--dump-dom", "--virtual-time-budget=10000",
                 f"--window-size={width},1000").stdout
    found = re.search(r'<pre id="geometry">([^<]*)</pre>', dom)
    assert found, "the page never drew both the scorecard and the rule graph"
    geometry = json.loads(found.group(1))
    (left, top, right, bottom), (g_left, g_top, g_right, g_bottom) = geometry["table"], geometry["graph"]
    apart = right <= g_left or g_right <= left or bottom <= g_top or g_bottom <= top
    assert apart, f"the scorecard {geometry['table']} overlaps the rule graph {geometry['graph']}"
    assert right <= geometry["width"], f"the scorecard ends at x={right}, past the window's {geometry['width']}"
