"""`make` alone lists the targets with what each does; `make run` goes through the lock check."""

import re
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")


def _targets(repo) -> dict:
    """The Makefile's `target: ... ## what it does` lines."""
    found = re.findall(r"^([a-z]+):.*## (.+)$", (repo / "Makefile").read_text(), flags=re.M)
    return dict(found)


@pytest.mark.subprocess
def test_make_alone_lists_every_documented_target(repo):
    listed = subprocess.run(["make", "-s"], cwd=repo, capture_output=True, text=True, check=True).stdout
    targets = _targets(repo)
    assert {"help", "run", "test", "lint", "report", "clean"} <= set(targets)
    for name, text in targets.items():
        assert re.search(rf"^  make {name} +{re.escape(text)}$", listed, flags=re.M), (name, listed)


@pytest.mark.subprocess
def test_runs_that_write_results_clear_a_stale_lock_first(repo):
    dry = subprocess.run(["make", "-n", "run", "paper"], cwd=repo, capture_output=True, text=True).stdout
    runs = [line for line in dry.splitlines() if " --cores " in line]
    assert len(runs) == 2 and all("-m lengthgen.support.unlock snakemake --cores" in line for line in runs), dry


@pytest.mark.parametrize(("config", "results"), [(None, "results"), ("config/smoke.yaml", "results-smoke"),
                                                 ("config/paper.yaml", "results-paper")])
@pytest.mark.subprocess
def test_targets_follow_the_configuration_and_its_results_dir(repo, config, results):
    args = ["make", "-n", "run", "report", "diff", "clean"] + ([f"CONFIG={config}"] if config else [])
    dry = subprocess.run(args, cwd=repo, capture_output=True, text=True).stdout
    runs = [line for line in dry.splitlines() if "snakemake --cores" in line]
    assert len(runs) == 2 and all((f"--configfile {config}" in line) == bool(config) for line in runs), dry
    assert f"--report {results}/report.html" in dry and f"--tables {results}/tables" in dry
    assert f"rm -rf {results}/data {results}/runs" in dry and f"cat {results}/tables/claims.md" in dry
    others = {"results", "results-smoke", "results-paper"} - {results}
    assert not any(re.search(rf"(^|[ /]){o}/", dry, flags=re.M) for o in others), dry


@pytest.mark.subprocess
def test_a_configuration_without_results_dir_is_followed_to_results_of_its_name(repo, tmp_path):
    """The workflow writes such a variant under results-<its name> (config.variant_results_dir)."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("seeds: [7]\n")
    dry = subprocess.run(["make", "-n", "report", "diff", "clean", f"CONFIG={mine}"], cwd=repo, capture_output=True,
                         text=True).stdout
    assert "--report results-mine/report.html" in dry and "--tables results-mine/tables" in dry
    assert "rm -rf results-mine/data" in dry and not re.search(r"(^|[ /])results/", dry, flags=re.M), dry
