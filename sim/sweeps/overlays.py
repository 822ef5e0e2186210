"""Measured points a sweep file overlays on its figure, read from the project's measured tables when the sweep runs
(``sweep.json`` keeps them, so ``sim plot`` needs only the sweep's folder)."""

from __future__ import annotations

import os

from sim.calibration.targets import measured_values
from sim.core.errors import ScenarioError
from sim.formats.inputs import shown_path
from sim.formats.measured_tables import read_measured
from sim.sweeps.spec import MeasuredOverlay, MeasuredValue


def _numbers(text: str, table: str, what: str) -> list[float]:
    try:
        return measured_values(text, table, what)
    except ScenarioError as exc:
        raise ValueError(f"{table} {what}: {exc.problem}") from None


def _value(spec: MeasuredValue | float, rows: list[dict], row: dict | None, table: str) -> list[float]:
    """The measured values (one, a range's ends, or repeated runs) a spec names in ``row`` (or the quantity rows)."""
    if isinstance(spec, int | float):
        return [float(spec)]
    if spec.quantity is not None:
        found = [r for r in rows if (r.get("quantity") or "").strip() == spec.quantity]
        if not found:
            raise ValueError(f"no quantity {spec.quantity!r} in {table}")
        values = _numbers(found[0].get("value", ""), table, f"quantity {spec.quantity}")
    elif spec.column is not None and row is not None:
        for col in (spec.column, spec.minus):
            if col is not None and col not in row:
                raise ValueError(f"no column {col!r} in {table} (columns: {', '.join(row)})")
        values = _numbers(row[spec.column], table, f"column {spec.column}")
        if spec.minus is not None:
            less = _numbers(row[spec.minus], table, f"column {spec.minus}")
            values = [v - less[0] for v in values]
    else:
        raise ValueError("a quantity, or a column of a table with rows")
    return [v * spec.scale for v in values]


def _x_value(spec: MeasuredValue | float, rows: list[dict], row: dict | None, table: str) -> list[float] | str:
    """Like a measured value, but a column of text (a machine's name) stays text: a category on the x axis."""
    if isinstance(spec, MeasuredValue) and spec.column is not None and row is not None and spec.minus is None:
        text = str(row.get(spec.column, "")).strip()
        try:
            float(text.split(";")[0].split("-")[-1])
        except ValueError:
            if text:
                return text
    return _value(spec, rows, row, table)


def resolve_overlays(overlays: list[MeasuredOverlay], sweep_file: str, x_column: str | None = None,
                     hue_column: str | None = None) -> list[dict]:
    """Per overlay and table row: label, source, the x and hue columns it belongs to (the sweep file's figure),
    its hue value, x, and per metric the measured value (mean of repeated runs or of a range's ends) with its lowest
    and highest figure. A problem is one line naming the sweep file's key and the table."""
    base = os.path.dirname(os.path.abspath(sweep_file))
    points: list[dict] = []
    for i, ov in enumerate(overlays):
        table = os.path.relpath(os.path.normpath(os.path.join(base, ov.table)))
        key = f"measured.{i}"
        try:
            _, rows = read_measured(table)
        except ScenarioError as exc:
            raise ScenarioError(sweep_file, f"{key}.table", f"{shown_path(table)}: {exc.problem}") from None
        uses_rows = any(isinstance(v, MeasuredValue) and v.column is not None for v in [ov.x, *ov.y.values()])
        selected = [r for r in rows if all(str(r.get(c, "")).strip() == str(v) for c, v in ov.rows.items())]
        if uses_rows and not selected:
            raise ScenarioError(sweep_file, f"{key}.rows", f"no row of {table} holds {ov.rows}")
        for row in (selected if uses_rows else [None]):
            where = f"{key}.x"
            try:
                x = _x_value(ov.x, rows, row, table)
                metrics = {}
                for metric, spec in ov.y.items():
                    where = f"{key}.y.{metric}"
                    v = _value(spec, rows, row, table)
                    metrics[metric] = {"value": sum(v) / len(v), "lo": min(v), "hi": max(v)}
            except ValueError as exc:
                raise ScenarioError(sweep_file, where, str(exc)) from None
            points.append({"label": ov.label, "source": table, "x_column": x_column, "hue_column": hue_column,
                           "hue": ov.hue, "x": x if isinstance(x, str) else sum(x) / len(x), "metrics": metrics})
    return points


def resolve_plan_overlays(plan) -> None:
    """Read a sweep file's measured tables into ``plan.measured_points`` once (a bad table is its one-line error,
    raised before anything is printed or written); a plan without a sweep file, or already resolved, is left."""
    if plan.sweep_file and not plan.measured_points:
        x, hue = (plan.plot.x, plan.plot.hue) if plan.plot else (None, None)
        plan.measured_points = resolve_overlays(plan.measured, plan.sweep_file, x, hue)
