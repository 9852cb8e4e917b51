"""E4's attention measures: hand-checked on one row, the mean row is the one the influence
scoring ranks by, and the chance Jaccard is the expectation over random k-sets."""

import itertools

import numpy as np
import pytest
import torch

from lengthgen.language import influence
from lengthgen.language.attention import jaccard_chance, measure, row_measures
from lengthgen.model.transformer import ModelConfig, Transformer


def test_row_measures_by_hand():
    rows = torch.tensor([[[0.05, 0.4, 0.05, 0.2, 0.3]]])  # keys 0-2 distant (d = 3), 3-4 the window
    got = row_measures(rows, torch.tensor([[1, 2]]), k=2, d=3)
    assert got["mass"].item() == pytest.approx(0.45)  # on keys 1 and 2
    assert got["topk_mass"].item() == pytest.approx(0.7)  # keys 1 and 4
    assert got["jaccard"].item() == pytest.approx(1 / 3)  # most attended distant: {1, 0} (tie to the earlier)


def test_jaccard_chance_is_the_mean_over_every_pair_of_sets():
    sets = [set(s) for s in itertools.combinations(range(6), 2)]
    want = np.mean([len(a & b) / len(a | b) for a in sets for b in sets])
    assert jaccard_chance(2, 6) == pytest.approx(want) and jaccard_chance(1, 10) == pytest.approx(0.1)


def test_mean_row_is_the_influence_scorings_attention():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=23, n_layer=2, d_model=32, n_head=2, d_ff=64, encoding="rope")).eval()
    for p in model.parameters():
        p.data.mul_(20)
    stream = np.random.default_rng(1).integers(1, 23, 200).astype(np.uint16)
    c = influence.Contexts(stream, np.array([40, 77, 150]), 12, 4)
    order = influence.attention_order(model, c)  # (N, d) by the mean row
    greedy = order[:, :3].flip(1)  # its top 3: the mean row's Jaccard is 1
    got = measure(model, c.ctx, greedy, k=3, d=8)
    assert got[(None, None, "jaccard")].tolist() == [1.0, 1.0, 1.0]
    assert {key[2] for key in got} == {"mass", "topk_mass", "jaccard"} and len(got) == 2 * 2 * 3 + 3
    attn = influence.last_attention(model, c.ctx, torch.arange(12).expand(3, -1))
    assert got[(None, None, "mass")].tolist() == pytest.approx(attn.gather(1, greedy).sum(1).tolist(), abs=1e-5)
