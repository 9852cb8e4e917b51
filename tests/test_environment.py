"""The pip and conda environments name the same packages at the same versions, and torch stays
pinned to the version whose CPU wheel the project's machines carry."""

import re

import yaml
from packaging.specifiers import SpecifierSet

# conda-forge names that differ from the PyPI names of the same package
CONDA_TO_PIP = {"pytorch": "torch", "snakemake-minimal": "snakemake", "matplotlib-base": "matplotlib",
                "seaborn-base": "seaborn"}


def _split(requirement: str) -> tuple[str, str]:
    name = re.split(r"[<>=!~ \[]", requirement)[0]
    return name.lower(), requirement[len(name):].strip()


def _pip_pins(repo) -> dict:
    """requirements.txt as {name: pip specifier}."""
    lines = (line.split("#")[0].strip() for line in (repo / "requirements.txt").read_text().splitlines())
    return dict(_split(line) for line in lines if line)


def _conda_as_pip(spec: str) -> str:
    """A conda match spec as the pip specifier it means: `=1.2.3` pins 1.2.3, `=6.*` any 6.x."""
    return "=" + spec if spec.startswith("=") and not spec.startswith("==") else spec


def _conda_pins(repo) -> dict:
    """environment.yml as {PyPI name: pip specifier} (python and pip themselves left out)."""
    env = yaml.safe_load((repo / "environment.yml").read_text())
    assert env["channels"][:2] == ["conda-forge", "bioconda"] and "defaults" not in env["channels"]
    pins = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):  # the pip: section, for what neither channel has
            pins.update(_split(d) for d in dep["pip"])
            continue
        name, spec = _split(dep)
        if name not in ("python", "pip"):
            pins[CONDA_TO_PIP.get(name, name)] = _conda_as_pip(spec)
    return pins


def test_pip_and_conda_environments_name_the_same_packages(repo):
    assert set(_pip_pins(repo)) == set(_conda_pins(repo))


def test_pip_and_conda_environments_pin_the_same_versions(repo):
    pip, conda = _pip_pins(repo), _conda_pins(repo)
    differ = {name: (pip[name], conda[name]) for name in pip
              if SpecifierSet(pip[name]) != SpecifierSet(conda.get(name, ""))}
    assert not differ, f"requirements.txt and environment.yml disagree (pip, conda): {differ}"


def test_conda_specs_read_as_pip_specifiers():
    assert _conda_as_pip("=2.13.0") == "==2.13.0"
    assert _conda_as_pip("=6.*") == "==6.*"
    assert SpecifierSet(_conda_as_pip("=26.0.1")) != SpecifierSet(">=20")


def test_torch_is_pinned_exactly(repo):
    assert "torch==2.13.0" in (repo / "requirements.txt").read_text().splitlines()


def test_every_rule_points_at_the_environment(repo):
    common = (repo / "workflow/rules/common.smk").read_text()
    assert 'ENV = "../../environment.yml"' in common
    for smk in (repo / "workflow/rules").glob("*.smk"):
        text = smk.read_text()
        rules = re.findall(r"^rule \w+:", text, flags=re.M)
        assert len(rules) == text.count("conda:\n        ENV"), smk.name
