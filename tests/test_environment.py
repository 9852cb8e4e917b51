"""The pip and conda environments name the same packages, and torch stays pinned to the
version whose CPU wheel the project's machines carry."""

import re

import yaml

# conda-forge names that differ from the PyPI names of the same package
CONDA_TO_PIP = {"pytorch": "torch", "snakemake-minimal": "snakemake", "matplotlib-base": "matplotlib",
                "seaborn-base": "seaborn"}


def _pip_names(repo):
    names = set()
    for line in (repo / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            names.add(re.split(r"[<>=!~ \[]", line)[0].lower())
    return names


def _conda_names(repo):
    env = yaml.safe_load((repo / "environment.yml").read_text())
    assert env["channels"][0] == "conda-forge" and "defaults" not in env["channels"]
    names = set()
    for dep in env["dependencies"]:
        if isinstance(dep, dict):  # the pip: section, for what conda-forge lacks
            names.update(re.split(r"[<>=!~ ]", d)[0].lower() for d in dep["pip"])
            continue
        name = re.split(r"[<>=!~ ]", dep)[0].lower()
        if name not in ("python", "pip"):
            names.add(CONDA_TO_PIP.get(name, name))
    return names


def test_pip_and_conda_environments_name_the_same_packages(repo):
    assert _pip_names(repo) == _conda_names(repo)


def test_torch_is_pinned_exactly(repo):
    assert "torch==2.13.0" in (repo / "requirements.txt").read_text().splitlines()


def test_every_rule_points_at_the_environment(repo):
    common = (repo / "workflow/rules/common.smk").read_text()
    assert 'ENV = "../../environment.yml"' in common
    for smk in (repo / "workflow/rules").glob("*.smk"):
        text = smk.read_text()
        rules = re.findall(r"^rule \w+:", text, flags=re.M)
        assert len(rules) == text.count("conda:\n        ENV"), smk.name
