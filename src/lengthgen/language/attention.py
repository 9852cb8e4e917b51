"""Attention of the long language model (E4) at the scored tokens, an analysis beyond the paper.

For each scored validation token (the influence scores' `scored` rows), at the position that
predicts it, per layer and head and for the mean row over layers and heads (what the
influence scoring's `attention` method ranks by):
  mass       attention on its k greedy influential tokens (its "dependency set")
  topk_mass  the k largest weights of the row together
  jaccard    overlap of the k most attended distant tokens with the k greedy ones, |A & G| / |A | G|
with `chance` (k / T_long, a uniform row's mass) and `jaccard_chance` (two random k-sets of the
T_long - T_short distant tokens). Written in the long format of the synthetic cells' tables.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from lengthgen.language import lm
from lengthgen.language import tokenizer as tokenizers
from lengthgen.language.influence import Contexts
from lengthgen.support import device as devices
from lengthgen.support import identity
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import read_intermediate, write_parquet

CHUNK = 128  # scored tokens per forward: every layer's (CHUNK, H, T, T) probabilities are held at once


def jaccard_chance(k: int, d: int) -> float:
    """Expected Jaccard index of two independent uniform k-subsets of d items."""
    return sum(math.comb(k, i) * math.comb(d - k, k - i) / math.comb(d, k) * i / (2 * k - i) for i in range(k + 1))


def row_measures(rows: torch.Tensor, greedy: torch.Tensor, k: int, d: int) -> dict:
    """rows (N, H, T) of the predicting position; greedy (N, k) positions. name -> (N, H)."""
    on_greedy = rows.gather(2, greedy[:, None, :].expand(-1, rows.shape[1], -1)).sum(-1)
    topk = rows.topk(k, dim=-1).values.sum(-1)
    # most attended distant positions: the first d keys, ties to the earlier one as `ranked` does
    attended = rows[..., :d].argsort(dim=-1, descending=True, stable=True)[..., :k]
    shared = (attended[..., :, None] == greedy[:, None, None, :]).any(-1).sum(-1)
    return {"mass": on_greedy, "topk_mass": topk, "jaccard": shared / (2 * k - shared)}


@torch.no_grad()
def measure(model, ctx: torch.Tensor, greedy: torch.Tensor, k: int, d: int) -> dict:
    """{(layer, head, metric): (N,)}, layer and head None for the mean row over both; on the
    model's device."""
    dev = next(model.parameters()).device
    ctx, greedy = ctx.to(dev), greedy.to(dev)
    ids = torch.arange(ctx.shape[1], device=dev).expand_as(ctx)
    probs = []
    model.features(ctx, ids, attention=probs)
    last = [p[:, :, -1] for p in probs]  # (N, H, T) each
    out = {}
    for layer, rows in enumerate(last):
        for metric, v in row_measures(rows, greedy, k, d).items():
            for head in range(v.shape[1]):
                out[(layer, head, metric)] = v[:, head]
    mean_row = torch.stack(last).mean(dim=(0, 2))[:, None]  # (N, 1, T)
    for metric, v in row_measures(mean_row, greedy, k, d).items():
        out[(None, None, metric)] = v[:, 0]
    return out


def run(cfg: dict, long_path, scores_path, tokenizer_path, tokens_dir, out, log=print, expect=None) -> None:
    """cfg: T_long, T_short, k (the greedy k compared), seed (the model's), device, threads.
    `expect`: the long model's identity token (lengthgen.support.identity); its checkpoint must hold it."""
    dev = devices.resolve(cfg["device"], cfg["threads"])
    tok = tokenizers.load(tokenizer_path)
    stream, _ = tokenizers.load_stream(tokens_dir, "validation", tok.sha256)
    model = lm.load(long_path).to(dev)
    held = identity.of_lm(model.spec) if isinstance(model.spec, dict) else None
    identity.check(long_path, held, expect, "the language model", "delete it and rerun the workflow to retrain it")
    scores = read_intermediate(scores_path, pd.read_parquet, "score table")
    scored = scores[scores["scored"]] if "scored" in scores else scores.iloc[:0]
    if scored.empty or "greedy_distances" not in scored:
        raise UserError(f"{scores_path}: no scored tokens with greedy influential tokens; rerun the scoring")
    t_long, k = cfg["T_long"], cfg["k"]
    d = t_long - cfg["T_short"]
    greedy = torch.tensor(np.stack([t_long - np.asarray(g[:k], dtype=np.int64) for g in scored["greedy_distances"]]))
    c = Contexts(stream, scored["index"].to_numpy(), t_long, cfg["T_short"])
    parts = [measure(model, c.ctx[i : i + CHUNK], greedy[i : i + CHUNK], k, d) for i in range(0, len(greedy), CHUNK)]
    means = {key: float(torch.cat([p[key] for p in parts]).mean()) for key in parts[0]}
    means[(None, None, "chance")] = k / t_long
    means[(None, None, "jaccard_chance")] = jaccard_chance(k, d)
    keys = sorted(means, key=lambda key: (key[0] is None, key))
    n = len(scored)
    fixed = {"task": "language", "scheme": "long", "seed": cfg["seed"], "length": t_long, "examples": n, "targets": n}
    columns = {name: [value] * len(keys) for name, value in fixed.items()}
    columns |= {"layer": [key[0] for key in keys], "head": [key[1] for key in keys],
                "metric": [key[2] for key in keys], "value": np.array([means[key] for key in keys])}
    write_parquet(out, columns)
    log(f"language/long: {n} scored tokens; mean row over layers and heads: mass on the {k} greedy tokens "
        f"{means[(None, None, 'mass')]:.3f} (uniform {k / t_long:.3f}), Jaccard {means[(None, None, 'jaccard')]:.3f} "
        f"(random {jaccard_chance(k, d):.3f})")
