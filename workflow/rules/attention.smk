# Attention sparsity (an analysis beyond the paper): per trained cell, attention and attribution
# on the tokens each target depends on, at every test length; then one long table and a figure.
# Included only when the config's `attention` is not null.

ATTENTION = CONFIG["attention"]


localrules:
    aggregate_attention,
    figure_attention,


if not SEED_BLOCKS:

    rule attention:
        input:
            model=results("runs/{task}/{scheme}/seed{seed}/model.pt"),
            # the test set the cell's sweep reads: its seed's own draw by default (test_sets)
            data=test_set,
        output:
            results("runs/{task}/{scheme}/seed{seed}/attention.parquet"),
        log:
            results("logs/attention/{task}/{scheme}/seed{seed}.log"),
        benchmark:
            results("benchmarks/attention/{task}/{scheme}/seed{seed}.tsv")
        conda:
            ENV
        threads: CONFIG["threads"]
        resources:
            gpu=GPU,
        params:
            config=as_json({**ATTENTION, "device": CONFIG["device"], "threads": CONFIG["threads"]}),
            expect=cell_token,
            code=task_code("attention"),
        shell:
            "python -m lengthgen attention --model {input.model:q} --data {input.data:q} --config {params.config:q}"
            " --expect {params.expect:q} --out {output:q} 2> {log:q}"

else:
    # With stacked training, one job per trained block of seeds, as the sweeps (evaluate.smk).
    for _block, _tasks in SEED_BLOCKS.items():
        _seeds = "-".join(map(str, _block))

        rule:
            name:
                f"attention_seeds_{_seeds.replace('-', '_')}"
            input:
                models=block_files("runs/{task}/{scheme}/seed{seed}/model.pt", _block),
                data=block_test_sets(_block),
            output:
                block_files("runs/{task}/{scheme}/seed{seed}/attention.parquet", _block),
            log:
                results(f"logs/attention/{{task}}/{{scheme}}/seeds{_seeds}.log"),
            benchmark:
                results(f"benchmarks/attention/{{task}}/{{scheme}}/seeds{_seeds}.tsv")
            wildcard_constraints:
                task="|".join(re.escape(t) for t in _tasks),
            conda:
                ENV
            threads: CONFIG["threads"]
            resources:
                gpu=GPU,
                # under SLURM: profiles/slurm's set-resources name rules, not these per-block ones
                runtime=lambda w, attempt: 30 * attempt,
                mem_mb=4000,
            params:
                config=as_json({**ATTENTION, "device": CONFIG["device"], "threads": CONFIG["threads"]}),
                expect=block_tokens(_block),
                code=task_code("attention"),
            shell:
                "python -m lengthgen attention --model {input.models:q} --data {input.data:q}"
                " --config {params.config:q} --expect {params.expect:q} --out {output:q} 2> {log:q}"


# E4: each pair's long language model's attention at its scored tokens, against their greedy tokens.
if CONFIG["language"]:

    rule language_attention:
        input:
            long=results("language/models/long/seed{seed}/model.pt"),
            scores=results("language/scores/seed{seed}.parquet"),
            tokenizer=results("language/tokenizer.json"),
            tokens=results("language/tokens/tokens.json"),
        output:
            results("language/attention/seed{seed}.parquet"),
        log:
            results("logs/language/attention/seed{seed}.log"),
        benchmark:
            results("benchmarks/language/attention/seed{seed}.tsv")
        conda:
            ENV
        threads: CONFIG["threads"]
        resources:
            gpu=GPU,
        params:
            config=lambda w: as_json(
                {
                    "T_long": CONFIG["language"]["T_long"],
                    "T_short": CONFIG["language"]["T_short"],
                    "k": CONFIG["claims"]["language"]["greedy_k"],
                    "seed": int(w.seed),
                    "device": CONFIG["device"],
                    "threads": CONFIG["threads"],
                }
            ),
            tokens_dir=subpath(input.tokens, parent=True),
            expect=lambda w: lgconfig.lm_token(CONFIG, "long", int(w.seed)),
            code=CODE["language_attention"],
        shell:
            "python -m lengthgen language-attention --config {params.config:q} --long {input.long:q}"
            " --scores {input.scores:q} --tokenizer {input.tokenizer:q} --tokens {params.tokens_dir:q}"
            " --expect {params.expect:q} --out {output:q} 2> {log:q}"


rule aggregate_attention:
    input:
        cells=layout.cell_paths(CONFIG, "runs/{task}/{scheme}/seed{seed}/attention.parquet"),
        language=layout.language_attention_tables(CONFIG),
    output:
        results("tables/attention.csv"),
    log:
        results("logs/aggregate_attention.log"),
    conda:
        ENV
    params:
        expect=layout.cell_tokens(CONFIG),  # each table's cell, in the order of the inputs
        language=lambda w, input: f"--language {' '.join(input.language)}" if input.language else "",
        stale=layout.made_from_tables(CONFIG),
        code=planned("attention_report"),
    shell:
        "python -m lengthgen aggregate-attention --cells {input.cells:q} --expect {params.expect:q}"
        " {params.language} --csv {output:q} --stale {params.stale:q} 2> {log:q}"


rule figure_attention:
    input:
        results("tables/attention.csv"),
    output:
        report(
            results("figures/attention.png"),
            caption="../report/attention.rst",
            category="Attention sparsity (beyond the paper)",
        ),
    log:
        results("logs/figures/attention.log"),
    conda:
        ENV
    params:
        kinds=as_json({t["name"]: t["kind"] for t in CONFIG["tasks"]}),
        code=CODE["attention_figure"],
    shell:
        "python -m lengthgen figure-attention --csv {input:q} --kinds {params.kinds:q} --out {output:q} 2> {log:q}"
