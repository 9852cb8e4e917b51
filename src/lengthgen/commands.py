"""The subcommands of `python -m lengthgen`, declared once: each one's name, help and arguments.

`lengthgen.cli` builds its parser from `COMMANDS` and runs subcommand `x-y` with its function
`cmd_x_y`. An argument that several subcommands take is one constant here. A JSON argument
is checked as it is parsed: a config section against the schema, a workflow slice for the keys
its stage reads; a UserError raised there passes through argparse, and `cli.main` prints it in
one line. A stage's code digest (lengthgen.support.digest.cli_text) holds its subcommand's entry
here and the definitions that entry names.
"""

from __future__ import annotations

import argparse
import json
from typing import NamedTuple

from lengthgen.support.errors import UserError


class Command(NamedTuple):
    name: str
    help: str
    args: tuple[tuple[tuple[str, ...], dict], ...]


def command(name: str, help: str, *args) -> Command:
    return Command(name, help, args)


def arg(*flags: str, **options) -> tuple[tuple[str, ...], dict]:
    """One `add_argument` call: its flags and options."""
    return flags, options


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({err.msg})") from None


def _slice(flag: str, keys: str, help: str, many: str = ""):
    """A required JSON argument: an object (`many`: a non-empty list of them, named `many` in the
    error) holding at least `keys`. A slice is made by the workflow (lengthgen.config), not a
    section of the config, so the schema does not name its keys: they are the keys its stage
    reads."""

    def parse(text: str):
        value = _json(text)
        if many and not (isinstance(value, list) and value):
            raise UserError(f"{flag}: expected a JSON list of {many}")
        for item in value if many else [value]:
            _require(item, keys.split(), flag)
        return value

    return arg(flag, type=parse, required=True, help=help)


def _require(obj, keys: list[str], flag: str) -> None:
    if not isinstance(obj, dict):
        raise UserError(f"{flag}: expected a JSON object")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise UserError(f"{flag}: JSON lacks key(s) {', '.join(missing)}")


def _section(dotted: str):
    """An argparse type: the config section at `dotted`, checked and filled by the schema (its
    defaults, its required keys), as a run's config would be."""

    def parse(text: str) -> dict:
        from lengthgen.support import schema

        return schema.section(dotted, _json(text))

    return parse


def _token_type(check: str, what: str):
    """An argparse type: an identity token (lengthgen.support.identity), checked for its form by the
    module's function `check`."""

    def parse(text: str) -> str:
        from lengthgen.support import identity

        try:
            return getattr(identity, check)(text, what)
        except UserError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


_identity = _token_type("check_token", "cell identity")
_lm_identity = _token_type("check_lm_token", "language model identity")


def _named_path(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not (sep and name and path):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=PATH")
    return name, path


def _model_log(text: str) -> tuple[tuple[str, int], str]:
    """NAME/seed<n>=PATH: a language model's training log."""
    key, path = _named_path(text)
    name, _, seed = key.partition("/seed")
    if not (name and seed.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME/seed<n>=PATH")
    return (name, int(seed)), path


def _path(flag: str, help: str | None = None, **options):
    """A required path argument (most arguments are one)."""
    return arg(flag, required=True, help=help, **options)


# Arguments that several subcommands take, one per line: a stage's digest holds the lines it uses.
OUT = _path("--out")
OUTS = _path("--out", nargs="+")
OUT_DIR = _path("--out-dir")
CSV = _path("--csv")
MD = _path("--md")
CORPUS = _path("--corpus")
TOKENIZER = _path("--tokenizer")
TOKENS = _path("--tokens")
LONG = _path("--long", "the long model's model.pt")
SCORES = _path("--scores", "every pair's language/scores/seed<n>.parquet", nargs="+")
CODE_DIGEST = arg("--code-digest", default="")
STALE = arg("--stale", nargs="*", default=[], help="files made from the table, removed before it is rebuilt")
CELL_KEYS = "task scheme seed scheme_options model train device threads"
# Several models (a stack's seeds) in one process: one --data, --out and --expect per --model.
MODELS = _path("--model", nargs="+")
TEST_SETS = _path("--data", "each model's test set", nargs="+")
# the workflow always passes it; optional for a sweep run by hand
EXPECT = arg("--expect", nargs="+", type=_identity, help="each model's cell: task/scheme/seed<n>@config")
CLAIMS_SECTION = _section("claims")

COMMANDS = (
    # the synthetic tasks: data, training, length sweeps and attention of one cell
    command("generate", "generate one split of a task to Parquet",
            _slice("--task", "name kind params split seed", "the task's data slice (JSON)"),
            arg("--train", help="training split to keep the test split disjoint from"), OUT),
    command("train", "train one (task, scheme, seed) cell",
            _slice("--cell", CELL_KEYS, "the cell's config slice (JSON)"),
            _path("--data"), OUT_DIR, _path("--checkpoint", "resumable checkpoint (kept across reruns)"), CODE_DIGEST),
    command("train-stack", "train the seeds of one (task, scheme) as one stacked model",
            _slice("--cells", CELL_KEYS, "the cells' config slices (JSON list, one per seed)", many="cells"),
            _path("--data", "each cell's training set in order, or one for all", nargs="+"),
            _path("--out-dirs", "one output directory per cell, in order", nargs="+"),
            _path("--checkpoint", "resumable checkpoint of the whole stack"), CODE_DIGEST),
    command("sweep", "evaluate trained cells at every test length",
            MODELS, TEST_SETS, _slice("--eval", "device threads batch_size", None),
            OUTS, EXPECT),
    command("attention", "attention and attribution on the dependency sets of trained cells",
            MODELS, TEST_SETS,
            arg("--config", type=_json, default={},
                help="examples, targets, batch_size, device, threads (JSON; missing keys: the defaults)"),
            EXPECT, OUTS),
    # the tables, scorecard, figures and report pages of a run
    command("aggregate", "collect sweeps into results/tables",
            _path("--sweeps", nargs="+"),
            arg("--expect", nargs="+", type=_identity, help="each sweep's cell identity, in the order of --sweeps"),
            CSV, MD, STALE),
    command("aggregate-attention", "collect the cells' attention.parquet into one long table",
            _path("--cells", nargs="+"),
            arg("--expect", nargs="+", type=_identity, help="each table's cell identity, in the order of --cells"),
            arg("--language", nargs="*", default=[], help="E4's language/attention/seed<n>.parquet, if run"),
            CSV, STALE),
    command("claims", "write the claims scorecard",
            _path("--sweep-csv"), arg("--sparse-tasks", nargs="*", default=[]),
            arg("--train-max", type=int, default=1, help="longest training length of the sparse tasks"),
            arg("--config", type=CLAIMS_SECTION, required=True),
            arg("--coupling", type=_json, default={},
                help="E2/E3 tasks as JSON: {name: {kind, n_max, scheme_options}}"),
            arg("--scale", type=_json, default={},
                help="E1 tasks at several model sizes as JSON: {name: 'LxD'} (the scale analysis)"),
            arg("--needle", type=_json, default={}, help="needle tasks as JSON: {name: longest training haystack}"),
            arg("--language-scores", help="E4's per-token table tables/language_scores.csv, if run"),
            arg("--attention", help="tables/attention.csv, if run: the analysis rows beyond the paper"),
            arg("--training", help="tables/training.csv: which models were cut by max_steps (never fitted)"), CSV, MD),
    command("training-table", "how each cell's training stopped (early stop or max_steps), from its meta.json",
            _path("--meta", nargs="+"),
            arg("--cells", nargs="+", help="each meta.json's cell as task/scheme/seed, in the order of --meta"), CSV),
    command("figure", "draw a figure from the length sweep table",
            arg("--kind", choices=["sparse_parity", "sparsity_test", "coupling", "scale", "needle"],
                default="sparse_parity"),
            arg("--claims", type=CLAIMS_SECTION, help="sparsity_test, scale: the config's claims (JSON)"),
            _path("--sweep-csv"), arg("--tasks", nargs="+", help="the tasks drawn (every kind but scale)"),
            arg("--sizes", type=_json, help="scale: E1 tasks by model size, {name: 'LxD'} (JSON)"),
            _path("--train-max", "longest training length (per task)", type=int, nargs="+"),
            arg("--fit-min", type=float, help="sparse_parity: leave out models below this accuracy at train length"),
            OUT),
    command("figure-attention", "dependency attribution and attention mass against length",
            _path("--csv", "tables/attention.csv"), _path("--kinds", "task name -> task kind (JSON)", type=_json),
            OUT),
    command("report-pages", "the HTML report's scorecard, summary and run pages",
            _path("--claims", "claims.csv"), _path("--summary", "summary.md"),
            _path("--provenance", "provenance.json"),
            _path("--config", "the effective configuration (JSON)", type=_json),
            *(_path(f"--{name}") for name in ("scorecard-html", "summary-html", "run-html", "config-yaml"))),
    command("provenance", "record commit, versions and devices", arg("--meta", nargs="*", default=[]), OUT),
    # E4: corpus, tokenizer, language models, influential-token scoring and attention
    command("fetch-corpus", "fetch the offline default corpus archive (E4)", OUT_DIR),
    command("corpus", "read a corpus into one Parquet of documents (E4)",
            _path("--config", "language.corpus (JSON)", type=_json),
            arg("--archive", help="the offline corpus archive"), OUT),
    command("tokenizer", "train (bpe) or write (gpt2) the tokenizer (E4)",
            _path("--config", "language.tokenizer (JSON)", type=_json), CORPUS, OUT),
    command("tokenize", "token streams of the corpus splits (E4)", TOKENIZER, CORPUS, OUT_DIR),
    command("train-lm", "train one language model (E4)",
            _slice("--spec", "name context model train seed device threads", "the model's config slice (JSON)"),
            TOKENIZER, _path("--tokens", "directory of token streams"), OUT_DIR, _path("--checkpoint"), CODE_DIGEST),
    command("score", "influential-token scoring on validation tokens (E4)",
            _path("--config", "the influence slice (JSON)", type=_json), LONG,
            arg("--short", nargs="*", type=_named_path, default=[], help="NAME=model.pt of short-context models"),
            TOKENIZER, TOKENS, OUT,
            arg("--expect", nargs="+", type=_lm_identity,
                help="each model's identity (language/<name>@config); the workflow always passes them")),
    command("influence-report", "E4 tables and figures from the scores",
            SCORES, _path("--train-logs", "NAME/seed<n>=train_log.parquet", nargs="+", type=_model_log),
            _path("--config", "language and claims.language (JSON)", type=_json), CSV, _path("--train-csv"),
            _path("--figures", "gap, recovered and short-model PNGs", nargs=3)),
    command("language-scores", "the per-token table of every pair's scored tokens (E4)",
            SCORES, _path("--seeds", "the model seed of each, in order", nargs="+", type=int), CSV, STALE),
    command("language-attention", "the long language model's attention at the scored tokens (E4)",
            _slice("--config", "T_long T_short k seed device threads",
                   "T_long, T_short, k, seed, device, threads (JSON)"),
            LONG, _path("--scores", "the pair's language/scores/seed<n>.parquet"),
            arg("--expect", type=_lm_identity, help="the long model's identity (language/long@config)"),
            TOKENIZER, TOKENS, OUT),
    # the tools beside the pipeline, run by hand or by make
    command("diff", "what of results/tables moved since a commit: claim words and scorecard rows, a line per "
                    "table, then the cells (exit status 0: nothing moved, 1: something moved, 2: could not compare)",
            _path("--rev", "git revision to compare with, e.g. HEAD~1"), arg("--tables", default="results/tables"),
            arg("--tolerance", type=float, default=0.0, help="absolute change that counts as a move"),
            arg("--all", action="store_true", help="print every moved cell (default: the 50 largest moves)")),
    command("record", "record the SHA-256 of every table and figure of a run (<results>/checksums.json)",
            arg("--results", default="results", help="the run's results directory")),
    command("verdict", "the claims' words from a scorecard, or (--readme) the README's verdict block rewritten "
                       "from it; a scorecard that fails its run's record is refused",
            arg("claims", nargs="?", default="results/tables/claims.csv", help="the scorecard (claims.csv)"),
            arg("--readme", help="rewrite this README's verdict block instead of printing the table")),
    command("replicate", "two runs' scorecards side by side (exit 1 if a verdict differs)",
            arg("--main", default="results/tables/claims.csv"), _path("--other", "the other run's claims.csv"),
            _path("--out", "markdown report"), arg("--names", nargs=2, default=["default", "replicate"])),
    command("check-config", "read config files as a run would (make run checks CONFIG with it)",
            arg("files", nargs="+")),
    command("power", "how often two independent runs give each deciding row the same word, at multiples of a "
                     "run's units (--claim1-models: claim 1's power at m models)",
            arg("--results", nargs="+", default=["results"],
                help="the run (for --claim1-models: result directories whose sweeps are pooled)"),
            arg("--factors", type=float, nargs="+", default=[0.5, 1.0, 2.0],
                help="units of the simulated runs, as multiples of the run's"),
            arg("--claim1-models", type=int, nargs="+", help="claim 1's power at these numbers of models"),
            arg("--simulations", type=int, default=400,
                help="simulated truths (the run's units drawn with replacement), two runs from each"),
            arg("--jobs", type=int, default=1, help="processes sharing the simulated truths (the numbers do not "
                                                    "depend on it)"),
            arg("--plug-in", action="store_true",
                help="centre every simulated run on the run's own units (no uncertainty of the effect itself)"),
            arg("--write", help="Markdown file whose block '<!-- power: RESULTS -->' ... '<!-- end power -->' "
                                "takes the table"),
            arg("--split-half", metavar="OUT", help="instead: the claim words of each half of the run's units, "
                                                    "side by side, into this Markdown file")),
    command("warm-server", "the warm-start server a local run starts (lengthgen.support.warm)",
            arg("socket"), arg("parent", type=int, help="the run's process: the server ends with it")),
)
