"""Measured tables: CSV files whose leading ``#`` lines carry provenance and units.

:func:`read_measured` reads the file through the one input layer (:func:`sim.formats.inputs.read_text`: a regular file,
never a FIFO or a device, of at most ``max_bytes`` bytes and ``max_lines`` lines, UTF-8 text without NUL bytes) and
rejects what it cannot read with one line naming the file, and the row and column where it can: a header with a blank
or repeated column name, a malformed CSV line. A UTF-8 byte order mark (what spreadsheet programs write) is accepted
and dropped; a short row has its last cells blank, and cells beyond the header's (an unquoted comma in a trailing
note) stay the last column's text. Its rows are :class:`Row` dicts:
reading a column the table does not have (``row["machine"]``) is a one-line :class:`ScenarioError`, not a
``KeyError``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass

from sim.core.errors import ScenarioError
from sim.formats.inputs import MAX_LINES, MAX_TEXT_BYTES, read_text
from sim.formats.quantities import Quantity

WHAT = "a CSV table"


class Row(dict):
    """One data row (column -> cell text). A missing column is a one-line error naming the file, row and column."""

    source: str = ""
    line: int = 0

    def __missing__(self, key: object) -> str:
        raise ScenarioError(self.source, f"row {self.line}.{key}", f"missing column {key!r}: the header has "
                            f"{', '.join(self) or 'no columns'}")


class Rows(list):
    """The data rows of a measured table (a list of :class:`Row`), with ``columns``, its header (also when there are
    no rows) and ``source``, the file."""

    columns: tuple[str, ...] = ()
    source: str = ""


def read_measured(path: str, *, max_bytes: int = MAX_TEXT_BYTES, max_lines: int = MAX_LINES
                  ) -> tuple[list[str], list[dict[str, str]]]:
    """(provenance lines without '# ', rows as dicts of strings) of the table at ``path`` (at most ``max_bytes``
    bytes and ``max_lines`` lines). Errors are one-line ScenarioErrors. The rows are a :class:`Rows` list of
    :class:`Row` dicts; row numbers in errors count data rows from 1."""
    text = read_text(path, "", WHAT, max_bytes=max_bytes, max_lines=max_lines)
    lines = text.splitlines()
    provenance = [ln[1:].strip() for ln in lines if ln.startswith("#")]
    body = [ln for ln in lines if ln.strip() and not ln.startswith("#")]
    if not body:
        raise ScenarioError(path, "", "no header row")
    try:
        records = list(csv.reader(body))
    except csv.Error as exc:
        raise ScenarioError(path, "", f"not a CSV table ({exc})") from None
    header = records[0]
    for i, name in enumerate(header, start=1):
        if not name.strip():
            raise ScenarioError(path, "header", f"column {i} has no name: expected a name in every header cell")
        if header.index(name) != i - 1:
            raise ScenarioError(path, "header", f"column {name!r} appears twice")
    rows = Rows()
    rows.columns, rows.source = tuple(header), path
    for line, cells in enumerate(records[1:], start=1):
        if len(cells) > len(header):  # an unquoted comma in the last column (a note): the text as written
            cells = [*cells[:len(header) - 1], ",".join(cells[len(header) - 1:])]
        row = Row(zip(header, [*cells, *[""] * (len(header) - len(cells))], strict=True))  # short: blank cells
        row.source, row.line = path, line
        rows.append(row)
    return provenance, rows


def require_columns(path: str, rows: Iterable[dict], columns: Iterable[str], what: str = "") -> None:
    """A one-line error naming the file and the first of ``columns`` the table's header lacks (``rows`` as
    :func:`read_measured` returns them)."""
    header = getattr(rows, "columns", None)
    if header is None:
        first = next(iter(rows), None)
        header = tuple(first) if first is not None else ()
    missing = [c for c in columns if c not in header]
    if missing:
        raise ScenarioError(path, f"header.{missing[0]}", f"missing column{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(missing)}{f' ({what})' if what else ''}; the header has "
                            f"{', '.join(header) or 'no columns'}")


def number(row: dict[str, str], key: str, source: str, line: int, required: bool = True,
           quantity: Quantity | None = None) -> float | None:
    """A finite positive number from a measured row (``quantity``: in that quantity's range, errors saying its
    unit); None when blank and not required."""
    if quantity is not None:
        return quantity.parse(row.get(key), source, f"row {line}.{key}", required)
    raw = (row.get(key) or "").strip()
    if not raw:
        if required:
            raise ScenarioError(source, f"row {line}.{key}", "missing value: expected a positive number")
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ScenarioError(source, f"row {line}.{key}", f"bad value {raw!r}: expected a finite positive number")
    return value


def read_provenance(path: str) -> list[str]:
    """The provenance lines of the measured table at ``path`` (its ``#`` lines without the ``#``), read and checked
    as :func:`read_measured` reads the table: what a file written from the table copies into its header."""
    return read_measured(path)[0]


@dataclass(frozen=True)
class NumberRow:
    """One data row of a table read by :func:`read_numbers`: its ``line`` (data rows from 1), the numbers asked for
    (each in its quantity's unit, None when blank) and the stripped text of the text columns asked for."""

    line: int
    numbers: dict[str, float | None]
    text: dict[str, str]


def read_numbers(path: str, numbers: dict[str, Quantity | None], *, text: Iterable[str] = (),
                 required: Iterable[str] = (), what: str = "") -> list[NumberRow]:
    """The rows of the measured table at ``path`` with the cells of ``numbers`` read as numbers: each in its
    :class:`Quantity`'s range (None: any finite positive number; see :func:`number`), None when blank; and the cells
    of ``text`` as stripped text ("" when blank). The header must hold the ``required`` columns
    (:func:`require_columns`, ``what`` naming the table in the error); a bad cell is a one-line ScenarioError naming
    the file, row and column."""
    _, rows = read_measured(path)
    require_columns(path, rows, required, what)
    return [NumberRow(line, {key: number(row, key, path, line, False, quantity) for key, quantity in numbers.items()},
                      {key: (row.get(key) or "").strip() for key in text})
            for line, row in enumerate(rows, start=1)]
