"""E2/E3: the generators' formats and coupled IDs on hand-checked examples, the training-time
gaps, and decoding (KV cache, IDs fed back, PPC never reading the true answer IDs)."""

import numpy as np
import pytest
import torch
from conftest import make_cell, scheme_options

from lengthgen import datasets
from lengthgen.evaluation import decode
from lengthgen.evaluation import sweep as evaluate
from lengthgen.model import positions
from lengthgen.model.transformer import ModelConfig, Transformer
from lengthgen.tasks import scratchpad_parity as sp
from lengthgen.tasks import variable_assignment as va
from lengthgen.training import step, train

VA_PARAMS = {"n_min": 2, "n_max": 4, "depth_min": 1, "depth_max": 2, "distractor_depth_max": 2,
             "variables": 8, "answer_format": "chain"}


def words(kind_vocab, tokens):
    return " ".join(kind_vocab[t] for t in tokens)


def test_scratchpad_parity_hand_checked():
    """Bits 1 0 1: running parity 1 1 0; s_i shares its ID with b_i, BOS and EOS mark n + 1."""
    tokens, ids = sp.example(np.array([1, 0, 1]), "end")
    assert words(sp.VOCAB, tokens) == "<bos> 1 0 1 = 1 1 0 <eos>"
    assert ids.tolist() == [4, 1, 2, 3, 0, 1, 2, 3, 4]
    assert sp.example(np.array([1, 0, 1]), "start")[1].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4]
    assert sp.seq_len({}, 3) == len(tokens)


def test_scratchpad_parity_columns_and_pointer_targets():
    cols = sp.generate_train({"n_min": 2, "n_max": 5, "bos_position": "end"}, 50, np.random.default_rng(0))
    for t, p, a, n in zip(cols["tokens"], cols["positions"], cols["answer_start"], cols["length"], strict=True):
        bits, answer = t[1 : n + 1] - sp.ZERO, t[a:-1] - sp.ZERO
        assert a == n + 2 and t[-1] == sp.EOS and (answer == np.cumsum(bits) % 2).all()
        assert (p[a:-1] == p[1 : n + 1]).all()  # each answer bit is coupled to its prompt bit
    tokens, ids = sp.example(np.array([1, 0, 1]), "end")
    targets = positions.pointer_targets(ids[None], np.array([9]), np.array([5]))
    # the answer bits s_1..s_3 (indices 5-7) point at b_1..b_3; the final EOS is never fed back
    assert targets[0].tolist() == [-1, -1, -1, -1, -1, 1, 2, 3, -1]


def test_variable_assignment_hand_checked_chain_and_statements():
    """Program a = b ; c = 4 ; b = c ; ? a: the chain a -> b -> c -> 4 has depth 3."""
    a, b, c = va.VARIABLE, va.VARIABLE + 1, va.VARIABLE + 2
    statements, hops = [(a, b), (c, va.DIGIT + 4), (b, c)], [0, 2, 1]
    vocab = va.vocab(VA_PARAMS)
    tokens, ids = va.example(statements, hops, "chain")
    assert words(vocab, tokens) == "<bos> v0 = v1 ; v2 = 4 ; v1 = v2 ; ? v0 v1 v2 4 <eos>"
    # each answer token takes the ID (= prompt index) of the right-hand side it copies
    assert ids[15:].tolist() == [3, 11, 7, 8]
    assert ids[:15].tolist() == list(range(15))
    tokens, ids = va.example(statements, hops, "statements")
    assert words(vocab, tokens[15:]) == "v0 = v1 ; v1 = v2 ; v2 = 4 ; <eos>"
    assert ids[15:].tolist() == [1, 2, 3, 4, 9, 10, 11, 12, 5, 6, 7, 8, 9]


def test_pointer_by_name_decodes_the_chain_with_offset_ids():
    """With pointer_offset 2 the pointer's targets are the left-hand sides of the statements to
    follow; decoding feeds back that side's ID + 2 and copies the right-hand side there."""
    a, b, c = va.VARIABLE, va.VARIABLE + 1, va.VARIABLE + 2
    tokens, ids = va.example([(a, b), (c, va.DIGIT + 4), (b, c)], [0, 2, 1], "chain")
    p = 15
    targets = positions.pointer_targets(ids[None], np.array([len(ids)]), np.array([p]), offset=2)[0, p:]
    assert targets.tolist() == [1, 9, 5, -1]  # v0's, v1's and v2's statements; EOS is not fed back
    model = tiny_model(head="pointer", vocab=len(va.vocab(VA_PARAMS)), pointer_rope=False)
    picks = iter(targets[:3].tolist())

    def pointer_logits(h_query, query_ids, h_keys, key_ids):
        return torch.nn.functional.one_hot(torch.tensor([[next(picks)]]), h_keys.shape[1]).float() * 10

    model.pointer_logits = pointer_logits
    model.head = torch.nn.Linear(16, len(va.vocab(VA_PARAMS)))
    torch.nn.init.zeros_(model.head.weight)
    torch.nn.init.zeros_(model.head.bias)  # argmax 0 = COPY: never EOS, so every token is copied
    opts = scheme_options(encoding="rope", positions="coupled", position_head="pointer", copy=True,
                          pointer_rope=False, pointer_offset=2)
    t, i = torch.tensor(tokens[None]).long(), torch.tensor(ids[None]).long()
    out, fed = decode.generate(model, t[:, :p], i[:, :p], 3, opts, va.EOS)
    assert fed[0].tolist() == ids[p : p + 3].tolist() == [3, 11, 7]
    assert out[0].tolist() == tokens[p : p + 3].tolist()  # v1 v2 4, copied from the right-hand sides


def test_variable_assignment_programs_are_well_formed():
    cols = va.generate_train(VA_PARAMS, 200, np.random.default_rng(1))
    for t, p, a, n, d in zip(cols["tokens"], cols["positions"], cols["answer_start"], cols["length"],
                             cols["depth"], strict=True):
        lhs = t[1 : 4 * n + 1 : 4]
        assert len(set(lhs.tolist())) == n  # each variable assigned once
        assert a == 4 * n + 3 and len(t) == a + d + 1
        assert (t[a:-1] == t[p[a:-1]]).all()  # answers copy the prompt token at their coupled ID
        value = dict(zip(t[1 : 4 * n + 1 : 4].tolist(), t[3 : 4 * n + 1 : 4].tolist(), strict=True))
        walk, x = [], int(t[a - 1])
        while x in value:
            x = value[x]
            walk.append(x)
        assert walk == t[a:-1].tolist() and walk[-1] < va.VARIABLE  # the chain ends in a constant


def test_gaps_keep_coupled_ids_equal_and_unscore_the_straddling_target():
    tokens, ids = sp.example(np.array([1, 0, 1, 1]), "end")
    batch = {"tokens": torch.tensor(tokens[None], dtype=torch.long), "positions": torch.tensor(ids[None]).long(),
             "seq_len": torch.tensor([len(tokens)]), "answer_start": torch.tensor([6])}
    opts = scheme_options(encoding="rope", positions="coupled", gaps={"fraction": 1.0, "max_cuts": 1})
    for seed in range(20):
        new, unscored = positions.training_ids(batch, opts, sp.gap_after(True), 64, torch.Generator().manual_seed(seed))
        new = new[0]
        assert (new[6:10] == new[1:5]).all() and new.max() < 64  # s_i keeps b_i's ID
        shift = new - batch["positions"][0]
        assert (shift[1:] >= 0).all() and len(set(shift[1:5].tolist())) <= 2  # one gap: two chunks
        # exactly the answer targets whose ID moved away from their query's are unscored
        moved = [t for t in range(6, 11) if shift[t] != shift[t - 1]]
        assert [t for t in range(6, 11) if unscored[0, t]] == moved
        assert len(moved) <= 1 and moved == [t for t in range(6, 11) if new[t] - new[t - 1] != ids[t] - ids[t - 1]]


def tiny_model(encoding="rope", head="none", vocab=6, pointer_rope=True):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=vocab, n_layer=2, d_model=16, n_head=2, d_ff=32, encoding=encoding,
                      max_position=64, position_head=head, pointer_rope=pointer_rope)
    return Transformer(cfg).eval()


@pytest.mark.parametrize("encoding", ["none", "ape", "rope", "alibi"])
def test_kv_cache_matches_a_full_forward(encoding):
    model = tiny_model(encoding)
    tokens = torch.randint(1, 6, (3, 12), generator=torch.Generator().manual_seed(1))
    ids = torch.randint(0, 30, (3, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model.features(tokens, ids)
        cache = model.new_cache()
        steps = [model.features(tokens[:, :7], ids[:, :7], cache)]
        steps += [model.features(tokens[:, t : t + 1], ids[:, t : t + 1], cache) for t in range(7, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("encoding", ["none", "ape", "rope", "alibi"])
def test_last_only_is_the_full_forward_at_the_last_position_and_fills_the_same_cache(encoding):
    """Decoding and scoring run the top block for the last position alone: the state, and the
    cached keys the next one-token steps read, must be those of the full forward."""
    model = tiny_model(encoding)
    tokens = torch.randint(1, 6, (3, 12), generator=torch.Generator().manual_seed(1))
    ids = torch.randint(0, 30, (3, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full_cache, last_cache = model.new_cache(), model.new_cache()
        full = model.features(tokens[:, :9], ids[:, :9], full_cache)
        last = model.features(tokens[:, :9], ids[:, :9], last_cache, last_only=True)
        assert last.shape == (3, 1, model.cfg.d_model)
        torch.testing.assert_close(last, full[:, -1:], atol=1e-5, rtol=1e-5)
        for a, b in zip(full_cache, last_cache, strict=True):
            assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
        step = model.features(tokens[:, 9:10], ids[:, 9:10], last_cache, last_only=True)
        torch.testing.assert_close(step, model.features(tokens[:, :10], ids[:, :10])[:, -1:], atol=1e-5, rtol=1e-5)


def test_teacher_forced_and_free_running_exact_match_agree_for_index_schemes():
    """A small untrained-to-noise model on scratchpad parity: greedy decoding with the cache
    gets each example exactly right iff teacher forcing does (index IDs need no feedback)."""
    rng = np.random.default_rng(3)
    for encoding in ("rope", "alibi", "none"):
        model = tiny_model(encoding)
        with torch.no_grad():  # make the model confident on some examples: scale the head
            model.head.weight.mul_(50)
        bits = rng.integers(0, 2, size=(64, 5))
        rows = [sp.example(b, "end") for b in bits]
        tokens = torch.tensor(np.stack([t for t, _ in rows]), dtype=torch.long)
        ids = torch.arange(tokens.shape[1]).expand_as(tokens)
        opts = scheme_options(encoding=encoding)
        batch = {"tokens": tokens, "ids": ids, "seq_len": torch.full((64,), tokens.shape[1]),
                 "answer_start": torch.full((64,), 7)}
        with torch.no_grad():
            forced = step.loss(model, step.packed_inputs([batch], torch.device("cpu"), copy=False))[1][0]
            out, fed = decode.generate(model, tokens[:, :7], ids[:, :7], 6, opts, sp.EOS)
        free = (out == tokens[:, 7:]).all(dim=1)
        assert torch.equal(forced, free)
        assert fed.tolist() == [list(range(7, 13))] * 64


def _shifted_pointer(model, shift: int):
    """Wrap the pointer so that it picks the prompt position `shift` after its own choice."""
    original = model.pointer_logits

    def pointer_logits(h_query, query_ids, h_keys, key_ids):
        return original(h_query, query_ids, h_keys, key_ids).roll(shift, dims=-1)

    return pointer_logits


@pytest.fixture(scope="module")
def trained_ppc(tmp_path_factory):
    """A PPC model trained on scratchpad parity (n in [2, 6]) until it decodes it."""
    tmp = tmp_path_factory.mktemp("ppc")
    task = {"name": "sp", "kind": "scratchpad_parity", "params": {"n_min": 2, "n_max": 6, "bos_position": "end"},
            "train_examples": 3000}
    datasets.generate(task, "train", 0, tmp / "train.parquet")
    options = {"positions": "coupled", "position_head": "pointer", "gaps": {"fraction": 0.5, "max_cuts": 1}}
    stop = {"accuracy": 1.0, "loss": None, "patience": 20}
    model = {"max_position": 64, "n_layer": 2, "d_model": 32, "n_head": 2, "d_ff": 64}
    cell = make_cell(task="sp", scheme="ppc", encoding="rope", options=options, model=model, batch_size=64,
                     max_steps=600, lr=3e-3, warmup_steps=20, early_stop=stop)
    train.train(cell, tmp / "train.parquet", tmp, tmp / "ck.pt", log=lambda m: None)
    model, ckpt = evaluate.load_model(tmp / "model.pt", torch.device("cpu"))
    return model, ckpt["cell"]["scheme_options"]


def _decode_exact(model, opts, n=6, shift=0):
    rows = [sp.example(b, "end") for b in np.random.default_rng(9).integers(0, 2, size=(100, n))]
    tokens = torch.tensor(np.stack([t for t, _ in rows]), dtype=torch.long)
    ids = torch.tensor(np.stack([p for _, p in rows]), dtype=torch.long)
    p = n + 2
    if shift:
        model.pointer_logits = _shifted_pointer(model, shift)
    try:
        out, fed = decode.generate(model, tokens[:, :p], ids[:, :p], n + 1, opts, sp.EOS)
    finally:
        model.__dict__.pop("pointer_logits", None)
    exact = (out == tokens[:, p:]).all(dim=1).float().mean().item()
    id_acc = (fed[:, :-1] == ids[:, p:-1]).float().mean().item()
    return exact, id_acc


def test_ppc_decoding_feeds_back_its_own_ids(trained_ppc):
    """Decoding reads no true answer ID (oracle_ids is not passed): the trained model predicts
    them itself; with its pointer forced one position off, the IDs fed back are wrong and
    exact match fails."""
    model, opts = trained_ppc
    exact, id_acc = _decode_exact(model, opts)
    assert exact >= 0.9 and id_acc >= 0.95
    wrong_exact, wrong_ids = _decode_exact(model, opts, shift=1)
    assert wrong_ids < 0.2 and wrong_exact < 0.2


def test_pc_decoding_uses_the_oracle_ids_and_ppc_ignores_them(trained_ppc):
    model, opts = trained_ppc
    rows = [sp.example(b, "end") for b in np.random.default_rng(4).integers(0, 2, size=(20, 5))]
    tokens = torch.tensor(np.stack([t for t, _ in rows]), dtype=torch.long)
    ids = torch.tensor(np.stack([p for _, p in rows]), dtype=torch.long)
    junk = torch.full((20, 6), 50)
    with torch.no_grad():
        _, fed_ppc = decode.generate(model, tokens[:, :7], ids[:, :7], 6, opts, sp.EOS, oracle_ids=junk)
        pc = {**opts, "position_head": "none"}
        _, fed_pc = decode.generate(model, tokens[:, :7], ids[:, :7], 6, pc, sp.EOS, oracle_ids=junk)
    assert (fed_pc == 50).all() and not (fed_ppc == 50).any()


def test_classifier_head_is_trained_on_ids_and_decodes_its_argmax():
    """The classifier variant of PPC: its loss is cross entropy against the IDs fed with the
    answer tokens (here offset by 20), and decoding feeds back the class it predicts."""
    tokens, ids = sp.example(np.array([1, 0, 1]), "end")
    model = tiny_model(head="classifier")
    fed_ids = torch.tensor(ids[None]).long() + 20
    pointer = torch.from_numpy(positions.pointer_targets(ids[None], np.array([9]), np.array([5])))[:, 1:]
    with torch.no_grad():
        h = model.features(torch.tensor(tokens[None, :-1]).long(), fed_ids[:, :-1])
        answer_ids = fed_ids[0, 5:8]  # s_1..s_3, the answer tokens fed back
        model.id_head.weight.zero_()
        model.id_head.bias.copy_(torch.full((64,), -50.0))
        model.id_head.bias[answer_ids] = 50.0  # the head can only tell these three apart at chance
        inputs = {"pointer": pointer[None], "all_ids": fed_ids[None], "prompt": 5, "answer_start": torch.tensor([[5]])}
        even, _ = step._position_loss(model, h[None], inputs)  # a stack of one
        model.id_head.bias[answer_ids[1:]] = -50.0  # now it is sure of s_1's ID for every token
        sure, wrong = step._position_loss(model, h[None], inputs)
    assert even.item() == pytest.approx(np.log(3), abs=1e-4)  # cross entropy over the IDs, not the tokens
    assert sure.item() == pytest.approx(200 / 3, rel=1e-3) and wrong.item()  # two of three IDs wrong by 100
    opts = scheme_options(encoding="rope", positions="coupled", position_head="classifier")
    _, fed = decode.generate(model, torch.tensor(tokens[None, :5]).long(), fed_ids[:, :5], 4, opts, sp.EOS)
    assert (fed == answer_ids[0]).all()
