"""Device choice: CPU machines never reach CUDA; local GPU jobs each claim a GPU of their own."""

import os
import subprocess
import sys

import pytest
import torch

from lengthgen.support import device
from lengthgen.support.errors import UserError


def test_claims_distinct_gpus_and_frees_them_on_close(tmp_path):
    claims = [device.claim_gpu(3, tmp_path) for _ in range(3)]
    assert [index for index, _ in claims] == [0, 1, 2]
    claims[1][1].close()  # the job holding GPU 1 ends
    again, handle = device.claim_gpu(3, tmp_path)
    assert again == 1
    for _, h in [*claims, (again, handle)]:
        h.close()


def test_gpus_are_shared_by_gpu_jobs_after_each_has_one(tmp_path, monkeypatch):
    """Two jobs per GPU on two GPUs: the first two claims spread over the GPUs, the next two
    share them, a fifth waits until one ends."""
    claims = [device.claim_gpu(2, tmp_path, per_gpu=2) for _ in range(4)]
    assert [index for index, _ in claims] == [0, 1, 0, 1]
    waited = []

    def fake_sleep(seconds):
        waited.append(seconds)
        claims[2][1].close()  # a job sharing GPU 0 ends while the fifth waits

    monkeypatch.setattr(device.time, "sleep", fake_sleep)
    index, handle = device.claim_gpu(2, tmp_path, per_gpu=2, log=lambda msg: None)
    assert index == 0 and waited == [5.0]
    for _, h in [*claims, (index, handle)]:
        h.close()


@pytest.mark.subprocess
def test_claim_is_held_across_processes(tmp_path, repo):
    index, handle = device.claim_gpu(2, tmp_path)
    code = ("from pathlib import Path; from lengthgen.support.device import claim_gpu; "
            f"print(claim_gpu(2, Path({str(tmp_path)!r}))[0])")
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert (index, other.stdout.strip()) == (0, "1")
    handle.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_cpu_machine_auto_is_cpu_and_cuda_is_a_clear_error():
    assert device.resolve("auto", 1).type == "cpu"
    with pytest.raises(UserError, match=r"^config.device: 'cuda' requested but torch sees no CUDA device"):
        device.resolve("cuda", 1)


def test_cpu_description_names_threads_instruction_set_and_model(monkeypatch):
    """Provenance must tell an AVX2 run from an AVX-512 one, and one CPU model from another:
    their tables differ by rounding."""
    dev = device.resolve("cpu", 1)
    for capability, model in (("AVX2", "AMD EPYC 7B13"), ("AVX512", "Intel Xeon Platinum 8481C")):
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
        monkeypatch.setattr(device, "cpu_model", lambda m=model: m)
        assert device.describe(dev) == f"cpu (1 threads, {capability}, {model})"


def test_cpu_model_reads_the_model_name_or_falls_back(monkeypatch, tmp_path):
    assert device.cpu_model()  # this machine's, never empty
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: (_ for _ in ()).throw(OSError()) if a[0] == "/proc/cpuinfo"
                        else real_open(*a, **k))
    monkeypatch.setattr(device.platform, "processor", lambda: "x86_64")
    assert device.cpu_model() == "x86_64"
