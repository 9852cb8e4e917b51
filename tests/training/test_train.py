"""Training behaviour: determinism per seed, divergence reported by cell and step."""


import pytest
import torch

from lengthgen.support.errors import TrainingDiverged
from lengthgen.training import optim as loop
from lengthgen.training import train


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
    lr = loop.lr_at(step, cfg)
    if step < 50:
        assert lr == pytest.approx(1e-3 * (step + 1) / 50)
    else:
        assert 1e-4 <= lr <= 1e-3
        assert lr >= loop.lr_at(step + 1, cfg)
    assert loop.lr_at(3000, cfg) == pytest.approx(1e-4)


def test_a_horizon_apart_from_max_steps_keeps_the_schedule_then_holds_the_floor():
    base = {"lr": 1e-3, "warmup_steps": 50, "min_lr_ratio": 0.3}
    held = {**base, "max_steps": 32000, "decay_steps": 16000}
    for step in (0, 49, 50, 8000, 15999):
        assert loop.lr_at(step, held) == loop.lr_at(step, {**base, "max_steps": 16000})
    assert loop.lr_at(3000, {**base, "max_steps": 3000, "decay_steps": None}) == pytest.approx(3e-4)
    assert [loop.lr_at(s, held) for s in (16000, 24000, 31999)] == pytest.approx([3e-4] * 3)
    assert loop.lr_at(8000, held) != loop.lr_at(8000, {**base, "max_steps": 32000})


def test_an_anneal_after_the_horizon_leaves_the_steps_before_it_and_ends_at_its_ratio():
    held = {"lr": 1e-3, "warmup_steps": 50, "min_lr_ratio": 0.3, "max_steps": 32000, "decay_steps": 16000}
    annealed = {**held, "final_lr_ratio": 0.01}
    for step in (0, 49, 50, 8000, 15999, 16000):
        assert loop.lr_at(step, annealed) == pytest.approx(loop.lr_at(step, held), rel=1e-12)
    assert loop.lr_at(24000, annealed) == pytest.approx(1e-3 * (0.01 + 0.29 / 2))
    assert loop.lr_at(32000, annealed) == pytest.approx(1e-5)
    lrs = [loop.lr_at(s, annealed) for s in range(16000, 32001, 500)]
    assert lrs == sorted(lrs, reverse=True)


def test_batches_cover_each_epoch_once():
    n, batch = 64, 16
    idx = torch.cat([train.batch_indices(s, n, batch, seed=5) for s in range(4)])
    assert sorted(idx.tolist()) == list(range(n))
    assert not torch.equal(train.batch_indices(4, n, batch, 5), train.batch_indices(0, n, batch, 5))


def _adamw_run(make, steps=6, resume_at=None, resume_with=None):
    """Six steps of a small net (one parameter never gets a gradient) at a changing lr; at
    `resume_at`, a fresh optimizer (`resume_with`, else `make`) takes over the state dict."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.GELU(), torch.nn.Linear(7, 3))
    unused = torch.nn.Linear(2, 2)
    params = [*net.parameters(), *unused.parameters()]
    opt = make(params)
    for s in range(steps):
        if s == resume_at:  # a fresh optimizer from the state dict, as a resumed job builds it
            state, opt = opt.state_dict(), (resume_with or make)(params)
            opt.load_state_dict(state)
        opt.param_groups[0]["lr"] = 1e-2 * (s + 1)
        opt.zero_grad(set_to_none=True)
        net(torch.randn(4, 5)).pow(2).sum().backward()
        opt.step()
    return [p.detach().clone() for p in params]


def test_adamw_is_torch_fused_adamw_bit_for_bit_and_resumes():
    ours = _adamw_run(lambda ps: loop.AdamW(ps, lr=1e-2, weight_decay=0.1))
    ref = _adamw_run(lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.98), fused=True))
    assert all(torch.equal(a, b) for a, b in zip(ours, ref, strict=True))
    resumed = _adamw_run(lambda ps: loop.AdamW(ps, lr=1e-2, weight_decay=0.1), resume_at=3)
    assert all(torch.equal(a, b) for a, b in zip(ours, resumed, strict=True))
    assert not torch.equal(ours[0], _adamw_run(lambda ps: loop.AdamW(ps, lr=1e-2, weight_decay=0.0))[0])
    # a checkpoint written with torch.optim's AdamW resumes too
    from_torch = _adamw_run(lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.98), fused=True),
                            resume_at=3, resume_with=lambda ps: loop.AdamW(ps, lr=1e-2, weight_decay=0.1))
    assert all(torch.equal(a, b) for a, b in zip(ours, from_torch, strict=True))


def test_adamw_without_gradients_changes_nothing_and_zero_grad_can_keep_buffers():
    layer = torch.nn.Linear(3, 2)
    before = [p.detach().clone() for p in layer.parameters()]
    opt = loop.AdamW(layer.parameters(), lr=0.1, weight_decay=0.1)
    opt.step()
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters(), strict=True)) and not opt.state
    layer(torch.ones(1, 3)).sum().backward()
    grads = [p.grad for p in layer.parameters()]
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is g and not g.any() for p, g in zip(layer.parameters(), grads, strict=True))
    with pytest.raises(ValueError, match="one parameter group only"):
        opt.load_state_dict({"state": {}, "param_groups": [{"lr": 0.1}, {"lr": 0.2}]})


def test_adamw_is_torch_optim_under_another_torch_release(monkeypatch):
    layer = torch.nn.Linear(3, 2)
    assert isinstance(loop.adamw(layer, {"lr": 0.1, "weight_decay": 0.1}), loop.AdamW)
    assert loop.kernel_release("2.13.0+cpu") and loop.kernel_release("2.13.1")
    assert not loop.kernel_release("2.14.0") and not loop.kernel_release("3.13.0")
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    opt = loop.adamw(layer, {"lr": 0.1, "weight_decay": 0.1})
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["fused"] and opt.defaults["betas"] == (0.9, 0.98)


@pytest.mark.parametrize("make", [loop.AdamW, lambda ps, **kw: torch.optim.AdamW(ps, fused=True, **kw)])
def test_a_state_dict_sliced_to_some_models_keeps_their_moments(make):
    """Stacked training drops models that stopped: the optimizer of the rest takes their rows."""
    stacked = torch.nn.Parameter(torch.randn(3, 4))
    opt = make([stacked], lr=0.1, weight_decay=0.1)
    stacked.grad = torch.randn(3, 4)
    opt.step()
    index = torch.tensor([0, 2])
    kept = torch.nn.Parameter(stacked.detach()[index].clone())
    fresh = make([kept], lr=0.0, weight_decay=0.1)
    fresh.load_state_dict(loop.sliced_state(opt.state_dict(), index))
    assert fresh.param_groups[0]["lr"] == 0.1
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(fresh.state_dict()["state"][0][key], opt.state_dict()["state"][0][key][index])
