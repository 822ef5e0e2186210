"""Measured points a sweep file overlays on its figure, read from the project's measured tables when the sweep runs
(``sweep.json`` keeps them, so ``sim plot`` needs only the sweep's folder)."""

from __future__ import annotations

import os

from .errors import ScenarioError
from .sweep_spec import MeasuredOverlay, MeasuredValue
from .tables import read_measured
from .targets import measured_values


def _value(spec: MeasuredValue | float, rows: list[dict], row: dict | None, path: str, key: str) -> list[float]:
    """The measured values (one, a range's ends, or repeated runs) a spec names in ``row`` (or the quantity rows)."""
    if isinstance(spec, int | float):
        return [float(spec)]
    if spec.quantity is not None:
        found = [r for r in rows if (r.get("quantity") or "").strip() == spec.quantity]
        if not found:
            raise ScenarioError(path, key, f"no quantity {spec.quantity!r} in this table")
        values = measured_values(found[0].get("value", ""), path, f"{spec.quantity}.value")
    elif spec.column is not None and row is not None:
        if spec.column not in row:
            raise ScenarioError(path, key, f"no column {spec.column!r} (columns: {', '.join(row)})")
        values = measured_values(row[spec.column], path, f"{key}.{spec.column}")
        if spec.minus is not None:
            if spec.minus not in row:
                raise ScenarioError(path, key, f"no column {spec.minus!r} (columns: {', '.join(row)})")
            less = measured_values(row[spec.minus], path, f"{key}.{spec.minus}")
            values = [v - less[0] for v in values]
    else:
        raise ScenarioError(path, key, "a quantity, or a column of a table with rows")
    return [v * spec.scale for v in values]


def _x_value(spec: MeasuredValue | float, rows: list[dict], row: dict | None, path: str, key: str
             ) -> list[float] | str:
    """Like a measured value, but a column of text (a machine's name) stays text: a category on the x axis."""
    if isinstance(spec, MeasuredValue) and spec.column is not None and row is not None and spec.minus is None:
        text = str(row.get(spec.column, "")).strip()
        try:
            float(text.split(";")[0].split("-")[-1])
        except ValueError:
            if text:
                return text
    return _value(spec, rows, row, path, key)


def resolve_overlays(overlays: list[MeasuredOverlay], sweep_file: str) -> list[dict]:
    """Per overlay and table row: label, source, hue, x, and per metric the measured value (mean of repeated runs
    or of a range's ends) with its lowest and highest figure."""
    base = os.path.dirname(os.path.abspath(sweep_file))
    points: list[dict] = []
    for i, ov in enumerate(overlays):
        path = os.path.relpath(os.path.normpath(os.path.join(base, ov.table)))
        key = f"measured.{i}"
        _, rows = read_measured(path)
        uses_rows = any(isinstance(v, MeasuredValue) and v.column is not None for v in [ov.x, *ov.y.values()])
        selected = [r for r in rows if all(str(r.get(c, "")).strip() == str(v) for c, v in ov.rows.items())]
        for row in (selected if uses_rows else [None]):
            x = _x_value(ov.x, rows, row, path, f"{key}.x")
            metrics = {}
            for metric, spec in ov.y.items():
                v = _value(spec, rows, row, path, f"{key}.y.{metric}")
                metrics[metric] = {"value": sum(v) / len(v), "lo": min(v), "hi": max(v)}
            points.append({"label": ov.label, "source": path, "hue": ov.hue,
                           "x": x if isinstance(x, str) else sum(x) / len(x),
                           "metrics": metrics})
    return points
