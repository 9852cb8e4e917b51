"""Length sweep: accuracy of one trained cell on fixed test sets at every length.

The model's configuration comes from its checkpoint, never from the command line, and
the test set must be of the task the model was trained on.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from lengthgen import datasets, tasks
from lengthgen import device as devices
from lengthgen.errors import UserError
from lengthgen.fileio import atomic_path
from lengthgen.model import ModelConfig, Transformer
from lengthgen.train import step_loss


def load_model(path, dev) -> tuple[Transformer, dict]:
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        model = Transformer(ModelConfig(**ckpt["model_args"]))
        model.load_state_dict(ckpt["state_dict"])
    except FileNotFoundError:
        raise UserError(f"{path}: checkpoint not found") from None
    except Exception as err:
        raise UserError(f"{path}: not a readable lengthgen checkpoint ({type(err).__name__})") from None
    return model.to(dev).eval(), ckpt


def _check_match(ckpt: dict, meta: dict, model_path, data_path) -> None:
    trained = ckpt["task"]
    for key in ("task", "kind", "vocab"):
        if trained[key] != meta[key]:
            raise UserError(
                f"{model_path}: checkpoint was trained on {key} {trained[key]!r}, "
                f"but {data_path} has {meta[key]!r}; retrain or point at the matching test set"
            )


@torch.no_grad()
def length_sweep(model_path, data_path, out, eval_cfg: dict, log=print) -> pd.DataFrame:
    """Write one row per test group (length, k, ...) with its accuracy."""
    dev = devices.resolve(eval_cfg["device"], eval_cfg["threads"])
    model, ckpt = load_model(model_path, dev)
    table, meta = datasets.read(data_path)
    _check_match(ckpt, meta, model_path, data_path)
    group = tasks.get(meta["kind"]).GROUP
    arrays = datasets.padded(table)
    keys = np.stack([arrays[g] for g in group], axis=1)
    rows = []
    for key in np.unique(keys, axis=0):
        idx = np.flatnonzero((keys == key).all(axis=1))
        correct = 0
        for start in range(0, len(idx), eval_cfg["batch_size"]):
            chunk = idx[start : start + eval_cfg["batch_size"]]
            batch = {k: torch.from_numpy(np.asarray(arrays[k][chunk], dtype=np.int64))
                     for k in ("tokens", "positions", "seq_len", "answer_start")}
            correct += int(step_loss(model, batch, dev)[1].sum())
        axes = dict(zip(group, map(int, key), strict=True))
        rows.append({**axes, "examples": len(idx), "accuracy": correct / len(idx)})
        log(f"{ckpt['cell']['task']}/{ckpt['cell']['scheme']}: {rows[-1]}")
    cell = ckpt["cell"]
    df = pd.DataFrame(rows).assign(task=cell["task"], scheme=cell["scheme"], seed=cell["seed"])
    df = df[["task", "scheme", "seed", *group, "examples", "accuracy"]]
    with atomic_path(out) as tmp:
        df.to_parquet(tmp, index=False)
    return df
