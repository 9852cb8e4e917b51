"""Needle in a haystack: k-sparse retrieval (beyond the paper's three experiments).

Example of length n: ``BOS h_1 ... h_n QUERY q_1 ... q_k SEP y``. The haystack h is n filler
tokens in which k + `distractors` needles sit at uniformly random, non-overlapping places; a
needle is two adjacent tokens, a key (distinct within an example) and its value, a digit
0..base-1. The query lists the k queried keys in random order (the distractors' keys are never
queried), and y is the sum of the queried values mod base: for k = 1, the value retrieved.

`dependencies` returns the k queried value tokens alone, because the answer is a function of
their content only (relabelling a key in both the haystack and the query changes nothing) while
the keys only tell the model where to look, so the dependency set has sparse parity's size k.

Without distractors every needle is queried and y is the sum of all the haystack's digits, so
the query can be ignored; `distractors` > 0 makes the key match necessary.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from lengthgen.support.errors import UserError
from lengthgen.tasks._common import draw_test, draw_train, eval_k

PAD, BOS, SEP, QUERY, DIGIT = 0, 1, 2, 3, 4  # digits 0..base-1, then the keys, then the filler
GROUP = ["length", "k"]  # the axes of a test set: one block of examples per (n, k)
COUPLED = False  # positions are plain indices: nothing to couple
MAX_BASE, MAX_KEYS, MAX_FILLER = 64, 256, 256  # alphabet sizes the schema allows (bounds gap_after's set)
_SIZES = {"base": (2, MAX_BASE), "keys": (1, MAX_KEYS), "filler": (1, MAX_FILLER)}


def key_id(params) -> int:
    """Token id of the first key."""
    return DIGIT + params["base"]


def filler_id(params) -> int:
    """Token id of the first filler token."""
    return DIGIT + params["base"] + params["keys"]


def vocab(params) -> list[str]:
    return [
        "<pad>", "<bos>", "<sep>", "<query>",
        *(str(d) for d in range(params["base"])),
        *(f"key{j}" for j in range(params["keys"])),
        *(f"f{j}" for j in range(params["filler"])),
    ]


def seq_len(params, n: int) -> int:
    """Tokens in an example of length n at the largest k (`check` keeps eval.k within it):
    BOS, n haystack tokens, QUERY, k keys, SEP, y."""
    return n + params["k"] + 4


def gap_after(coupled: bool) -> tuple[frozenset[int], bool]:
    """Prompt tokens after which a training-time position gap may open: any haystack token
    (and so the queried keys, which share the keys' ids). Gaps keep the token order, and the
    answer is defined by order and content alone (a value is the token after its key), so it
    depends on no distance and a gap unscores nothing. The contract gives no params, so the
    set is every id an alphabet within its maximum can take."""
    return frozenset(range(DIGIT, DIGIT + MAX_BASE + MAX_KEYS + MAX_FILLER)), False


def check(params, eval_cfg, where: str) -> None:
    p = params
    for name, (low, high) in _SIZES.items():
        if not low <= p[name] <= high:
            raise UserError(f"{where}.params.{name}: {p[name]} is outside [{low}, {high}]")
    if p["n_min"] > p["n_max"]:
        raise UserError(f"{where}.params.n_min: {p['n_min']} is larger than n_max {p['n_max']}")
    above = [k for k in eval_k(p, eval_cfg) if k > p["k"]]
    if above:
        raise UserError(
            f"{where}.eval.k: k={max(above)} is above params.k={p['k']}; its query would make examples "
            f"longer than the task's longest (seq_len)"
        )
    k_max, d = p["k"], p["distractors"]
    if k_max > p["keys"]:
        raise UserError(f"{where}.params.k: k={k_max} needles need distinct keys, but keys={p['keys']}")
    if k_max + d > p["keys"]:
        raise UserError(
            f"{where}.params.distractors: k={k_max} + distractors={d} needles need distinct keys, but keys={p['keys']}"
        )
    needs = 2 * (k_max + d)
    if needs > p["n_min"]:
        name = "k" if 2 * k_max > p["n_min"] else "distractors"
        raise UserError(
            f"{where}.params.{name}: k={k_max} + distractors={d} needles (2 tokens each) do not fit in "
            f"length n_min={p['n_min']}"
        )
    shortest = min(eval_cfg["lengths"])
    if needs > shortest:
        raise UserError(
            f"{where}.eval.lengths: test length {shortest} cannot hold k={k_max} + distractors={d} needles "
            f"(2 tokens each)"
        )


def _block(n: int, k: int, m: int, params, rng: np.random.Generator):
    """m examples of length n with k queried needles, as tokens (m, n+k+4) ending in the answer."""
    base, t = params["base"], k + params["distractors"]
    haystack = filler_id(params) + rng.integers(0, params["filler"], size=(m, n), dtype=np.int64)
    # t needles among n - t items (t needles and n - 2t filler): choosing which items are
    # needles picks every non-overlapping placement with the same probability. A needle at
    # item s starts at s plus the needles before it (each one token longer than an item).
    slots = np.argsort(rng.random((m, n - t)), axis=1)[:, :t]  # distinct, in random order
    starts = slots + np.argsort(np.argsort(slots, axis=1), axis=1)
    keys = np.argsort(rng.random((m, params["keys"])), axis=1)[:, :t]  # distinct keys
    values = rng.integers(0, base, size=(m, t), dtype=np.int64)
    rows = np.arange(m)[:, None]
    haystack[rows, starts] = key_id(params) + keys
    haystack[rows, starts + 1] = DIGIT + values
    # needles 0..k-1 are queried: slots and keys are in random order, so they are random needles
    query = np.take_along_axis(keys[:, :k], np.argsort(rng.random((m, k)), axis=1), axis=1)
    tokens = np.empty((m, n + k + 4), dtype=np.int16)
    tokens[:, 0], tokens[:, 1 : n + 1], tokens[:, n + 1] = BOS, haystack, QUERY
    tokens[:, n + 2 : n + 2 + k] = key_id(params) + query
    tokens[:, -2], tokens[:, -1] = SEP, DIGIT + values[:, :k].sum(axis=1) % base
    return tokens


generate_train = partial(draw_train, _block)  # (params, n_examples, rng)
generate_test = partial(draw_test, _block)  # (params, eval_cfg, seed)


def dependencies(tokens: np.ndarray, positions: np.ndarray, answer_start: int) -> list[tuple[int, list[int]]]:
    """The one target y (read at SEP) depends on the value tokens of the queried keys: each
    follows its key's one occurrence in the haystack."""
    tokens = np.asarray(tokens)
    query = int(np.flatnonzero(tokens[:answer_start] == QUERY)[0])
    keys = tokens[query + 1 : answer_start - 1]
    found = np.flatnonzero(np.isin(tokens[1:query], keys)) + 1
    return [(int(answer_start), (found + 1).tolist())]
