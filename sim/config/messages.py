"""One-line messages from what pydantic and the checks find: the key path, the value, what was expected."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError

from sim.config.scenario import Scenario
from sim.core.errors import ScenarioError, combined

CALIBRATED = "missing: expected a value here or from a calibration file named under 'calibrations'"


MAX_HINT_CHARS = 200  # a name longer than this is no typo of a known one (difflib would take minutes over a long one)


def expected_one_of(value: str, names: list[str], what: str) -> str:
    """What was expected of ``value``: one of ``names``, the closest named when ``value`` looks like a typo of it."""
    typed = str(value)
    hint = difflib.get_close_matches(typed, names, n=1) if len(typed) <= MAX_HINT_CHARS else []
    extra = f" (did you mean '{hint[0]}'?)" if hint else ""
    return f"expected {what}, one of {sorted(names)}{extra}"


def short(value: Any, width: int = 60) -> str:
    """``repr(value)`` in at most ``width`` characters (cut to end in ``...``). A long value is never formatted
    whole: only the first ``width`` characters or so of its repr are built (a map, list or text of gigabytes, or a
    YAML alias that stands for billions of values, costs no more than a small one)."""
    text = _repr_upto(value, width + 1)
    return text if len(text) <= width else text[:width - 3] + "..."


def _repr_upto(value: Any, budget: int) -> str:
    """``repr(value)`` when it has at most ``budget`` characters, else a text of more than ``budget`` characters
    whose first ``budget`` are those of ``repr(value)`` (but perhaps its quote mark, when a text is cut)."""
    kind = type(value)
    if kind is str or kind is bytes:
        return repr(value[:budget]) if len(value) > budget else repr(value)
    if kind not in (list, tuple, dict, set):
        return repr(value)
    if not value:
        return "set()" if kind is set else repr(value)
    opening, closing = {list: "[]", tuple: "()", dict: "{}", set: "{}"}[kind]
    parts = [opening]
    used = 1
    items = value.items() if kind is dict else value
    for i, item in enumerate(items):
        if used > budget:
            return "".join(parts)
        piece = (", " if i else "") + (_repr_upto(item[0], budget - used) + ": " + _repr_upto(item[1], budget - used)
                                       if kind is dict else _repr_upto(item, budget - used))
        parts.append(piece)
        used += len(piece)
    parts.append("," + closing if kind is tuple and len(value) == 1 else closing)
    return "".join(parts)


def model_for_path(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class that owns the last key of ``loc`` (to suggest field names)."""
    cls: Any = Scenario
    for part in loc[:-1]:
        if cls is None:
            return None
        if isinstance(part, int):
            continue
        fields = getattr(cls, "model_fields", None)
        if fields is None:
            return None
        if part in fields:
            ann = fields[part].annotation
            cls = inner_model(ann)
        else:  # a map key such as a machine name: the model is the map's value type
            continue
    return cls if isinstance(cls, type) and issubclass(cls, BaseModel) else None


def inner_model(ann: Any) -> Any:
    args = getattr(ann, "__args__", None)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    if args:
        for a in reversed(args):
            inner = inner_model(a)
            if inner is not None:
                return inner
    return None


def format_validation_error(source: str, exc: ValidationError, data: Any = None) -> ScenarioError:
    """Every problem pydantic found, one line each (a :class:`ScenarioErrors` when there are several): the key path,
    the value and what was expected. An unknown key names the field it was probably meant to be, and that field's
    own "missing" is then not reported apart. ``data``, the mapping that was validated, tells the keys of the file
    from pydantic's names of union branches in an error's location."""
    found = [(_clean_loc(err["loc"], data, err["type"]), err) for err in exc.errors()]
    missing = {loc for loc, err in found if err["type"] == "missing"}
    unknown = {loc: _unknown_key(loc, missing) for loc, err in found if err["type"] == "extra_forbidden"}
    folded = {meant for _, meant in unknown.values() if meant is not None}
    lines: dict[str, list[str]] = {}  # key path -> what was wrong there (several union branches: several)
    for loc, err in found:
        if loc not in folded or err["type"] != "missing":
            problem = unknown[loc][0] if err["type"] == "extra_forbidden" else _problem(err)
            lines.setdefault(".".join(str(p) for p in loc), []).append(problem)
    errors = [ScenarioError(source, path, _merge(problems)) for path, problems in lines.items()]
    return combined(errors) if errors else ScenarioError(source, "", str(exc).splitlines()[0])


def _clean_loc(loc: tuple, data: Any, kind: str) -> tuple:
    """An error's location as keys of the file: without the names pydantic gives union branches
    (``literal['auto']``, ``constrained-int``, ``function-after[...]``)."""
    if data is None:
        return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith(("function-",
                                                                                              "constrained-")))))
    out: list = []
    node = data
    for i, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif i == len(loc) - 1 and kind == "missing" and isinstance(node, dict):
            pass  # the key that is not there
        else:
            continue  # a union branch's name, not a key of the file
        out.append(part)
    return tuple(out)


def _unknown_key(loc: tuple, missing: set[tuple]) -> tuple[str, tuple | None]:
    """The line for an unknown key, and the location of the missing field it was probably meant to be."""
    owner = model_for_path(loc)
    names = list(owner.model_fields) if owner else []
    absent = {n for n in names if loc[:-1] + (n,) in missing}
    typed = str(loc[-1])
    scored = [(difflib.SequenceMatcher(None, typed, n).ratio(), n in absent, n) for n in names] \
        if len(typed) <= MAX_HINT_CHARS else []
    close = [s for s in scored if s[0] >= 0.6]  # difflib.get_close_matches' cutoff
    if close:  # the closest field; a missing one only on a tie (it is then what the typo was meant to be)
        _, _, hint = max(close, key=lambda s: (s[0], s[1]))
        return f"unknown key; did you mean '{hint}'?", (loc[:-1] + (hint,) if hint in absent else None)
    return "unknown key" + (f"; expected one of {names}" if names else ""), None


def _problem(err: dict) -> str:
    """One pydantic error as the problem part of a line."""
    kind = err["type"]
    if kind == "missing":
        return "missing required key"
    msg = err["msg"]
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    msg = msg.removeprefix("Input should be ")
    return f"bad value {short(err.get('input'))}: expected {msg[0].lower() + msg[1:]}"


def _merge(problems: list[str]) -> str:
    """The problems found at one key path (a union's branches each say what they expected) as one."""
    if len(problems) == 1:
        return problems[0]
    head = problems[0].split(": expected ", 1)[0]
    if all(p.startswith(head + ": expected ") for p in problems):
        return f"{head}: expected " + " or ".join(dict.fromkeys(p.split(": expected ", 1)[1] for p in problems))
    return "; ".join(dict.fromkeys(problems))
