"""A small decoder-only transformer whose positional scheme is one config switch.

Positions are an argument (`position_ids`, shape (B, T)), never an `arange` hidden in
`forward`, so coupled position IDs (E2, E3) and skip-wise offsets reach every scheme the
same way. Each encoding lives in one place:
  none   no positional signal; the causal mask alone (NoPE)
  ape    learned absolute embedding of the position ID, added to the token embedding
  rope   rotary embedding of q and k (Su et al. 2021)
  alibi  linear attention bias per head (Press et al. 2022)
An optional position head (Predictive Position Coupling) predicts the coupled ID of the next
token, and a key/value cache lets decoding feed back one token and one ID at a time.

This is the only forward of the package. Reading attention probabilities takes its written-out
path (`features(..., attention=[])`), and stacked training runs the same code on M models whose
parameters carry a leading model axis (`stack`): `call` applies each layer with each model's own
weights, one batched matmul for all.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lengthgen.support import device as devices

ENCODINGS = ("none", "ape", "rope", "alibi")
POSITION_HEADS = ("none", "pointer", "classifier")


@dataclass
class ModelConfig:
    vocab_size: int
    n_layer: int = 2
    d_model: int = 64
    n_head: int = 4
    d_ff: int = 256
    dropout: float = 0.0
    encoding: str = "rope"
    max_position: int = 1024  # size of the `ape` table; IDs must stay below it
    rope_base: float = 10000.0
    position_head: str = "none"  # PPC: pointer over the prompt, or a classifier over IDs
    pointer_rope: bool = True  # rotate half of the pointer's channels by the position IDs

    def to_dict(self) -> dict:
        return asdict(self)


def rotary_freqs(position_ids: torch.Tensor, hs: int, base: float) -> torch.Tensor:
    """Unit phasors (B, T, hs/2), complex: angle position * base^(-2i/hs) for channel pair i."""
    inv_freq = base ** (-torch.arange(0, hs, 2, device=position_ids.device, dtype=torch.float32) / hs)
    angles = position_ids[..., None].float() * inv_freq
    return torch.polar(torch.ones_like(angles), angles)


def rotate(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs (0, 1), (2, 3), ... of x (..., hs) by `freqs` (broadcast to (..., hs/2)).

    One complex product, rather than slicing, four real products and a stack: fewer kernels and
    temporaries in a step that every attention layer takes twice."""
    pairs = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(pairs * freqs).flatten(-2).to(x.dtype)


def rotary(x: torch.Tensor, position_ids: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate pairs of channels of x (B, nh, T, hs) by angles position * base^(-2i/hs)."""
    return rotate(x, rotary_freqs(position_ids, x.shape[-1], base)[:, None])


def alibi_slopes(n_head: int) -> torch.Tensor:
    """The geometric slopes of ALiBi: 2^(-8/n), 2^(-16/n), ... (n a power of two)."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / n_head) for h in range(n_head)])


def alibi_bias(query_ids: torch.Tensor, key_ids: torch.Tensor, slopes: torch.Tensor, dtype,
               allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Additive mask (B, nh, Tq, Tk): -slope * |distance| between position IDs, and -inf where
    `allowed` (B or 1, Tq, Tk) is False.

    Distances come from position IDs, so ALiBi sees coupled or offset positions too; the
    magnitude keeps the bias a penalty when a coupled key's ID lies ahead of the query's.
    """
    dist = (query_ids[:, :, None] - key_ids[:, None, :]).abs().float()  # (B, Tq, Tk)
    if allowed is not None:  # on the (B, Tq, Tk) distances: the head axis is not yet there
        dist = dist.masked_fill(~allowed, float("inf"))  # -slope * inf = -inf
    return (-slopes.float()[None, :, None, None] * dist[:, None]).to(dtype)  # one rounding to dtype


def causal_mask(t: int, segments: torch.Tensor | None, device) -> torch.Tensor:
    """(B or 1, t, t) bool: which keys each query sees. With `segments` (B, t), the example each
    token belongs to when several share a row, a query sees only its own example's past."""
    allowed = torch.ones(t, t, dtype=torch.bool, device=device).tril()[None]
    if segments is not None:
        allowed = allowed & (segments[:, :, None] == segments[:, None, :])
    return allowed


def call(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """module(x); for a stack (`stack`: a Linear, LayerNorm or Embedding whose weight carries a
    leading model axis M), each model's own layer on its own slice x[m] of x (M, ...)."""
    w = getattr(module, "weight", None)
    if isinstance(module, nn.Linear) and w.dim() == 3:
        return _stacked_linear(module, x)
    if isinstance(module, nn.LayerNorm) and w.dim() == 2:
        view = (w.shape[0],) + (1,) * (x.dim() - 2) + (w.shape[1],)
        return F.layer_norm(x, x.shape[-1:], eps=module.eps) * w.view(view) + module.bias.view(view)
    if isinstance(module, nn.Embedding) and w.dim() == 3:
        return stacked_rows(w, x)
    return module(x)


def _stacked_linear(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """x (M, ..., in) through each model's own weight (M, out, in): one baddbmm for all models."""
    m, shape = x.shape[0], x.shape[1:-1]
    w, b = module.weight, module.bias
    flat = x.reshape(m, -1, x.shape[-1])
    y = torch.bmm(flat, w.transpose(1, 2)) if b is None else torch.baddbmm(b[:, None, :], flat, w.transpose(1, 2))
    return y.view(m, *shape, w.shape[1])


def stacked_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows `index` (M, ...) of each model's own table (M, V, ...): one gather for all models."""
    first = torch.arange(table.shape[0], device=index.device) * table.shape[1]  # each model's first row
    return table.flatten(0, 1)[index + first.view(-1, *[1] * (index.dim() - 1))]


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)  # fused: one matmul for q, k, v
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        if cfg.encoding == "alibi":
            self.register_buffer("slopes", alibi_slopes(cfg.n_head), persistent=False)

    def heads(self, x: torch.Tensor, position_ids: torch.Tensor, freqs: torch.Tensor | None = None):
        """Queries, keys and values (B, nh, T, hs) of x, rotated when the encoding is rope
        (`freqs`: `rotary_freqs` of position_ids, computed here when not given). A stack's x
        (M, R, T, C) gives its M*R rows as one batch: attention has no weights of its own."""
        t, c = x.shape[-2:]
        nh = self.cfg.n_head
        qkv = call(self.qkv, x).view(-1, t, 3, nh, c // nh)
        if self.cfg.encoding != "rope":
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            return q, k, v
        if freqs is None:
            freqs = rotary_freqs(position_ids, c // nh, self.cfg.rope_base)
        q, k = rotate(qkv[:, :, :2], freqs[:, :, None, None]).permute(2, 0, 3, 1, 4)  # q and k at once
        return q, k, qkv[:, :, 2].transpose(1, 2)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, cache: dict | None = None, freqs=None, mask=None,
                last: bool = False, attention: list | None = None):
        """Causal attention over x; with `cache`, over the cached keys too (then x must be one
        token, which sees every cached key, or the cache must be empty). `mask`: the attention
        mask of a full forward (`Transformer.attention_mask`), built once for all layers.
        `last`: the output of the last query alone (B, 1, C); every key is still cached.
        `attention`: a list that receives the probabilities (B, nh, Tq, Tk), attention then
        being computed written out (`written_out`). A stack's x is (M, R, T, C), with
        position_ids, freqs and mask those of its M*R rows."""
        t, c = x.shape[-2:]
        q, k, v = self.heads(x, position_ids, freqs)
        key_ids = query_ids = position_ids
        past = cache is not None and "k" in cache
        if past:
            if t != 1:
                raise ValueError("a cached forward takes one token at a time")
            k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            key_ids = torch.cat([cache["ids"], position_ids], dim=1)
        if cache is not None:
            cache.update(k=k, v=v, ids=key_ids)
        if last:  # the last query sees every key of its row: no causal mask, only its mask row
            q, query_ids = q[:, :, -1:], position_ids[:, -1:]
            mask = None if mask is None else mask[:, :, -1:]
        drop = self.cfg.dropout if self.training else 0.0
        causal = not past and q.shape[2] > 1  # one query against its own past needs no mask
        if mask is None and self.cfg.encoding == "alibi":
            allowed = causal_mask(t, None, x.device) if causal else None
            mask = alibi_bias(query_ids, key_ids, self.slopes, q.dtype, allowed)
        if attention is not None:
            y = self.written_out(q, k, v, mask, causal, attention)
        elif mask is not None:  # bool, or ALiBi's bias already in q's dtype (see attention_mask)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=drop)
        return call(self.proj, y.transpose(1, 2).reshape(*x.shape[:-2], q.shape[2], c))  # (B, T or 1, C)

    @staticmethod
    def written_out(q, k, v, mask, causal: bool, probs: list) -> torch.Tensor:
        """What the fused kernel computes (without dropout), written out so that its
        probabilities can be read: they are appended to `probs`. Scores are float32."""
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
        if mask is None and causal:
            mask = causal_mask(q.shape[2], None, q.device)[:, None]
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        p = scores.softmax(-1)
        probs.append(p)
        return p.to(v.dtype) @ v


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model), nn.Dropout(cfg.dropout)
        )

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, cache: dict | None = None, freqs=None, mask=None,
                last: bool = False, attention: list | None = None):
        """x (B, T, C) -> (B, T, C), or (B, 1, C) for the last position alone with `last`."""
        y = self.attn(call(self.ln1, x), position_ids, cache, freqs, mask, last=last, attention=attention)
        x = (x[:, -1:] if last else x) + y
        h = call(self.ln2, x)
        for layer in self.mlp:  # nn.Sequential's own loop, with `call` for a stack's weights
            h = call(layer, h)
        return x + h


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.encoding not in ENCODINGS:
            raise ValueError(f"encoding {cfg.encoding!r} not in {ENCODINGS}")
        if cfg.position_head not in POSITION_HEADS:
            raise ValueError(f"position_head {cfg.position_head!r} not in {POSITION_HEADS}")
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_position, cfg.d_model) if cfg.encoding == "ape" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.position_head == "pointer":
            # A query/key pair of its own scores the prompt positions; the chosen position's
            # coupled ID is the prediction, so it is the same at any offset and any length.
            self.pointer = nn.Linear(cfg.d_model, 2 * cfg.d_model)
        elif cfg.position_head == "classifier":
            self.id_head = nn.Linear(cfg.d_model, cfg.max_position)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def features(self, tokens: torch.Tensor, position_ids: torch.Tensor, cache: list | None = None,
                 segments: torch.Tensor | None = None, last_only: bool = False,
                 attention: list | None = None) -> torch.Tensor:
        """tokens, position_ids: (B, T) -> final hidden states (B, T, C). `cache`: one dict per
        layer, filled on the first call and extended by each later one-token call. `segments`
        (B, T): the example of each token when several examples share a row (packing).
        `last_only`: the last position's state alone, (B, 1, C); the top block then runs its
        projection and MLP for that position only, which is all greedy decoding and scoring read
        (the blocks below, and every layer's cached keys, need every position).
        `attention`: a list that receives each layer's attention probabilities (B, nh, Tq, Tk),
        from attention written out instead of the fused kernel, which does not return them.
        A stack (`stack`) takes (M, R, T) and gives (M, R, T, C), each model's rows its own."""
        return self.features_from(self.embed(tokens, position_ids), position_ids, cache, segments, last_only,
                                  attention)

    def embed(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """What the first block reads: token embeddings, plus the position table's for `ape`."""
        x = call(self.tok_emb, tokens)
        if self.pos_emb is not None:
            x = x + call(self.pos_emb, position_ids)
        return x

    def features_from(self, x: torch.Tensor, position_ids: torch.Tensor, cache: list | None = None,
                      segments: torch.Tensor | None = None, last_only: bool = False,
                      attention: list | None = None) -> torch.Tensor:
        """`features` from the embeddings x (B, T, C) (`embed`): a gradient can be taken to them."""
        if segments is not None and cache is not None:
            raise ValueError("packed rows (segments) are for training; a cache is for decoding")
        ids = position_ids.flatten(0, -2)  # a stack's (M, R, T) rows: one batch to attention
        segments = None if segments is None else segments.flatten(0, -2)
        freqs = self.rotary_freqs(ids)  # once for all layers: they share the IDs
        past = cache is not None and "k" in cache[0]
        mask = None if past else self.attention_mask(ids, segments)
        top = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = block(x, ids, None if cache is None else cache[i], freqs, mask, last=last_only and i == top,
                      attention=attention)
        return call(self.ln_f, x)

    def attention_mask(self, position_ids: torch.Tensor, segments: torch.Tensor | None = None):
        """The mask every layer of a full forward shares: None (SDPA's own causal mask) unless
        examples share rows (`segments`) or the encoding is ALiBi, whose bias (B, nh, T, T)
        is then built once instead of once per layer."""
        if segments is None and self.cfg.encoding != "alibi":
            return None
        allowed = causal_mask(position_ids.shape[1], segments, position_ids.device)
        if self.cfg.encoding == "alibi":  # in the dtype attention runs in: no cast per layer
            dev = position_ids.device.type
            dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else torch.float32
            return alibi_bias(position_ids, position_ids, self.blocks[0].attn.slopes, dtype, allowed)
        return allowed[:, None]

    def rotary_freqs(self, position_ids: torch.Tensor) -> torch.Tensor | None:
        """The blocks' rotary phasors for these IDs (None unless the encoding is rope)."""
        if self.cfg.encoding != "rope":
            return None
        return rotary_freqs(position_ids, self.cfg.d_model // self.cfg.n_head, self.cfg.rope_base)

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """tokens, position_ids: (B, T) -> logits (B, T, vocab)."""
        return self.head(self.features(tokens, position_ids))

    def new_cache(self) -> list[dict]:
        return [{} for _ in self.blocks]

    def pointer_logits(self, h_query, query_ids, h_keys, key_ids) -> torch.Tensor:
        """(B, Tq, C) x (B, Tk, C) -> (B, Tq, Tk): which key position holds the next token's ID;
        a stack's (M, B, T, C) -> (M, B, Tq, Tk).

        With `pointer_rope`, half of the channels are rotated by the position IDs (rotary), so the
        pointer can select by relative ID (the next bit) as well as by content (a variable's name)."""
        d, half = self.cfg.d_model, self.cfg.d_model // 2
        q = call(self.pointer, h_query)[..., :d].flatten(0, -3)  # a stack's rows: one batch
        k = call(self.pointer, h_keys)[..., d:].flatten(0, -3)
        if self.cfg.pointer_rope:
            query_ids, key_ids, base = query_ids.flatten(0, -2), key_ids.flatten(0, -2), self.cfg.rope_base
            q = torch.cat([rotary(q[:, None, :, :half], query_ids, base)[:, 0], q[..., half:]], dim=-1)
            k = torch.cat([rotary(k[:, None, :, :half], key_ids, base)[:, 0], k[..., half:]], dim=-1)
        return (q @ k.transpose(1, 2) / d**0.5).view(*h_query.shape[:-2], q.shape[1], k.shape[1])


def stack(models: list[Transformer]) -> Transformer:
    """The models (one config) as one Transformer whose parameters are theirs stacked on a
    leading model axis (M, ...); its methods then take and give that axis (stacked training)."""
    named = [dict(m.named_parameters()) for m in models]
    out = copy.deepcopy(models[0])
    set_parameters(out, {n: torch.stack([p[n].detach() for p in named]) for n in named[0]})
    return out


def set_parameters(module: nn.Module, params: dict) -> None:
    """Make each tensor of `params` (by name) the module's parameter of that name, whatever its
    shape: a stack's parameters shrink as its models stop."""
    for name, value in params.items():
        owner, _, leaf = name.rpartition(".")
        setattr(module.get_submodule(owner), leaf, nn.Parameter(value))


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def pointer_scores(model, h_query, query_ids, h_prompt, prompt_ids, prompt_len) -> torch.Tensor:
    """(B, Tq, P) float scores of each query over the prompt states (B, P, C); -inf past each
    example's own prompt (`prompt_len`, (B,)). Training and decoding both point with it; a
    stack's (M, B, ...) gives (M, B, Tq, P)."""
    with devices.autocast(h_query.device):
        scores = model.pointer_logits(h_query, query_ids, h_prompt, prompt_ids).float()
    outside = torch.arange(h_prompt.shape[-2], device=h_query.device) >= prompt_len[..., None]
    return scores.masked_fill(outside[..., None, :], float("-inf"))
