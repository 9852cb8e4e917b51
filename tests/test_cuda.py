"""The CUDA path, on a machine whose torch sees a GPU (they skip elsewhere, with the reason):
a cell trains and is swept on CUDA under bf16 autocast, and a stacked block trains on CUDA to
the models it gives one at a time there, within bf16's rounding. `make gpu-check` runs them."""

import pandas as pd
import pytest
import torch
from conftest import make_cell, write_dataset

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CPU path is tested")


@pytest.fixture
def dataset(tmp_path, schema):
    from conftest import sparse_parity_task

    return write_dataset(tmp_path, sparse_parity_task(train_examples=256, lengths=(20, 40), examples=32))


def test_a_cell_trains_and_sweeps_on_cuda(tmp_path, dataset):
    from lengthgen.evaluation.sweep import length_sweep
    from lengthgen.training.train import train

    cell = make_cell(device="cuda", max_steps=30, batch_size=32)
    train(cell, dataset["train"], tmp_path / "run", tmp_path / "last.pt", log=lambda *_: None)
    meta = (tmp_path / "run/meta.json").read_text()
    assert "cuda" in meta
    length_sweep(tmp_path / "run/model.pt", dataset["test"], tmp_path / "sweep.parquet",
                 {"device": "cuda", "threads": 1, "batch_size": 16}, log=lambda *_: None)
    sweep = pd.read_parquet(tmp_path / "sweep.parquet")
    assert set(sweep["length"]) == {20, 40} and sweep["accuracy"].between(0, 1).all()


def test_a_stacked_block_trains_on_cuda_as_its_models_do_alone(tmp_path, dataset):
    from lengthgen.training.stacked import train_stacked
    from lengthgen.training.train import train

    cells = [make_cell(device="cuda", seed=s, max_steps=20, batch_size=32) for s in (0, 1, 2)]
    train(cells[1], dataset["train"], tmp_path / "alone", tmp_path / "a.pt", log=lambda *_: None)
    train_stacked(cells, dataset["train"], [tmp_path / f"s{c['seed']}" for c in cells], tmp_path / "s.pt",
                  log=lambda *_: None)
    alone, stacked = (pd.read_parquet(p / "train_log.parquet") for p in (tmp_path / "alone", tmp_path / "s1"))
    assert len(alone) == len(stacked)
    pd.testing.assert_series_equal(alone["loss"], stacked["loss"], atol=0.05, rtol=0.05)
