"""E4 scoring and language-model training on tiny models: greedy against brute force, the
quantities' definitions (all distant tokens give L_long, none give L_short), the random
baseline's exact expectation, the null control's contexts, IDs of the short model's inputs,
attention selection, PoSE IDs, one pair's score table, resume and the summary."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import torch

from lengthgen.language import influence, lm
from lengthgen.model.transformer import ModelConfig, Transformer

T_LONG, T_SHORT = 12, 4  # a distant window of 8 tokens


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=23, n_layer=2, d_model=32, n_head=2, d_ff=64, encoding="rope"))
    for p in m.parameters():  # a random model with large weights: losses differ a lot by context
        p.data.mul_(20)
    return m.eval()


def _contexts(ctx: torch.Tensor, y: torch.Tensor) -> influence.Contexts:
    """Contexts holding the given long contexts (N, T_LONG) and next tokens (N,)."""
    c = influence.Contexts.__new__(influence.Contexts)
    c.ctx, c.y, c.t_long, c.d = ctx, y, T_LONG, T_LONG - T_SHORT
    return c


@pytest.fixture(scope="module")
def contexts():
    stream = np.random.default_rng(1).integers(1, 23, 200).astype(np.uint16)
    return influence.Contexts(stream, np.array([40, 77, 150]), T_LONG, T_SHORT)


def test_greedy_matches_brute_force_search_of_each_step(model, contexts):
    """At every step, greedy's pick is the best of all extensions of its previous picks, found by
    scoring each candidate separately (no batching), and its loss is that candidate's loss."""
    chosen, losses, _ = influence.greedy(model, contexts, 3, batch=5)
    for row in range(len(contexts.y)):
        c = _contexts(contexts.ctx[row : row + 1], contexts.y[row : row + 1])
        for j in range(3):
            before = chosen[row, :j].tolist()
            scores = {cand: influence.loss_with(model, c, torch.tensor([before + [cand]]), 1).item()
                      for cand in range(c.d) if cand not in before}
            best = min(scores, key=scores.get)
            assert chosen[row, j].item() == best
            assert losses[row, j].item() == pytest.approx(scores[best], rel=1e-5)


def test_greedy_k1_is_the_best_single_token_of_all_subsets(model, contexts):
    """k = 1 greedy is exact: no other single distant token gives a lower loss; and the best
    pair found by exhaustive search is never worse than greedy's pair (greedy is a heuristic)."""
    chosen, losses, _ = influence.greedy(model, contexts, 2, batch=64)
    d = T_LONG - T_SHORT
    for row in range(len(contexts.y)):
        ctx, y = contexts.ctx[row : row + 1], contexts.y[row : row + 1]
        pairs = torch.tensor(list(itertools.combinations(range(d), 2)))
        best_pair = influence.loss_with(model, _contexts(ctx.expand(len(pairs), -1), y.expand(len(pairs))), pairs,
                                        64).min().item()
        singles = torch.arange(d)[:, None]
        c_single = _contexts(ctx.expand(d, -1), y.expand(d))
        assert losses[row, 0].item() == pytest.approx(influence.loss_with(model, c_single, singles, 64).min().item(),
                                                      rel=1e-5)
        assert best_pair <= losses[row, 1].item() * (1 + 1e-5)


def test_greedys_first_step_scores_every_single_distant_token(model, contexts):
    """Column p of `singles` is the loss with distant token p alone, so their mean is the exact
    expected loss under one uniformly random distant token (the random baseline at k = 1)."""
    d = T_LONG - T_SHORT
    _, losses, singles = influence.greedy(model, contexts, 1, batch=7)
    assert singles.shape == (len(contexts.y), d)
    for row in range(len(contexts.y)):
        c = _contexts(contexts.ctx[row : row + 1].expand(d, -1), contexts.y[row : row + 1].expand(d))
        each = influence.loss_with(model, c, torch.arange(d)[:, None], 64)
        assert torch.allclose(singles[row], each, rtol=1e-5)
        assert losses[row, 0].item() == pytest.approx(each.min().item(), rel=1e-5)


def test_random_losses_are_the_mean_over_draws_of_random_k_sets(model, contexts):
    """One draw: the loss of the draw's k-set; the mean over draws lies within the draws' range."""
    rng = np.random.default_rng(0)
    order = torch.from_numpy(rng.permuted(np.tile(np.arange(contexts.d), (len(contexts.y), 1)), axis=1))
    one = influence.random_losses(model, contexts, [2, 4], 1, 64, np.random.default_rng(0))
    for k in (2, 4):
        assert one[k] == pytest.approx(influence.loss_with(model, contexts, order[:, :k], 64).tolist(), rel=1e-5)
    many = influence.random_losses(model, contexts, [3], 16, 64, np.random.default_rng(1))[3]
    draws = np.random.default_rng(1)
    each = [influence.loss_with(model, contexts, torch.from_numpy(
        draws.permuted(np.tile(np.arange(contexts.d), (len(contexts.y), 1)), axis=1))[:, :3], 64) for _ in range(16)]
    assert many == pytest.approx(torch.stack(each).mean(0).tolist(), rel=1e-5)


def test_null_contexts_keep_the_window_and_take_the_donors_distant_tokens(contexts):
    donor = influence.Contexts(np.arange(300, dtype=np.uint16) % 23, np.array([20, 50, 90]), T_LONG, T_SHORT)
    before = contexts.ctx.clone()
    null = contexts.with_distant(donor)
    d = T_LONG - T_SHORT
    assert torch.equal(null.ctx[:, :d], donor.ctx[:, :d]) and torch.equal(null.ctx[:, d:], contexts.ctx[:, d:])
    assert torch.equal(null.y, contexts.y) and torch.equal(contexts.ctx, before)  # the targets' own are kept


def test_documents_and_donors_from_another_document():
    assert influence.documents(np.array([0, 10, 14]), [0, 9, 10, 13, 14, 39]).tolist() == [0, 0, 1, 1, 2, 2]
    table = pd.DataFrame({"index": np.arange(30), "document": np.repeat([0, 1, 2], 10)})
    picked = np.arange(0, 30, 3)
    donor = influence.donors(table, picked, np.random.default_rng(0))
    assert (table["document"].to_numpy()[donor] != table["document"].to_numpy()[picked]).all()
    assert influence.donors(table.assign(document=0), picked, np.random.default_rng(0)) is None


def test_one_pairs_score_table(model):
    """Every scored token: its pair's seed and document, greedy, its null control (a donor of
    another document), attention, random as an expectation and a short model's losses."""
    rng = np.random.default_rng(2)
    stream, doc_starts = rng.integers(1, 23, 400).astype(np.uint16), np.array([0, 130, 260])
    cfg = {"T_long": T_LONG, "T_short": T_SHORT, "seed": 7, "influence": {
        "screen": 60, "targets": 5, "delta": -100.0, "k": [1, 2], "methods": ["greedy", "attention", "random"],
        "coupling": "shared", "seed": 0, "batch_size": 64, "targets_per_batch": 2, "random_draws": 3}}
    table = influence.score(model, {"short": model}, stream, doc_starts, cfg, log=lambda _msg: None)
    scored = table[table["scored"]]
    assert len(table) == 60 and len(scored) == 5 and (table["seed"] == 7).all()
    assert (table["document"] == influence.documents(doc_starts, table["index"])).all()
    donor_docs = influence.documents(doc_starts, scored["null_donor"].astype(int))
    assert (donor_docs != scored["document"]).all()
    columns = [f"L_{m}_{k}" for m in ("greedy", "null", "attention", "random") for k in (1, 2)]
    assert np.isfinite(scored[[*columns, "short_window", "short_coupled_2", "short_true_2"]].to_numpy()).all()
    assert (scored["L_greedy_1"] <= scored["L_random_1"] + 1e-6).all()  # the best single token, against their mean
    again = influence.score(model, {"short": model}, stream, doc_starts, cfg, log=lambda _msg: None)
    pd.testing.assert_frame_equal(table, again)  # one pair's draws are seeded
    other = influence.score(model, {"short": model}, stream, doc_starts, {**cfg, "seed": 8}, log=lambda _msg: None)
    assert not np.array_equal(other["index"], table["index"])  # another pair draws its own tokens


def test_all_distant_tokens_give_l_long_and_none_give_l_short(model, contexts):
    n = len(contexts.y)
    ids = torch.arange(T_LONG).expand(n, -1)
    l_long = influence.last_nll(model, contexts.ctx, ids, contexts.y, 64)
    l_short = influence.last_nll(model, contexts.ctx[:, -T_SHORT:], ids[:, -T_SHORT:], contexts.y, 64)
    every = torch.arange(T_LONG - T_SHORT).expand(n, -1)
    assert torch.allclose(influence.loss_with(model, contexts, every, 64), l_long, rtol=1e-4)
    assert torch.allclose(influence.loss_with(model, contexts, every[:, :0], 64), l_short, rtol=1e-4)
    assert (l_long - l_short).abs().max() > 0.1  # the check above can tell the two apart


def test_ids_of_chosen_tokens_true_adjacent_and_shared(contexts):
    rows, chosen = torch.tensor([0]), torch.tensor([[1, 5]])
    d = T_LONG - T_SHORT
    tokens, true_ids = contexts.with_tokens(rows, chosen, "true")
    assert tokens[0].tolist() == [*contexts.ctx[0, [1, 5]].tolist(), *contexts.ctx[0, d:].tolist()]
    assert true_ids[0].tolist() == [1, 5, *range(d, T_LONG)]
    assert contexts.with_tokens(rows, chosen, "adjacent")[1][0].tolist() == [d - 2, d - 1, *range(d, T_LONG)]
    assert contexts.with_tokens(rows, chosen, "shared")[1][0].tolist() == [d, d, *range(d, T_LONG)]


def test_last_attention_is_the_mean_of_each_layers_softmax(model, contexts):
    """Against a hand-written attention of the last query, layer by layer."""
    ids = torch.arange(T_LONG).expand(len(contexts.y), -1)
    got = influence.last_attention(model, contexts.ctx, ids)
    x, want = model.tok_emb(contexts.ctx), 0
    with torch.no_grad():
        for block in model.blocks:
            q, k, _ = block.attn.heads(block.ln1(x), ids)
            full = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).masked_fill(
                ~torch.ones(T_LONG, T_LONG, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
            want = want + full[:, :, -1].mean(1)
            x = block(x, ids)
    assert torch.allclose(got, want / len(model.blocks), atol=1e-5)
    assert torch.allclose(got.sum(-1), torch.ones(len(contexts.y)), atol=1e-5)


def test_pose_ids_make_one_jump_and_stay_below_the_target():
    gen = torch.Generator().manual_seed(0)
    ids = lm.position_ids(500, 8, 32, gen)
    steps = ids.diff(dim=1)
    assert ids.max() < 32 and ids.max() > 24  # skips reach the long range
    assert ((steps != 1).sum(dim=1) <= 1).all() and (steps >= 1).all()
    assert torch.equal(lm.position_ids(3, 8, None, gen), torch.arange(8).expand(3, -1))


def test_eligible_positions_have_history_in_their_own_document():
    got = influence.eligible(np.array([0, 10, 14]), 40, 5)
    assert got.tolist() == [*range(5, 10), *range(19, 40)]


def test_language_seeds_take_the_seed_offset_and_the_old_key_is_named():
    """The confirmatory grid's seed_offset moves every pair of language models to fresh seeds; each pair's
    models carry their own identity; `language.seed` (one pair) is refused by name."""
    from pathlib import Path

    from lengthgen import config
    from lengthgen.support.errors import UserError

    root = Path(__file__).resolve().parents[2]
    schema = config.load_yaml(root / "workflow/schemas/config.schema.yaml")
    base = config.load_yaml(root / "config.yaml")
    confirm = config.validate(config._deep_merge(base, config.load_yaml(root / "config/confirm.yaml")), schema)
    assert config.validate(base, schema)["language"]["seeds"] == [0, 1, 2]
    first = confirm["seed_offset"]  # the draw's registered offset (docs/protocol.md)
    assert first >= 1000 and confirm["language"]["seeds"] == list(range(first, first + 4))
    assert config.lm_slice(confirm, "short", first + 1)["seed"] == first + 1
    assert config.influence_slice(confirm, first + 1)["seed"] == first + 1
    assert len({config.lm_token(confirm, "long", s) for s in confirm["language"]["seeds"]}) == 4
    with pytest.raises(UserError, match=r"^config.language.seed: now language.seeds, a list"):
        config.validate({**base, "language": {**base["language"], "seed": 0}}, schema)


SPEC = {
    "name": "long", "context": 8, "pose_target": None, "seed": 3, "device": "cpu", "threads": 1, "gpu": False,
    "model": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 32, "dropout": 0.0, "max_position": 64},
    "train": {"batch_size": 4, "batch_tokens": 32, "lr": 3e-3, "min_lr_ratio": 0.1, "weight_decay": 0.01,
              "warmup_steps": 2, "max_steps": 8, "grad_clip": 1.0, "checkpoint_every": 3, "eval_every": 4,
              "eval_windows": 4},
}


def test_language_model_resumes_where_an_uninterrupted_run_ends(tmp_path, token_dir, monkeypatch):
    tok_path, tokens = token_dir
    lm.train_lm(SPEC, tok_path, tokens, tmp_path / "whole", tmp_path / "ck1.pt", log=lambda m: None)
    real_step, calls = lm._step, []

    def dying_step(*args):
        calls.append(1)
        if len(calls) == 5:  # after the checkpoint at step 3
            raise KeyboardInterrupt
        return real_step(*args)

    monkeypatch.setattr(lm, "_step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        lm.train_lm(SPEC, tok_path, tokens, tmp_path / "resumed", tmp_path / "ck2.pt", log=lambda m: None)
    monkeypatch.setattr(lm, "_step", real_step)
    lines = []
    lm.train_lm(SPEC, tok_path, tokens, tmp_path / "resumed", tmp_path / "ck2.pt", log=lines.append)
    assert any("resumed from step 3" in line for line in lines)
    whole, resumed = (torch.load(tmp_path / d / "model.pt", weights_only=True) for d in ("whole", "resumed"))
    for key, value in whole["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    logs = [pd.read_parquet(tmp_path / d / "train_log.parquet") for d in ("whole", "resumed")]
    pd.testing.assert_frame_equal(*logs)
    assert logs[0]["validation_loss"].notna().sum() == 2  # steps 4 and 8
    assert not (tmp_path / "ck2.pt").exists()


@pytest.fixture(scope="module")
def token_dir(tmp_path_factory):
    """A tiny corpus, tokenizer and token streams, through the real stages."""
    from lengthgen.language import corpus, tokenizer

    root = tmp_path_factory.mktemp("lang")
    rng = np.random.default_rng(0)
    words = ["thou", "art", "the", "king", "queen", "of", "night", "and", "day", "my", "lord"]
    for i in range(30):
        (root / f"doc{i:02d}.txt").write_text(" ".join(rng.choice(words, 300)) + "\n")
    cfg = {"source": "files", "path": str(root / "*.txt"), "validation_fraction": 0.3}
    corpus.build(cfg, root / "corpus.parquet")
    tokenizer.train({"kind": "bpe", "vocab_size": 300, "min_frequency": 2}, root / "corpus.parquet", root / "tok.json")
    tokenizer.tokenize(root / "tok.json", root / "corpus.parquet", root / "tokens")
    return root / "tok.json", root / "tokens"
