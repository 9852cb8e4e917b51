"""lengthgen.model.checkpoint: a model file written whole and read back as the same model, tensors
and plain types only."""

from __future__ import annotations

import pytest
import torch

from lengthgen.model import checkpoint
from lengthgen.model.transformer import ModelConfig, Transformer
from lengthgen.support.errors import UserError


def _model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=11, n_layer=1, d_model=16, n_head=2, d_ff=32, encoding="rope"))


def test_a_saved_model_reads_back_as_the_same_model_in_eval_mode(tmp_path):
    model = _model()
    path = tmp_path / "run" / "model.pt"
    path.parent.mkdir()
    checkpoint.save_tensors(path, {"model_args": model.cfg.to_dict(), "state_dict": model.state_dict(), "step": 7})
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.pt"]  # no temporary left beside it
    loaded, state = checkpoint.load_model(path)
    assert not loaded.training and state["step"] == 7
    ids = torch.arange(5).unsqueeze(0)
    tokens = torch.tensor([[1, 4, 2, 9, 3]])
    torch.testing.assert_close(loaded(tokens, ids), model.eval()(tokens, ids), rtol=0, atol=0)


def test_a_file_of_other_objects_is_refused_and_one_that_is_missing_is_named(tmp_path):
    path = tmp_path / "model.pt"
    torch.save({"state_dict": {}, "cfg": ModelConfig(vocab_size=3)}, path)
    with pytest.raises(UserError, match=r"model\.pt: refused to load"):
        checkpoint.load_tensors(path)
    with pytest.raises(FileNotFoundError):
        checkpoint.load_tensors(tmp_path / "nowhere.pt")
