"""The one training step: packing, targets and masks, the loss over a leading model axis, the
per-model clip, and a cell's step being a stack's step of one model."""

import copy
import types

import pytest
import torch

from lengthgen.model.transformer import ModelConfig, Transformer, stack
from lengthgen.training import step
from lengthgen.training.optim import adamw

CPU = torch.device("cpu")


def test_answer_mask_scores_only_answer_tokens_of_padded_rows():
    # two rows of a padded batch: lengths 5 and 3 tokens, answers start at index 4 and 2
    seq_len, answer_start = torch.tensor([5, 3]), torch.tensor([4, 2])
    mask = step.answer_mask(seq_len, answer_start, t=4)  # logits for positions 0..3 predict 1..4
    assert mask.tolist() == [[False, False, False, True], [False, True, False, False]]


def test_exact_match_ignores_padding_and_needs_every_answer_token():
    class Echo(torch.nn.Module):  # predicts, at each position, the token given by `preds`
        cfg = types.SimpleNamespace(position_head="none")

        def __init__(self, preds):
            super().__init__()
            self.preds = preds
            self.head = torch.nn.Identity()

        def features(self, tokens, position_ids, segments):  # rows are packed: read (example, ID)
            return torch.nn.functional.one_hot(self.preds[segments.clamp_min(0), position_ids], 7).float() * 10

    tokens = torch.tensor([[1, 3, 4, 2, 3], [1, 4, 2, 4, 0]])  # row 2: 4 tokens + padding
    batch = {"tokens": tokens, "ids": torch.arange(5).expand(2, 5), "seq_len": torch.tensor([5, 4]),
             "answer_start": torch.tensor([4, 3]), "pointer": torch.full((2, 5), -1)}
    right = torch.tensor([[0, 0, 0, 3, 6], [0, 0, 4, 6, 6]])  # correct at answer positions, junk elsewhere
    _, correct = step.loss(Echo(right), step.packed_inputs([batch], CPU, copy=False))
    assert correct.tolist() == [[True, True]]
    wrong = right.clone()
    wrong[1, 2] = 3  # the only answer token of row 2
    assert step.loss(Echo(wrong), step.packed_inputs([batch], CPU, copy=False))[1].tolist() == [[True, False]]


def test_pack_fits_rows_longest_first():
    row, offset = step.pack([9, 3, 5, 1, 7, 2], 9)
    assert (row, offset) == ([0, 2, 2, 2, 1, 1], [0, 5, 0, 8, 0, 7])  # 9 | 7+2 | 5+3+1
    assert step.pack([4, 4, 4], 4) == ([0, 1, 2], [0, 0, 0])
    with pytest.raises(ValueError, match="length 5 does not fit rows of width 4"):
        step.pack([2, 5], 4)


def _batch(lengths: list[int], t: int = 10, seed: int = 0, prompt: int = 4) -> dict:
    """Random examples of `lengths` (each <= t) padded to t, their answers after `prompt` tokens
    and each answer token pointing at a prompt position."""
    gen = torch.Generator().manual_seed(seed)
    b = len(lengths)
    seq_len = torch.tensor(lengths)
    real = torch.arange(t)[None] < seq_len[:, None]
    pointer = torch.randint(0, prompt, (b, t), generator=gen).masked_fill(torch.arange(t)[None] < prompt, -1)
    return {"tokens": torch.randint(1, 11, (b, t), generator=gen) * real, "ids": torch.arange(t).expand(b, t) * 2 + 1,
            "seq_len": seq_len, "answer_start": torch.full((b,), prompt), "pointer": pointer.masked_fill(~real, -1)}


@pytest.mark.parametrize("encoding", ["none", "ape", "rope", "alibi"])
def test_packed_features_match_each_example_alone(encoding):
    """Packed rows give every example the states it has alone (padding removed, no attention
    across examples), for every encoding, and the gradient reaches the same weights."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=11, encoding=encoding, d_model=32, n_head=4, max_position=64))
    lengths = [10, 4, 6, 2, 8, 3]  # the states of positions 0..length-2 predict the next token
    batch = _batch(lengths)
    tokens, ids, n = batch["tokens"][:, :9], batch["ids"][:, :9], torch.tensor(lengths) - 1
    real = torch.arange(9)[None] < n[:, None]
    packed = step.features(model, step.packed_inputs([batch], CPU, copy=False))[0]
    for i, k in enumerate(n.tolist()):
        alone = model.features(tokens[i : i + 1, :k], ids[i : i + 1, :k])[0]
        torch.testing.assert_close(packed[i, :k], alone, atol=1e-5, rtol=1e-5)
    packed[real].sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    model.features(tokens, ids)[real].sum().backward()
    want = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == want.keys() and "blocks.1.attn.qkv.weight" in grads
    for name in want:
        torch.testing.assert_close(grads[name], want[name], atol=1e-5, rtol=1e-4)


HEADS = {"none": {}, "pointer": {"position_head": "pointer"}, "classifier": {"position_head": "classifier"},
         "pointer-rope": {"position_head": "pointer", "pointer_rope": True}}


def _models(head: str, m: int) -> list[Transformer]:
    out = []
    for seed in range(m):
        torch.manual_seed(seed)
        out.append(Transformer(ModelConfig(vocab_size=11, encoding="rope", d_model=32, n_head=4, max_position=64,
                                           **{"pointer_rope": False, **HEADS[head]})))
    return out


@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("copy_", [False, True])
def test_each_model_of_a_stack_has_the_loss_and_gradient_it_has_alone(head, copy_):
    """The loss of a stack of 3 (batches of other lengths, so other row counts) is each model's
    loss alone, a stack of one's is the plain model's, and so are their gradients."""
    models = _models(head, 3)
    batches = [_batch([10, 4, 6, 2], seed=1), _batch([3, 3, 9, 7], seed=2), _batch([5, 10, 2, 2], seed=3)]
    alone = [step.loss(mod, step.packed_inputs([b], CPU, copy_), 0.5) for mod, b in zip(models, batches, strict=True)]
    for group in ([0], [0, 1, 2]):
        stacked = stack([copy.deepcopy(models[i]) for i in group])
        losses, correct = step.loss(stacked, step.packed_inputs([batches[i] for i in group], CPU, copy_), 0.5)
        losses.sum().backward()
        for k, i in enumerate(group):
            torch.testing.assert_close(losses[k], alone[i][0][0], atol=1e-6, rtol=1e-6)
            assert torch.equal(correct[k], alone[i][1][0])
            models[i].zero_grad(set_to_none=True)
            alone_loss = step.loss(models[i], step.packed_inputs([batches[i]], CPU, copy_), 0.5)[0]
            alone_loss.sum().backward()
            for (name, p), q in zip(models[i].named_parameters(), stacked.parameters(), strict=True):
                torch.testing.assert_close(q.grad[k], p.grad, atol=1e-6, rtol=1e-4, msg=name)


def test_a_stack_clips_each_model_on_its_own_norm():
    models = _models("none", 2)
    stacked = stack(models)
    batches = [_batch([10, 4, 6], seed=1), _batch([3, 9, 7], seed=2)]
    step.loss(stacked, step.packed_inputs(batches, CPU, copy=False))[0].sum().backward()
    for mod, b in zip(models, batches, strict=True):
        step.loss(mod, step.packed_inputs([b], CPU, copy=False))[0].sum().backward()
        step.clip(mod, 0.01)
    step.clip(stacked, 0.01)
    for k, mod in enumerate(models):
        for p, q in zip(mod.parameters(), stacked.parameters(), strict=True):
            torch.testing.assert_close(q.grad[k], p.grad, atol=1e-7, rtol=1e-4)
    assert step.is_stack(stacked) and not step.is_stack(models[0])


def test_a_step_with_a_loss_that_is_not_finite_leaves_the_model_as_it_was():
    model = _models("none", 1)[0]
    before = [p.detach().clone() for p in model.parameters()]
    opt = adamw(model, {"lr": 1e-2, "weight_decay": 0.1})

    def forward():
        loss = sum(p.sum() for p in model.parameters()) * float("nan")
        loss.backward()
        return loss, "rest"

    values, rest = step.optimizer_step(model, opt, 1e-2, 1.0, forward)
    assert rest == "rest" and len(values) == 1 and values[0] != values[0]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    losses, accuracies = step.cell_step(model, opt, [_batch([10, 4, 6])], 1e-2, 1.0, CPU,
                                        {"copy": False, "ppc_weight": 1.0})
    assert len(losses) == len(accuracies) == 1 and opt.param_groups[0]["lr"] == 1e-2
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
