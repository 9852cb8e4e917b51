"""Hardware limit: dense square matmul rate (GFLOP/s) with torch on this CPU.

One n x n by n x n product is 2 n^3 FLOP. For every (dtype, threads, n) the product is
repeated for about `target` seconds per run; runs of all configurations alternate, and the
rate is the median over rounds. The best fp32 run at a thread count (any size) is the ceiling
that training utilization (train_throughput) is divided by.
"""

from __future__ import annotations

import torch
from common import Options, Section, calibrate, md_table, median, native_bf16, set_threads, timed

NAME = "matmul_ceiling"
TITLE = "Hardware limit: dense matmul rate"
THREADS_NOTE = ("A 2-thread rate close to (or below) the 1-thread rate means the second core was busy with "
                "other jobs during the measurement: OpenMP threads wait for each other at every product.")
MAX_CALL_S = 1.0  # a configuration whose single product would take longer is skipped (emulated bf16)


def _configs(quick: bool, threads: list[int]):
    sizes = [256, 512, 1024] if quick else [256, 512, 1024, 2048]
    return [(dtype, t, n) for dtype in (torch.float32, torch.bfloat16) for t in threads for n in sizes]


def measure(quick: bool, threads: list[int]) -> list[dict]:
    target = 0.03 if quick else 0.15
    rounds = 3 if quick else 5
    torch.manual_seed(0)
    plan, skipped = [], []
    rate_seen: dict = {}  # (dtype, threads) -> GFLOP/s of the previous size, to predict the next
    for dtype, t, n in _configs(quick, threads):
        flop = 2.0 * n**3
        prev = rate_seen.get((dtype, t))
        if prev and flop / (prev * 1e9) > MAX_CALL_S:
            skipped.append({"dtype": str(dtype).removeprefix("torch."), "threads": t, "n": n,
                            "note": f"skipped: one product would take ~{flop / (prev * 1e9):.0f} s "
                                    f"at the {prev:.2f} GFLOP/s measured one size down"})
            continue
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        set_threads(t)
        a @ b  # warm-up (allocations, kernel choice)
        calls, one = calibrate(lambda a=a, b=b: a @ b, target)
        rate_seen[(dtype, t)] = flop / one / 1e9
        plan.append((dtype, t, n, a, b, calls))

    rates: dict = {(d, t, n): [] for d, t, n, *_ in plan}
    for _ in range(rounds):  # alternate: every configuration once per round
        for dtype, t, n, a, b, calls in plan:
            set_threads(t)
            seconds = timed(lambda a=a, b=b: a @ b, calls)
            rates[(dtype, t, n)].append(2.0 * n**3 * calls / seconds / 1e9)
    rows = []
    for dtype, t, n, _a, _b, calls in plan:
        r = rates[(dtype, t, n)]
        rows.append({
            "dtype": str(dtype).removeprefix("torch."), "threads": t, "n": n, "calls_per_run": calls,
            "runs": len(r), "gflops_median": median(r), "gflops_min": min(r), "gflops_max": max(r), "note": "",
        })
    return rows + skipped


def ceilings(rows: list[dict]) -> dict[int, float]:
    """Best fp32 rate per thread count: the fastest run of any size. Contention from other jobs
    only ever slows a run down, so the best run is the closest estimate of what the hardware
    can do; a median would fold the machine's load into the ceiling (and utilization above it)."""
    out: dict[int, float] = {}
    for row in rows:
        if row["dtype"] == "float32" and "gflops_max" in row:
            out[row["threads"]] = max(out.get(row["threads"], 0.0), float(row["gflops_max"]))
    return out


def bf16_note(rows: list[dict]) -> str:
    """What the bf16 rows say about this CPU, read from the measurement (machines differ: an AVX2
    core emulates bf16 at about 1 GFLOP/s, an AMX core runs it several times faster than fp32)."""
    best = {d: max((float(r["gflops_median"]) for r in rows if r["dtype"] == d and "gflops_median" in r), default=0.0)
            for d in ("float32", "bfloat16")}
    if not best["float32"] or not best["bfloat16"]:
        return ""
    native = ", ".join(native_bf16()) or "none listed in /proc/cpuinfo"
    if best["bfloat16"] < best["float32"]:
        return (f"bf16 reaches {best['bfloat16']:.2f} GFLOP/s against fp32's {best['float32']:.0f} here (best "
                f"median of either; native bf16 instructions: {native}), so CPU training stays in fp32 "
                "(`device.autocast` is a no-op on CPU).")
    return (f"bf16 reaches {best['bfloat16'] / best['float32']:.1f}x the fp32 rate here (best median of either; "
            f"native bf16 instructions: {native}). CPU training still stays in fp32 (`device.autocast` is a "
            "no-op on CPU): the small models' steps gain little or lose (cpu_bf16), and the tables would "
            "depend on a CPU feature. Utilization is divided by the fp32 ceiling, the precision training runs in.")


def run(opts: Options) -> Section:
    rows = measure(opts.quick, opts.threads)
    ceil = ceilings(rows)
    opts.context["ceiling"] = ceil
    measured = [r for r in rows if "gflops_median" in r]
    table = md_table(measured, [("dtype", "dtype"), ("threads", "threads"), ("n", "n"),
                                ("gflops_median", "GFLOP/s (median)"), ("gflops_min", "min"),
                                ("gflops_max", "max"), ("runs", "runs")])
    skipped = [f"- {r['dtype']}, {r['threads']} thread(s), n={r['n']}: {r['note']}" for r in rows if r.get("note")]
    ceil_text = ", ".join(f"**{v:.1f} GFLOP/s at {t} thread{'s' if t > 1 else ''}**" for t, v in sorted(ceil.items()))
    md = "\n\n".join(filter(None, [
        "Dense `a @ b` of two n x n tensors (2 n^3 FLOP), median (and min, max) of alternating runs of every "
        "configuration. Ceiling used for utilization = the best fp32 run at each thread count (other jobs only "
        "ever slow a run down, so the best run is the closest estimate of the hardware's rate): " + ceil_text + ".",
        table,
        ("Skipped:\n" + "\n".join(skipped)) if skipped else "",
        " ".join(filter(None, [bf16_note(rows), THREADS_NOTE])),
    ]))
    return Section(NAME, TITLE, rows, md)
