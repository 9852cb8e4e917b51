"""A compiled language-model step against the pipeline's eager one (1 thread).

Fusing the elementwise kernels is the lever the profile leaves for the language models' steps
(`profile_stages`): here `torch.compile` (inductor, the default mode) compiles the blocks
(`Transformer.features`) of a long and a short model at the embedded default's sizes, and the
pipeline's step (`lm._step`: forward, chunked loss, backward, clip, fused AdamW) runs eager and
compiled from the same initial weights on the same batches, in alternating blocks of 10 steps.
Reported: the first step (the compile, into an empty cache: what a training job would pay), the
median ms per step and their ratio, and how far the compiled model's weights have moved from the
eager one's after those steps (fusion changes the rounding, so every language table would move).
"""

from __future__ import annotations

import os
import tempfile
import time

import torch
from common import Options, Section, md_table, median, set_threads

NAME = "compiled_step"
TITLE = "A compiled language-model step (torch.compile of the blocks) against eager (1 thread)"


def _trainer(cfg: dict, name: str, compiled: bool):
    from lengthgen import config as lgconfig
    from lengthgen.language import lm
    from lengthgen.training.optim import adamw

    spec = lgconfig.lm_slice(cfg, name, cfg["language"]["seeds"][0])
    torch.manual_seed(0)
    model = lm.build(spec, cfg["language"]["tokenizer"]["vocab_size"])
    if compiled:
        model.features = torch.compile(model.features)
    return model, adamw(model, spec["train"]), spec


def measure(cfg: dict, stream, name: str, rounds: int, block: int = 10) -> dict:
    from lengthgen.language import lm

    dev, runs, first = torch.device("cpu"), {}, {}
    for compiled in (False, True):
        model, opt, spec = _trainer(cfg, name, compiled)
        start = time.perf_counter()
        lm._step(model, opt, stream, 0, spec, dev)
        first[compiled], runs[compiled] = time.perf_counter() - start, (model, opt)
    times, step = {False: [], True: []}, 1
    for _ in range(rounds):
        for compiled, (model, opt) in runs.items():
            start = time.perf_counter()
            for i in range(block):
                lm._step(model, opt, stream, step + i, spec, dev)
            times[compiled].append((time.perf_counter() - start) / block)
        step += block
    eager, fused = (dict(runs[c][0].named_parameters()) for c in (False, True))
    moved = max((eager[k] - fused[k]).abs().max().item() for k in eager)
    return {"model": name, "compile_s": first[True], "eager_ms": 1000 * median(times[False]),
            "compiled_ms": 1000 * median(times[True]), "speedup": median(times[False]) / median(times[True]),
            "steps": step, "max_weight_diff": moved}


def run(opts: Options) -> Section:
    from stages import default_config, language_setup

    set_threads(1)
    cfg = default_config()
    if not cfg.get("language"):
        return Section(NAME, TITLE, [], "The embedded default has no language stage.")
    stream = language_setup(cfg)[1]
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # compile from scratch, as a fresh job does
        rows = [measure(cfg, stream, name, 2 if opts.quick else 4) for name in ("long", "short")]
    columns = [("model", "model"), ("compile_s", "first step, compiled (s)"), ("eager_ms", "eager ms/step"),
               ("compiled_ms", "compiled ms/step"), ("speedup", "eager / compiled time"),
               ("steps", "steps each"), ("max_weight_diff", "max weight difference after them")]
    text = ("Medians of alternating blocks of 10 steps after each side's first step; a ratio above 1 means "
            "the compiled step is faster.\n\n" + md_table(rows, columns))
    return Section(NAME, TITLE, rows, text)
