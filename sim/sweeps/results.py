"""A sweep's tidy tables: one row per finished run (point, axis values, seed, draw and drawn values, key, error,
every metric), written as ``results.parquet`` and ``results.csv``, then ``sweep.json`` saying what they hold."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from sim.config.load import load_scenario
from sim.core.output import atomic_write_text, atomic_write_with, dumps
from sim.sweeps.keys import code_digest
from sim.sweeps.spec import RESERVED_COLUMNS, Plan
from sim.sweeps.tasks import SweepResult, Task


def table_rows(plan: Plan, tasks: Iterable[Task], records: dict[int, dict]) -> list[dict]:
    """One row per finished run, in sweep order: point, axis values, seed, draw and drawn values, error, metrics."""
    rows = []
    for t in tasks:
        rec = records.get(t.index)
        if rec is None:
            continue
        row: dict[str, Any] = {"point": t.point, **plan.points[t.point], "seed": t.seed}
        if plan.uncertainty:
            row["draw"] = t.draw
            row.update({f"param.{n}": v for n, v in t.params.items()})
        row["key"] = t.key
        row["error"] = rec.get("error") or ""
        for name, value in sorted(rec.get("metrics", {}).items()):
            row["metric." + name if name in row else name] = value  # an axis named like a metric keeps its column
        rows.append(row)
    return rows


def axis_as_text(values) -> bool:
    """An axis whose values are not all numbers or all text is stored as JSON text (null, true, [1, 2], "1"), so
    its column has one type in every table of the sweep and no two values look alike."""
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return not (numeric or all(isinstance(v, str) for v in values))


def results_columns(rows: list[dict], axes: list) -> dict[str, list]:
    """The tidy table by column, in the order the tables hold them: the columns that are not metrics in the order
    the rows first name them, then the metrics sorted. A metric is a float (NaN where a row has none); an axis whose
    values are neither all numbers nor all text is JSON text (:func:`axis_as_text`, decided by all the values of the
    axis, not by the rows done so far)."""
    names = list(dict.fromkeys(name for row in rows for name in row))
    axis_names = [a.name for a in axes]
    front = [c for c in names if not _is_metric(c, axis_names)]
    metrics = sorted(c for c in names if _is_metric(c, axis_names))
    nan = float("nan")
    columns = {c: [row.get(c) for row in rows] for c in front}
    for c in metrics:
        columns[c] = [nan if row.get(c) is None else float(row[c]) for row in rows]
    for a in axes:
        if a.name in columns and axis_as_text(a.values):
            columns[a.name] = [json.dumps(v) for v in columns[a.name]]
    return columns


def _arrow_type(values: list):
    """The Arrow type of a column that is not a metric, as pandas would infer it from the values (whole numbers:
    int64; any float among numbers: float64; booleans: bool; else text, large_string as pandas hands it over)."""
    import pyarrow as pa

    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        whole = all(isinstance(v, int) for v in present) and len(present) == len(values)
        return pa.int64() if whole else pa.float64()
    return pa.large_string()


def _arrow_array(kind, cells: list):
    """One column as an Arrow array of ``kind`` (int64, float64, bool or large_string; None a null), built by
    ``pyarrow.Array.from_buffers`` from Arrow's buffer layout: pyarrow's other constructors import pandas whenever it
    is installed, a quarter of a second that a one-point sweep would pay for nothing."""
    import array

    import pyarrow as pa

    n = len(cells)
    valid = bytearray((n + 7) // 8)
    for i, v in enumerate(cells):
        if v is not None:
            valid[i >> 3] |= 1 << (i & 7)
    nulls = sum(v is None for v in cells)
    validity = pa.py_buffer(bytes(valid)) if nulls else None
    if kind in (pa.float64(), pa.int64()):  # a null's slot holds 0 (never read); -0.0 stays -0.0
        code, zero = ("d", 0.0) if kind == pa.float64() else ("q", 0)
        data = array.array(code, [zero if v is None else v for v in cells])
        return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(data)], null_count=nulls)
    if kind == pa.bool_():
        bits = bytearray((n + 7) // 8)
        for i, v in enumerate(cells):
            if v:
                bits[i >> 3] |= 1 << (i & 7)
        return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(bytes(bits))], null_count=nulls)
    encoded = [b"" if v is None else str(v).encode("utf-8") for v in cells]
    offsets = array.array("q", [0])
    for e in encoded:
        offsets.append(offsets[-1] + len(e))
    return pa.Array.from_buffers(pa.large_string(), n, [validity, pa.py_buffer(offsets),
                                                        pa.py_buffer(b"".join(encoded))], null_count=nulls)


def results_table(columns: dict[str, list], metrics: set[str]):
    """The columns as one Arrow table: a metric float64, NaN as null (as pandas hands NaN to Arrow)."""
    import pyarrow as pa

    arrays = []
    for name, values in columns.items():
        kind = pa.float64() if name in metrics else _arrow_type(values)
        if kind == pa.float64():
            values = [None if v is None or v != v else float(v) for v in values]
        arrays.append(_arrow_array(kind, values))
    return pa.Table.from_arrays(arrays, names=list(columns)) if arrays else pa.Table.from_arrays([], names=[])


def _csv_cell(value, floating: bool) -> str:
    """A cell as pandas writes it: a float by its shortest repr, NaN and null empty, a bool True / False."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if floating:
        return repr(float(value))
    return str(value)


def results_csv(columns: dict[str, list], table) -> str:
    """The columns as CSV text by the standard library's writer: quoted only where needed, ``\\n`` line ends,
    every cell as :func:`_csv_cell` writes it, a float column as ``table`` (:func:`results_table`) types it (what
    pandas' ``to_csv`` writes of the same table)."""
    import csv
    import io

    import pyarrow as pa

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    names = list(columns)
    writer.writerow(names)
    floating = [field.type == pa.float64() for field in table.schema]
    for i in range(len(next(iter(columns.values()))) if columns else 0):
        writer.writerow([_csv_cell(columns[n][i], f) for n, f in zip(names, floating, strict=True)])
    return out.getvalue()


def _is_metric(column: str, axes: list[str]) -> bool:
    return column not in axes and column not in RESERVED_COLUMNS and not column.startswith("param.")


def _write_parquet(table, path: str) -> None:
    """The Arrow table as a Parquet file (snappy) by ``pyarrow.parquet.write_table``, without schema metadata."""
    import pyarrow.parquet as pq

    pq.write_table(table, path, compression="snappy")


def scenario_facts(plan: Plan) -> dict:
    """Values of the swept scenario the figures need beside the metrics (the dispatcher's tie threshold)."""
    scn, _ = load_scenario(plan.scenario, plan.point_sets[0] if plan.point_sets else plan.base_sets)
    return {"name": scn.name, "tie_threshold": scn.dispatch.tie_threshold, "machines": list(scn.machines)}


def write_results(out_dir: str, res: SweepResult, facts: dict) -> None:
    """``results.parquet`` (pyarrow's writer) and ``results.csv`` (the standard library's) of one table
    (:func:`results_columns`), then ``sweep.json`` (last: what it says describes the tables). No pandas: its import
    was half a one-point sweep's time."""
    plan = res.plan
    columns = results_columns(res.rows, plan.axes)
    metrics = {c for c in columns if _is_metric(c, [a.name for a in plan.axes])}
    table = results_table(columns, metrics)
    atomic_write_with(os.path.join(out_dir, "results.parquet"), lambda tmp: _write_parquet(table, tmp))
    atomic_write_text(os.path.join(out_dir, "results.csv"), results_csv(columns, table))
    manifest = {
        "scenario": plan.scenario, "sweep_file": plan.sweep_file, "set": plan.base_sets,
        "axes": [a.as_dict() for a in plan.axes], "zip": plan.zip, "seeds": plan.seeds,
        "uncertainty": plan.uncertainty, "parameters": res.parameters, "held": res.held,
        "points": len(plan.points), "runs": len(res.tasks), "runs_done": len(res.rows),
        "complete": res.complete and len(res.rows) == len(res.tasks), "errors": res.errors,
        "plot": plan.plot.model_dump() if plan.plot else None,
        "measured": plan.measured_points,
        "facts": facts,
        "code": code_digest(),
    }
    atomic_write_text(os.path.join(out_dir, "sweep.json"), dumps(manifest))
