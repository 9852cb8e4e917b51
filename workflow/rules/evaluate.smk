# Length sweep: every trained cell on its test set (its seed's own draw by default: test_sets).


rule length_sweep:
    input:
        model=results("runs/{task}/{scheme}/seed{seed}/model.pt"),
        data=test_set,
    output:
        results("runs/{task}/{scheme}/seed{seed}/sweep.parquet"),
    log:
        results("logs/sweep/{task}/{scheme}/seed{seed}.log"),
    benchmark:
        results("benchmarks/sweep/{task}/{scheme}/seed{seed}.tsv")
    conda:
        ENV
    threads: CONFIG["threads"]
    resources:
        gpu=GPU,
    params:
        eval=as_json(lgconfig.eval_slice(CONFIG)),
        expect=cell_token,
        code=task_code("evaluate"),
    shell:
        "python -m lengthgen sweep --model {input.model:q} --data {input.data:q} --eval {params.eval:q}"
        " --expect {params.expect:q} --out {output:q} 2> {log:q}"
