"""Position IDs a scheme feeds the model: plain indices or the task's coupled IDs, and in
training the random offset and the skip-wise gaps (PoSE, Zhu et al. 2024) that let a model
see IDs and distances beyond its training lengths.

Gaps stretch the ID axis monotonically: a gap opened after prompt token j adds its size to
every ID greater than token j's. Equal IDs stay equal, so an answer token keeps the ID of the
prompt token it is coupled to.
"""

from __future__ import annotations

import numpy as np
import torch


def base_ids(batch: dict, opts: dict) -> torch.Tensor:
    """(B, T) IDs before any training-time change: coupled IDs or indices."""
    if opts["positions"] == "coupled":
        return batch["positions"]
    b, t = batch["tokens"].shape
    return torch.arange(t).expand(b, t)


def _cut_points(eligible: torch.Tensor, max_cuts: int | None, gen: torch.Generator) -> torch.Tensor:
    """(B, T) bool: up to `max_cuts` eligible points per row chosen at random (all if None)."""
    if max_cuts is None:
        return eligible
    scores = torch.rand(eligible.shape, generator=gen).masked_fill(~eligible, -1.0)
    k = min(max_cuts, eligible.shape[1])
    chosen = torch.zeros_like(eligible).scatter(1, scores.topk(k, dim=1).indices, True)
    return chosen & eligible


def _gap_sizes(cuts: torch.Tensor, budget: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Split each row's budget at random among its cut points: (B, T) integer sizes."""
    weights = torch.rand(cuts.shape, generator=gen) * cuts
    share = weights / weights.sum(dim=1, keepdim=True).clamp_min(1e-9)
    return (share * budget[:, None]).floor().long()


def training_ids(batch: dict, opts: dict, gaps: tuple, max_position: int, gen: torch.Generator):
    """IDs of a training batch and the targets a gap made unscorable, (B, T) each.

    Gaps open in a `gaps.fraction` of the examples after the task's gap tokens (`gaps`:
    (token ids, straddle)); with `straddle`, a target whose ID a gap moved away from its
    query's is not scored, since the gap changed what the model must read. Then a random
    offset (with `offsets`). Every ID stays below `max_position`."""
    gap_after, straddle = gaps
    ids = base_ids(batch, opts).clone()
    tokens, seq_len = batch["tokens"], batch["seq_len"]
    b, t = tokens.shape
    valid = torch.arange(t)[None, :] < seq_len[:, None]
    top = ids.masked_fill(~valid, 0).amax(dim=1)
    unscored = torch.zeros(b, t, dtype=torch.bool)
    cfg = opts["gaps"]
    if cfg["fraction"] > 0 and gap_after:
        prompt = torch.arange(t)[None, :] < batch["answer_start"][:, None] - 1
        eligible = torch.isin(tokens, torch.tensor(sorted(gap_after))) & prompt
        cuts = _cut_points(eligible, cfg["max_cuts"], gen)
        chosen = torch.rand(b, generator=gen) < cfg["fraction"]
        room = (max_position - 1 - top).clamp_min(0)
        budget = (torch.rand(b, generator=gen) * (room + 1)).floor().long() * chosen
        sizes = _gap_sizes(cuts.float(), budget, gen)
        after = ids[:, :, None] > ids[:, None, :]  # (B, T, T): token i lies after cut j
        shift = (after * sizes[:, None, :]).sum(dim=2)
        ids = ids + shift
        if straddle:
            unscored[:, 1:] = shift[:, 1:] != shift[:, :-1]
        top = ids.masked_fill(~valid, 0).amax(dim=1)
    if opts["offsets"]:
        room = (max_position - 1 - top).clamp_min(0)
        ids = ids + (torch.rand(b, generator=gen) * (room + 1)).floor().long()[:, None]
    return ids.masked_fill(~valid, 0), unscored


def pointer_targets(positions: np.ndarray, seq_len: np.ndarray, answer_start: np.ndarray, offset: int = 0):
    """(N, T) int64: for each answer token fed back (all but the final EOS), the index of the
    prompt token whose coupled ID is the answer token's minus `offset`; -1 elsewhere. Prompt
    IDs that answers use are unique."""
    out = np.full(positions.shape, -1, dtype=np.int64)
    for i, (row, n, a) in enumerate(zip(positions, seq_len, answer_start, strict=True)):
        where = {int(p): j for j, p in enumerate(row[:a])}
        for t in range(a, n - 1):
            out[i, t] = where.get(int(row[t]) - offset, -1)
    return out
