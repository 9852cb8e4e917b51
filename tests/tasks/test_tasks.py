"""E1 sparse parity: the format of an example, pinned on hand-checked cases."""

from __future__ import annotations

import numpy as np
import pytest

from lengthgen import tasks
from lengthgen.support.errors import UserError
from lengthgen.tasks import sparse_parity as sp

BOS, SEP, ZERO, ONE, PZERO, PONE = 1, 2, 3, 4, 5, 6


class ScriptedRng:
    """Stands in for np.random.Generator: returns the arrays it was given, in order.

    `_block` draws, in this order: the bits (integers), the permutation scores (random)
    and the window offset (integers). Feeding them by hand pins its exact output.
    """

    def __init__(self, bits, scores, offset):
        self._ints = [np.asarray(bits, dtype=np.int64), np.asarray(offset, dtype=np.int64)]
        self._scores = np.asarray(scores, dtype=np.float64)

    def integers(self, low, high, size=None, dtype=np.int64):
        out = self._ints.pop(0)
        assert out.shape == tuple(size), (out.shape, size)
        assert out.min() >= low and out.max() < high
        return out.astype(dtype)

    def random(self, size):
        assert self._scores.shape == tuple(size), (self._scores.shape, size)
        return self._scores


def _planted(tokens: np.ndarray) -> np.ndarray:
    """Boolean (m, n): which body positions carry a planted token."""
    return np.isin(tokens[:, 1:-2], (PZERO, PONE))


def _xor_of_planted(tokens: np.ndarray) -> np.ndarray:
    body = tokens[:, 1:-2].astype(np.int64)
    return np.where(_planted(tokens), body - PZERO, 0).sum(axis=1) % 2


def test_vocab_ids():
    assert sp.VOCAB[:7] == ["<pad>", "<bos>", "<sep>", "0", "1", "0*", "1*"]
    assert (sp.PAD, sp.BOS, sp.SEP, sp.ZERO, sp.PLANTED_ZERO) == (0, BOS, SEP, ZERO, PZERO)
    assert sp.seq_len({}, 10) == 13
    assert tasks.get("sparse_parity") is sp


def test_literal_example():
    """n=4, bits 1 0 1 1, planted at 0 and 2: body "1* 0 1* 1", y = 1 xor 1 = 0."""
    rng = ScriptedRng(bits=[[1, 0, 1, 1]], scores=[[0.1, 0.9, 0.2, 0.8]], offset=[[0]])
    tokens = sp._block(4, 2, 1, {"locality": None}, rng)
    #                  BOS  1*     0     1*     1    SEP  y=0
    expected = np.array([[BOS, PONE, ZERO, PONE, ONE, SEP, ZERO]], dtype=np.int16)
    assert tokens.dtype == np.int16
    np.testing.assert_array_equal(tokens, expected)
    assert [sp.VOCAB[t] for t in tokens[0]] == ["<bos>", "1*", "0", "1*", "1", "<sep>", "0"]


def test_literal_example_odd_parity_and_planted_zero():
    """n=5, bits 0 1 1 0 1, planted at 1, 3, 4: body "0 1* 1 0* 1*", y = 1^0^1 = 0;
    a second row with planted 0, 1, 2 of bits 1 1 1 0 0: y = 1^1^1 = 1."""
    rng = ScriptedRng(
        bits=[[0, 1, 1, 0, 1], [1, 1, 1, 0, 0]],
        scores=[[0.9, 0.1, 0.8, 0.2, 0.3], [0.1, 0.2, 0.3, 0.8, 0.9]],
        offset=[[0], [0]],
    )
    tokens = sp._block(5, 3, 2, {"locality": None}, rng)
    expected = np.array(
        [
            [BOS, ZERO, PONE, ONE, PZERO, PONE, SEP, ZERO],
            [BOS, PONE, PONE, PONE, ZERO, ZERO, SEP, ONE],
        ],
        dtype=np.int16,
    )
    np.testing.assert_array_equal(tokens, expected)


def test_literal_example_locality_window():
    """n=6, locality 3, window offset 3: planted positions 3 and 5 (window slots 0 and 2)."""
    rng = ScriptedRng(bits=[[1, 1, 0, 1, 0, 1]], scores=[[0.1, 0.7, 0.2]], offset=[[3]])
    tokens = sp._block(6, 2, 1, {"locality": 3}, rng)
    # bits 1 1 0 1 0 1; planted at 3 (bit 1) and 5 (bit 1): y = 0
    expected = np.array([[BOS, ONE, ONE, ZERO, PONE, ZERO, PONE, SEP, ZERO]], dtype=np.int16)
    np.testing.assert_array_equal(tokens, expected)


@pytest.mark.parametrize("n,k", [(8, 1), (8, 3), (12, 5), (7, 7)])
def test_block_format(n, k):
    m = 200
    tokens = sp._block(n, k, m, {"locality": None}, np.random.default_rng(7))
    assert tokens.shape == (m, n + 3)
    assert (tokens[:, 0] == BOS).all()
    assert (tokens[:, -2] == SEP).all()
    body = tokens[:, 1:-2]
    assert np.isin(body, (ZERO, ONE, PZERO, PONE)).all()
    assert (_planted(tokens).sum(axis=1) == k).all()
    assert np.isin(tokens[:, -1], (ZERO, ONE)).all()
    np.testing.assert_array_equal(tokens[:, -1] - ZERO, _xor_of_planted(tokens))
    # no stray special tokens anywhere else
    assert not np.isin(tokens[:, 1:-2], (0, BOS, SEP)).any()


def test_block_answers_are_balanced_and_positions_vary():
    tokens = sp._block(10, 2, 400, {"locality": None}, np.random.default_rng(3))
    y = tokens[:, -1] - ZERO
    assert 0.35 < y.mean() < 0.65
    # every position gets planted sometimes
    assert _planted(tokens).any(axis=0).all()


@pytest.mark.parametrize("locality", [1, 3, 5])
def test_locality_window_respected(locality):
    n, k, m = 20, min(3, locality), 300
    tokens = sp._block(n, k, m, {"locality": locality}, np.random.default_rng(11))
    planted = _planted(tokens)
    assert (planted.sum(axis=1) == k).all()
    idx = [np.flatnonzero(row) for row in planted]
    spans = np.array([p.max() - p.min() for p in idx])
    assert (spans < locality).all()  # all within `locality` consecutive positions
    starts = np.array([p.min() for p in idx])
    assert starts.max() > n // 2  # the window moves along the sequence
    np.testing.assert_array_equal(tokens[:, -1] - ZERO, _xor_of_planted(tokens))


def _params(**kw):
    return {"k": 2, "k_mode": "fixed", "n_min": 6, "n_max": 10, "locality": None, **kw}


def _check_columns(cols):
    tokens = cols["tokens"]
    assert len(tokens) == len(cols["positions"]) == len(cols["answer_start"]) == len(cols["length"]) == len(cols["k"])
    for t, p, a, n, k in zip(tokens, cols["positions"], cols["answer_start"], cols["length"], cols["k"], strict=True):
        assert len(t) == n + 3
        np.testing.assert_array_equal(p, np.arange(len(t)))
        assert a == n + 2
        assert t[0] == BOS and t[a - 1] == SEP and t[a] in (ZERO, ONE)
        assert np.isin(t[1:-2], (PZERO, PONE)).sum() == k
        assert t[a] - ZERO == _xor_of_planted(t[None])[0]


def test_generate_test_columns():
    eval_cfg = {"lengths": [6, 9, 15], "examples": 5, "k": None}
    cols = sp.generate_test(_params(), eval_cfg, seed=99)
    assert sorted(set(zip(cols["length"].tolist(), cols["k"].tolist(), strict=True))) == [(6, 2), (9, 2), (15, 2)]
    assert len(cols["tokens"]) == 15
    assert cols["answer_start"].dtype == cols["length"].dtype == cols["k"].dtype == np.int32
    _check_columns(cols)


def test_generate_test_block_independent_of_other_lengths():
    """Each (n, k) has its own seed: adding a length changes no other block."""
    a = sp.generate_test(_params(), {"lengths": [8], "examples": 4, "k": None}, seed=5)
    b = sp.generate_test(_params(), {"lengths": [6, 8], "examples": 4, "k": None}, seed=5)
    rows_b = [t for t, n in zip(b["tokens"], b["length"], strict=True) if n == 8]
    np.testing.assert_array_equal(np.stack(a["tokens"]), np.stack(rows_b))


def test_generate_train_columns_and_lengths():
    cols = sp.generate_train(_params(), 120, np.random.default_rng(0))
    assert len(cols["tokens"]) == 120
    assert set(cols["length"].tolist()) <= set(range(6, 11))
    assert len(set(cols["length"].tolist())) > 1
    assert set(cols["k"].tolist()) == {2}
    _check_columns(cols)


def test_mixture_mode_draws_every_k():
    params = _params(k=4, k_mode="mixture")
    assert sp.train_ks(params) == [1, 2, 3, 4]
    cols = sp.generate_train(params, 200, np.random.default_rng(1))
    assert set(cols["k"].tolist()) == {1, 2, 3, 4}
    _check_columns(cols)
    test = sp.generate_test(params, {"lengths": [8], "examples": 3, "k": None}, seed=2)
    assert sorted(set(test["k"].tolist())) == [1, 2, 3, 4]
    _check_columns(test)


def test_eval_k_override():
    assert sp.eval_k(_params(k=3), {"lengths": [10], "k": [1, 5]}) == [1, 5]
    assert sp.eval_k(_params(k=3), {"lengths": [10], "k": None}) == [3]


def test_check_rejects_impossible_settings():
    sp.check(_params(k=6), {"lengths": [10], "k": None}, "config.tasks[0]")  # k == n_min fits
    with pytest.raises(UserError, match=r"config\.tasks\[0\]\.params\.k"):
        sp.check(_params(k=7), {"lengths": [10], "k": None}, "config.tasks[0]")
    with pytest.raises(UserError, match=r"config\.tasks\[0\]\.params\.n_min"):
        sp.check(_params(n_min=12, n_max=10), {"lengths": [10], "k": None}, "config.tasks[0]")
    with pytest.raises(UserError, match=r"config\.tasks\[0\]\.params\.k"):
        sp.check(_params(k=3, locality=2), {"lengths": [10], "k": None}, "config.tasks[0]")
    with pytest.raises(UserError, match=r"config\.tasks\[0\]\.params\.locality"):
        sp.check(_params(k=1, locality=8), {"lengths": [7], "k": None}, "config.tasks[0]")


def test_registry_unknown_kind():
    with pytest.raises(UserError, match=r"tasks\[3\]\.kind: unknown task kind 'parity'"):
        tasks.get("parity", where="tasks[3].kind")


CONTRACT = ("vocab", "seq_len", "gap_after", "check", "eval_k", "generate_train", "generate_test", "dependencies")


@pytest.mark.parametrize("kind", sorted(tasks.REGISTRY))
def test_every_registered_kind_has_the_contract_and_a_params_schema(kind, schema):
    module = tasks.get(kind)
    assert all(callable(getattr(module, name, None)) for name in CONTRACT)
    assert module.GROUP[0] == "length" and isinstance(module.COUPLED, bool)
    assert f"{kind}_params" in schema["$defs"]  # config.validate looks the parameters' schema up by kind
    assert kind in schema["$defs"]["task"]["properties"]["kind"]["description"]
