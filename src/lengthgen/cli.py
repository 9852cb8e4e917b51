"""`python -m lengthgen <stage> ...`: one subcommand per pipeline stage (what the Snakemake rules
run), and the tools beside them: diff, replicate, check-config and power.

Each stage reads only the paths it is given and writes only its outputs, all or nothing.
Errors a user can cause print one line (`lengthgen: error: ...`) and exit with status 2.
This module builds the parser from the table of subcommands (lengthgen.commands, where each
argument is declared) and calls one function of the stage's own module: what a stage computes
lives in that module. A stage's code digest (lengthgen.support.digest.cli_text) holds the part of
this file and of the table that can still change its output: its subcommands' functions and entries.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from lengthgen import commands
from lengthgen.support.errors import UserError


def _same_count(expect: list | None, inputs: list, what: str) -> None:
    """--expect, where given, names one cell identity per input."""
    if expect is not None and len(expect) != len(inputs):
        raise UserError(f"--expect: {len(expect)} cell identities for {len(inputs)} {what}")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_generate(a) -> None:
    from lengthgen import datasets

    datasets.generate(a.task, a.task["split"], a.task["seed"], a.out, train_path=a.train)


def cmd_train(a) -> None:
    from lengthgen.training import train

    train.train(a.cell, a.data, a.out_dir, a.checkpoint, code_digest=a.code_digest, log=_log)


def cmd_train_stack(a) -> None:
    from lengthgen.training import stacked

    stacked.train_block(a.cells, a.data, a.out_dirs, a.checkpoint, code_digest=a.code_digest, log=_log)


def _model_jobs(a) -> list[tuple]:
    """(model, test set, out, expect) per --model: the models of one job (a stack's seeds)."""
    for flag, given in (("--data", a.data), ("--out", a.out), ("--expect", a.expect)):
        if given is not None and len(given) != len(a.model):
            raise UserError(f"{flag}: {len(given)} given for {len(a.model)} models (--model); one per model")
    return list(zip(a.model, a.data, a.out, a.expect or [None] * len(a.model), strict=True))


def cmd_sweep(a) -> None:
    from lengthgen.evaluation import sweep as evaluate

    evaluate.length_sweeps(_model_jobs(a), a.eval, log=_log)


def cmd_attention(a) -> None:
    from lengthgen.evaluation import attention

    attention.cells_attention(_model_jobs(a), a.config, log=_log)


def cmd_language_attention(a) -> None:
    from lengthgen.language import attention

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
                    a.csv, a.md, log=_log, scale=a.scale, needle=a.needle, training=a.training)


def cmd_training_table(a) -> None:
    from lengthgen.analysis import budget

    cells = [tuple(c.rsplit("/", 2)) for c in a.cells]
    budget.write(a.meta, [(t, s, int(seed)) for t, s, seed in cells], a.csv)


def cmd_figure(a) -> None:
    from lengthgen.reporting import figures

    if a.kind == "scale":
        if a.sizes is None or a.claims is None:
            raise UserError("figure --kind scale: needs --sizes and --claims (JSON)")
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

    _refuse_damaged(a.tables)  # a damaged table would be read as cells that moved
    return diff.diff_tables(a.rev, a.tables, a.tolerance, limit=None if a.all else diff.SHOWN)


def _refuse_damaged(path: str) -> None:
    """The tools that read a finished run refuse a table (or a folder's tables) that fails the
    run's record (lengthgen.support.record), in one line. A helper, not in the tools' own
    functions, so that an edit of a tool leaves the record stage's digest alone."""
    from lengthgen.support import record

    if Path(path).is_dir():
        record.check_tables(path)
    else:
        record.check(path)


def cmd_record(a) -> None:
    from lengthgen.support import record

    print(f"recorded: {record.write(a.results)}")


def cmd_verdict(a) -> int:
    from lengthgen.analysis import verdict

    _refuse_damaged(a.claims)  # a valid but cut scorecard would rewrite the README's verdict wrong
    return verdict.main([a.claims] + (["--readme", a.readme] if a.readme else []))


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
    text = power.agreement_table(run, power.agreement(run, a.factors, n_sim=a.simulations,
                                                           predictive=not a.plug_in, jobs=a.jobs))
    if a.write:
        power.write_block(a.write, a.results[0], text)
    print(text)


def parser() -> argparse.ArgumentParser:
    first_paragraph = " ".join(__doc__.split("\n\n")[0].split())
    p = argparse.ArgumentParser(prog="lengthgen", description=first_paragraph)
    sub = p.add_subparsers(dest="stage", required=True)
    for command in commands.COMMANDS:
        s = sub.add_parser(command.name, help=command.help, description=command.help)
        for flags, options in command.args:
            s.add_argument(*flags, **options)
        s.set_defaults(func=globals()[f"cmd_{command.name.replace('-', '_')}"])
    return p


def main(argv=None) -> int:
    try:
        args = parser().parse_args(argv)  # may raise UserError: a JSON argument checked as parsed
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
