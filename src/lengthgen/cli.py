"""`python -m lengthgen <stage> ...`: one subcommand per pipeline stage (what the Snakemake rules
run), and the tools beside them: diff, replicate, check-config and power.

Each stage reads only the paths it is given and writes only its outputs, all or nothing.
Errors a user can cause print one line (`lengthgen: error: ...`) and exit with status 2.
This module only parses arguments and calls one function of the stage's own module: what a stage
computes lives in that module. A stage's code digest (lengthgen.support.digest.cli_text) holds the
part of this file that can still change its output: its subcommands' functions and declarations.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

from lengthgen.support.errors import UserError


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({err.msg})") from None


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


def _same_count(expect: list | None, inputs: list, what: str) -> None:
    """--expect, where given, names one cell identity per input."""
    if expect is not None and len(expect) != len(inputs):
        raise UserError(f"--expect: {len(expect)} cell identities for {len(inputs)} {what}")


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


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _require(obj: dict, keys: tuple, flag: str) -> None:
    missing = [k for k in keys if k not in obj]
    if missing:
        raise UserError(f"{flag}: JSON lacks key(s) {', '.join(missing)}")


def cmd_generate(a) -> None:
    from lengthgen import datasets

    _require(a.task, ("name", "kind", "params", "split", "seed"), "--task")
    datasets.generate(a.task, a.task["split"], a.task["seed"], a.out, train_path=a.train)


def cmd_train(a) -> None:
    from lengthgen.training import train

    _require(a.cell, ("task", "scheme", "seed", "scheme_options", "model", "train", "device", "threads"), "--cell")
    train.train(a.cell, a.data, a.out_dir, a.checkpoint, code_digest=a.code_digest, log=_log)


def cmd_train_stack(a) -> None:
    from lengthgen.training import stacked

    if not isinstance(a.cells, list) or not a.cells:
        raise UserError("--cells: expected a JSON list of cells")
    for cell in a.cells:
        _require(cell, ("task", "scheme", "seed", "scheme_options", "model", "train", "device", "threads"), "--cells")
    stacked.train_block(a.cells, a.data, a.out_dirs, a.checkpoint, code_digest=a.code_digest, log=_log)


def _model_jobs(a) -> list[tuple]:
    """(model, test set, out, expect) per --model: the models of one job (a stack's seeds)."""
    for flag, given in (("--data", a.data), ("--out", a.out), ("--expect", a.expect)):
        if given is not None and len(given) != len(a.model):
            raise UserError(f"{flag}: {len(given)} given for {len(a.model)} models (--model); one per model")
    return list(zip(a.model, a.data, a.out, a.expect or [None] * len(a.model), strict=True))


def cmd_sweep(a) -> None:
    from lengthgen.evaluation import sweep as evaluate

    _require(a.eval, ("device", "threads", "batch_size"), "--eval")
    evaluate.length_sweeps(_model_jobs(a), a.eval, log=_log)


def cmd_attention(a) -> None:
    from lengthgen.evaluation import attention

    attention.cells_attention(_model_jobs(a), a.config, log=_log)


def cmd_language_attention(a) -> None:
    from lengthgen.language import attention

    _require(a.config, ("T_long", "T_short", "k", "seed", "device", "threads"), "--config")
    attention.run(a.config, a.long, a.scores, a.tokenizer, a.tokens, a.out, log=_log, expect=a.expect)


def cmd_aggregate_attention(a) -> None:
    from lengthgen.analysis import attention as attention_report

    _same_count(a.expect, a.cells, "attention tables")
    attention_report.aggregate(a.cells, a.csv, expected=a.expect, language=a.language, stale=a.stale)


def cmd_figure_attention(a) -> None:
    from lengthgen.reporting import attention as attention_report

    attention_report.figure(a.csv, a.kinds, a.out)


def cmd_aggregate(a) -> None:
    from lengthgen.analysis import aggregate

    _same_count(a.expect, a.sweeps, "sweeps")
    aggregate.aggregate(a.sweeps, a.csv, a.md, expected=a.expect, stale=a.stale)


def cmd_provenance(a) -> None:
    from lengthgen.analysis import aggregate

    aggregate.provenance(a.out, a.meta)


def cmd_claims(a) -> None:
    from lengthgen.analysis import scorecard

    scorecard.build(a.sweep_csv, a.sparse_tasks, a.train_max, a.config, a.coupling, a.language_scores, a.attention,
                    a.csv, a.md, log=_log, scale=a.scale, needle=a.needle)


def cmd_figure(a) -> None:
    from lengthgen.reporting import figures

    if a.kind == "scale":
        if a.sizes is None or a.claims is None:
            raise UserError("figure --kind scale: needs --sizes and --claims (JSON)")
        _require(a.claims, ("sparsity", "stats"), "--claims")
        figures.scale(a.sweep_csv, a.sizes, max(a.train_max), a.out, a.claims["sparsity"], a.claims["stats"])
        return
    if not a.tasks:
        raise UserError(f"figure --kind {a.kind}: needs --tasks")
    if a.kind == "needle":
        figures.needle(a.sweep_csv, dict(zip(a.tasks, a.train_max, strict=True)), a.out, a.fit_min)
    elif a.kind == "coupling":
        if a.fit_min is not None:
            raise UserError("figure --fit-min: only for --kind sparse_parity and needle")
        figures.coupling(a.sweep_csv, dict(zip(a.tasks, a.train_max, strict=True)), a.out)
    elif a.kind == "sparsity_test":
        if a.claims is None:
            raise UserError("figure --kind sparsity_test: needs --claims (the config's claims, JSON)")
        _require(a.claims, ("sparsity", "stats"), "--claims")
        figures.sparsity_test(a.sweep_csv, a.tasks, max(a.train_max), a.out, a.claims["sparsity"], a.claims["stats"])
    else:
        figures.sparse_parity(a.sweep_csv, a.tasks, max(a.train_max), a.out, a.fit_min)


def cmd_report_pages(a) -> None:
    from lengthgen.reporting import html as report

    out = {"scorecard": a.scorecard_html, "summary": a.summary_html, "run": a.run_html, "config": a.config_yaml}
    report.write_pages(a.claims, a.summary, a.provenance, a.config, out)


def cmd_fetch_corpus(a) -> None:
    from lengthgen.language import corpus

    corpus.fetch_offline(a.out_dir)


def cmd_corpus(a) -> None:
    from lengthgen.language import corpus

    summary = corpus.build(a.config, a.out, archive=a.archive)
    _log(f"corpus: {summary}")


def cmd_tokenizer(a) -> None:
    from lengthgen.language import tokenizer

    tokenizer.train(a.config, a.corpus, a.out)


def cmd_tokenize(a) -> None:
    from lengthgen.language import tokenizer

    summary = tokenizer.tokenize(a.tokenizer, a.corpus, a.out_dir, log=_log)
    _log(f"tokens: {summary}")


def cmd_train_lm(a) -> None:
    from lengthgen.language import lm

    _require(a.spec, ("name", "context", "model", "train", "seed", "device", "threads"), "--spec")
    lm.train_lm(a.spec, a.tokenizer, a.tokens, a.out_dir, a.checkpoint, code_digest=a.code_digest, log=_log)


def cmd_score(a) -> None:
    from lengthgen.language import influence
    from lengthgen.support import identity

    expect = {identity.key(t).removeprefix("language/"): t for t in a.expect} if a.expect else None
    influence.run(a.config, a.long, dict(a.short), a.tokenizer, a.tokens, a.out, log=_log, expect=expect)


def cmd_influence_report(a) -> None:
    from lengthgen.reporting import language as report

    report.run(a.scores, dict(a.train_logs), a.config, a.csv, a.train_csv,
               dict(zip(("gap", "recovered", "short_model"), a.figures, strict=True)))


def cmd_language_scores(a) -> None:
    from lengthgen.analysis import language_scores as scores

    if len(a.seeds) != len(a.scores):
        raise UserError(f"--seeds: {len(a.seeds)} seeds for {len(a.scores)} score tables")
    scores.run(a.scores, a.seeds, a.csv, stale=a.stale)


def cmd_diff(a) -> int:
    from lengthgen.analysis import diff

    return diff.diff_tables(a.rev, a.tables, a.tolerance)


def cmd_replicate(a) -> int:
    from lengthgen.analysis import replicate

    return 0 if replicate.run(a.main, a.other, a.out, tuple(a.names)) else 1


def cmd_check_config(a) -> None:
    from lengthgen import config

    config.check_files(a.files)


def cmd_warm_server(a) -> None:
    from lengthgen.support import warm

    warm.serve(a.socket, a.parent, _fresh_main)


def _fresh_main(argv: list[str]) -> int:
    """`main` as src/ has it now: what a warm-start worker runs, once its fork has dropped the
    server's lengthgen modules, so a job started after an edit runs the edited code."""
    from lengthgen import cli

    return cli.main(argv)


def cmd_power(a) -> None:
    from lengthgen import plan
    from lengthgen.analysis import power
    from lengthgen.support.fileio import write_text

    if a.claim1_models:
        points, cfg = power.observed_points(a.results)
        table = power.table(points, a.claim1_models, cfg, n_sim=a.simulations)
        print(table.pivot(index="models", columns="scheme", values="power").to_markdown())
        return
    if len(a.results) != 1:
        raise UserError("power: --results takes one run (its units are resampled)")
    run = power.Run(a.results[0], plan.claims_plan)
    if a.split_half:
        write_text(a.split_half, power.split_half(run) + "\n")
        print(f"split-half check: {a.split_half}")
        return
    text = power.agreement_table(run, power.agreement(run, a.factors, n_sim=a.simulations))
    if a.write:
        power.write_block(a.write, a.results[0], text)
    print(text)


def parser() -> argparse.ArgumentParser:
    first_paragraph = " ".join(__doc__.split("\n\n")[0].split())
    p = argparse.ArgumentParser(prog="lengthgen", description=first_paragraph)
    sub = p.add_subparsers(dest="stage", required=True)
    _training_stages(sub)
    _table_stages(sub)
    _language_stages(sub)
    _tools(sub)
    return p


def _training_stages(sub) -> None:
    """Subcommands of the synthetic tasks: data, training, length sweeps and attention of one cell."""
    s = sub.add_parser("generate", help="generate one split of a task to Parquet")
    s.add_argument("--task", type=_json, required=True, help="the task's data slice (JSON)")
    s.add_argument("--train", help="training split to keep the test split disjoint from")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_generate)

    s = sub.add_parser("train", help="train one (task, scheme, seed) cell")
    s.add_argument("--cell", type=_json, required=True, help="the cell's config slice (JSON)")
    s.add_argument("--data", required=True)
    s.add_argument("--out-dir", required=True)
    s.add_argument("--checkpoint", required=True, help="resumable checkpoint (kept across reruns)")
    s.add_argument("--code-digest", default="")
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("train-stack", help="train the seeds of one (task, scheme) as one stacked model")
    s.add_argument("--cells", type=_json, required=True, help="the cells' config slices (JSON list, one per seed)")
    s.add_argument("--data", nargs="+", required=True, help="each cell's training set in order, or one for all")
    s.add_argument("--out-dirs", nargs="+", required=True, help="one output directory per cell, in order")
    s.add_argument("--checkpoint", required=True, help="resumable checkpoint of the whole stack")
    s.add_argument("--code-digest", default="")
    s.set_defaults(func=cmd_train_stack)

    # Several models (a stack's seeds) in one process: one --data, --out and --expect per --model.
    s = sub.add_parser("sweep", help="evaluate trained cells at every test length")
    s.add_argument("--model", nargs="+", required=True)
    s.add_argument("--data", nargs="+", required=True, help="each model's test set")
    s.add_argument("--eval", type=_json, required=True)
    s.add_argument("--out", nargs="+", required=True)
    # the workflow always passes it; optional for a sweep run by hand
    s.add_argument("--expect", nargs="+", type=_identity, help="each model's cell: task/scheme/seed<n>@config")
    s.set_defaults(func=cmd_sweep)

    s = sub.add_parser("attention", help="attention and attribution on the dependency sets of trained cells")
    s.add_argument("--model", nargs="+", required=True)
    s.add_argument("--data", nargs="+", required=True, help="each model's test set")
    s.add_argument("--config", type=_json, default={},
                   help="examples, targets, batch_size, device, threads (JSON; missing keys: the defaults)")
    s.add_argument("--expect", nargs="+", type=_identity, help="each model's cell: task/scheme/seed<n>@config")
    s.add_argument("--out", nargs="+", required=True)
    s.set_defaults(func=cmd_attention)


def _table_stages(sub) -> None:
    """Subcommands of the tables, scorecard, figures and report pages of a run."""
    s = sub.add_parser("aggregate", help="collect sweeps into results/tables")
    s.add_argument("--sweeps", nargs="+", required=True)
    s.add_argument("--expect", nargs="+", type=_identity, help="each sweep's cell identity, in the order of --sweeps")
    s.add_argument("--csv", required=True)
    s.add_argument("--md", required=True)
    s.add_argument("--stale", nargs="*", default=[], help="files made from the table, removed before it is rebuilt")
    s.set_defaults(func=cmd_aggregate)

    s = sub.add_parser("aggregate-attention", help="collect the cells' attention.parquet into one long table")
    s.add_argument("--cells", nargs="+", required=True)
    s.add_argument("--expect", nargs="+", type=_identity, help="each table's cell identity, in the order of --cells")
    s.add_argument("--language", nargs="*", default=[], help="E4's language/attention/seed<n>.parquet, if run")
    s.add_argument("--csv", required=True)
    s.add_argument("--stale", nargs="*", default=[], help="files made from the table, removed before it is rebuilt")
    s.set_defaults(func=cmd_aggregate_attention)

    s = sub.add_parser("claims", help="write the claims scorecard")
    s.add_argument("--sweep-csv", required=True)
    s.add_argument("--sparse-tasks", nargs="*", default=[])
    s.add_argument("--train-max", type=int, default=1, help="longest training length of the sparse tasks")
    s.add_argument("--config", type=_json, required=True)
    s.add_argument("--coupling", type=_json, default={},
                   help="E2/E3 tasks as JSON: {name: {kind, n_max, scheme_options}}")
    s.add_argument("--scale", type=_json, default={},
                   help="E1 tasks at several model sizes as JSON: {name: 'LxD'} (the scale analysis)")
    s.add_argument("--needle", type=_json, default={}, help="needle tasks as JSON: {name: longest training haystack}")
    s.add_argument("--language-scores", help="E4's per-token table tables/language_scores.csv, if run")
    s.add_argument("--attention", help="tables/attention.csv, if run: the analysis rows beyond the paper")
    s.add_argument("--csv", required=True)
    s.add_argument("--md", required=True)
    s.set_defaults(func=cmd_claims)

    s = sub.add_parser("figure", help="draw a figure from the length sweep table")
    s.add_argument("--kind", choices=["sparse_parity", "sparsity_test", "coupling", "scale", "needle"],
                   default="sparse_parity")
    s.add_argument("--claims", type=_json, help="sparsity_test, scale: the config's claims (JSON)")
    s.add_argument("--sweep-csv", required=True)
    s.add_argument("--tasks", nargs="+", help="the tasks drawn (every kind but scale)")
    s.add_argument("--sizes", type=_json, help="scale: E1 tasks by model size, {name: 'LxD'} (JSON)")
    s.add_argument("--train-max", type=int, nargs="+", required=True, help="longest training length (per task)")
    s.add_argument("--fit-min", type=float, help="sparse_parity: leave out models below this accuracy at train length")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_figure)

    s = sub.add_parser("figure-attention", help="dependency attribution and attention mass against length")
    s.add_argument("--csv", required=True, help="tables/attention.csv")
    s.add_argument("--kinds", type=_json, required=True, help="task name -> task kind (JSON)")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_figure_attention)

    s = sub.add_parser("report-pages", help="the HTML report's scorecard, summary and run pages")
    s.add_argument("--claims", required=True, help="claims.csv")
    s.add_argument("--summary", required=True, help="summary.md")
    s.add_argument("--provenance", required=True, help="provenance.json")
    s.add_argument("--config", type=_json, required=True, help="the effective configuration (JSON)")
    for name in ("scorecard-html", "summary-html", "run-html", "config-yaml"):
        s.add_argument(f"--{name}", required=True)
    s.set_defaults(func=cmd_report_pages)

    s = sub.add_parser("provenance", help="record commit, versions and devices")
    s.add_argument("--meta", nargs="*", default=[])
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_provenance)


def _language_stages(sub) -> None:
    """Subcommands of E4: corpus, tokenizer, language models, influential-token scoring and attention."""
    s = sub.add_parser("fetch-corpus", help="fetch the offline default corpus archive (E4)")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_fetch_corpus)

    s = sub.add_parser("corpus", help="read a corpus into one Parquet of documents (E4)")
    s.add_argument("--config", type=_json, required=True, help="language.corpus (JSON)")
    s.add_argument("--archive", help="the offline corpus archive")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_corpus)

    s = sub.add_parser("tokenizer", help="train (bpe) or write (gpt2) the tokenizer (E4)")
    s.add_argument("--config", type=_json, required=True, help="language.tokenizer (JSON)")
    s.add_argument("--corpus", required=True)
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_tokenizer)

    s = sub.add_parser("tokenize", help="token streams of the corpus splits (E4)")
    s.add_argument("--tokenizer", required=True)
    s.add_argument("--corpus", required=True)
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_tokenize)

    s = sub.add_parser("train-lm", help="train one language model (E4)")
    s.add_argument("--spec", type=_json, required=True, help="the model's config slice (JSON)")
    s.add_argument("--tokenizer", required=True)
    s.add_argument("--tokens", required=True, help="directory of token streams")
    s.add_argument("--out-dir", required=True)
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--code-digest", default="")
    s.set_defaults(func=cmd_train_lm)

    s = sub.add_parser("score", help="influential-token scoring on validation tokens (E4)")
    s.add_argument("--config", type=_json, required=True, help="the influence slice (JSON)")
    s.add_argument("--long", required=True, help="the long model's model.pt")
    s.add_argument("--short", nargs="*", type=_named_path, default=[], help="NAME=model.pt of short-context models")
    s.add_argument("--tokenizer", required=True)
    s.add_argument("--tokens", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--expect", nargs="+", type=_lm_identity,
                   help="each model's identity (language/<name>@config); the workflow always passes them")
    s.set_defaults(func=cmd_score)

    s = sub.add_parser("influence-report", help="E4 tables and figures from the scores")
    s.add_argument("--scores", nargs="+", required=True, help="every pair's language/scores/seed<n>.parquet")
    s.add_argument("--train-logs", nargs="+", type=_model_log, required=True, help="NAME/seed<n>=train_log.parquet")
    s.add_argument("--config", type=_json, required=True, help="language and claims.language (JSON)")
    s.add_argument("--csv", required=True)
    s.add_argument("--train-csv", required=True)
    s.add_argument("--figures", nargs=3, required=True, help="gap, recovered and short-model PNGs")
    s.set_defaults(func=cmd_influence_report)

    s = sub.add_parser("language-scores", help="the per-token table of every pair's scored tokens (E4)")
    s.add_argument("--scores", nargs="+", required=True, help="every pair's language/scores/seed<n>.parquet")
    s.add_argument("--seeds", nargs="+", type=int, required=True, help="the model seed of each, in order")
    s.add_argument("--csv", required=True)
    s.add_argument("--stale", nargs="*", default=[], help="files made from the table, removed before it is rebuilt")
    s.set_defaults(func=cmd_language_scores)

    s = sub.add_parser("language-attention", help="the long language model's attention at the scored tokens (E4)")
    s.add_argument("--config", type=_json, required=True, help="T_long, T_short, k, seed, device, threads (JSON)")
    s.add_argument("--long", required=True, help="the long model's model.pt")
    s.add_argument("--scores", required=True, help="the pair's language/scores/seed<n>.parquet")
    s.add_argument("--expect", type=_lm_identity, help="the long model's identity (language/long@config)")
    s.add_argument("--tokenizer", required=True)
    s.add_argument("--tokens", required=True)
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_language_attention)


def _tools(sub) -> None:
    """Subcommands of the tools beside the pipeline, run by hand or by make."""
    s = sub.add_parser("diff", help="cells of results/tables that moved since a commit (exit 1 if any)")
    s.add_argument("--rev", required=True, help="git revision to compare with, e.g. HEAD~1")
    s.add_argument("--tables", default="results/tables")
    s.add_argument("--tolerance", type=float, default=0.0, help="absolute change that counts as a move")
    s.set_defaults(func=cmd_diff)

    s = sub.add_parser("replicate", help="two runs' scorecards side by side (exit 1 if a verdict differs)")
    s.add_argument("--main", default="results/tables/claims.csv")
    s.add_argument("--other", required=True, help="the other run's claims.csv")
    s.add_argument("--out", required=True, help="markdown report")
    s.add_argument("--names", nargs=2, default=["default", "replicate"])
    s.set_defaults(func=cmd_replicate)

    s = sub.add_parser("check-config", help="read config files as a run would (make run checks CONFIG with it)")
    s.add_argument("files", nargs="+")
    s.set_defaults(func=cmd_check_config)

    s = sub.add_parser("power", help="how often two independent runs give each deciding row the same word, at "
                                     "multiples of a run's units (--claim1-models: claim 1's power at m models)")
    s.add_argument("--results", nargs="+", default=["results"],
                   help="the run (for --claim1-models: result directories whose sweeps are pooled)")
    s.add_argument("--factors", type=float, nargs="+", default=[0.5, 1.0, 2.0],
                   help="units of the simulated runs, as multiples of the run's")
    s.add_argument("--claim1-models", type=int, nargs="+", help="claim 1's power at these numbers of models")
    s.add_argument("--simulations", type=int, default=100)
    s.add_argument("--write", help="Markdown file whose block '<!-- power: RESULTS -->' ... '<!-- end power -->' "
                                   "takes the table")
    s.add_argument("--split-half", metavar="OUT", help="instead: the claim words of each half of the run's units, "
                                                       "side by side, into this Markdown file")
    s.set_defaults(func=cmd_power)

    s = sub.add_parser("warm-server", help="the warm-start server a local run starts (lengthgen.support.warm)")
    s.add_argument("socket")
    s.add_argument("parent", type=int, help="the run's process: the server ends with it")
    s.set_defaults(func=cmd_warm_server)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except UserError as err:
        print(f"lengthgen: error: {err}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:  # an input path given on the command line
        print(f"lengthgen: error: {err.filename}: file not found", file=sys.stderr)
        return 2
    except OSError as err:
        if err.filename is None:  # not a file's: a bug or the machine's, worth its traceback
            raise
        print(f"lengthgen: error: {err.filename}: {err.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line in the job's log, not a traceback
        from lengthgen.support.warm import interrupted

        return interrupted(signal.SIGINT)
