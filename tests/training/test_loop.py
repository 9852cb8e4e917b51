"""The training loop on its own, with a scripted trainer: it steps to max_steps or an early stop,
checkpoints every few steps (none after the last), resumes only its own run's checkpoint and
ends where an uninterrupted run ends, stops on a loss that is not finite, and writes the outputs
before it removes the checkpoint."""

import json
import math

import pandas as pd
import pytest
import torch

from lengthgen.support.errors import TrainingDiverged
from lengthgen.training import loop

EARLY_STOP = {"accuracy": 1.0, "loss": 0.5, "patience": 2}


class Scripted(loop.Trainer):
    """Step s has loss losses[s] and adds it to a weight (a non-finite one adds nothing); the
    streak counts losses up to 0.5. `die_at`: the step at which the job is killed."""

    name, about, advice = "toy/seed0", "a scripted run", "lower the toy's lr"

    def __init__(self, losses, out_dir, max_steps=9, checkpoint_every=3, log_every=4, patience=0, die_at=None):
        self.losses, self.out_dir, self.die_at = losses, out_dir, die_at
        self.max_steps, self.checkpoint_every, self.log_every = max_steps, checkpoint_every, log_every
        self.early_stop = {**EARLY_STOP, "patience": patience}
        self.weight, self.streak, self.rows, self.taken = torch.zeros(()), 0, [], []

    def step(self, step):
        if step == self.die_at:
            raise KeyboardInterrupt
        self.taken.append(step)
        if math.isfinite(self.losses[step]):
            self.weight += self.losses[step]
        return {self.name: self.losses[step]}

    def record(self, step):
        self.streak = loop.next_streak(self.streak, self.losses[step], 1.0, self.early_stop)
        self.rows.append((step, self.losses[step]))

    def converged(self):
        return loop.patience_met(self.streak, self.early_stop)

    def status(self):
        return f"loss {self.rows[-1][1]}"

    def checkpoint(self, steps):
        return {"weight": self.weight.clone(), "step": steps, "streak": self.streak, "rows": self.rows}

    def restore(self, state):
        self.weight, self.streak, self.rows = state["weight"], state["streak"], state["rows"]

    def outputs(self, stopped):
        columns = {"step": [r[0] for r in self.rows], "loss": [r[1] for r in self.rows]}
        files = {"model.pt": {"weight": self.weight, "stopped": stopped}, "train_log.parquet": columns,
                 "meta.json": {"steps": len(self.rows), "stopped": stopped}}
        return [(self.out_dir, files)]


@pytest.fixture
def saved(monkeypatch):
    """The steps of the checkpoints the loop saves."""
    steps, real = [], loop.save_checkpoint
    monkeypatch.setattr(loop, "save_checkpoint", lambda path, **s: (steps.append(s["step"]), real(path, **s)))
    return steps


def _run(trainer, tmp_path, lines=None, fingerprint="run-a"):
    loop.run(trainer, tmp_path / "ck.pt", fingerprint, (lines if lines is not None else []).append)
    return trainer


def _written(out_dir):
    return (torch.load(out_dir / "model.pt", weights_only=True), pd.read_parquet(out_dir / "train_log.parquet"),
            json.loads((out_dir / "meta.json").read_text()))


def test_a_run_steps_to_max_steps_writes_its_files_and_removes_its_checkpoint(tmp_path, saved):
    lines = []
    trainer = _run(Scripted([1.0] * 9, tmp_path / "out"), tmp_path, lines)
    assert trainer.taken == list(range(9)) and saved == [3, 6]  # none after the last step
    model, log, meta = _written(tmp_path / "out")
    assert model["weight"] == 9.0 and log["step"].tolist() == list(range(9))
    assert meta == {"steps": 9, "stopped": "max_steps"}
    assert not (tmp_path / "ck.pt").exists()
    assert lines[0] == "toy/seed0: a scripted run"
    assert [line.split(" | ")[0] for line in lines[1:-1]] == ["toy/seed0: step 4/9 loss 1.0",
                                                              "toy/seed0: step 8/9 loss 1.0",
                                                              "toy/seed0: step 9/9 loss 1.0"]
    assert lines[-1].startswith("toy/seed0: stopped at step 9 (max_steps) after ")


def test_a_killed_run_resumes_its_own_checkpoint_and_ends_as_a_whole_run(tmp_path, saved):
    losses = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    _run(Scripted(losses, tmp_path / "whole"), tmp_path)
    with pytest.raises(KeyboardInterrupt):
        _run(Scripted(losses, tmp_path / "killed", die_at=7), tmp_path)
    assert torch.load(tmp_path / "ck.pt", weights_only=True)["step"] == 6 and not (tmp_path / "killed").exists()
    lines = []
    resumed = _run(Scripted(losses, tmp_path / "killed"), tmp_path, lines)
    assert resumed.taken == [6, 7, 8] and "toy/seed0: resumed from step 6" in lines
    (a, log_a, meta_a), (b, log_b, meta_b) = _written(tmp_path / "whole"), _written(tmp_path / "killed")
    assert torch.equal(a["weight"], b["weight"]) and meta_a == meta_b
    pd.testing.assert_frame_equal(log_a, log_b)


def test_another_runs_checkpoint_is_not_resumed(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _run(Scripted([1.0] * 9, tmp_path / "out", die_at=7), tmp_path)
    lines = []
    other = _run(Scripted([1.0] * 9, tmp_path / "out"), tmp_path, lines, fingerprint="run-b")
    assert other.taken == list(range(9)) and any("belongs to another config" in line for line in lines)


def test_a_loss_that_is_not_finite_stops_the_run_naming_it_and_writes_nothing(tmp_path):
    trainer = Scripted([1.0, 1.0, 1.0, 1.0, math.nan, 1.0, 1.0, 1.0, 1.0], tmp_path / "out")
    with pytest.raises(TrainingDiverged, match=r"^toy/seed0: loss is nan at step 4; lower the toy's lr$"):
        _run(trainer, tmp_path)
    assert len(trainer.rows) == 4 and not (tmp_path / "out").exists()  # the bad step left no row


def test_early_stop_ends_the_run_without_a_checkpoint_at_its_end(tmp_path, saved):
    trainer = _run(Scripted([1.0, 1.0, 0.1, 0.1, 1.0, 1.0], tmp_path / "out", max_steps=6, checkpoint_every=2,
                            patience=2), tmp_path)
    assert trainer.taken == [0, 1, 2, 3] and saved == [2]
    assert _written(tmp_path / "out")[2] == {"steps": 4, "stopped": "converged"}


def test_a_quiet_run_logs_every_so_often_with_its_token_rate(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "QUIET_S", -1.0)
    trainer = Scripted([1.0] * 3, tmp_path / "out", max_steps=3, log_every=100)
    trainer.tokens_per_step = 64
    lines = []
    _run(trainer, tmp_path, lines)
    steps = [line for line in lines if ": step " in line]
    assert len(steps) == 3 and all(line.endswith(" tokens/s") for line in steps), lines


def test_write_outputs_writes_each_kind_and_refuses_an_unknown_one(tmp_path):
    frame = pd.DataFrame({"step": [1, 2], "loss": [0.5, math.nan]})
    files = {"a.pt": {"x": torch.ones(2)}, "b.parquet": frame, "c.json": {"b": 1, "a": 2}}
    loop.write_outputs(tmp_path, files)
    assert torch.equal(torch.load(tmp_path / "a.pt", weights_only=True)["x"], torch.ones(2))
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "b.parquet"), frame)
    assert (tmp_path / "c.json").read_text() == '{"a":2,"b":1}\n'
    with pytest.raises(ValueError, match="no writer for d.txt"):
        loop.write_outputs(tmp_path, {"d.txt": "text"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "b.parquet", "c.json"]  # no temporary left
