"""A sweep's tidy table written without pandas, so that a short sweep does not pay pandas' import (about 0.3 s of a
one-point sweep's second): ``results.csv`` byte for byte as ``DataFrame.to_csv(index=False, lineterminator="\\n")``
writes the frame ``sim.sweeps.results.results_frame`` makes, and ``results.parquet`` through pyarrow directly with
the column types pandas gives that frame (int64, float64, large_string; missing and NaN as null), so
``pandas.read_parquet`` reads back an equal frame.

Only the values a sweep's rows hold are typed here: whole numbers, real numbers and text in the point, seed, draw,
parameter, key, error and axis columns, numbers (or nothing) in the metric columns. Anything else (None in an axis,
text in a metric, numpy scalars outside the metrics) makes ``typed_columns`` return None, and the caller writes
the table through pandas as before.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from typing import Any, Literal

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class _Untyped(Exception):
    """A column holds values this module does not type as pandas would: the table goes through pandas."""


@dataclass
class Column:
    """One column of the table: its name, its type and one value per row (int, float with NaN for missing, str)."""

    name: str
    kind: Literal["int", "float", "str"]
    values: list[Any]


def _metric_value(value: Any) -> float:
    """A metric as ``Series.astype(float)`` makes it: a number as a float, nothing (None, no key) as NaN."""
    if value is None:
        return math.nan
    if isinstance(value, str) or not (isinstance(value, int | float) or type(value).__module__ == "numpy"):
        raise _Untyped
    try:
        return float(value)  # bool and numpy scalars too, as numpy converts them
    except (TypeError, ValueError, OverflowError):
        raise _Untyped from None


def _kind(values: list[Any]) -> str:
    """The dtype pandas infers for a column of these Python values: 'int' (int64), 'float' (float64), 'str', else
    'object'; None, NaN and numpy scalars are left to pandas."""
    types = {type(v) for v in values}
    if types == {int}:
        if all(INT64_MIN <= v <= INT64_MAX for v in values):
            return "int"
        raise _Untyped
    if types <= {int, float}:
        return "float"
    if types == {str}:
        return "str"
    if any(v is None or (isinstance(v, float) and math.isnan(v)) or type(v).__module__ == "numpy" for v in values):
        raise _Untyped
    return "object"


def _as_json_text(values: list[Any], kind: str) -> list[str]:
    """An axis stored as JSON text, from the values as pandas hands them over (a float column's 1 is 1.0)."""
    try:
        if kind == "float":
            if any(isinstance(v, float) and math.isnan(v) for v in values):
                raise _Untyped
            return [json.dumps(float(v)) for v in values]
        return [json.dumps(v) for v in values]
    except (TypeError, ValueError):
        raise _Untyped from None


def typed_columns(rows: list[dict], front: list[str], metrics: list[str], text_axes: set[str]) -> list[Column] | None:
    """The table's columns, ``front`` (point, axes, seed, ...: typed by their values) then ``metrics`` (floats);
    ``text_axes``: the axes stored as JSON text. None when a value is not one this module types (see the module
    docstring): the caller then writes the table through pandas."""
    try:
        columns = []
        for name in front:
            if any(name not in r for r in rows):
                raise _Untyped
            values = [r[name] for r in rows]
            kind = _kind(values)
            if name in text_axes:
                columns.append(Column(name, "str", _as_json_text(values, kind)))
            elif kind == "object":
                raise _Untyped
            else:
                columns.append(Column(name, kind, [float(v) for v in values] if kind == "float" else values))
        for name in metrics:
            columns.append(Column(name, "float", [_metric_value(r.get(name)) for r in rows]))
        return columns
    except _Untyped:
        return None


def _cell(value: Any, kind: str) -> str:
    if kind == "float":
        return "" if math.isnan(value) else repr(value)  # repr is numpy's (and so pandas') shortest round trip
    return str(value)


def csv_text(columns: list[Column]) -> str:
    """The table as ``DataFrame.to_csv(index=False, lineterminator="\\n")`` writes it: header, then one line per
    row, fields quoted only where needed, missing values empty."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([c.name for c in columns])
    cells = [[_cell(v, c.kind) for v in c.values] for c in columns]
    writer.writerows(zip(*cells, strict=True))
    return buf.getvalue()


def _arrow_array(column: Column):
    """The column as an Arrow array, built from its buffers: ``pyarrow.array`` would import pandas to look at a
    list. NaN in a float column is null, as ``DataFrame.to_parquet`` writes it."""
    import numpy as np
    import pyarrow as pa

    n = len(column.values)
    if column.kind == "int":
        return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.array(column.values, dtype=np.int64))])
    if column.kind == "float":
        values = np.array(column.values, dtype=np.float64)
        missing = np.isnan(values)
        nulls = int(missing.sum())
        validity = pa.py_buffer(np.packbits(~missing, bitorder="little")) if nulls else None
        return pa.Array.from_buffers(pa.float64(), n, [validity, pa.py_buffer(values)], null_count=nulls)
    data = [v.encode("utf-8") for v in column.values]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(b) for b in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


def write_parquet(columns: list[Column], path: str) -> None:
    """The table as a Parquet file (snappy), with the Arrow types ``DataFrame.to_parquet`` gives its frame."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_arrays([_arrow_array(c) for c in columns], names=[c.name for c in columns])
    pq.write_table(table, path, compression="snappy")
