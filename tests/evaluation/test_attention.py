"""The attention stage: recomputed attention is the model's own (every encoding, coupled IDs
included), the statistics of a row are the hand-computed ones, gradient-times-input finds the
one token a hand-built model reads, and a trained cell gives its table through the CLI."""

import copy
import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_MODEL, error_lines, run_lengthgen, write_dataset

from lengthgen.config import fill_defaults
from lengthgen.evaluation import attention
from lengthgen.model.transformer import CausalSelfAttention, ModelConfig, Transformer
from lengthgen.support.errors import UserError
from lengthgen.training import train

ENCODINGS = {  # name: encoding, whether the IDs are coupled (repeated, not increasing)
    "none": ("none", False), "ape": ("ape", False), "rope": ("rope", False), "alibi": ("alibi", False),
    "rope-coupled": ("rope", True), "alibi-coupled": ("alibi", True), "ape-coupled": ("ape", True),
}


def _recording_sdpa(record: list):
    """scaled_dot_product_attention that also records the probabilities it applies, computed
    from exactly the queries, keys and mask the model hands it."""
    original = F.scaled_dot_product_attention

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if is_causal:
            scores = scores.masked_fill(~torch.ones(scores.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool \
                else scores + attn_mask
        record.append(scores.softmax(-1))
        return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kw)

    return sdpa


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_recomputed_attention_is_the_models_own(name, monkeypatch):
    encoding, coupled = ENCODINGS[name]
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=9, n_layer=2, d_model=16, n_head=2, d_ff=32, encoding=encoding,
                                    max_position=64)).eval()
    for p in model.parameters():  # larger weights than the init's: sharp, unequal attention rows
        torch.nn.init.normal_(p, std=0.5)
    tokens = torch.randint(1, 9, (3, 21))
    ids = torch.randint(0, 12, (3, 21)) if coupled else torch.arange(21).expand(3, 21)
    record = []
    monkeypatch.setattr(F, "scaled_dot_product_attention", _recording_sdpa(record))
    with torch.no_grad():
        logits = model(tokens, ids)
        probs = []
        h = model.features(tokens, ids, attention=probs)
    assert len(record) == len(probs) == 2
    for own, ours in zip(record, probs, strict=True):
        assert (ours - own).abs().max() < 1e-5
        assert ours.max() > 0.9  # the check is not between two near-uniform rows
    assert (model.head(h) - logits).abs().max() < 1e-5


def test_row_statistics_by_hand():
    rows = torch.tensor([[[0.1, 0.6, 0.3, 0.0]], [[0.1, 0.6, 0.3, 0.0]]])  # (R=2, H=1, T=4)
    query = torch.tensor([2, 2])
    deps = torch.tensor([[1, -1], [0, 2]])
    s = attention.row_stats(rows, query, deps)
    assert s["mass"][:, 0].tolist() == pytest.approx([0.6, 0.4])
    assert s["topk_mass"][:, 0].tolist() == pytest.approx([0.6, 0.9])  # the 1 and 2 largest weights
    assert s["rank"][:, 0].tolist() == pytest.approx([1.0, 2.5])  # ranks 3 and 2
    entropy = -(0.1 * math.log(0.1) + 0.6 * math.log(0.6) + 0.3 * math.log(0.3))
    assert s["entropy"][:, 0].tolist() == pytest.approx([entropy, entropy])
    ties = attention.row_stats(torch.full((1, 1, 4), 0.25), torch.tensor([3]), torch.tensor([[0]]))
    assert ties["rank"].item() == pytest.approx(2.5)  # four equal keys: the average of ranks 1-4


def _one_token_reader():
    """A 1-layer NoPE model without LayerNorm or MLP whose only head attends, at every query,
    to the marker token (2 or 3) and outputs which one it is: its answer depends on that token
    alone. Embedding channels: 0 constant, 1 marker, 2 which marker (+1 for 3, -1 for 2)."""
    model = Transformer(ModelConfig(vocab_size=5, n_layer=1, d_model=4, n_head=1, d_ff=4, encoding="none")).eval()
    block = model.blocks[0]
    block.ln1, block.ln2, model.ln_f = torch.nn.Identity(), torch.nn.Identity(), torch.nn.Identity()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.tok_emb.weight[:, 0] = 1.0
        model.tok_emb.weight[2:4, 1] = 1.0
        model.tok_emb.weight[2, 2], model.tok_emb.weight[3, 2] = -1.0, 1.0
        w = block.attn.qkv.weight  # rows: q (0-3), k (4-7), v (8-11)
        w[1, 0] = 40.0  # q channel 1 from the constant: scores = 20 x marker
        w[4 + 1, 1] = 1.0  # k channel 1 = marker
        w[8 + 3, 2] = 1.0  # v channel 3 = which marker
        block.attn.proj.weight[3, 3] = 1.0
        model.head.weight[3, 3], model.head.weight[2, 3] = 1.0, -1.0
    return model


def test_attribution_finds_the_one_token_the_answer_depends_on():
    model = _one_token_reader()
    tokens = torch.tensor([[1, 4, 4, 2, 4, 4, 4, 0], [1, 4, 3, 4, 4, 4, 4, 0]])  # markers at 3 and 2; 0 as SEP
    ids = torch.arange(8).expand(2, 8)
    with torch.no_grad():
        assert model(tokens, ids)[:, -1].argmax(-1).tolist() == [2, 3]  # it reads the marker
    answer = torch.tensor([[2], [3]])
    tokens = torch.cat([tokens, answer], dim=1)
    ids = torch.arange(9).expand(2, 9)
    query, target = torch.tensor([7, 7]), torch.tensor([8, 8])
    right = attention.measure(model, tokens, ids, query, target, torch.tensor([[3], [2]]), torch.tensor([-1, -1]), 8)
    assert right["attribution"]["mass"].tolist() == pytest.approx([1.0, 1.0], abs=1e-6)
    assert right["attribution"]["rank"].tolist() == [1.0, 1.0]
    assert right["attention"]["mass"][0, :, 0].tolist() == pytest.approx([1.0, 1.0], abs=1e-6)
    wrong = attention.measure(model, tokens, ids, query, target, torch.tensor([[4], [4]]), torch.tensor([-1, -1]), 8)
    assert wrong["attribution"]["mass"].max() < 1e-6 and wrong["attention"]["mass"].max() < 1e-6
    assert right["chance"].tolist() == pytest.approx([1 / 8, 1 / 8])


ASSIGNMENT = {"name": "assignment", "kind": "variable_assignment", "train_examples": 400,
              "params": {"n_min": 2, "n_max": 4, "depth_min": 1, "depth_max": 2, "distractor_depth_max": 2,
                         "variables": 12, "answer_format": "chain"},
              "eval": {"lengths": [4, 6], "examples": 5}}


@pytest.fixture(scope="module")
def assignment_data(tmp_path_factory, schema):
    task = copy.deepcopy(ASSIGNMENT)
    fill_defaults(task["params"], schema["$defs"]["variable_assignment_params"], schema)
    return write_dataset(tmp_path_factory.mktemp("assignment"), task)


def _train(tmp_path, tiny_cell, data, task, scheme="rope", **options):
    cell = tiny_cell(task=task, scheme=scheme, encoding="rope" if options else None, options=options or None)
    train.train(cell, data["train"], tmp_path / scheme, tmp_path / f"{scheme}.pt", log=lambda m: None)
    return tmp_path / scheme / "model.pt"


def test_cli_writes_every_group_layer_head_and_metric(tmp_path, tiny_cell, tiny_dataset):
    model = _train(tmp_path, tiny_cell, tiny_dataset, "tiny", "alibi")
    out = tmp_path / "attention.parquet"
    done = run_lengthgen("attention", "--model", model, "--data", tiny_dataset["test"], "--out", out,
                         "--config", '{"examples": 3, "targets": 2}')
    assert done.returncode == 0, done.stderr
    df = pd.read_parquet(out)
    heads = TINY_MODEL["n_layer"] * TINY_MODEL["n_head"]
    groups = len(tiny_dataset["task"]["eval"]["lengths"])  # one k
    assert len(df) == groups * (heads * len(attention.METRICS) + len(attention.METRICS) + 1)
    assert set(df["metric"]) == {*attention.METRICS, *(f"attribution_{m}" for m in attention.METRICS), "chance"}
    assert (df["examples"] == 3).all() and (df["targets"] == 3).all()  # one target per E1 example
    masses = df[df["metric"].str.endswith("mass")]["value"]
    assert masses.between(0, 1 + 1e-6).all()
    assert df[df["metric"] == "chance"].set_index("length")["value"].to_dict() == \
        pytest.approx({n: 2 / (n + 2) for n in tiny_dataset["task"]["eval"]["lengths"]})  # k=2 of n + 2 keys
    assert df["layer"].isna().sum() == groups * (len(attention.METRICS) + 1)


def test_a_copying_scheme_is_scored_by_its_pointer(tmp_path, tiny_cell, assignment_data):
    model = _train(tmp_path, tiny_cell, assignment_data, "assignment", "ppc", positions="coupled",
                   position_head="pointer", copy=True, pointer_offset=2, pointer_rope=False)
    out = tmp_path / "attention.parquet"
    attention.cell_attention(model, assignment_data["test"], out, {"examples": 4, "targets": 4}, log=lambda m: None)
    df = pd.read_parquet(out)
    assert set(df["depth"]) == {1, 2} and set(df["length"]) == {4, 6}
    targets = df.groupby("depth")["targets"].first()
    assert targets.to_dict() == {1: 4, 2: 8}  # one hop per depth, EOS unscored
    chance = df[df["metric"] == "chance"].set_index(["length", "depth"])["value"]
    assert chance[(4, 1)] == pytest.approx(4 / (4 * 4 + 3))  # a statement of 4 tokens, read from the query


def test_a_test_set_of_another_task_is_refused_in_one_line(tmp_path, tiny_cell, tiny_dataset, assignment_data):
    model = _train(tmp_path, tiny_cell, tiny_dataset, "tiny", "rope")
    done = run_lengthgen("attention", "--model", model, "--data", assignment_data["test"], "--out",
                         tmp_path / "a.parquet")
    assert done.returncode == 2 and len(error_lines(done.stderr)) == 1, done.stderr
    assert not (tmp_path / "a.parquet").exists()


def test_defaults_come_from_the_schema_and_a_bad_value_names_its_key():
    from lengthgen.support import schema as lgschema

    defaults = lgschema.load()["$defs"]["attention"]["properties"]
    assert lgschema.section("attention", {}) == {k: v["default"] for k, v in defaults.items()}
    with pytest.raises(UserError, match=r"^config\.attention\.examples: 0 is less than the minimum of 1$"):
        lgschema.section("attention", {"examples": 0})


def test_a_forward_that_drifts_from_the_models_is_refused(tmp_path, tiny_cell, tiny_dataset, monkeypatch):
    model = _train(tmp_path, tiny_cell, tiny_dataset, "tiny", "rope")
    original = CausalSelfAttention.written_out

    def drifted(*args):  # e.g. a mask or a scale the fused kernel no longer uses
        return original(*args) * 1.5

    monkeypatch.setattr(CausalSelfAttention, "written_out", staticmethod(drifted))
    with pytest.raises(RuntimeError, match="recomputed forward is off the model's"):
        attention.cell_attention(model, tiny_dataset["test"], tmp_path / "a.parquet", {}, log=lambda m: None)
    assert not (tmp_path / "a.parquet").exists()


def test_another_cells_model_is_refused_and_the_table_records_its_cell(tmp_path, tiny_cell, tiny_dataset):
    from lengthgen.analysis.aggregate import sweep_identity
    from lengthgen.analysis.attention import aggregate
    from lengthgen.support import identity

    model = _train(tmp_path, tiny_cell, tiny_dataset, "tiny", "rope")
    own = identity.of_cell(tiny_cell(task="tiny", scheme="rope"))
    other = identity.of_cell(tiny_cell(task="tiny", scheme="rope", seed=5))
    done = run_lengthgen("attention", "--model", model, "--data", tiny_dataset["test"], "--expect", other,
                         "--out", tmp_path / "a.parquet")
    assert done.returncode == 2 and error_lines(done.stderr) == [
        f"lengthgen: error: {model}: holds the model of {identity.describe(own)}, expected {identity.describe(other)}; "
        "delete it and rerun the workflow to retrain this cell"]
    out = tmp_path / "b.parquet"
    attention.cell_attention(model, tiny_dataset["test"], out, {"examples": 2}, log=lambda m: None, expect=own)
    assert sweep_identity(out) == own
    aggregate([out], tmp_path / "t.csv", expected=[own])
    with pytest.raises(UserError, match="holds the attention table of"):
        aggregate([out], tmp_path / "t.csv", expected=[other])
