"""Training behaviour: determinism per seed, divergence reported by cell and step."""

import pytest
import torch

from lengthgen import train
from lengthgen.errors import TrainingDiverged


def test_same_seed_same_model_other_seed_other_model(tmp_path, tiny_cell, tiny_dataset):
    states = []
    for run, seed in (("a", 0), ("b", 0), ("c", 1)):
        train.train(tiny_cell(seed=seed, max_steps=5), tiny_dataset["train"], tmp_path / run, tmp_path / f"{run}.pt",
                    log=lambda m: None)
        states.append(torch.load(tmp_path / run / "model.pt", weights_only=True)["state_dict"])
    same = all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    other = all(torch.equal(states[0][k], states[2][k]) for k in states[0])
    assert same and not other


def test_nan_loss_stops_with_cell_and_step_and_writes_nothing(tmp_path, tiny_cell, tiny_dataset):
    cell = tiny_cell(task="tiny", scheme="rope", seed=3, lr=1e30, warmup_steps=0, grad_clip=0.0, max_steps=50)
    with pytest.raises(TrainingDiverged, match=r"^tiny/rope/seed3: loss is (nan|inf) at step \d+; lower train.lr"):
        train.train(cell, tiny_dataset["train"], tmp_path / "out", tmp_path / "ck.pt", log=lambda m: None)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("step", [0, 49, 50, 500, 2999])
def test_learning_rate_warms_up_then_decays_to_the_floor(step):
    cfg = {"lr": 1e-3, "warmup_steps": 50, "max_steps": 3000, "min_lr_ratio": 0.1}
    lr = train.lr_at(step, cfg)
    if step < 50:
        assert lr == pytest.approx(1e-3 * (step + 1) / 50)
    else:
        assert 1e-4 <= lr <= 1e-3
        assert lr >= train.lr_at(step + 1, cfg)
    assert train.lr_at(3000, cfg) == pytest.approx(1e-4)


def test_batches_cover_each_epoch_once():
    n, batch = 64, 16
    idx = torch.cat([train.batch_indices(s, n, batch, seed=5) for s in range(4)])
    assert sorted(idx.tolist()) == list(range(n))
    assert not torch.equal(train.batch_indices(4, n, batch, 5), train.batch_indices(0, n, batch, 5))
