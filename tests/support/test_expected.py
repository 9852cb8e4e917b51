"""A run's tables without a record: the rows its own config asks for, or one line naming what is missing."""

import itertools
import subprocess

import pandas as pd
import pytest
import yaml
from conftest import PYTHON, REPO, venv_env

from lengthgen.support import expected, record
from lengthgen.support.errors import UserError

CONFIG = {"tasks": [{"name": "sparse_parity", "kind": "sparse_parity", "schemes": ["nope", "rope"], "seeds": [0, 1],
                     "eval": {"lengths": [12, 24]}},
                    {"name": "scratchpad_parity", "kind": "scratchpad_parity", "schemes": ["pc"], "seeds": [0],
                     "eval": {"lengths": [16, 32]}}],
          "language": None}
CLAIMS = pd.DataFrame({"claim": ["1 sparsity", "1 sparsity", "2 coupling", "2 coupling", "3 language"],
                       "experiment": ["E1", "E1", "E2", "E2", "E4"], "check": list("abcde"),
                       "result": ["PASS", "PASS", "PASS", "N/A", "N/A"]})


def _sweep() -> pd.DataFrame:
    rows = [("sparse_parity", s, seed, n, k) for s, seed, n, k in itertools.product(["nope", "rope"], [0, 1], [12, 24],
                                                                                       [1, 2])]
    rows += [("scratchpad_parity", "pc", 0, n, "") for n in (16, 32)]
    return pd.DataFrame(rows, columns=["task", "scheme", "seed", "length", "k"]).assign(accuracy=0.5)


@pytest.fixture
def run(tmp_path):
    """A finished run without a record: its config and two tables."""
    (tmp_path / "tables").mkdir()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    CLAIMS.to_csv(tmp_path / "tables/claims.csv", index=False)
    _sweep().to_csv(tmp_path / "tables/length_sweep.csv", index=False)
    return tmp_path


def test_whole_tables_pass_through_the_record_check(run):
    record.check(run / "tables/claims.csv")
    record.check(run / "tables/length_sweep.csv")
    record.check_tables(run / "tables")


def _missing(run, name: str) -> str:
    with pytest.raises(UserError) as err:
        record.check(run / "tables" / name)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{run / 'tables' / name}: lacks rows the run's config asks for (")
    return message


def test_a_scorecard_cut_at_a_line_break_is_refused(run):
    claims = run / "tables/claims.csv"
    claims.write_text("".join(claims.read_text().splitlines(keepends=True)[:3]))  # header and E1's rows
    assert "(claim '2 coupling'; claim '3 language'; experiment E2)" in _missing(run, "claims.csv")
    assert claims.exists()  # refused, not removed: the tools that check make nothing to replace it


def test_an_experiment_the_config_runs_must_have_its_rows(run):
    e3 = pd.DataFrame([{"claim": "2 coupling", "experiment": "E3", "check": "f", "result": "N/A"}])
    pd.concat([CLAIMS[CLAIMS["experiment"] != "E2"], e3]).to_csv(run / "tables/claims.csv", index=False)
    assert "(experiment E2)" in _missing(run, "claims.csv")
    (run / "config.yaml").unlink()  # a copied tables/ folder, or tables made by hand: not checked
    record.check(run / "tables/claims.csv")
    record.check(run / "tables/length_sweep.csv")


@pytest.mark.parametrize(("cut", "named"), [
    (1, "1 row(s) of scratchpad_parity/pc/seed0"),  # the last line: a length of the last cell
    (2, "cell scratchpad_parity/pc/seed0"),
    (3, "1 row(s) of sparse_parity/rope/seed1"),  # one k of a length
    (4, "lengths [24] of sparse_parity/rope/seed1"),
])
def test_a_sweep_that_lost_its_last_lines_names_the_cell(run, cut, named):
    sweep = run / "tables/length_sweep.csv"
    lines = sweep.read_text().splitlines(keepends=True)
    sweep.write_text("".join(lines[:-cut]))
    if cut == 1:  # the last cell had two lengths of one row each: a lost length, by name
        named = "lengths [32] of scratchpad_parity/pc/seed0"
    assert named in _missing(run, "length_sweep.csv")


def test_a_recorded_table_is_judged_by_its_record_alone(run):
    record.write(run)
    claims = run / "tables/claims.csv"
    claims.write_text(claims.read_text().replace("PASS", "FAIL"))
    with pytest.raises(UserError, match="does not match its record"):
        record.check(claims)


def test_other_files_and_folders_are_not_checked(run, tmp_path):
    pd.DataFrame({"x": [1]}).to_csv(run / "tables/attention.csv", index=False)
    record.check(run / "tables/attention.csv")
    loose = tmp_path / "claims.csv"  # not in a run's tables/
    loose.write_text("x\n")
    expected.check(loose)



@pytest.mark.subprocess
def test_verdict_refuses_a_cut_scorecard_of_a_run_without_a_record(run):
    claims, readme = run / "tables/claims.csv", run / "README.md"
    readme.write_text("before\n")
    claims.write_text("".join(claims.read_text().splitlines(keepends=True)[:4]))  # claim 3's row cut
    done = subprocess.run([PYTHON, "-m", "lengthgen", "verdict", str(claims), "--readme", str(readme)], cwd=run,
                          capture_output=True, text=True, env=venv_env(PYTHONPATH=str(REPO / "src")))
    assert done.returncode == 2 and done.stdout == "" and readme.read_text() == "before\n"
    assert done.stderr.splitlines() == [
        f"lengthgen: error: {claims}: lacks rows the run's config asks for (claim '3 language'): cut or edited since "
        "the run wrote it; rerun the workflow to rebuild it (or restore it: git checkout -- <file>)"]
