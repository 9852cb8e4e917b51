"""Which tasks each claim and analysis is judged on, read from a resolved config: the claims
rule, the figures and `lengthgen power` plan with the same functions, so what a scorecard
judges and what its power table simulates cannot drift apart."""

from __future__ import annotations

from lengthgen import tasks

COUPLING_KINDS = ("scratchpad_parity", "variable_assignment")


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
