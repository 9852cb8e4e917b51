"""What the tasks with one answer token and a k axis share (sparse parity, needle): the k values
trained and evaluated, and a dataset drawn in blocks of examples per (n, k).

A task supplies `block(n, k, m, params, rng)`: m examples of length n with k as tokens
(m, width), each ending in its answer token. The leading underscore keeps this module out of the
task registry; each task imports it, so it is in every such task's code digest.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Block = Callable[[int, int, int, dict, np.random.Generator], np.ndarray]


def train_ks(params) -> list[int]:
    """k values seen in training: exactly k (fixed) or 1..k (mixture)."""
    k = params["k"]
    return [k] if params["k_mode"] == "fixed" else list(range(1, k + 1))


def eval_k(params, eval_cfg) -> list[int]:
    return list(eval_cfg.get("k") or train_ks(params))


def columns(blocks: list[tuple[int, int, np.ndarray]]) -> dict:
    """Flatten [(n, k, tokens(m, width))] into dataset columns; the answer is the last token."""
    tokens, ns, ks, starts = [], [], [], []
    for n, k, block in blocks:
        tokens.extend(block)
        ns.append(np.full(len(block), n, dtype=np.int32))
        ks.append(np.full(len(block), k, dtype=np.int32))
        starts.append(np.full(len(block), block.shape[1] - 1, dtype=np.int32))
    return {
        "tokens": tokens,
        "positions": [np.arange(len(t), dtype=np.int32) for t in tokens],
        "answer_start": np.concatenate(starts),
        "length": np.concatenate(ns),
        "k": np.concatenate(ks),
    }


def draw_train(block: Block, params, n_examples: int, rng: np.random.Generator) -> dict:
    lengths = rng.integers(params["n_min"], params["n_max"] + 1, size=n_examples)
    ks = rng.choice(train_ks(params), size=n_examples)
    blocks = []
    for n in np.unique(lengths):
        for k in np.unique(ks):
            m = int(((lengths == n) & (ks == k)).sum())
            if m:
                blocks.append((int(n), int(k), block(int(n), int(k), m, params, rng)))
    cols = columns(blocks)
    order = rng.permutation(n_examples)  # interleave lengths so any prefix is a fair sample
    return {key: [v[i] for i in order] if isinstance(v, list) else v[order] for key, v in cols.items()}


def draw_test(block: Block, params, eval_cfg, seed: int) -> dict:
    """A fixed set per (n, k); each has its own seed so adding a length changes no other."""
    blocks = []
    for n in eval_cfg["lengths"]:
        for k in eval_k(params, eval_cfg):
            rng = np.random.default_rng([seed, n, k])
            blocks.append((n, k, block(n, k, eval_cfg["examples"], params, rng)))
    return columns(blocks)
