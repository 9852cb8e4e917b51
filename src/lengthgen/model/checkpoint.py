"""Model files: what the pipeline saves (tensors and plain Python types, each file written whole)
and a trained model read back from its model.pt. Training writes through here and every stage
that reads a model (sweeps, the attention analysis, E4's scoring, notebooks) loads through here,
so reading a model needs nothing of the training code."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import torch

from lengthgen.model.transformer import ModelConfig, Transformer
from lengthgen.support.fileio import atomic_path, corrupt, read_intermediate

# torch.load(weights_only=True) raises the same UnpicklingError for a pickle of other objects
# and for a torn file, so the refusal names both.
REFUSED = ("refused to load: not only tensors and plain types (a torn file, or Python objects, which could run "
           "code)")


def load_weights_only(path) -> dict:
    """torch.load of tensors and plain types only, on the CPU: pickle.UnpicklingError for
    anything else."""
    return torch.load(path, map_location="cpu", weights_only=True)


def load_tensors(path) -> dict:
    """torch.load of tensors and plain Python types only (weights_only): a file dropped into the
    results can hold data, never code to run. Everything the pipeline saves is such a file. One
    that fails to load is a CorruptIntermediate (fileio.read_intermediate): removed under the
    run's results, so a rerun rebuilds it."""

    def load(p) -> dict:
        try:
            return load_weights_only(p)
        except pickle.UnpicklingError:
            raise corrupt(p, REFUSED) from None

    return read_intermediate(path, load, "checkpoint")


def save_tensors(path: Path, state: dict) -> None:
    """torch.save through atomic_path. The bytes are serialized in memory first: torch's own
    file writer reports a full disk as a RuntimeError naming no file, a plain write as the
    OSError that atomic_path turns into one line naming `path`."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getbuffer())


def load_model(path) -> tuple[Transformer, dict]:
    """The trained model of a model.pt, in eval mode on the CPU, and the file's other entries
    (what it was trained as)."""
    state = load_tensors(path)
    model = Transformer(ModelConfig(**state["model_args"]))
    model.load_state_dict(state["state_dict"])
    return model.eval(), state
