"""Load-time tables: measured model loads, read into typed records.

Two formats, both measured tables (:func:`sim.formats.measured_tables.read_measured`: ``#`` provenance lines, a
header, one-line errors naming the file, row and column):

- the public load-times table (``calibration/public_loads.csv``, :func:`read_load_times`): per row an id, a
  machine, optionally the disk and loader kind it ran with, what was measured (:data:`QUANTITIES`, a bandwidth in
  GB/s or a time in s) and its role, ``fit`` (with the dotted parameters it pins, ``;``-separated) or ``check``;
  a request size (KiB), a file size and the free GPU memory (GB), and whether the page cache was ``cold`` or
  ``warm`` -> :class:`LoadTime`;
- the load-rate tables (``calibration/loading_*.csv``, :func:`read_load_rates`): per row a machine, the file size
  (GB) and its measured cold, hot and link load rates (GB/s) -> :class:`LoadRate`.

Which machines, disks, loaders and parameters a scenario has is not the format's: the fits check the names
against their scenario.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.errors import ScenarioError
from sim.formats.measured_tables import number, read_measured
from sim.formats.quantities import BANDWIDTH_GBPS, SECONDS, SIZE_GB, SIZE_KIB, Quantity

QUANTITIES = ("direct_read_gbps", "copy_gbps", "h2d_pinned_gbps", "h2d_pageable_gbps", "read_gbps_during_load",
              "start_s")
# What each quantity's measured value is: its unit and the range it can take (sim.formats.quantities).
MEASURED: dict[str, Quantity] = {q: SECONDS if q.endswith("_s") else BANDWIDTH_GBPS for q in QUANTITIES}
LOAD_TIME_COLUMNS = ("row_id", "machine", "quantity", "measured", "role")
RATES = ("cold_gbps", "hot_gbps", "link_gbps")


@dataclass(frozen=True)
class LoadTime:
    """One row of the public load-times table. ``measured`` is in the quantity's unit (GB/s for ``*_gbps``, s for
    ``start_s``); ``file_gb`` is required for ``start_s`` and ``request_kib`` for ``direct_read_gbps``."""

    line: int  # the data row (from 1)
    row_id: str
    machine: str
    disk: str | None  # None: the machine's
    loader: str | None  # a loader kind, None: the machine's
    quantity: str  # one of QUANTITIES
    request_kib: float | None  # KiB per read request
    file_gb: float | None  # GB of the model file
    gpu_gb: float | None  # GB free on the GPU, None when blank
    cache: str  # cold or warm
    measured: float
    role: str  # fit or check
    parameters: tuple[str, ...]  # dotted scenario paths a fit row pins
    source: str  # the table's path


@dataclass(frozen=True)
class LoadRate:
    """One row of a load-rate table: a machine's measured load rates (GB/s, None when blank) of a file of
    ``file_gb`` GB (None when blank: the scenario's model)."""

    line: int  # the data row (from 1)
    machine: str
    file_gb: float | None
    cold_gbps: float | None
    hot_gbps: float | None
    link_gbps: float | None
    source: str  # the table's path


def _text(row: dict[str, str], column: str) -> str:
    return (row.get(column) or "").strip()


def _load_time(r: dict[str, str], path: str, i: int, seen: set[str]) -> LoadTime:
    row_id = _text(r, "row_id")
    if not row_id or row_id in seen:
        raise ScenarioError(path, f"row {i}.row_id", f"{row_id!r}: expected an id no other row has")
    quantity = _text(r, "quantity")
    if quantity not in QUANTITIES:
        raise ScenarioError(path, f"row {i}.quantity", f"{quantity!r}: expected one of {', '.join(QUANTITIES)}")
    role = _text(r, "role")
    if role not in ("fit", "check"):
        raise ScenarioError(path, f"row {i}.role", f"{role!r}: expected fit or check")
    params = tuple(p.strip() for p in (r.get("parameters") or "").split(";") if p.strip())
    if role == "fit" and not params:
        raise ScenarioError(path, f"row {i}.parameters", "blank: a fit row names the parameters it pins")
    cache = _text(r, "cache") or "cold"
    if cache not in ("cold", "warm"):
        raise ScenarioError(path, f"row {i}.cache", f"{cache!r}: expected cold or warm")
    file_gb = number(r, "file_gb", path, i, quantity == "start_s", SIZE_GB)
    return LoadTime(i, row_id, _text(r, "machine"), _text(r, "disk") or None, _text(r, "loader") or None, quantity,
                    number(r, "request_kib", path, i, quantity == "direct_read_gbps", SIZE_KIB), file_gb,
                    number(r, "gpu_gb", path, i, False, SIZE_GB), cache,
                    number(r, "measured", path, i, quantity=MEASURED[quantity]), role, params, path)


def read_load_times(path: str) -> list[LoadTime]:
    """The rows of the public load-times table at ``path``: ids unique, quantities, roles and caches known, a fit
    row's parameters named, every number in its quantity's range; anything else a one-line ScenarioError."""
    _, rows = read_measured(path)
    missing = [c for c in LOAD_TIME_COLUMNS if not rows or c not in rows[0]]
    if missing:
        raise ScenarioError(path, "", f"expected columns {', '.join(LOAD_TIME_COLUMNS)} (and disk, loader, "
                            f"request_kib, file_gb, gpu_gb, cache, parameters); missing {missing}")
    out: list[LoadTime] = []
    seen: set[str] = set()
    for i, r in enumerate(rows, start=1):
        out.append(_load_time(r, path, i, seen))
        seen.add(out[-1].row_id)
    return out


def read_load_rates(path: str) -> list[LoadRate]:
    """The rows of the load-rate table at ``path`` (at least one): a file size (:data:`SIZE_GB`) and rates
    (:data:`BANDWIDTH_GBPS`) in range or blank; a missing column or a bad cell is a one-line ScenarioError."""
    _, rows = read_measured(path)
    missing = [c for c in ("machine", "cold_gbps", "hot_gbps") if rows and c not in rows[0]]
    if missing or not rows:
        raise ScenarioError(path, "", f"expected columns machine, cold_gbps, hot_gbps (and optionally link_gbps, "
                            f"file_gb) with at least one row; missing {missing or 'rows'}")
    return [LoadRate(i, _text(row, "machine"), number(row, "file_gb", path, i, False, SIZE_GB),
                     *(number(row, q, path, i, False, BANDWIDTH_GBPS) for q in RATES), path)
            for i, row in enumerate(rows, start=1)]
