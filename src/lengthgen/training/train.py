"""Training of one (task, scheme, seed) cell.

Deterministic per seed: the batch at step s is a function of (seed, s) alone, so a job
killed at any point and resumed from its last checkpoint ends exactly where an
uninterrupted run would. Checkpoints live outside Snakemake's declared outputs (which
are deleted before a rerun) and are only resumed when they belong to the same cell. The loop
(resume, checkpoints, early stop, outputs) is training/loop.py's, the step (packing, loss,
update) training/step.py's, which a cell takes as a stack of one; CellTrainer is the cell's part.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from lengthgen import datasets, tasks
from lengthgen.model import positions
from lengthgen.model.transformer import ModelConfig, Transformer, param_count
from lengthgen.support import device as devices
from lengthgen.support.errors import UserError
from lengthgen.training import loop
from lengthgen.training.optim import adamw, lr_at
from lengthgen.training.step import cell_step


def build_model(cell: dict, vocab_size: int) -> Transformer:
    opts = cell["scheme_options"]
    cfg = ModelConfig(
        vocab_size=vocab_size, encoding=opts["encoding"], position_head=opts["position_head"],
        pointer_rope=opts["pointer_rope"], **cell["model"],
    )
    if "rope_base" in opts:
        cfg.rope_base = opts["rope_base"]
    return Transformer(cfg)


def batch_indices(step: int, n: int, batch: int, seed: int) -> torch.Tensor:
    """Indices of the batch at `step`: epoch-wise permutations seeded by (seed, epoch)."""
    per_epoch = max(1, n // batch)
    epoch, j = divmod(step, per_epoch)
    return _epoch_order(n, seed, epoch)[j * batch : (j + 1) * batch]


@functools.lru_cache(maxsize=64)
def _epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """One epoch's permutation, drawn once per epoch rather than once per step (and per seed:
    a stacked job steps several seeds in turn)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


def cell_id(cell: dict) -> str:
    """How log lines and errors name a cell: task/scheme/seed<n>."""
    return f"{cell['task']}/{cell['scheme']}/seed{cell['seed']}"


def load_training_data(path, cell: dict) -> tuple[dict, dict]:
    table, meta = datasets.read(path)
    if meta["task"] != cell["task"] or meta["split"] != "train":
        raise UserError(f"{path}: holds task {meta['task']!r} split {meta['split']!r}, expected {cell['task']!r} train")
    arrays = datasets.padded(table)
    opts = cell["scheme_options"]
    if opts["position_head"] != "none" or opts["copy"]:
        arrays["pointer"] = positions.pointer_targets(arrays["positions"], arrays["seq_len"], arrays["answer_start"],
                                                      opts["pointer_offset"])
    else:  # only a position head and copying read them (a Python loop, skipped when unused)
        arrays["pointer"] = np.full(np.shape(arrays["tokens"]), -1)
    keys = ("tokens", "positions", "seq_len", "answer_start", "pointer")
    return {k: torch.from_numpy(np.asarray(arrays[k], dtype=np.int64)) for k in keys}, meta


def training_batch(data: dict, step: int, cell: dict, gaps: tuple) -> dict:
    """The batch at `step` with its position IDs; offsets and gaps drawn from (seed, step)."""
    cfg = cell["train"]
    batch = {k: v[batch_indices(step, len(data["tokens"]), cfg["batch_size"], cell["seed"])] for k, v in data.items()}
    gen = torch.Generator().manual_seed(cell["seed"] * 1_000_003 + step + 7)
    opts, max_position = cell["scheme_options"], cell["model"]["max_position"]
    batch["ids"], batch["unscored"] = positions.training_ids(batch, opts, gaps, max_position, gen)
    return batch


def train(cell: dict, data_path, out_dir, checkpoint_path, code_digest: str = "", log=print) -> dict:
    """Train one cell; write model.pt, train_log.parquet and meta.json into `out_dir`."""
    dev = devices.resolve(cell["device"], cell["threads"])
    data, meta = load_training_data(data_path, cell)
    gaps = tasks.get(meta["kind"]).gap_after(cell["scheme_options"]["positions"] == "coupled")
    torch.manual_seed(cell["seed"])
    model = build_model(cell, len(meta["vocab"])).to(dev)
    trainer = CellTrainer(cell, data, meta, gaps, model, dev, Path(out_dir), code_digest)
    fingerprint = loop.fingerprint(cell, loop.file_digest(data_path), code_digest)
    loop.run(trainer, Path(checkpoint_path), fingerprint, log)
    return trainer.summary


class CellTrainer(loop.Trainer):
    """One cell's part of the training loop: its batches, loss, early-stop streak and files."""

    advice = "lower train.lr or check the data"

    def __init__(self, cell: dict, data: dict, meta: dict, gaps: tuple, model, dev, out_dir: Path, code_digest: str):
        self.cell, self.data, self.meta, self.gaps, self.model, self.dev = cell, data, meta, gaps, model, dev
        self.cfg, self.out_dir, self.code_digest = cell["train"], out_dir, code_digest
        self.opt = adamw(model, self.cfg)
        self.name, self.streak, self.rows = cell_id(cell), 0, []
        self.max_steps, self.checkpoint_every, self.log_every = (
            self.cfg["max_steps"], self.cfg["checkpoint_every"], self.cfg["log_every"])
        self.about = f"{param_count(model):,} parameters on {devices.describe(dev)}, {len(data['tokens']):,} examples"

    def step(self, step: int) -> dict[str, float]:
        batch = training_batch(self.data, step, self.cell, self.gaps)
        losses, accuracies = cell_step(self.model, self.opt, [batch], lr_at(step, self.cfg), self.cfg["grad_clip"],
                                       self.dev, self.cell["scheme_options"])
        self.last = losses[0], accuracies[0]
        return {self.name: self.last[0]}

    def record(self, step: int) -> None:
        loss, accuracy = self.last
        self.streak = loop.next_streak(self.streak, loss, accuracy, self.cfg["early_stop"])
        self.rows.append((step, loss, accuracy, self.opt.param_groups[0]["lr"]))

    def converged(self) -> bool:
        return loop.patience_met(self.streak, self.cfg["early_stop"])

    def status(self) -> str:
        return f"loss {self.last[0]:.4f} acc {self.last[1]:.3f}"

    def checkpoint(self, steps: int) -> dict:
        # the global RNG too: dropout draws from it
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "rng": torch.get_rng_state(),
                "step": steps, "streak": self.streak, "rows": self.rows}

    def restore(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        self.streak, self.rows = state["streak"], state["rows"]

    def outputs(self, stopped: str):
        self.summary, files = cell_outputs(self.model, self.cell, self.meta, self.rows, self.dev, self.code_digest,
                                           stopped)
        return [(self.out_dir, files)]


def cell_outputs(model, cell: dict, meta: dict, rows: list, dev, code_digest: str, stopped: str) -> tuple[dict, dict]:
    """A trained cell's summary, and its files for loop.write_outputs: model.pt,
    train_log.parquet (one row per step) and meta.json."""
    history = {name: [row[i] for row in rows] for i, name in enumerate(("step", "loss", "accuracy", "lr"))}
    summary = {
        "steps": len(rows),
        "stopped": stopped,
        "final_loss": float(np.mean(history["loss"][-20:])) if rows else float("nan"),
        "final_accuracy": float(np.mean(history["accuracy"][-20:])) if rows else float("nan"),
    }
    task = {k: meta[k] for k in ("task", "kind", "params", "vocab")}
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    checkpoint = {"model_args": model.cfg.to_dict(), "state_dict": state, "cell": cell, "task": task, **summary}
    info = {
        "cell": cell,
        "code_digest": code_digest,
        "data": {k: meta[k] for k in ("task", "kind", "params", "seed")},
        **loop.machine(dev),
        **summary,
    }
    return summary, {"model.pt": checkpoint, "train_log.parquet": history, "meta.json": info}
