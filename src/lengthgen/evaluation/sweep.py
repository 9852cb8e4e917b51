"""Length sweep: accuracy of one trained cell on fixed test sets at every length.

The model's configuration comes from its checkpoint, never from the command line, and
the test set must be of the task the model was trained on. The checkpoint must be the cell's
the rule runs for (`expect`); the sweep records that identity for aggregation to check.
`length_sweeps` sweeps several models (the seeds of a stack) in one process, each as alone.
"""

from __future__ import annotations

import numpy as np
import torch

from lengthgen import datasets, tasks
from lengthgen.evaluation import decode
from lengthgen.model.checkpoint import load_tensors
from lengthgen.model.transformer import ModelConfig, Transformer
from lengthgen.support import device as devices
from lengthgen.support import identity
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import write_parquet


def load_model(path, dev) -> tuple[Transformer, dict]:
    try:
        ckpt = load_tensors(path)
        model = Transformer(ModelConfig(**ckpt["model_args"]))
        model.load_state_dict(ckpt["state_dict"])
    except FileNotFoundError:
        raise UserError(f"{path}: checkpoint not found") from None
    except UserError:
        raise
    except Exception as err:
        raise UserError(f"{path}: not a readable lengthgen checkpoint ({type(err).__name__})") from None
    return model.to(dev).eval(), ckpt


def check_match(ckpt: dict, meta: dict, model_path, data_path) -> None:
    trained = ckpt.get("task") or {}
    for key in ("task", "kind", "vocab"):
        if trained.get(key) != meta[key]:
            raise UserError(
                f"{model_path}: checkpoint was trained on {key} {trained.get(key)!r}, "
                f"but {data_path} has {meta[key]!r}; retrain or point at the matching test set"
            )


def _group_metrics(model, arrays: dict, idx: np.ndarray, opts: dict, eos: int, batch_size: int, dev) -> dict:
    """Decode the answers of one test group (equal prompt and answer lengths) and score them."""
    prompt_len = set(arrays["answer_start"][idx].tolist())
    answer_len = set((arrays["seq_len"][idx] - arrays["answer_start"][idx]).tolist())
    if len(prompt_len) != 1 or len(answer_len) != 1:
        raise UserError("test set: a group mixes prompt or answer lengths; regenerate it")
    p, a = prompt_len.pop(), answer_len.pop()
    exact, token_hits, id_hits = 0, 0, 0
    for start in range(0, len(idx), batch_size):
        chunk = idx[start : start + batch_size]
        tokens = torch.from_numpy(arrays["tokens"][chunk, : p + a].astype(np.int64)).to(dev)
        coupled = torch.from_numpy(arrays["positions"][chunk, : p + a].astype(np.int64)).to(dev)
        ids = coupled if opts["positions"] == "coupled" else torch.arange(p + a, device=dev).expand_as(tokens)
        out, fed = decode.generate(model, tokens[:, :p], ids[:, :p], a, opts, eos, oracle_ids=ids[:, p:])
        hits = out == tokens[:, p:]
        exact += int(hits.all(dim=1).sum())
        token_hits += int(hits.sum())
        id_hits += int((fed[:, :-1] == ids[:, p : p + a - 1]).sum())  # the final token's ID is never fed back
    n = len(idx)
    # IDs the model itself chose: not an index scheme's (the copy control's) nor pc's oracle IDs
    predicted = opts["position_head"] != "none" and opts["positions"] == "coupled" and opts.get("feed_ids") != "oracle"
    return {
        "examples": n,
        "accuracy": exact / n,
        "token_accuracy": token_hits / (n * a),
        "position_accuracy": id_hits / (n * (a - 1)) if predicted and a > 1 else float("nan"),
    }


def held_identity(ckpt: dict) -> str | None:
    """The identity token of the cell a checkpoint was trained as (None if it records none)."""
    cell = ckpt.get("cell")
    return identity.of_cell(cell) if isinstance(cell, dict) else None


def length_sweep(model_path, data_path, out, eval_cfg: dict, log=print, expect: str | None = None) -> None:
    """Write one row per test group (length, k or depth) with exact match (`accuracy`), token
    accuracy and, for a position head, the accuracy of the IDs it fed back, all decoded.
    `expect`: the identity token of the cell this sweep is for; the checkpoint must hold it."""
    length_sweeps([(model_path, data_path, out, expect)], eval_cfg, log)


def length_sweeps(jobs: list[tuple], eval_cfg: dict, log=print) -> None:
    """`length_sweep` of every (model, test set, out, expect) of `jobs` in one process: on a GPU a
    process's start and CUDA set-up cost more than a small model's sweep. The device is claimed
    once; each model is loaded once and swept on its own test set, to the bytes it gives alone."""
    dev = devices.resolve(eval_cfg["device"], eval_cfg["threads"])
    for model_path, data_path, out, expect in jobs:
        _sweep(model_path, data_path, out, eval_cfg, dev, log, expect)


@torch.no_grad()
def _sweep(model_path, data_path, out, eval_cfg: dict, dev, log, expect: str | None) -> None:
    model, ckpt = load_model(model_path, dev)
    held = held_identity(ckpt)
    # the rows take task, scheme and seed from the checkpoint: another cell's would be counted as it
    identity.check(model_path, held, expect, "the model", "delete it and rerun the workflow to retrain this cell")
    table, meta = datasets.read(data_path)
    check_match(ckpt, meta, model_path, data_path)
    cell = ckpt["cell"]
    opts = cell["scheme_options"]
    group = tasks.get(meta["kind"]).GROUP
    eos = meta["vocab"].index("<eos>") if "<eos>" in meta["vocab"] else -1
    arrays = datasets.padded(table)
    keys = np.stack([arrays[g] for g in group], axis=1)
    rows, cell_axes = [], {"task": cell["task"], "scheme": cell["scheme"], "seed": cell["seed"]}
    for key in np.unique(keys, axis=0):
        idx = np.flatnonzero((keys == key).all(axis=1))
        metrics = dict(zip(group, map(int, key), strict=True))
        metrics.update(_group_metrics(model, arrays, idx, opts, eos, eval_cfg["batch_size"], dev))
        rows.append({**cell_axes, **metrics})
        log(f"{cell['task']}/{cell['scheme']}/seed{cell['seed']}: {metrics}")
    if not rows:
        raise UserError(f"{data_path}: no test examples; regenerate it")
    columns = {name: [row[name] for row in rows] for name in [*cell_axes, *group, "examples"]}
    for name in ("accuracy", "token_accuracy", "position_accuracy"):  # float even when all NaN
        columns[name] = np.array([row[name] for row in rows], dtype=np.float64)
    write_parquet(out, columns, metadata={identity.SWEEP_KEY: held.encode()})
