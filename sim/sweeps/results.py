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


def results_frame(rows: list[dict], axes: list):
    """The tidy table as a DataFrame: metrics as floats, each axis column of one type (decided by all the values of
    the axis, not by the rows done so far)."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    names = [a.name for a in axes]
    front = [c for c in frame.columns if not _is_metric(c, names)]
    metrics = sorted(c for c in frame.columns if _is_metric(c, names))
    frame = frame[front + metrics]
    for c in metrics:
        frame[c] = frame[c].astype(float)
    for a in axes:
        if axis_as_text(a.values):
            frame[a.name] = [json.dumps(v) for v in frame[a.name]]
    return frame


def _is_metric(column: str, axes: list[str]) -> bool:
    return column not in axes and column not in RESERVED_COLUMNS and not column.startswith("param.")


def _write_parquet(frame, path: str) -> None:
    """The frame as a Parquet file (snappy) by ``pyarrow.parquet.write_table``: its columns' Arrow types, NaN as
    null, no index and no pandas schema metadata (so equal frames give equal bytes, whichever pandas wrote them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)
    pq.write_table(table, path, compression="snappy")


def scenario_facts(plan: Plan) -> dict:
    """Values of the swept scenario the figures need beside the metrics (the dispatcher's tie threshold)."""
    scn, _ = load_scenario(plan.scenario, plan.point_sets[0] if plan.point_sets else plan.base_sets)
    return {"name": scn.name, "tie_threshold": scn.dispatch.tie_threshold, "machines": list(scn.machines)}


def write_results(out_dir: str, res: SweepResult, facts: dict) -> None:
    """``results.parquet`` and ``results.csv`` of one frame (:func:`results_frame`), by pyarrow's and pandas'
    writers, then ``sweep.json`` (last: what it says describes the tables)."""
    plan = res.plan
    frame = results_frame(res.rows, plan.axes)
    atomic_write_with(os.path.join(out_dir, "results.parquet"), lambda tmp: _write_parquet(frame, tmp))
    atomic_write_text(os.path.join(out_dir, "results.csv"), frame.to_csv(index=False, lineterminator="\n"))
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
