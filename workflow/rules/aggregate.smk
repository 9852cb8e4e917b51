# Aggregation: tables, scorecard, figures and provenance. Cheap, so they run locally
# even under a cluster executor.


localrules:
    aggregate,
    claims,
    figure_sparse_parity,
    figure_sparsity_test,
    figure_coupling,
    figure_scale,
    figure_needle,
    provenance,
    report_pages,


rule aggregate:
    input:
        cell_paths(results("runs/{task}/{scheme}/seed{seed}/sweep.parquet")),
    output:
        csv=results("tables/length_sweep.csv"),
        md=results("tables/summary.md"),
    log:
        results("logs/aggregate.log"),
    conda:
        ENV
    params:
        expect=cell_tokens(),  # each sweep's cell, in the order of the inputs
        stale=made_from_tables(),
        code=CODE["aggregate"],
    shell:
        "python -m lengthgen aggregate --sweeps {input:q} --expect {params.expect:q} --csv {output.csv:q}"
        " --md {output.md:q} --stale {params.stale:q} 2> {log:q}"


rule claims:
    input:
        sweep=results("tables/length_sweep.csv"),
        language=language_score_table(),
        attention=attention_table(),
    output:
        csv=results("tables/claims.csv"),
        md=results("tables/claims.md"),
    log:
        results("logs/claims.log"),
    conda:
        ENV
    params:
        sparse=claim1_tasks(),
        train_max=train_max("sparse_parity"),
        config=as_json(CONFIG["claims"]),
        coupling=as_json(coupling_info()),
        scale=as_json(sparse_sizes()),
        needle=as_json(needle_info()),
        language=lambda w, input: f"--language-scores {input.language[0]}" if input.language else "",
        attention=lambda w, input: f"--attention {input.attention[0]}" if input.attention else "",
        code=CODE["claims"],
    shell:
        "python -m lengthgen claims --sweep-csv {input.sweep:q} --sparse-tasks {params.sparse:q}"
        " --train-max {params.train_max} --config {params.config:q} --coupling {params.coupling:q}"
        " --scale {params.scale:q} --needle {params.needle:q} {params.language} {params.attention}"
        " --csv {output.csv:q} --md {output.md:q} 2> {log:q} && cat {log:q}"


rule figure_sparse_parity:
    input:
        results("tables/length_sweep.csv"),
    output:
        report(
            results("figures/sparse_parity.png"),
            caption="../report/sparse_parity.rst",
            category="E1 sparse parity",
        ),
    log:
        results("logs/figures/sparse_parity.log"),
    conda:
        ENV
    params:
        tasks=claim1_tasks(),
        train_max=train_max("sparse_parity"),
        fit_min=CONFIG["claims"]["sparsity"]["fit_min"],
        code=CODE["figures"],
    shell:
        "python -m lengthgen figure --sweep-csv {input:q} --tasks {params.tasks:q} --train-max {params.train_max}"
        " --fit-min {params.fit_min} --out {output:q} 2> {log:q}"


rule figure_sparsity_test:
    input:
        results("tables/length_sweep.csv"),
    output:
        report(
            results("figures/sparsity_test.png"),
            caption="../report/sparsity_test.rst",
            category="E1 sparse parity",
        ),
    log:
        results("logs/figures/sparsity_test.log"),
    conda:
        ENV
    params:
        tasks=claim1_tasks(),
        train_max=train_max("sparse_parity"),
        claims=as_json(CONFIG["claims"]),
        code=CODE["figures"],
    shell:
        "python -m lengthgen figure --kind sparsity_test --sweep-csv {input:q} --tasks {params.tasks:q}"
        " --train-max {params.train_max} --claims {params.claims:q} --out {output:q} 2> {log:q}"


rule figure_coupling:
    input:
        results("tables/length_sweep.csv"),
    output:
        report(
            results("figures/coupling.png"),
            caption="../report/coupling.rst",
            category="E2-E3 position coupling",
        ),
    log:
        results("logs/figures/coupling.log"),
    conda:
        ENV
    params:
        tasks=[t["name"] for t in coupling_tasks()],
        train_max=[t["params"]["n_max"] for t in coupling_tasks()],
        code=CODE["figures"],
    shell:
        "python -m lengthgen figure --kind coupling --sweep-csv {input:q} --tasks {params.tasks:q}"
        " --train-max {params.train_max} --out {output:q} 2> {log:q}"


rule figure_scale:
    input:
        results("tables/length_sweep.csv"),
    output:
        report(
            results("figures/scale.png"),
            caption="../report/scale.rst",
            category="Beyond the paper",
        ),
    log:
        results("logs/figures/scale.log"),
    conda:
        ENV
    params:
        sizes=as_json(sparse_sizes()),
        train_max=train_max("sparse_parity"),
        claims=as_json(CONFIG["claims"]),
        code=CODE["figures"],
    shell:
        "python -m lengthgen figure --kind scale --sweep-csv {input:q} --sizes {params.sizes:q}"
        " --train-max {params.train_max} --claims {params.claims:q} --out {output:q} 2> {log:q}"


rule figure_needle:
    input:
        results("tables/length_sweep.csv"),
    output:
        report(
            results("figures/needle.png"),
            caption="../report/needle.rst",
            category="Beyond the paper",
        ),
    log:
        results("logs/figures/needle.log"),
    conda:
        ENV
    params:
        tasks=list(needle_info()),
        train_max=list(needle_info().values()),
        fit_min=CONFIG["claims"]["sparsity"]["fit_min"],
        code=CODE["figures"],
    shell:
        "python -m lengthgen figure --kind needle --sweep-csv {input:q} --tasks {params.tasks:q}"
        " --train-max {params.train_max} --fit-min {params.fit_min} --out {output:q} 2> {log:q}"


rule provenance:
    input:
        cell_paths(results("runs/{task}/{scheme}/seed{seed}/meta.json")),
        language_models("meta.json"),
    output:
        report(results("provenance.json"), category=RUN_CATEGORY),
    log:
        results("logs/provenance.log"),
    conda:
        ENV
    params:
        code=CODE["aggregate"],
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
