"""Training throughput of our Transformer against a Hugging Face reference of the same size.

rope -> LlamaForCausalLM (rotary), ape -> GPT2LMHeadModel (learned absolute positions); both
built from random init (no download), fp32 on CPU, SDPA attention. One step = forward on a
fixed (batch, seq) batch of random tokens, cross entropy on every position, backward, gradient
clipping at 1.0 (as train.py does) and an AdamW step with the pipeline's optimizer (`loop.adamw`,
fused) for both models. The loss is each side's own: the reference's logits through
F.cross_entropy (what its `labels` path computes); ours through the loss the pipeline trains a
model of that size with: the language models' chunked next-token loss (`language/loss.py`) at the
language size, F.cross_entropy on the logits (as the synthetic cells) at the E1 size.

FLOPs are counted analytically with one formula for both models (see README):
  per token = 6 * N + 6 * n_layer * seq * d_model
  N = n_layer * (4 d^2 + 2 d d_ff) + d * vocab   (attention and MLP matrices, plus the LM head)
The attention term is 12 * n_layer * seq * d (QK^T and AV, forward and backward) halved
because the mask is causal. Biases, norms, softmax, activations, embedding lookups and the
optimizer are not counted. Utilization = achieved FLOP/s (median) / the best fp32 matmul run
at the same thread count: of matmul_ceiling, or of a matmul probe run in every round between
the training runs (so the ceiling is also measured side by side with them), whichever is higher.
"""

from __future__ import annotations

import csv
import warnings

import torch
import torch.nn.functional as F
from common import RESULTS, Options, Section, md_table, median, set_threads, timed

NAME = "train_throughput"
TITLE = "Training throughput: ours vs Hugging Face reference"

SIZES = {
    "e1": dict(n_layer=2, d_model=64, n_head=4, d_ff=256, vocab=7, seq=23, batch=64, loss="cross_entropy"),
    "language": dict(n_layer=4, d_model=256, n_head=4, d_ff=1024, vocab=4096, seq=256, batch=16, loss="next_token"),
}
MAX_POSITION = 1024  # our `ape` table and GPT-2's n_positions (same parameter count)
REFERENCE = {"rope": "llama", "ape": "gpt2"}
PROBE_N = 1024  # fp32 matmul probed between training runs


# -- models ---------------------------------------------------------------------------------


def build_ours(size: dict, encoding: str):
    from lengthgen.language.loss import next_token_loss
    from lengthgen.model.transformer import ModelConfig, Transformer

    cfg = ModelConfig(vocab_size=size["vocab"], n_layer=size["n_layer"], d_model=size["d_model"],
                      n_head=size["n_head"], d_ff=size["d_ff"], encoding=encoding, max_position=MAX_POSITION)
    model = Transformer(cfg)
    embed = model.tok_emb.weight.numel() + (model.pos_emb.weight.numel() if model.pos_emb is not None else 0)

    def loss(tokens, positions, targets):
        if size["loss"] == "next_token":
            h = model.features(tokens, positions).flatten(0, 1)
            return next_token_loss(h, model.head.weight, targets.flatten())
        return F.cross_entropy(model(tokens, positions).flatten(0, 1), targets.flatten())

    return model, loss, embed


def llama_intermediate(d: int, d_ff: int) -> int:
    """SwiGLU width whose 3 bias-free matrices hold as many parameters as our 2-matrix GELU MLP
    (with biases): 3 d I ~= 2 d d_ff + d_ff + d."""
    return round((2 * d * d_ff + d_ff + d) / (3 * d))


def build_reference(size: dict, encoding: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

        transformers.logging.set_verbosity_error()
    d = size["d_model"]
    if encoding == "rope":
        cfg = LlamaConfig(
            vocab_size=size["vocab"], hidden_size=d, num_hidden_layers=size["n_layer"],
            num_attention_heads=size["n_head"], num_key_value_heads=size["n_head"],
            intermediate_size=llama_intermediate(d, size["d_ff"]), max_position_embeddings=MAX_POSITION,
            tie_word_embeddings=False, use_cache=False, attention_dropout=0.0,
            bos_token_id=None, eos_token_id=None, pad_token_id=None,
        )
        model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
        embed = model.model.embed_tokens.weight.numel()
    elif encoding == "ape":
        cfg = GPT2Config(
            vocab_size=size["vocab"], n_embd=d, n_layer=size["n_layer"], n_head=size["n_head"],
            n_inner=size["d_ff"], n_positions=MAX_POSITION, activation_function="gelu",  # exact GELU, as nn.GELU
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=False, use_cache=False,
            bos_token_id=None, eos_token_id=None, pad_token_id=None,
        )
        model = GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
        embed = model.transformer.wte.weight.numel() + model.transformer.wpe.weight.numel()
    else:
        raise ValueError(f"no reference for encoding {encoding!r}")

    def loss(tokens, positions, targets):
        logits = model(input_ids=tokens, use_cache=False).logits
        return F.cross_entropy(logits.reshape(-1, size["vocab"]), targets.reshape(-1))

    return model, loss, embed


def flops_per_token(size: dict) -> float:
    d, L = size["d_model"], size["n_layer"]
    n = L * (4 * d * d + 2 * d * size["d_ff"]) + d * size["vocab"]
    return 6.0 * n + 6.0 * L * size["seq"] * d


def make_step(model, loss_fn, size: dict, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    b, t, v = size["batch"], size["seq"], size["vocab"]
    tokens = torch.randint(0, v, (b, t), generator=gen)
    targets = torch.randint(0, v, (b, t), generator=gen)
    positions = torch.arange(t).expand(b, t)
    from lengthgen.training.optim import adamw

    opt = adamw(model, {"lr": 1e-3, "weight_decay": 0.01})  # the pipeline's optimizer, for both models
    model.train()

    def step():
        loss = loss_fn(tokens, positions, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    return step


# -- ceiling ----------------------------------------------------------------------------------


def ceiling(opts: Options, threads: int) -> tuple[float, str]:
    """Best fp32 matmul run at `threads`: from this run, else the last CSV, else a quick measure."""
    import matmul_ceiling

    ceil = opts.context.get("ceiling") or {}
    if threads in ceil:
        return ceil[threads], "matmul_ceiling (this run)"
    path = RESULTS / "matmul_ceiling.csv"
    if path.exists():
        with open(path) as f:
            rates = matmul_ceiling.ceilings([r | {"threads": int(r["threads"])} for r in csv.DictReader(f)
                                             if r.get("gflops_max")])
        if threads in rates:
            return rates[threads], "matmul_ceiling.csv (earlier run)"
    rows = [r for r in matmul_ceiling.measure(quick=True, threads=[threads]) if r["dtype"] == "float32"]
    return matmul_ceiling.ceilings(rows)[threads], "quick matmul measure (this run)"


# -- benchmark --------------------------------------------------------------------------------


def param_counts(model, embed: int) -> tuple[int, int]:
    total = sum(p.numel() for p in model.parameters())
    return total, total - embed


def compare(size_name: str, encoding: str, threads: int, quick: bool) -> list[dict]:
    size = SIZES[size_name]
    set_threads(threads)
    builds = {}
    for impl, build in (("ours", build_ours), ("ref", build_reference)):
        torch.manual_seed(0)
        model, loss_fn, embed = build(size, encoding)
        builds[impl] = (model, make_step(model, loss_fn, size), embed)
    small = size_name == "e1"
    warmup = (3 if quick else 10) if small else 1
    rounds = (3 if quick else 9) if small else (2 if quick else 5)
    target = (0.15 if quick else 0.5) if small else 0.0  # seconds per run; language: one step per run
    for _model, step, _ in builds.values():
        timed(step, warmup)
    one = max(timed(step) for _m, step, _e in builds.values())
    steps = max(1, round(target / one))

    # a matmul probe runs in every round too, so the ceiling is also measured side by side with
    # the training runs (a ceiling taken minutes earlier may have met a busier or quieter machine)
    a, b = torch.randn(PROBE_N, PROBE_N), torch.randn(PROBE_N, PROBE_N)
    a @ b
    probe_calls = max(1, round((0.05 if quick else 0.2) / timed(lambda: a @ b)))
    probes = []
    per_run = {impl: [] for impl in builds}
    for _ in range(rounds):  # ours, ref, probe, ours, ref, probe, ...
        for impl, (_m, step, _e) in builds.items():
            per_run[impl].append(timed(step, steps) / steps)
        probes.append(2.0 * PROBE_N**3 * probe_calls / timed(lambda: a @ b, probe_calls) / 1e9)

    tokens = size["batch"] * size["seq"]
    fpt = flops_per_token(size)
    rows = []
    for impl, (model, _step, embed) in builds.items():
        total, non_embed = param_counts(model, embed)
        s = median(per_run[impl])
        rows.append({
            "size": size_name, "encoding": encoding, "threads": threads, "impl": impl,
            "model": "lengthgen.Transformer" if impl == "ours" else REFERENCE[encoding],
            "params_total": total, "params_non_embedding": non_embed,
            "tokens_per_step": tokens, "flops_per_step": fpt * tokens, "steps_per_run": steps, "runs": rounds,
            "s_per_step_median": s, "s_per_step_min": min(per_run[impl]), "s_per_step_max": max(per_run[impl]),
            "tokens_per_s": tokens / s, "achieved_gflops": fpt * tokens / s / 1e9,
        })
    # ours/ref tokens/s per (ours, ref) pair of runs = ref seconds / ours seconds
    ratios = [ref_s / ours_s for ours_s, ref_s in zip(per_run["ours"], per_run["ref"], strict=True)]
    rows[0]["ratio_ours_over_ref"] = median(ratios)
    for row in rows:
        row["probe_gflops_max"] = max(probes)
    return rows


def run(opts: Options) -> Section:
    rows = []
    threads = [1] if opts.quick else opts.threads
    for t in threads:
        for size_name in SIZES:
            for encoding in REFERENCE:
                rows += compare(size_name, encoding, t, opts.quick)
    sources = {}
    for t in threads:
        c, src = ceiling(opts, t)
        probe = max(r["probe_gflops_max"] for r in rows if r["threads"] == t)
        if probe > c:
            c, src = probe, f"matmul probe between training runs; {src} had {c:.1f}"
        sources[t] = (c, src)
    for row in rows:
        row["ceiling_gflops"] = sources[row["threads"]][0]
        row["utilization"] = row["achieved_gflops"] / row["ceiling_gflops"]
    return Section(NAME, TITLE, rows, _markdown(rows, sources))


def _markdown(rows: list[dict], sources: dict) -> str:
    pairs = []
    for ours, ref in zip(rows[0::2], rows[1::2], strict=True):
        pairs.append({
            "case": f"{ours['size']} / {ours['encoding']} vs {ref['model']}", "threads": ours["threads"],
            "ours_tps": ours["tokens_per_s"], "ref_tps": ref["tokens_per_s"], "ratio": ours["ratio_ours_over_ref"],
            "ours_gf": ours["achieved_gflops"], "ref_gf": ref["achieved_gflops"],
            "ours_u": f"{100 * ours['utilization']:.1f}%", "ref_u": f"{100 * ref['utilization']:.1f}%",
            "spread": max(r["s_per_step_max"] / r["s_per_step_min"] for r in (ours, ref)),
            "params": f"{ours['params_total']:,} / {ref['params_total']:,}",
            "nonemb": f"{ours['params_non_embedding']:,} / {ref['params_non_embedding']:,}",
            "runs": f"{ours['runs']} x {ours['steps_per_run']}",
        })
    table = md_table(pairs, [
        ("case", "size / encoding vs reference"), ("threads", "threads"), ("ours_tps", "ours tok/s"),
        ("ref_tps", "ref tok/s"), ("ratio", "ours/ref"), ("ours_gf", "ours GFLOP/s"), ("ref_gf", "ref GFLOP/s"),
        ("ours_u", "ours util."), ("ref_u", "ref util."), ("params", "params ours / ref"),
        ("nonemb", "non-embedding ours / ref"), ("runs", "runs x steps"), ("spread", "spread"),
    ])
    noisy = [p for p in pairs if p["spread"] > 1.5]
    if noisy:
        table += (f"\n\n{len(noisy)} row(s) with spread > 1.5 (slowest run / fastest run of one side) were disturbed "
                  "by other jobs during their runs: there the per-pair ratio ours/ref is still meaningful, "
                  "the absolute tok/s and utilization are not.")
    head = ("Sizes (e1: the E1 default model and batch, at n = 20 bits (the default trains on n <= 12): "
            "seq 23 = BOS, 20 bits, SEP, answer):")
    sizes = head + "\n" + "\n".join(
        f"- **{name}**: {s['n_layer']} layers, d_model {s['d_model']}, {s['n_head']} heads, d_ff {s['d_ff']}, "
        f"vocab {s['vocab']}, seq {s['seq']}, batch {s['batch']} = {s['batch'] * s['seq']:,} tokens/step, "
        f"{flops_per_token(s) * s['batch'] * s['seq'] / 1e9:.3g} GFLOP/step "
        f"(Llama intermediate_size {llama_intermediate(s['d_model'], s['d_ff'])})"
        for name, s in SIZES.items()
    )
    ceil = ", ".join(f"{v:.1f} GFLOP/s at {t} thread(s) [{src}]" for t, (v, src) in sorted(sources.items()))
    contention = ""
    if 1 in sources and any(t > 1 and v < 1.2 * sources[1][0] for t, (v, _) in sources.items()):
        contention = ("The multi-thread ceiling is not clearly above the 1-thread one: the second core was busy "
                      "with other jobs whenever it was measured, so multi-thread utilization is overstated.")
    return "\n\n".join(filter(None, [
        "tok/s: median over alternating runs (ours, ref, probe, ours, ref, probe, ...) after warm-up; "
        "ours/ref: median of the per-pair ratios; spread: slowest / fastest run of either side. "
        "One step = forward, cross entropy on all positions (ours: the loss the pipeline trains that size "
        "with, the chunked next-token loss at the language size; the reference: F.cross_entropy on its "
        "logits), backward, clip, fused AdamW (the same for both). "
        "GFLOP/s counts 6 N + 6 n_layer seq d per token (causal attention counted as half), the same formula "
        "for both models; utilization divides it by the fp32 matmul ceiling: the best run of matmul_ceiling "
        f"or of an n={PROBE_N} matmul probed between the training runs, whichever is higher: " + ceil + ".",
        table,
        contention,
        sizes,
        "Architectural differences (same d_model, layers, heads, vocab, sequence, batch; both untied heads):\n"
        "- **rope vs Llama**: Llama uses RMSNorm (ours LayerNorm), a SwiGLU MLP with 3 bias-free matrices of "
        "width intermediate_size (ours: GELU MLP, 2 matrices of width d_ff, with biases), separate bias-free "
        "q/k/v/o projections (ours: one fused qkv matmul, with biases), and rotate-half RoPE (ours: "
        "interleaved pairs, recomputed from `position_ids` every forward). intermediate_size is chosen so the "
        "MLP parameter counts match; total counts are in the table.\n"
        "- **ape vs GPT-2**: same layout (pre-LayerNorm, fused qkv, GELU MLP with biases, learned positions, "
        f"{MAX_POSITION} entries); GPT-2 set to exact GELU (its default is the tanh approximation), no dropout, "
        "untied head. GPT-2 uses Conv1D (addmm on a transposed weight) where we use nn.Linear.",
    ]))
