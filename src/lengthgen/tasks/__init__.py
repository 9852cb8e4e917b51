"""Task registry: a task kind is looked up by name, never evaluated from a string.

A task module provides:
  VOCAB             list of token strings (index = token id; id 0 is padding)
  check(params, eval_cfg, where)  raise UserError naming the key for impossible settings
  eval_k(params, eval_cfg)        the k values (or other second axis) evaluated
  generate_train(params, n_examples, rng) -> dict of numpy columns
  generate_test(params, eval_cfg, seed)   -> dict of numpy columns
Columns: tokens / positions as lists of arrays, answer_start, length, plus task columns.
"""

from __future__ import annotations

from types import ModuleType

from lengthgen.errors import UserError
from lengthgen.tasks import sparse_parity

REGISTRY: dict[str, ModuleType] = {
    "sparse_parity": sparse_parity,
}


def get(kind: str, where: str = "kind") -> ModuleType:
    try:
        return REGISTRY[kind]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise UserError(f"{where}: unknown task kind {kind!r}; expected one of: {known}") from None
