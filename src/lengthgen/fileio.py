"""Small helpers shared by every stage: canonical JSON and all-or-nothing writes."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path


def canonical_json(obj) -> str:
    """JSON with sorted keys and no whitespace, so equal configs give equal strings."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary sibling of `path`; rename it onto `path` only on success.

    A killed job therefore never leaves a half-written output behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def save_png(fig, path, dpi: int, tight: bool = True) -> None:
    """A matplotlib figure as PNG, all or nothing, then closed. Without matplotlib's version in
    the file's metadata: the same figure is the same bytes under another release."""
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png", metadata={"Software": None}, bbox_inches="tight" if tight else None)
    plt.close(fig)


def write_text(path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_parquet(path, columns: dict, metadata: dict[bytes, bytes] | None = None) -> None:
    """Write equal-length columns (name -> list or array) as one Parquet table, all or nothing;
    `metadata` goes into the schema's key-value metadata, beside the columns.

    pyarrow alone: the training and sweep jobs need no pandas, whose import is 0.35-0.8 s of
    each of a hundred short jobs (importing pyarrow too, against torch alone)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        # from_pandas: NaN is written as null, as pandas' to_parquet did before
        table = pa.table({name: pa.array(values, from_pandas=True) for name, values in columns.items()})
        if metadata:
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
        pq.write_table(table, tmp)
