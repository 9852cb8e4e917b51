"""What bounds each costly stage: torch.profiler at 1 thread on the units the jobs repeat.

Units (the embedded default config; models at random init, since a step costs the same whatever
the weights; each cell on its own task's training set, generated here):
  train E1 / E2 / E3   one training step of a cell (training.train.CellTrainer.step: the batch,
                       its IDs, forward, loss, backward, clip, AdamW), one case per scheme
  train language       one step of the long and of the short language model (lm._step)
  score greedy         influence.greedy up to the largest k for one chunk of targets_per_batch
                       targets (the null control costs the same: greedy again)
  score screen         influence.screen of one forward batch (L_long and L_short)
  sweep E3             the length sweep's decoding (evaluate._group_metrics) of E3's tests at 4x

Each unit is timed alone (median of alternating rounds), then profiled once. Its wall time is
split into the operators' self time by kind: matmul (addmm, mm, bmm, matmul, linear), attention
(the fused scaled-dot-product kernels), elementwise and norms (GELU, layer norm, softmax, add,
mul, copies, ...), the optimizer (the fused AdamW kernel) and other operators; what remains of
the wall time ran outside any operator (Python, dispatch, data indexing). The matmul rate
(profiler FLOP counts / matmul self time) against the fp32 ceiling measured in the same process
says whether the products themselves run near the hardware's rate.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from common import Options, Section, alternate, md_table, median, set_threads, timed
from stages import default_config, language_setup

NAME = "profile_stages"
TITLE = "What bounds each stage: operator time by kind, and the matmul rate (1 thread)"
KINDS = {
    "matmul": ("aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm"),
    "attention": ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math",
                  "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    "optimizer": ("aten::_fused_adamw_",),
    "elementwise": ("aten::gelu", "aten::gelu_backward", "aten::native_layer_norm",
                    "aten::native_layer_norm_backward", "aten::_softmax", "aten::_log_softmax",
                    "aten::_log_softmax_backward_data", "aten::add", "aten::add_", "aten::mul", "aten::mul_",
                    "aten::copy_", "aten::div", "aten::sub", "aten::where", "aten::cat", "aten::sum", "aten::fill_",
                    "aten::polar", "aten::neg", "aten::clone", "aten::masked_fill", "aten::index",
                    "aten::index_select", "aten::embedding_dense_backward", "aten::nll_loss_forward",
                    "aten::nll_loss_backward", "aten::exp", "aten::mean", "aten::zero_", "aten::threshold"),
}


def _kind(op: str) -> str:
    return next((kind for kind, ops in KINDS.items() if op in ops), "other")


def ceiling(rounds: int = 5) -> float:
    """The best fp32 GFLOP/s of a 1,024 x 1,024 product here (the other jobs only slow it)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    best = 0.0
    for _ in range(rounds):
        seconds = median([timed(lambda: a @ b) for _ in range(3)])
        best = max(best, 2 * 1024**3 / seconds / 1e9)
    return best


def profile_unit(fn) -> dict:
    """Self time (s) of the operators by kind, the matmul FLOPs and the wall time of one call."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        wall = timed(fn)
    out = {kind: 0.0 for kind in (*KINDS, "other")}
    flops = 0
    for event in prof.key_averages():
        kind = _kind(event.key)
        out[kind] += event.self_cpu_time_total / 1e6
        flops += event.flops if kind == "matmul" else 0
    return {**out, "flops": flops, "profiled_wall": wall}


def cell_units(cfg: dict, tmp: Path, quick: bool) -> dict:
    """name -> one training step of the default's cell of that task and scheme."""
    from lengthgen import config as lgconfig
    from lengthgen import datasets, tasks
    from lengthgen.training import train as training

    units = {}
    for kind in ("sparse_parity", "scratchpad_parity", "variable_assignment"):
        task = next((t for t in cfg["tasks"] if t["kind"] == kind), None)
        if task is None:
            continue
        data_slice = lgconfig.data_slice(cfg, task["name"], "train")
        path = tmp / f"{kind}.parquet"
        datasets.generate(data_slice, "train", data_slice["seed"], path)
        for scheme in task["schemes"][:1] if quick else task["schemes"]:
            cell = lgconfig.cell_slice(cfg, task["name"], scheme, 0)
            data, meta = training.load_training_data(path, cell)
            gaps = tasks.get(kind).gap_after(cell["scheme_options"]["positions"] == "coupled")
            torch.manual_seed(0)
            model = training.build_model(cell, len(meta["vocab"]))
            trainer = training.CellTrainer(cell, data, meta, gaps, model, torch.device("cpu"), tmp, "")
            steps = iter(range(10**9))
            units[f"train {task['name']} {scheme}"] = lambda t=trainer, s=steps: t.step(next(s))
    return units


def language_units(cfg: dict) -> dict:
    from lengthgen import config as lgconfig
    from lengthgen.language import influence, lm
    from lengthgen.training.optim import adamw

    if not cfg.get("language"):
        return {}
    models, stream, doc_starts, icfg = language_setup(cfg)
    units = {}
    for name in ("long", "short"):
        spec = lgconfig.lm_slice(cfg, name, cfg["language"]["seeds"][0])
        model = lm.build(spec, cfg["language"]["tokenizer"]["vocab_size"]).train()
        opt, steps = adamw(model, spec["train"]), iter(range(10**9))
        units[f"train language {name}"] = lambda m=model, o=opt, s=steps, sp=spec: lm._step(
            m, o, stream, next(s), sp, torch.device("cpu"))
    inf = icfg["influence"]
    pool = influence.eligible(doc_starts, len(stream), icfg["T_long"])
    picks = np.sort(np.random.default_rng(1).choice(pool, inf["targets_per_batch"], replace=False))
    c = influence.Contexts(stream, picks, icfg["T_long"], icfg["T_short"])
    units["score greedy (one chunk)"] = lambda: influence.greedy(models["long"], c, max(inf["k"]), inf["batch_size"])
    screen_cfg = {**icfg, "influence": {**inf, "screen": inf["batch_size"]}}
    units["score screen (one batch)"] = lambda: influence.screen(models["long"], stream, doc_starts, screen_cfg)
    return units


def sweep_unit(cfg: dict, tmp: Path) -> dict:
    """E3's decoding at 4x (its judged length): one test group's examples, as length_sweep runs them."""
    from stages import save_random_checkpoint

    from lengthgen import config as lgconfig
    from lengthgen import datasets
    from lengthgen.evaluation.sweep import _group_metrics, load_model

    task = next((t for t in cfg["tasks"] if t["kind"] == "variable_assignment"), None)
    if task is None:
        return {}
    tr, te = (lgconfig.data_slice(cfg, task["name"], split) for split in ("train", "test"))
    train_path, test_path = tmp / "e3_train.parquet", tmp / "e3_test.parquet"
    datasets.generate(tr, "train", tr["seed"], train_path)
    datasets.generate(te, "test", te["seed"], test_path, train_path=train_path)
    table, meta = datasets.read(test_path)
    arrays = datasets.padded(table)
    scheme = task["schemes"][-1]
    save_random_checkpoint(tmp / "e3.pt", cfg, task, scheme, meta)
    model = load_model(tmp / "e3.pt", torch.device("cpu"))[0]
    length = sorted(te["eval"]["lengths"])[min(2, len(te["eval"]["lengths"]) - 1)]
    idx = np.flatnonzero(np.asarray(arrays["length"]) == length)[: cfg["eval"]["batch_size"]]
    eos = meta["vocab"].index("<eos>") if "<eos>" in meta["vocab"] else -1
    opts = task["scheme_options"][scheme]
    return {f"sweep {task['name']} {scheme} n={length}": lambda: _group_metrics(
        model, arrays, idx, opts, eos, cfg["eval"]["batch_size"], torch.device("cpu"))}


def run(opts: Options) -> Section:
    set_threads(1)
    cfg = default_config()
    with tempfile.TemporaryDirectory() as tmp:
        units = {**cell_units(cfg, Path(tmp), opts.quick), **language_units(cfg), **sweep_unit(cfg, Path(tmp))}
        for fn in units.values():
            fn()  # warm-up
        rounds = 1 if opts.quick else 3
        times = alternate({name: (lambda f=fn: timed(f)) for name, fn in units.items()}, rounds)
        top = ceiling(2 if opts.quick else 5)
        rows = []
        for name, fn in units.items():
            p = profile_unit(fn)
            wall = median(times[name])
            ops = sum(p[k] for k in (*KINDS, "other"))
            share = {k: p[k] / p["profiled_wall"] for k in (*KINDS, "other")}
            rate = p["flops"] / p["matmul"] / 1e9 if p["matmul"] else float("nan")
            rows.append({"unit": name, "ms": 1000 * wall, **{f"{k}_pct": 100 * v for k, v in share.items()},
                         "outside_pct": 100 * max(0.0, 1 - ops / p["profiled_wall"]),
                         "matmul_gflops": rate, "ceiling_gflops": top, "matmul_util_pct": 100 * rate / top})
    columns = [("unit", "unit"), ("ms", "ms (median)"), ("matmul_pct", "matmul %"), ("attention_pct", "attention %"),
               ("elementwise_pct", "elementwise, norms %"), ("optimizer_pct", "AdamW %"), ("other_pct", "other ops %"),
               ("outside_pct", "outside ops %"), ("matmul_gflops", "matmul GFLOP/s"),
               ("matmul_util_pct", "of ceiling %")]
    text = (f"Shares of each unit's profiled wall time by operator kind; fp32 ceiling {top:.0f} GFLOP/s "
            f"(best 1,024 x 1,024 product here). Wall times are medians of {rounds} alternating round(s); "
            "profiling adds a little to every operator.\n\n" + md_table(rows, columns))
    return Section(NAME, TITLE, rows, text)
