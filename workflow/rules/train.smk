# Training: one job per (task, scheme, seed) cell, or with stacking (`stack` > 1, or `auto` on
# CUDA) one job per fixed block of seeds of a (task, scheme), trained as one stacked model and
# writing every seed's files.
# The resumable checkpoint lives outside the declared outputs (Snakemake deletes those before a
# rerun) and is removed on success.

import re
import shlex
from argparse import Namespace

if not SEED_BLOCKS:

    rule train:
        input:
            training_set,
        output:
            model=results("runs/{task}/{scheme}/seed{seed}/model.pt"),
            train_log=results("runs/{task}/{scheme}/seed{seed}/train_log.parquet"),
            meta=results("runs/{task}/{scheme}/seed{seed}/meta.json"),
        log:
            results("logs/train/{task}/{scheme}/seed{seed}.log"),
        benchmark:
            results("benchmarks/train/{task}/{scheme}/seed{seed}.tsv")
        priority: train_priority
        conda:
            ENV
        threads: CONFIG["threads"]
        resources:
            gpu=GPU,
        params:
            cell=lambda w: as_json(lgconfig.cell_slice(CONFIG, w.task, w.scheme, int(w.seed))),
            checkpoint=results("checkpoints/{task}/{scheme}/seed{seed}/last.pt"),
            out_dir=subpath(output.model, parent=True),
            code=task_code("train"),
        shell:
            "python -m lengthgen train --cell {params.cell:q} --data {input:q} --out-dir {params.out_dir:q}"
            " --checkpoint {params.checkpoint:q} --code-digest {params.code} 2> {log:q}"

else:
    # One rule per seed block (its seeds are in its output paths, so not a wildcard), limited to
    # the tasks whose seeds form that block. A block's params are its own cells only: adding
    # seeds adds blocks and leaves full blocks cached.
    for _block, _tasks in SEED_BLOCKS.items():
        _seeds = "-".join(map(str, _block))

        rule:
            name:
                f"train_seeds_{_seeds.replace('-', '_')}"
            input:
                # in the block's seed order, one per seed (one in all when shared)
                lambda w, block=_block: list(dict.fromkeys(training_set(Namespace(task=w.task, seed=s)) for s in block)),
            output:
                models=[results(f"runs/{{task}}/{{scheme}}/seed{s}/model.pt") for s in _block],
                train_logs=[results(f"runs/{{task}}/{{scheme}}/seed{s}/train_log.parquet") for s in _block],
                metas=[results(f"runs/{{task}}/{{scheme}}/seed{s}/meta.json") for s in _block],
            log:
                results(f"logs/train/{{task}}/{{scheme}}/seeds{_seeds}.log"),
            benchmark:
                results(f"benchmarks/train/{{task}}/{{scheme}}/seeds{_seeds}.tsv")
            wildcard_constraints:
                task="|".join(re.escape(t) for t in _tasks),
            priority: train_priority
            conda:
                ENV
            threads: CONFIG["threads"]
            resources:
                gpu=GPU,
                # under SLURM: profiles/slurm's set-resources name rules, not these per-block ones.
                # Each seed holds its own padded training set (about 2.5 GB at paper.yaml's 2 million
                # E1 examples), so memory grows with the block.
                runtime=lambda w, attempt: 240 * attempt,
                mem_mb=lambda w, block=_block: 2000 + 3000 * len(block),
            params:
                cells=lambda w, block=_block: as_json([lgconfig.cell_slice(CONFIG, w.task, w.scheme, s) for s in block]),
                checkpoint=results(f"checkpoints/{{task}}/{{scheme}}/seeds{_seeds}/last.pt"),
                out_dirs=lambda w, output: " ".join(shlex.quote(str(Path(m).parent)) for m in output.models),
                code=task_code("train_stack"),
            shell:
                "python -m lengthgen train-stack --cells {params.cells:q} --data {input:q}"
                " --out-dirs {params.out_dirs} --checkpoint {params.checkpoint:q} --code-digest {params.code} 2> {log:q}"
