"""The transformer: shapes, causality, and what each positional scheme can see."""

from __future__ import annotations

import math

import pytest
import torch

from lengthgen.model.transformer import (
    ENCODINGS,
    ModelConfig,
    Transformer,
    alibi_bias,
    alibi_slopes,
    call,
    rotary,
    rotary_freqs,
    stack,
)

VOCAB, B, T = 7, 3, 12


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_model(encoding: str, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=VOCAB, n_layer=2, d_model=16, n_head=2, d_ff=32, encoding=encoding, max_position=64)
    return Transformer(cfg).eval()


def inputs(seed: int = 1, offset: int = 0):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, VOCAB, (B, T), generator=gen)
    pos = torch.arange(T).expand(B, T) + offset
    return tokens, pos


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_output_shape(encoding):
    tokens, pos = inputs()
    with torch.no_grad():
        logits = tiny_model(encoding)(tokens, pos)
    assert logits.shape == (B, T, VOCAB)
    assert logits.dtype == torch.float32
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("t", [0, 4, T - 2])
def test_causal(encoding, t):
    model = tiny_model(encoding)
    tokens, pos = inputs()
    changed = tokens.clone()
    changed[:, t + 1 :] = (tokens[:, t + 1 :] % (VOCAB - 1)) + 1  # a different non-pad token everywhere after t
    assert (changed[:, t + 1 :] != tokens[:, t + 1 :]).all()
    with torch.no_grad():
        a, b = model(tokens, pos), model(changed, pos)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=1e-5, rtol=0)
    # not vacuous: the changed positions themselves do see the change
    assert (a[:, t + 1 :] - b[:, t + 1 :]).abs().max() > 1e-4


@pytest.mark.parametrize("encoding", ["none", "rope", "alibi"])
@pytest.mark.parametrize("offset", [1, 37])
def test_relative_schemes_ignore_a_constant_shift(encoding, offset):
    model = tiny_model(encoding)
    tokens, pos = inputs()
    with torch.no_grad():
        a, b = model(tokens, pos), model(tokens, pos + offset)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("encoding", ["rope", "alibi"])
def test_relative_schemes_see_relative_positions(encoding):
    """Stretching the positions (distance 1 -> 2) changes rope and alibi logits."""
    model = tiny_model(encoding)
    tokens, pos = inputs()
    with torch.no_grad():
        a, b = model(tokens, pos), model(tokens, pos * 2)
    assert (a - b).abs().max() > 1e-4


@pytest.mark.parametrize("offset", [1, 37])
def test_ape_sees_absolute_positions(offset):
    model = tiny_model("ape")
    tokens, pos = inputs()
    with torch.no_grad():
        a, b = model(tokens, pos), model(tokens, pos + offset)
    assert (a - b).abs().max() > 1e-4


def test_nope_ignores_position_ids_entirely():
    model = tiny_model("none")
    tokens, pos = inputs()
    scrambled = pos[:, torch.randperm(T, generator=torch.Generator().manual_seed(0))]
    with torch.no_grad():
        torch.testing.assert_close(model(tokens, pos), model(tokens, scrambled), atol=0, rtol=0)


def test_ape_rejects_positions_past_max_position():
    model = tiny_model("ape")
    tokens, pos = inputs()
    with pytest.raises(IndexError):
        model(tokens, pos + 64)


def test_alibi_slopes():
    torch.testing.assert_close(alibi_slopes(2), torch.tensor([2.0**-4, 2.0**-8]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]))


def test_alibi_bias_hand_computed():
    slopes = torch.tensor([0.5, 0.25])
    ids = torch.tensor([[0, 1, 2, 3]])
    bias = alibi_bias(ids, ids, slopes, torch.float32)
    assert bias.shape == (1, 2, 4, 4)
    expected_h0 = -0.5 * torch.tensor([[0.0, 1, 2, 3], [1, 0, 1, 2], [2, 1, 0, 1], [3, 2, 1, 0]])
    torch.testing.assert_close(bias[0, 0], expected_h0)
    torch.testing.assert_close(bias[0, 1], expected_h0 / 2)


def test_alibi_bias_uses_position_ids():
    """Distances come from position IDs, not indices: ids 3, 5, 9 give distances 2, 6, 4; a
    coupled key whose ID lies ahead of the query is penalized by its distance too."""
    bias = alibi_bias(torch.tensor([[3, 5, 9]]), torch.tensor([[3, 5, 9, 4]]), torch.tensor([0.5]), torch.float32)
    assert bias.shape == (1, 1, 3, 4)
    expected = -0.5 * torch.tensor([[0.0, 2, 6, 1], [2, 0, 4, 1], [6, 4, 0, 5]])
    torch.testing.assert_close(bias[0, 0], expected)


def test_rotary_hand_computed():
    """One pair of channels at position p rotates by angle p (inv_freq 1 for channel pair 0)."""
    x = torch.tensor([1.0, 0.0, 0.0, 1.0]).view(1, 1, 1, 4)  # (B, nh, T, hs)
    out = rotary(x, torch.tensor([[2]]), base=10000.0)
    # pair 0 (channels 0, 1): angle 2 * 1; pair 1 (channels 2, 3): angle 2 * 10000^(-1/2)
    a0, a1 = 2.0, 2.0 * 10000.0**-0.5
    expected = torch.tensor([math.cos(a0), math.sin(a0), -math.sin(a1), math.cos(a1)]).view(1, 1, 1, 4)
    torch.testing.assert_close(out, expected)
    # position 0 is the identity, and rotation keeps the norm
    torch.testing.assert_close(rotary(x, torch.tensor([[0]]), 10000.0), x)
    y = torch.randn(2, 3, 5, 8)
    assert torch.allclose(rotary(y, torch.arange(5).expand(2, 5) * 7, 100.0).norm(dim=-1), y.norm(dim=-1), atol=1e-5)


def test_attention_heads_rotate_queries_and_keys_pairwise():
    """heads() rotates q and k together from one fused projection: the same as slicing the
    projection into heads and rotating each by hand (interleaved pairs, per head), with or
    without phasors passed in; v is never rotated."""
    torch.manual_seed(0)
    attn = Transformer(ModelConfig(vocab_size=VOCAB, n_head=4, d_model=32, encoding="rope")).blocks[0].attn
    x, ids = torch.randn(2, 5, 32), torch.tensor([[0, 1, 2, 3, 4], [7, 3, 9, 9, 1]])
    q, k, v = attn.qkv(x).view(2, 5, 3, 4, 8).permute(2, 0, 3, 1, 4)
    angles = ids[:, None, :, None] * 10000.0 ** (-torch.arange(0, 8, 2) / 8)  # (B, 1, T, hs/2)
    c, s = angles.cos(), angles.sin()

    def by_hand(t):
        return torch.stack((t[..., 0::2] * c - t[..., 1::2] * s, t[..., 0::2] * s + t[..., 1::2] * c), -1).flatten(-2)

    for got in (attn.heads(x, ids), attn.heads(x, ids, rotary_freqs(ids, 8, 10000.0))):
        torch.testing.assert_close(got[0], by_hand(q))
        torch.testing.assert_close(got[1], by_hand(k))
        torch.testing.assert_close(got[2], v)


def test_unknown_encoding_rejected():
    with pytest.raises(ValueError, match="encoding"):
        Transformer(ModelConfig(vocab_size=VOCAB, encoding="sinusoidal"))


@pytest.mark.parametrize("n_head", [2, 16])
def test_alibi_mask_is_built_in_the_autocast_dtype(n_head):
    """Under autocast the layers attend in bf16: the shared bias is built in it once, with the
    values the fp32 bias rounds to (16 heads: slopes that are not powers of two)."""
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=VOCAB, n_layer=1, d_model=4 * n_head, n_head=n_head, d_ff=8, encoding="alibi")
    model, pos = Transformer(cfg).eval(), torch.arange(300)[None, :]
    fp32 = model.attention_mask(pos)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = model.attention_mask(pos)
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16
    assert torch.equal(bf16, fp32.to(torch.bfloat16))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_stack_computes_each_models_own_forward(encoding):
    """`stack`: the same code on parameters with a leading model axis gives, for each model, its
    own packed features, logits and pointer logits (up to the order of the batched sums)."""
    cfg = ModelConfig(vocab_size=VOCAB, n_layer=2, d_model=16, n_head=2, d_ff=32, encoding=encoding,
                      max_position=64, position_head="pointer")
    models = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(Transformer(cfg))
    stacked = stack(models)
    gen = torch.Generator().manual_seed(2)
    tokens, ids = torch.randint(0, VOCAB, (3, B, T), generator=gen), torch.randint(0, 40, (3, B, T), generator=gen)
    segments = torch.randint(0, 3, (3, B, T), generator=gen).sort(dim=-1).values  # packed rows
    h = stacked.features(tokens, ids, segments=segments)
    logits, pointer = call(stacked.head, h), stacked.pointer_logits(h, ids, h[:, :, :5], ids[:, :, :5])
    assert h.shape == (3, B, T, 16) and pointer.shape == (3, B, T, 5)
    for m, model in enumerate(models):
        own = model.features(tokens[m], ids[m], segments=segments[m])
        torch.testing.assert_close(h[m], own)
        torch.testing.assert_close(logits[m], model.head(own))
        torch.testing.assert_close(pointer[m], model.pointer_logits(own, ids[m], own[:, :5], ids[m][:, :5]))
    assert not torch.allclose(h[0], h[1])  # each model's own weights
