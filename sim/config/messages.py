"""One-line messages from what pydantic and the checks find: the key path, the value, what was expected."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError

from sim.config.scenario import Scenario
from sim.core.errors import ScenarioError

CALIBRATED = "missing: expected a value here or from a calibration file named under 'calibrations'"


def expected_one_of(value: str, names: list[str], what: str) -> str:
    hint = difflib.get_close_matches(str(value), names, n=1)
    extra = f" (did you mean '{hint[0]}'?)" if hint else ""
    return f"expected {what}, one of {sorted(names)}{extra}"


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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


def format_validation_error(source: str, exc: ValidationError) -> ScenarioError:
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))
    path = ".".join(str(p) for p in loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        owner = model_for_path(loc)
        names = list(owner.model_fields) if owner else []
        hint = difflib.get_close_matches(str(loc[-1]), names, n=1)
        extra = f"; did you mean '{hint[0]}'?" if hint else (f"; expected one of {names}" if names else "")
        return ScenarioError(source, path, f"unknown key{extra}")
    if kind == "missing":
        return ScenarioError(source, path, "missing required key")
    msg = err["msg"]
    if kind == "value_error":
        return ScenarioError(source, path, msg.removeprefix("Value error, "))
    msg = msg.removeprefix("Input should be ")
    return ScenarioError(source, path, f"bad value {short(err.get('input'))}: expected {msg[0].lower() + msg[1:]}")
