"""The configuration schema (workflow/schemas/config.schema.yaml): the one place defaults live.

A stage called from the workflow gets its section already validated and filled; one called
directly (the command line, a notebook, a test) passes what it was given through `section`,
which fills the same defaults and gives the same one-line error naming the key.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import jsonschema
import yaml

from lengthgen.support.errors import UserError

PATH = Path(__file__).resolve().parents[3] / "workflow/schemas/config.schema.yaml"


@functools.cache
def _loaded() -> dict:
    with open(PATH) as f:
        return yaml.safe_load(f)


def load() -> dict:
    """A copy of the schema, safe to modify."""
    return copy.deepcopy(_loaded())


def resolve(schema: dict, root: dict) -> dict:
    ref = schema.get("$ref")
    if ref:
        node = root
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        return {**resolve(node, root), **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def fill_defaults(instance, schema: dict, root: dict) -> None:
    """Set every missing key that has a default, recursing into objects and arrays."""
    schema = resolve(schema, root)
    if isinstance(instance, dict):
        for key, sub in schema.get("properties", {}).items():
            sub = resolve(sub, root)
            if key not in instance and "default" in sub:
                instance[key] = copy.deepcopy(sub["default"])
            if key in instance:
                fill_defaults(instance[key], sub, root)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in set(instance) - set(schema.get("properties", {})):
                fill_defaults(instance[key], extra, root)
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for item in instance:
            fill_defaults(item, schema["items"], root)


def where(path) -> str:
    out = "config"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def check(instance, schema: dict, root: dict, prefix=()) -> None:
    """UserError naming the first invalid key under `prefix`, if any."""
    validator = jsonschema.Draft202012Validator({**schema, "$defs": root["$defs"]})
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise UserError(f"{where([*prefix, *error.absolute_path])}: {_message(error)}")


def _message(error) -> str:
    """jsonschema's message, but a failed `pattern` in the words of the schema's patternMessage."""
    words = error.schema.get("patternMessage") if error.validator == "pattern" else None
    return f"{error.instance!r} {words}" if words else error.message


def section(dotted: str, given: dict | None) -> dict:
    """`given` (the config section at `dotted`, e.g. "language.tokenizer") validated, with the
    schema's defaults filled; a copy, so the caller's dict is left as it was."""
    root = _loaded()
    node = root
    for key in dotted.split("."):
        node = resolve(resolve(node, root)["properties"][key], root)
    instance = copy.deepcopy(given) if given is not None else {}
    fill_defaults(instance, node, root)
    check(instance, node, root, prefix=tuple(dotted.split(".")))
    return instance
