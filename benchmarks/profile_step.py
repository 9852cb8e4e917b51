"""Where the time of one training step goes: torch.profiler on our model at the language size.

One step (forward, loss, backward, clip, AdamW) of lengthgen.Transformer (rope) after warm-up,
at 1 thread, profiled on the CPU; the table lists the top operators by self CPU time. In full
mode the Llama reference of the same size is profiled too, for comparison.
"""

from __future__ import annotations

import torch
from common import Options, Section, md_table, set_threads, timed
from torch.profiler import ProfilerActivity, profile
from train_throughput import SIZES, build_ours, build_reference, make_step

NAME = "profile_step"
TITLE = "Profile of one training step (language size, 1 thread)"
TOP = 15


def profile_one(build, size: dict, encoding: str) -> tuple[list[dict], float]:
    torch.manual_seed(0)
    model, loss_fn, _ = build(size, encoding)
    step = make_step(model, loss_fn, size)
    timed(step, 1)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:TOP]
    rows = [{
        "op": e.key, "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1000,
        "self_pct": 100 * e.self_cpu_time_total / total if total else 0.0, "cpu_total_ms": e.cpu_time_total / 1000,
    } for e in top]
    return rows, total / 1000


def run(opts: Options) -> Section:
    set_threads(1)
    size = SIZES["language"]
    targets = [("ours", build_ours, "rope")]
    if not opts.quick:
        targets.append(("llama", build_reference, "rope"))
    rows, parts = [], []
    for label, build, encoding in targets:
        top, total_ms = profile_one(build, size, encoding)
        rows += [{"model": label, "encoding": encoding, **r} for r in top]
        parts.append(f"**{label}** ({encoding}), self CPU time of all ops {total_ms:,.0f} ms "
                     f"(profiling adds overhead; compare shares, not totals):\n\n"
                     + md_table(top, [("op", "op"), ("calls", "calls"), ("self_cpu_ms", "self ms"),
                                      ("self_pct", "self %"), ("cpu_total_ms", "total ms (incl. children)")]))
    return Section(NAME, TITLE, rows, "\n\n".join(parts))
