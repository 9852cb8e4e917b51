"""The dataset contract: one Parquet file per (task, split) with an explicit schema.

Columns: ``tokens list<int16>``, ``positions list<int32>`` (coupled position IDs; plain
indices where a task has no coupling), ``answer_start int32``, ``length int32`` and the
task's own int32 columns. The schema metadata records the task, its parameters, the seed,
the vocabulary and FORMAT_VERSION; `read` refuses anything else.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lengthgen import tasks
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import atomic_path, canonical_json, read_intermediate

FORMAT_VERSION = 1
META_KEY = b"lengthgen"
OVERSAMPLE = 1.2  # test sets are drawn larger, then rows seen in training are dropped


def _list_array(rows, dtype) -> pa.Array:
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    values = np.concatenate(rows).astype(dtype) if rows else np.zeros(0, dtype)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def to_table(columns: dict, meta: dict) -> pa.Table:
    arrays, fields = [], []
    for name, col in columns.items():
        if name in ("tokens", "positions"):
            dtype = np.int16 if name == "tokens" else np.int32
            arrays.append(_list_array(col, dtype))
            fields.append(pa.field(name, pa.list_(pa.from_numpy_dtype(dtype))))
        else:
            arrays.append(pa.array(np.asarray(col, dtype=np.int32)))
            fields.append(pa.field(name, pa.int32()))
    schema = pa.schema(fields, metadata={META_KEY: canonical_json(meta).encode()})
    return pa.Table.from_arrays(arrays, schema=schema)


def write(table: pa.Table, path) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read(path) -> tuple[pa.Table, dict]:
    """Read a dataset and its metadata; a damaged or foreign file is a UserError."""
    try:
        table = read_intermediate(path, pq.read_table, "Parquet dataset")
    except FileNotFoundError:
        raise UserError(f"{path}: dataset not found") from None
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise UserError(f"{path}: Parquet file without lengthgen metadata; regenerate it")
    try:
        meta = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        meta = None
    if not isinstance(meta, dict):
        raise UserError(f"{path}: unreadable lengthgen metadata; regenerate it")
    if meta.get("format_version") != FORMAT_VERSION:
        raise UserError(
            f"{path}: dataset format version {meta.get('format_version')}, expected {FORMAT_VERSION}; regenerate it"
        )
    return table, meta


def generate(task_cfg: dict, split: str, seed: int, out, train_path=None) -> None:
    """Generate one split of a task and write it to `out`.

    The test split excludes every example that also occurs in `train_path`, so in-range
    lengths measure generalization to unseen sequences, not memory.
    """
    module = tasks.get(task_cfg["kind"])
    params = task_cfg["params"]
    if split == "train":
        columns = module.generate_train(params, task_cfg["train_examples"], np.random.default_rng(seed))
    elif train_path is None:
        raise UserError("generate: the test split needs --train (it is drawn disjoint from the training set)")
    else:
        eval_cfg = task_cfg["eval"]
        want = eval_cfg["examples"]
        drawn = module.generate_test(params, {**eval_cfg, "examples": int(want * OVERSAMPLE) + 8}, seed)
        columns = _keep_unseen(columns=drawn, train_path=train_path, want=want, group=module.GROUP)
    meta = {
        "format_version": FORMAT_VERSION,
        "task": task_cfg["name"],
        "kind": task_cfg["kind"],
        "params": params,
        "split": split,
        "seed": seed,
        "vocab": module.vocab(params),
    }
    write(to_table(columns, meta), out)


def _keep_unseen(columns: dict, train_path, want: int, group: list[str]) -> dict:
    seen = {bytes(t) for t in read(train_path)[0].column("tokens").to_numpy(zero_copy_only=False)}
    fresh = np.array([t.astype(np.int16).tobytes() not in seen for t in columns["tokens"]])
    keys = np.stack([np.asarray(columns[g]) for g in group], axis=1)
    keep = np.zeros(len(fresh), dtype=bool)
    for key in np.unique(keys, axis=0):
        rows = np.flatnonzero((keys == key).all(axis=1) & fresh)
        if len(rows) < want:
            where = ", ".join(f"{g}={v}" for g, v in zip(group, key, strict=True))
            raise UserError(
                f"eval.lengths: only {len(rows)} test examples at {where} differ from the training set; "
                f"need {want} (use longer lengths or fewer eval.examples)"
            )
        keep[rows[:want]] = True
    idx = np.flatnonzero(keep)
    return {k: [v[i] for i in idx] if isinstance(v, list) else np.asarray(v)[idx] for k, v in columns.items()}


def padded(table: pa.Table, pad: int = 0) -> dict:
    """Pad `tokens`/`positions` on the right into dense int64 arrays (N, T_max)."""
    tokens = table.column("tokens").to_numpy(zero_copy_only=False)
    positions = table.column("positions").to_numpy(zero_copy_only=False)
    lengths = np.array([len(t) for t in tokens])
    t_max = int(lengths.max())
    tok = np.full((len(tokens), t_max), pad, dtype=np.int64)
    pos = np.zeros((len(tokens), t_max), dtype=np.int64)
    for i, (t, p) in enumerate(zip(tokens, positions, strict=True)):
        tok[i, : len(t)], pos[i, : len(p)] = t, p
    out = {"tokens": tok, "positions": pos, "seq_len": lengths}
    for name in table.column_names:
        if name not in ("tokens", "positions"):
            out[name] = table.column(name).to_numpy()
    return out
