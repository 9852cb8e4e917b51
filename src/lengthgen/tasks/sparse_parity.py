"""E1: k-sparse planted parity (our protocol; see docs/protocol.md).

Example of length n: ``BOS x_1 ... x_n SEP y``. k distinct planted positions carry the
tokens ``0*``/``1*``; every other position is a background bit ``0``/``1``; y is the XOR of
the planted bits. Only y is predicted, so each prediction depends on exactly k tokens.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from lengthgen.support.errors import UserError
from lengthgen.tasks._common import draw_test, draw_train, eval_k, train_ks

VOCAB = ["<pad>", "<bos>", "<sep>", "0", "1", "0*", "1*"]
PAD, BOS, SEP, ZERO, PLANTED_ZERO = 0, 1, 2, 3, 5
GROUP = ["length", "k"]  # the axes of a test set: one block of examples per (n, k)
COUPLED = False  # positions are plain indices: nothing to couple


def vocab(params) -> list[str]:
    return VOCAB


def seq_len(params, n: int) -> int:
    """Tokens in an example of length n: BOS, n bits, SEP, y."""
    return n + 3


def gap_after(coupled: bool) -> tuple[frozenset[int], bool]:
    """Prompt tokens after which a training-time position gap may open (any bit); the answer
    depends on no distance, so a gap unscores nothing."""
    return frozenset(range(ZERO, len(VOCAB))), False


def check(params, eval_cfg, where: str) -> None:
    if params["n_min"] > params["n_max"]:
        raise UserError(f"{where}.params.n_min: {params['n_min']} is larger than n_max {params['n_max']}")
    span = params["locality"] or params["n_min"]
    for k in set(train_ks(params)) | set(eval_k(params, eval_cfg)):
        if k > span:
            raise UserError(
                f"{where}.params.k: k={k} planted tokens do not fit in "
                f"{'locality window' if params['locality'] else 'length n_min'}={span}"
            )
    if params["locality"] and params["locality"] > min(params["n_min"], *eval_cfg["lengths"]):
        raise UserError(f"{where}.params.locality: window {params['locality']} is longer than the shortest sequence")
    shortest, k_max = min(eval_cfg["lengths"]), max(eval_k(params, eval_cfg))
    if k_max > shortest:
        raise UserError(f"{where}.eval.lengths: test length {shortest} cannot hold k={k_max} planted tokens")


def _block(n: int, k: int, m: int, params, rng: np.random.Generator):
    """m examples of length n with k planted bits, as tokens (m, n+3) ending in the answer."""
    bits = rng.integers(0, 2, size=(m, n), dtype=np.int64)
    width = params["locality"] or n
    # k distinct positions inside a window of `width`: the first k of a random permutation.
    planted = np.argsort(rng.random((m, width)), axis=1)[:, :k]
    planted += rng.integers(0, n - width + 1, size=(m, 1))
    is_planted = np.zeros((m, n), dtype=bool)
    np.put_along_axis(is_planted, planted, True, axis=1)
    y = (bits * is_planted).sum(axis=1) % 2
    body = np.where(is_planted, PLANTED_ZERO, ZERO) + bits
    tokens = np.empty((m, n + 3), dtype=np.int16)
    tokens[:, 0], tokens[:, 1:-2], tokens[:, -2], tokens[:, -1] = BOS, body, SEP, ZERO + y
    return tokens


generate_train = partial(draw_train, _block)  # (params, n_examples, rng)
generate_test = partial(draw_test, _block)  # (params, eval_cfg, seed)


def dependencies(tokens: np.ndarray, positions: np.ndarray, answer_start: int) -> list[tuple[int, list[int]]]:
    """The one target y (read at SEP) depends on the k planted tokens and nothing else."""
    planted = np.flatnonzero(np.asarray(tokens[:answer_start]) >= PLANTED_ZERO)
    return [(int(answer_start), planted.tolist())]
