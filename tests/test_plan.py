"""Which tasks each claim and figure is judged on (lengthgen.plan)."""

import copy
import json
import shlex

import pytest

from lengthgen import config, plan
from lengthgen.support import fileio


def _config(schema, tasks):
    schemes = {"rope": {"encoding": "rope"}, "ppc": {"encoding": "rope", "positions": "coupled",
                                                     "position_head": "pointer"}}
    return config.validate({"tasks": tasks, "schemes": schemes, "language": None}, schema)


E1 = {"name": "e1", "kind": "sparse_parity", "schemes": ["rope"], "eval": {"lengths": [6, 12]},
      "params": {"k": 1, "n_min": 4, "n_max": 6}}
E3 = {"name": "e3", "kind": "variable_assignment", "schemes": ["ppc"], "eval": {"lengths": [4, 8]},
      "params": {"n_min": 2, "n_max": 4, "depth_max": 2, "distractor_depth_max": 2, "variables": 8},
      "model": {"max_position": 64}}


def test_claim_1_is_judged_at_the_runs_own_model_size_and_the_other_sizes_are_the_scale_analysis(schema):
    big = {**copy.deepcopy(E1), "name": "e1_big", "model": {"n_layer": 4, "d_model": 128}}
    cfg = _config(schema, [E1, big, E3])
    assert plan.sparse_sizes(cfg) == {"e1": "2x64", "e1_big": "4x128"}
    assert plan.claim1_tasks(cfg) == ["e1"]
    assert plan.claim1_tasks(_config(schema, [E1])) == ["e1"] and plan.sparse_sizes(_config(schema, [E1])) == {}
    assert plan.train_max(cfg, "sparse_parity") == 6 and plan.train_max(cfg, "needle") == 0


def test_coupling_info_gives_each_test_lengths_tokens_against_the_trained_ids(schema):
    info = plan.claims_plan(_config(schema, [E1, E3]))["coupling"]
    assert list(info) == ["e3"] and info["e3"]["max_position"] == 64 and info["e3"]["n_max"] == 4
    assert set(info["e3"]["test_tokens"]) == {"4", "8"}
    assert info["e3"]["test_tokens"]["8"] > info["e3"]["test_tokens"]["4"]
    assert plan.figures(_config(schema, [E1, E3])) == ["sparse_parity", "sparsity_test", "coupling"]


NEEDLE = {"name": "needle", "kind": "needle", "schemes": ["rope"], "eval": {"lengths": [16, 32]},
          "params": {"k": 2, "n_min": 8, "n_max": 16, "distractors": 0}}


def test_each_figure_is_told_the_tasks_its_claim_is_judged_on(schema):
    big = {**copy.deepcopy(E1), "name": "e1_big", "model": {"n_layer": 4, "d_model": 128}}
    cfg = _config(schema, [E1, big, E3, NEEDLE])
    assert plan.figures(cfg) == list(plan.FIGURE_KINDS)
    fit_min, claims = cfg["claims"]["sparsity"]["fit_min"], fileio.canonical_json(cfg["claims"])
    assert plan.figure_options(cfg, "sparse_parity") == {"tasks": ["e1"], "train_max": [6], "fit_min": fit_min}
    assert plan.figure_options(cfg, "sparsity_test") == {"tasks": ["e1"], "train_max": [6], "claims": claims}
    assert plan.figure_options(cfg, "coupling") == {"tasks": ["e3"], "train_max": [4]}
    assert plan.figure_options(cfg, "scale") == {"sizes": '{"e1":"2x64","e1_big":"4x128"}', "train_max": [6],
                                                 "claims": claims}
    assert plan.figure_options(cfg, "needle") == {"tasks": ["needle"], "train_max": [16], "fit_min": fit_min}
    with pytest.raises(ValueError, match="attention: not one of"):
        plan.figure_options(cfg, "attention")


def test_figure_args_are_the_command_lines_options_quoted_for_the_shell(schema):
    cfg = _config(schema, [E1, E3])
    expected = f"--kind sparse_parity --tasks e1 --train-max 6 --fit-min {cfg['claims']['sparsity']['fit_min']}"
    assert plan.figure_args(cfg, "sparse_parity") == expected
    args = shlex.split(plan.figure_args(cfg, "sparsity_test"))
    assert args[:6] == ["--kind", "sparsity_test", "--tasks", "e1", "--train-max", "6"]
    assert args[6] == "--claims" and json.loads(args[7]) == cfg["claims"] and len(args) == 8
