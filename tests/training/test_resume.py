"""A training job killed with SIGKILL resumes from its checkpoint and ends exactly where
an uninterrupted run ends."""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from conftest import scheme_options

from lengthgen import datasets
from lengthgen.support.fileio import canonical_json

CELL = {
    "task": "resume_k2",
    "scheme": "rope",
    "seed": 7,
    "scheme_options": scheme_options(encoding="rope"),
    "model": {"n_layer": 1, "d_model": 32, "n_head": 2, "d_ff": 64, "dropout": 0.0, "max_position": 64},
    "train": {
        "batch_size": 32, "lr": 1e-3, "min_lr_ratio": 0.1, "weight_decay": 0.01, "warmup_steps": 10,
        "max_steps": 600, "grad_clip": 1.0, "checkpoint_every": 25, "log_every": 50,
        "early_stop": {"accuracy": 1.0, "loss": None, "patience": 0},
    },
    "device": "cpu",
    "threads": 1,
}


@pytest.fixture(scope="module")
def train_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.parquet"
    task = {"name": "resume_k2", "kind": "sparse_parity", "split": "train", "seed": 3, "train_examples": 3000,
            "params": {"k": 2, "k_mode": "fixed", "n_min": 6, "n_max": 10, "locality": None}}
    datasets.generate(task, "train", 3, path)
    return path


def _train_cmd(data, out_dir, checkpoint):
    return [sys.executable, "-m", "lengthgen", "train", "--cell", canonical_json(CELL), "--data", str(data),
            "--out-dir", str(out_dir), "--checkpoint", str(checkpoint), "--code-digest", "test"]


def _env(repo):
    return {**os.environ, "PYTHONPATH": str(repo / "src")}


def _final(out_dir):
    ckpt = torch.load(out_dir / "model.pt", weights_only=True)
    return ckpt, pd.read_parquet(out_dir / "train_log.parquet")


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted(tmp_path, train_data, repo):
    env = _env(repo)
    clean = tmp_path / "clean"
    subprocess.run(_train_cmd(train_data, clean, tmp_path / "clean.pt"), env=env, check=True, capture_output=True)

    killed, checkpoint = tmp_path / "killed", tmp_path / "killed.pt"
    proc = subprocess.Popen(_train_cmd(train_data, killed, checkpoint), env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not checkpoint.exists():  # wait for the first checkpoint, then kill without warning
        assert proc.poll() is None, "training finished before it could be killed; raise max_steps"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "model.pt").exists(), "a killed job must leave no final model"
    stopped_at = torch.load(checkpoint, weights_only=True)["step"]
    assert 0 < stopped_at < CELL["train"]["max_steps"]

    resumed = subprocess.run(_train_cmd(train_data, killed, checkpoint), env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from step {stopped_at}" in resumed.stderr
    assert not checkpoint.exists(), "the checkpoint is removed once the final model is written"

    (a, log_a), (b, log_b) = _final(clean), _final(killed)
    assert a["final_loss"] == b["final_loss"] and a["final_accuracy"] == b["final_accuracy"]
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    pd.testing.assert_frame_equal(log_a, log_b)
    meta = json.loads((killed / "meta.json").read_text())
    assert meta["steps"] == CELL["train"]["max_steps"]


@pytest.mark.subprocess
def test_checkpoint_of_another_config_is_not_resumed(tmp_path, train_data, repo):
    """A stale checkpoint (other config) is ignored: training starts over, with a note."""
    env = _env(repo)
    other = {**CELL, "seed": 8, "train": {**CELL["train"], "max_steps": 30}}
    cmd = _train_cmd(train_data, tmp_path / "a", tmp_path / "ck.pt")
    cmd[cmd.index("--cell") + 1] = canonical_json(other)
    other_ckpt = {"fingerprint": "not-this-cell", "step": 25}
    torch.save(other_ckpt, tmp_path / "ck.pt")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "belongs to another config; starting from step 0" in done.stderr
    assert pd.read_parquet(tmp_path / "a" / "train_log.parquet")["step"].tolist() == list(range(30))
