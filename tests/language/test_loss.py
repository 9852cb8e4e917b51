"""The language models' chunked next-token loss against F.cross_entropy, and micro-batches."""

import pytest
import torch
import torch.nn.functional as F

from lengthgen.language import lm, loss
from lengthgen.training.optim import adamw


def _problem(n=300, c=16, v=50, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(n, c, generator=gen).requires_grad_()
    w = (torch.randn(v, c, generator=gen) * 0.5).requires_grad_()
    return h, w, torch.randint(0, v, (n,), generator=gen)


@pytest.mark.parametrize("elements", [50 * 7, 50 * 300, 2**20])  # ragged chunks, one exact, one chunk
def test_loss_and_gradients_match_cross_entropy(monkeypatch, elements):
    monkeypatch.setitem(loss.CHUNK_ELEMENTS, "cpu", elements)
    monkeypatch.setattr(loss, "MIN_ROWS", 1)
    h, w, t = _problem()
    want = F.cross_entropy(h @ w.t(), t)
    got = loss.next_token_loss(h, w, t)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    for a, b in zip(torch.autograd.grad(3.0 * want, (h, w)), torch.autograd.grad(3.0 * got, (h, w)), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)  # the incoming gradient (3) is applied
    with torch.no_grad():
        torch.testing.assert_close(loss.next_token_loss(h, w, t), want.detach(), rtol=1e-6, atol=1e-6)


def test_loss_under_bf16_autocast_matches_cross_entropy_of_bf16_logits(monkeypatch):
    monkeypatch.setitem(loss.CHUNK_ELEMENTS, "cpu", 50 * 24)  # chunks of 24, 24 and 16 rows
    monkeypatch.setattr(loss, "MIN_ROWS", 1)
    h, w, t = _problem(n=64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = F.cross_entropy((h @ w.t()).float(), t)
        got = loss.next_token_loss(h, w, t)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # same bf16 products, fp32 softmax
    grads = torch.autograd.grad(got, (h, w))
    assert [g.dtype for g in grads] == [torch.float32, torch.float32]
    ref = torch.autograd.grad(want, (h, w))
    for a, b in zip(ref, grads, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-2, atol=1e-3)  # bf16 products on both sides (5e-4 apart)


SPEC = {"context": 8, "seed": 1, "pose_target": None,
        "train": {"batch_size": 6, "lr": 1e-2, "weight_decay": 0.0, "warmup_steps": 0, "max_steps": 5,
                  "min_lr_ratio": 1.0, "grad_clip": 0.0, "micro_batch_tokens": None},
        "model": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 32, "dropout": 0.0, "max_position": 16}}


@pytest.mark.parametrize("micro", [8, 16, 40])  # one window a pass; 2 + 2 + 2; 5 + 1 (ragged)
def test_micro_batches_give_the_whole_batch_gradient(micro):
    """The step's loss and gradients (left on the parameters by the step) match the whole batch's.
    Gradients, not parameters: Adam turns the rounding noise of a zero gradient (the key bias's)
    into steps of size lr."""
    stream = torch.randint(0, 40, (500,), generator=torch.Generator().manual_seed(2)).numpy()
    runs = []
    for tokens in (None, micro):
        spec = {**SPEC, "train": {**SPEC["train"], "micro_batch_tokens": tokens}}
        torch.manual_seed(0)
        model = lm.build(spec, 40)
        value = lm._step(model, adamw(model, spec["train"]), stream, 0, spec, torch.device("cpu"))
        runs.append((value, {name: p.grad for name, p in model.named_parameters()}))
    (whole, whole_grads), (parts, part_grads) = runs
    assert parts == pytest.approx(whole, rel=1e-6)
    for name, grad in whole_grads.items():
        torch.testing.assert_close(part_grads[name], grad, rtol=1e-4, atol=1e-7, msg=name)


def test_micro_batches_cover_the_batch_once():
    def parts(tokens):
        return lm.micro_batches(5, {"context": 8, "train": {"micro_batch_tokens": tokens}})

    assert parts(20) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert parts(3) == [slice(i, i + 1) for i in range(5)]  # at least one window a pass
    assert parts(None) == [slice(0, 5)]
