"""lengthgen.tasks._common: the code sparse parity and the needle task share is no task kind, is
in their cells' code digests (and only theirs), and draws datasets by blocks of (n, k)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from lengthgen import tasks
from lengthgen.support import digest
from lengthgen.support.errors import UserError
from lengthgen.tasks import _common

SHARING = ("sparse_parity", "needle")
OTHERS = ("scratchpad_parity", "variable_assignment")


def test_a_module_named_with_an_underscore_is_no_task_kind():
    assert "_common" not in tasks.REGISTRY
    assert set(SHARING) | set(OTHERS) <= set(tasks.REGISTRY)
    with pytest.raises(UserError, match="unknown task kind '_common'"):
        tasks.get("_common")


def test_the_tasks_that_share_it_have_it_in_their_cells_digests():
    shared = digest.PACKAGE_DIR / "tasks" / "_common.py"
    for kind in SHARING:
        assert shared in digest.stage_files("lengthgen.datasets", kind), kind
    for kind in OTHERS:
        assert shared not in digest.stage_files("lengthgen.datasets", kind), kind


def test_an_edit_of_the_shared_module_changes_exactly_the_sharing_tasks_digests(tmp_path, monkeypatch):
    package = tmp_path / "lengthgen"
    shutil.copytree(digest.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(digest, "PACKAGE_DIR", package)
    kinds = SHARING + OTHERS
    stages = ("lengthgen.datasets", "lengthgen.training.train")

    def digests():
        return {kind: [digest.stage_digest(stage, kind) for stage in stages] for kind in kinds}

    before = digests()
    shared = package / "tasks" / "_common.py"
    shared.write_text(shared.read_text() + "\nEDITED = 1\n")
    after = digests()
    assert [kind for kind in kinds if after[kind] != before[kind]] == list(SHARING)


def _block(n, k, m, params, rng):
    """m rows of n + 2 tokens: the example's n and k, then n - 1 random draws, then the answer k."""
    body = rng.integers(0, 9, size=(m, n - 1))
    return np.concatenate([np.full((m, 1), n), body, np.full((m, 2), k)], axis=1).astype(np.int16)


def test_a_test_set_holds_each_n_and_k_with_the_answer_last():
    params = {"k": 3, "k_mode": "mixture"}
    cols = _common.draw_test(_block, params, {"lengths": [4, 6], "examples": 2}, seed=5)
    assert list(zip(cols["length"], cols["k"], strict=True)) == [
        (n, k) for n in (4, 6) for k in (1, 2, 3) for _ in range(2)]
    for tokens, start, n, k in zip(cols["tokens"], cols["answer_start"], cols["length"], cols["k"], strict=True):
        assert len(tokens) == n + 2 and start == n + 1 and tokens[0] == n and tokens[start] == k
    assert cols["answer_start"].dtype == np.int32 and cols["k"].dtype == np.int32
    again = _common.draw_test(_block, params, {"lengths": [6, 4], "examples": 2}, seed=5)
    np.testing.assert_array_equal(  # each (n, k) has its own seed: the order of lengths changes no block
        np.concatenate(cols["tokens"][:6]), np.concatenate(again["tokens"][6:]))


def test_a_training_set_is_interleaved_and_draws_the_trained_ks():
    params = {"k": 2, "k_mode": "fixed", "n_min": 3, "n_max": 9}
    cols = _common.draw_train(_block, params, 300, np.random.default_rng(0))
    assert set(cols["k"]) == {2} and set(cols["length"]) == set(range(3, 10))
    assert (np.diff(cols["length"]) < 0).any()  # not sorted by length: any prefix is a fair sample
    for tokens, start, n in zip(cols["tokens"], cols["answer_start"], cols["length"], strict=True):
        assert tokens[0] == n and start == len(tokens) - 1
    mixture = _common.draw_train(_block, {**params, "k_mode": "mixture"}, 300, np.random.default_rng(0))
    assert set(mixture["k"]) == {1, 2}
