# The files of one cell or one block of seeds, as functions of a job's wildcards, for the
# training, sweep and attention rules, and the blocks of seeds when training is stacked.
# Here, not in lengthgen.layout: they decide those rules' inputs, and a digest of the planning
# modules in those rules would rerun every training and sweep on an edit of the planning.


SEED_BLOCKS = lgconfig.stack_blocks(CONFIG)  # {seeds of a block: its tasks}; empty unless stacked
_TRAIN_COST = {t["name"]: lgconfig.train_cost(CONFIG, t["name"]) for t in CONFIG["tasks"]}


def train_priority(wildcards):
    """Longest training cells first (E2's before E3's before E1's), so that no long training is
    left running alone on one core at the end of a run; all below E4's chain (priority 1)."""
    return 0.9 * _TRAIN_COST[wildcards.task] / max(_TRAIN_COST.values())


def training_set(wildcards):
    """The training set a cell trains on (its seed's own draw unless train_sets: shared)."""
    return results(f"data/{wildcards.task}/{lgconfig.train_split(CONFIG, int(wildcards.seed))}.parquet")


def test_set(wildcards):
    """The test set a cell is scored on (its seed's own draw unless test_sets: shared)."""
    return results(f"data/{wildcards.task}/{lgconfig.test_split(CONFIG, int(wildcards.seed))}.parquet")


def cell_token(wildcards):
    """The identity a cell's checkpoint must record (lengthgen.support.identity): a model.pt of another
    cell in this cell's directory would be counted as this one."""
    return lgconfig.cell_token(CONFIG, wildcards.task, wildcards.scheme, int(wildcards.seed))


def block_files(pattern, block):
    """`pattern` (with {task} and {scheme} wildcards and a {seed} field) for each seed of a block."""
    return [results(pattern.replace("{seed}", str(s))) for s in block]


def block_test_sets(block):
    """The test set each seed of a block is scored on, in the block's order (as test_set)."""
    return lambda w: [results(f"data/{w.task}/{lgconfig.test_split(CONFIG, s)}.parquet") for s in block]


def block_tokens(block):
    """The identity each seed's checkpoint of a block must record, in the block's order (as cell_token)."""
    return lambda w: [lgconfig.cell_token(CONFIG, w.task, w.scheme, s) for s in block]
