"""Training and scoring log lines end with elapsed time, rate and ETA."""

import re

from lengthgen.support import progress
from lengthgen.training.train import train


def test_tail_gives_elapsed_rate_and_eta():
    assert progress.tail(400, 2000, 12.3) == "12 s, 32.5 steps/s, ETA 49 s"
    assert progress.tail(3, 12, 1.5, unit="targets") == "1.5 s, 2.0 targets/s, ETA 4.5 s"


def test_a_resumed_run_counts_only_its_own_steps():
    # 100 steps done before the resume, 100 since, in 10 s: 10 steps/s, 800 to go
    assert progress.tail(200, 1000, 10.0, start=100) == "10 s, 10.0 steps/s, ETA 1 min 20 s"


def test_no_rate_before_the_first_unit():
    assert progress.tail(0, 10, 0.0) == "0.0 s, ? steps/s, ETA unknown"


def test_long_durations_read_in_minutes_and_hours():
    assert progress.duration(125) == "2 min 5 s"
    assert progress.duration(3725) == "1 h 02 min"


def test_training_log_lines_carry_progress(tiny_cell, tiny_dataset, tmp_path):
    lines = []
    cell = tiny_cell(max_steps=4, log_every=2)
    train(cell, tiny_dataset["train"], tmp_path / "out", tmp_path / "ckpt.pt", log=lines.append)
    steps = [line for line in lines if ": step " in line]
    assert len(steps) == 2, lines
    pattern = r": step (2|4)/4 loss \d+\.\d{4} acc \d\.\d{3} \| [\d.]+ s, [\d.]+ steps/s, ETA [\d.]+ s$"
    assert all(re.search(pattern, line) for line in steps), steps
    assert steps[-1].endswith("ETA 0.0 s")
