"""What a sweep varies: axes over dotted scenario paths, value ranges, sweep files, and the points they make.

An axis has a name (its column in the results), values, and the scenario paths each value is written to: as it is,
or through an affine map (``{times: a, plus: b}``: a card's capacity is the free VRAM wanted plus the engine's
overhead), plus constants set wherever the axis is used. ``--axis PATH=VALUES`` on the command line is the simple
case: the axis is named after its one path. Values are YAML scalars separated by commas, and ranges:
``16..48:4`` (16, 20, ..., 48, the end included when the step lands on it), ``3..5`` (step 1) and ``1..32*2``
(geometric: 1, 2, 4, ..., 32). Axes make a grid (the first axis varies slowest) or, zipped, one point per position.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from dataclasses import dataclass, field, replace
from itertools import product
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from sim.config.base import Strict
from sim.config.load import Change
from sim.config.messages import format_validation_error
from sim.config.yaml_io import parse_scalar, read_yaml
from sim.core.errors import ScenarioError, cut

# the sweep-file models validate only sweep files: their validators are built on first use, not at import (a sweep
# given by --axis never builds them)
_BUILT_WHEN_USED = ConfigDict(defer_build=True)

MAX_VALUES = 100_000  # values of one axis
MAX_POINTS = 1_000_000  # points of a sweep
MAX_RUNS = 100_000  # runs of a sweep (points x seeds x draws) unless --max-runs raises it

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"^\s*({_NUMBER})\s*\.\.\s*({_NUMBER})\s*(?:([:*])\s*({_NUMBER}))?\s*$")


def _cut(text: str) -> str:
    return cut(text, 80)


def _count(steps: float) -> int:
    """Values of a range ``steps`` steps long (the end included when a step lands on it, within 1e-9); a length
    too large to count (1e300 steps, or inf) as 10**15 + 1."""
    return int(math.floor(steps + 1e-9)) + 1 if steps < 1e15 else 10**15 + 1


def _is_int_text(text: str) -> bool:
    return re.fullmatch(r"\s*[-+]?\d+\s*", text) is not None


def _power(a: float, factor: float, i: int, end: float) -> float:
    """``a x factor ** i``, a geometric range's ``i``-th value; through logarithms (at most ``end``) when
    ``factor ** i`` alone is beyond a float (a tiny ``a``: 1e-308..1e308*2)."""
    try:
        return a * factor ** i
    except OverflowError:
        return min(end, math.exp(min(math.log(a) + i * math.log(factor), math.log(end))))


def _tidy(x: float) -> float:
    """12 significant digits: 0.1 + 0.2 is written 0.3, not 0.30000000000000004."""
    return float(f"{x:.12g}")


def expand_range(text: str, where: str, key: str) -> list[Any] | None:
    """Values of ``A..B``, ``A..B:STEP`` or ``A..B*FACTOR``; None when ``text`` is not a range."""
    m = _RANGE.match(text)
    if not m:
        return None
    a_txt, b_txt, op, s_txt = m.groups()
    a, b = float(a_txt), float(b_txt)
    step = float(s_txt) if s_txt is not None else 1.0
    ints = _is_int_text(a_txt) and _is_int_text(b_txt) and (s_txt is None or _is_int_text(s_txt))
    if not all(map(math.isfinite, (a, b, step, b - a))):
        raise ScenarioError(where, key, f"range {_cut(text.strip())}: a number out of range (the start, the end and "
                            f"the step are at most about {sys.float_info.max:.2g} in magnitude, as is their "
                            "difference)".replace("e+", "e"))
    if b < a:
        raise ScenarioError(where, key, f"range {text.strip()}: the end is below the start")
    if op == "*":
        if a <= 0 or step <= 1:
            raise ScenarioError(where, key, f"range {text.strip()}: a geometric range A..B*F needs A > 0 and F > 1")
        decades = math.log(b / a) if math.isfinite(b / a) else math.log(b) - math.log(a)  # a tiny start: no inf
        n = _count(decades / math.log(step))
        values = [_power(a, step, i, b) for i in range(n)] if n <= MAX_VALUES else []
    else:
        if step <= 0:
            raise ScenarioError(where, key, f"range {text.strip()}: the step must be positive")
        n = _count((b - a) / step)
        values = [a + i * step for i in range(n)] if n <= MAX_VALUES else []
    if n > MAX_VALUES:
        shown = f"{n}" if n < 10**15 else "more than 10**15"
        raise ScenarioError(where, key, f"range {_cut(text.strip())} has {shown} values, more than {MAX_VALUES:,}")
    return [int(round(v)) for v in values] if ints else [_tidy(v) for v in values]


def _split_items(text: str) -> list[str]:
    """Comma-separated items, commas inside brackets or braces kept (``[a, b]`` is one YAML value)."""
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return items


def parse_values(text: str, where: str, key: str) -> list[Any]:
    """``v1,v2,16..48:4`` -> the list of values (YAML scalars; ranges expanded)."""
    values: list[Any] = []
    for item in _split_items(text):
        if not item.strip():
            raise ScenarioError(where, key, f"empty value in '{text}': expected values separated by commas")
        expanded = expand_range(item, where, key)
        if expanded is not None:
            values += expanded
            continue
        values.append(parse_scalar(item, where, key))  # YAML 1.2, as --set and scenario files; not YAML: the text
    return values


class Affine(Strict):
    """The axis value written to a path as ``times x value + plus``."""

    model_config = _BUILT_WHEN_USED

    times: float = 1.0
    plus: float = 0.0


class AxisSpec(Strict):
    """One axis of a sweep file."""

    model_config = _BUILT_WHEN_USED

    values: list[Any] | str = Field(description="Values (a list; or text such as '8..48:4' or '3,4,5').")
    set: dict[str, Affine | None] | list[str] | str = Field(
        description="Scenario path(s) each value is written to: a path, a list of paths, or a map of path to "
        "null (the value as it is) or {times, plus} (an affine map of a numeric value).")
    also: dict[str, Any] = Field(default_factory=dict, description="Constants set at every point of this axis.")
    label: str | None = Field(None, description="Axis label in plots (default: from the name).")
    unit: str | None = Field(None, description="Unit of the values, for plot labels.")


class MeasuredValue(Strict):
    """Where a measured figure comes from in a table: a quantity row or a column of each row; optionally less another
    column; times ``scale``."""

    model_config = _BUILT_WHEN_USED

    quantity: str | None = None
    column: str | None = None
    minus: str | None = Field(None, description="A column subtracted from `column` (total less used: free).")
    scale: float = 1.0


class MeasuredOverlay(Strict):
    """Measured points drawn over a sweep's figure: each row of ``table`` (or the one point of its quantities)."""

    model_config = _BUILT_WHEN_USED

    label: str = Field(description="Legend text.")
    table: str = Field(description="Measured CSV (relative to the sweep file), provenance lines first.")
    x: MeasuredValue | float = Field(description="Where the point sits on the x axis.")
    y: dict[str, MeasuredValue] = Field(description="Metric name -> measured value.")
    hue: Any = Field(None, description="The hue axis value it belongs to (its colour).")
    rows: dict[str, Any] = Field(default_factory=dict, description="Only rows whose columns hold these values.")


class PlotSpec(Strict):
    model_config = _BUILT_WHEN_USED

    preset: str = Field(description="Figure preset `sim plot DIR` draws by default.")
    x: str | None = None
    hue: str | None = None
    facet: str | None = None

    @field_validator("preset")
    @classmethod
    def _known(cls, preset: str) -> str:
        if preset not in PRESET_NAMES:
            raise ValueError(f"unknown preset {preset!r}: expected one of {', '.join(PRESET_NAMES)}")
        return preset


class SweepFile(Strict):
    """A shipped or user sweep: a scenario, fixed changes, axes, and how to draw the result."""

    model_config = _BUILT_WHEN_USED

    description: str = ""
    scenario: str = Field(description="Scenario file (relative to the sweep file).")
    set: dict[str, Any] = Field(default_factory=dict, description="Changes applied at every point before the axes.")
    axes: dict[str, AxisSpec] = Field(min_length=1, description="Axes by name, in grid order (the first slowest).")
    zip: bool = Field(False, description="One point per position of equally long axes instead of the grid.")
    seeds: int = Field(1, ge=1, le=10_000, description="Replicates per point, each with its own seed.")
    uncertainty: int | None = Field(None, ge=2, le=10_000, description="Parameter draws per point and seed.")
    plot: PlotSpec | None = None
    measured: list[MeasuredOverlay] = Field(default_factory=list)

    @field_validator("axes")
    @classmethod
    def _axis_names(cls, axes: dict[str, AxisSpec]) -> dict[str, AxisSpec]:
        for name in axes:
            problem = reserved_name(name)
            if problem:
                raise ValueError(problem)
        return axes


RESERVED_COLUMNS = ("point", "seed", "draw", "key", "error")
PRESET_NAMES = ("cliff", "hit_coverage", "concurrency", "headroom", "dispatch", "load_breakdown")


def reserved_name(name: str) -> str | None:
    """Why ``name`` cannot name an axis (a column of the results already has it), or None."""
    if name in RESERVED_COLUMNS or name.startswith(("param.", "metric.")):
        return (f"axis name {name!r} is taken by a result column ({', '.join(RESERVED_COLUMNS)}, param.*, "
                "metric.*)")
    return None


@dataclass(frozen=True)
class Axis:
    """A resolved axis: its values and, per path, None (the value as it is) or an affine map."""

    name: str
    values: tuple[Any, ...]
    paths: tuple[tuple[str, Affine | None], ...]
    also: tuple[tuple[str, Any], ...] = ()
    label: str | None = None
    unit: str | None = None
    file: str | None = None  # the sweep file that declares the axis (None: an --axis of the command line)
    values_from: str = "--axis"  # where its values were given: --axis, or the sweep file

    def sets(self, value: Any) -> list[str]:
        """The ``--set`` strings of the point where the axis takes ``value``: each a :class:`Change` naming the
        --axis or the sweep file's key it came from, for errors."""
        out: list[str] = [Change(set_string(p, v), f"{self.file} axes.{self.name}.also.{p}={_shown(v)}", str(self.file))
                          for p, v in self.also]
        if self.values_from == "--axis":
            source, key, label = "--axis", self.name, f"--axis {self.name}={_shown(value)}"
        else:
            source, key = self.values_from, f"axes.{self.name}.values"
            label = f"{source} axes.{self.name}={_shown(value)}"
        for path, affine in self.paths:
            if affine is None:
                out.append(Change(set_string(path, value), label, self.values_from))
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ScenarioError(source, key, f"value {cut(repr(value), 60)}: an affine map needs a number")
            out.append(Change(set_string(path, _tidy(affine.times * value + affine.plus)), label, self.values_from))
        return out

    def as_dict(self) -> dict:
        return {"name": self.name, "values": list(self.values), "label": self.label, "unit": self.unit,
                "paths": {p: (None if a is None else a.model_dump()) for p, a in self.paths},
                "also": dict(self.also)}


def set_string(path: str, value: Any) -> str:
    """A ``--set`` string that reads back as ``value`` (JSON is YAML)."""
    return f"{path}={json.dumps(value)}"


def _shown(value: Any) -> str:
    """An axis value as an error's label shows it: its JSON, at most 60 characters."""
    return cut(json.dumps(value, default=str), 60)


@dataclass
class Plan:
    """A sweep resolved into points: each point's axis values and the ``--set`` strings that make it."""

    scenario: str  # path as the user gave it (relative to the working directory)
    base_sets: list[str]
    axes: list[Axis]
    zip: bool
    seeds: int
    uncertainty: int | None
    sweep_file: str | None = None
    plot: PlotSpec | None = None
    measured: list[MeasuredOverlay] = field(default_factory=list)
    measured_points: list[dict] = field(default_factory=list)  # resolved from the tables when the sweep runs
    points: list[dict[str, Any]] = field(default_factory=list)
    point_sets: list[list[str]] = field(default_factory=list)


def _axis_from_spec(name: str, spec: AxisSpec, where: str) -> Axis:
    key = f"axes.{name}"
    if isinstance(spec.values, str):
        values = parse_values(spec.values, where, f"{key}.values")
    else:
        values = []
        for v in spec.values:
            expanded = expand_range(v, where, f"{key}.values") if isinstance(v, str) else None
            values += expanded if expanded is not None else [v]
    if not values:
        raise ScenarioError(where, f"{key}.values", "at least one value")
    if isinstance(spec.set, str):
        paths = [(spec.set, None)]
    elif isinstance(spec.set, list):
        paths = [(p, None) for p in spec.set]
    else:
        paths = list(spec.set.items())
    if not paths:
        raise ScenarioError(where, f"{key}.set", "at least one scenario path the values are written to")
    return Axis(name, tuple(values), paths=tuple(paths), also=tuple(spec.also.items()), label=spec.label,
                unit=spec.unit, file=where, values_from=where)


def cli_axis(text: str) -> Axis:
    """``--axis dotted.path=VALUES``: an axis named after its path."""
    if "=" not in text:
        raise ScenarioError("--axis", text, "expected dotted.path=v1,v2,... or a range such as 16..48:4")
    path, values = text.split("=", 1)
    path = path.strip()
    if not path or any(not part for part in path.split(".")):
        raise ScenarioError("--axis", text, "expected a dotted scenario path before '='")
    if reserved_name(path):
        raise ScenarioError("--axis", text, reserved_name(path) or "")
    parsed = parse_values(values, "--axis", path)
    return Axis(path, tuple(parsed), ((path, None),))


def is_sweep_file(raw: Any) -> bool:
    return isinstance(raw, dict) and "axes" in raw and isinstance(raw.get("scenario"), str)


def read_sweep_file(path: str) -> SweepFile:
    raw = read_yaml(path)
    try:
        return SweepFile.model_validate(raw)
    except ValidationError as exc:
        raise format_validation_error(path, exc) from None


def _one_writer_per_path(where: str, axes: list[Axis], cli_sets: list[str]) -> None:
    """A scenario path is written by one axis at most, and never by both an axis and --set: otherwise the last
    writer would silently win and rows would be labelled with values they did not run."""
    writers: dict[str, str] = {}
    for a in axes:
        for path in [p for p, _ in a.paths] + [p for p, _ in a.also]:
            if path in writers and writers[path] != f"axis {a.name}":
                raise ScenarioError(where, f"axes.{a.name}", f"{path} is already written by {writers[path]}")
            writers[path] = f"axis {a.name}"
    for expr in cli_sets:
        path = expr.split("=", 1)[0].strip()
        if path in writers:
            raise ScenarioError("--set", expr, f"{path} is swept by {writers[path]}: give that axis new values "
                                f"(--axis {writers[path].split(' ', 1)[1]}=VALUES) instead")


def build_plan(target: str, cli_axes: list[str], zip_axes: bool, seeds: int | None, uncertainty: int | None,
               cli_sets: list[str], max_runs: int = MAX_RUNS) -> Plan:
    """Resolve TARGET (a scenario, or a sweep file naming one) and the command line's axes into points.

    A plan of more than ``max_runs`` runs (points x seeds x draws) is refused before any point is built: a grid
    multiplies, and a million points would hold the machine's memory before the first run."""
    raw = read_yaml(target)
    axes: list[Axis] = []
    base_sets: list[str] = []
    sweep = None
    if is_sweep_file(raw):
        sweep = read_sweep_file(target)
        scenario = os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(target)),
                                                                 sweep.scenario)))
        base_sets = [Change(set_string(p, v), f"{target} set.{p}={_shown(v)}", target) for p, v in sweep.set.items()]
        axes = [_axis_from_spec(n, s, target) for n, s in sweep.axes.items()]
        zip_axes = zip_axes or sweep.zip
        seeds = seeds if seeds is not None else sweep.seeds
        uncertainty = uncertainty if uncertainty is not None else sweep.uncertainty
    elif isinstance(raw, dict) and "axes" in raw:
        raise ScenarioError(target, "scenario", "a sweep file names its scenario file (scenario: PATH)")
    else:
        scenario = target
    for text in cli_axes:
        ax = cli_axis(text)
        declared = next((a for a in axes if a.name == ax.name), None)
        if declared is not None:  # new values for an axis of the sweep file: its paths stay
            axes = [replace(a, values=ax.values, values_from="--axis") if a is declared else a for a in axes]
        else:
            axes = [a for a in axes if a.name != ax.name] + [ax]
    if not axes:
        raise ScenarioError("--axis", "", f"{target} is a scenario: give at least one --axis dotted.path=VALUES")
    _one_writer_per_path(target, axes, list(cli_sets))
    plan = Plan(scenario, base_sets + list(cli_sets), axes=axes, zip=zip_axes, seeds=seeds or 1,
                uncertainty=uncertainty, sweep_file=target if sweep else None, plot=sweep.plot if sweep else None,
                measured=list(sweep.measured) if sweep else [])
    where = target
    if zip_axes:
        lengths = {a.name: len(a.values) for a in axes}
        if len(set(lengths.values())) > 1:
            raise ScenarioError(where, "zip", f"zipped axes need equally many values, got {lengths}")
        total = len(axes[0].values)
    else:
        total = math.prod(len(a.values) for a in axes)
    _check_runs(where, total, plan.seeds, uncertainty, max_runs)
    if zip_axes:
        combos = list(zip(*(a.values for a in axes), strict=True))
    else:
        combos = list(product(*(a.values for a in axes)))
    for combo in combos:
        plan.points.append({a.name: v for a, v in zip(axes, combo, strict=True)})
        sets = list(plan.base_sets)
        for a, v in zip(axes, combo, strict=True):
            sets += a.sets(v)
        plan.point_sets.append(sets)
    return plan



def _check_runs(where: str, points: int, seeds: int, draws: int | None, max_runs: int) -> None:
    """Refuse a plan of more than ``max_runs`` runs (points x seeds x draws), or of more than MAX_POINTS points."""
    runs = points * seeds * (draws or 1)
    size = f"{points:,} points" + (f" x {seeds:,} seeds" if seeds > 1 else "") + (f" x {draws:,} draws" if draws
                                                                                 else "")
    if runs > max_runs:
        raise ScenarioError(where, "axes", f"{size} = {runs:,} runs, more than the limit of {max_runs:,} runs "
                            "(--max-runs N raises it)")
    if points > MAX_POINTS:
        raise ScenarioError(where, "axes", f"{points:,} points, more than {MAX_POINTS:,}")
