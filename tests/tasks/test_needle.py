"""Needle in a haystack: the format of an example, its answers recomputed from the tokens,
uniform needle placement, dependency sets, config errors, and a dataset written through the
CLI the generate_dataset rule runs."""

from __future__ import annotations

import json
import math
import re
from math import comb

import numpy as np
import pytest
from conftest import REPO, run_lengthgen, write_dataset

from lengthgen import config as lgconfig
from lengthgen import datasets, tasks
from lengthgen.support.errors import UserError
from lengthgen.tasks import needle as nd
from lengthgen.tasks._common import train_ks

BOS, SEP, QUERY, DIGIT = 1, 2, 3, 4
SCHEMA = lgconfig.load_yaml(REPO / "workflow/schemas/config.schema.yaml")


def _params(**kw):
    """needle_params with the schema's defaults filled, then `kw`."""
    params = {"k": 2, **kw}
    lgconfig.fill_defaults(params, SCHEMA["$defs"]["needle_params"], SCHEMA)
    return params


def _parse(tokens, params):
    """An example read back from its tokens alone, independently of the generator: the
    haystack, the query keys and the answer; asserts the format on the way."""
    t = np.asarray(tokens, dtype=np.int64)
    key0, fill0 = DIGIT + params["base"], DIGIT + params["base"] + params["keys"]
    q = int(np.flatnonzero(t == QUERY)[0])
    assert (t == QUERY).sum() == 1 and t[0] == BOS and t[-2] == SEP and (t == SEP).sum() == 1
    hay, query, y = t[1:q], t[q + 1 : -2], int(t[-1])
    assert ((key0 <= query) & (query < fill0)).all() and len(set(query.tolist())) == len(query)
    assert ((DIGIT <= hay) & (hay < fill0 + params["filler"])).all()
    is_key = (key0 <= hay) & (hay < fill0)
    is_digit = hay < key0
    # every key is followed by a digit and every digit follows a key: needles never overlap
    assert not is_key[-1] and (is_digit[1:] == is_key[:-1]).all() and not is_digit[0]
    keys = hay[is_key]
    assert len(set(keys.tolist())) == len(keys)
    value_of = dict(zip(keys.tolist(), (hay[1:][is_key[:-1]] - DIGIT).tolist(), strict=True))
    assert set(query.tolist()) <= set(value_of)
    assert DIGIT <= y < DIGIT + params["base"]
    return hay, query, value_of, y - DIGIT


def _expected_answer(tokens, params) -> int:
    _, query, value_of, _ = _parse(tokens, params)
    return sum(value_of[int(key)] for key in query) % params["base"]


# -- the format --------------------------------------------------------------------------


def test_vocab_and_lengths():
    params = _params(base=3, keys=2, filler=2)
    assert nd.vocab(params) == ["<pad>", "<bos>", "<sep>", "<query>", "0", "1", "2", "key0", "key1", "f0", "f1"]
    assert (nd.PAD, nd.BOS, nd.SEP, nd.QUERY, nd.DIGIT) == (0, BOS, SEP, QUERY, DIGIT)
    assert nd.seq_len(_params(k=3), 10) == 10 + 3 + 4
    assert tasks.get("needle") is nd
    assert nd.GROUP == ["length", "k"] and nd.COUPLED is False
    for p in (_params(), _params(k=3, k_mode="mixture", distractors=2, base=5, keys=9, filler=3)):
        nd.check(p, {"lengths": [10, 13], "k": None}, "config.tasks[0]")
        cols = nd.generate_test(p, {"lengths": [10, 13], "examples": 6, "k": None}, seed=3)
        for n in (10, 13):  # seq_len is the longest example of length n: the one at the largest k
            longest = max(len(t) for t, m in zip(cols["tokens"], cols["length"], strict=True) if m == n)
            assert longest == nd.seq_len(p, n)


class ScriptedRng:
    """Stands in for np.random.Generator, returning the given arrays in call order. `_block`
    draws: filler (integers), slot scores, key scores (random), values (integers), query
    order scores (random)."""

    def __init__(self, *draws):
        self._draws = [np.asarray(d) for d in draws]

    def _next(self, size):
        out = self._draws.pop(0)
        assert out.shape == tuple(size), (out.shape, size)
        return out

    def integers(self, low, high, size=None, dtype=np.int64):
        out = self._next(size)
        assert out.min() >= low and out.max() < high
        return out.astype(dtype)

    def random(self, size):
        return self._next(size).astype(np.float64)


def test_literal_example():
    """n=7, k=2, one distractor, base 4, keys 3, filler 2: 3 needles among 7 - 3 = 4 items.
    Slot scores pick items 2, 0, 3 (in that order); needle i sits at item + needles before it:
    item 2 -> 3, item 0 -> 0, item 3 -> 5. Keys (scores) 1, 2, 0; values 3, 2, 1. Needles 0
    and 1 (key1 = 3, key2 = 2) are queried in the order key2, key1; y = (3 + 2) % 4 = 1."""
    params = _params(k=2, base=4, keys=3, filler=2, distractors=1, n_min=7, n_max=7)
    rng = ScriptedRng(
        [[0, 1, 1, 0, 1, 0, 0]],  # filler
        [[0.2, 0.9, 0.1, 0.3]],  # slot scores: argsort = 2, 0, 3, 1
        [[0.3, 0.1, 0.2]],  # key scores: argsort = 1, 2, 0
        [[3, 2, 1]],  # values
        [[0.8, 0.4]],  # query order: argsort = 1, 0
    )
    tokens = nd._block(7, 2, 1, params, rng)
    v = nd.vocab(params)
    assert [v[t] for t in tokens[0]] == [
        "<bos>", "key2", "2", "f1", "key1", "3", "key0", "1",
        "<query>", "key2", "key1", "<sep>", "1",
    ]  # fmt: skip
    assert tokens.dtype == np.int16
    assert nd.dependencies(tokens[0], np.arange(13), 12) == [(12, [2, 5])]


# -- answers -----------------------------------------------------------------------------

CASES = {
    "k1": _params(k=1),
    "k3_distractors": _params(k=3, distractors=2, n_min=10, n_max=14),
    "mixture_base10": _params(k=4, k_mode="mixture", base=10, keys=16, filler=8, distractors=1),
}


@pytest.mark.parametrize("params", CASES.values(), ids=CASES.keys())
def test_answers_recomputed_from_the_tokens(params):
    eval_cfg = {"lengths": [params["n_max"], 2 * params["n_max"], 40], "examples": 50, "k": None}
    train = nd.generate_train(params, 600, np.random.default_rng(0))
    test = nd.generate_test(params, eval_cfg, seed=1)
    t_extra = params["distractors"]
    for cols in (train, test):
        assert cols["answer_start"].dtype == cols["length"].dtype == cols["k"].dtype == np.int32
        for t, pos, a, n, k in zip(
            cols["tokens"], cols["positions"], cols["answer_start"], cols["length"], cols["k"], strict=True
        ):
            assert len(t) == n + k + 4 and a == len(t) - 1
            np.testing.assert_array_equal(pos, np.arange(len(t)))
            hay, query, value_of, y = _parse(t, params)
            assert len(hay) == n and len(query) == k and len(value_of) == k + t_extra
            assert y == _expected_answer(t, params)
    assert set(train["k"].tolist()) == set(train_ks(params))
    assert set(train["length"].tolist()) == set(range(params["n_min"], params["n_max"] + 1))


def test_answers_are_balanced():
    params = _params(k=2, base=5)
    cols = nd.generate_test(params, {"lengths": [12], "examples": 2000, "k": None}, seed=0)
    counts = np.bincount(np.array([t[-1] for t in cols["tokens"]]) - DIGIT, minlength=5)
    assert counts.min() > 0.8 * 2000 / 5


def test_test_blocks_are_seeded_per_length_and_k():
    params = _params(k=3, k_mode="mixture")
    a = nd.generate_test(params, {"lengths": [12], "examples": 5, "k": None}, seed=5)
    b = nd.generate_test(params, {"lengths": [8, 12], "examples": 5, "k": [1, 2, 3]}, seed=5)
    rows_b = [t for t, n in zip(b["tokens"], b["length"], strict=True) if n == 12]
    assert [t.tolist() for t in a["tokens"]] == [t.tolist() for t in rows_b]


# -- uniform placement -------------------------------------------------------------------


def _start_counts(tokens, params, n) -> np.ndarray:
    """How often a needle starts at each haystack index 0..n-2, over all needles."""
    key0, fill0 = DIGIT + params["base"], DIGIT + params["base"] + params["keys"]
    hay = np.asarray(tokens)[:, 1:n]  # a needle's key is never the last haystack token
    return ((key0 <= hay) & (hay < fill0)).sum(axis=0)


def _start_share(n: int, t: int) -> np.ndarray:
    """Exact share of needle starts at each index when every non-overlapping placement of t
    needles is equally likely: the others fill the L cells left and the R cells right of it,
    and j needles fit into L cells in comb(L - j, j) ways."""
    def fits(cells, j):
        return comb(cells - j, j) if cells >= j else 0

    ways = [sum(fits(s, j) * fits(n - s - 2, t - 1 - j) for j in range(t)) for s in range(n - 1)]
    return np.array(ways, dtype=float) / (t * comb(n - t, t))


def _chi2_critical(df: int, z: float = 3.09) -> float:
    """Upper 0.001 quantile of chi-square (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _placement_is_uniform(tokens, params, n, t) -> bool:
    counts = _start_counts(tokens, params, n)
    share = _start_share(n, t)
    assert math.isclose(share.sum(), 1.0)
    expected = counts.sum() * share
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    return chi2 < _chi2_critical(len(counts) - 1)


@pytest.mark.parametrize("k,distractors", [(1, 0), (2, 2)])
def test_needles_are_placed_uniformly(k, distractors):
    params, n = _params(k=k, distractors=distractors), 24
    tokens = nd._block(n, k, 4000, params, np.random.default_rng(11))
    assert _placement_is_uniform(tokens, params, n, k + distractors)
    # the queried needles too, not only all needles together: their values by haystack decile
    deps = [nd.dependencies(t, None, len(t) - 1)[0][1] for t in tokens[:2000]]
    deciles = np.bincount((np.concatenate(deps) - 2) * 10 // (n - 1), minlength=10)
    assert deciles.min() > 0.7 * deciles.mean()


class _EarlyRng:
    """A generator biased toward early slots: what the uniformity check must reject."""

    def __init__(self, rng, slots: int):
        self._rng, self._slots = rng, slots

    def integers(self, *args, **kwargs):
        return self._rng.integers(*args, **kwargs)

    def random(self, size):
        out = self._rng.random(size)
        return out * np.linspace(0.5, 1.5, size[1]) if size[1] == self._slots else out


@pytest.mark.parametrize("k,distractors", [(1, 0), (2, 2)])
def test_uniformity_check_rejects_biased_placement(k, distractors):
    params, n = _params(k=k, distractors=distractors), 24
    biased = nd._block(n, k, 4000, params, _EarlyRng(np.random.default_rng(11), n - k - distractors))
    assert all(_expected_answer(t, params) == t[-1] - DIGIT for t in biased[:500])  # well-formed, placed unevenly
    assert not _placement_is_uniform(biased, params, n, k + distractors)


# -- dependency sets ---------------------------------------------------------------------


def _perturb_outside(tokens, deps, params, rng):
    """A copy with one token outside `deps` changed to another of its kind, keeping the example
    well-formed: a filler to another filler, a distractor's value to another digit, or a key
    relabelled to an unused key in the haystack and the query together."""
    t = np.array(tokens, dtype=np.int64)
    q = int(np.flatnonzero(t == QUERY)[0])
    key0, fill0 = DIGIT + params["base"], DIGIT + params["base"] + params["keys"]
    hay = np.arange(1, q)
    choices = [j for j in hay if j not in deps]
    j = int(rng.choice(choices))
    if t[j] >= fill0 and params["filler"] > 1:
        t[j] = fill0 + (t[j] - fill0 + rng.integers(1, params["filler"])) % params["filler"]
    elif t[j] < key0:  # a distractor's value
        t[j] = DIGIT + (t[j] - DIGIT + rng.integers(1, params["base"])) % params["base"]
    elif key0 <= t[j] < fill0:
        unused = sorted(set(range(key0, fill0)) - set(t[hay].tolist()))
        if unused:
            t[t == t[j]] = rng.choice(unused)
    return t


@pytest.mark.parametrize("params", CASES.values(), ids=CASES.keys())
def test_dependencies_are_the_queried_values(params):
    cols = nd.generate_test(params, {"lengths": [params["n_max"], 30], "examples": 40, "k": None}, seed=2)
    rng = np.random.default_rng(0)
    changed = 0
    for t, pos, a, k in zip(cols["tokens"], cols["positions"], cols["answer_start"], cols["k"], strict=True):
        ((target, deps),) = nd.dependencies(t, pos, a)
        assert target == a == len(t) - 1
        _, query, value_of, y = _parse(t, params)
        # exactly the value tokens of the queried keys: each right after its key in the haystack
        assert len(deps) == k and deps == sorted(deps)
        assert sorted(int(t[d - 1]) for d in deps) == sorted(query.tolist())
        assert all(DIGIT <= t[d] < DIGIT + params["base"] for d in deps)
        for _ in range(3):  # a change outside the dependencies keeps the answer
            other = _perturb_outside(t, set(deps), params, rng)
            changed += not np.array_equal(other, t)
            assert _expected_answer(other, params) == y
            assert nd.dependencies(other, pos, a) == [(target, deps)]
        for d in deps:  # and any change of a queried value changes it
            other = np.array(t, dtype=np.int64)
            other[d] = DIGIT + (other[d] - DIGIT + rng.integers(1, params["base"])) % params["base"]
            assert _expected_answer(other, params) != y
    assert changed > 100  # the perturbations were not all no-ops


# -- config errors -----------------------------------------------------------------------

WHERE = "config.tasks[0]"


@pytest.mark.parametrize(
    "params,eval_cfg,key",
    [
        ({"n_min": 12, "n_max": 10}, {}, "params.n_min"),
        ({"k": 6, "n_min": 11}, {}, "params.k"),  # 6 needles of 2 tokens need 12
        ({"k": 2, "distractors": 4, "n_min": 11}, {}, "params.distractors"),
        ({"k": 9, "keys": 8, "n_min": 20, "n_max": 30}, {"lengths": [30]}, "params.k"),
        ({"k": 3, "distractors": 6, "keys": 8, "n_min": 20, "n_max": 30}, {"lengths": [30]}, "params.distractors"),
        ({"k": 2}, {"lengths": [3, 20]}, "eval.lengths"),
        ({"k": 2}, {"k": [1, 3]}, "eval.k"),
        ({"base": 1}, {}, "params.base"),
        ({"keys": 300}, {}, "params.keys"),
        ({"filler": 0}, {}, "params.filler"),
    ],
)
def test_check_names_the_key(params, eval_cfg, key):
    eval_cfg = {"lengths": [20, 40], "examples": 10, "k": None, **eval_cfg}
    with pytest.raises(UserError, match="^" + re.escape(f"{WHERE}.{key}: ")):
        nd.check(_params(**params), eval_cfg, WHERE)


def test_check_accepts_what_fits():
    nd.check(_params(k=3, distractors=2, n_min=10, keys=5), {"lengths": [10, 40], "k": [1, 3]}, WHERE)
    nd.check(_params(k=1, n_min=2, n_max=2, keys=1, filler=1), {"lengths": [2], "k": None}, WHERE)
    cols = nd.generate_test(_params(k=1, n_min=2, n_max=2, keys=1, filler=1), {"lengths": [2], "examples": 3}, 0)
    assert {tuple(t[1:3]) for t in cols["tokens"]} <= {(DIGIT + 4, DIGIT + v) for v in range(4)}  # a needle only


def _config(task: dict) -> dict:
    return {"tasks": [{"name": "needle_k2", "kind": "needle", "schemes": ["nope"], **task}]}


def test_config_validation_fills_defaults_and_runs_check():
    cfg = lgconfig.validate(_config({"params": {"k": 2}, "eval": {"lengths": [20, 40]}}), SCHEMA)
    assert cfg["tasks"][0]["params"] == {
        "k": 2, "k_mode": "fixed", "n_min": 10, "n_max": 20, "base": 4, "keys": 8, "filler": 4, "distractors": 0,
    }  # fmt: skip
    with pytest.raises(UserError, match=r"config\.tasks\[0\]\.params\.distractors"):
        lgconfig.validate(_config({"params": {"k": 2, "distractors": 4}, "eval": {"lengths": [20]}}), SCHEMA)
    with pytest.raises(UserError, match=r"config\.tasks\[0\]\.params\.keys"):
        lgconfig.validate(_config({"params": {"k": 2, "keys": 999}, "eval": {"lengths": [20]}}), SCHEMA)
    with pytest.raises(UserError, match=r"config\.tasks\[0\]\.params"):
        lgconfig.validate(_config({"params": {"k": 2, "needles": 3}, "eval": {"lengths": [20]}}), SCHEMA)


# -- datasets ----------------------------------------------------------------------------


def _task(name="needle", *, train_examples=150, lengths=(6, 8), examples=20, **params) -> dict:
    return {
        "name": name,
        "kind": "needle",
        "params": _params(**params),
        "train_examples": train_examples,
        "eval": {"lengths": list(lengths), "examples": examples, "k": None},
    }


def test_test_split_disjoint_from_train(tmp_path):
    """Short lengths inside the training range and tiny alphabets, where a test draw often
    repeats a training example: datasets.generate drops those."""
    task = _task(k=1, n_min=4, n_max=6, base=2, keys=2, filler=2, train_examples=150, lengths=(6, 8), examples=20)
    paths = write_dataset(tmp_path, task, data_seed=3, eval_seed=4)
    train = {tuple(t) for t in datasets.read(paths["train"])[0].column("tokens").to_pylist()}
    test = [tuple(t) for t in datasets.read(paths["test"])[0].column("tokens").to_pylist()]
    assert len(test) == 40 and not train & set(test)
    drawn = nd.generate_test(task["params"], {**task["eval"], "examples": int(20 * datasets.OVERSAMPLE) + 8}, 4)
    assert train & {tuple(t.tolist()) for t in drawn["tokens"]}  # the raw draw did repeat some


def test_cli_writes_a_dataset_the_reader_accepts(tmp_path):
    """The generate_dataset rule's command on a validated config's data slices, read back."""
    cfg = lgconfig.validate(
        {**_config({"params": {"k": 3, "k_mode": "mixture", "distractors": 1}, "train_examples": 300,
                    "eval": {"lengths": [10, 20, 40], "examples": 12}}),
         "seeds": [0]},
        SCHEMA,
    )
    paths = {}
    for split in ("train", "test-seed0"):
        out = tmp_path / f"{split}.parquet"
        train = ["--train", paths["train"]] if split != "train" else []
        task = json.dumps(lgconfig.data_slice(cfg, "needle_k2", split))
        proc = run_lengthgen("generate", "--task", task, *train, "--out", out, cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stderr
        paths[split] = out
    params = cfg["tasks"][0]["params"]
    for split, path in paths.items():
        table, meta = datasets.read(path)
        assert meta["kind"] == "needle" and meta["vocab"] == nd.vocab(params) and meta["params"] == params
        assert meta["split"] == ("train" if split == "train" else "test")
        assert [f.name for f in table.schema] == ["tokens", "positions", "answer_start", "length", "k"]
        arrays = datasets.padded(table)
        for t, n, a, k in zip(table.column("tokens").to_pylist(), arrays["length"], arrays["answer_start"],
                              arrays["k"], strict=True):
            assert len(t) == n + k + 4 == a + 1 <= nd.seq_len(params, n)
            assert t[a] - DIGIT == _expected_answer(t, params)
    test = datasets.read(paths["test-seed0"])[0]
    assert test.num_rows == 3 * 3 * 12  # every (length, k) block in full
    assert sorted(set(test.column("k").to_pylist())) == [1, 2, 3]
    assert max(map(len, test.column("tokens").to_pylist())) < cfg["tasks"][0]["model"]["max_position"]


def test_dataset_deterministic(tmp_path):
    task = _task(k=2, n_min=6, n_max=10, lengths=(10, 14), examples=8)
    a = write_dataset(tmp_path / "a", task)
    b = write_dataset(tmp_path / "b", task)
    for split in ("train", "test"):
        assert datasets.read(a[split])[0].equals(datasets.read(b[split])[0])


def test_gaps_may_open_after_any_haystack_token():
    gap, straddle = nd.gap_after(False)
    assert nd.gap_after(True) == (gap, straddle) and straddle is False
    params = _params(base=nd.MAX_BASE, keys=nd.MAX_KEYS, filler=nd.MAX_FILLER)
    assert set(range(nd.DIGIT, len(nd.vocab(params)))) == gap  # every digit, key and filler at the largest alphabets
    assert not gap & {nd.PAD, nd.BOS, nd.SEP, nd.QUERY}
