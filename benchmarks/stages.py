"""Stage rates at 1 torch thread: data generation (examples/s) and evaluation (examples/s per
test length), median over rounds that alternate between the cases.

Generation, per task kind of the embedded default config:
  train_64    the task's generate_train for 100,000 examples of length 64, in memory
              (sparse_parity: k of the default's first task; the target is under 2 s)
  stage_64    the same through datasets.generate: columns, Arrow table, Parquet write
  train_split the default's first task of that kind, train split, as the `generate` rule runs it
  test_split  its test split (drawn per (n, k), then rows seen in training dropped)
Evaluation: a model of the E1 default size per scheme, random init, saved in the checkpoint
format lengthgen.evaluate.load_model reads, then the same batches length_sweep runs
(train.step_loss under no_grad, eval batch size) on the default test set, timed per length;
and one end-to-end evaluate.length_sweep call (load, every length, Parquet write).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from common import ROOT, Options, Section, md_table, median, set_threads, timed

NAME = "stages"
TITLE = "Stage rates: data generation and evaluation (1 thread)"
SCHEMES = ["rope", "alibi", "nope", "ape"]


def default_config() -> dict:
    from lengthgen import config as lgconfig

    raw = lgconfig.load_yaml(ROOT / "config.yaml")
    return lgconfig.validate(raw, lgconfig.load_yaml(ROOT / "workflow" / "schemas" / "config.schema.yaml"))


def generation(cfg: dict, tmp: Path, quick: bool) -> tuple[list[dict], dict]:
    from lengthgen import config as lgconfig
    from lengthgen import datasets, tasks

    rounds = 1 if quick else 3
    cases, sizes, test_paths = {}, {}, {}
    for kind in dict.fromkeys(t["kind"] for t in cfg["tasks"]):
        module = tasks.get(kind)
        task = next(t for t in cfg["tasks"] if t["kind"] == kind)
        tr = lgconfig.data_slice(cfg, task["name"], "train")
        te = lgconfig.data_slice(cfg, task["name"], "test")
        train_path, test_path = tmp / f"{kind}_train.parquet", tmp / f"{kind}_test.parquet"
        test_paths[kind] = (test_path, task)
        p64 = {**tr["params"], "n_min": 64, "n_max": 64}
        big = {**tr, "params": p64, "train_examples": 100_000}
        cases[(kind, "train_64")] = lambda m=module, p=p64: m.generate_train(p, 100_000, np.random.default_rng(0))
        cases[(kind, "stage_64")] = lambda b=big: datasets.generate(b, "train", b["seed"], tmp / "big.parquet")
        cases[(kind, "train_split")] = lambda s=tr, o=train_path: datasets.generate(s, "train", s["seed"], o)
        cases[(kind, "test_split")] = lambda s=te, o=test_path, t=train_path: datasets.generate(
            s, "test", s["seed"], o, train_path=t)
        sizes[(kind, "train_64")] = sizes[(kind, "stage_64")] = (100_000, "n = 64, " + _params(p64))
        sizes[(kind, "train_split")] = (tr["train_examples"], f"{task['name']}: " + _params(tr["params"]))
        n_test = te["eval"]["examples"] * len(te["eval"]["lengths"]) * len(module.eval_k(te["params"], te["eval"]))
        sizes[(kind, "test_split")] = (n_test, f"{task['name']}: lengths {te['eval']['lengths']}")
    times = {k: [] for k in cases}
    for _ in range(rounds):
        for key, fn in cases.items():  # train_split runs before test_split, which reads it
            times[key].append(timed(fn))
    rows = []
    for (kind, case), t in times.items():
        n, what = sizes[(kind, case)]
        s = median(t)
        rows.append({"kind": kind, "case": case, "what": what, "examples": n, "runs": len(t),
                     "seconds_median": s, "seconds_min": min(t), "examples_per_s": n / s})
    return rows, test_paths


def _params(p: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in p.items() if v is not None and k not in ("n_min", "n_max")) + (
        f", n in [{p['n_min']}, {p['n_max']}]" if p["n_min"] != p["n_max"] else "")


def save_random_checkpoint(path: Path, cfg: dict, task: dict, scheme: str, vocab: list[str], meta: dict) -> None:
    """An E1-size model at random init, in the format lengthgen.evaluate.load_model reads."""
    from lengthgen.model import ModelConfig, Transformer

    torch.manual_seed(0)
    mcfg = ModelConfig(vocab_size=len(vocab), encoding=cfg["schemes"][scheme]["encoding"], **task["model"])
    model = Transformer(mcfg)
    torch.save({
        "model_args": mcfg.to_dict(),
        "state_dict": model.state_dict(),
        "cell": {"task": task["name"], "scheme": scheme, "seed": 0},
        "task": {k: meta[k] for k in ("task", "kind", "params", "vocab")},
    }, path)


def evaluation(cfg: dict, tmp: Path, test_paths: dict, quick: bool) -> tuple[list[dict], list[dict]]:
    from lengthgen import datasets
    from lengthgen.evaluate import length_sweep, load_model
    from lengthgen.train import step_loss

    rounds = 1 if quick else 3
    schemes = ["rope"] if quick else SCHEMES
    limit = 200 if quick else 500  # examples per length
    batch_size = cfg["eval"]["batch_size"]
    dev = torch.device("cpu")
    rows, e2e = [], []
    for kind, (test_path, task) in test_paths.items():
        table, meta = datasets.read(test_path)
        arrays = datasets.padded(table)
        lengths = sorted(set(int(x) for x in arrays["length"]))
        batches = {}
        for n in lengths:
            idx = np.flatnonzero(arrays["length"] == n)[:limit]
            batches[n] = [
                {k: torch.from_numpy(np.asarray(arrays[k][idx[s:s + batch_size]], dtype=np.int64))
                 for k in ("tokens", "positions", "seq_len", "answer_start")}
                for s in range(0, len(idx), batch_size)
            ]
        models = {}
        for scheme in schemes:
            path = tmp / f"{kind}_{scheme}.pt"
            save_random_checkpoint(path, cfg, task, scheme, meta["vocab"], meta)
            models[scheme] = (load_model(path, dev)[0], path)

        def run(model, bs):
            with torch.no_grad():
                for b in bs:
                    step_loss(model, b, dev)

        for scheme in schemes:  # warm-up
            run(models[scheme][0], batches[lengths[0]][:1])
        times = {(s, n): [] for s in schemes for n in lengths}
        for _ in range(rounds):
            for s in schemes:
                for n in lengths:
                    times[(s, n)].append(timed(lambda m=models[s][0], bs=batches[n]: run(m, bs)))
        for (s, n), t in times.items():
            count = sum(len(b["tokens"]) for b in batches[n])
            med = median(t)
            rows.append({"kind": kind, "scheme": s, "length": n, "tokens_per_example": int(batches[n][0]["seq_len"][0]),
                         "examples": count, "runs": len(t), "seconds_median": med, "examples_per_s": count / med,
                         "tokens_per_s": count * int(batches[n][0]["seq_len"][0]) / med})
        # one end-to-end length_sweep, as the rule runs it (load, all lengths, write)
        scheme = schemes[0]
        eval_cfg = {"device": "cpu", "threads": 1, **cfg["eval"]}
        seconds = timed(lambda p=models[scheme][1], d=test_path, e=eval_cfg: length_sweep(
            p, d, tmp / "sweep.parquet", e, log=lambda *a: None))
        total = len(arrays["length"])
        e2e.append({"kind": kind, "scheme": scheme, "examples": total, "seconds": seconds,
                    "examples_per_s": total / seconds})
    return rows, e2e


def run(opts: Options) -> Section:
    set_threads(1)
    cfg = default_config()
    with tempfile.TemporaryDirectory(prefix="lengthgen-bench-stages-") as d:
        tmp = Path(d)
        gen_rows, test_paths = generation(cfg, tmp, opts.quick)
        eval_rows, e2e = evaluation(cfg, tmp, test_paths, opts.quick)
    rows = ([{"stage": "generate", **r} for r in gen_rows] + [{"stage": "evaluate", **r} for r in eval_rows]
            + [{"stage": "length_sweep", **r} for r in e2e])
    target = [r for r in gen_rows if r["case"] == "train_64" and r["kind"] == "sparse_parity"]
    verdict = ""
    if target:
        s = target[0]["seconds_median"]
        verdict = (f"100,000 sparse_parity examples of length 64: **{s:.2f} s** in memory "
                   f"({'meets' if s < 2 else 'misses'} the < 2 s target).")
    # evaluation: one column per scheme, one row per length
    by_len = {}
    for r in eval_rows:
        by_len.setdefault((r["kind"], r["length"]), {"kind": r["kind"], "length": r["length"],
                                                     "examples": r["examples"]})[r["scheme"]] = r["examples_per_s"]
    schemes = list(dict.fromkeys(r["scheme"] for r in eval_rows))
    md = "\n\n".join(filter(None, [
        "Generation (median of alternating rounds; examples/s):",
        md_table(gen_rows, [("kind", "task"), ("case", "case"), ("what", "what"), ("examples", "examples"),
                            ("seconds_median", "s (median)"), ("examples_per_s", "examples/s")]),
        verdict,
        f"Evaluation, E1 default size at random init (examples/s per test length; eval batch size "
        f"{cfg['eval']['batch_size']}; a test example of length n is n + 3 tokens):",
        md_table(list(by_len.values()), [("kind", "task"), ("length", "length n"), ("examples", "examples"),
                                         *[(s, s) for s in schemes]]),
        "End to end `evaluate.length_sweep` (load checkpoint and test set, every length, write Parquet): " + "; ".join(
            f"{r['kind']}/{r['scheme']}: {r['examples']:,} examples in {r['seconds']:.2f} s = "
            f"{r['examples_per_s']:,.0f} examples/s" for r in e2e) + ".",
    ]))
    return Section(NAME, TITLE, rows, md)
