"""Dotted key paths into a scenario mapping (``machines.NAME.disk``): reading, writing, ``--set`` values."""

from __future__ import annotations

import difflib
from typing import Any

from sim.config.messages import inner_model, short
from sim.config.scenario import Scenario
from sim.config.yaml_io import parse_scalar
from sim.core.errors import ScenarioError, cut


def number_at(value: Any) -> float | None:
    """A value found at a dotted path as a number: text that parses as one counts (the models accept it; a mapping
    made in Python may hold it), booleans do not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an integer beyond what a float holds (from Python: files refuse it)
            return None
    if isinstance(value, str):
        try:
            return float(value)
        except (ValueError, OverflowError):
            return None
    return None


def get_dotted(data: Any, path: str) -> tuple[bool, Any]:
    """(found, value) at dotted ``path`` inside nested dicts/lists."""
    node = data
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def set_dotted(data: dict, path: str, value: Any, source: str, create_entries: bool = True) -> str | None:
    """Set ``value`` at dotted ``path`` inside nested dicts/lists.

    Missing sections of the schema are created. A missing entry of a named map (``machines.NEW``) is created only
    with ``create_entries``, else it is an error with a did-you-mean. Returns the path of a created entry, if any.
    """
    parts = path.split(".")
    if not path or any(p == "" for p in parts):
        raise ScenarioError(source, path, "expected a dotted key path such as machines.NAME.disk")
    node: Any = data
    walked: list[str] = []
    created: str | None = None
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        here = ".".join(walked) or "(top level)"
        if isinstance(node, list):
            if not part.isdigit() or int(part) > len(node) or (int(part) == len(node) and not last):
                raise ScenarioError(source, path, f"'{part}' is not an index of the list at {here} "
                                    f"(length {len(node)})")
            idx = int(part)
            if last:
                if idx == len(node):
                    node.append(value)
                else:
                    node[idx] = value
                return created
            node = node[idx]
        elif isinstance(node, dict):
            if last:
                node[part] = value
                return created
            if node.get(part) is None:
                kind = schema_kind(walked + [part])
                if part in node or kind == "section":
                    node[part] = {}
                elif kind == "entry" and create_entries:
                    node[part] = {}
                    created = created or ".".join(walked + [part])
                else:
                    hint = difflib.get_close_matches(part, [str(k) for k in node], n=1)
                    extra = f" (did you mean '{hint[0]}'?)" if hint else ""
                    raise ScenarioError(source, path, f"no key '{part}' under {here}{extra}")
            node = node[part]
        else:
            raise ScenarioError(source, path, f"{here} holds {short(node)}, not a map")
        walked.append(part)
    return created


def schema_kind(parts: list[str]) -> str | None:
    """'section' when ``parts`` names a section of the schema, 'entry' for an entry of a named map, else None."""
    cls: Any = Scenario
    in_map = False
    kind: str | None = None
    for part in parts:
        if in_map:  # any name is a key of a named map; its value type comes next
            in_map, kind = False, "entry"
            continue
        fields = getattr(cls, "model_fields", None)
        if fields is None or part not in fields:
            return None
        ann = fields[part].annotation
        in_map = getattr(ann, "__origin__", None) is dict
        cls = inner_model(ann)
        kind = "section"
    return kind


def parse_set(expr: str, source: str = "--set") -> tuple[str, Any]:
    """``a.b.c=value`` -> (path, value) with the value read as the scenario file reads YAML (1.2: numbers such as
    ``30e-6``, booleans, lists, maps; see :func:`sim.config.yaml_io.parse_scalar`). A problem is one line at
    ``source`` (what the user wrote: ``--set``, ``--vs``, ``--axis NAME``) and the expression."""
    if "=" not in expr:
        raise ScenarioError(source, expr, "expected dotted.path=value")
    path, raw = expr.split("=", 1)
    return path.strip(), parse_scalar(raw, source, cut(expr, 80))
