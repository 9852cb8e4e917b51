"""Dependency sets of the tasks (what each scored target depends on): hand-checked examples,
and on generated test sets the target is a function of exactly those tokens."""

import numpy as np
import pytest
from conftest import sparse_parity_task

from lengthgen import tasks
from lengthgen.tasks import needle
from lengthgen.tasks import scratchpad_parity as e2
from lengthgen.tasks import sparse_parity as e1
from lengthgen.tasks import variable_assignment as e3


def test_sparse_parity_depends_on_the_planted_tokens():
    # BOS 0 1* 1 0* SEP y: planted at 2 and 4, y = 1 xor 0 at index 6 (read at SEP, index 5)
    tokens = np.array([e1.BOS, 3, 6, 4, 5, e1.SEP, 4])
    assert e1.dependencies(tokens, np.arange(7), 6) == [(6, [2, 4])]


def test_scratchpad_parity_depends_on_its_bit_and_the_previous_answer():
    tokens, ids = e2.example(np.array([1, 0, 1]), "end")  # BOS 1 0 1 = 1 1 0 EOS
    assert tokens.tolist() == [e2.BOS, 5, 4, 5, e2.EQ, 5, 5, 4, e2.EOS]
    assert e2.dependencies(tokens, ids, 5) == [(5, [1]), (6, [2, 5]), (7, [3, 6])]


@pytest.mark.parametrize("fmt", ["chain", "statements"])
def test_variable_assignment_depends_on_the_statement_the_hop_reads(fmt):
    v0, v1, v2 = e3.VARIABLE, e3.VARIABLE + 1, e3.VARIABLE + 2
    # BOS v0 = v1 ; v2 = 3 ; v1 = v2 ; ? v0   (statements at 1-4, 5-8, 9-12; answer from 15)
    statements, hops = [(v0, v1), (v2, e3.DIGIT + 3), (v1, v2)], [0, 2, 1]
    tokens, ids = e3.example(statements, hops, fmt)
    deps = e3.dependencies(tokens, ids, 15)
    if fmt == "chain":  # v1 v2 3 EOS
        assert tokens[15:].tolist() == [v1, v2, e3.DIGIT + 3, e3.EOS]
        assert deps == [(15, [1, 2, 3, 4]), (16, [9, 10, 11, 12]), (17, [5, 6, 7, 8])]
    else:  # each statement copied whole, 4 tokens each, then EOS
        assert [t for t, _ in deps] == list(range(15, 27))
        assert [d[0] for _, d in deps] == [1] * 4 + [9] * 4 + [5] * 4


def _tasks():
    yield e1, sparse_parity_task(k=3, n_min=4, n_max=8)["params"], {"lengths": [8, 20], "examples": 20, "k": None}
    yield e2, {"n_min": 2, "n_max": 8, "bos_position": "end"}, {"lengths": [8, 20], "examples": 20}
    params = {"n_min": 2, "n_max": 6, "depth_min": 1, "depth_max": 3, "distractor_depth_max": 2, "variables": 24,
              "answer_format": "chain"}
    yield e3, params, {"lengths": [6, 12], "examples": 20}
    params = {"k": 3, "k_mode": "mixture", "n_min": 8, "n_max": 12, "base": 4, "keys": 8, "filler": 4, "distractors": 1}
    yield needle, params, {"lengths": [12, 30], "examples": 20, "k": None}


@pytest.mark.parametrize("case", list(_tasks()), ids=["sparse_parity", "scratchpad_parity", "variable_assignment",
                                                      "needle"])
def test_generated_targets_follow_from_their_dependencies(case):
    module, params, eval_cfg = case
    assert tasks.get(module.__name__.rsplit(".", 1)[1]) is module
    cols = module.generate_test(params, eval_cfg, seed=7)
    for tokens, ids, start in zip(cols["tokens"], cols["positions"], cols["answer_start"], strict=True):
        deps = module.dependencies(tokens, ids, start)
        assert deps and all(int(start) <= t < len(tokens) and all(0 < j < t for j in d) for t, d in deps)
        for t, d in deps:
            if module is e1:  # y is the xor of the planted bits, and there are k of them
                assert len(d) == params["k"] and tokens[t] - e1.ZERO == sum(tokens[j] - e1.PLANTED_ZERO for j in d) % 2
            elif module is e2:  # s_i = b_i xor s_{i-1}
                assert tokens[t] - e2.ZERO == sum(tokens[j] - e2.ZERO for j in d) % 2
            elif module is needle:  # y is the sum mod base of the values, each right after a queried key
                query = tokens[list(tokens).index(needle.QUERY) + 1 : start - 1]
                assert sorted(tokens[j - 1] for j in d) == sorted(query)
                assert tokens[t] - needle.DIGIT == sum(tokens[j] - needle.DIGIT for j in d) % params["base"]
            else:  # the statement's left side is the variable looked up (the token before), right side the answer
                assert tokens[d[0]] == tokens[t - 1] and tokens[d[2]] == tokens[t] and tokens[d[3]] == e3.SEMI
