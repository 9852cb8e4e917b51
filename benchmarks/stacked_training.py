"""Stacked training against one model at a time: the pipeline's real training steps (data order,
packing, position IDs, loss, clipping, fused AdamW) of M seeds of one (task, scheme).

Three ways to step M models, runs alternating in one process, each run a few steps of all M:
  alone  M separate one-model steps (`step.cell_step` of one), as M training jobs would take them
  bmm    one step of the stack with a leading model axis (`step.cell_step` of M; the pipeline's)
  batch  one model on an M times larger batch: not M models, the bound of what amortizing a step's
         fixed cost could give (M models' matrices stay M products of one model's shape)
A stacked model follows the steps it takes alone (tests/training/test_stacked.py), so models trained to
early stop per minute scale as model-steps per second: the ratios below are those ratios, leaving
out the start of a job (paid once per block instead of once per model: job_start). Utilization:
6 N + 6 n_layer T d FLOPs per real token (T: the batch's mean length; padding not counted) over
the fp32 matmul ceiling (matmul_ceiling). On CUDA, when present, the same under bf16 autocast.
"""

from __future__ import annotations

import tempfile

import torch
from common import ROOT, Options, Section, alternate, md_table, median, set_threads, timed

NAME = "stacked_training"
TITLE = "Stacked training: M seeds as one batched model vs one at a time"

MODEL = {"n_layer": 2, "d_model": 64, "n_head": 4, "d_ff": 256, "dropout": 0.0}
SIZES = {  # config.yaml's E1 and E2 settings (E1 at k = 2, E2's ppc scheme)
    "e1": ("sparse_parity", {"k": 2, "k_mode": "fixed", "n_min": 3, "n_max": 12}, {"encoding": "rope"},
           {**MODEL, "max_position": 1024}),
    "e2": ("scratchpad_parity", {"n_min": 2, "n_max": 16},
           {"encoding": "rope", "positions": "coupled", "position_head": "pointer",
            "gaps": {"fraction": 0.5, "max_cuts": 1}},
           {**MODEL, "max_position": 256}),
}


def _cells(size: str, m: int, device: str, path, **params) -> tuple[list[dict], dict]:
    import copy

    from lengthgen import config as lgconfig
    from lengthgen import datasets

    schema = lgconfig.load_yaml(ROOT / "workflow/schemas/config.schema.yaml")
    kind, defaults, options, model = copy.deepcopy(SIZES[size])
    params = {**defaults, **params}
    lgconfig.fill_defaults(params, schema["$defs"][f"{kind}_params"], schema)
    lgconfig.fill_defaults(options, schema["$defs"]["scheme"], schema)
    train = {"batch_size": 64}
    lgconfig.fill_defaults(train, schema["$defs"]["train"], schema)
    datasets.generate({"name": size, "kind": kind, "train_examples": 4000, "params": params}, "train", 1, path)
    cells = [{"task": size, "scheme": "bench", "seed": s, "scheme_options": options, "model": model, "train": train,
              "device": device, "threads": 1} for s in range(m)]
    return cells, model


def _steppers(size: str, m: int, dev: torch.device, steps: int, tmp) -> tuple[dict, float]:
    """A run per way of stepping (seconds per step of all M models), and real tokens per model-step."""
    from lengthgen import tasks
    from lengthgen.training import stacked
    from lengthgen.training.optim import adamw
    from lengthgen.training.step import cell_step
    from lengthgen.training.train import build_model, load_training_data, training_batch

    cells, _ = _cells(size, m, dev.type, f"{tmp}/{size}.parquet")
    data, meta = load_training_data(f"{tmp}/{size}.parquet", cells[0])
    opts = cells[0]["scheme_options"]
    gaps = tasks.get(meta["kind"]).gap_after(opts["positions"] == "coupled")
    vocab = len(meta["vocab"])
    models = [build_model(c, vocab).to(dev) for c in cells]
    optims = [adamw(model, c["train"]) for model, c in zip(models, cells, strict=True)]
    stack_models = stacked.Stack([build_model(c, vocab).to(dev) for c in cells], 0.01)
    clock = {"step": 0}

    def alone() -> None:
        for model, opt, cell in zip(models, optims, cells, strict=True):
            batch = training_batch(data, clock["step"], cell, gaps)
            cell_step(model, opt, [batch], 1e-3, 1.0, dev, opts)

    def stack() -> None:
        batches = [training_batch(data, clock["step"], cell, gaps) for cell in cells]
        cell_step(stack_models.model, stack_models.opt, batches, 1e-3, 1.0, dev, opts)

    big = {**cells[0], "train": {**cells[0]["train"], "batch_size": 64 * m}}
    big_model = build_model(big, vocab).to(dev)
    big_opt = adamw(big_model, big["train"])

    def batch() -> None:
        b = training_batch(data, clock["step"], big, gaps)
        cell_step(big_model, big_opt, [b], 1e-3, 1.0, dev, opts)

    def run(fn):
        def timed_run() -> float:
            clock["step"] += 1  # each run on fresh batches
            if dev.type == "cuda":
                torch.cuda.synchronize()
            seconds = timed(fn, steps)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            return seconds / steps
        return timed_run

    runs = {"alone": run(alone), "bmm": run(stack), "batch": run(batch)}
    tokens = float(sum((training_batch(data, s, cells[0], gaps)["seq_len"] - 1).sum() for s in range(20))) / 20
    return runs, tokens


def _flop_per_token(size: str, mean_len: float) -> float:
    _, _, _, model = SIZES[size]
    d, f, n_layer = model["d_model"], model["d_ff"], model["n_layer"]
    n = n_layer * (4 * d * d + 2 * d * f)  # attention and MLP matrices; the heads are tiny here
    return 6 * n + 6 * n_layer * mean_len * d


def measure(dev: torch.device, m: int, rounds: int, steps: int, ceiling: float | None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in SIZES:
            runs, tokens = _steppers(size, m, dev, steps, tmp)
            for fn in runs.values():
                fn()  # warm-up
            got = alternate(runs, rounds)
            alone = median(got["alone"])
            mean_len = tokens / 64
            for way, secs in got.items():
                step = median(secs)
                gflops = m * tokens * _flop_per_token(size, mean_len) / step / 1e9
                rows.append({"device": dev.type, "size": size, "way": way, "models": m, "ms_per_step": step * 1e3,
                             "model_steps_per_s": m / step, "tokens_per_s": m * tokens / step,
                             "vs_alone": alone / step, "gflops": gflops, "runs": rounds, "steps_per_run": steps,
                             **({"utilization": gflops / ceiling} if ceiling else {})})
    return rows


def to_early_stop(m: int, rounds: int) -> dict:
    """M E1 models (config.yaml's k = 1 cell: lr 2e-3, early stop at loss 1e-3 for 20 batches)
    trained to early stop, by M `train.train` calls and by one `train_stacked` call, alternating;
    in process, so the start of a job (interpreter, imports) is left out of both."""
    import logging

    from lengthgen.training.stacked import train_stacked
    from lengthgen.training.train import train

    quiet = logging.getLogger("quiet").debug
    with tempfile.TemporaryDirectory() as tmp:
        cells, _ = _cells("e1", m, "cpu", f"{tmp}/e1.parquet", k=1)
        for cell in cells:
            cell["train"].update(lr=2e-3, max_steps=2000, early_stop={"accuracy": 1.0, "loss": 1e-3, "patience": 20})
            cell["scheme_options"]["encoding"] = "none"
        data = f"{tmp}/e1.parquet"
        steps = {}

        def alone() -> float:
            seconds = timed(lambda: [steps.setdefault(c["seed"], train(c, data, f"{tmp}/a{c['seed']}", f"{tmp}/a.pt",
                                                                       log=quiet)["steps"]) for c in cells])
            return seconds

        def stacked() -> float:
            return timed(lambda: train_stacked(cells, data, [f"{tmp}/s{c['seed']}" for c in cells], f"{tmp}/s.pt",
                                               log=quiet))

        got = alternate({"alone": alone, "stacked": stacked}, rounds)
    return {"steps": [steps[c["seed"]] for c in cells], "alone_s": median(got["alone"]),
            "stacked_s": median(got["stacked"]), "rounds": rounds}


def sweep_bound(rounds: int) -> dict:
    """Greedy decoding (what a length sweep runs) per example at the sweeps' batch of 250 against
    4 times that: the bound of what stacking 4 models' sweeps could gain (untrained models; the
    time does not depend on the weights). E1: n = 96, rope, 2 answer tokens; E2: n = 32, ppc."""
    import copy

    from lengthgen import config as lgconfig
    from lengthgen.evaluation import decode
    from lengthgen.model.transformer import ModelConfig, Transformer

    schema = lgconfig.load_yaml(ROOT / "workflow/schemas/config.schema.yaml")
    out = {}
    for size, prompt, answer in (("e1", 99, 2), ("e2", 35, 33)):
        _, _, options, model = copy.deepcopy(SIZES[size])
        lgconfig.fill_defaults(options, schema["$defs"]["scheme"], schema)
        heads = {k: options[k] for k in ("encoding", "position_head")}
        net = Transformer(ModelConfig(vocab_size=8, **heads, **model)).eval()

        def per_example(b: int, net=net, options=options, prompt=prompt, answer=answer) -> float:
            tokens, ids = torch.randint(0, 8, (b, prompt)), torch.arange(prompt).expand(b, prompt)
            oracle = torch.arange(prompt, prompt + answer).expand(b, answer)
            with torch.no_grad():
                return timed(lambda: decode.generate(net, tokens, ids, answer, options, 7, oracle_ids=oracle)) / b

        per_example(250)
        got = alternate({"250": lambda f=per_example: f(250), "1000": lambda f=per_example: f(1000)}, rounds)
        out[size] = (median(got["250"]) * 1e3, median(got["1000"]) * 1e3)
    return out


def run(opts: Options) -> Section:
    set_threads(1)
    ceiling = (opts.context.get("ceiling") or {}).get(1)
    if ceiling is None:
        from train_throughput import ceiling as measured_ceiling

        ceiling = measured_ceiling(opts, 1)[0]
    rounds, steps, m = (3, 2, 4) if opts.quick else (9, 4, 4)
    rows = measure(torch.device("cpu"), m, rounds, steps, ceiling)
    note = [f"{m} models of each size, 1 thread. Ratios are of medians (alternating runs)."]
    if not opts.quick:
        e2e = to_early_stop(m, 3)
        note.append(
            f"To early stop ({m} E1 nope models, k = 1 fixed, n 3-12, steps to stop {e2e['steps']}, in process, "
            f"median of {e2e['rounds']} alternating runs): one at a time {e2e['alone_s']:.1f} s "
            f"({60 * m / e2e['alone_s']:.1f} models/min), stacked {e2e['stacked_s']:.1f} s "
            f"({60 * m / e2e['stacked_s']:.1f} models/min): {e2e['alone_s'] / e2e['stacked_s']:.2f}x.")
        bound = sweep_bound(5)
        note.append("Length sweeps (greedy decoding), ms per example at batch 250 and at 1,000 (the bound of "
                    "stacking 4 models' sweeps): " + ", ".join(
                        f"{size} {a:.3f} and {b:.3f} ({a / b:.2f}x)" for size, (a, b) in bound.items()) + ".")
        rows.append({"device": "cpu", "size": "e1 to early stop", "way": "stacked", "models": m,
                     "vs_alone": e2e["alone_s"] / e2e["stacked_s"], "runs": e2e["rounds"],
                     "alone_s": e2e["alone_s"], "stacked_s": e2e["stacked_s"]})
    if torch.cuda.is_available():
        rows += measure(torch.device("cuda"), 16, rounds, steps, None)  # no GPU ceiling measured: no utilization
        note.append("CUDA: 16 models, bf16 autocast (device.autocast).")
    else:
        note.append("No GPU on this machine: CUDA not measured.")
    table = md_table(rows, [("device", "device"), ("size", "size"), ("way", "way"), ("models", "models"),
                            ("ms_per_step", "ms/step (all models)"), ("model_steps_per_s", "model-steps/s"),
                            ("tokens_per_s", "tokens/s"), ("vs_alone", "x alone"), ("utilization", "utilization")])
    return Section(NAME, TITLE, rows, " ".join(note) + f" fp32 ceiling {ceiling:.1f} GFLOP/s.\n\n" + table)


if __name__ == "__main__":
    import sys

    section = run(Options(quick="--quick" in sys.argv))
    print(section.markdown)
