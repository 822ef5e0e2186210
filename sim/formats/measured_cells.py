"""The cells of the measured tables a scenario maps under ``calibrate.tables`` (:class:`sim.config.calibrate.TableMap`),
read as typed values.

- :func:`measured_values`: a measured cell, ``140.6`` (or ``1.5e-3``), a range ``35-44`` or repeated runs
  ``417;421;455``, as its values (in the column's unit, which the scenario's map states).
- :func:`read_quantities`: a ``quantities`` table (columns ``quantity`` and ``value``, each quantity on one row) as
  :class:`QuantityCell` records by quantity; a value is read (:func:`measured_values`) when a scenario maps it.
- :func:`read_buckets`: a ``buckets`` table (``bucket_by``, ``low_pct``, ``high_pct``, ``decode_tok_s``) as
  :class:`DecodeBucket` records.

Every table is read by :func:`sim.formats.measured_tables.read_measured`; a bad cell is a one-line ScenarioError
naming the file, row and column.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from sim.core.errors import ScenarioError
from sim.formats.measured_tables import read_measured

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"\s*({_NUMBER})\s*-\s*({_NUMBER})\s*")
BUCKET_COLUMNS = ("bucket_by", "low_pct", "high_pct", "decode_tok_s")
BUCKET_BY = ("pcie_spill", "hit_rate")


def measured_values(text: str, where: str, key: str) -> list[float]:
    """``140.6`` (or ``1.5e-3``), a range ``35-44`` or repeated runs ``417;421;455``: the measured values of a cell."""
    raw = str(text).strip()
    whole = _RANGE.fullmatch(raw)
    parts = raw.split(";") if ";" in raw else list(whole.groups()) if whole else [raw]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ScenarioError(where, key, f"bad value {raw[:40]!r}: expected a number, a range a-b or values a;b;c"
                            ) from None
    if not all(math.isfinite(v) for v in values):
        raise ScenarioError(where, key, f"bad value {raw[:40]!r}: expected finite numbers")
    return values


@dataclass(frozen=True)
class QuantityCell:
    """The row of one quantity of a ``quantities`` table: its data row (from 1) and its ``value`` cell as written
    ("" when blank), read by :func:`measured_values` where it is mapped."""

    line: int
    value: str


def read_quantities(path: str) -> dict[str | None, QuantityCell]:
    """The rows of the ``quantities`` table at ``path`` by their ``quantity`` (as written): columns ``quantity`` and
    ``value`` (when it has rows), no quantity on two rows."""
    _, rows = read_measured(path)
    if rows and not {"quantity", "value"} <= set(rows[0]):
        raise ScenarioError(path, "", "a quantities table: columns quantity and value")
    by_name: dict[str | None, QuantityCell] = {}
    for line, r in enumerate(rows, start=1):
        if r.get("quantity") in by_name:
            raise ScenarioError(path, f"row {line}.quantity", f"{r.get('quantity')!r} appears twice")
        by_name[r.get("quantity")] = QuantityCell(line, r.get("value") or "")
    return by_name


@dataclass(frozen=True)
class DecodeBucket:
    """A row of a ``buckets`` table: the mean decode rate (tok/s) of the requests whose ``by`` (``pcie_spill`` or
    ``hit_rate``, in percent) lies from ``low_pct`` to ``high_pct`` (None: no upper edge; 0 and 0: exactly zero)."""

    line: int
    by: str
    low_pct: float
    high_pct: float | None
    decode_tok_s: float


def _check_edges(path: str, line: int, lo: float, hi: float | None) -> None:
    """A bucket's edges are percentages: 0 <= low_pct <= 100 and low_pct < high_pct <= 100 (blank high_pct: no
    upper edge; ``0, 0``: exactly zero); otherwise no request could fall in it and its mean decode would be NaN."""
    if not (math.isfinite(lo) and 0 <= lo <= 100):
        raise ScenarioError(path, f"row {line}.low_pct", f"bad value {lo:g}: expected a percentage from 0 to 100")
    if hi is None:
        return
    if not (math.isfinite(hi) and 0 <= hi <= 100):
        raise ScenarioError(path, f"row {line}.high_pct", f"bad value {hi:g}: expected a percentage from 0 to 100, or "
                            "blank (no upper edge)")
    if hi < lo or (hi == lo and lo != 0):
        raise ScenarioError(path, f"row {line}.high_pct", f"bad value {hi:g}: expected more than low_pct ({lo:g}) "
                            "(an inverted or empty bucket; 0 and 0: requests of exactly zero)")


def _bucket(row: dict[str, str], path: str, line: int) -> DecodeBucket:
    try:
        by = row["bucket_by"]
        lo = float(row["low_pct"])
        hi = None if (row.get("high_pct") or "").strip() == "" else float(row["high_pct"])
        rate = float(row["decode_tok_s"])
    except (KeyError, TypeError, ValueError):
        raise ScenarioError(path, f"row {line}", "bucket_by, low_pct, high_pct (blank: no upper edge) and "
                            "decode_tok_s") from None
    _check_edges(path, line, lo, hi)
    if not (math.isfinite(rate) and rate > 0):
        raise ScenarioError(path, f"row {line}.decode_tok_s", f"bad value {rate:g}: expected a positive, "
                            "finite decode rate (tok/s)")
    if by not in BUCKET_BY:
        raise ScenarioError(path, f"row {line}.bucket_by", f"bad value {by!r}: expected pcie_spill or "
                            "hit_rate")
    return DecodeBucket(line, by, lo, hi, rate)


def read_buckets(path: str) -> list[DecodeBucket]:
    """The rows of the ``buckets`` table at ``path``: its columns (when it has rows), each bucket's edges and a
    positive finite decode rate."""
    _, rows = read_measured(path)
    if rows and not set(BUCKET_COLUMNS) <= set(rows[0]):
        raise ScenarioError(path, "", f"a buckets table: columns {', '.join(BUCKET_COLUMNS)} (a blank high_pct: no "
                            "upper edge)")
    return [_bucket(row, path, line) for line, row in enumerate(rows, start=1)]
