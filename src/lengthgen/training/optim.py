"""Pieces of training (synthetic cells and language models) beside the loop itself
(training/loop.py): the optimizer (AdamW), the learning-rate schedule and resumable checkpoints
that only the same run may resume."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import torch

from lengthgen.model.checkpoint import REFUSED, load_weights_only, save_tensors

# The torch release (major.minor) whose private fused kernel `AdamW` calls: there it is
# bit-identical to torch.optim.AdamW(fused=True) (tests/training/test_train.py). Under any other
# release the kernel's signature is not known to hold, and `adamw` gives torch.optim's class.
KERNEL_TORCH = "2.13"


def adamw(params, cfg: dict):
    """AdamW at cfg's lr and weight decay over a model's parameters (or `params` themselves):
    `AdamW` under the release it was written for, else torch.optim.AdamW(fused=True)."""
    params = list(params.parameters() if isinstance(params, torch.nn.Module) else params)
    settings = {"lr": cfg["lr"], "weight_decay": cfg["weight_decay"], "betas": (0.9, 0.98)}
    if kernel_release(torch.__version__):
        return AdamW(params, **settings)
    return torch.optim.AdamW(params, fused=True, **settings)


def kernel_release(version: str) -> bool:
    """Whether torch `version` (e.g. "2.13.0+cpu") is the release `AdamW`'s kernel call is for."""
    return version.split("+")[0].split(".")[:2] == KERNEL_TORCH.split(".")


def sliced_state(state: dict, index: torch.Tensor) -> dict:
    """An AdamW state dict (ours or torch.optim's) for parameters cut to `index` along their
    leading axis (a stack's models, `stacked.Stack.keep`)."""
    moments = ("exp_avg", "exp_avg_sq")
    return {**state, "state": {i: {k: v[index] if k in moments else v for k, v in s.items()}
                               for i, s in state["state"].items()}}


class AdamW:
    """torch.optim.AdamW(fused=True)'s update, the same kernel, without torch.optim.

    Fused: one kernel per step instead of a dozen per parameter tensor (a visible share of a
    small model's step on CPU). Not torch.optim's class: building it imports torch's compiler
    stack (sympy and dynamo, hundreds of modules) in every training job, which the warm-start
    server, importing torch alone, does not spare it (docs/design.md, the optimizer). The
    interface is the part of torch.optim's the loops use: `param_groups[0]["lr"]`, `zero_grad`,
    `step`, and state dicts. A parameter's state starts at its first gradient, as in torch.optim."""

    def __init__(self, params, lr: float, weight_decay: float, betas=(0.9, 0.98), eps: float = 1e-8):
        self.params = list(params)
        self.param_groups = [{"lr": lr}]
        self.weight_decay, self.betas, self.eps = weight_decay, betas, eps
        self.state: dict[int, dict] = {}  # parameter index -> step, exp_avg, exp_avg_sq

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:  # as torch.optim: a step without gradients changes nothing
            return
        for i in live:
            if i not in self.state:
                p = self.params[i]
                self.state[i] = {"step": torch.zeros((), device=p.device), "exp_avg": torch.zeros_like(p),
                                 "exp_avg_sq": torch.zeros_like(p)}
        states = [self.state[i] for i in live]
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1)
        torch._fused_adamw_(
            [self.params[i] for i in live], [self.params[i].grad for i in live], [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states], [], steps, lr=self.param_groups[0]["lr"], beta1=self.betas[0],
            beta2=self.betas[1], weight_decay=self.weight_decay, eps=self.eps, amsgrad=False, maximize=False,
        )

    def state_dict(self) -> dict:
        return {"lr": self.param_groups[0]["lr"], "state": {i: dict(s) for i, s in self.state.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Our state dict, or a one-group torch.optim.AdamW's (for callers of the training code
        with such a checkpoint; the pipeline's fingerprints never resume one across code)."""
        if "lr" not in state:
            if len(state["param_groups"]) != 1:
                raise ValueError("AdamW.load_state_dict: a torch.optim state dict with one parameter group only")
            state = {"lr": state["param_groups"][0]["lr"], "state": state["state"]}
        self.param_groups[0]["lr"] = state["lr"]
        self.state = {int(i): {k: v.to(self.params[int(i)].device) for k, v in s.items()}
                      for i, s in state["state"].items()}


def lr_at(step: int, cfg: dict) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio * lr at `decay_steps` (absent or None:
    max_steps). After that horizon the rate holds at the floor or, with `final_lr_ratio` set,
    anneals by a second cosine to final_lr_ratio * lr at max_steps. A horizon apart from max_steps
    lets a model in a slow basin train on while every model that stops before the horizon takes
    the same steps as under max_steps = decay_steps."""
    if step < cfg["warmup_steps"]:
        return cfg["lr"] * (step + 1) / cfg["warmup_steps"]
    horizon = cfg.get("decay_steps") or cfg["max_steps"]
    floor = cfg["min_lr_ratio"]
    final = cfg.get("final_lr_ratio")
    if step >= horizon and final is not None:
        return cfg["lr"] * _cosine(step - horizon, cfg["max_steps"] - horizon, floor, final)
    return cfg["lr"] * _cosine(step - cfg["warmup_steps"], horizon - cfg["warmup_steps"], 1.0, floor)


def _cosine(step: int, span: int, start: float, end: float) -> float:
    """Half a cosine from `start` to `end` over `span` steps, `end` after them."""
    progress = min(1.0, step / max(1, span))
    return end + (start - end) * 0.5 * (1 + math.cos(math.pi * progress))


def load_checkpoint(path: Path, fingerprint: str, log) -> dict | None:
    """The resumable checkpoint, or None to start from step 0: a checkpoint that fails to load
    is never run and never removed here, as the run overwrites it."""
    if not path.exists():
        return None
    try:
        state = load_weights_only(path)
    except pickle.UnpicklingError:
        log(f"{path}: {REFUSED}; starting from step 0")
        return None
    except Exception as err:  # a torn file from a killed job: start over
        log(f"checkpoint {path} unreadable ({type(err).__name__}); starting from step 0")
        return None
    if state.get("fingerprint") != fingerprint:
        log(f"checkpoint {path} belongs to another config; starting from step 0")
        return None
    return state


def save_checkpoint(path: Path, **state) -> None:
    save_tensors(path, state)
