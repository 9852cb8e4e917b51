"""Influential-token scoring (E4, claim 3 of the paper), for one pair of language models.

For a validation token x_i with T_long tokens of history (in its own document), and D the
T_long - T_short tokens before the short window:
  L_long   the long model's loss on x_i given the last T_long tokens,
  L_short  the same model given only the last T_short tokens,
  L_k      given the short window plus k tokens of D at their true positions, chosen by
           greedy     add, one at a time, the token that lowers the loss most (the oracle),
           attention  the largest attention mass from the predicting position in the long model,
           random     a uniform draw (the baseline), as its expectation: at k = 1 exactly, the
                      mean over every token of D (greedy's first step scores each one); for
                      k > 1 the mean over `random_draws` random k-sets,
           null       greedy again, choosing among the distant tokens of a token in ANOTHER
                      document (the window kept): what choosing the best of |D| candidates
                      gains without any dependency to find (the control for greedy).
Gap recovered = (L_short - L_k) / (L_short - L_long), over tokens whose gap exceeds delta.
The short-context model (and PoSE) is then scored with its window alone and with the greedy
tokens, at their true positions (beyond its training range) or coupled into it.

Every window token attends to the chosen tokens, so nothing of the window can be shared between
candidates; instead one greedy step scores all candidates of several targets in one batch, and
only the predicting position goes through the top block's MLP and the output layer.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from lengthgen.language import lm
from lengthgen.language import tokenizer as tokenizers
from lengthgen.support import device as devices
from lengthgen.support import identity, progress
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import atomic_path


@torch.no_grad()
def last_nll(model, tokens: torch.Tensor, ids: torch.Tensor, targets: torch.Tensor, batch: int) -> torch.Tensor:
    """Loss of each row's next token (targets, (B,)) after tokens/ids (B, T), in chunks of `batch`."""
    dev, out = _device(model), []
    for start in range(0, len(tokens), batch):
        sl = slice(start, start + batch)
        with devices.autocast(dev):
            logits = model.head(model.features(tokens[sl].to(dev), ids[sl].to(dev), last_only=True)[:, 0])
        out.append(F.cross_entropy(logits.float(), targets[sl].to(dev), reduction="none").cpu())
    return torch.cat(out)


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def last_attention(model, tokens: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """(B, T) attention of the predicting (last) position over the keys, mean over layers and heads."""
    dev, probs = _device(model), []
    model.features(tokens.to(dev), ids.to(dev), last_only=True, attention=probs)  # the top layer: the last row
    return (sum(p[:, :, -1].mean(1) for p in probs) / len(probs)).cpu()


class Contexts:
    """The long contexts of a set of targets, and sequences built from a window plus chosen tokens."""

    def __init__(self, stream, index: np.ndarray, t_long: int, t_short: int):
        self.ctx = torch.from_numpy(np.stack([np.asarray(stream[i - t_long : i], dtype=np.int64) for i in index]))
        self.y = torch.from_numpy(np.asarray([stream[i] for i in index], dtype=np.int64))
        self.t_long, self.d = t_long, t_long - t_short

    def with_distant(self, donor: Contexts) -> Contexts:
        """These targets and windows, with the distant tokens of `donor`'s contexts instead."""
        out = copy.copy(self)
        out.ctx = torch.cat([donor.ctx[:, : self.d], self.ctx[:, self.d :]], dim=1)
        return out

    def with_tokens(self, rows: torch.Tensor, chosen: torch.Tensor, ids: str = "true"):
        """Window of target `rows[j]` after its distant tokens `chosen[j]` (sorted): tokens, IDs.

        IDs `true` keep each token's place in the long context; `adjacent` puts the chosen tokens
        right before the window; `shared` gives them all the window's first ID, so every distance
        stays within the short window's (a short model's trained range)."""
        k = chosen.shape[1]
        window_ids = torch.arange(self.d, self.t_long).expand(len(rows), -1)
        tokens = torch.cat([self.ctx[rows[:, None], chosen], self.ctx[rows, self.d :]], dim=1)
        if ids == "true":
            chosen_ids = chosen
        elif ids == "adjacent":
            chosen_ids = torch.arange(self.d - k, self.d).expand(len(rows), -1)
        else:
            chosen_ids = torch.full_like(chosen, self.d)
        return tokens, torch.cat([chosen_ids, window_ids], dim=1)


def greedy(model, c: Contexts, k_max: int, batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy selection for every target: chosen positions in order (N, k_max), L_j (N, k_max)
    and, from the first step, the loss with each single distant token (N, D)."""
    n, d = len(c.y), c.d
    chosen = torch.zeros(n, 0, dtype=torch.long)
    losses, singles = [], None
    for j in range(k_max):
        taken = torch.zeros(n, d, dtype=torch.bool)
        taken[torch.arange(n)[:, None], chosen] = True
        rows, cand = (~taken).nonzero(as_tuple=True)  # every free candidate of every target
        sets = torch.cat([chosen[rows], cand[:, None]], dim=1).sort(dim=1).values
        tokens, ids = c.with_tokens(rows, sets)
        loss = last_nll(model, tokens, ids, c.y[rows], batch).view(n, d - j)
        singles = loss if j == 0 else singles  # nothing taken yet: column p is distant token p
        best = loss.argmin(dim=1)
        chosen = torch.cat([chosen, cand.view(n, d - j)[torch.arange(n), best][:, None]], dim=1)
        losses.append(loss[torch.arange(n), best])
    return chosen, torch.stack(losses, dim=1), singles


def attention_order(model, c: Contexts) -> torch.Tensor:
    """(N, D) distant positions by the long model's attention from the predicting position."""
    attn = last_attention(model, c.ctx, torch.arange(c.t_long).expand(len(c.y), -1))
    return attn[:, : c.d].argsort(dim=1, descending=True, stable=True)


def loss_with(model, c: Contexts, chosen: torch.Tensor, batch: int, ids: str = "true") -> torch.Tensor:
    """L of each target given its window and `chosen` distant tokens. IDs are shifted so the
    smallest is 0: rotary is shift invariant, and a short model's trained IDs start at 0."""
    rows = torch.arange(len(c.y))
    tokens, position_ids = c.with_tokens(rows, chosen.sort(dim=1).values, ids)
    return last_nll(model, tokens, position_ids - position_ids[:, :1], c.y, batch)


def eligible(doc_starts: np.ndarray, n_tokens: int, t_long: int) -> np.ndarray:
    """Stream indices with t_long tokens of history inside their own document."""
    ends = np.append(doc_starts[1:], n_tokens)
    runs = [np.arange(s + t_long, e) for s, e in zip(doc_starts, ends, strict=True) if e > s + t_long]
    return np.concatenate(runs) if runs else np.zeros(0, dtype=np.int64)


def documents(doc_starts, index) -> np.ndarray:
    """The validation document (its order in the stream) of each stream index."""
    return np.searchsorted(np.asarray(doc_starts), np.asarray(index), side="right") - 1


def _rng(cfg: dict, purpose: int) -> np.random.Generator:
    """A generator of the pair (influence.seed, the pair's model seed): each pair draws its own
    tokens, so tokens nest within pairs as the claim-3 bootstrap resamples them."""
    return np.random.default_rng([cfg["influence"]["seed"], cfg["seed"], purpose])


SCREEN, PICK, DONOR, RANDOM = range(4)  # what each of the pair's generators draws


def screen(long_model, stream, doc_starts, cfg: dict) -> pd.DataFrame:
    """L_long and L_short of `screen` validation tokens drawn at random among the eligible ones
    (every one if null). A sliding-window pass would be cheaper but is not the same quantity:
    stacked layers see w x n_layer tokens back, so each token gets its own sequences."""
    t_long, t_short, icfg = cfg["T_long"], cfg["T_short"], cfg["influence"]
    pool = eligible(np.asarray(doc_starts), len(stream), t_long)
    if len(pool) == 0:
        raise UserError(f"language.T_long: no validation document is longer than {t_long} tokens")
    if icfg["screen"] is not None and icfg["screen"] < len(pool):
        pool = np.sort(_rng(cfg, SCREEN).choice(pool, size=icfg["screen"], replace=False))
    parts = []
    for index in np.array_split(pool, -(-len(pool) // icfg["batch_size"])):
        c = Contexts(stream, index, t_long, t_short)
        ids = torch.arange(t_long).expand(len(index), -1)
        l_long = last_nll(long_model, c.ctx, ids, c.y, icfg["batch_size"])
        l_short = last_nll(long_model, c.ctx[:, c.d :], ids[:, : t_short], c.y, icfg["batch_size"])
        parts.append(pd.DataFrame({"index": index, "token": c.y.numpy(), "L_long": l_long.numpy(),
                                   "L_short": l_short.numpy()}))
    table = pd.concat(parts, ignore_index=True)
    return table.assign(seed=cfg["seed"], document=documents(doc_starts, table["index"]))


def donors(table: pd.DataFrame, picked: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
    """For each picked row, a screened token of another document, whose distant tokens the null
    control chooses among; None when every screened token is in one document."""
    docs = table["document"].to_numpy()
    if len(np.unique(docs)) < 2:
        return None
    index = table["index"].to_numpy()
    out = []
    for doc in docs[picked]:
        others = index[docs != doc]
        out.append(others[rng.integers(len(others))])
    return np.asarray(out, dtype=np.int64)


def score(long_model, short_models: dict, stream, doc_starts, cfg: dict, log=print) -> pd.DataFrame:
    """One row per screened validation token; the ones with L_short - L_long > delta (up to
    `targets` of them) are scored with every method, k and short model."""
    icfg = cfg["influence"]
    started = time.perf_counter()
    table = screen(long_model, stream, doc_starts, cfg)
    table["gap"] = table["L_short"] - table["L_long"]
    over = np.flatnonzero(table["gap"].to_numpy() > icfg["delta"])
    picked = np.sort(_rng(cfg, PICK).permutation(over)[: icfg["targets"]])
    table["scored"] = False
    table.loc[picked, "scored"] = True
    log(f"screened {len(table)} tokens in {time.perf_counter() - started:.1f} s; {len(over)} have a gap > "
        f"{icfg['delta']}, scoring {len(picked)} from {table.loc[picked, 'document'].nunique()} documents")
    if len(picked) == 0:  # nothing to score: the tables say so, and the claim-3 rows are INCONCLUSIVE
        return table
    donor = donors(table, picked, _rng(cfg, DONOR))
    if donor is None:
        log("every screened token is in one document: no null control (its claim-3 row is INCONCLUSIVE)")
    columns = _score_targets(long_model, short_models, stream, table["index"].to_numpy()[picked], donor, cfg, log)
    return table.join(pd.DataFrame(columns, index=picked))


def _score_targets(long_model, short_models: dict, stream, index: np.ndarray, donor, cfg: dict, log) -> dict:
    icfg, ks = cfg["influence"], sorted(cfg["influence"]["k"])
    rng = _rng(cfg, RANDOM)
    out = {}
    chunks = np.array_split(np.arange(len(index)), max(1, -(-len(index) // icfg["targets_per_batch"])))
    started = time.perf_counter()
    for n_done, chunk in enumerate(chunks):
        c = Contexts(stream, index[chunk], cfg["T_long"], cfg["T_short"])
        null = None if donor is None else c.with_distant(Contexts(stream, donor[chunk], cfg["T_long"],
                                                                 cfg["T_short"]))
        part = _score_chunk(long_model, short_models, c, null, ks, icfg, rng)
        if donor is not None:
            part["null_donor"] = donor[chunk].tolist()
        for name, values in part.items():
            out.setdefault(name, []).extend(values)
        done = sum(len(ch) for ch in chunks[: n_done + 1])
        log(f"scored {done}/{len(index)} targets | "
            f"{progress.tail(done, len(index), time.perf_counter() - started, unit='targets')}")
    return out


def short_model_losses(model, c: Contexts, chosen: torch.Tensor, ks: list, coupling: str, batch: int) -> dict:
    """A short model's L with its window alone (`window`), then with the first k chosen tokens
    at their true positions (`true_k`) and coupled into its trained range (`coupled_k`)."""
    out = {"window": loss_with(model, c, chosen[:, :0], batch).tolist()}
    for k in ks:
        for ids in ("true", coupling):
            label = "true" if ids == "true" else "coupled"
            out[f"{label}_{k}"] = loss_with(model, c, chosen[:, :k], batch, ids).tolist()
    return out


def random_losses(model, c: Contexts, ks: list, draws: int, batch: int, rng: np.random.Generator) -> dict:
    """L_k of each target under a uniformly random k-set of its distant tokens, as the mean over
    `draws` draws (each draw one random order, its first k tokens at each k)."""
    total = {k: torch.zeros(len(c.y)) for k in ks}
    for _ in range(draws if ks else 0):
        order = torch.from_numpy(rng.permuted(np.tile(np.arange(c.d), (len(c.y), 1)), axis=1))
        for k in ks:
            total[k] += loss_with(model, c, order[:, :k], batch)
    return {k: (t / draws).tolist() for k, t in total.items()}


def _score_chunk(long_model, short_models, c: Contexts, null: Contexts | None, ks: list, icfg: dict, rng) -> dict:
    out, batch, methods = {}, icfg["batch_size"], icfg["methods"]
    chosen, losses, singles = greedy(long_model, c, max(ks), batch)  # config validation requires greedy
    for k in ks:
        out[f"L_greedy_{k}"] = losses[:, k - 1].tolist()
    out["greedy_distances"] = [(c.t_long - row).tolist() for row in chosen]
    if null is not None:
        null_losses = greedy(long_model, null, max(ks), batch)[1]
        out |= {f"L_null_{k}": null_losses[:, k - 1].tolist() for k in ks}
    for name, model in short_models.items():
        losses = short_model_losses(model, c, chosen, ks, icfg["coupling"], batch)
        out |= {f"{name}_{key}": value for key, value in losses.items()}
    if "attention" in methods:
        order = attention_order(long_model, c)
        out |= {f"L_attention_{k}": loss_with(long_model, c, order[:, :k], batch).tolist() for k in ks}
    if "random" in methods:
        out["L_random_1"] = singles.mean(dim=1).tolist()  # exact: every single distant token, equally likely
        drawn = random_losses(long_model, c, [k for k in ks if k > 1], icfg["random_draws"], batch, rng)
        out |= {f"L_random_{k}": value for k, value in drawn.items()}
    return out


def run(cfg: dict, long_path, short_paths: dict, tokenizer_path, tokens_dir, out, log=print, expect=None) -> None:
    """Score the validation split with the trained models; write the per-token Parquet.
    `expect`: each model's identity token by name (lengthgen.support.identity); its checkpoint must hold it."""
    dev = devices.resolve(cfg["device"], cfg["threads"])
    tok = tokenizers.load(tokenizer_path)
    stream, doc_starts = tokenizers.load_stream(tokens_dir, "validation", tok.sha256)
    paths = {"long": long_path, **short_paths}
    models = {name: lm.load(path).to(dev) for name, path in paths.items()}
    for name, model in models.items():  # a short model in long's directory would score as long
        held = identity.of_lm(model.spec) if isinstance(model.spec, dict) else None
        identity.check(paths[name], held, (expect or {}).get(name), "the language model",
                       "delete it and rerun the workflow to retrain it")
    for name, model in models.items():
        if model.tokenizer_sha256 != tok.sha256:
            raise UserError(f"{name} model: trained with tokenizer {model.tokenizer_sha256[:12]}, "
                            f"not {tok.sha256[:12]} ({tokenizer_path}); retrain it")
    started = time.perf_counter()
    table = score(models.pop("long"), models, stream, doc_starts, cfg, log)
    seconds = time.perf_counter() - started
    log(f"scored {int(table['scored'].sum())} targets in {seconds:.1f} s "
        f"({table['scored'].sum() / seconds:.2f} targets/s, every method and model)")
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
