"""The files a scenario makes a run read (a trace, a table of lengths): the fields the schema marks with
:func:`sim.config.base.input_file`, found by walking the schema, so a new such field is resolved on loading and
hashed into a sweep's run key without being listed anywhere else."""

from __future__ import annotations

import functools
import os
from typing import Any

from pydantic import BaseModel

from sim.config.base import INPUT_FILE
from sim.config.messages import inner_model
from sim.config.scenario import Scenario


@functools.cache
def input_file_fields() -> tuple[str, ...]:
    """Dotted paths of the schema's input-file fields, ``*`` standing for the key of a named map."""
    out: list[str] = []

    def walk(cls: type[BaseModel], prefix: str) -> None:
        for name, field in cls.model_fields.items():
            path = f"{prefix}{name}"
            extra = field.json_schema_extra
            if isinstance(extra, dict) and extra.get(INPUT_FILE):
                out.append(path)
                continue
            inner = inner_model(field.annotation)
            if inner is not None:
                is_map = getattr(field.annotation, "__origin__", None) is dict
                walk(inner, f"{path}.*." if is_map else f"{path}.")

    walk(Scenario, "")
    return tuple(out)


def _matches(node: Any, parts: list[str], path: str) -> list[tuple[str, Any, str]]:
    """(parent mapping, key, dotted path) of every place ``parts`` reaches in a nested mapping."""
    if not isinstance(node, dict) or not parts:
        return []
    head, rest = parts[0], parts[1:]
    keys = list(node) if head == "*" else [head] if head in node else []
    if not rest:
        return [(node, k, f"{path}{k}") for k in keys]
    return [m for k in keys for m in _matches(node[k], rest, f"{path}{k}.")]


def input_file_slots(raw: dict) -> list[tuple[dict, str, str]]:
    """(the mapping holding it, its key, its dotted path) of every input file a scenario mapping names."""
    return [m for pattern in input_file_fields() for m in _matches(raw, pattern.split("."), "")]


def input_files(raw: dict) -> list[tuple[str, str]]:
    """(dotted path, file) of every input file a resolved scenario mapping names."""
    return [(path, parent[key]) for parent, key, path in input_file_slots(raw) if isinstance(parent[key], str)]


# what each input file is, in a user's words (by the schema's dotted path); a model file may also be a folder
INPUT_FILE_KINDS = {"models.*.file": "a model file (a config.json, a folder holding one, or a .gguf)",
                    "models.*.moe.routing.trace": "a route trace (CSV or JSONL)",
                    "machines.*.engine.iteration.operators": "a CSV table of profiled operator times",
                    "serve.workload.trace": "a trace CSV", "serve.workload.lengths": "a CSV table of lengths"}
FOLDER_OK = frozenset({"models.*.file"})  # a Hugging Face model's folder, holding its config.json


def check_input_files(raw: dict, source: str) -> None:
    """Every input file a resolved scenario mapping names is a regular file that exists (or, for a model, a
    folder), its name without a NUL byte: :func:`sim.formats.inputs.check_file`, which never opens it (a FIFO cannot
    block). A problem is one line at ``source: key.path`` naming the file (every one of them, when several)."""
    from sim.core.errors import ScenarioError, combined
    from sim.formats.inputs import check_file

    errors = []
    for pattern in input_file_fields():
        what = INPUT_FILE_KINDS.get(pattern, "a file")
        for parent, key, where in _matches(raw, pattern.split("."), ""):
            path = parent[key]
            if not isinstance(path, str) or (pattern in FOLDER_OK and os.path.isdir(path)):
                continue
            try:
                check_file(path, where, what)
            except ScenarioError as exc:
                errors.append(ScenarioError(source, where, f"{exc.source}: {exc.problem}"))
    if errors:
        raise combined(errors)
