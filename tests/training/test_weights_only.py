"""Model and checkpoint files load with torch.load(weights_only=True): a pickle that would run
code when loaded is refused in one line, and never runs."""

import json
import os

import pytest
import torch
from conftest import error_lines, run_lengthgen

from lengthgen.evaluation import sweep as evaluate
from lengthgen.language import lm
from lengthgen.model.checkpoint import load_tensors
from lengthgen.support.errors import UserError
from lengthgen.training.optim import adamw, load_checkpoint, save_checkpoint


class _RunsCode:
    """Unpickling this calls os.system: what a hostile file in results/ would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def hostile(tmp_path):
    marker = tmp_path / "code-ran"
    path = tmp_path / "model.pt"
    torch.save({"model_args": {}, "state_dict": {}, "payload": _RunsCode(marker)}, path)
    return path, marker


def _assert_refused(message: str, path) -> None:
    assert "\n" not in message
    assert message.startswith(f"{path}: refused to load") and "could run code" in message


def test_loaders_refuse_code_and_never_run_it(hostile):
    path, marker = hostile
    for load in (load_tensors, lm.load, lambda p: evaluate.load_model(p, "cpu")):
        with pytest.raises(UserError) as err:
            load(path)
        _assert_refused(str(err.value), path)
    assert not marker.exists()


def test_a_hostile_checkpoint_is_refused_and_the_run_starts_over(hostile):
    path, marker = hostile
    lines = []
    assert load_checkpoint(path, "any fingerprint", lines.append) is None
    assert len(lines) == 1 and lines[0].endswith("; starting from step 0")
    _assert_refused(lines[0], path)
    assert not marker.exists()


@pytest.mark.subprocess
def test_the_cli_prints_the_refusal_in_one_line(hostile, tmp_path):
    path, marker = hostile
    eval_cfg = json.dumps({"device": "cpu", "threads": 1, "batch_size": 8})
    # in a new interpreter, as a job runs it: the entry point `python -m lengthgen` itself
    result = run_lengthgen("sweep", "--model", path, "--data", tmp_path / "none.parquet", "--out",
                           tmp_path / "sweep.parquet", "--eval", eval_cfg, fresh=True)
    assert result.returncode == 2, result.stderr
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and "refused to load" in lines[0], result.stderr
    assert "Traceback" not in result.stderr and not marker.exists()


def test_what_the_pipeline_saves_loads_with_weights_only(tiny_cell, tiny_dataset, tmp_path):
    from lengthgen.training.train import train

    train(tiny_cell(max_steps=3), tiny_dataset["train"], tmp_path / "out", tmp_path / "c.pt")
    model, saved = evaluate.load_model(tmp_path / "out" / "model.pt", "cpu")
    assert saved["cell"]["scheme"] == "rope"
    # a checkpoint as train() writes one: optimizer state after a step, RNG state, log rows
    opt = adamw(model, {"lr": 1e-3, "weight_decay": 0.01})
    sum(p.sum() for p in model.parameters()).backward()
    opt.step()
    save_checkpoint(tmp_path / "ckpt.pt", fingerprint="f", model=model.state_dict(), optimizer=opt.state_dict(),
                    rng=torch.get_rng_state(), step=1, streak=0, rows=[(0, 1.0, 0.5, 1e-3)])
    lines = []
    state = load_checkpoint(tmp_path / "ckpt.pt", "f", lines.append)
    assert lines == [] and torch.equal(state["rng"], torch.get_rng_state())
    assert torch.equal(state["optimizer"]["state"][0]["exp_avg"], opt.state[0]["exp_avg"])
