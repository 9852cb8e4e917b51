"""Device choice. `auto` asks torch whether CUDA exists (safe on any machine) and
otherwise never touches a CUDA API, so CPU-only installs work unchanged.

Snakemake limits how many GPU jobs run at once (`resources: gpu=N`) but does not say which
GPU a local job should use, so each CUDA job claims one for itself with a lock file; under
SLURM the scheduler has already narrowed CUDA_VISIBLE_DEVICES to the job's own GPU.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from lengthgen.support.errors import UserError

_claimed = []  # open lock files: the claim lasts as long as the process


def claim_gpu(count: int, lock_dir: Path, per_gpu: int = 1, wait_s: float = 5.0,
              log=print) -> tuple[int, object]:
    """Index of a GPU that fewer than `per_gpu` other lengthgen jobs on this machine hold, and the
    lock handle of the slot taken. Every GPU's first slot is tried before any second, so jobs
    spread over the GPUs before they share one."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        for slot in range(per_gpu):
            for index in range(count):
                handle = open(lock_dir / f"gpu{index}.slot{slot}.lock", "w")
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return index, handle
                except BlockingIOError:
                    handle.close()
        log(f"all {per_gpu} slots of all {count} GPUs are held by other lengthgen jobs; waiting "
            "(resources gpu= in the profile should be at most GPUs x gpu_jobs)")
        time.sleep(wait_s)


def _cuda_device() -> torch.device:
    count = torch.cuda.device_count()
    if count <= 1 or os.environ.get("SLURM_JOB_ID"):
        return torch.device("cuda", 0)
    default = Path(tempfile.gettempdir()) / f"lengthgen-gpus-{os.getuid()}"
    lock_dir = Path(os.environ.get("LENGTHGEN_GPU_LOCKS", default))
    index, handle = claim_gpu(count, lock_dir, int(os.environ.get("LENGTHGEN_GPU_JOBS", "1")))
    _claimed.append(handle)
    return torch.device("cuda", index)


def resolve(name: str, threads: int) -> torch.device:
    torch.set_num_threads(threads)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UserError("config.device: 'cuda' requested but torch sees no CUDA device (use auto or cpu)")
        return _cuda_device()
    return torch.device(name)


def autocast(device: torch.device):
    """bf16 autocast on CUDA; full precision on CPU, where bf16 matmuls are slower here."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def describe(device: torch.device) -> str:
    """The device as provenance.json records it. On CPU this names the vector instruction set
    ATen's own kernels dispatch to (MKL and oneDNN choose theirs alike, by the same CPU): the
    same commit trains to different rounding on AVX2 and AVX-512 machines (a k = 3 parity seed
    can fit on one and not the other), so a table diff between two machines' runs is only read
    against this."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}, {cpu_model()})"


def cpu_model() -> str:
    """The CPU's model name: two machines can share an instruction set and still round apart."""
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return (names[0] if names else platform.processor()) or "unknown CPU"
