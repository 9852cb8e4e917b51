"""bf16 autocast on the CPU: would it pay for training steps on this machine?

CPU training runs in fp32 (`device.autocast` is a no-op on CPU). On a CPU with native bf16
(AMX, avx512_bf16) matmuls run several times faster in bf16 (matmul_ceiling), so this measures
what that is worth for whole steps: the language models' step `lm._step` (forward, chunked
next-token loss, backward, clip, fused AdamW) in fp32 and under `torch.autocast("cpu",
bfloat16)`, alternating, 1 thread, at three sizes: the E1 model's (its layers and widths, but
this step, not E1's own packed, answer-only one), the language default's model (E4) and
train_throughput's language size. Skipped where /proc/cpuinfo lists no native bf16: bf16 is
emulated there at about 1 GFLOP/s, and one step would take minutes.
"""

from __future__ import annotations

import time

from common import Options, Section, alternate, lm_spec, md_table, median, native_bf16, set_threads

NAME = "cpu_bf16"
TITLE = "bf16 autocast on the CPU (1 thread)"
# name: (n_layer, d_model, n_head, d_ff, vocab, context, batch), as the pipeline's configs set them
SIZES = {
    "lm_step_at_e1_size": (2, 64, 4, 256, 7, 23, 64),
    "language_default": (4, 128, 4, 512, 2048, 128, 16),
    "language": (4, 256, 4, 1024, 4096, 256, 16),
}


def _stepper(size: str, dtype: str, steps: int):
    """A run: `steps` timed steps of a fresh model (after one untimed), median seconds per step."""
    import numpy as np
    import torch

    from lengthgen.language import lm
    from lengthgen.training.optim import adamw

    n_layer, d_model, n_head, d_ff, vocab, context, batch = SIZES[size]
    model_cfg = dict(n_layer=n_layer, d_model=d_model, n_head=n_head, d_ff=d_ff, dropout=0.0, max_position=1024)
    spec = lm_spec(model_cfg, context, batch)
    stream = np.random.default_rng(0).integers(0, vocab, 100_000).astype(np.int32)
    torch.manual_seed(0)
    model = lm.build(spec, vocab)
    opt = adamw(model, spec["train"])
    dev = torch.device("cpu")

    def run() -> float:
        times = []
        # the step's own `device.autocast` is a no-op on CPU, so an outer autocast reaches it as is
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            for step in range(steps + 1):
                start = time.perf_counter()
                lm._step(model, opt, stream, step, spec, dev)
                times.append(time.perf_counter() - start)
        return median(times[1:])

    return run


def run(opts: Options) -> Section:
    native = native_bf16()
    if not native:
        return Section(NAME, TITLE, [], "Skipped: /proc/cpuinfo lists no native bf16 (amx_bf16, avx512_bf16) "
                                         "here, so bf16 would be emulated and a step would take minutes.")
    set_threads(1)
    rounds, steps = (2, 3) if opts.quick else (5, 5)
    rows = []
    for size in SIZES:
        got = alternate({dtype: _stepper(size, dtype, steps) for dtype in ("fp32", "bf16")}, rounds)
        n_layer, d_model, _, d_ff, vocab, context, batch = SIZES[size]  # for the table's columns
        fp32, bf16 = median(got["fp32"]), median(got["bf16"])
        rows.append({"size": size, "shape": f"{n_layer} x {d_model}, d_ff {d_ff}, vocab {vocab}",
                     "tokens_per_step": context * batch, "fp32_ms": fp32 * 1e3, "bf16_ms": bf16 * 1e3,
                     "bf16_min_ms": min(got["bf16"]) * 1e3, "bf16_max_ms": max(got["bf16"]) * 1e3,
                     "fp32_min_ms": min(got["fp32"]) * 1e3, "fp32_max_ms": max(got["fp32"]) * 1e3,
                     "speedup": fp32 / bf16, "runs": rounds, "steps_per_run": steps})
    table = md_table(rows, [("size", "size"), ("shape", "model"), ("tokens_per_step", "tokens/step"),
                            ("fp32_ms", "fp32 ms/step"), ("bf16_ms", "bf16 ms/step"), ("speedup", "fp32 / bf16"),
                            ("runs", "runs"), ("steps_per_run", "steps/run")])
    note = (f"Native bf16 here: {', '.join(native)}. `lm._step` at each size, fp32 against bf16 autocast "
            "(the softmax and loss stay fp32, as under CUDA), runs alternating, median of each run's median "
            "step. The pipeline keeps CPU training in fp32: see docs/performance-archive.md for why.")
    return Section(NAME, TITLE, rows, note + "\n\n" + table)
