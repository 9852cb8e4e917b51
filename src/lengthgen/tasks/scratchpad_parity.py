"""E2: parity with a scratchpad (claim 2).

Prompt ``BOS b_1 ... b_n =``, answer ``s_1 ... s_n EOS`` with s_i = b_1 xor ... xor b_i.
Each answer token depends on two tokens (s_{i-1} and b_i), but b_i sits about n positions
back: sparse, not local. Coupled position IDs (Cho et al. 2024) make it local:

    =  -> 0      b_i -> i      s_i -> i      EOS -> n + 1

so s_i shares its ID with b_i, and every answer token's input lies one ID ahead of it.
BOS is ours: with ``bos_position: end`` it takes ID n + 1, the ID after the last bit, so the
token that must answer EOS finds an end marker one ID ahead exactly as the others find their
next bit (with ``start`` it takes ID 0 and the end must be inferred from an absence).
"""

from __future__ import annotations

import numpy as np

from lengthgen.support.errors import UserError

VOCAB = ["<pad>", "<bos>", "=", "<eos>", "0", "1"]
PAD, BOS, EQ, EOS, ZERO = 0, 1, 2, 3, 4
GROUP = ["length"]
COUPLED = True  # the positions column holds coupled IDs, not indices


def vocab(params) -> list[str]:
    return VOCAB


def seq_len(params, n: int) -> int:
    """BOS, n bits, =, n answer bits, EOS."""
    return 2 * n + 3


def eval_k(params, eval_cfg) -> list[int]:
    return []


def gap_after(coupled: bool) -> tuple[frozenset[int], bool]:
    """Prompt tokens after which a training-time position gap may open (any bit), and whether
    a gap between a target's coupled ID and its query's unscores that target: a gap after b_i
    separates s_i from b_{i+1}, so s_{i+1} is not scored there, while every other pair is
    trained at the longer distances a gap creates."""
    return frozenset({ZERO, ZERO + 1}), coupled


def check(params, eval_cfg, where: str) -> None:
    if params["n_min"] > params["n_max"]:
        raise UserError(f"{where}.params.n_min: {params['n_min']} is larger than n_max {params['n_max']}")


def example(bits: np.ndarray, bos_position: str) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and coupled IDs of one example with the given prompt bits."""
    n = len(bits)
    scratch = np.cumsum(bits) % 2
    tokens = np.concatenate([[BOS], ZERO + bits, [EQ], ZERO + scratch, [EOS]])
    ids = np.arange(1, n + 1)
    bos_id = n + 1 if bos_position == "end" else 0
    positions = np.concatenate([[bos_id], ids, [0], ids, [n + 1]])
    return tokens.astype(np.int16), positions.astype(np.int32)


def _columns(bit_rows: list[np.ndarray], params) -> dict:
    pairs = [example(b, params["bos_position"]) for b in bit_rows]
    n = np.array([len(b) for b in bit_rows], dtype=np.int32)
    return {
        "tokens": [t for t, _ in pairs],
        "positions": [p for _, p in pairs],
        "answer_start": n + 2,
        "length": n,
    }


def generate_train(params, n_examples: int, rng: np.random.Generator):
    lengths = rng.integers(params["n_min"], params["n_max"] + 1, size=n_examples)
    return _columns([rng.integers(0, 2, size=int(n)) for n in lengths], params)


def generate_test(params, eval_cfg, seed: int):
    """A fixed set per length, each seeded by (seed, n) so adding a length changes no other."""
    rows = []
    for n in eval_cfg["lengths"]:
        rng = np.random.default_rng([seed, n])
        rows.extend(rng.integers(0, 2, size=(eval_cfg["examples"], n)))
    return _columns(rows, params)


def dependencies(tokens: np.ndarray, positions: np.ndarray, answer_start: int) -> list[tuple[int, list[int]]]:
    """s_i = b_i xor s_{i-1}: answer bit i depends on prompt bit i (index i) and on the answer
    bit before it (s_1 copies b_1). EOS depends on the count of bits, no token: not scored."""
    a = int(answer_start)
    return [(a + i - 1, [i] + ([a + i - 2] if i > 1 else [])) for i in range(1, a - 1)]
