"""Stacked training: a seed trained beside other seeds follows the trajectory it follows alone
(up to floating-point order), stops at the same step, writes the same files, and a stacked job
killed with SIGKILL resumes exactly."""

import copy
import os
import re
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
import yaml
from conftest import SMOKE_RESULTS, copy_workflow, make_cell, run_snakemake

from lengthgen import datasets
from lengthgen.config import fill_defaults
from lengthgen.config import seed_blocks as blocks
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import canonical_json
from lengthgen.training.stacked import train_stacked
from lengthgen.training.train import train

TASKS = {
    "parity": {"name": "parity", "kind": "sparse_parity", "train_examples": 800,
               "params": {"k": 1, "k_mode": "fixed", "n_min": 3, "n_max": 8, "locality": None}},
    "scratchpad": {"name": "scratchpad", "kind": "scratchpad_parity", "train_examples": 400,
                   "params": {"n_min": 2, "n_max": 8}},
    "assignment": {"name": "assignment", "kind": "variable_assignment", "train_examples": 400,
                   "params": {"n_min": 2, "n_max": 4, "depth_min": 1, "depth_max": 2, "distractor_depth_max": 2,
                              "variables": 8, "answer_format": "chain"}},
}
GAPS = {"fraction": 0.5, "max_cuts": 1}
CASES = {  # name: task, encoding, further scheme options
    "nope": ("parity", "none", {}),
    "ape": ("parity", "ape", {}),
    "alibi": ("parity", "alibi", {}),
    "rope-gaps": ("scratchpad", "rope", {"gaps": GAPS}),
    "ppc": ("scratchpad", "rope", {"positions": "coupled", "position_head": "pointer", "gaps": GAPS}),
    "ppc-copy": ("assignment", "rope", {"positions": "coupled", "position_head": "pointer", "copy": True,
                                        "pointer_offset": 2, "pointer_rope": False}),
    "classifier": ("scratchpad", "rope", {"positions": "coupled", "position_head": "classifier"}),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory, schema):
    root = tmp_path_factory.mktemp("data")
    paths = {}
    for name, task in TASKS.items():
        task = copy.deepcopy(task)
        fill_defaults(task["params"], schema["$defs"][f"{task['kind']}_params"], schema)
        paths[name] = root / f"{name}.parquet"
        datasets.generate({**task, "split": "train", "seed": 5}, "train", 5, paths[name])
    return paths


def _cell(case, seed, **train):
    task, encoding, options = CASES[case]
    return make_cell(task=task, scheme=case, seed=seed, encoding=encoding, options=options,
                     model={"max_position": 64}, **{"batch_size": 16, "max_steps": 50, "warmup_steps": 5, **train})


def _log(out):
    return pd.read_parquet(out / "train_log.parquet")


def test_seed_blocks_are_fixed_size_in_sorted_order():
    assert blocks([5, 0, 7, 1, 2, 3, 4, 6], 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert blocks([0, 1, 2, 3, 4, 5, 6, 7, 8], 4)[:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert blocks([2, 0, 1], 1) == [[0], [1], [2]]


@pytest.mark.parametrize("case", list(CASES))
def test_a_seed_stacked_trains_as_it_trains_alone(tmp_path, data, case):
    alone = tmp_path / "alone"
    train(_cell(case, 1), data[CASES[case][0]], alone, tmp_path / "a.pt", log=lambda *_: None)
    cells = [_cell(case, s) for s in (0, 1, 2)]
    outs = [tmp_path / f"stacked{s}" for s in (0, 1, 2)]
    train_stacked(cells, data[CASES[case][0]], outs, tmp_path / "s.pt", log=lambda *_: None)
    want, got = _log(alone), _log(outs[1])
    assert len(got) == len(want) == 50
    assert (got["loss"] - want["loss"]).abs().max() < 1e-5
    assert (got["accuracy"] == want["accuracy"]).all()
    assert not _log(outs[0])["loss"].equals(got["loss"])  # its neighbours are other models
    a, s = (torch.load(d / "model.pt", weights_only=True) for d in (alone, outs[1]))
    assert a.keys() == s.keys() and a["cell"] == s["cell"] and a["state_dict"].keys() == s["state_dict"].keys()
    for k, v in a["state_dict"].items():  # Adam turns rounding of a near-zero gradient into up to lr a step
        torch.testing.assert_close(s["state_dict"][k], v, atol=2e-3, rtol=1e-3)
    assert (alone / "meta.json").read_text() == (outs[1] / "meta.json").read_text().replace(
        str(s["final_loss"]), str(a["final_loss"])).replace(str(s["final_accuracy"]), str(a["final_accuracy"]))


@pytest.mark.parametrize("case", ["alibi", "ppc-copy", "classifier"])
def test_a_stack_of_one_trains_as_the_cell_alone(tmp_path, data, case):
    """A cell's step is a stack's step of one model (training/step.py): trained as a stack of one,
    a seed logs what it logs alone, up to the stacked forward's rounding."""
    alone, one = tmp_path / "alone", tmp_path / "one"
    train(_cell(case, 2), data[CASES[case][0]], alone, tmp_path / "a.pt", log=lambda *_: None)
    train_stacked([_cell(case, 2)], data[CASES[case][0]], [one], tmp_path / "s.pt", log=lambda *_: None)
    want, got = _log(alone), _log(one)
    assert len(got) == len(want) == 50 and (got["accuracy"] == want["accuracy"]).all()
    assert (got["loss"] - want["loss"]).abs().max() < 1e-5


def test_each_seed_of_a_stack_trains_on_its_own_training_set(tmp_path, data, schema):
    """With train_sets: per_seed every model of a stack reads its own draw: seed 1 stacked on
    its set trains as it trains alone on that set, and not as on its neighbour's."""
    task = copy.deepcopy(TASKS["parity"])
    fill_defaults(task["params"], schema["$defs"]["sparse_parity_params"], schema)
    other = tmp_path / "other.parquet"
    datasets.generate({**task, "split": "train", "seed": [5, 1]}, "train", [5, 1], other)
    alone = tmp_path / "alone"
    train(_cell("alibi", 1), other, alone, tmp_path / "a.pt", log=lambda *_: None)
    outs = [tmp_path / f"stacked{s}" for s in (0, 1)]
    train_stacked([_cell("alibi", s) for s in (0, 1)], [data["parity"], other], outs, tmp_path / "s.pt",
                  log=lambda *_: None)
    want, got = _log(alone), _log(outs[1])
    assert (got["loss"] - want["loss"]).abs().max() < 1e-5
    shared = tmp_path / "shared"
    train(_cell("alibi", 1), data["parity"], shared, tmp_path / "b.pt", log=lambda *_: None)
    assert (_log(shared)["loss"] - got["loss"]).abs().max() > 1e-3  # the draw matters: it is its own


def test_a_stack_refuses_a_count_of_training_sets_that_is_not_its_cells(tmp_path, data):
    with pytest.raises(UserError, match="--data: 2 training sets for 3 cells"):
        train_stacked([_cell("alibi", s) for s in (0, 1, 2)], [data["parity"]] * 2, [tmp_path / "x"] * 3,
                      tmp_path / "s.pt", log=lambda *_: None)


def test_each_model_stops_early_at_its_own_step_and_freezes(tmp_path, data):
    stop = {"early_stop": {"accuracy": 1.0, "loss": None, "patience": 5}, "max_steps": 400, "lr": 3e-3}
    steps = {}
    for seed in (0, 1, 2, 3):
        out = tmp_path / f"alone{seed}"
        steps[seed] = train(_cell("alibi", seed, **stop), data["parity"], out, tmp_path / "a.pt", log=lambda *_: None)
    assert all(s["stopped"] == "converged" for s in steps.values()) and len({s["steps"] for s in steps.values()}) > 1
    outs = [tmp_path / f"stacked{s}" for s in range(4)]
    got = train_stacked([_cell("alibi", s, **stop) for s in range(4)], data["parity"], outs, tmp_path / "s.pt",
                        log=lambda *_: None)
    for seed in range(4):
        assert got[seed]["steps"] == steps[seed]["steps"] and got[seed]["stopped"] == "converged"
        a = torch.load(tmp_path / f"alone{seed}" / "model.pt", weights_only=True)["state_dict"]
        s = torch.load(outs[seed] / "model.pt", weights_only=True)["state_dict"]
        for k, v in a.items():  # frozen at its own stop, not moved by the models still training
            torch.testing.assert_close(s[k], v, atol=5e-3, rtol=1e-3)


def _cmd(cells, data, outs, checkpoint):
    return [sys.executable, "-m", "lengthgen", "train-stack", "--cells", canonical_json(cells), "--data", str(data),
            "--out-dirs", *map(str, outs), "--checkpoint", str(checkpoint), "--code-digest", "test"]


@pytest.mark.slow
def test_sigkill_of_a_stacked_job_then_resume_matches_uninterrupted(tmp_path, data, repo):
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    stop = {"early_stop": {"accuracy": 1.0, "loss": None, "patience": 5}, "max_steps": 600, "lr": 3e-3,
            "checkpoint_every": 10}
    cells = [_cell("alibi", s, **stop) for s in range(3)]
    clean = [tmp_path / f"clean{s}" for s in range(3)]
    subprocess.run(_cmd(cells, data["parity"], clean, tmp_path / "c.pt"), check=True, env=env, capture_output=True)
    outs, checkpoint = [tmp_path / f"killed{s}" for s in range(3)], tmp_path / "k.pt"
    proc = subprocess.Popen(_cmd(cells, data["parity"], outs, checkpoint), env=env, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:  # kill once the first model has stopped and a checkpoint holds that
        if "stopped at step" in line:
            while not checkpoint.exists():
                time.sleep(0.01)
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL and checkpoint.exists() and not (outs[0] / "model.pt").exists()
    resumed = subprocess.run(_cmd(cells, data["parity"], outs, checkpoint), check=True, env=env, capture_output=True,
                             text=True)
    assert "resumed from step" in resumed.stderr
    for a, b in zip(clean, outs, strict=True):
        pd.testing.assert_frame_equal(_log(a), _log(b))
        sa, sb = (torch.load(d / "model.pt", weights_only=True)["state_dict"] for d in (a, b))
        assert all(torch.equal(sa[k], sb[k]) for k in sa)


def _train_jobs(workdir, seeds, stack, *extra):
    """(rule, wildcards) of the training jobs Snakemake would run for smoke_k1/nope at these seeds."""
    (workdir / "stack.yaml").write_text(f"seeds: {list(seeds)}\nstack: {stack}\n")
    targets = [f"{SMOKE_RESULTS}/runs/smoke_k1/nope/seed{s}/model.pt" for s in seeds]
    done = run_snakemake(workdir, *extra, "-c1", "--configfile", "config/smoke.yaml", "stack.yaml", "--", *targets)
    assert done.returncode == 0, done.stderr[-3000:]
    return sorted(m for m in re.findall(r"^rule (train\w*):", done.stdout + done.stderr, re.M))


@pytest.mark.workflow
@pytest.mark.slow
def test_adding_seeds_adds_blocks_and_leaves_trained_blocks_cached(tmp_path):
    copy_workflow(tmp_path)
    assert _train_jobs(tmp_path, [0, 1, 2], 1, "-n") == ["train"] * 3  # stack 1: one job per model
    assert _train_jobs(tmp_path, [0, 1], 2, "-n") == ["train_seeds_0_1"]
    _train_jobs(tmp_path, [0, 1], 2)  # trains seeds 0 and 1 in one job
    assert all((tmp_path / SMOKE_RESULTS / f"runs/smoke_k1/nope/seed{s}/meta.json").exists() for s in (0, 1))
    assert _train_jobs(tmp_path, [0, 1], 2, "-n") == []
    assert _train_jobs(tmp_path, [0, 1, 2, 3, 4], 2, "-n") == ["train_seeds_2_3", "train_seeds_4"]
    assert _train_jobs(tmp_path, [1, 0, 2, 3], 2, "-n") == ["train_seeds_2_3"]


def _planned(workdir, *args) -> list[tuple[str, str]]:
    """(rule, resources line) of every job a dry run of the default plans."""
    done = run_snakemake(workdir, "-n", "-c1", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = []
    for line in (done.stdout + done.stderr).splitlines():
        line = line.strip()
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            jobs.append((m.group(1), ""))
        elif line.startswith("resources:") and jobs:
            jobs[-1] = (jobs[-1][0], line)
    return jobs


@pytest.mark.workflow
def test_the_default_stacks_every_seed_on_cuda_and_none_on_cpu(workflow_copy):
    """stack: auto. On CUDA one training job per (task, scheme) holding all its seeds, each asking
    for one GPU slot; on CPU today's plan, one model per job and no GPU asked for."""
    cfg = yaml.safe_load((workflow_copy / "config.yaml").read_text())
    cells = {t["name"]: len(t["schemes"]) for t in cfg["tasks"]}
    cuda = _planned(workflow_copy, "--config", "device=cuda")
    training = [(rule, res) for rule, res in cuda if rule.startswith("train") and rule != "training_table"]
    blocks = {"train_seeds_" + "_".join(map(str, t.get("seeds", cfg["seeds"]))) for t in cfg["tasks"]}
    assert {rule for rule, _ in training} == blocks | {"train_lm"}
    assert len([r for r, _ in training if r.startswith("train_seeds")]) == sum(cells.values())
    assert all("gpu=1" in res for _, res in training) and all("gpu=1" in res for r, res in cuda if r == "length_sweep")
    cpu = _planned(workflow_copy, "--config", "device=cpu")
    training = [(rule, res) for rule, res in cpu if rule.startswith("train") and rule != "training_table"]
    seeds = {t["name"]: len(t.get("seeds", cfg["seeds"])) for t in cfg["tasks"]}
    assert len([r for r, _ in training if r == "train"]) == sum(cells[t] * seeds[t] for t in cells)
    assert not any(r.startswith("train_seeds") for r, _ in training) and all("gpu=0" in res for _, res in training)


@pytest.mark.workflow
@pytest.mark.slow
def test_tasks_with_their_own_seeds_get_their_own_blocks(tmp_path):
    copy_workflow(tmp_path)
    cfg = yaml.safe_load((tmp_path / "config/smoke.yaml").read_text())
    cfg["stack"] = 2
    for task in cfg["tasks"]:
        task["seeds"] = [0, 1, 2, 3] if task["name"] == "smoke_k1" else [0, 1, 2]
    (tmp_path / "blocks.yaml").write_text(yaml.safe_dump(cfg))
    done = run_snakemake(tmp_path, "-n", "-c1", "--configfile", "blocks.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    jobs, rule = [], None
    for line in (done.stdout + done.stderr).splitlines():
        if m := re.match(r"^rule (\w+):$", line.strip()):
            rule = m.group(1)
        elif rule and (m := re.match(r"^wildcards: task=(\w+), scheme=(\w+)$", line.strip())):
            jobs.append((m.group(1), m.group(2), rule))
    assert sorted(j for j in jobs if j[2].startswith("train") and j[0] in ("smoke_k1", "smoke_k2")) == [
        ("smoke_k1", "alibi", "train_seeds_0_1"), ("smoke_k1", "alibi", "train_seeds_2_3"),
        ("smoke_k1", "nope", "train_seeds_0_1"), ("smoke_k1", "nope", "train_seeds_2_3"),
        ("smoke_k2", "alibi", "train_seeds_0_1"), ("smoke_k2", "alibi", "train_seeds_2")]


def test_cells_that_differ_in_more_than_the_seed_are_refused_in_one_line(tmp_path, data):
    from conftest import run_lengthgen

    cells = [_cell("alibi", 0), _cell("nope", 1)]
    done = run_lengthgen("train-stack", "--cells", canonical_json(cells), "--data", data["parity"],
                         "--out-dirs", tmp_path / "a", tmp_path / "b", "--checkpoint", tmp_path / "c.pt")
    assert done.returncode != 0 and "--cells" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists()


def test_dropout_trains_the_block_one_model_at_a_time_and_says_so(tmp_path, data):
    from conftest import run_lengthgen

    cells = [{**_cell("alibi", s, max_steps=3), "model": {**_cell("alibi", s)["model"], "dropout": 0.1}}
             for s in (0, 1)]
    outs = [tmp_path / "s0", tmp_path / "s1"]
    done = run_lengthgen("train-stack", "--cells", canonical_json(cells), "--data", data["parity"],
                         "--out-dirs", *outs, "--checkpoint", tmp_path / "c.pt")
    assert done.returncode == 0, done.stderr
    assert "one model at a time: dropout" in done.stderr
    for seed, out in enumerate(outs):
        alone = tmp_path / f"alone{seed}"
        train(cells[seed], data["parity"], alone, tmp_path / "a.pt", log=lambda *_: None)
        pd.testing.assert_frame_equal(_log(out), _log(alone))
