"""Training of one (task, scheme, seed) cell.

Deterministic per seed: the batch at step s is a function of (seed, s) alone, so a job
killed at any point and resumed from its last checkpoint ends exactly where an
uninterrupted run would. Checkpoints live outside Snakemake's declared outputs (which
are deleted before a rerun) and are only resumed when they belong to the same cell.
"""

from __future__ import annotations

import functools
import hashlib
import math
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lengthgen import datasets, positions, progress, tasks
from lengthgen import device as devices
from lengthgen.errors import TrainingDiverged, UserError
from lengthgen.fileio import canonical_json, write_parquet, write_text
from lengthgen.loop import adamw, load_checkpoint, lr_at, save_checkpoint, save_tensors
from lengthgen.model import ModelConfig, Transformer, param_count, pointer_scores


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


def answer_mask(seq_len: torch.Tensor, answer_start: torch.Tensor, t: int) -> torch.Tensor:
    """(B, t) mask of the positions whose next token is an answer token."""
    target_pos = torch.arange(1, t + 1)[None, :]
    return (target_pos >= answer_start[:, None]) & (target_pos < seq_len[:, None])


COPY = 0  # with `copy`, the output head's class for "copy the pointed token" (padding's id)


def step_loss(model, batch: dict, dev, ppc_weight: float = 1.0, copy: bool = False):
    """Cross entropy on answer tokens (plus `ppc_weight` x the position head's cross entropy
    on the answer IDs fed back) and per-example exact match (B,), teacher forced.
    `batch["ids"]` holds the position IDs the model sees. With `copy`, a token the pointer
    copies is the head's target COPY, so the head only decides copy or not (e.g. EOS)."""
    t = int(batch["seq_len"].max())
    tokens, ids = batch["tokens"][:, :t].to(dev), batch["ids"][:, :t].to(dev)
    mask = answer_mask(batch["seq_len"], batch["answer_start"], t - 1).to(dev)
    if "unscored" in batch:  # targets a training-time gap moved: neither token nor ID is scored
        mask &= ~batch["unscored"][:, 1:t].to(dev)
    with devices.autocast(dev):
        h = packed_features(model, tokens[:, :-1], ids[:, :-1], batch["seq_len"] - 1)
        logits = model.head(h)
    targets = tokens[:, 1:]
    if copy:
        targets = targets.masked_fill(batch["pointer"][:, 1:t].to(dev) >= 0, COPY)
    loss = F.cross_entropy(logits[mask].float(), targets[mask])
    wrong = ((logits.argmax(-1) != targets) & mask).any(dim=1)
    if model.cfg.position_head != "none":
        pointer = batch["pointer"][:, 1:t].to(dev).masked_fill(~mask, -1)
        id_loss, id_wrong = _position_loss(model, h, ids, pointer, batch["answer_start"].to(dev))
        loss = loss + ppc_weight * id_loss
        wrong |= id_wrong
    return loss, ~wrong


def pack(lengths: list[int], width: int) -> tuple[list[int], list[int]]:
    """Row and offset of each sequence when sequences of `lengths` (each <= width) share rows
    of `width`: first fit, longest first."""
    if max(lengths, default=0) > width:
        raise ValueError(f"pack: a sequence of length {max(lengths)} does not fit rows of width {width}")
    free, row, offset = [], [0] * len(lengths), [0] * len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        r = next((r for r, room in enumerate(free) if room >= lengths[i]), len(free))
        if r == len(free):
            free.append(width)
        row[i], offset[i] = r, width - free[r]
        free[r] -= lengths[i]
    return row, offset


def packed_features(model, tokens: torch.Tensor, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """model.features of (B, T) examples of real `lengths`, computed without their padding.

    Padding was a third of the tokens of a training batch (E2, E3). The examples share rows of
    width T instead, each attending to its own tokens only (the same function of each example
    as unpacked), and the states are gathered back to (B, T, C). A padding position reads an
    arbitrary state: every loss masks it."""
    b, t = tokens.shape
    row, offset = pack(lengths.clamp(1, t).tolist(), t)
    dev = tokens.device
    real = torch.arange(t, device=dev)[None, :] < lengths.to(dev)[:, None]
    where = torch.tensor(row, device=dev)[:, None] * t + torch.tensor(offset, device=dev)[:, None]
    where = (where + torch.arange(t, device=dev)[None, :]).masked_fill(~real, 0)  # (B, T) index into the rows
    size = (max(row) + 1) * t

    def packed(values: torch.Tensor, fill: int) -> torch.Tensor:
        out = values.new_full((size,), fill)
        out[where[real]] = values[real]
        return out.view(-1, t)

    segments = packed(torch.arange(b, device=dev)[:, None].expand(b, t), -1)
    h = model.features(packed(tokens, 0), packed(ids, 0), segments=segments)
    return h.flatten(0, 1)[where]


def _position_loss(model, h: torch.Tensor, ids: torch.Tensor, pointer: torch.Tensor, answer_start: torch.Tensor):
    """The position head's loss and per-example errors on the answer tokens fed back
    (`pointer` >= 0: the prompt index holding the next token's ID)."""
    fed = pointer >= 0
    if model.cfg.position_head == "pointer":
        p = int(answer_start.max())
        scores = pointer_scores(model, h, ids[:, :-1], h[:, :p], ids[:, :p], answer_start)
        loss = F.cross_entropy(scores[fed], pointer[fed])
        wrong = ((scores.argmax(-1) != pointer) & fed).any(dim=1)
    else:
        targets = ids[:, 1:]
        scores = model.id_head(h).float()
        loss = F.cross_entropy(scores[fed], targets[fed])
        wrong = ((scores.argmax(-1) != targets) & fed).any(dim=1)
    return loss, wrong


def optimizer_step(model, opt, batch: dict, lr: float, grad_clip: float, dev, ppc_weight=1.0, copy=False):
    """One AdamW step on `batch`; returns its loss and exact-match accuracy (before the step).

    A non-finite loss is returned before any update, so the caller can stop cleanly."""
    for group in opt.param_groups:
        group["lr"] = lr
    model.train()
    loss, correct = step_loss(model, batch, dev, ppc_weight, copy)
    loss_value = loss.item()
    if math.isfinite(loss_value):
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
    return loss_value, correct.float().mean().item()


def _converged(loss: float, accuracy: float, early_stop: dict) -> bool:
    """A batch counts towards early stopping when it is accurate and, if set, its loss is low:
    fitting is not enough for length generalization, attention must also be sharp."""
    return accuracy >= early_stop["accuracy"] and (early_stop["loss"] is None or loss <= early_stop["loss"])


def _cell_id(cell: dict) -> str:
    return f"{cell['task']}/{cell['scheme']}/seed{cell['seed']}"


def _fingerprint(cell: dict, data_path, code_digest: str) -> str:
    """What a checkpoint must match to be resumed: the cell, the exact training file and the code."""
    data_sha = hashlib.sha256(Path(data_path).read_bytes()).hexdigest()
    return hashlib.sha256(canonical_json([cell, data_sha, code_digest]).encode()).hexdigest()[:16]


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
    cfg, cell_id = cell["train"], _cell_id(cell)
    dev = devices.resolve(cell["device"], cell["threads"])
    data, meta = load_training_data(data_path, cell)
    opts = cell["scheme_options"]
    gaps = tasks.get(meta["kind"]).gap_after(opts["positions"] == "coupled")
    torch.manual_seed(cell["seed"])
    model = build_model(cell, len(meta["vocab"])).to(dev)
    opt = adamw(model, cfg)
    fingerprint = _fingerprint(cell, data_path, code_digest)
    checkpoint_path = Path(checkpoint_path)
    state = load_checkpoint(checkpoint_path, fingerprint, log)
    step, streak, rows = 0, 0, []
    if state:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        step, streak, rows = state["step"], state["streak"], state["rows"]
        log(f"{cell_id}: resumed from step {step}")
    log(f"{cell_id}: {param_count(model):,} parameters on {devices.describe(dev)}, {len(data['tokens']):,} examples")
    patience = cfg["early_stop"]["patience"]
    started, last_print = time.perf_counter(), 0.0
    while step < cfg["max_steps"] and not (patience and streak >= patience):
        batch = training_batch(data, step, cell, gaps)
        loss_value, acc_value = optimizer_step(
            model, opt, batch, lr_at(step, cfg), cfg["grad_clip"], dev, opts["ppc_weight"], opts["copy"]
        )
        if not math.isfinite(loss_value):
            raise TrainingDiverged(f"{cell_id}: loss is {loss_value} at step {step}; lower train.lr or check the data")
        streak = streak + 1 if _converged(loss_value, acc_value, cfg["early_stop"]) else 0
        rows.append((step, loss_value, acc_value, opt.param_groups[0]["lr"]))
        step += 1
        elapsed = time.perf_counter() - started
        if step % cfg["log_every"] == 0 or elapsed - last_print > 30:
            last_print = elapsed
            log(f"{cell_id}: step {step}/{cfg['max_steps']} loss {loss_value:.4f} acc {acc_value:.3f} | "
                f"{progress.tail(step, cfg['max_steps'], elapsed, start=state['step'] if state else 0)}")
        if step % cfg["checkpoint_every"] == 0:
            save_checkpoint(
                checkpoint_path, fingerprint=fingerprint, model=model.state_dict(), optimizer=opt.state_dict(),
                rng=torch.get_rng_state(), step=step, streak=streak, rows=rows,
            )
    stopped = "converged" if patience and streak >= patience else "max_steps"
    log(f"{cell_id}: stopped at step {step} ({stopped}) after {time.perf_counter() - started:.1f} s")
    summary = _write_outputs(model, cell, meta, rows, Path(out_dir), dev, code_digest, stopped)
    checkpoint_path.unlink(missing_ok=True)  # the final model supersedes it
    return summary


def _write_outputs(model, cell, meta, rows, out_dir: Path, dev, code_digest, stopped) -> dict:
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
    save_tensors(out_dir / "model.pt", checkpoint)
    write_parquet(out_dir / "train_log.parquet", history)
    info = {
        "cell": cell,
        "code_digest": code_digest,
        "data": {k: meta[k] for k in ("task", "kind", "params", "seed")},
        "device": devices.describe(dev),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__},
        **summary,
    }
    write_text(out_dir / "meta.json", canonical_json(info) + "\n")
    return summary
