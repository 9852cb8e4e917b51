"""The workflow end to end on config/smoke.yaml, and the caching contract by dry runs:
nothing to redo after a run; a task parameter reruns only that task; a model edit reruns
training and what follows but not data; a figure edit reruns only the figure."""

import ast
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pandas as pd
import pytest
import yaml
from conftest import REPO, SMOKE_RESULTS, VENV_BIN, copy_workflow, run_snakemake, venv_env

from lengthgen.analysis.aggregate import read_sweep

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

SMOKE = ["--configfile", "config/smoke.yaml"]


def planned_jobs(workdir, *args) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job a dry run would execute."""
    done = run_snakemake(workdir, "-n", "-c1", *SMOKE, *args)
    assert done.returncode == 0, done.stderr
    text = done.stdout + done.stderr
    jobs, rule = [], None
    for line in text.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):$", line.strip()):
            rule = m.group(1)
            jobs.append((rule, ""))
        elif rule and (m := re.match(r"^wildcards: (.*)$", line.strip())):
            jobs[-1] = (rule, m.group(1))
    return jobs


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("smoke")
    copy_workflow(workdir)
    done = run_snakemake(workdir, "--cores", "all", *SMOKE)
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def test_smoke_tables_are_long_sorted_and_complete(smoke_run):
    cfg = yaml.safe_load((smoke_run / "config/smoke.yaml").read_text())
    df = read_sweep(smoke_run / SMOKE_RESULTS / "tables/length_sweep.csv")
    assert list(df.columns) == ["task", "scheme", "seed", "length", "k", "depth", "examples", "accuracy",
                                "token_accuracy", "position_accuracy"]
    depths = {t["name"]: t["params"].get("depth_max", 1) - t["params"].get("depth_min", 1) + 1 for t in cfg["tasks"]}
    cells = sum(len(t["schemes"]) * len(t["eval"]["lengths"]) * depths[t["name"]] for t in cfg["tasks"])
    cells *= len(cfg["seeds"])
    assert len(df) == cells
    assert df.equals(df.sort_values(["task", "scheme", "seed", "length", "k", "depth"]).reset_index(drop=True))
    examples = {t["name"]: t["eval"]["examples"] for t in cfg["tasks"]}
    assert (df["examples"] == df["task"].map(examples)).all() and df["accuracy"].between(0, 1).all()
    ppc = df["scheme"] == "ppc"
    assert df.loc[ppc, "position_accuracy"].between(0, 1).all() and df.loc[~ppc, "position_accuracy"].isna().all()
    assert df.loc[df["task"] == "smoke_assignment", "depth"].notna().all()
    text = (smoke_run / SMOKE_RESULTS / "tables/length_sweep.csv").read_text()
    assert all(len(v.split(".")[1]) == 4 for v in re.findall(r",(\d\.\d+)$", text, flags=re.M))
    assert str(smoke_run) not in text and "/" not in text
    assert (smoke_run / SMOKE_RESULTS / "figures/sparse_parity.png").stat().st_size > 10_000
    assert (smoke_run / SMOKE_RESULTS / "figures/coupling.png").stat().st_size > 10_000
    assert "smoke_k1" in (smoke_run / SMOKE_RESULTS / "tables/summary.md").read_text()
    claims = pd.read_csv(smoke_run / SMOKE_RESULTS / "tables/claims.csv", keep_default_na=False)
    assert set(claims["claim"]) == {"1 sparsity", "2 coupling", "3 language", "analysis attention"}
    assert "not in this grid" not in " ".join(claims["check"])
    sparsity = claims[claims["claim"] == "1 sparsity"].set_index("check")["result"]
    # the smoke grid has 2 seeds, below min_models_per_k: the tests cannot decide, and say so
    assert sparsity.filter(like="one point per fitted model").tolist() == ["INCONCLUSIVE", "INCONCLUSIVE"]
    assert set(sparsity.filter(like=" at n=")) == {"descriptive"}
    coupling = claims[claims["claim"] == "2 coupling"].set_index("check")["result"]
    verdicts = coupling.filter(like="smoke_scratchpad at n=20 (2x): ppc")
    assert len(verdicts) == 1 and set(coupling) <= {"PASS", "FAIL", "INCONCLUSIVE", "descriptive", "N/A"}
    # E3 runs ppc alone at two lengths (no 4x), so its comparisons are not measured, and say so
    assert all(check.startswith("smoke_assignment") for check in coupling[coupling == "N/A"].index)


def test_smoke_attention_table_covers_every_cell_and_length(smoke_run):
    from lengthgen.analysis import attention as attention_report

    cfg = yaml.safe_load((smoke_run / "config/smoke.yaml").read_text())
    df = attention_report.read(smoke_run / SMOKE_RESULTS / "tables/attention.csv")
    language, df = df[df["task"] == "language"], df[df["task"] != "language"]
    assert set(language["metric"]) == {"mass", "topk_mass", "jaccard", "chance", "jaccard_chance"}
    assert (language["examples"] == cfg["language"]["influence"]["targets"]).all()  # per pair of models
    assert sorted(language["seed"].unique()) == cfg["language"]["seeds"]
    chance = df[df["metric"] == "chance"]
    cells = {(t["name"], s, seed, n) for t in cfg["tasks"] for s in t["schemes"] for seed in cfg["seeds"]
             for n in t["eval"]["lengths"]}
    assert set(chance[["task", "scheme", "seed", "length"]].itertuples(index=False, name=None)) == cells
    heads = df.dropna(subset=["layer"]).groupby(["task", "scheme", "seed"])[["layer", "head"]].nunique()
    assert (heads["layer"] == cfg["model"]["n_layer"]).all() and (heads["head"] == cfg["model"]["n_head"]).all()
    assert df.loc[df["metric"].str.endswith("mass"), "value"].between(0, 1).all()
    assert (smoke_run / SMOKE_RESULTS / "figures/attention.png").stat().st_size > 10_000
    claims = pd.read_csv(smoke_run / SMOKE_RESULTS / "tables/claims.csv", keep_default_na=False)
    analysis = claims[claims["claim"] == "analysis attention"]
    # E1, E2, E3 each: the attribution row (a verdict) and the attention row (descriptive)
    assert len(analysis) == 6 and set(analysis["result"]) <= {"PASS", "FAIL", "INCONCLUSIVE", "descriptive"}
    assert "- analysis attention: beyond the paper" in (smoke_run / SMOKE_RESULTS / "tables/claims.md").read_text()


def test_smoke_language_tables_figures_and_claim_3(smoke_run):
    from lengthgen.analysis import language_scores
    from lengthgen.analysis.claims import language_checks

    cfg = yaml.safe_load((smoke_run / "config/smoke.yaml").read_text())["language"]
    seeds, targets = cfg["seeds"], cfg["influence"]["targets"]
    table = pd.read_csv(smoke_run / SMOKE_RESULTS / "tables/influence.csv")
    ks = cfg["influence"]["k"]
    long = table[table["model"] == "long"]
    assert len(long) == 2 + 4 * len(ks) and set(table["model"]) == {"long", "short", "pose"}  # greedy, null, ...
    assert (table["targets"] == targets * len(seeds)).all()  # every pair's scored tokens, pooled
    greedy = long[long["method"] == "greedy"].sort_values("k")["loss_mean"]
    assert greedy.is_monotonic_decreasing  # each greedy step adds the token that lowers the loss most
    for seed in seeds:
        scores = pd.read_parquet(smoke_run / SMOKE_RESULTS / f"language/scores/seed{seed}.parquet")
        assert scores["scored"].sum() == targets and len(scores) == cfg["influence"]["screen"]
        assert (scores["seed"] == seed).all() and scores["document"].notna().all()
    per_token = language_scores.read(smoke_run / SMOKE_RESULTS / "tables/language_scores.csv")
    assert len(per_token) == targets * len(seeds) and sorted(per_token["seed"].unique()) == seeds
    curves = pd.read_csv(smoke_run / SMOKE_RESULTS / "tables/language_train.csv")
    assert sorted(curves["model"].unique()) == ["long", "pose", "short"] and curves["validation_loss"].notna().all()
    assert sorted(curves["seed"].unique()) == seeds
    for name in ("influence_gap", "influence_recovered", "influence_short_model"):
        assert (smoke_run / SMOKE_RESULTS / f"figures/{name}.png").stat().st_size > 10_000
    claims = pd.read_csv(smoke_run / SMOKE_RESULTS / "tables/claims.csv", keep_default_na=False)
    language = claims[claims["claim"] == "3 language"].reset_index(drop=True)
    # greedy k=4, greedy - null, attention - random at each of k = 1, 2, 4, the short model; two
    # pairs of models, below claims.language.min_models: the rows cannot decide, and say so
    assert len(language) == 6 and set(language["result"]) == {"INCONCLUSIVE"}
    run_cfg = yaml.safe_load((smoke_run / SMOKE_RESULTS / "config.yaml").read_text())["claims"]
    again = language_checks(per_token, run_cfg["language"], run_cfg["stats"])
    assert [r["value"] for r in again] == pytest.approx(pd.to_numeric(language["value"]).tolist(), abs=1e-9)


def test_local_jobs_fork_from_the_warm_start_server(smoke_run):
    """The run's torch jobs ran in forks of one server (lengthgen.support.warm), and it is gone."""
    log = (smoke_run / ".snakemake/lengthgen-warm.log").read_text()
    ran = re.findall(r": (\S+): worker \d+$", log, flags=re.M)
    assert {"train", "sweep", "train-lm", "score"} <= set(ran), log
    assert "runs cold" not in log
    socket = re.search(r"serving (\S+);", log).group(1)
    assert not os.path.exists(os.path.dirname(socket)), "the server was stopped and its directory removed"


def test_second_run_has_nothing_to_do(smoke_run):
    assert planned_jobs(smoke_run) == []


def test_task_parameter_change_reruns_only_that_task(smoke_run, tmp_path):
    cfg = yaml.safe_load((smoke_run / "config/smoke.yaml").read_text())
    cfg["tasks"][1]["params"]["n_max"] = 9
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(smoke_run, "--configfile", str(changed))
    cell_jobs = [(r, w) for r, w in jobs if "task=" in w]  # not the figures, which follow the tables
    assert cell_jobs, "the changed task must rerun"
    assert all("task=smoke_k2" in w for _, w in cell_jobs), cell_jobs
    assert {r for r, _ in cell_jobs} == {"generate_dataset", "train", "length_sweep", "attention"}


def _edited(smoke_run, relpath, edit):
    """Apply `edit` (text -> text) to a source file of the copy; the caller restores it."""
    path = smoke_run / relpath
    backup = path.read_text()
    path.write_text(edit(backup))
    return path, backup


def _code_edit(text: str) -> str:
    return text + "\n_EDITED = 1\n"


def _comment_edit(text: str) -> str:
    """Comments, a docstring, blank lines and a line break changed; the code the same."""
    lines = text.splitlines()
    tree = ast.parse(text)
    if ast.get_docstring(tree, clean=False) is not None:
        first = tree.body[0].lineno - 1
        lines[first] = lines[first].replace('"""', '"""An edited docstring. ', 1)
    return "\n".join(["# an edit", "", *lines]) + "\n\n# another\n"


FIGURES = ("figure",)
ATTENTION = ("attention", "aggregate_attention", "figure_attention")  # the stage and what follows it
LANGUAGE_ATTENTION = ("language_attention", "aggregate_attention", "figure_attention")
# The record of a run's outputs (rule record) is remade whenever any of them is.
TRAINING = ("train", "length_sweep", "aggregate", "training_table", "claims", *FIGURES, "provenance", "report_pages",
            *ATTENTION, "record")
# The rules whose inputs or params the planning modules decide, and what follows them: no data,
# training, sweep or attention job.
PLANNED = {"aggregate", "training_table", "claims", *FIGURES, "provenance", "report_pages", "aggregate_attention",
           "figure_attention", "language_scores", "influence_report", "record", "all"}
# The claims, one module each in a package: an edit of any of them reruns the claims and the
# figures (lengthgen.reporting.figures imports the package), and nothing else.
CLAIMS_MODULES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "src/lengthgen/analysis/claims").glob("*.py"))


# End to end for the claims package's modules and five other files: Snakemake reruns a stage
# whose digest changed and what follows it.
# Which digests an edit of every other file changes is checked without Snakemake
# (tests/support/test_digest.py).
@pytest.mark.parametrize(
    ("relpath", "expected"),
    [
        ("src/lengthgen/model/transformer.py",
         {*TRAINING, "train_lm", "score_influence", "language_scores", "influence_report", *LANGUAGE_ATTENTION, "all"}),
        *((relpath, {"claims", *FIGURES, "report_pages", "record", "all"}) for relpath in CLAIMS_MODULES),
        ("src/lengthgen/analysis/scorecard.py", {"claims", "report_pages", "record", "all"}),
        ("src/lengthgen/layout.py", PLANNED),
        ("src/lengthgen/plan.py", PLANNED),
        ("src/lengthgen/evaluation/decode.py",
         {"length_sweep", "aggregate", "claims", *FIGURES, "report_pages", *ATTENTION, "record", "all"}),
    ],
)
def test_code_edit_reruns_exactly_its_stages(smoke_run, relpath, expected):
    path, backup = _edited(smoke_run, relpath, _code_edit)
    try:
        assert {r for r, _ in planned_jobs(smoke_run)} == expected
    finally:
        path.write_text(backup)
    assert planned_jobs(smoke_run) == []


def test_comment_and_docstring_edits_rerun_nothing(smoke_run):
    """Every source file at once, the command-line shim included: a digest follows the code."""
    sources = sorted((smoke_run / "src/lengthgen").rglob("*.py"))
    backups = {p: p.read_text() for p in sources}
    try:
        for path, text in backups.items():
            path.write_text(_comment_edit(text))
        assert planned_jobs(smoke_run) == []
    finally:
        for path, text in backups.items():
            path.write_text(text)


def test_a_new_task_module_reruns_nothing(smoke_run):
    """A task kind is a module of lengthgen/tasks: adding one changes no other task's digest."""
    tasks = smoke_run / "src/lengthgen/tasks"
    shutil.copy(tasks / "needle.py", tasks / "another_needle.py")
    try:
        assert planned_jobs(smoke_run) == []
    finally:
        (tasks / "another_needle.py").unlink()


@pytest.mark.parametrize("name", ["cli.py", "commands.py"])
def test_an_edit_to_the_command_line_shim_reruns_nothing(smoke_run, name):
    path, backup = _edited(smoke_run, f"src/lengthgen/{name}", _code_edit)
    try:
        assert planned_jobs(smoke_run) == []
    finally:
        path.write_text(backup)


def test_an_edit_of_one_subcommand_s_arguments_reruns_its_stage_and_what_follows(smoke_run):
    """The sweep's --eval declaration: the sweeps rerun, the training and attention do not."""
    path, backup = _edited(smoke_run, "src/lengthgen/commands.py",
                           lambda text: text.replace('"device threads batch_size"', '"batch_size device threads"'))
    try:
        assert {r for r, _ in planned_jobs(smoke_run)} == {"length_sweep", "aggregate", "claims", *FIGURES,
                                                           "report_pages", "record", "all"}
    finally:
        path.write_text(backup)


def test_ctrl_c_ends_in_one_line_and_a_rerun_gives_a_clean_run_s_tables(smoke_run, tmp_path):
    """Ctrl-C (SIGINT to every process of the run, as a terminal sends it) once training has
    started: no traceback, the last line says a rerun resumes, and the rerun's tables and
    figures are byte-identical to the fixture's uninterrupted run. That run used --cores all,
    this one --cores 1, so this is also the check that two runs agree byte for byte; figures
    too: a committed figure that changes on every run (an unseeded jitter) would show in every
    diff."""
    copy_workflow(tmp_path)
    command = [str(VENV_BIN / "python"), "-m", "lengthgen.support.unlock", str(VENV_BIN / "snakemake"), "-c1", *SMOKE]
    proc = subprocess.Popen(command, cwd=tmp_path, env=venv_env(PYTHONPATH=str(tmp_path / "src")),
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not list((tmp_path / SMOKE_RESULTS / "checkpoints").glob("**/*.pt")):
            assert proc.poll() is None and time.monotonic() < deadline, "no training checkpoint appeared"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGINT and "Traceback" not in out, out[-3000:]
    assert out.strip().splitlines()[-1].startswith("lengthgen: run interrupted (SIGINT); rerun the same command")
    assert "Error in rule" not in out  # the interrupted jobs' errors are held back
    left = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-s", str(proc.pid)], capture_output=True, text=True)
    assert not [line for line in left.stdout.splitlines() if line.split()[1] != "Z"], left.stdout
    assert not any((tmp_path / ".snakemake/locks").glob("*")), "Snakemake's lock is released"
    done = run_snakemake(tmp_path, "-c1", *SMOKE)
    assert done.returncode == 0, done.stderr[-3000:]
    for folder in ("tables", "figures"):
        first, again = smoke_run / SMOKE_RESULTS / folder, tmp_path / SMOKE_RESULTS / folder
        names = sorted(p.name for p in first.iterdir())
        assert names == sorted(p.name for p in again.iterdir()) and names
        for name in names:
            assert (first / name).read_bytes() == (again / name).read_bytes(), f"{folder}/{name}"
    shutil.rmtree(tmp_path / SMOKE_RESULTS)


def test_the_run_records_every_table_and_figure_it_wrote(smoke_run):
    results = smoke_run / SMOKE_RESULTS
    recorded = json.loads((results / "checksums.json").read_text())["sha256"]
    on_disk = sorted(p.relative_to(results).as_posix() for d in ("tables", "figures") for p in (results / d).iterdir())
    assert sorted(recorded) == on_disk and "tables/claims.csv" in on_disk and "figures/sparse_parity.png" in on_disk


def _first_accuracy_edited(sweep: bytes) -> bytes:
    """The sweep table with its first row's accuracy changed by hand."""
    lines = sweep.split(b"\n")
    cells, col = lines[1].split(b","), lines[0].split(b",").index(b"accuracy")
    cells[col] = b"0.1234" if cells[col] != b"0.1234" else b"0.4321"
    return b"\n".join([lines[0], b",".join(cells), *lines[2:]])


@pytest.mark.parametrize("damage", ["garbled sweep", "sweep cell edited", "scorecard cut at a line", "summary cut"])
def test_a_table_damaged_since_the_run_is_named_removed_and_rebuilt_by_one_rerun(smoke_run, damage):
    """Damage that reading catches (bytes that are no UTF-8) and damage it cannot (a valid CSV cut
    at a line break, a cell edited by hand): the rerun names the file in one line before any job
    starts, rebuilds it and what was made from it, and ends with every table as before, byte for
    byte. A dry run first plans that rebuild."""
    tables = smoke_run / SMOKE_RESULTS / "tables"
    before = {p.name: p.read_bytes() for p in tables.iterdir()}
    name, raw = {
        "garbled sweep": ("length_sweep.csv", b"\x89garbage\x00\n" * 8),
        "sweep cell edited": ("length_sweep.csv", _first_accuracy_edited(before["length_sweep.csv"])),
        "scorecard cut at a line": ("claims.csv", before["claims.csv"][: before["claims.csv"].index(b"\n", 150) + 1]),
        "summary cut": ("summary.md", before["summary.md"][:150]),
    }[damage]
    assert raw != before[name]
    (tables / name).write_bytes(raw)
    line = (f"lengthgen: {SMOKE_RESULTS}/tables/{name}: does not match its record ({SMOKE_RESULTS}/checksums.json): "
            "removed")
    assert ("claims", "") in planned_jobs(smoke_run)  # the dry run removed it, and plans its rebuild
    assert not (tables / name).exists()
    (tables / name).write_bytes(raw)
    done = run_snakemake(smoke_run, "-c1", *SMOKE)
    assert done.returncode == 0, done.stderr[-3000:]
    named = [ln for ln in done.stderr.splitlines() if "does not match its record" in ln]
    assert len(named) == 1 and named[0].startswith(line)
    assert {p.name: p.read_bytes() for p in tables.iterdir()} == before


def test_the_report_refuses_a_damaged_table_in_one_line_and_keeps_it(smoke_run):
    claims = smoke_run / SMOKE_RESULTS / "tables/claims.csv"
    good = claims.read_bytes()
    try:
        claims.write_bytes(good[:300])
        done = run_snakemake(smoke_run, *SMOKE, "--report", "damaged.html")
        assert done.returncode != 0 and not (smoke_run / "damaged.html").exists()
        assert done.stderr.splitlines()[-1].startswith(
            f"lengthgen: error: {SMOKE_RESULTS}/tables/claims.csv: does not match its record")
        assert claims.read_bytes() == good[:300]
    finally:
        claims.write_bytes(good)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system for the run needs root")
def test_a_disk_that_fills_during_the_run_is_named_in_one_line(tmp_path):
    """The results folder on a 64 MiB file system that fills once the first jobs have started:
    the failed jobs' logs may come out empty, and the run ends with a line naming the disk."""
    copy_workflow(tmp_path)
    disk = tmp_path / "results-full"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], check=True)
    try:
        run = subprocess.Popen([str(VENV_BIN / "snakemake"), "-c1", *SMOKE, "--config", "results_dir=results-full"],
                               cwd=tmp_path, env=venv_env(), text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        while not (disk / "runs").exists() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        assert (disk / "runs").exists(), "the run started training"
        (disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(disk).free - 64 * 1024))
        _, stderr = run.communicate(timeout=600)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    assert run.returncode != 0
    named = [line for line in stderr.splitlines() if "the disk filled during the run" in line]
    assert len(named) == 1, stderr[-3000:]
    assert named[0].startswith("lengthgen: error: results-full: the disk filled during the run (")
    assert named[0].endswith("free some space and rerun the same command")


def test_report_holds_every_figure_and_table_with_captions(smoke_run):
    done = run_snakemake(smoke_run, *SMOKE, "--report", "report.html")
    assert done.returncode == 0, done.stderr[-3000:]
    html = (smoke_run / "report.html").read_text()
    for name in ("sparse_parity.png", "attention.png", "summary.html", "claims.html", "run.html", "provenance.json"):
        assert name in html, name
    assert "The claims scorecard: each claim of the paper" in html  # a caption, verbatim
    # the figure rule's caption file holds a section per figure, chosen by the job's wildcard
    assert "E1, sparse parity (claim 1): accuracy" in html and "E2 and E3, position coupling (claim 2)" in html
    assert "Beyond the paper: claim 1" not in html  # the scale figure's, not drawn for the smoke grid
    assert len(html) > 100_000  # the figure is embedded, so the file stands alone


def test_paper_grid_is_valid_and_plans_over_a_thousand_jobs(tmp_path):
    """config/paper.yaml validates and plans a grid of over 1,000 jobs one model a job; stacked
    as it runs (device: cuda), each training block's models are swept and measured by one job."""
    jobs = {}
    for stack in ("stack=1", "stack=8"):
        done = run_snakemake(tmp_path, "-n", "--forceall", "-c4", "--configfile", "config/paper.yaml",
                             "--config", stack)
        assert done.returncode == 0, done.stderr[-2000:]
        jobs[stack] = dict(re.findall(r"^(\w+)\s+(\d+)$", done.stdout + done.stderr, re.M))
    assert int(jobs["stack=1"]["total"]) >= 1000, jobs["stack=1"]

    def blocks(stage: str) -> dict:  # seeds of each block -> jobs of that rule
        planned = jobs["stack=8"].items()
        return {rule.split("_seeds_")[1]: n for rule, n in planned if rule.startswith(f"{stage}_seeds_")}

    assert blocks("train") and blocks("length_sweep") == blocks("attention") == blocks("train")


def test_default_plans_the_longest_training_cells_first(tmp_path):
    """In the default's plan, every E3 training (8,000 steps) and its data outrank every E2 one (4,000),
    which outranks every E1 one, and all stay below E4's chain (priority 1): priorities order by
    cost."""
    done = run_snakemake(tmp_path, "-n", "--forceall", "-c2")
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = re.findall(r"^rule (\w+):\n(?:    .*\n)*?    wildcards: (.*)\n(?:    .*\n)*?    priority: ([\d.]+)",
                      done.stdout + done.stderr, re.M)
    train, data = {}, {}
    for rule, wildcards, priority in jobs:
        if rule in ("train", "generate_dataset"):
            task = re.sub(r"_k\d$", "", re.search(r"task=(\w+)", wildcards).group(1))  # E1's tasks as one
            (train if rule == "train" else data).setdefault(task, set()).add(float(priority))
    e1, e2, e3 = train["sparse_parity"], train["scratchpad_parity"], train["variable_assignment"]
    assert min(e3) > max(e2) and min(e2) > max(e1) and max(e3) < 1, train
    assert data == train, "a cell's data is made at its training's priority, not after every cheaper training"


def test_load_model_gives_the_trained_cell_that_scored_the_sweep(smoke_run):
    """lengthgen.load_model's model, decoding the test set itself, reproduces the sweep's
    accuracy for that cell, and says what it was trained as."""
    import numpy as np
    import torch

    import lengthgen
    from lengthgen import datasets
    from lengthgen.evaluation import decode

    results = smoke_run / SMOKE_RESULTS
    model = lengthgen.load_model(results / "runs/smoke_k1/nope/seed0/model.pt")
    assert not model.training and model.cell["task"] == model.task["task"] == "smoke_k1"
    assert model.cell["scheme"] == "nope" and model.cell["seed"] == 0 and model.info["steps"] > 0
    table, meta = datasets.read(results / "data/smoke_k1/test-seed0.parquet")  # seed 0's own test draw
    assert "<eos>" not in meta["vocab"]
    arrays = datasets.padded(table)
    sweep = lengthgen.load_sweep(results).query("task == 'smoke_k1' and scheme == 'nope' and seed == 0")
    for length, expected in zip(sweep["length"], sweep["accuracy"], strict=True):
        idx = np.flatnonzero(arrays["length"] == length)
        p, end = int(arrays["answer_start"][idx[0]]), int(arrays["seq_len"][idx[0]])
        tokens = torch.from_numpy(arrays["tokens"][idx, :end])
        ids = torch.arange(end).expand_as(tokens)
        with torch.no_grad():
            out, _ = decode.generate(model, tokens[:, :p], ids[:, :p], end - p, model.cell["scheme_options"],
                                     eos=-1, oracle_ids=ids[:, p:])  # sparse parity: no <eos>
        assert round(float((out == tokens[:, p:]).all(1).float().mean()), 4) == expected, length


def test_each_model_seed_is_scored_on_its_own_test_draw(smoke_run):
    """test_sets: per_seed (the default) gives seed s the draw eval_seed + s, disjoint from training;
    seed 1's draw differs from seed 0's, so one draw's luck does not move every model together."""
    from lengthgen import datasets

    results = smoke_run / SMOKE_RESULTS
    (t0, m0), (t1, m1) = (datasets.read(results / f"data/smoke_k1/test-seed{s}.parquet") for s in (0, 1))
    assert m0["split"] == m1["split"] == "test" and m1["seed"] == m0["seed"] + 1
    assert t0.column("tokens").to_pylist() != t1.column("tokens").to_pylist()
    assert not (results / "data/smoke_k1/test.parquet").exists()


@pytest.mark.workflow
def test_planning_a_run_does_not_import_torch(workflow_copy):
    """Every Snakemake start builds the DAG (dry runs, no-ops, each SLURM job's own start), and
    importing torch there would add about 1.5 s to each."""
    env = {**venv_env(), "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run([str(VENV_BIN / "snakemake"), "-n", "-c1", "--configfile", "config/smoke.yaml"],
                          cwd=workflow_copy, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "lengthgen.config" in imported and "torch" not in imported
