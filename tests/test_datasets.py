"""The Parquet dataset contract: column types, metadata, refusal of foreign files,
train/test disjointness and determinism."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import data_slice, sparse_parity_task

from lengthgen import datasets
from lengthgen.support.errors import UserError
from lengthgen.tasks import sparse_parity

EXPECTED_TYPES = {
    "tokens": pa.list_(pa.int16()),
    "positions": pa.list_(pa.int32()),
    "answer_start": pa.int32(),
    "length": pa.int32(),
    "k": pa.int32(),
}
META_KEYS = {"task", "kind", "params", "split", "seed", "vocab", "format_version"}


@pytest.mark.parametrize("split", ["train", "test"])
def test_column_types(tiny_dataset, split):
    schema = pq.read_schema(tiny_dataset[split])
    assert {f.name: f.type for f in schema} == EXPECTED_TYPES
    # and the same through the reader
    table, _ = datasets.read(tiny_dataset[split])
    assert {f.name: f.type for f in table.schema} == EXPECTED_TYPES


@pytest.mark.parametrize("split,seed", [("train", 1234), ("test", 4321)])
def test_metadata(tiny_dataset, split, seed):
    raw = pq.read_schema(tiny_dataset[split]).metadata[b"lengthgen"]
    meta = json.loads(raw)
    assert set(meta) == META_KEYS
    task = tiny_dataset["task"]
    assert meta["task"] == task["name"]
    assert meta["kind"] == "sparse_parity"
    assert meta["params"] == task["params"]
    assert meta["split"] == split
    assert meta["seed"] == seed
    assert meta["vocab"] == sparse_parity.VOCAB
    assert meta["format_version"] == datasets.FORMAT_VERSION
    _, read_meta = datasets.read(tiny_dataset[split])
    assert read_meta == meta


def test_sizes_and_rows(tiny_dataset):
    task = tiny_dataset["task"]
    train, _ = datasets.read(tiny_dataset["train"])
    test, _ = datasets.read(tiny_dataset["test"])
    assert train.num_rows == task["train_examples"]
    lengths = test.column("length").to_numpy()
    assert sorted(set(lengths.tolist())) == task["eval"]["lengths"]
    for n in task["eval"]["lengths"]:
        assert (lengths == n).sum() == task["eval"]["examples"]
    for table in (train, test):
        tokens = table.column("tokens").to_pylist()
        positions = table.column("positions").to_pylist()
        n = table.column("length").to_pylist()
        start = table.column("answer_start").to_pylist()
        for t, p, ni, a in zip(tokens, positions, n, start, strict=True):
            assert len(t) == ni + 3 and p == list(range(len(t))) and a == ni + 2


def test_read_refuses_file_without_metadata(tiny_dataset, tmp_path):
    table = pq.read_table(tiny_dataset["train"]).replace_schema_metadata(None)
    bare = tmp_path / "bare.parquet"
    pq.write_table(table, bare)
    with pytest.raises(UserError) as err:
        datasets.read(bare)
    assert str(bare) in str(err.value)
    assert "metadata" in str(err.value)


def test_read_refuses_wrong_format_version(tiny_dataset, tmp_path):
    table = pq.read_table(tiny_dataset["train"])
    meta = json.loads(table.schema.metadata[b"lengthgen"])
    meta["format_version"] = datasets.FORMAT_VERSION + 98
    old = tmp_path / "old_format.parquet"
    pq.write_table(table.replace_schema_metadata({b"lengthgen": json.dumps(meta).encode()}), old)
    with pytest.raises(UserError) as err:
        datasets.read(old)
    assert str(old) in str(err.value)
    assert str(datasets.FORMAT_VERSION + 98) in str(err.value)


def test_read_refuses_missing_and_damaged_files(tmp_path):
    missing = tmp_path / "missing.parquet"
    with pytest.raises(UserError, match="missing.parquet"):
        datasets.read(missing)
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(np.random.default_rng(0).bytes(300))
    with pytest.raises(UserError, match="damaged.parquet"):
        datasets.read(damaged)


def test_test_split_disjoint_from_train(write_sparse_parity):
    # short lengths inside the training range, where collisions are likely
    paths = write_sparse_parity(k=1, n_min=4, n_max=6, train_examples=150, lengths=(6, 8), examples=20)
    train = {tuple(t) for t in datasets.read(paths["train"])[0].column("tokens").to_pylist()}
    test = [tuple(t) for t in datasets.read(paths["test"])[0].column("tokens").to_pylist()]
    assert len(test) == 40
    assert not train & set(test)


def test_test_split_excludes_drawn_duplicates(tmp_path):
    """_keep_unseen drops exactly the rows that occur in the training file."""
    task = data_slice(sparse_parity_task("dup", k=2, lengths=(10, 14), examples=8), "test", 7)
    train = tmp_path / "train.parquet"
    # Use the test generator's own rows as a "training set", so every drawn row is seen.
    drawn = sparse_parity.generate_test(task["params"], {**task["eval"], "examples": 8 * 12 // 10 + 8}, 7)
    datasets.write(datasets.to_table(drawn, {"format_version": datasets.FORMAT_VERSION}), train)
    with pytest.raises(UserError, match="eval.lengths"):
        datasets.generate(task, "test", 7, tmp_path / "test.parquet", train_path=train)
    assert not (tmp_path / "test.parquet").exists()


def test_same_config_gives_identical_tables(write_sparse_parity):
    a = write_sparse_parity(subdir="a")
    b = write_sparse_parity(subdir="b")
    for split in ("train", "test"):
        ta, tb = pq.read_table(a[split]), pq.read_table(b[split])
        assert ta.equals(tb, check_metadata=True)
        assert ta.schema.metadata == tb.schema.metadata


def test_different_data_seed_gives_different_table(write_sparse_parity):
    a = write_sparse_parity(subdir="a", data_seed=1)
    b = write_sparse_parity(subdir="b", data_seed=2)
    ta, tb = pq.read_table(a["train"]), pq.read_table(b["train"])
    assert ta.num_rows == tb.num_rows
    assert not ta.equals(tb)
    assert ta.column("tokens").to_pylist() != tb.column("tokens").to_pylist()
    assert json.loads(ta.schema.metadata[b"lengthgen"])["seed"] == 1
    assert json.loads(tb.schema.metadata[b"lengthgen"])["seed"] == 2


def test_different_eval_seed_gives_different_test_table(write_sparse_parity):
    a = write_sparse_parity(subdir="a", eval_seed=10)
    b = write_sparse_parity(subdir="b", eval_seed=11)
    ta, tb = pq.read_table(a["test"]), pq.read_table(b["test"])
    assert ta.column("tokens").to_pylist() != tb.column("tokens").to_pylist()


def test_padded(tiny_dataset):
    table, _ = datasets.read(tiny_dataset["test"])
    arrays = datasets.padded(table)
    n = table.num_rows
    t_max = max(tiny_dataset["task"]["eval"]["lengths"]) + 3
    assert arrays["tokens"].shape == arrays["positions"].shape == (n, t_max)
    assert arrays["tokens"].dtype == np.int64
    for i, t in enumerate(table.column("tokens").to_pylist()):
        assert arrays["tokens"][i, : len(t)].tolist() == t
        assert (arrays["tokens"][i, len(t) :] == 0).all()
    np.testing.assert_array_equal(arrays["seq_len"], table.column("length").to_numpy() + 3)


def test_each_model_seed_has_its_own_test_draw_unless_shared():
    from lengthgen import config

    task = {"name": "t", "kind": "sparse_parity", "params": {"k": 1}, "train_examples": 10, "eval": {"examples": 5}}
    cfg = {"tasks": [task], "data_seed": 1, "eval_seed": 100, "test_sets": "per_seed"}
    assert config.test_split(cfg, 3) == "test-seed3"
    drawn = config.data_slice(cfg, "t", "test-seed3")
    assert (drawn["split"], drawn["seed"], drawn["eval"]) == ("test", 103, {"examples": 5})
    assert config.data_slice(cfg, "t", "test")["seed"] == 100
    assert config.data_slice(cfg, "t", "train")["seed"] == 1
    assert config.test_split({**cfg, "test_sets": "shared"}, 3) == "test"
