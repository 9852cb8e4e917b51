# Configuration, the stages' code digests and the paths every rule file uses. What a run plans
# (the cell grid, which tasks each claim and figure is judged on, which files to rebuild) is in
# lengthgen.layout and lengthgen.plan, tested there.
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
from lengthgen import layout, plan  # noqa: E402
from lengthgen.support.digest import stage_digest  # noqa: E402
from lengthgen.support.errors import UserError  # noqa: E402
from lengthgen.support import fileio as lgfileio  # noqa: E402
from lengthgen.support import record as lgrecord  # noqa: E402
from lengthgen.support.fileio import canonical_json as as_json  # noqa: E402


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
    # A variant that sets no results_dir writes its own, not over the default's committed tables.
    CONFIG, note = lgconfig.variant_results_dir(
        workflow.basedir,
        CONFIG,
        workflow.overwrite_configfiles,
        SCHEMA,
        overrides=dict(workflow.config_settings.config),
    )
    if workflow.is_main_process and note:
        print(note, file=sys.stderr)
except UserError as err:
    sys.exit(f"lengthgen: error: {err}")  # one line, no traceback, nothing written

RESULTS = CONFIG["results_dir"]
if workflow.is_main_process:
    # Snakemake plans no job over a write-protected output, and says neither where nor what to do.
    try:
        lgfileio.check_writable(RESULTS)
        # Tables and figures damaged since the run that recorded them (lengthgen.support.record):
        # removed here, once, before Snakemake looks at them, so that this run rebuilds them; a
        # report, which rebuilds nothing, refuses them.
        if any(arg == "--report" or arg.startswith("--report=") for arg in sys.argv):
            lgrecord.check_tables(Path(RESULTS) / "tables")
            lgrecord.check_tables(Path(RESULTS) / "figures")
        else:
            for line in lgrecord.heal(RESULTS):
                print(f"lengthgen: {line}", file=sys.stderr)
    except UserError as err:
        sys.exit(f"lengthgen: error: {err}")
# Jobs that may share one GPU (lengthgen.support.device claims a slot of one); jobs inherit it.
os.environ.update(LENGTHGEN_GPU_JOBS=str(CONFIG["gpu_jobs"]))
# Where a job may remove an intermediate it fails to read, so that a rerun rebuilds it
# (lengthgen.support.fileio.read_intermediate); inherited by jobs as PYTHONPATH is.
os.environ.update(LENGTHGEN_RESULTS=os.path.abspath(RESULTS))


def results(path):
    """`path` under this configuration's results directory (as lengthgen.layout's paths)."""
    return layout.results(CONFIG, path)


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
    "record": "support.record",
    "training_table": "analysis.budget",
}
CODE = {stage: stage_digest(f"lengthgen.{module}") for stage, module in STAGES.items()}
# The planning modules decide the inputs and params of the rules that read the whole grid; only
# those rules, all after the sweeps, carry their digest (planned), so an edit of the planning
# reruns no data, training or evaluation.
PLANNING = "+".join(stage_digest(f"lengthgen.{module}") for module in ("layout", "plan"))


def planned(stage):
    """The digest of a stage whose rule's inputs or params lengthgen.layout or plan decide."""
    return f"{CODE[stage]}+{PLANNING}"


def task_code(stage):
    """The stage's digest for one task's cells (a function of the wildcards): the stage's code
    with that task's module alone, so an edit of one task reruns only its cells."""
    digests = {t["name"]: stage_digest(f"lengthgen.{STAGES[stage]}", t["kind"]) for t in CONFIG["tasks"]}
    return lambda w: digests[w.task]


# Training and sweep jobs ask for a GPU only when they will use one, so that CPU runs are not
# serialized by the profile's `gpu` limit; under SLURM this becomes the job's GPU request.
GPU = int(lgconfig.uses_gpu(CONFIG))


wildcard_constraints:
    task="|".join(t["name"] for t in CONFIG["tasks"]),
    scheme="[A-Za-z0-9_]+",
    seed=r"\d+",
    split=r"train|train-seed\d+|test|test-seed\d+",


def finished_outputs():
    """The tables and figures a run ends with (what `all` asks for, and the record is made of)."""
    return [
        results("tables/length_sweep.csv"),
        results("tables/summary.md"),
        results("tables/training.csv"),
        results("tables/claims.md"),
        results("provenance.json"),
        results("tables/claims.html"),
        *layout.language_tables(CONFIG),
        *layout.attention_outputs(CONFIG),
        *expand(results("figures/{figure}.png"), figure=plan.figures(CONFIG)),
    ]


def missing_intermediates():
    """The intermediate files that are missing, for `all` to ask for, so that a run rebuilds
    them (lengthgen.layout.missing_intermediates). Jobs' own processes (cluster jobs re-read
    this file) run one rule and skip the look."""
    if not workflow.is_main_process:
        return []
    missing, note = layout.missing_intermediates(CONFIG)
    if note:
        print(note, file=sys.stderr)
    return missing
