"""Device choice. `auto` asks torch whether CUDA exists (safe on any machine) and
otherwise never touches a CUDA API, so CPU-only installs work unchanged."""

from __future__ import annotations

import contextlib

import torch

from lengthgen.errors import UserError


def resolve(name: str, threads: int) -> torch.device:
    torch.set_num_threads(threads)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("config.device: 'cuda' requested but torch sees no CUDA device (use auto or cpu)")
    return torch.device(name)


def autocast(device: torch.device):
    """bf16 autocast on CUDA; full precision on CPU, where bf16 matmuls are slower here."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads)"
