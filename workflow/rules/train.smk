# Training: one job per (task, scheme, seed) cell. The resumable checkpoint lives outside
# the declared outputs (Snakemake deletes those before a rerun) and is removed on success.


rule train:
    input:
        "results/data/{task}/train.parquet",
    output:
        model="results/runs/{task}/{scheme}/seed{seed}/model.pt",
        train_log="results/runs/{task}/{scheme}/seed{seed}/train_log.parquet",
        meta="results/runs/{task}/{scheme}/seed{seed}/meta.json",
    log:
        "results/logs/train/{task}/{scheme}/seed{seed}.log",
    benchmark:
        "results/benchmarks/train/{task}/{scheme}/seed{seed}.tsv"
    conda:
        ENV
    threads: CONFIG["threads"]
    resources:
        gpu=GPU,
    params:
        cell=lambda w: as_json(lgconfig.cell_slice(CONFIG, w.task, w.scheme, int(w.seed))),
        checkpoint="results/checkpoints/{task}/{scheme}/seed{seed}/last.pt",
        out_dir=subpath(output.model, parent=True),
        code=CODE["train"],
    shell:
        "python -m lengthgen train --cell {params.cell:q} --data {input:q} --out-dir {params.out_dir:q}"
        " --checkpoint {params.checkpoint:q} --code-digest {params.code} 2> {log:q}"
