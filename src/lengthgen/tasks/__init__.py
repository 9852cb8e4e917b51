"""Task registry: a task kind is looked up by name, never evaluated from a string. A kind is
a module of this package (adding `tasks/mine.py` adds kind `mine`); a module whose name starts
with `_` holds code that tasks share (`_common.py`) and is no kind.

A task module provides:
  vocab(params)     list of token strings (index = token id; id 0 is padding)
  GROUP             the columns that index a test set's blocks (length first)
  COUPLED           whether `positions` holds coupled IDs (else plain indices)
  seq_len(params, n)              longest example of length n, in tokens
  gap_after(coupled)              (prompt tokens after which a training-time position gap may
                                  open, whether a gap between a target and its query unscores it)
  check(params, eval_cfg, where)  raise UserError naming the key for impossible settings
  eval_k(params, eval_cfg)        the k values evaluated (empty for tasks without k)
  generate_train(params, n_examples, rng) -> dict of numpy columns
  generate_test(params, eval_cfg, seed)   -> dict of numpy columns
  dependencies(tokens, positions, answer_start) -> [(target, [indices])]: per scored target of
                                  one example, the tokens its value depends on (the model
                                  predicts the target at index t from position t - 1)
Columns: tokens / positions as lists of arrays, answer_start, length, plus task columns.
The answer runs from answer_start to the end of the example.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from lengthgen.support.errors import UserError

# Every module of this package not named with `_` is a task kind, found by listing the package
# rather than named here: adding a task then edits no file that another task's code digest holds
# (lengthgen.support.digest), so the other tasks' cells stay cached.
REGISTRY: dict[str, ModuleType] = {
    m.name: importlib.import_module(f"{__name__}.{m.name}")
    for m in sorted(pkgutil.iter_modules(__path__))
    if not m.name.startswith("_")
}


def get(kind: str, where: str = "kind") -> ModuleType:
    try:
        return REGISTRY[kind]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise UserError(f"{where}: unknown task kind {kind!r}; expected one of: {known}") from None
