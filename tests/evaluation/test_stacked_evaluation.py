"""Evaluation by the stack: one job sweeps, and measures the attention of, every model of a trained
block, each on its own test set, to the bytes a job of its own writes; the workflow plans one
such job per block when training is stacked, and one per model otherwise."""

import json
import re

import pytest
from conftest import error_lines, make_cell, run_lengthgen, run_snakemake

from lengthgen.support import identity

SEEDS = (0, 1)
STAGES = {"sweep": ("--eval", {"device": "cpu", "threads": 1, "batch_size": 8}),
          "attention": ("--config", {"device": "cpu", "threads": 1, "examples": 4, "targets": 2})}


@pytest.fixture
def block(tmp_path, write_sparse_parity):
    """Two trained seeds, each with its own test set (other lengths, so a swap would show)."""
    from lengthgen.training.train import train

    data = write_sparse_parity(train_examples=64, lengths=(10, 14), examples=6)
    other = write_sparse_parity(subdir="other", lengths=(12, 16), examples=6, eval_seed=4322)
    tests, models, tokens = [data["test"], other["test"]], [], []
    for seed in SEEDS:
        cell = make_cell(seed=seed, max_steps=4)
        train(cell, data["train"], tmp_path / f"seed{seed}", tmp_path / "last.pt", log=lambda *_: None)
        models.append(tmp_path / f"seed{seed}/model.pt")
        tokens.append(identity.of_cell(cell))
    return {"models": models, "tests": tests, "tokens": tokens, "dir": tmp_path}


@pytest.mark.parametrize("stage", STAGES)
def test_one_job_of_a_block_writes_each_models_own_bytes(block, stage):
    flag, cfg = STAGES[stage]
    alone = []
    for model, test, token in zip(block["models"], block["tests"], block["tokens"], strict=True):
        alone.append(block["dir"] / f"alone-{token.split('/')[2]}.parquet")
        done = run_lengthgen(stage, "--model", model, "--data", test, flag, json.dumps(cfg), "--expect", token,
                             "--out", alone[-1])
        assert done.returncode == 0, done.stderr
    together = [block["dir"] / f"together-{s}.parquet" for s in SEEDS]
    done = run_lengthgen(stage, "--model", *block["models"], "--data", *block["tests"], flag, json.dumps(cfg),
                         "--expect", *block["tokens"], "--out", *together)
    assert done.returncode == 0, done.stderr
    for one, many in zip(alone, together, strict=True):
        assert one.read_bytes() == many.read_bytes()
    assert alone[0].read_bytes() != alone[1].read_bytes()


def test_a_block_given_fewer_outputs_than_models_stops_in_one_line(block):
    flag, cfg = STAGES["sweep"]
    done = run_lengthgen("sweep", "--model", *block["models"], "--data", *block["tests"], flag, json.dumps(cfg),
                         "--out", block["dir"] / "only-one.parquet")
    assert done.returncode == 2
    assert error_lines(done.stderr) == ["lengthgen: error: --out: 1 given for 2 models (--model); one per model"]
    assert not (block["dir"] / "only-one.parquet").exists()


def _planned(workdir, *config) -> dict:
    """Rule name -> the shell commands of its jobs, from a dry run of the smoke grid."""
    done = run_snakemake(workdir, "-n", "-p", "-c1", "--configfile", "config/smoke.yaml", "--config", *config)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs, rule = {}, None
    for line in (done.stdout + done.stderr).splitlines():
        if m := re.fullmatch(r"(?:local)?rule (\w+):", line.strip()):
            rule = m.group(1)
            jobs.setdefault(rule, [])
        elif rule and "python -m lengthgen" in line:
            jobs[rule].append(line)
    return jobs


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["device=cuda", "stack=3"])
def test_stacked_training_plans_one_sweep_and_one_attention_job_per_block(tmp_path, setting):
    """device: cuda (stack: auto) plans without a GPU (the machine is checked when a run starts);
    smoke's seeds 0 and 1 form one block per (task, scheme) either way."""
    jobs = _planned(tmp_path, setting, f"results_dir={tmp_path}/r")
    blocks = len(jobs["train_seeds_0_1"])
    assert blocks == 5  # the smoke grid's (task, scheme) pairs
    assert len(jobs["length_sweep_seeds_0_1"]) == blocks and len(jobs["attention_seeds_0_1"]) == blocks
    assert "length_sweep" not in jobs and "attention" not in jobs
    for command in jobs["length_sweep_seeds_0_1"] + jobs["attention_seeds_0_1"]:
        models = re.search(r"--model (\S+) (\S+) --data (\S+) (\S+) ", command).groups()
        assert [m.split("/")[-2] for m in models[:2]] == ["seed0", "seed1"]  # each model beside its own test set
        assert [d.split("/")[-1] for d in models[2:]] == ["test-seed0.parquet", "test-seed1.parquet"]


@pytest.mark.slow
def test_without_stacking_each_model_is_evaluated_by_a_job_of_its_own(tmp_path):
    jobs = _planned(tmp_path, f"results_dir={tmp_path}/r")
    assert len(jobs["length_sweep"]) == len(jobs["attention"]) == 10  # 5 (task, scheme) pairs x 2 seeds
    assert not [rule for rule in jobs if "_seeds_" in rule]
