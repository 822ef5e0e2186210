"""A sweep's two tables are one table (``results_columns``) written by the libraries without pandas: results.parquet
by pyarrow, results.csv by the standard library's csv writer; both byte for byte what pandas gives of the same rows
(its frame, handed to pyarrow and written by ``to_csv``: the oracle below, the writer of earlier builds)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import HOME_LAB
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.sweeps.results import (
    _is_metric,
    _write_parquet,
    axis_as_text,
    results_columns,
    results_csv,
    results_table,
)
from sim.sweeps.spec import Axis


def results_frame(rows: list[dict], axes: list):
    """The oracle: the tidy table as pandas makes it (metrics as floats, each axis column of one type)."""
    import json

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
        if axis_as_text(a.values):  # the rows' own values (pandas would turn a None among text into NaN first)
            frame[a.name] = [json.dumps(row[a.name]) for row in rows]
    return frame


def _axis(name, values):
    return Axis(name, tuple(values), ((name, None),))


def _rows(axes: list[Axis], points: list[int], metrics: list[dict], params: list[dict] | None = None) -> list[dict]:
    """Rows as sim.sweeps.results.table_rows makes them."""
    rows = []
    for i, (p, m) in enumerate(zip(points, metrics, strict=True)):
        row = {"point": p, **{a.name: a.values[p % len(a.values)] for a in axes}, "seed": 7 + i}
        if params is not None:
            row["draw"] = i
            row.update({f"param.{k}": v for k, v in params[i].items()})
        row["key"] = f"k{i:04d}"
        row["error"] = "" if m else "cannot place job, \"quoted\"\nnext line"
        for name, value in sorted(m.items()):
            row["metric." + name if name in row else name] = value
        rows.append(row)
    return rows


def assert_same_tables(rows: list[dict], axes: list[Axis], tmp_path) -> None:
    """The tables of ``rows`` are what pandas gives: the Arrow table its frame hands pyarrow (types and nulls), the
    same Parquet bytes, the CSV text ``to_csv`` writes; the Parquet file reads back as the frame."""
    frame = results_frame(rows, axes)
    columns = results_columns(rows, axes)
    metrics = {c for c in columns if _is_metric(c, [a.name for a in axes])}
    table = results_table(columns, metrics)
    import pyarrow as pa

    expected = pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)
    assert table.schema == expected.schema and table.equals(expected)
    path, ref = tmp_path / "r.parquet", tmp_path / "ref.parquet"
    _write_parquet(table, str(path))
    _write_parquet(expected, str(ref))
    assert path.read_bytes() == ref.read_bytes()
    assert results_csv(columns, table) == frame.to_csv(index=False, lineterminator="\n")
    back = pd.read_parquet(path)
    pd.testing.assert_frame_equal(back, frame, check_exact=True, check_column_type=len(frame.columns) > 0,
                                  check_index_type=True)
    written = pq.read_table(path)
    written.validate(full=True)
    assert written.schema.metadata is None  # no pandas schema metadata


finite = st.floats(allow_nan=False, allow_infinity=False)
number = st.one_of(st.integers(-(2**53), 2**53), finite, st.just(math.inf), st.just(-math.inf), st.just(-0.0))
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
metric_value = st.one_of(number, st.none(), st.just(math.nan), st.booleans(),
                         st.builds(np.float64, finite), st.builds(np.int64, st.integers(-(2**40), 2**40)))
whole = st.integers(-(2**63), 2**63 - 1)
mixed = st.one_of(whole, text, st.booleans(), st.lists(st.integers(), max_size=2))
axis_values = st.one_of(st.lists(whole, min_size=1, max_size=4),
                        st.lists(st.one_of(st.integers(-1000, 1000), finite, st.just(math.inf)), min_size=1,
                                 max_size=4),
                        st.lists(text, min_size=1, max_size=4),
                        st.lists(mixed, min_size=1, max_size=4))  # a text axis: its values as JSON


@pytest.mark.slow
@settings(max_examples=150, deadline=None)  # each case writes and reads two Parquet files (300 cases took 12 s)
@given(data=st.data())
def test_the_parquet_file_is_the_frame(data, tmp_path_factory):
    axes = [_axis(f"a{i}.x", data.draw(axis_values)) for i in range(data.draw(st.integers(0, 3)))]
    n = data.draw(st.integers(1, 6))
    names = data.draw(st.lists(st.sampled_from(["m.b", "m.a", "a0.x", "seed", "z", "key"]), unique=True, max_size=5))
    metrics = [data.draw(st.dictionaries(st.sampled_from(names), metric_value)) if names else {} for _ in range(n)]
    params = [{"p.q": data.draw(finite), "p.r": data.draw(finite)} for _ in range(n)] if data.draw(
        st.booleans()) else None
    points = data.draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    rows = _rows(axes, points, metrics, params)
    assert_same_tables(rows, axes, tmp_path_factory.mktemp("t"))


def test_the_empty_table_and_values_pandas_types(tmp_path):
    assert_same_tables([], [_axis("a", [1, 2])], tmp_path)
    none_axis = _axis("a", [None, "x"])  # None in an axis (JSON text: null), text in a metric
    assert_same_tables(_rows([none_axis], [0, 1], [{"m": 1.0}, {"m": 2.0}]), [none_axis], tmp_path)


def test_a_sweeps_two_tables_hold_the_same_frame(tmp_path):
    from sim.sweeps.run import run_sweep
    from sim.sweeps.spec import build_plan

    plan = build_plan(HOME_LAB, ["jobs.long_with_load.tokens=1000,2000", "machines.rtx4090_box.note=x,1"], False,
                      None, None, [])
    run_sweep(plan, str(tmp_path / "o"), 0, quiet=True)
    frame = pd.read_parquet(tmp_path / "o" / "results.parquet")
    csv = (tmp_path / "o" / "results.csv").read_text()
    assert csv == frame.to_csv(index=False, lineterminator="\n")  # what pandas writes of what pyarrow wrote
    assert list(frame["jobs.long_with_load.tokens"]) == [1000, 1000, 2000, 2000]
    assert list(frame["machines.rtx4090_box.note"]) == ['"x"', "1", '"x"', "1"]
    metrics = list(frame.columns[list(frame.columns).index("error") + 1:])
    assert metrics and all(frame[c].dtype == np.float64 for c in metrics) and frame["key"].dtype == frame["error"].dtype
    assert pq.read_schema(tmp_path / "o" / "results.parquet").metadata is None  # pyarrow's table, written as is


@pytest.mark.parametrize("values", [[1, 2.5], ["lru", "lfu"], [True, 1], [[1, 2], "x"]])
def test_axis_columns_as_pandas_types_them(values, tmp_path):
    axis = _axis("a", values)
    rows = _rows([axis], list(range(len(values))), [{"m": 1.0}] * len(values))
    assert_same_tables(rows, [axis], tmp_path)
    assert_same_tables(rows[:1], [axis], tmp_path)  # a partial table: only the values done so far
