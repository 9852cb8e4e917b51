"""A small decoder-only transformer whose positional scheme is one config switch.

Positions are an argument (`position_ids`, shape (B, T)), never an `arange` hidden in
`forward`, so coupled position IDs (E2, E3) and skip-wise offsets reach every scheme the
same way. Each encoding lives in one place:
  none   no positional signal; the causal mask alone (NoPE)
  ape    learned absolute embedding of the position ID, added to the token embedding
  rope   rotary embedding of q and k (Su et al. 2021)
  alibi  linear attention bias per head (Press et al. 2022)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

ENCODINGS = ("none", "ape", "rope", "alibi")


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

    def to_dict(self) -> dict:
        return asdict(self)


def rotary(x: torch.Tensor, position_ids: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate pairs of channels of x (B, nh, T, hs) by angles position * base^(-2i/hs)."""
    hs = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, hs, 2, device=x.device, dtype=torch.float32) / hs)
    angles = position_ids[:, None, :, None].float() * inv_freq  # (B, 1, T, hs/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def alibi_slopes(n_head: int) -> torch.Tensor:
    """The geometric slopes of ALiBi: 2^(-8/n), 2^(-16/n), ... (n a power of two)."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / n_head) for h in range(n_head)])


def alibi_bias(position_ids: torch.Tensor, slopes: torch.Tensor, dtype) -> torch.Tensor:
    """Additive mask (B, nh, T, T): -slope * distance on allowed keys, -inf elsewhere.

    Distances come from position IDs, so ALiBi sees coupled or offset positions too.
    """
    dist = (position_ids[:, :, None] - position_ids[:, None, :]).to(dtype)  # (B, T, T)
    t = position_ids.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=position_ids.device).tril()
    bias = -slopes.to(dtype)[None, :, None, None] * dist[:, None]
    return bias.masked_fill(~causal, float("-inf"))


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)  # fused: one matmul for q, k, v
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        if cfg.encoding == "alibi":
            self.register_buffer("slopes", alibi_slopes(cfg.n_head), persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        nh = self.cfg.n_head
        q, k, v = self.qkv(x).view(b, t, 3, nh, c // nh).permute(2, 0, 3, 1, 4)  # 3 x (B, nh, T, hs)
        if self.cfg.encoding == "rope":
            q = rotary(q, position_ids, self.cfg.rope_base)
            k = rotary(k, position_ids, self.cfg.rope_base)
        drop = self.cfg.dropout if self.training else 0.0
        if self.cfg.encoding == "alibi":
            mask = alibi_bias(position_ids, self.slopes, q.dtype)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))  # (B, T, C)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model), nn.Dropout(cfg.dropout)
        )

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), position_ids)
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.encoding not in ENCODINGS:
            raise ValueError(f"encoding {cfg.encoding!r} not in {ENCODINGS}")
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_position, cfg.d_model) if cfg.encoding == "ape" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """tokens, position_ids: (B, T) -> logits (B, T, vocab)."""
        x = self.tok_emb(tokens)
        if self.pos_emb is not None:
            x = x + self.pos_emb(position_ids)
        for block in self.blocks:
            x = block(x, position_ids)
        return self.head(self.ln_f(x))


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


