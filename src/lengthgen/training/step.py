"""One training step for every trainer: a cell (train.py), a stack of seeds (stacked.py) and a
language model of E4 (language/lm.py).

A cell is a stack of one. Its batch gets the leading model axis that a stack's batches have (one
batch per model), and one packer, one construction of targets and masks and one loss serve
both, so a model's loss is computed the same way alone and beside other seeds. Only the model
differs: a cell's is a plain `Transformer`, which applies to the model axis of one as to any batch
dimension (`transformer.call`); a stack's carries the axis in its parameters (`transformer.stack`).
`optimizer_step` is the step of all three trainers; a language model brings its own loss.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lengthgen.model.transformer import call, pointer_scores, stacked_rows
from lengthgen.support import device as devices

COPY = 0  # with `copy`, the output head's class for "copy the pointed token" (padding's id)


def answer_mask(seq_len: torch.Tensor, answer_start: torch.Tensor, t: int) -> torch.Tensor:
    """(B, t) mask of the positions whose next token is an answer token."""
    target_pos = torch.arange(1, t + 1)[None, :]
    return (target_pos >= answer_start[:, None]) & (target_pos < seq_len[:, None])


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


def packed_inputs(batches: list[dict], dev, copy: bool) -> dict:
    """The models' batches (one per model; one for a cell) as (M, ...) tensors of one shape on
    `dev`: each batch packed on its own, every model's rows padded to the most any model needs.

    Examples of mixed lengths (E2, E3) would leave much of a padded batch padding. The examples
    share rows of the batch's width instead, each attending to its own tokens only (the same
    function of each example as unpacked); `where` gathers each example's states back
    (`features`)."""
    t = max(int(b["seq_len"].max()) for b in batches)
    per = [_packed_one(b, t, copy) for b in batches]
    rows = max(p["tokens"].shape[0] for p in per)
    for p in per:
        extra = rows - p["tokens"].shape[0]
        for key, fill in (("tokens", 0), ("ids", 0), ("segments", -1)):
            p[key] = torch.cat([p[key], p[key].new_full((extra, t - 1), fill)]) if extra else p[key]
    inputs = {k: torch.stack([p[k] for p in per]).to(dev) for k in per[0]}
    inputs["prompt"] = max(int(b["answer_start"].max()) for b in batches)  # the longest prompt, for the pointer
    return inputs


def _packed_one(batch: dict, t: int, copy: bool) -> dict:
    """One batch's packed rows (R, t-1), the index of each state in them, its targets and masks.
    `batch["ids"]` holds the position IDs the model sees, `batch["pointer"]` (when a position
    head or copying reads it) the prompt index each token's ID comes from. With `copy`, a token
    the pointer copies is the head's target COPY, so the head only decides copy or not (e.g. EOS)."""
    tokens, ids = batch["tokens"][:, :t], batch["ids"][:, :t]
    pointer = batch["pointer"][:, 1:t] if "pointer" in batch else torch.full_like(tokens[:, 1:], -1)
    b, w = tokens.shape[0], t - 1
    row, offset = pack((batch["seq_len"] - 1).clamp(1, w).tolist(), w)
    real = torch.arange(w)[None, :] < (batch["seq_len"] - 1)[:, None]
    where = torch.tensor(row)[:, None] * w + torch.tensor(offset)[:, None]
    where = (where + torch.arange(w)[None, :]).masked_fill(~real, 0)  # (B, w) index into the rows
    size = (max(row) + 1) * w

    def packed(values: torch.Tensor, fill: int) -> torch.Tensor:
        out = values.new_full((size,), fill)
        out[where[real]] = values[real]
        return out.view(-1, w)

    mask = answer_mask(batch["seq_len"], batch["answer_start"], w)
    if "unscored" in batch:  # targets a training-time gap moved: neither token nor ID is scored
        mask &= ~batch["unscored"][:, 1:t]
    targets = tokens[:, 1:]
    if copy:
        targets = targets.masked_fill(pointer >= 0, COPY)
    return {
        "tokens": packed(tokens[:, :-1], 0), "ids": packed(ids[:, :-1], 0),
        "segments": packed(torch.arange(b)[:, None].expand(b, w), -1), "where": where, "mask": mask,
        "targets": targets, "all_ids": ids, "pointer": pointer.masked_fill(~mask, -1),
        "answer_start": batch["answer_start"],
    }


def features(model, inputs: dict) -> torch.Tensor:
    """Each example's final states (M, B, T, C), computed on the packed rows of `inputs`. A
    padding position reads an arbitrary state: every loss masks it."""
    h = model.features(inputs["tokens"], inputs["ids"], segments=inputs["segments"])
    return stacked_rows(h.flatten(1, 2), inputs["where"])


def loss(model, inputs: dict, ppc_weight: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Each model's loss (M,) and per-example exact match (M, B), teacher forced: cross entropy
    on answer tokens, plus `ppc_weight` x the position head's cross entropy on the answer IDs
    fed back."""
    mask, targets = inputs["mask"], inputs["targets"]
    with devices.autocast(mask.device):
        h = features(model, inputs)
        logits = call(model.head, h)
    losses = _mean_ce(logits, targets, mask)
    wrong = ((logits.argmax(-1) != targets) & mask).any(dim=-1)
    if model.cfg.position_head != "none":
        id_losses, id_wrong = _position_loss(model, h, inputs)
        losses = losses + ppc_weight * id_losses
        wrong = wrong | id_wrong
    return losses, ~wrong


def _position_loss(model, h: torch.Tensor, inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The position head's loss (M,) and per-example errors (M, B) on the answer tokens fed back
    (`pointer` >= 0: the prompt index holding the next token's ID)."""
    pointer, ids = inputs["pointer"], inputs["all_ids"]
    fed = pointer >= 0
    if model.cfg.position_head == "pointer":
        p = inputs["prompt"]
        scores = pointer_scores(model, h, ids[..., :-1], h[..., :p, :], ids[..., :p], inputs["answer_start"])
        target = pointer
    else:
        scores, target = call(model.id_head, h).float(), ids[..., 1:]
    return _mean_ce(scores, target, fed), ((scores.argmax(-1) != target) & fed).any(dim=-1)


def _mean_ce(scores: torch.Tensor, targets: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Each model's mean cross entropy over its kept positions (M,): scores (M, ..., K), targets
    and `keep` (M, ...). Model by model with a boolean index, so that a model's loss has the
    same rounding in a stack as alone (a masked mean over the padded positions sums in another
    order)."""
    return torch.stack([F.cross_entropy(s[k].float(), t[k]) for s, t, k in zip(scores, targets, keep, strict=True)])


def optimizer_step(model, opt, lr: float, grad_clip: float, forward) -> tuple[list[float], object]:
    """One AdamW step of `model` (one model or a stack) at `lr`. `forward()` computes the step's
    losses (one, or (M,)), takes their gradients and returns them with anything else the caller
    reads; each model's gradient is clipped to `grad_clip` on its own norm. Returns the losses as
    floats, and the rest. A loss that is not finite leaves every model as it was, so the caller
    can stop cleanly."""
    opt.param_groups[0]["lr"] = lr
    model.train()
    opt.zero_grad(set_to_none=True)
    losses, rest = forward()
    values = losses.reshape(-1).tolist()
    if all(math.isfinite(v) for v in values):
        if grad_clip:
            clip(model, grad_clip)
        opt.step()
    return values, rest


def cell_step(model, opt, batches: list[dict], lr: float, grad_clip: float, dev, opts: dict):
    """One step of a cell (`batches`: its one batch) or a stack (one batch per model): each
    model's loss and exact-match accuracy on its batch (before the step), as lists."""
    inputs = packed_inputs(batches, dev, opts["copy"])

    def forward():
        losses, correct = loss(model, inputs, opts["ppc_weight"])
        losses.sum().backward()  # each model's parameters see only their own loss
        return losses, correct

    values, correct = optimizer_step(model, opt, lr, grad_clip, forward)
    return values, correct.float().mean(dim=1).tolist()


def clip(model, max_norm: float) -> None:
    """`clip_grad_norm_` on each model's own gradient: a plain model's, or each model's of a
    stack (whose parameters carry a leading model axis)."""
    if not is_stack(model):
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads]).norm(dim=0)  # (M,)
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *[1] * (g.dim() - 1)))


def is_stack(model) -> bool:
    """Whether `model` is a stack of models (`transformer.stack`): its token table (M, V, C)."""
    return model.tok_emb.weight.dim() == 3
