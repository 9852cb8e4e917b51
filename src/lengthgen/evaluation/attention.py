"""Attention sparsity of one trained cell: does the model attend to, and draw its answer from,
the few tokens each prediction depends on (the task's `dependencies`)?

On the first `examples` test examples of every test group (length, k or depth), teacher
forced with the IDs the scheme reads (coupled IDs for pc and ppc, the true ones), for up to
`targets` scored targets per example (evenly spaced, the last included), it measures at the
predicting position (the one before the target):
  per layer and head, on the attention row over the keys up to that position,
    mass       attention on the dependency set
    topk_mass  the |D| largest weights together (|D|: the dependency set's size)
    entropy    of the row, in nats
    rank       mean rank of the dependency tokens in the row (1 = most attended; ties averaged)
    chance     |D| / keys, the mass of a uniform row
  per model, the same four of a gradient-times-input attribution: |grad . embedding| of the
  target's score for each input token (the token and position embeddings the first block
  reads), normalized over the tokens. The target's score is its logit, or for a scheme that
  copies, the pointer's logit of the prompt token it copies. Attribution follows information
  that attention moves through intermediate positions, which the attention row misses.

Attention comes from the model's written-out forward (`Transformer.features_from` with
`attention`: the fused kernel the model trains with does not return it); the hidden states it
gives must reproduce the fused forward's logits, which every run checks.
"""

from __future__ import annotations

import numpy as np
import torch

from lengthgen import datasets, tasks
from lengthgen.evaluation.sweep import check_match, held_identity, load_model
from lengthgen.model import positions
from lengthgen.support import device as devices
from lengthgen.support import identity, schema
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import write_parquet

METRICS = ("mass", "topk_mass", "entropy", "rank")
# Largest |recomputed - model| logit accepted, relative to the largest |logit| (if > 1). float32
# rounding reached 1.6e-4 on a fitted E1 nope model at n = 192 (1.6e-13 with both sides in float64);
# a real mismatch is of the logits' order.
TOLERANCE = 1e-3


def row_stats(rows: torch.Tensor, query: torch.Tensor, deps: torch.Tensor) -> dict:
    """METRICS of nonnegative rows (R, H, T) that sum to 1 over keys 0..query (R,), against
    dependency indices deps (R, D) (-1: none). Returns name -> (R, H)."""
    t = rows.shape[-1]
    keys = torch.arange(t, device=rows.device)[None, None, :] <= query[:, None, None]  # (R, 1, T)
    valid = deps >= 0
    size = valid.sum(1)  # |D| per row
    dv = rows.gather(2, deps.clamp_min(0)[:, None, :].expand(-1, rows.shape[1], -1))  # (R, H, D)
    mass = (dv * valid[:, None]).sum(-1)
    ordered = rows.sort(-1, descending=True).values.cumsum(-1)
    topk = ordered.gather(2, (size - 1).clamp_min(0)[:, None, None].expand(-1, rows.shape[1], 1))[..., 0]
    entropy = -torch.special.xlogy(rows, rows).sum(-1)
    live = rows.masked_fill(~keys, -1.0)[:, :, None, :]  # keys past the query rank below every real one
    greater = (live > dv[..., None]).sum(-1)
    equal = (live == dv[..., None]).sum(-1)
    rank = 1 + greater + (equal - 1) / 2
    rank = (rank * valid[:, None]).sum(-1) / size.clamp_min(1)[:, None]
    return {"mass": mass, "topk_mass": topk, "entropy": entropy, "rank": rank.float()}


def target_scores(model, h: torch.Tensor, tokens, ids, query, target, pointer, prompt_len: int) -> torch.Tensor:
    """(R,) score of each row's target: the logit of its token, or where `pointer` >= 0 (a
    copying scheme) the pointer's logit of the prompt position it copies from."""
    r = torch.arange(len(query), device=h.device)
    hq = h[r, query]
    score = model.head(hq).gather(1, tokens[r, target][:, None])[:, 0]
    if model.cfg.position_head == "pointer" and bool((pointer >= 0).any()):
        pl = model.pointer_logits(hq[:, None], ids[r, query][:, None], h[:, :prompt_len], ids[:, :prompt_len])[:, 0]
        score = torch.where(pointer >= 0, pl.gather(1, pointer.clamp_min(0)[:, None])[:, 0], score)
    return score


def measure(model, tokens, ids, query, target, deps, pointer, prompt_len: int, check: bool = True) -> dict:
    """Attention and attribution statistics of R rows (one scored target each): tokens, ids
    (R, T); query, target, pointer (R,); deps (R, D). Returns {"attention": name -> (L, R, H),
    "attribution": name -> (R,), "chance": (R,), "logit_error": float}; with `check`, the
    largest difference between the logits recomputed here and the model's own (else 0)."""
    # Nothing after the last query reaches a score (causal), so it is not computed; the targets
    # themselves are read from `tokens` only.
    end = int(query.max()) + 1
    x = model.embed(tokens[:, :end], ids[:, :end]).detach().requires_grad_(True)
    probs = []
    h = model.features_from(x, ids[:, :end], attention=probs)
    score = target_scores(model, h, tokens, ids, query, target, pointer, prompt_len)
    (grad,) = torch.autograd.grad(score.sum(), x)  # rows are independent: each gets its own gradient
    with torch.no_grad():
        error = _logit_error(model.head(h), model(tokens[:, :end], ids[:, :end])) if check else 0.0
        r = torch.arange(len(query), device=x.device)
        per_layer = [row_stats(p[r, :, query], query, deps) for p in probs]
        attention = {m: torch.stack([s[m] for s in per_layer]) for m in METRICS}
        credit = (grad * x).sum(-1).abs()  # (R, T); zero past the query (causal)
        credit = credit / credit.sum(-1, keepdim=True).clamp_min(1e-30)
        attribution = {m: v[:, 0] for m, v in row_stats(credit[:, None], query, deps).items()}
        chance = (deps >= 0).sum(1) / (query + 1)
    return {"attention": attention, "attribution": attribution, "chance": chance, "logit_error": error}


def _logit_error(ours: torch.Tensor, own: torch.Tensor) -> float:
    """Largest difference between recomputed and the model's logits, relative to the largest
    logit when above 1: float32 rounding grows with the logits' scale (a trained E1 model at
    n = 192 differs by 2e-4 on logits of about 20), while a real mismatch is of their order."""
    return float((ours - own).abs().max() / own.abs().max().clamp_min(1.0))


def _picked(deps: list, n: int) -> list:
    """Up to n of an example's scored targets, evenly spaced, the last included."""
    if len(deps) <= n:
        return deps
    return [deps[i] for i in np.unique(np.linspace(0, len(deps) - 1, n).round().astype(int))]


def group_rows(module, arrays: dict, idx: np.ndarray, targets: int, pointer_offset, coupled: bool) -> dict:
    """Tensors of one test group's rows, one per (example, scored target)."""
    starts = {int(arrays["answer_start"][i]) for i in idx}
    ends = {int(arrays["seq_len"][i]) for i in idx}
    if len(starts) != 1 or len(ends) != 1:
        raise UserError("test set: a group mixes prompt or answer lengths; regenerate it")
    end = ends.pop()
    pointers = None
    if pointer_offset is not None:
        pointers = positions.pointer_targets(arrays["positions"][idx, :end], arrays["seq_len"][idx],
                                             arrays["answer_start"][idx], pointer_offset)
    rows, width = [], 1
    for j, i in enumerate(idx):
        deps = module.dependencies(arrays["tokens"][i, :end], arrays["positions"][i, :end], arrays["answer_start"][i])
        for t, d in _picked(deps, targets):
            rows.append((i, t, d, -1 if pointers is None else int(pointers[j, t])))
            width = max(width, len(d))
    example = np.array([r[0] for r in rows])
    tokens = torch.from_numpy(arrays["tokens"][example, :end].astype(np.int64))
    ids = (torch.from_numpy(arrays["positions"][example, :end].astype(np.int64)) if coupled
           else torch.arange(end).expand_as(tokens).contiguous())
    deps = torch.full((len(rows), width), -1, dtype=torch.long)
    for r, (_, _, d, _) in enumerate(rows):
        deps[r, : len(d)] = torch.tensor(d, dtype=torch.long)
    target = torch.tensor([r[1] for r in rows])
    return {"tokens": tokens, "ids": ids, "query": target - 1, "target": target, "deps": deps,
            "pointer": torch.tensor([r[3] for r in rows]), "prompt_len": starts.pop()}


def _chunks(rows: dict, size: int):
    n = len(rows["query"])
    for start in range(0, n, size):
        sl = slice(start, start + size)
        yield {k: v if k == "prompt_len" else v[sl] for k, v in rows.items()}


def group_means(model, rows: dict, batch_size: int, dev, check: bool) -> tuple[dict, float]:
    """Mean of every statistic over a group's rows, in chunks of `batch_size` rows:
    {(layer, head, metric): value} (layer and head None for the attribution and chance), and
    with `check` the recomputed logits' largest error on the first chunk."""
    sums, error = {}, 0.0
    for i, chunk in enumerate(_chunks(rows, batch_size)):
        chunk = {k: v if k == "prompt_len" else v.to(dev) for k, v in chunk.items()}
        out = measure(model, **chunk, check=check and i == 0)
        error = max(error, out["logit_error"])
        for m, v in out["attention"].items():  # (L, R, H)
            for layer, per_head in enumerate(v.sum(1).tolist()):
                for head, total in enumerate(per_head):
                    sums[(layer, head, m)] = sums.get((layer, head, m), 0.0) + total
        for m, v in [*((f"attribution_{m}", v) for m, v in out["attribution"].items()), ("chance", out["chance"])]:
            sums[(None, None, m)] = sums.get((None, None, m), 0.0) + float(v.sum())
    n = len(rows["query"])
    return {key: total / n for key, total in sums.items()}, error


def cell_attention(model_path, data_path, out, cfg: dict, log=print, expect: str | None = None) -> None:
    """Write one row per (test group, layer, head, metric) of one trained cell, long format.
    `expect`: the identity token of the cell (lengthgen.support.identity); the checkpoint must hold it,
    and the table records it, as a sweep does."""
    cells_attention([(model_path, data_path, out, expect)], cfg, log)


def cells_attention(jobs: list[tuple], cfg: dict, log=print) -> None:
    """`cell_attention` of every (model, test set, out, expect) of `jobs` (the seeds of a stack)
    in one process, as evaluation.sweep.length_sweeps: the device claimed once, each model
    loaded once and measured on its own test set, to the bytes it gives alone."""
    machine = {key: cfg[key] for key in ("device", "threads") if key in cfg}
    cfg = schema.section("attention", {k: v for k, v in cfg.items() if k not in machine})
    dev = devices.resolve(machine.get("device", "cpu"), machine.get("threads", 1))
    for model_path, data_path, out, expect in jobs:
        _cell_attention(model_path, data_path, out, cfg, dev, log, expect)


def _cell_attention(model_path, data_path, out, cfg: dict, dev, log, expect: str | None) -> None:
    model, ckpt = load_model(model_path, dev)
    held = held_identity(ckpt)
    identity.check(model_path, held, expect, "the model", "delete it and rerun the workflow to retrain this cell")
    model.requires_grad_(False)  # gradients are taken with respect to the embeddings only
    table, meta = datasets.read(data_path)
    check_match(ckpt, meta, model_path, data_path)
    cell, module = ckpt["cell"], tasks.get(meta["kind"])
    opts = cell["scheme_options"]
    offset = opts["pointer_offset"] if opts["copy"] else None  # only a copying scheme's answer is the pointer's
    arrays = datasets.padded(table)
    keys = np.stack([arrays[g] for g in module.GROUP], axis=1)
    columns = {name: [] for name in ["task", "scheme", "seed", *module.GROUP, "layer", "head", "metric", "value",
                                     "examples", "targets"]}
    # The recomputed forward is checked against the model's on the longest group (the last)
    # alone: a check per group would redo each group's forward, a large share of the stage.
    groups = np.unique(keys, axis=0)
    for n_group, key in enumerate(groups):
        idx = np.flatnonzero((keys == key).all(axis=1))[: cfg["examples"]]
        rows = group_rows(module, arrays, idx, cfg["targets"], offset, opts["positions"] == "coupled")
        check = n_group == len(groups) - 1
        means, error = group_means(model, rows, cfg["batch_size"], dev, check)
        where = ", ".join(f"{g}={v}" for g, v in zip(module.GROUP, key, strict=True))
        if not error <= TOLERANCE:
            raise RuntimeError(f"attention: the recomputed forward is off the model's by {error:.2e} at {where}")
        for (layer, head, metric), value in sorted(means.items(), key=lambda kv: (kv[0][0] is None, kv[0])):
            for name, v in (("task", cell["task"]), ("scheme", cell["scheme"]), ("seed", cell["seed"]),
                            *zip(module.GROUP, map(int, key), strict=True), ("layer", layer), ("head", head),
                            ("metric", metric), ("value", value), ("examples", len(idx)),
                            ("targets", len(rows["query"]))):
                columns[name].append(v)
        dep = means[(None, None, "attribution_mass")]
        log(f"{cell['task']}/{cell['scheme']}/seed{cell['seed']} {where}: attribution on dependencies {dep:.3f} "
            f"(chance {means[(None, None, 'chance')]:.3f})"
            + (f"; logits reproduced to {error:.1e} (relative)" if check else ""))
    if not columns["value"]:
        raise UserError(f"{data_path}: no test examples; regenerate it")
    columns["value"] = np.array(columns["value"], dtype=np.float64)
    write_parquet(out, columns, metadata={identity.SWEEP_KEY: held.encode()} if held else None)
