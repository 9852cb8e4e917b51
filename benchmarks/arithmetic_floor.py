"""The language stage's arithmetic floor: the FLOPs one pair (a long and a short model trained,
then scored) must execute in fp32, and the least time they take at this machine's fp32 rate.

No implementation of the same computations can run a pair faster than its floor, whatever it
fuses, batches or compiles: the floor is the FLOPs of the products alone, at the best rate a
1,024 x 1,024 product reaches on one thread here (every other operator only adds). The counter
has no formula for the CPU's fused attention kernel, so attention is left out: the true floor is
higher.
A speed-up beyond it needs fewer FLOPs (fewer steps, screened tokens, targets or candidates: a
change of design) or a cheaper precision (bf16 on a CPU that has it natively).

Counted with torch.utils.flop_counter.FlopCounterMode on the code the jobs run, at the embedded
default's sizes (models at random init: the FLOPs do not depend on the weights), then scaled:
  train   one step of each model (lm._step: forward, backward), times max_steps
  screen  influence.screen on one forward batch, times screen / batch_size
  chunk   influence._score_chunk on targets_per_batch targets (greedy, its null control, the
          short model's losses, attention, random draws), times targets / targets_per_batch
With `--results DIR` the measured job-seconds per pair of a run are set beside the floor.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
from common import ROOT, Options, Section, md_table, set_threads
from torch.utils.flop_counter import FlopCounterMode

NAME = "arithmetic_floor"
TITLE = "The language stage's arithmetic floor: FLOPs a pair executes, and its least time here (1 thread)"


def flops(fn) -> int:
    """FLOPs torch counts in one call of fn (its products)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def ceiling(rounds: int = 7) -> float:
    """The best fp32 GFLOP/s of a 1,024 x 1,024 product on this thread (other jobs only slow it)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(8):
            a @ b
        best = min(best, (time.perf_counter() - start) / 8)
    return 2 * 1024**3 / best / 1e9


def pair_flops(cfg: dict) -> dict:
    """{part: FLOPs of one pair}, each part's unit counted once and scaled to the pair's count."""
    from stages import language_setup

    from lengthgen import config as lgconfig
    from lengthgen.language import influence, lm
    from lengthgen.training.optim import adamw

    models, stream, doc_starts, icfg = language_setup(cfg)
    inf, out = icfg["influence"], {}
    for name in ("long", "short"):
        spec = lgconfig.lm_slice(cfg, name, cfg["language"]["seeds"][0])
        model = lm.build(spec, cfg["language"]["tokenizer"]["vocab_size"])
        opt = adamw(model, spec["train"])
        out[f"train {name}"] = spec["train"]["max_steps"] * flops(
            lambda m=model, o=opt, sp=spec: lm._step(m, o, stream, 0, sp, torch.device("cpu")))
    batch = {**icfg, "influence": {**inf, "screen": inf["batch_size"]}}
    out["score: screen"] = inf["screen"] / inf["batch_size"] * flops(
        lambda: influence.screen(models["long"], stream, doc_starts, batch))
    pool = influence.eligible(doc_starts, len(stream), icfg["T_long"])
    rng = np.random.default_rng(1)
    picks, donors = (np.sort(rng.choice(pool, inf["targets_per_batch"], replace=False)) for _ in range(2))
    c = influence.Contexts(stream, picks, icfg["T_long"], icfg["T_short"])
    null = c.with_distant(influence.Contexts(stream, donors, icfg["T_long"], icfg["T_short"]))
    shorts = {name: m for name, m in models.items() if name != "long"}
    out["score: the targets"] = inf["targets"] / inf["targets_per_batch"] * flops(
        lambda: influence._score_chunk(models["long"], shorts, c, null, sorted(inf["k"]), inf, rng))
    return out


def measured(results) -> dict:
    """Median job-seconds of each language job kind in a run's benchmark files (None if absent)."""
    from job_seconds import job_seconds

    by_stage = job_seconds(results)
    kinds = {"train long": "train_long", "train short": "train_short", "score": "score_influence"}
    return {part: statistics.median(by_stage[("language", job)]) if by_stage.get(("language", job)) else None
            for part, job in kinds.items()}


def run(opts: Options) -> Section:
    from stages import default_config

    set_threads(1)
    counted = pair_flops(default_config())
    top = ceiling()
    jobs = measured(ROOT / "results")
    rows = [{"part": part, "gflop": f / 1e9, "floor_s": f / 1e9 / top,
             "measured_s": jobs["score" if part.startswith("score") else part]} for part, f in counted.items()]
    total = sum(counted.values())
    rows.append({"part": "the pair", "gflop": total / 1e9, "floor_s": total / 1e9 / top,
                 "measured_s": sum(v for v in jobs.values() if v) if all(jobs.values()) else None})
    columns = [("part", "part"), ("gflop", "GFLOP"), ("floor_s", "floor (s)"),
               ("measured_s", "median job-seconds in results/ (score: both parts)")]
    text = (f"fp32 ceiling {top:.1f} GFLOP/s (best 1,024 x 1,024 product, 1 thread). The floor is the "
            "counted FLOPs at that rate: no exact implementation of these computations runs faster here.\n\n"
            + md_table(rows, columns))
    return Section(NAME, TITLE, rows, text)
