"""Batched greedy decoding with a key/value cache: the model writes the answer itself.

The ID fed with each generated token follows the scheme: the next index (index schemes, the
copy-head control included), the task's coupled ID (`pc`, an oracle, with or without a
pointer head), or the position head's prediction from the same step (`ppc`), so a `ppc`
evaluation never sees the true answer IDs. A pointer picks a prompt position; the ID it stands
for is that position's plus the scheme's `pointer_offset`, and with `copy` a token other than
EOS is copied from the prompt position holding that ID.
"""

from __future__ import annotations

import torch

from lengthgen.model.transformer import pointer_scores
from lengthgen.support import device as devices


def next_id(model, opts: dict, h: torch.Tensor, query_id, h_prompt, prompt_ids, index: int, oracle):
    """ID of the token being generated, and the pointer's choice (or None)."""
    index_ids = torch.full_like(prompt_ids[:, 0], index)
    if opts["position_head"] == "pointer":
        prompt_len = torch.full_like(prompt_ids[:, 0], prompt_ids.shape[1])
        scores = pointer_scores(model, h[:, None], query_id[:, None], h_prompt, prompt_ids, prompt_len)
        fed = prompt_ids.gather(1, scores[:, 0].argmax(-1)[:, None])[:, 0] + opts["pointer_offset"]
        choice = (prompt_ids == fed[:, None]).int().argmax(-1)  # the prompt position holding it
        if opts["positions"] != "coupled":  # the copy-head control: it points and copies, IDs stay indices
            return index_ids, choice
        if opts.get("feed_ids") == "oracle":  # pc with the same head: the true ID; the choice only copies
            return oracle, choice
        return fed, choice
    if opts["position_head"] == "classifier":
        return model.id_head(h).argmax(-1), None
    if opts["positions"] == "coupled":
        return oracle, None
    return index_ids, None


@torch.no_grad()
def generate(model, prompt: torch.Tensor, prompt_ids: torch.Tensor, steps: int, opts: dict, eos: int,
             oracle_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy answers (B, steps) and the IDs fed with them (B, steps), from prompts (B, P)
    of equal length. `oracle_ids` (B, steps): the true answer IDs, read only by `pc`."""
    p = prompt.shape[1]
    cache = model.new_cache()
    pointer = opts["position_head"] == "pointer"  # it scores every prompt state; the rest read the last
    with devices.autocast(prompt.device):
        states = model.features(prompt, prompt_ids, cache, last_only=not pointer)  # causal: final states
    h, query_id = states[:, -1], prompt_ids[:, -1]
    h_prompt = states if pointer else None
    tokens, ids = [], []
    for s in range(steps):
        with devices.autocast(prompt.device):
            tok = model.head(h).argmax(-1)
        oracle = None if oracle_ids is None else oracle_ids[:, s]
        fed, choice = next_id(model, opts, h, query_id, h_prompt, prompt_ids, p + s, oracle)
        if choice is not None and opts["copy"]:
            tok = torch.where(tok == eos, tok, prompt.gather(1, choice[:, None])[:, 0])
        tokens.append(tok)
        ids.append(fed)
        if s + 1 < steps:
            with devices.autocast(prompt.device):
                h = model.features(tok[:, None], fed[:, None], cache)[:, -1]
            query_id = fed
    return torch.stack(tokens, 1), torch.stack(ids, 1)
