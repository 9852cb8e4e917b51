"""E3: variable assignment, where the coupled IDs depend on the input (claim 2; our protocol).

A program of N statements ``x = y ;`` over distinct variables (each assigned once) and
digit constants, shuffled, then a query:

    BOS x1 = x2 ; x7 = 4 ; x2 = x7 ; ... ; ? x1

The queried chain has depth D (D statements down to a constant); distractor chains of depth
1..distractor_depth_max fill the other N - D statements. Answers (``answer_format``):
  chain       ``x2 x7 4 EOS``: one hop per token
  statements  ``x1 = x2 ; x2 = x7 ; x7 = 4 ; EOS``: each followed statement copied whole
Coupled IDs: prompt tokens take their index; each answer token takes the ID of the prompt
token it copies, which only the input determines (EOS, never fed back, takes the last + 1).
The prompt ends with the queried variable itself (no closing marker), so the first hop is
found the way every later one is, from the token just written: with a marker after it, the
pointer at the marker had to look one token back first, which 2-layer models learned late or
not at all within our CPU budget.
"""

from __future__ import annotations

import numpy as np

from lengthgen.support.errors import UserError

SPECIALS = ["<pad>", "<bos>", "<eos>", "=", ";", "?"]
PAD, BOS, EOS, EQ, SEMI, QUERY = range(6)
DIGIT = len(SPECIALS)  # tokens DIGIT..DIGIT+9 are the constants 0..9, variables follow
VARIABLE = DIGIT + 10
GROUP = ["length", "depth"]
COUPLED = True
STATEMENT = 4  # tokens per statement: x = y ;


def vocab(params) -> list[str]:
    return SPECIALS + [str(d) for d in range(10)] + [f"v{i}" for i in range(params["variables"])]


def seq_len(params, n: int) -> int:
    """Prompt (BOS, n statements, ? x) plus the answer of the deepest chain."""
    per_hop = STATEMENT if params["answer_format"] == "statements" else 1
    return 1 + STATEMENT * n + 2 + params["depth_max"] * per_hop + 1


def eval_k(params, eval_cfg) -> list[int]:
    return []


def gap_after(coupled: bool) -> tuple[frozenset[int], bool]:
    """Gaps open between statements only, so each statement stays contiguous in IDs; the
    next hop is found by content, so a gap unscores no target."""
    return frozenset({SEMI}), False


def depths(params) -> list[int]:
    return list(range(params["depth_min"], params["depth_max"] + 1))


def check(params, eval_cfg, where: str) -> None:
    p = params
    if p["n_min"] > p["n_max"]:
        raise UserError(f"{where}.params.n_min: {p['n_min']} is larger than n_max {p['n_max']}")
    if p["depth_min"] > p["depth_max"]:
        raise UserError(f"{where}.params.depth_min: {p['depth_min']} is larger than depth_max {p['depth_max']}")
    shortest = min(p["n_min"], *eval_cfg["lengths"])
    if p["depth_max"] > shortest:
        raise UserError(
            f"{where}.params.depth_max: a chain of depth {p['depth_max']} needs {p['depth_max']} statements, "
            f"but the shortest program has N={shortest}"
        )
    longest = max(p["n_max"], *eval_cfg["lengths"])
    if p["variables"] < longest:
        raise UserError(
            f"{where}.params.variables: {p['variables']} variables cannot fill N={longest} statements "
            f"(each variable is assigned once)"
        )


def _program(n: int, depth: int, params, rng: np.random.Generator) -> tuple[list, list]:
    """Statements (lhs, rhs) as token ids, shuffled, and the queried chain's statement order."""
    names = VARIABLE + rng.permutation(params["variables"])[:n]
    chains, start = [], 0
    sizes = [depth]
    while sum(sizes) < n:
        sizes.append(min(int(rng.integers(1, params["distractor_depth_max"] + 1)), n - sum(sizes)))
    for size in sizes:
        chain = list(names[start : start + size])
        start += size
        targets = chain[1:] + [DIGIT + int(rng.integers(0, 10))]
        chains.append(list(zip(chain, targets, strict=True)))
    statements = [s for chain in chains for s in chain]
    order = rng.permutation(n)
    shuffled = [statements[i] for i in order]
    where = np.argsort(order)  # where[i]: shuffled slot of original statement i
    return shuffled, [int(where[i]) for i in range(depth)]


def example(statements: list, hops: list[int], fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and coupled IDs of one program whose queried chain visits the statements `hops`."""
    prompt = [BOS]
    for lhs, rhs in statements:
        prompt += [lhs, EQ, rhs, SEMI]
    prompt += [QUERY, statements[hops[0]][0]]
    copied = []  # prompt indices the answer copies
    for slot in hops:
        first = 1 + STATEMENT * slot
        copied += list(range(first, first + STATEMENT)) if fmt == "statements" else [first + 2]
    tokens = prompt + [prompt[i] for i in copied] + [EOS]
    positions = list(range(len(prompt))) + copied + [copied[-1] + 1]
    return np.asarray(tokens, dtype=np.int16), np.asarray(positions, dtype=np.int32)


def _columns(rows: list[tuple[int, int, np.ndarray, np.ndarray]]) -> dict:
    n = np.array([r[0] for r in rows], dtype=np.int32)
    return {
        "tokens": [r[2] for r in rows],
        "positions": [r[3] for r in rows],
        "answer_start": STATEMENT * n + 3,
        "length": n,
        "depth": np.array([r[1] for r in rows], dtype=np.int32),
    }


def _row(n: int, depth: int, params, rng):
    statements, hops = _program(n, depth, params, rng)
    return (n, depth, *example(statements, hops, params["answer_format"]))


def generate_train(params, n_examples: int, rng: np.random.Generator):
    lengths = rng.integers(params["n_min"], params["n_max"] + 1, size=n_examples)
    ds = rng.integers(params["depth_min"], params["depth_max"] + 1, size=n_examples)
    return _columns([_row(int(n), int(d), params, rng) for n, d in zip(lengths, ds, strict=True)])


def generate_test(params, eval_cfg, seed: int):
    """A fixed set per (N, depth), each seeded by (seed, N, depth)."""
    rows = []
    for n in eval_cfg["lengths"]:
        for d in depths(params):
            rng = np.random.default_rng([seed, n, d])
            rows.extend(_row(n, d, params, rng) for _ in range(eval_cfg["examples"]))
    return _columns(rows)


def dependencies(tokens: np.ndarray, positions: np.ndarray, answer_start: int) -> list[tuple[int, list[int]]]:
    """Each answer token but EOS copies a token of the statement the next hop reads (the one
    whose left-hand side the model is looking up): it depends on that statement's 4 tokens.
    Its coupled ID is the index of the prompt token it copies, so the data alone say which."""
    out = []
    for t in range(int(answer_start), len(tokens) - 1):
        first = 1 + STATEMENT * ((int(positions[t]) - 1) // STATEMENT)
        out.append((t, list(range(first, first + STATEMENT))))
    return out
