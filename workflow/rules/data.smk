# Synthetic datasets: one Parquet file per (task, split). A model seed's own training split
# (train-seed<s>) or the shared one (train); a test split (test-seed<s>, or the shared test) is
# drawn disjoint from its training split, so it depends on it.


rule generate_dataset:
    input:
        lambda w: (
            [results(f"data/{w.task}/{lgconfig.training_set_of(CONFIG, w.split)}.parquet")]
            if w.split.startswith("test")
            else []
        ),
    output:
        results("data/{task}/{split}.parquet"),
    log:
        results("logs/data/{task}/{split}.log"),
    # A cell's data before any cheaper cell's training: priority is not passed up to the jobs a
    # job waits on, and E3's data at priority 0 waited for every E1 training, leaving E3 last.
    priority: train_priority
    conda:
        ENV
    params:
        task=lambda w: as_json(lgconfig.data_slice(CONFIG, w.task, w.split)),
        train=lambda w, input: f"--train {input[0]}" if input else "",
        code=task_code("data"),
    shell:
        "python -m lengthgen generate --task {params.task:q} {params.train} --out {output:q} 2> {log:q}"
