# Aggregation: tables, scorecard, figures and provenance. Cheap, so they run locally
# even under a cluster executor.


localrules:
    aggregate,
    claims,
    figure,
    provenance,
    record,
    report_pages,
    training_table,


rule aggregate:
    input:
        layout.cell_paths(CONFIG, "runs/{task}/{scheme}/seed{seed}/sweep.parquet"),
    output:
        csv=results("tables/length_sweep.csv"),
        md=results("tables/summary.md"),
    log:
        results("logs/aggregate.log"),
    conda:
        ENV
    params:
        expect=layout.cell_tokens(CONFIG),  # each sweep's cell, in the order of the inputs
        stale=layout.made_from_tables(CONFIG),
        code=planned("aggregate"),
    shell:
        "python -m lengthgen aggregate --sweeps {input:q} --expect {params.expect:q} --csv {output.csv:q}"
        " --md {output.md:q} --stale {params.stale:q} 2> {log:q}"


# How each cell's training stopped: a model cut by max_steps is never counted as fitted
# (lengthgen.analysis.budget; docs/protocol.md, "A fit is a training that ended").
rule training_table:
    input:
        layout.cell_paths(CONFIG, "runs/{task}/{scheme}/seed{seed}/meta.json"),
    output:
        results("tables/training.csv"),
    log:
        results("logs/training_table.log"),
    conda:
        ENV
    params:
        cells=[f"{t}/{s}/{seed}" for t, s, seed in layout.cells(CONFIG)],
        code=planned("training_table"),
    shell:
        "python -m lengthgen training-table --meta {input:q} --cells {params.cells:q} --csv {output:q} 2> {log:q}"


rule claims:
    input:
        sweep=results("tables/length_sweep.csv"),
        training=results("tables/training.csv"),
        language=layout.language_score_table(CONFIG),
        attention=layout.attention_table(CONFIG),
    output:
        csv=results("tables/claims.csv"),
        md=results("tables/claims.md"),
    log:
        results("logs/claims.log"),
    conda:
        ENV
    params:
        sparse=plan.claim1_tasks(CONFIG),
        train_max=plan.train_max(CONFIG, "sparse_parity"),
        config=as_json(CONFIG["claims"]),
        coupling=as_json(plan.coupling_info(CONFIG)),
        scale=as_json(plan.sparse_sizes(CONFIG)),
        needle=as_json(plan.needle_info(CONFIG)),
        language=lambda w, input: f"--language-scores {input.language[0]}" if input.language else "",
        attention=lambda w, input: f"--attention {input.attention[0]}" if input.attention else "",
        code=planned("claims"),
    shell:
        "python -m lengthgen claims --sweep-csv {input.sweep:q} --sparse-tasks {params.sparse:q}"
        " --train-max {params.train_max} --config {params.config:q} --coupling {params.coupling:q}"
        " --scale {params.scale:q} --needle {params.needle:q} {params.language} {params.attention}"
        " --training {input.training:q}"
        " --csv {output.csv:q} --md {output.md:q} 2> {log:q} && cat {log:q}"


# The figures drawn from the sweep table, one job each: what each is told is lengthgen.plan's
# (figure_options), and its report caption is figure.rst's section for it.
FIGURE_CATEGORY = {
    "sparse_parity": "E1 sparse parity",
    "sparsity_test": "E1 sparse parity",
    "coupling": "E2-E3 position coupling",
    "scale": "Beyond the paper",
    "needle": "Beyond the paper",
}


rule figure:
    input:
        results("tables/length_sweep.csv"),
    output:
        report(
            results("figures/{figure}.png"),
            caption="../report/figure.rst",
            category=lambda w: FIGURE_CATEGORY[w.figure],
        ),
    log:
        results("logs/figures/{figure}.log"),
    wildcard_constraints:
        figure="|".join(plan.FIGURE_KINDS),
    conda:
        ENV
    params:
        args=lambda w: plan.figure_args(CONFIG, w.figure),
        code=planned("figures"),
    shell:
        "python -m lengthgen figure {params.args} --sweep-csv {input:q} --out {output:q} 2> {log:q}"


rule provenance:
    input:
        layout.cell_paths(CONFIG, "runs/{task}/{scheme}/seed{seed}/meta.json"),
        layout.language_models(CONFIG, "meta.json"),
    output:
        report(results("provenance.json"), category=RUN_CATEGORY),
    log:
        results("logs/provenance.log"),
    conda:
        ENV
    params:
        code=planned("aggregate"),
    shell:
        "python -m lengthgen provenance --meta {input:q} --out {output:q} 2> {log:q}"


# The report's own pages: the scorecard and the summary as HTML tables (the report viewer
# shows HTML; it only offers Markdown for download), and the effective config with provenance.
rule report_pages:
    input:
        claims=results("tables/claims.csv"),
        summary=results("tables/summary.md"),
        provenance=results("provenance.json"),
    output:
        scorecard=report(results("tables/claims.html"), caption="../report/claims.rst", category="Scorecard"),
        summary=report(results("tables/summary.html"), caption="../report/summary.rst", category="Tables"),
        run=report(results("run.html"), caption="../report/run.rst", category=RUN_CATEGORY),
        config=report(results("config.yaml"), category=RUN_CATEGORY),
    log:
        results("logs/report_pages.log"),
    conda:
        ENV
    params:
        config=as_json(CONFIG),
        code=CODE["report"],
    shell:
        "python -m lengthgen report-pages --claims {input.claims:q} --summary {input.summary:q}"
        " --provenance {input.provenance:q} --config {params.config:q} --scorecard-html {output.scorecard:q}"
        " --summary-html {output.summary:q} --run-html {output.run:q} --config-yaml {output.config:q} 2> {log:q}"


# The run's record: the SHA-256 of every table and figure, written once they are all final and
# checked before the next run plans (lengthgen.support.record, workflow/rules/common.smk).
rule record:
    input:
        finished_outputs(),
    output:
        results("checksums.json"),
    log:
        results("logs/record.log"),
    conda:
        ENV
    params:
        results=lambda w, output: os.path.dirname(output[0]) or ".",
        code=CODE["record"],
    shell:
        "python -m lengthgen record --results {params.results:q} > {log:q} 2>&1"
