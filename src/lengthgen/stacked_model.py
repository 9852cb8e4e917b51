"""The Transformer of `model.py` for M models at once: parameters stacked on a leading model axis,
matrices applied with one batched matmul (`baddbmm`) per layer for every model, and attention
run on the models' rows folded into one batch (attention has no parameters of its own).

The parameters are a dict with the names of `Transformer.state_dict()`, each (M, ...) (what
`torch.func.stack_module_state` gives). Every function computes, for each model, what the same
`Transformer` method computes, in the same order of operations where it matters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lengthgen.model import ModelConfig, alibi_bias, alibi_slopes, causal_mask, rotary, rotary_freqs, rotate


def linear(p: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    """x (M, ..., in) through each model's own nn.Linear `name`: one baddbmm for all models."""
    m, shape = x.shape[0], x.shape[1:-1]
    w, b = p[f"{name}.weight"], p.get(f"{name}.bias")
    flat = x.reshape(m, -1, x.shape[-1])
    y = torch.bmm(flat, w.transpose(1, 2)) if b is None else torch.baddbmm(b[:, None, :], flat, w.transpose(1, 2))
    return y.view(m, *shape, w.shape[1])


def layer_norm(p: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    """Each model's nn.LayerNorm `name` (eps 1e-5) on x (M, ..., C)."""
    w, b = p[f"{name}.weight"], p[f"{name}.bias"]
    view = (w.shape[0],) + (1,) * (x.dim() - 2) + (w.shape[1],)
    return F.layer_norm(x, x.shape[-1:]) * w.view(view) + b.view(view)


def embed(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows `index` (M, ...) of each model's own embedding `table` (M, V, C)."""
    first = torch.arange(table.shape[0], device=index.device) * table.shape[1]  # each model's first row
    return table.flatten(0, 1)[index + first.view(-1, *[1] * (index.dim() - 1))]


def features(cfg: ModelConfig, p: dict, tokens: torch.Tensor, ids: torch.Tensor, segments: torch.Tensor):
    """`Transformer.features` of packed rows: tokens, ids, segments (M, R, T) -> (M, R, T, C)."""
    m, r, t = tokens.shape
    x = embed(p["tok_emb.weight"], tokens)
    if cfg.encoding == "ape":
        x = x + embed(p["pos_emb.weight"], ids)
    flat_ids = ids.reshape(m * r, t)
    freqs = rotary_freqs(flat_ids, cfg.d_model // cfg.n_head, cfg.rope_base) if cfg.encoding == "rope" else None
    allowed = causal_mask(t, segments.reshape(m * r, t), tokens.device)
    if cfg.encoding == "alibi":  # in the dtype attention runs in, as Transformer.attention_mask
        dev = tokens.device.type
        dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else torch.float32
        mask = alibi_bias(flat_ids, flat_ids, alibi_slopes(cfg.n_head).to(tokens.device), dtype, allowed)
    else:
        mask = allowed[:, None]
    for i in range(cfg.n_layer):
        pre = f"blocks.{i}"
        x = x + attention(cfg, p, f"{pre}.attn", layer_norm(p, f"{pre}.ln1", x), freqs, mask)
        h = F.gelu(linear(p, f"{pre}.mlp.0", layer_norm(p, f"{pre}.ln2", x)))
        x = x + linear(p, f"{pre}.mlp.2", h)
    return layer_norm(p, "ln_f", x)


def attention(cfg: ModelConfig, p: dict, name: str, x: torch.Tensor, freqs, mask) -> torch.Tensor:
    """`CausalSelfAttention.forward` (no cache) of x (M, R, T, C), the models' rows as one batch."""
    m, r, t, c = x.shape
    nh = cfg.n_head
    qkv = linear(p, f"{name}.qkv", x).view(m * r, t, 3, nh, c // nh)
    if freqs is None:
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
    else:
        q, k = rotate(qkv[:, :, :2], freqs[:, :, None, None]).permute(2, 0, 3, 1, 4)
        v = qkv[:, :, 2].transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return linear(p, f"{name}.proj", y.transpose(1, 2).reshape(m, r, t, c))


def pointer_logits(cfg: ModelConfig, p: dict, h_query, query_ids, h_keys, key_ids) -> torch.Tensor:
    """`Transformer.pointer_logits` with a leading model axis: (M, B, Tq, C) x (M, B, Tk, C) -> (M*B, Tq, Tk)."""
    d, half = cfg.d_model, cfg.d_model // 2
    q = linear(p, "pointer", h_query)[..., :d].flatten(0, 1)
    k = linear(p, "pointer", h_keys)[..., d:].flatten(0, 1)
    query_ids, key_ids = query_ids.flatten(0, 1), key_ids.flatten(0, 1)
    if cfg.pointer_rope:
        q = torch.cat([rotary(q[:, None, :, :half], query_ids, cfg.rope_base)[:, 0], q[..., half:]], dim=-1)
        k = torch.cat([rotary(k[:, None, :, :half], key_ids, cfg.rope_base)[:, 0], k[..., half:]], dim=-1)
    return q @ k.transpose(1, 2) / d**0.5
