"""The model's forward with its attention written out, so the probabilities can be read: the
model itself calls a fused kernel that does not return them. Its own module, so that each
stage that reads attention (the synthetic cells', E4's) depends on this and the model alone.
"""

from __future__ import annotations

import math

import torch

from lengthgen.model import alibi_bias, causal_mask


def embed(model, tokens: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """What the first block reads: token embeddings, plus the position table's for `ape`."""
    x = model.tok_emb(tokens)
    return x if model.pos_emb is None else x + model.pos_emb(ids)


def attention_forward(model, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The model's causal forward from embeddings x (B, T, C), written out: final hidden states
    (B, T, C) and each layer's attention probabilities (B, nh, T, T)."""
    t = x.shape[1]
    freqs = model.rotary_freqs(ids)
    allowed = causal_mask(t, None, x.device)  # (1, T, T)
    probs = []
    for block in model.blocks:
        attn = block.attn
        q, k, v = attn.heads(block.ln1(x), ids, freqs)
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
        if model.cfg.encoding == "alibi":  # the same bias the model adds, -inf above the diagonal included
            scores = scores + alibi_bias(ids, ids, attn.slopes, torch.float32, allowed)
        else:
            scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        p = scores.softmax(-1)
        probs.append(p)
        y = (p.to(v.dtype) @ v).transpose(1, 2).reshape(x.shape)
        x = x + attn.proj(y)
        x = x + block.mlp(block.ln2(x))
    return model.ln_f(x), probs
