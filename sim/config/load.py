"""Loading a scenario: its own values, then the calibration values it leaves open, then ``--set`` overrides;
validated by its schema and its cross-reference checks; errors blamed on the file or ``--set`` that caused them."""

from __future__ import annotations

import copy
import difflib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from sim.config.base import Strict
from sim.config.calibrate import Calibrate
from sim.config.checks import cross_reference_errors
from sim.config.defaults import fill_defaults
from sim.config.files import check_input_files, input_file_slots
from sim.config.messages import format_validation_error, short
from sim.config.paths import get_dotted, parse_set, set_dotted
from sim.config.scenario import Scenario
from sim.config.yaml_io import read_yaml
from sim.core.errors import ScenarioError, combined, each_error
from sim.formats.inputs import check_file


class _CalibrateOnly(Strict):
    calibrate: Calibrate = Calibrate()


def read_calibrate(path: str) -> Calibrate:
    """The ``calibrate`` section of a scenario file alone, validated: the rest may wait for the values being fitted."""
    raw = read_yaml(path)
    section = raw.get("calibrate") if isinstance(raw, dict) else None
    try:
        return _CalibrateOnly.model_validate({"calibrate": section or {}}).calibrate
    except ValidationError as exc:
        raise format_validation_error(path, exc, {"calibrate": section or {}}) from None


@dataclass
class _Origin:
    """Where a value at ``path`` came from, to blame the right file or --set in an error: ``label`` is what the user
    wrote (``--set PATH=VALUE``, ``--axis NAME=VALUE``, a sweep file's key; None for a calibration file), ``via`` the
    option or file it came through (``--set``, ``--axis``, ``--vs``, a sweep file)."""

    path: str
    source: str
    created: str | None = None
    label: str | None = None
    via: str = "--set"


class Change(str):
    """A ``--set`` string (``dotted.path=YAML value``) that knows where the user wrote it, so that an error names
    that and not a ``--set`` never given: ``label`` (``--axis NAME=VALUE``, ``SWEEP axes.NAME=VALUE``, ``--vs
    NAME: PATH=VALUE``) and ``via`` (``--axis``, ``--vs``, the sweep file). As text it is the ``--set`` string itself:
    what is stored, hashed or printed of it does not change."""

    label: str
    via: str

    def __new__(cls, text: str, label: str, via: str) -> Change:
        obj = super().__new__(cls, text)
        obj.label, obj.via = label, via
        return obj

    def __reduce__(self) -> tuple:
        """Pickled with its label (a process pool sends a sweep's points to its workers)."""
        return (Change, (str(self), self.label, self.via))


def _apply_calibrations(raw: dict, source: str) -> list[_Origin]:
    """Fill values the scenario leaves open from its calibration files (explicit scenario values win)."""
    cals = raw.get("calibrations") or []
    if not isinstance(cals, list):
        raise ScenarioError(source, "calibrations", f"bad value {short(cals)}: expected a list of file paths")
    base_dir = os.path.dirname(os.path.abspath(source))
    origins = []
    for i, rel in enumerate(cals):
        if not isinstance(rel, str):
            raise ScenarioError(source, f"calibrations.{i}", f"bad value {short(rel)}: expected a file path")
        cal_path = os.path.relpath(os.path.normpath(os.path.join(base_dir, rel)))
        try:
            check_file(cal_path, f"calibrations.{i}", "a calibration file")
        except ScenarioError as exc:
            raise ScenarioError(source, exc.path, f"{exc.source}: {exc.problem}") from None
        cal = read_yaml(cal_path)
        params = cal.get("parameters") if isinstance(cal, dict) else None
        if not isinstance(params, dict):
            raise ScenarioError(cal_path, "parameters", "expected a map of dotted.path: value")
        for key, value in params.items():
            if not get_dotted(raw, str(key))[0]:
                set_dotted(raw, str(key), value, cal_path, create_entries=False)
                origins.append(_Origin(str(key), cal_path))
    return origins


Override = str | tuple[str, Any]  # "dotted.path=YAML value" (--set), or (dotted path, Python value)


def override_path(o: Override) -> str:
    """The dotted path an override writes."""
    return o[0] if isinstance(o, tuple) else o.split("=", 1)[0].strip()


def _override(o: Override) -> tuple[str, str, Any, str]:
    """(how errors name it, path, value, the option it came through) of a ``--set`` string, a :class:`Change` or a
    (path, value) pair."""
    if isinstance(o, Change):
        return (o.label, *parse_set(o, o.via), o.via)
    if isinstance(o, str):
        return (f"--set {o}", *parse_set(o), "--set")
    key, value = o
    return f"--set {key}={_json(value)}", key, copy.deepcopy(value), "--set"


def _json(value: Any) -> str:
    """``value`` as JSON for a message (an integer too long to print shown by its size)."""
    try:
        return json.dumps(value, default=str)
    except (ValueError, TypeError):
        return short(value)


def load_scenario(path: str, overrides: Iterable[Override] = ()) -> tuple[Scenario, dict]:
    """Load a scenario: its own values, then calibration values it leaves open, then the overrides in order
    (``--set`` strings, or (dotted path, value) pairs with the same meaning).

    Returns the validated scenario and the resolved mapping that was validated.
    """
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ScenarioError(path, "", f"expected a YAML map at the top level, got {type(raw).__name__}")
    resolved = raw  # read_yaml's own copy
    sets = [_override(o) for o in overrides]
    early = [s for s in sets if s[1].split(".")[0] == "calibrations"]  # which calibrations apply is set first
    origins: list[_Origin] = []
    for label, key, value, _ in early:
        set_dotted(resolved, key, value, f"{path} ({label})")
    origins += _apply_calibrations(resolved, path)
    for label, key, value, via in sets:
        if (label, key, value, via) not in early:
            source = f"{path} ({label})"
            origins.append(_Origin(key, source, set_dotted(resolved, key, value, source), label, via))
    for parent, key, where in input_file_slots(resolved):
        if not any(k == where or where.startswith(k + ".") for _, k, _, _ in sets):  # a --set path: from the cwd
            _resolve_relative(parent, key, path)
    try:
        check_input_files(resolved, path)
        filled = fill_defaults(resolved, path)
        scenario = validate(resolved, path)
        scenario._defaults = tuple(filled)
        return scenario, resolved
    except ScenarioError as exc:
        raise combined(_fold_created([_blame(e, origins, resolved) for e in each_error(exc)], origins)) from None


def _resolve_relative(parent: dict, key: str, source: str) -> None:
    """An input file written in the scenario (a trace, a lengths table) is relative to the scenario file, as
    calibration paths are; one given with --set is relative to the current directory."""
    value = parent[key]
    if isinstance(value, str) and not os.path.isabs(value):
        parent[key] = os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(source)), value)))


def _blame(exc: ScenarioError, origins: list[_Origin], resolved: dict) -> ScenarioError:
    """Name the calibration file or --set that supplied the bad value, and hint at typos in created entries."""
    for o in reversed(origins):
        inside = exc.path == o.path or exc.path.startswith(o.path + ".")  # the bad value is (within) what o set
        in_created = o.created is not None and (exc.path + ".").startswith(o.created + ".")
        if inside or in_created:
            problem = exc.problem
            if o.created is not None:
                parent, _, name = o.created.rpartition(".")
                siblings = [k for k in get_dotted(resolved, parent)[1] if k != name]
                hint = difflib.get_close_matches(name, siblings, n=1)
                problem += f" ({o.via} created a new entry '{name}' under {parent}" + (
                    f"; did you mean '{hint[0]}'?)" if hint else ")")
            return ScenarioError(o.source, exc.path, problem)
    labels = [o.label for o in origins if o.label is not None]
    if labels:  # not attributable to one override, but the overrides may be why
        return ScenarioError(f"{exc.source} (with {' '.join(labels)})", exc.path, exc.problem)
    return exc


def _fold_created(errors: list[ScenarioError], origins: list[_Origin]) -> list[ScenarioError]:
    """Keys missing inside an entry that a --set created (most often a typo of an existing name) as one line for the
    entry, naming what it lacks, instead of a line per missing key."""
    out: list[ScenarioError] = []
    folded: dict[str, tuple[int, list[str]]] = {}
    for e in errors:
        o = next((o for o in reversed(origins) if o.created is not None
                  and (e.path + ".").startswith(o.created + ".")), None)
        if o is None or not e.problem.startswith("missing required key"):
            out.append(e)
            continue
        lacks = e.path[len(o.created) + 1:] or e.path
        if o.created in folded:
            folded[o.created][1].append(lacks)
            continue
        folded[o.created] = (len(out), [lacks])
        out.append(e)
    for created, (i, lacks) in folded.items():
        e = out[i]
        parent, _, name = created.rpartition(".")
        hint = e.problem.split("did you mean ", 1)[1].rstrip(")") if "did you mean " in e.problem else ""
        via = next(o.via for o in origins if o.created == created)
        out[i] = ScenarioError(e.source, created, f"{via} created a new entry '{name}' under {parent}, which lacks "
                               f"the required {', '.join(lacks)}" + (f"; did you mean {hint}" if hint else ""))
    return out


def validate(raw: dict, source: str) -> Scenario:
    """The scenario ``raw`` describes, or a ScenarioError naming every problem (a :class:`ScenarioErrors` when there
    are several): all the schema's, else all the cross-reference checks'."""
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise format_validation_error(source, exc, raw) from None
    errs = cross_reference_errors(scenario)
    if errs:
        raise combined([ScenarioError(source, path, expected if value is None else
                                      f"bad value {short(value)}: {expected}") for path, value, expected in errs])
    return scenario


def json_schema() -> dict:
    """The JSON Schema (Draft 2020-12) of scenario files as written, for editors: unknown keys and wrong types are
    errors; a number is never required, as a calibration file named under ``calibrations`` may supply it (``sim
    calibrate`` and ``sim fit-loading`` write numbers: what they fit and what they hold), while names, kinds and
    lists still are. What the loader alone can say (cross references, values missing everywhere) it says."""
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "sim scenario"
    for definition in [schema, *schema.get("$defs", {}).values()]:
        props = definition.get("properties", {})
        required = [k for k in definition.get("required", []) if not _is_number(props.get(k, {}))]
        if required:
            definition["required"] = required
        else:
            definition.pop("required", None)
    return schema


def _is_number(prop: dict) -> bool:
    """A property schema that holds a number (or nothing)."""
    branches = prop.get("anyOf", [prop])
    types = {b.get("type") for b in branches}
    return bool(types) and types <= {"number", "integer", "null"} and types != {"null"}
