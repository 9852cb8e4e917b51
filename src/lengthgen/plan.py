"""Which tasks each claim, analysis and figure is judged on, read from a resolved config: the
claims rule, the figures and `lengthgen power` plan with the same functions, so what a scorecard
judges, what its figures draw and what its power table simulates cannot drift apart."""

from __future__ import annotations

import shlex

from lengthgen import tasks
from lengthgen.support.fileio import canonical_json

COUPLING_KINDS = ("scratchpad_parity", "variable_assignment")
# What `lengthgen figure --kind` draws from the sweep table; E4's and the attention figures are
# drawn by their own stages.
FIGURE_KINDS = ("sparse_parity", "sparsity_test", "coupling", "scale", "needle")


def tasks_of(config: dict, kind: str) -> list[str]:
    return [t["name"] for t in config["tasks"] if t["kind"] == kind]


def model_size(section: dict) -> str:
    return f"{section['model']['n_layer']}x{section['model']['d_model']}"


def sparse_sizes(config: dict) -> dict:
    """Each E1 task's model size ("layers x width"); with two or more sizes the scale analysis
    compares them (config/scale.yaml)."""
    sizes = {t["name"]: model_size(t) for t in config["tasks"] if t["kind"] == "sparse_parity"}
    return sizes if len(set(sizes.values())) > 1 else {}


def claim1_tasks(config: dict) -> list[str]:
    """The E1 tasks claim 1 is decided on: those at the run's own model size (all when none is)."""
    at_base = [t for t, size in sparse_sizes(config).items() if size == model_size(config)]
    return at_base or tasks_of(config, "sparse_parity")


def needle_info(config: dict) -> dict:
    """Each needle task's longest training haystack: claim 1's rule runs on it as an analysis."""
    return {t["name"]: t["params"]["n_max"] for t in config["tasks"] if t["kind"] == "needle"}


def train_max(config: dict, kind: str) -> int:
    """Longest training length over the tasks of a kind (0 if none)."""
    return max([t["params"]["n_max"] for t in config["tasks"] if t["kind"] == kind] or [0])


def coupling_tasks(config: dict) -> list[dict]:
    return [t for t in config["tasks"] if t["kind"] in COUPLING_KINDS]


def coupling_info(config: dict) -> dict:
    """What the claim-2 checks read: each E2/E3 task's kind, longest training length, answer
    format (E3), the IDs its training covered (max_position) against its test sequences, and the
    options of the schemes it runs."""
    return {
        t["name"]: {
            "kind": t["kind"],
            "n_max": t["params"]["n_max"],
            "answer_format": t["params"].get("answer_format"),
            "max_position": t["model"]["max_position"],
            # tokens of the longest test sequence at each length: what the test asks of the IDs
            "test_tokens": {str(n): tasks.get(t["kind"]).seq_len(t["params"], n) for n in t["eval"]["lengths"]},
            "scheme_options": t["scheme_options"],
        }
        for t in coupling_tasks(config)
    }


def claims_plan(config: dict) -> dict:
    """What the claims stage is told besides the tables: claim 1's tasks and their longest
    training length, and the claim-2 tasks' coupling info."""
    return {"sparse_tasks": claim1_tasks(config), "train_max": train_max(config, "sparse_parity"),
            "coupling": coupling_info(config)}


def figures(config: dict) -> list[str]:
    """The figures a run draws: one per kind of experiment it runs."""
    kinds = {
        "sparse_parity": tasks_of(config, "sparse_parity"),
        "sparsity_test": tasks_of(config, "sparse_parity"),
        "coupling": coupling_tasks(config),
        "scale": sparse_sizes(config),
        "needle": needle_info(config),
    }
    language = ["influence_gap", "influence_recovered", "influence_short_model"] if config["language"] else []
    return [name for name, present in kinds.items() if present] + language


def figure_options(config: dict, kind: str) -> dict:
    """What `lengthgen figure --kind <kind>` is told besides the sweep table, by option: claim 1's
    tasks (sparse_parity, sparsity_test), the E2/E3 tasks (coupling), the E1 sizes (scale) or the
    needle tasks, each with its longest training length, and the claims' settings it applies."""
    e1 = {"tasks": claim1_tasks(config), "train_max": [train_max(config, "sparse_parity")]}
    fit_min = config["claims"]["sparsity"]["fit_min"]
    claims = canonical_json(config["claims"])
    if kind == "sparse_parity":
        return {**e1, "fit_min": fit_min}
    if kind == "sparsity_test":
        return {**e1, "claims": claims}
    if kind == "coupling":
        coupled = coupling_tasks(config)
        return {"tasks": [t["name"] for t in coupled], "train_max": [t["params"]["n_max"] for t in coupled]}
    if kind == "scale":
        return {"sizes": canonical_json(sparse_sizes(config)), "train_max": e1["train_max"], "claims": claims}
    if kind == "needle":
        needle = needle_info(config)
        return {"tasks": list(needle), "train_max": list(needle.values()), "fit_min": fit_min}
    raise ValueError(f"{kind}: not one of {FIGURE_KINDS}")


def figure_args(config: dict, kind: str) -> str:
    """figure_options as the command line's arguments, quoted for the shell, after `--kind`."""
    args = ["--kind", kind]
    for option, value in figure_options(config, kind).items():
        args += [f"--{option.replace('_', '-')}", *map(str, value if isinstance(value, list) else [value])]
    return shlex.join(args)
