"""The language models' next-token loss, computed in row chunks so the logits never exist whole.

Cross entropy of h @ W^T against the next tokens, with the gradient of every chunk taken while
its logits are at hand (one exponential per logit, no log-softmax tensor, no zero-filled gradient
of the logits). The (tokens, vocab) logits of a whole batch are what dominates a language model's
memory at the paper's scale: 131,072 tokens x 50,257 GPT-2 tokens are 26 GB in fp32, held two or
three times over by `F.cross_entropy` and its backward. At the default's size (2,048 tokens of
2,048) a chunk's 4 MB stay in cache.
"""

from __future__ import annotations

import torch

# Logits per chunk: small on CPU, where a chunk that stays in cache pays, large on a GPU; and at
# least MIN_ROWS rows, because each chunk adds its share of dL/dW (vocab x d_model), a cost that
# only a chunk of many rows spreads over enough products (timings in docs/performance-archive.md).
CHUNK_ELEMENTS = {"cpu": 2**20, "cuda": 2**28}  # other devices: as CUDA
MIN_ROWS = 256


def next_token_loss(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy of the logits h @ weight^T (h (N, C), weight (V, C)) against targets (N,),
    in fp32 whatever the matmuls' dtype (bf16 under CUDA autocast), as F.cross_entropy on them."""
    dtype = _compute_dtype(h.device)
    rows = max(MIN_ROWS, CHUNK_ELEMENTS.get(h.device.type, CHUNK_ELEMENTS["cuda"]) // weight.shape[0])
    if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
        return _LinearCrossEntropy.apply(h, weight, targets, rows, dtype)
    with torch.autocast(h.device.type, enabled=False):
        total = sum(_chunk_losses(_logits(hc, weight, dtype), t).sum() for hc, t in _chunks(h, targets, rows))
    return total / len(targets)


def _compute_dtype(device: torch.device) -> torch.dtype:
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return torch.float32


def _chunks(h: torch.Tensor, targets: torch.Tensor, rows: int):
    return zip(h.split(rows), targets.split(rows), strict=True)


def _logits(h: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (h.to(dtype) @ weight.to(dtype).t()).float()


def _chunk_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return logits.logsumexp(-1) - logits.gather(1, targets[:, None])[:, 0]


class _LinearCrossEntropy(torch.autograd.Function):
    """Forward: the loss and, chunk by chunk, its gradients dL/dh and dL/dW (softmax minus the
    one-hot target, through the two products). Backward: those, times the incoming gradient."""

    @staticmethod
    def forward(ctx, h, weight, targets, rows: int, dtype: torch.dtype):
        with torch.autocast(h.device.type, enabled=False):
            total = torch.zeros((), device=h.device)
            grad_h = torch.empty(h.shape, dtype=torch.float32, device=h.device)
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=h.device)
            w = weight.to(dtype)
            for start, (hc, t) in zip(range(0, len(targets), rows), _chunks(h, targets, rows), strict=True):
                p = _logits(hc, w, dtype)
                picked = p.gather(1, t[:, None])[:, 0]
                top = p.amax(-1, keepdim=True)
                p.sub_(top).exp_()  # the only exponential: softmax and its log from the same sums
                sums = p.sum(-1, keepdim=True)
                total += (sums.log() + top)[:, 0].sub(picked).sum()
                p.div_(sums)
                p[torch.arange(len(t), device=p.device), t] -= 1.0  # dL/dlogits, up to 1/N
                p = p.to(dtype)  # a bf16 copy under autocast, for both products
                grad_h[start : start + len(t)] = p @ w
                if dtype == torch.float32:
                    grad_w.addmm_(p.t(), hc.to(dtype))  # in place: no (vocab, C) temporary a chunk
                else:
                    grad_w += p.t() @ hc.to(dtype)  # bf16 products into the fp32 sum
        ctx.save_for_backward(grad_h, grad_w)
        ctx.n, ctx.dtypes = len(targets), (h.dtype, weight.dtype)
        return total / ctx.n

    @staticmethod
    def backward(ctx, grad):
        grad_h, grad_w = ctx.saved_tensors
        scale = grad / ctx.n
        return (grad_h * scale).to(ctx.dtypes[0]), (grad_w * scale).to(ctx.dtypes[1]), None, None, None
