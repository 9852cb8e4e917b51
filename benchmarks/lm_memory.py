"""Memory of one language-model training step at the paper's E4 size, per token of the batch.

The model of config/paper.yaml's `language` (6 layers, d_model 512, 8 heads, d_ff 2048, GPT-2's
50,257 tokens, context 1,024), one step of `lm._step` on random tokens, fp32 on the CPU. Each case
runs in a fresh process, which first takes one step on one window (so parameters, gradients and
AdamW's state exist) and then reports how far its peak resident memory rose during one step on
the whole batch: the activations and the loss's own tensors. Cases: the loss before this
project's chunked next-token loss (F.cross_entropy on the whole batch's logits, the step as the
pipeline took it until then), the pipeline's step, and the pipeline's step in micro-batches.
The rise per 1,000 tokens, times 131.072, is what a 131,072-token step of paper.yaml would add
in fp32; under CUDA's bf16 autocast the activations are smaller (not measured: no GPU here).
"""

from __future__ import annotations

import json
import subprocess
import sys

from common import BENCH, SRC, Options, Section, lm_spec, md_table, median

NAME = "lm_memory"
TITLE = "Language-model memory at the paper's size (one training step, CPU, fp32)"
PAPER = dict(n_layer=6, d_model=512, n_head=8, d_ff=2048, dropout=0.0, max_position=2048)
VOCAB, CONTEXT, PAPER_TOKENS = 50257, 1024, 131072
CASES = {"before": "F.cross_entropy on the whole logits (the step before the chunked loss)",
         "pipeline": "lm._step: the chunked next-token loss", "micro": "lm._step, micro_batch_tokens 1,024"}


def _child(case: str, tokens: int) -> dict:
    """In the child process: one warm-up step on one window, then the measured step."""
    import resource
    import time

    import numpy as np
    import torch
    import torch.nn.functional as F

    from lengthgen.language import lm
    from lengthgen.training.optim import adamw

    torch.set_num_threads(2)
    spec = lm_spec(PAPER, CONTEXT, tokens // CONTEXT, CONTEXT if case == "micro" else None)
    train = spec["train"]
    torch.manual_seed(0)
    model = lm.build(spec, VOCAB)
    opt = adamw(model, train)
    stream = np.random.default_rng(0).integers(0, VOCAB, 200_000).astype(np.uint16)

    def before(model, opt, stream, step, spec, dev):  # the step as lm._step took it before
        x, ids = lm.training_batch(stream, step, spec, 0)
        loss = F.cross_entropy(model(x[:, :-1], ids).float().flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    step = before if case == "before" else lm._step
    warm = {**spec, "train": {**train, "batch_size": 1}}
    step(model, opt, stream, 0, warm, torch.device("cpu"))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    step(model, opt, stream, 1, spec, torch.device("cpu"))
    seconds = time.perf_counter() - start
    rise = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 2**20  # KiB -> GiB
    state = sum(p.numel() for p in model.parameters()) * 4 * 4 / 2**30  # fp32 weights, gradients, two moments
    return {"case": case, "tokens": tokens, "rise_gib": rise, "step_s": seconds, "state_gib": state}


def measure(case: str, tokens: int) -> dict:
    code = (f"import sys, json; sys.path[:0] = [{str(SRC)!r}, {str(BENCH)!r}]; import lm_memory; "
            f"print(json.dumps(lm_memory._child({case!r}, {tokens})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(opts: Options) -> Section:
    plan = [(c, 2048) for c in ("before", "pipeline")] + [(c, 4096) for c in CASES]
    if opts.quick:
        plan = [("before", 1024), ("pipeline", 1024)]
    rounds = 1 if opts.quick else 2
    runs = {key: [] for key in plan}
    for _ in range(rounds):  # alternating, each case in its own process
        for case, tokens in plan:
            runs[(case, tokens)].append(measure(case, tokens))
    rows = []
    for (case, tokens), got in runs.items():
        rise = median(r["rise_gib"] for r in got)
        per_token = rise / tokens if case != "micro" else float("nan")  # a micro-batch's, not the batch's
        rows.append({"case": case, "what": CASES[case], "tokens": tokens, "runs": len(got), "rise_gib": rise,
                     "gib_per_1k_tokens": per_token * 1000, "paper_step_gib": per_token * PAPER_TOKENS,
                     "step_s": median(r["step_s"] for r in got)})
    table = md_table(rows, [("case", "case"), ("what", "what"), ("tokens", "tokens"), ("rise_gib", "peak rise GiB"),
                            ("gib_per_1k_tokens", "GiB per 1,000 tokens"),
                            ("paper_step_gib", "x 131,072 tokens (GiB)"), ("step_s", "step s (one run)"),
                            ("runs", "runs")])
    state = runs[plan[0]][0]["state_gib"]
    note = ("Peak resident memory rise of one step (median of the runs; each run a fresh process at 2 threads), "
            f"on top of the parameters, their gradients and AdamW's state ({state:.2f} GiB together at this size "
            "in fp32). Per 1,000 tokens and scaled to paper.yaml's 131,072-token step for whole batches; with "
            "micro-batches the rise follows the micro-batch, not the batch (paper.yaml sets "
            "`micro_batch_tokens: 32768`, a quarter of its step).")
    return Section(NAME, TITLE, rows, note + "\n\n" + table)
