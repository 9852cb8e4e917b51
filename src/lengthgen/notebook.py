"""Entry points for notebooks: the length sweep of a results directory as a DataFrame, and a
trained model from its checkpoint. No stage imports this module."""

from __future__ import annotations

from pathlib import Path

from lengthgen.analysis.aggregate import read_sweep


def load_sweep(results_dir="results"):
    """The length sweep of a configuration's results directory as a DataFrame: one row per
    (task, scheme, seed, length, k or depth), with exact match (`accuracy`), token accuracy and
    position accuracy. `results_dir` is the configuration's `results_dir` key."""
    return read_sweep(Path(results_dir) / "tables" / "length_sweep.csv")


def load_model(path, device="cpu"):
    """A trained model from its model.pt (a cell's, or an E4 language model's), in eval mode on
    `device`. `model.info` holds what the checkpoint says it was trained as, without the weights;
    a cell's model also has `model.cell` (task, scheme, seed, scheme options, model and training
    settings) and `model.task` (the task's name, kind and vocabulary), a language model
    `model.spec`. Loads tensors and plain data only (torch.load with weights_only=True)."""
    import torch

    from lengthgen.evaluation.sweep import load_model as load

    model, ckpt = load(path, torch.device(device))
    model.info = {key: value for key, value in ckpt.items() if key not in ("state_dict", "model_args")}
    for key in ("cell", "task", "spec"):
        if key in ckpt:
            setattr(model, key, ckpt[key])
    return model
