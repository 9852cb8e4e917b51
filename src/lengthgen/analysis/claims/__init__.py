"""The claims scorecard: each claim of the paper decided by a statistical test fixed in the
config before the run, with its value, interval or p, the number of units it rests on, and
PASS, FAIL or INCONCLUSIVE. A run states by itself whether it reproduced the paper.

Fit first: a model (claim 1) or a scheme (claim 2) enters a length comparison only if it fits
its training lengths. A comparison with an unfit party is INCONCLUSIVE, never PASS, since a
model that never learned the task fails at every length and says nothing about length.
Rows marked `descriptive` show the numbers behind a verdict; they are not verdicts.

One module per claim; this package's names are theirs, imported here:
- `rows`: a scorecard row (`make_row`, `tag`), the constants, the claims not in a grid
  (`unmeasured_rows`, `heading`) and the claim words (`claim_word`, `verdict`);
- `sparsity`: claim 1 (E1), and `fitted`, which the attention rows share;
- `coupling`: claim 2 (E2 parity rows, E3 variable-assignment rows);
- `language`: claim 3 (E4);
- `attention`: the attention association rows, beyond the paper;
- `scorecard`: the scorecard's two pages (`write_scorecard`, `COLUMNS`).
"""

from lengthgen.analysis.claims.attention import ANALYSIS, attention_checks
from lengthgen.analysis.claims.coupling import KIND_EXPERIMENT, coupling_checks, id_coverage, scheme_role
from lengthgen.analysis.claims.language import CLAIM3, LANGUAGE_METHODS, language_checks
from lengthgen.analysis.claims.rows import (
    DESCRIPTIVE,
    EXPERIMENTS,
    NOT_IN_GRID,
    NOT_MEASURED,
    NOT_REPRODUCED,
    PARTLY,
    REPRODUCED,
    UNDECIDED,
    claim_word,
    heading,
    make_row,
    model_names,
    tag,
    unmeasured_rows,
    verdict,
)
from lengthgen.analysis.claims.scorecard import COLUMNS, RUN_KINDS, write_scorecard
from lengthgen.analysis.claims.sparsity import (
    claim1_points,
    fitted,
    k_draws,
    paired,
    sparsity_checks,
    trend_row,
    trend_test,
)
from lengthgen.analysis.stats import FAIL, INCONCLUSIVE, PASS, spearman

__all__ = [
    "ANALYSIS", "CLAIM3", "COLUMNS", "DESCRIPTIVE", "EXPERIMENTS", "FAIL", "INCONCLUSIVE", "KIND_EXPERIMENT",
    "LANGUAGE_METHODS", "NOT_IN_GRID", "NOT_MEASURED", "NOT_REPRODUCED", "PARTLY", "PASS", "REPRODUCED", "RUN_KINDS",
    "UNDECIDED", "attention_checks", "claim1_points", "claim_word", "coupling_checks", "fitted", "heading",
    "id_coverage", "k_draws", "language_checks", "make_row", "model_names", "paired", "scheme_role", "spearman",
    "sparsity_checks", "tag", "trend_row", "trend_test", "unmeasured_rows", "verdict", "write_scorecard",
]
