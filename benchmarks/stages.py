"""Stage rates at 1 torch thread: data generation (examples/s), evaluation (examples/s and
answer tokens/s per test length) and influential-token scoring (screened tokens/s, targets/s per
method), median over rounds that alternate between the cases.

Generation, per task kind of the embedded default config (its first task of that kind):
  train_64    the task's generate_train for 100,000 examples of length 64, in memory
              (sparse_parity: k of the default's first task; variable_assignment: at least
              64 variables; the target is under 2 s for sparse_parity)
  stage_64    the same through datasets.generate: columns, Arrow table, Parquet write
  train_split the default's first task of that kind, train split, as the `generate` rule runs it
  test_split  its test split (drawn per test group: length x k, length x depth or length,
              then rows seen in training dropped)
Evaluation, per task kind and per scheme the default config runs on that task: a model of the
task's default size with the scheme's options (position head, pointer), random init, saved
in the checkpoint format lengthgen.evaluation.sweep.load_model reads, then evaluate._group_metrics,
the autoregressive decoding length_sweep runs, on each test group of the default test set
(eval batch size), timed per length; and one end-to-end evaluate.length_sweep call per kind
(load, every group, Parquet write).
Scoring, E4's influential tokens (language.influence), when the default config has a `language`
section: models of the default language size at random init (the cost of a forward pass does not
depend on the weights, so no training) and a random token stream (fixed seed), timed through the
functions influence.score runs for one pair of models: screen (L_long and L_short, tokens/s)
and, for one chunk of targets_per_batch targets, each method through the function _score_chunk
calls (targets/s): greedy up to the largest k, its null control (greedy again among another
document's distant tokens), attention (its order, then the loss at each k), random_losses
(random_draws draws at each k > 1; k = 1 comes free from greedy's first step) and, per short
model, short_model_losses (window alone, then the greedy tokens at true and at coupled IDs).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from common import ROOT, Options, Section, alternate, calibrate, md_table, median, set_threads, timed

NAME = "stages"
TITLE = "Stage rates: data generation, evaluation and influential-token scoring (1 thread)"
N_BIG = 100_000  # examples of the train_64 / stage_64 cases


def default_config() -> dict:
    from lengthgen import config as lgconfig

    raw = lgconfig.load_yaml(ROOT / "config.yaml")
    return lgconfig.validate(raw, lgconfig.load_yaml(ROOT / "workflow" / "schemas" / "config.schema.yaml"))


def params_at_64(kind: str, params: dict) -> dict:
    """The task's parameters with every training example of length 64."""
    p = {**params, "n_min": 64, "n_max": 64}
    if kind == "variable_assignment":  # each variable is assigned once: 64 statements need 64 names
        p["variables"] = max(p["variables"], 64)
        p["depth_max"] = min(p["depth_max"], 64)
        p["depth_min"] = min(p["depth_min"], p["depth_max"])
    return p


def test_groups(module, params: dict, eval_cfg: dict) -> tuple[int, str]:
    """Test groups per length (the task's GROUP axes besides length) and a description."""
    ks = module.eval_k(params, eval_cfg)
    if ks:
        return len(ks), f"k {ks}"
    if "depth" in module.GROUP:
        depths = list(range(params["depth_min"], params["depth_max"] + 1))
        return len(depths), f"depths {depths}"
    return 1, ""


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
        p64 = params_at_64(kind, tr["params"])
        module.check(p64, {**te["eval"], "lengths": [64]}, f"{NAME}.{kind}.train_64")
        big = {**tr, "params": p64, "train_examples": N_BIG}
        cases[(kind, "train_64")] = lambda m=module, p=p64: m.generate_train(p, N_BIG, np.random.default_rng(0))
        cases[(kind, "stage_64")] = lambda b=big: datasets.generate(b, "train", b["seed"], tmp / "big.parquet")
        cases[(kind, "train_split")] = lambda s=tr, o=train_path: datasets.generate(s, "train", s["seed"], o)
        cases[(kind, "test_split")] = lambda s=te, o=test_path, t=train_path: datasets.generate(
            s, "test", s["seed"], o, train_path=t)
        sizes[(kind, "train_64")] = sizes[(kind, "stage_64")] = (N_BIG, "n = 64, " + _params(p64))
        sizes[(kind, "train_split")] = (tr["train_examples"], f"{task['name']}: " + _params(tr["params"]))
        groups, axes = test_groups(module, te["params"], te["eval"])
        n_test = te["eval"]["examples"] * len(te["eval"]["lengths"]) * groups
        sizes[(kind, "test_split")] = (n_test, f"{task['name']}: lengths {te['eval']['lengths']}"
                                       + (f" x {axes}" if axes else ""))
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


def _mean(total: int, count: int) -> int | float:
    return total // count if total % count == 0 else total / count


def save_random_checkpoint(path: Path, cfg: dict, task: dict, scheme: str, meta: dict) -> None:
    """A model of the task's default size with the scheme's options (encoding, position head,
    pointer), at random init, in the format lengthgen.evaluation.sweep.load_model reads; its cell
    carries the scheme options length_sweep decodes with."""
    from lengthgen import config as lgconfig
    from lengthgen.training.train import build_model

    cell = lgconfig.cell_slice(cfg, task["name"], scheme, 0)
    torch.manual_seed(0)
    model = build_model(cell, len(meta["vocab"]))  # ModelConfig from the scheme options, as training does
    torch.save({
        "model_args": model.cfg.to_dict(),
        "state_dict": model.state_dict(),
        "cell": cell,
        "task": {k: meta[k] for k in ("task", "kind", "params", "vocab")},
    }, path)


def evaluation(cfg: dict, tmp: Path, test_paths: dict, quick: bool) -> tuple[list[dict], list[dict]]:
    from lengthgen import datasets, tasks
    from lengthgen.evaluation.sweep import _group_metrics, length_sweep, load_model

    rounds = 1 if quick else 3
    limit = 200 if quick else 500  # examples per test group
    batch_size = cfg["eval"]["batch_size"]
    dev = torch.device("cpu")
    rows, e2e = [], []
    for kind, (test_path, task) in test_paths.items():
        schemes = task["schemes"][:1] if quick else list(task["schemes"])
        table, meta = datasets.read(test_path)
        arrays = datasets.padded(table)
        eos = meta["vocab"].index("<eos>") if "<eos>" in meta["vocab"] else -1
        group = tasks.get(kind).GROUP
        keys = np.stack([arrays[g] for g in group], axis=1)
        groups = {}  # length -> [indices of one test group, at most `limit`], as length_sweep splits them
        for key in np.unique(keys, axis=0):
            idx = np.flatnonzero((keys == key).all(axis=1))[:limit]
            groups.setdefault(int(key[0]), []).append(idx)
        lengths = sorted(groups)
        models = {}
        for scheme in schemes:
            path = tmp / f"{kind}_{scheme}.pt"
            save_random_checkpoint(path, cfg, task, scheme, meta)
            models[scheme] = (load_model(path, dev)[0], path, task["scheme_options"][scheme])

        def decode(scheme, idxs, models=models, arrays=arrays, eos=eos):
            """What length_sweep runs on these test groups: greedy decoding, then scoring."""
            model, _, opts = models[scheme]
            for idx in idxs:
                _group_metrics(model, arrays, idx, opts, eos, batch_size, dev)

        for scheme in schemes:  # warm-up
            decode(scheme, [groups[lengths[0]][0][:8]])
        times = {(s, n): [] for s in schemes for n in lengths}
        for _ in range(rounds):
            for s in schemes:
                for n in lengths:
                    times[(s, n)].append(timed(lambda s=s, idxs=groups[n], f=decode: f(s, idxs)))
        for (s, n), t in times.items():
            idx = np.concatenate(groups[n])
            count = len(idx)
            tokens = int(arrays["seq_len"][idx].sum())
            answer = int((arrays["seq_len"][idx] - arrays["answer_start"][idx]).sum())
            med = median(t)
            rows.append({"kind": kind, "scheme": s, "length": n, "tokens_per_example": _mean(tokens, count),
                         "answer_tokens_per_example": _mean(answer, count), "groups": len(groups[n]),
                         "examples": count, "runs": len(t), "seconds_median": med, "examples_per_s": count / med,
                         "tokens_per_s": tokens / med, "answer_tokens_per_s": answer / med})
        # one end-to-end length_sweep, as the rule runs it (load, all groups, write)
        scheme = schemes[0]
        eval_cfg = {"device": "cpu", "threads": 1, **cfg["eval"]}
        seconds = timed(lambda p=models[scheme][1], d=test_path, e=eval_cfg: length_sweep(
            p, d, tmp / "sweep.parquet", e, log=lambda *a: None))
        total = len(arrays["length"])
        e2e.append({"kind": kind, "scheme": scheme, "examples": total, "seconds": seconds,
                    "examples_per_s": total / seconds})
    return rows, e2e


def language_setup(cfg: dict) -> tuple:
    """Random-init models of every language model the config trains, a random token stream in
    1,024-token documents (fixed seed) and the influence config, as score_influence gets them."""
    from lengthgen import config as lgconfig
    from lengthgen.language import lm, tokenizer

    lang = cfg["language"]  # vocab_size is the bpe's; gpt2 brings its own
    vocab = lang["tokenizer"]["vocab_size"] if lang["tokenizer"]["kind"] == "bpe" else tokenizer.GPT2_VOCAB_SIZE
    models, seed = {}, lang["seeds"][0]  # one pair: the scoring job's unit
    for name in lang["models"]:
        torch.manual_seed(seed)
        models[name] = lm.build(lgconfig.lm_slice(cfg, name, seed), vocab).eval()  # eval, as lm.load returns it
    rng = np.random.default_rng(0)
    stream = rng.integers(0, vocab, 16 * 1024).astype(np.uint16)  # tokenize writes uint16 at these sizes
    doc_starts = np.arange(0, len(stream), 1024)
    return models, stream, doc_starts, lgconfig.influence_slice(cfg, seed)


def model_tokens(method: str, cfg: dict, k_max: int) -> int:
    """Sequence tokens one target (screen: one screened token) sends through a model under
    `method`, from the shapes influence.py builds: for comparing with the training rate."""
    t_long, t_short, ks = cfg["T_long"], cfg["T_short"], cfg["influence"]["k"]
    per_k = sum(t_short + k for k in ks)  # loss_with: the window plus k distant tokens, each k
    if method == "screen":
        return t_long + t_short
    if method in ("greedy", "null"):  # step j: every free candidate of the distant part, j + 1 tokens added
        return sum((t_long - t_short - j) * (t_short + j + 1) for j in range(k_max))
    if method == "attention":  # the long model's attention, then the loss at each k
        return t_long + per_k
    if method == "random":  # each draw: the loss at each k > 1
        return cfg["influence"]["random_draws"] * sum(t_short + k for k in ks if k > 1)
    return t_short + 2 * per_k  # a short model: its window alone, then each k at true and coupled IDs


def scoring_cases(models: dict, stream, doc_starts, cfg: dict, quick: bool) -> tuple[dict, list, int, int]:
    """Name -> call, each the function influence._score_chunk calls for it; warm-up calls of the
    two slow ones at a small scale; the targets of one chunk and the screened tokens. Targets are
    drawn among the eligible tokens, not by gap: random models have no gap, and the cost does
    not depend on which tokens are chosen."""
    from lengthgen.language import influence

    icfg = cfg["influence"]
    ks, batch, long = sorted(icfg["k"]), icfg["batch_size"], models["long"]
    n_screen = 64 if quick else icfg["batch_size"]  # full: one forward batch of the real screen
    n_targets = 1 if quick else icfg["targets_per_batch"]  # full: one chunk of the pipeline
    pool = influence.eligible(doc_starts, len(stream), cfg["T_long"])
    picks = np.random.default_rng(1).choice(pool, 2 * n_targets, replace=False)
    c = influence.Contexts(stream, np.sort(picks[:n_targets]), cfg["T_long"], cfg["T_short"])
    null = c.with_distant(influence.Contexts(stream, picks[n_targets:], cfg["T_long"], cfg["T_short"]))
    rng = np.random.default_rng(icfg["seed"])
    # the short models score greedy's latest choice; until greedy first runs, a random one
    state = {"chosen": torch.from_numpy(rng.permuted(np.tile(np.arange(c.d), (n_targets, 1)), axis=1))[:, : max(ks)]}

    def run_greedy():
        state["chosen"] = influence.greedy(long, c, max(ks), batch)[0]

    def run_screen(n):
        influence.screen(long, stream, doc_starts, {**cfg, "influence": {**icfg, "screen": n}})

    def run_attention():
        order = influence.attention_order(long, c)
        return [influence.loss_with(long, c, order[:, :k], batch) for k in ks]

    cases = {"screen": lambda: run_screen(n_screen), "greedy": run_greedy,
             "null": lambda: influence.greedy(long, null, max(ks), batch)}
    if "attention" in icfg["methods"]:
        cases["attention"] = run_attention
    if "random" in icfg["methods"]:
        cases["random"] = lambda: influence.random_losses(long, c, [k for k in ks if k > 1], icfg["random_draws"],
                                                          batch, rng)
    cases |= {name: lambda m=model: influence.short_model_losses(m, c, state["chosen"], ks, icfg["coupling"], batch)
              for name, model in models.items() if name != "long"}
    warm_up = [lambda: run_screen(8), lambda: influence.greedy(long, c, 1, batch)]  # k = 1: an eighth
    return cases, warm_up, n_targets, n_screen


def scoring_what(name: str, cfg: dict) -> str:
    ks = sorted(cfg["influence"]["k"])
    if name == "screen":
        return "influence.screen: L_long and L_short of each token"
    if name == "greedy":
        return f"influence.greedy up to k = {max(ks)}"
    if name == "null":
        return f"influence.greedy up to k = {max(ks)} among another document's distant tokens"
    if name == "attention":
        return f"influence.attention_order, then the loss at k {ks}"
    if name == "random":
        return f"influence.random_losses, {cfg['influence']['random_draws']} draws at k {[k for k in ks if k > 1]}"
    return (f"{name} model, influence.short_model_losses: window alone, greedy tokens at k {ks} at true and "
            f"{cfg['influence']['coupling']} IDs")


def scoring(cfg: dict, quick: bool) -> list[dict]:
    """Screen and each method of influence scoring, alternating over rounds: medians of rates."""
    models, stream, doc_starts, icfg = language_setup(cfg)
    cases, warm_up, n_targets, n_screen = scoring_cases(models, stream, doc_starts, icfg, quick)
    for fn in warm_up:  # the fast cases are warmed up by calibrate
        fn()
    # the fast ones (milliseconds) repeat within a run, so that a run is long enough to time
    repeats = {name: 1 if name in ("screen", "greedy") else calibrate(fn, 0.05 if quick else 0.3)[0]
               for name, fn in cases.items()}
    times = alternate({name: lambda fn=fn, r=repeats[name]: timed(fn, r) / r for name, fn in cases.items()},
                      1 if quick else 3)
    k_max, rows = max(icfg["influence"]["k"]), []
    for name, t in times.items():
        items, unit = (n_screen, "tokens") if name == "screen" else (n_targets, "targets")
        s = median(t)
        rows.append({"method": name, "what": scoring_what(name, icfg), "items": items, "unit": unit,
                     "runs": len(t), "repeats": repeats[name], "seconds_median": s, "seconds_min": min(t),
                     "per_s": items / s, "model_tokens_per_s": items * model_tokens(name, icfg, k_max) / s})
    return rows


def run(opts: Options) -> Section:
    set_threads(1)
    cfg = default_config()
    with tempfile.TemporaryDirectory(prefix="lengthgen-bench-stages-") as d:
        tmp = Path(d)
        gen_rows, test_paths = generation(cfg, tmp, opts.quick)
        eval_rows, e2e = evaluation(cfg, tmp, test_paths, opts.quick)
    score_rows = scoring(cfg, opts.quick) if cfg["language"] else []  # language: null runs no E4
    rows = ([{"stage": "generate", **r} for r in gen_rows] + [{"stage": "evaluate", **r} for r in eval_rows]
            + [{"stage": "length_sweep", **r} for r in e2e] + [{"stage": "score", **r} for r in score_rows])
    target = [r for r in gen_rows if r["case"] == "train_64" and r["kind"] == "sparse_parity"]
    verdict = ""
    if target:
        s = target[0]["seconds_median"]
        verdict = (f"100,000 sparse_parity examples of length 64: **{s:.2f} s** in memory "
                   f"({'meets' if s < 2 else 'misses'} the < 2 s target).")
    # evaluation: one column per scheme (those the task runs), one row per (task, length)
    by_len, tok_len = {}, {}
    for r in eval_rows:
        head = {"kind": r["kind"], "length": r["length"], "examples": r["examples"],
                "tokens": r["tokens_per_example"], "answer": r["answer_tokens_per_example"]}
        by_len.setdefault((r["kind"], r["length"]), dict(head))[r["scheme"]] = r["examples_per_s"]
        tok_len.setdefault((r["kind"], r["length"]), dict(head))[r["scheme"]] = r["answer_tokens_per_s"]
    schemes = list(dict.fromkeys(r["scheme"] for r in eval_rows))
    columns = [("kind", "task"), ("length", "length n"), ("examples", "examples"),
               ("tokens", "tokens/example"), ("answer", "answer tokens/example"), *[(s, s) for s in schemes]]
    md = "\n\n".join(filter(None, [
        "Generation (median of alternating rounds; examples/s):",
        md_table(gen_rows, [("kind", "task"), ("case", "case"), ("what", "what"), ("examples", "examples"),
                            ("seconds_median", "s (median)"), ("examples_per_s", "examples/s")]),
        verdict,
        f"Evaluation, autoregressive decoding (`evaluate._group_metrics`, as `length_sweep` runs it) of a "
        f"model of each task's default size at random init, one column per scheme the default runs on the "
        f"task (a blank: not run); eval batch size {cfg['eval']['batch_size']}, every test group of a length "
        f"(k or depth), at most {200 if opts.quick else 500} examples each. Examples/s:",
        md_table(list(by_len.values()), columns),
        "Answer tokens decoded per second (the first from the prompt's forward pass, each later one from "
        "a cached one-token step):",
        md_table(list(tok_len.values()), columns),
        "End to end `evaluate.length_sweep` (load checkpoint and test set, every group, write Parquet): " + "; ".join(
            f"{r['kind']}/{r['scheme']}: {r['examples']:,} examples in {r['seconds']:.2f} s = "
            f"{r['examples_per_s']:,.0f} examples/s" for r in e2e) + ".",
        scoring_markdown(score_rows, cfg, opts.quick),
    ]))
    return Section(NAME, TITLE, rows, md)


def scoring_markdown(rows: list[dict], cfg: dict, quick: bool) -> str:
    if not rows:
        return "Scoring (influential tokens): not run (the default config has no `language` section)."
    lang, icfg = cfg["language"], cfg["language"]["influence"]
    size = ", ".join(f"{k} {lang['model'][k]}" for k in ("n_layer", "d_model", "n_head", "d_ff"))
    methods = [r for r in rows if r["unit"] == "targets"]
    per_target = sum(r["seconds_median"] / r["items"] for r in methods)  # every method, as _score_chunk
    screen = next(r for r in rows if r["method"] == "screen")
    total = f"; one pair's screen of {icfg['screen']:,} tokens and {icfg['targets']} targets would take " \
        f"{icfg['screen'] / screen['per_s'] + icfg['targets'] * per_target:.0f} s, and the default scores " \
        f"{len(lang['seeds'])} pairs" if icfg["screen"] else ""
    return "\n\n".join([
        f"Scoring (influential tokens), E4's `language.influence` at the default language size ({size}, "
        f"vocab {lang['tokenizer']['vocab_size']}, T_long {lang['T_long']}, T_short {lang['T_short']}, "
        f"batch size {icfg['batch_size']}) with models at random init (a forward pass costs the same "
        f"whatever the weights: no training) on a random token stream. Screen: tokens/s; each method: one "
        f"chunk of {methods[0]['items']} target{'s' * (methods[0]['items'] > 1)} "
        f"({'quick mode' if quick else 'targets_per_batch'}), targets/s, the short models shown the greedy "
        f"tokens. Sequence tokens/s: tokens of the sequences the method builds (from their shapes) per second:",
        md_table(rows, [("method", "method"), ("what", "what"), ("items", "items"), ("unit", "unit"),
                        ("repeats", "calls/run"), ("seconds_median", "s (median)"), ("per_s", "per s"),
                        ("model_tokens_per_s", "sequence tokens/s")]),
        f"Every method of a chunk, as `influence._score_chunk` runs them: {per_target:.2f} s per target = "
        f"**{1 / per_target:.2f} targets/s**{total} at 1 thread.",
    ])
