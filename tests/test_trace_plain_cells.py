"""A plain trace's cells are read without a regular expression per row (sim.formats.request_traces): a character check
and one conversion to floats. They admit exactly the plain numbers of the grammar ``_PLAIN_NUMBER``."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.formats.request_traces import _PLAIN_CHARS, _PLAIN_NUMBER, _STRAY_PLUS, _plain_numeric_csv

_GRAMMAR = re.compile(_PLAIN_NUMBER)


def _fast_accepts(cell: str) -> bool:
    if not _PLAIN_CHARS.fullmatch(cell) or _STRAY_PLUS.search(cell) or "," in cell or "\n" in cell:
        return False
    try:
        np.array([cell], dtype=float)
    except ValueError:
        return False
    return True


@given(st.text(alphabet="0123456789.eE+-", max_size=8))
@settings(max_examples=3000, deadline=None)
def test_the_fast_check_admits_exactly_the_plain_numbers(cell):
    assert _fast_accepts(cell) == bool(_GRAMMAR.fullmatch(cell)), cell


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False)),
                min_size=1, max_size=30))
@settings(max_examples=200, deadline=None)
def test_a_plain_table_reads_as_its_numbers(rows):
    text = "a,b,c\n" + "".join(f"{x},{y},{z!r}\n" for x, y, z in rows)
    cells = _plain_numeric_csv(text, len(rows))
    assert cells is not None and cells.plain
    assert list(cells.numbers("a")) == [float(x) for x, _, _ in rows]
    assert list(cells.numbers("c")) == [z for _, _, z in rows]
    assert cells.cell("b", 0) == str(rows[0][1])  # the cell as written, for error messages
    signed = "a,b,c\n+" + text.split("\n", 1)[1]
    assert _plain_numeric_csv(signed, len(rows)) is None  # a stray sign: pandas reads the table
