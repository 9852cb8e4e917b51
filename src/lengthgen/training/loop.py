"""The one training loop that every trainer runs: a cell (train.py), a block of stacked seeds
(stacked.py) and a language model of E4 (language/lm.py).

The loop owns what they share: the steps to max_steps or an early stop, resuming from a
checkpoint of the same run, stopping on a loss that is not finite, a checkpoint every few
steps, progress lines, and the final outputs, written whole before the checkpoint goes. A
trainer (a subclass of Trainer) supplies what differs: its optimizer step, what a step leaves
behind (log rows, early-stop streaks), what a checkpoint holds, when it has converged and what
it writes. Every random draw is the trainer's, made from (seed, step), so a resumed run takes
the steps an uninterrupted one takes.
"""

from __future__ import annotations

import hashlib
import math
import platform
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from lengthgen.model.checkpoint import save_tensors
from lengthgen.support import device as devices
from lengthgen.support import identity, progress
from lengthgen.support.errors import TrainingDiverged
from lengthgen.support.fileio import atomic_path, canonical_json, write_parquet, write_text
from lengthgen.training.optim import load_checkpoint, save_checkpoint

# Between the steps a trainer logs at, a progress line at least this often (seconds): a
# paper-scale step can take long enough that log_every steps leave a job silent for minutes.
QUIET_S = 30


class Trainer:
    """What one run supplies to `run`. The attributes are set by the subclass."""

    name: str  # the run in log lines and errors: a cell, a block of seeds, a language model
    about: str  # the line before the first step: model size, device, data
    advice: str  # what to do about a loss that is not finite
    max_steps: int
    checkpoint_every: int
    log_every: int  # a progress line every this many steps (and at max_steps)
    tokens_per_step: int | None = None  # when set, progress lines carry tokens/s

    def step(self, step: int) -> dict[str, float]:
        """Take optimizer step `step` (0-based); each model's loss by name. A loss that is not
        finite must leave its model as it was."""
        raise NotImplementedError

    def record(self, step: int) -> None:
        """What step `step` leaves behind once its losses are finite: rows, streaks, stops."""
        raise NotImplementedError

    def converged(self) -> bool:
        """Whether early stopping ends the run after the steps taken."""
        return False

    def status(self) -> str:
        """The progress line's account of the last step (its losses)."""
        raise NotImplementedError

    def checkpoint(self, steps: int) -> dict:
        """What a checkpoint after `steps` steps holds (tensors and plain types), "step" among them."""
        raise NotImplementedError

    def restore(self, state: dict) -> None:
        """Take up the run from a checkpoint that `checkpoint` made."""
        raise NotImplementedError

    def outputs(self, stopped: str) -> Iterable[tuple[Path, dict]]:
        """The final files, per output folder: file name -> content (see write_outputs).
        `stopped` is "converged" or "max_steps"."""
        raise NotImplementedError


def run(trainer: Trainer, checkpoint: Path, fingerprint: str, log=print) -> None:
    """Train from step 0, or from `checkpoint` when it has this `fingerprint`, to max_steps or
    convergence; write the outputs, then remove the checkpoint they supersede."""
    steps = _resume(trainer, checkpoint, fingerprint, log)
    log(f"{trainer.name}: {trainer.about}")
    lines = _ProgressLines(trainer, steps, log)
    while _going_on(trainer, steps):
        losses = trainer.step(steps)
        for who, loss in losses.items():
            if not math.isfinite(loss):
                raise TrainingDiverged(f"{who}: loss is {loss} at step {steps}; {trainer.advice}")
        trainer.record(steps)
        steps += 1
        lines.after(steps)
        # none after the last step: the outputs come next, and a killed job redoes a few steps
        if steps % trainer.checkpoint_every == 0 and _going_on(trainer, steps):
            save_checkpoint(checkpoint, fingerprint=fingerprint, **trainer.checkpoint(steps))
    stopped = "converged" if trainer.converged() else "max_steps"
    log(f"{trainer.name}: stopped at step {steps} ({stopped}) after {lines.elapsed():.1f} s")
    for out_dir, files in trainer.outputs(stopped):
        write_outputs(Path(out_dir), files)
    checkpoint.unlink(missing_ok=True)


def _going_on(trainer: Trainer, steps: int) -> bool:
    return steps < trainer.max_steps and not trainer.converged()


def _resume(trainer: Trainer, checkpoint: Path, fingerprint: str, log) -> int:
    """The steps already taken: those of the run's checkpoint, restored into `trainer`, or 0."""
    state = load_checkpoint(checkpoint, fingerprint, log)
    if not state:
        return 0
    trainer.restore(state)
    log(f"{trainer.name}: resumed from step {state['step']}")
    return state["step"]


class _ProgressLines:
    """`name: step 400/2000 <status> | 12 s, 32.5 steps/s, ETA 49 s`, every log_every steps, at
    max_steps, and after QUIET_S seconds without one."""

    def __init__(self, trainer: Trainer, first: int, log):
        self.trainer, self.first, self.log = trainer, first, log
        self.started, self.last = time.perf_counter(), 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def after(self, steps: int) -> None:
        t, elapsed = self.trainer, self.elapsed()
        if steps % t.log_every and steps != t.max_steps and elapsed - self.last <= QUIET_S:
            return
        self.last = elapsed
        line = (f"{t.name}: step {steps}/{t.max_steps} {t.status()} | "
                f"{progress.tail(steps, t.max_steps, elapsed, start=self.first)}")
        if t.tokens_per_step:
            line += f", {(steps - self.first) * t.tokens_per_step / elapsed:,.0f} tokens/s"
        self.log(line)


def write_outputs(out_dir: Path, files: dict) -> None:
    """`files` (name -> content) into `out_dir` in order, each renamed into place once whole
    (fileio.atomic_path): `.pt` a dict of tensors and plain types, `.parquet` columns (name ->
    list) or a DataFrame, `.json` an object written as canonical JSON."""
    for name, content in files.items():
        path = out_dir / name
        if name.endswith(".pt"):
            save_tensors(path, content)
        elif name.endswith(".parquet") and isinstance(content, dict):
            write_parquet(path, content)
        elif name.endswith(".parquet"):  # a DataFrame: its own writer keeps pandas' metadata
            with atomic_path(path) as tmp:
                content.to_parquet(tmp, index=False)
        elif name.endswith(".json"):
            write_text(path, canonical_json(content) + "\n")
        else:
            raise ValueError(f"write_outputs: no writer for {name}")


def fingerprint(*parts) -> str:
    """What a checkpoint must match to be resumed: the run's config, its inputs and the code."""
    return identity.fingerprint(list(parts))


def file_digest(path) -> str:
    """The SHA-256 of a file's bytes: an input of a fingerprint."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def next_streak(streak: int, loss: float, accuracy: float, early_stop: dict) -> int:
    """The early-stop streak after a batch: it counts when the batch is accurate and, if set, its
    loss is low (fitting is not enough for length generalization: attention must be sharp)."""
    good = accuracy >= early_stop["accuracy"] and (early_stop["loss"] is None or loss <= early_stop["loss"])
    return streak + 1 if good else 0


def patience_met(streak: int, early_stop: dict) -> bool:
    """Whether a streak stops training (a patience of 0 never does)."""
    return bool(early_stop["patience"]) and streak >= early_stop["patience"]


def machine(dev) -> dict:
    """Where a run trained, for its meta.json: the device and the library versions."""
    return {"device": devices.describe(dev),
            "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}}
