# Length sweep: every trained cell on its test set (its seed's own draw by default: test_sets).
# With stacked training, one job per trained block of seeds sweeps them all in one process (a
# job's start and CUDA set-up cost more than a small model's sweep), writing each seed's own
# sweep.parquet, byte for byte what a job of its own writes.

import re

if not SEED_BLOCKS:

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

else:
    for _block, _tasks in SEED_BLOCKS.items():
        _seeds = "-".join(map(str, _block))

        rule:
            name:
                f"length_sweep_seeds_{_seeds.replace('-', '_')}"
            input:
                models=block_files("runs/{task}/{scheme}/seed{seed}/model.pt", _block),
                data=block_test_sets(_block),
            output:
                block_files("runs/{task}/{scheme}/seed{seed}/sweep.parquet", _block),
            log:
                results(f"logs/sweep/{{task}}/{{scheme}}/seeds{_seeds}.log"),
            benchmark:
                results(f"benchmarks/sweep/{{task}}/{{scheme}}/seeds{_seeds}.tsv")
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
                eval=as_json(lgconfig.eval_slice(CONFIG)),
                expect=block_tokens(_block),
                code=task_code("evaluate"),
            shell:
                "python -m lengthgen sweep --model {input.models:q} --data {input.data:q} --eval {params.eval:q}"
                " --expect {params.expect:q} --out {output:q} 2> {log:q}"
