"""Language models of E4: the project's decoder (rotary) trained on a token stream at one context.

Three models share this code: `long` (context T_long), `short` (context T_short) and `pose`
(context T_short, with PoSE skips so its position IDs span T_long; Zhu et al. 2024). As for the
synthetic cells, the batch at a step is a function of (seed, step) alone and checkpoints are
resumed only by the same spec, tokens and code, so a killed job ends where a whole one would.
"""

from __future__ import annotations

import hashlib
import math
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from lengthgen import device as devices
from lengthgen import progress
from lengthgen.errors import TrainingDiverged
from lengthgen.fileio import atomic_path, canonical_json, write_text
from lengthgen.language import tokenizer as tokenizers
from lengthgen.language.loss import next_token_loss
from lengthgen.loop import adamw, load_checkpoint, load_tensors, lr_at, save_checkpoint, save_tensors
from lengthgen.model import ModelConfig, Transformer, param_count


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


def _fingerprint(spec: dict, tokens_meta: dict, code_digest: str) -> str:
    return hashlib.sha256(canonical_json([spec, tokens_meta, code_digest]).encode()).hexdigest()[:16]


def train_lm(spec: dict, tokenizer_path, tokens_dir, out_dir, checkpoint_path, code_digest: str = "", log=print):
    """Train one language model; write model.pt, train_log.parquet and meta.json into out_dir."""
    cfg, name = spec["train"], f"language/{spec['name']}/seed{spec['seed']}"
    dev = devices.resolve(spec["device"], spec["threads"])
    tok = tokenizers.load(tokenizer_path)
    stream, _ = tokenizers.load_stream(tokens_dir, "train", tok.sha256)
    val = validation_windows(tokenizers.load_stream(tokens_dir, "validation", tok.sha256)[0], spec)
    torch.manual_seed(spec["seed"])
    model = build(spec, tok.vocab_size).to(dev)
    opt = adamw(model, cfg)
    tokens_meta = tokenizers.info(tokens_dir)
    fingerprint = _fingerprint(spec, tokens_meta, code_digest)
    state = load_checkpoint(Path(checkpoint_path), fingerprint, log)
    step, rows = 0, []
    if state:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, rows = state["step"], state["rows"]
        log(f"{name}: resumed from step {step}")
    log(f"{name}: {param_count(model):,} parameters on {devices.describe(dev)}, context {spec['context']}, "
        f"{len(stream):,} training tokens")
    started, tokens_per_step = time.perf_counter(), cfg["batch_size"] * spec["context"]
    while step < cfg["max_steps"]:
        loss = _step(model, opt, stream, step, spec, dev)
        if not math.isfinite(loss):
            raise TrainingDiverged(f"{name}: loss is {loss} at step {step}; lower language.train.lr")
        step += 1
        evaluate = step % cfg["eval_every"] == 0 or step == cfg["max_steps"]
        val_loss = validation_loss(model, val, dev) if evaluate else None
        rows.append((step, loss, opt.param_groups[0]["lr"], math.nan if val_loss is None else val_loss))
        if val_loss is not None:
            first, elapsed = (state or {}).get("step", 0), time.perf_counter() - started
            log(f"{name}: step {step}/{cfg['max_steps']} loss {loss:.3f} validation {val_loss:.3f} | "
                f"{progress.tail(step, cfg['max_steps'], elapsed, start=first)}, "
                f"{(step - first) * tokens_per_step / elapsed:,.0f} tokens/s")
        if step % cfg["checkpoint_every"] == 0:
            save_checkpoint(Path(checkpoint_path), fingerprint=fingerprint, model=model.state_dict(),
                             optimizer=opt.state_dict(), step=step, rows=rows)
    log(f"{name}: {step} steps in {time.perf_counter() - started:.1f} s")
    _write_outputs(model, spec, tok, tokens_meta, rows, Path(out_dir), dev, code_digest)
    Path(checkpoint_path).unlink(missing_ok=True)


def _step(model, opt, stream, step: int, spec: dict, dev) -> float:
    cfg = spec["train"]
    for group in opt.param_groups:
        group["lr"] = lr_at(step, cfg)
    tokens, ids = training_batch(stream, step, spec, spec["seed"])
    tokens, ids = tokens.to(dev), ids.to(dev)
    model.train()
    opt.zero_grad(set_to_none=True)
    total = torch.zeros((), device=dev)
    for part in micro_batches(len(tokens), spec):  # gradients add up to the whole batch's
        with devices.autocast(dev):
            loss = _loss(model, tokens[part], ids[part]) * ((part.stop - part.start) / len(tokens))
        loss.backward()
        total += loss.detach()
    value = total.item()
    if math.isfinite(value):  # a non-finite loss leaves the model as it was; the caller stops
        if cfg["grad_clip"]:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        opt.step()
    return value


def micro_batches(batch: int, spec: dict) -> list[slice]:
    """The windows of each forward of a step: all at once, or `micro_batch_tokens` at a time."""
    tokens = spec["train"].get("micro_batch_tokens")
    size = batch if tokens is None else max(1, tokens // spec["context"])
    return [slice(start, min(start + size, batch)) for start in range(0, batch, size)]


def _write_outputs(model, spec, tok, tokens_meta, rows, out_dir: Path, dev, code_digest) -> None:
    log_df = pd.DataFrame(rows, columns=["step", "loss", "lr", "validation_loss"])
    final = float(log_df["validation_loss"].dropna().iloc[-1])
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    save_tensors(out_dir / "model.pt", {"model_args": model.cfg.to_dict(), "state_dict": state, "spec": spec,
                                        "tokenizer_sha256": tok.sha256, "validation_loss": final})
    with atomic_path(out_dir / "train_log.parquet") as tmp:
        log_df.to_parquet(tmp, index=False)
    info = {
        "spec": spec, "code_digest": code_digest, "tokens": tokens_meta, "device": devices.describe(dev),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__},
        "steps": len(log_df), "validation_loss": final,
    }
    write_text(out_dir / "meta.json", canonical_json(info) + "\n")


def load(path) -> Transformer:
    """A trained language model from its model.pt, in eval mode on the CPU."""
    state = load_tensors(path)
    model = Transformer(ModelConfig(**state["model_args"]))
    model.load_state_dict(state["state_dict"])
    model.tokenizer_sha256 = state["tokenizer_sha256"]
    model.spec = state["spec"]
    return model.eval()
