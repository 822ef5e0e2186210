"""The sweep's tables written without pandas (sim.sweeps.table) are the tables pandas writes: results.csv byte for
byte, results.parquet read back by pandas as an equal frame (dtypes included) with the same Arrow schema; rows the
pandas-free writer does not type go through pandas."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import HOME_LAB, ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.sweeps.results import results_columns, results_frame
from sim.sweeps.spec import Axis
from sim.sweeps.table import csv_text, write_parquet


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


def assert_same_tables(rows: list[dict], axes: list[Axis], tmp_path) -> bool:
    """The pandas-free tables of ``rows`` equal pandas' (False when the pandas-free writer hands them to pandas)."""
    columns = results_columns(rows, axes)
    if columns is None:
        return False
    frame = results_frame(rows, axes)
    assert csv_text(columns) == frame.to_csv(index=False, lineterminator="\n")
    ref, new = tmp_path / "ref.parquet", tmp_path / "new.parquet"
    frame.to_parquet(ref, index=False, engine="pyarrow")
    write_parquet(columns, str(new))
    pd.testing.assert_frame_equal(pd.read_parquet(new), pd.read_parquet(ref), check_exact=True,
                                  check_column_type=True, check_index_type=True)
    ref_table, new_table = pq.read_table(ref), pq.read_table(new)
    new_table.validate(full=True)
    assert new_table.schema.equals(ref_table.schema.remove_metadata())
    assert new_table.equals(ref_table.replace_schema_metadata(None))  # nulls where pandas has them, too
    return True


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
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_pandas_free_tables_equal_pandas_tables(data, tmp_path_factory):
    axes = [_axis(f"a{i}.x", data.draw(axis_values)) for i in range(data.draw(st.integers(0, 3)))]
    n = data.draw(st.integers(1, 6))
    names = data.draw(st.lists(st.sampled_from(["m.b", "m.a", "a0.x", "seed", "z", "key"]), unique=True, max_size=5))
    metrics = [data.draw(st.dictionaries(st.sampled_from(names), metric_value)) if names else {} for _ in range(n)]
    params = [{"p.q": data.draw(finite), "p.r": data.draw(finite)} for _ in range(n)] if data.draw(
        st.booleans()) else None
    points = data.draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    rows = _rows(axes, points, metrics, params)
    assert assert_same_tables(rows, axes, tmp_path_factory.mktemp("t"))  # and typed without pandas


def test_the_empty_table_and_untyped_values(tmp_path):
    assert assert_same_tables([], [_axis("a", [1, 2])], tmp_path)
    # None in an axis (the frame turns it into NaN), text in a metric: left to pandas
    none_axis = _axis("a", [None, "x"])
    assert results_columns(_rows([none_axis], [0, 1], [{"m": 1.0}, {"m": 2.0}]), [none_axis]) is None
    axis = _axis("a", [1, 2])
    assert results_columns(_rows([axis], [0, 1], [{"m": "1.5"}, {"m": 2.0}]), [axis]) is None


@pytest.mark.slow
def test_a_sweep_imports_no_pandas(tmp_path):
    code = ("import sys\nfrom sim.cli import main\n"
            f"sys.argv = ['sim', 'sweep', {HOME_LAB!r}, '--axis', 'jobs.long_with_load.tokens=1000,2000', "
            f"'--workers', '1', '--quiet', '--out', {str(tmp_path / 'o')!r}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "assert 'pandas' not in sys.modules, 'pandas imported'\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    frame = pd.read_parquet(tmp_path / "o" / "results.parquet")
    assert list(frame["jobs.long_with_load.tokens"]) == [1000, 2000] and frame["key"].dtype == frame["error"].dtype


@pytest.mark.parametrize("values", [[1, 2.5], ["lru", "lfu"], [True, 1], [[1, 2], "x"]])
def test_axis_columns_as_pandas_types_them(values, tmp_path):
    axis = _axis("a", values)
    rows = _rows([axis], list(range(len(values))), [{"m": 1.0}] * len(values))
    assert assert_same_tables(rows, [axis], tmp_path)
    assert assert_same_tables(rows[:1], [axis], tmp_path)  # a partial table: only the values done so far
