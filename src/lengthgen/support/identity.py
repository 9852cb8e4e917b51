"""Which cell a file belongs to: task, scheme, seed and a fingerprint of the cell's config slice.

Rules find a cell's files by path, but a path says nothing about what a file holds: a model.pt
copied into another cell's directory was evaluated, and counted in the tables, as that cell. So
every stage that reads a cell's checkpoint, sweep or metadata compares the identity the file
records with the one its rule expects (passed as a token, `task/scheme/seed<n>@<config>`), and
stops in one line on a mismatch. No torch here: the workflow computes tokens while it builds
the DAG.
"""

from __future__ import annotations

import hashlib

from lengthgen.support.errors import UserError
from lengthgen.support.fileio import canonical_json

# The key of a sweep's identity in its Parquet schema metadata (beside the columns, so that the
# tables, which concatenate the columns, do not change).
SWEEP_KEY = b"lengthgen.cell"


def fingerprint(cell: dict) -> str:
    """Digest of a cell's config slice (lengthgen.config.cell_slice): equal configs, equal digests."""
    return hashlib.sha256(canonical_json(cell).encode()).hexdigest()[:16]


def of_cell(cell: dict) -> str:
    """The identity token of a cell's config slice."""
    return f"{cell['task']}/{cell['scheme']}/seed{cell['seed']}@{fingerprint(cell)}"


def of_lm(spec: dict) -> str:
    """The identity token of an E4 language model's spec (lengthgen.config.lm_slice)."""
    return f"language/{spec['name']}@{fingerprint(spec)}"


def key(token: str) -> str:
    """`task/scheme/seed<n>`, the part of a token that names the cell (without its config)."""
    return token.partition("@")[0]


def describe(token: str) -> str:
    cell, _, config = token.partition("@")
    return f"{cell} (config {config})"


def check(path, held: str | None, expected: str | None, what: str, fix: str) -> None:
    """UserError naming `path` when the identity it `held` is not the `expected` one (None: not
    checked, for a stage run by hand)."""
    if expected is None or held == expected:
        return
    # None: written before identities were recorded, or not by lengthgen
    holds = f"holds {what} of {describe(held)}" if held else f"records no cell identity ({what})"
    raise UserError(f"{path}: {holds}, expected {describe(expected)}; {fix}")


def check_token(token: str, flag: str) -> str:
    """A token given on the command line, as `task/scheme/seed<n>@<config>`."""
    cell, at, config = token.partition("@")
    parts = cell.split("/")
    if not at or not config or len(parts) != 3 or not parts[2].startswith("seed") or not parts[2][4:].isdigit():
        raise UserError(f"{flag}: {token!r} is not a cell identity (task/scheme/seed<n>@<config>)")
    return token


def check_lm_token(token: str, flag: str) -> str:
    """A language model's token given on the command line, as `language/<name>@<config>`."""
    name, at, config = token.partition("@")
    if not at or not config or not name.startswith("language/") or "/" in name.removeprefix("language/"):
        raise UserError(f"{flag}: {token!r} is not a language model's identity (language/<name>@<config>)")
    return token


def cell_key(task: str, scheme: str, seed) -> str:
    return f"{task}/{scheme}/seed{int(seed)}"
