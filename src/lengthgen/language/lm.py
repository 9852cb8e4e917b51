"""Language models of E4: the project's decoder (rotary) trained on a token stream at one context.

Three models share this code: `long` (context T_long), `short` (context T_short) and `pose`
(context T_short, with PoSE skips so its position IDs span T_long; Zhu et al. 2024). As for the
synthetic cells, the batch at a step is a function of (seed, step) alone and checkpoints are
resumed only by the same spec, tokens and code, so a killed job ends where a whole one would.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from lengthgen.language import tokenizer as tokenizers
from lengthgen.language.loss import next_token_loss
from lengthgen.model.checkpoint import load_model
from lengthgen.model.transformer import ModelConfig, Transformer, param_count
from lengthgen.support import device as devices
from lengthgen.training import loop
from lengthgen.training.optim import adamw, lr_at
from lengthgen.training.step import optimizer_step


def build(spec: dict, vocab_size: int) -> Transformer:
    return Transformer(ModelConfig(vocab_size=vocab_size, encoding="rope", **spec["model"]))


def windows(stream, starts: np.ndarray, length: int) -> torch.Tensor:
    """(len(starts), length) int64 windows of the token stream."""
    return torch.from_numpy(np.stack([np.asarray(stream[s : s + length], dtype=np.int64) for s in starts]))


def position_ids(batch: int, context: int, pose_target: int | None, gen: torch.Generator) -> torch.Tensor:
    """0..context-1, or with PoSE one cut per window after which IDs jump by a skip drawn so
    that the largest ID stays below pose_target: the short window trains long distances."""
    ids = torch.arange(context)[None, :].expand(batch, context)
    if not pose_target:
        return ids
    cut = torch.randint(1, context, (batch, 1), generator=gen)
    skip = torch.randint(0, pose_target - context + 1, (batch, 1), generator=gen)
    return ids + (ids >= cut) * skip


def training_batch(stream, step: int, spec: dict, gen_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of context + 1 tokens (inputs and next tokens) and their position IDs."""
    gen = torch.Generator().manual_seed(gen_seed * 1_000_003 + step)
    t, b = spec["context"], spec["train"]["batch_size"]
    starts = torch.randint(0, len(stream) - t - 1, (b,), generator=gen).numpy()
    return windows(stream, starts, t + 1), position_ids(b, t, spec.get("pose_target"), gen)


def validation_windows(stream, spec: dict) -> torch.Tensor:
    """A fixed set of validation windows (the same at every evaluation and for every seed)."""
    gen = np.random.default_rng(12345)
    t = spec["context"]
    return windows(stream, gen.integers(0, len(stream) - t - 1, spec["train"]["eval_windows"]), t + 1)


@torch.no_grad()
def validation_loss(model, val: torch.Tensor, dev, batch: int = 32) -> float:
    model.eval()
    total, t = 0.0, val.shape[1] - 1
    ids = torch.arange(t, device=dev)[None, :]
    for chunk in val.split(batch):
        chunk = chunk.to(dev)
        with devices.autocast(dev):
            total += _loss(model, chunk, ids.expand(len(chunk), t)).item() * chunk[:, 1:].numel()
    return total / (len(val) * t)


def _loss(model, tokens: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss of windows `tokens` (B, T + 1) read at position IDs `ids` (B, T)."""
    h = model.features(tokens[:, :-1], ids)
    return next_token_loss(h.flatten(0, 1), model.head.weight, tokens[:, 1:].flatten())


def train_lm(spec: dict, tokenizer_path, tokens_dir, out_dir, checkpoint_path, code_digest: str = "", log=print):
    """Train one language model; write model.pt, train_log.parquet and meta.json into out_dir."""
    dev = devices.resolve(spec["device"], spec["threads"])
    tok = tokenizers.load(tokenizer_path)
    stream, _ = tokenizers.load_stream(tokens_dir, "train", tok.sha256)
    val = validation_windows(tokenizers.load_stream(tokens_dir, "validation", tok.sha256)[0], spec)
    torch.manual_seed(spec["seed"])
    model = build(spec, tok.vocab_size).to(dev)
    tokens_meta = tokenizers.info(tokens_dir)
    trainer = LMTrainer(spec, stream, val, model, dev, Path(out_dir), tok, tokens_meta, code_digest)
    fingerprint = loop.fingerprint(spec, tokens_meta, code_digest)
    loop.run(trainer, Path(checkpoint_path), fingerprint, log)


class LMTrainer(loop.Trainer):
    """A language model's part of the training loop: windows of the stream, the validation loss
    every eval_every steps, no early stop."""

    advice = "lower language.train.lr"

    def __init__(self, spec: dict, stream, val: torch.Tensor, model, dev, out_dir: Path, tok, tokens_meta: dict,
                 code_digest: str):
        self.spec, self.stream, self.val, self.model, self.dev, self.out_dir = spec, stream, val, model, dev, out_dir
        self.tok, self.tokens_meta, self.code_digest = tok, tokens_meta, code_digest
        self.cfg = cfg = spec["train"]
        self.opt, self.rows = adamw(model, cfg), []
        self.name = f"language/{spec['name']}/seed{spec['seed']}"
        self.max_steps, self.checkpoint_every = cfg["max_steps"], cfg["checkpoint_every"]
        self.log_every = cfg["eval_every"]  # a progress line with each validation loss
        self.tokens_per_step = cfg["batch_size"] * spec["context"]
        self.about = (f"{param_count(model):,} parameters on {devices.describe(dev)}, context {spec['context']}, "
                      f"{len(stream):,} training tokens")

    def step(self, step: int) -> dict[str, float]:
        self.loss = _step(self.model, self.opt, self.stream, step, self.spec, self.dev)
        return {self.name: self.loss}

    def record(self, step: int) -> None:
        done = step + 1
        evaluate = done % self.cfg["eval_every"] == 0 or done == self.max_steps
        self.val_loss = validation_loss(self.model, self.val, self.dev) if evaluate else None
        val_loss = math.nan if self.val_loss is None else self.val_loss
        self.rows.append((done, self.loss, self.opt.param_groups[0]["lr"], val_loss))

    def status(self) -> str:
        return f"loss {self.loss:.3f}" + ("" if self.val_loss is None else f" validation {self.val_loss:.3f}")

    def checkpoint(self, steps: int) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "step": steps, "rows": self.rows}

    def restore(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.rows = state["rows"]

    def outputs(self, stopped: str):
        log_df = pd.DataFrame(self.rows, columns=["step", "loss", "lr", "validation_loss"])
        final = float(log_df["validation_loss"].dropna().iloc[-1])
        state = {k: v.cpu() for k, v in self.model.state_dict().items()}
        checkpoint = {"model_args": self.model.cfg.to_dict(), "state_dict": state, "spec": self.spec,
                      "tokenizer_sha256": self.tok.sha256, "validation_loss": final}
        info = {"spec": self.spec, "code_digest": self.code_digest, "tokens": self.tokens_meta,
                **loop.machine(self.dev), "steps": len(log_df), "validation_loss": final}
        return [(self.out_dir, {"model.pt": checkpoint, "train_log.parquet": log_df, "meta.json": info})]


def _step(model, opt, stream, step: int, spec: dict, dev) -> float:
    """One optimizer step on the batch at `step`; its loss (before the step)."""
    cfg = spec["train"]
    tokens, ids = training_batch(stream, step, spec, spec["seed"])
    tokens, ids = tokens.to(dev), ids.to(dev)

    def forward():
        total = torch.zeros((), device=dev)
        for part in micro_batches(len(tokens), spec):  # gradients add up to the whole batch's
            with devices.autocast(dev):
                loss = _loss(model, tokens[part], ids[part]) * ((part.stop - part.start) / len(tokens))
            loss.backward()
            total += loss.detach()
        return total, None

    return optimizer_step(model, opt, lr_at(step, cfg), cfg["grad_clip"], forward)[0][0]


def micro_batches(batch: int, spec: dict) -> list[slice]:
    """The windows of each forward of a step: all at once, or `micro_batch_tokens` at a time."""
    tokens = spec["train"].get("micro_batch_tokens")
    size = batch if tokens is None else max(1, tokens // spec["context"])
    return [slice(start, min(start + size, batch)) for start in range(0, batch, size)]


def load(path) -> Transformer:
    """A trained language model from its model.pt, in eval mode on the CPU."""
    model, state = load_model(path)
    model.tokenizer_sha256 = state["tokenizer_sha256"]
    model.spec = state["spec"]
    return model
