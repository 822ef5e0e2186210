"""The public weight-loading tables (``calibration/public/weight_loading.csv``, ``weight_loading_more.csv`` and
``unified_memory_bandwidth.csv``: verbatim copies of measured loads, disk, copy and link rates with every row's
source), read into :class:`WeightLoadRow` records.

Per row: a source, a setup, the machine (GPU text, disk, page-cache state), the engine and model, what was measured
(``measurement``) and its ``value`` in its ``unit``. The value is a source's words: ``"~110"`` is 110, ``"428-464"``
the midpoint 446, ``"1,222"`` 1222; two runs (``"292 vs 5"``) or no number is None. A known unit (:data:`UNITS`) turns
it into seconds or GB/s (``measured``), which must lie in that quantity's range (a one-line ScenarioError at
``row ROW_ID.value`` otherwise). The other cells read as numbers where a rule of ``calibration/loads_setups.yaml``
may ask for them are read here too, None when they do not hold one. Which rows are read, as what setup, and why the
others are excluded is the fidelity domain's (:mod:`sim.fidelity.loads`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from sim.core.errors import ScenarioError
from sim.formats.public_tables import read_csv
from sim.formats.quantities import BANDWIDTH_GBPS, SECONDS, Quantity

REQUIRED = ("row_id", "source_id", "setup_id", "grade", "engine", "model", "measurement", "value", "unit")
# A unit's factor to seconds (times) or GB/s (rates), and the range the converted value can take.
UNITS = {"ms": 1e-3, "s": 1.0, "min": 60.0, "GB/s": 1.0, "GB/s_payload": 1.0, "MB/s": 1e-3, "MByte/s": 1e-3}
RANGES: dict[str, Quantity] = {u: SECONDS if u in ("ms", "s", "min") else BANDWIDTH_GBPS for u in UNITS}


@dataclass(frozen=True)
class WeightLoadRow:
    """One row of a public weight-loading table. Text cells are stripped ("" when blank); numbers are None when
    the cell does not hold one."""

    row_id: str
    source_id: str
    setup_id: str
    grade: str  # the source's reliability grade
    engine: str
    model: str
    measurement: str  # what was measured, as the source words it
    value_text: str  # the value cell as written
    unit: str  # the unit cell as written
    value: float | None  # the value's one number in ``unit`` (a range's midpoint), None for two runs or none
    measured: float | None  # the value in s (a time) or GB/s (a rate); None when ``value`` or the unit is unknown
    model_bytes_gib: float | None  # the model_bytes_gib cell's first word as a number (a source's GiB or GB)
    gpu_ranks: int | None  # the GPU cell's "Nx" count ("2x NVIDIA GeForce RTX 3090" is 2)
    chunk_bytes: int | None  # bytes per request of the transfer_size cell's "chunk N B"
    threads: int | None  # copy threads of the measurement's "threads N"
    block_mb: int | None  # the measurement's "block N MB" (a copy request's most; fastsafetensors means MiB)
    backend: str | None  # the measurement's "backend=NAME"
    cells: Mapping[str, str]  # every cell as text, by column: what a setup rule's ``match`` compares


def one_number(text: str) -> float | None:
    """A cell's number: '~110' -> 110, '428-464' -> 446 (midpoint), '1,222' -> 1222; None when it holds two runs
    or no number."""
    t = text.strip().lstrip("~").replace(",", "")
    if " vs " in t or not t:
        return None
    m = re.fullmatch(r"([0-9.]+)\s*-\s*([0-9.]+)", t)
    if m:
        try:
            return (float(m[1]) + float(m[2])) / 2
        except ValueError:
            return None
    try:
        return float(t)
    except ValueError:
        return None


def _first_word_number(text: str) -> float | None:
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def _ranks(gpu: str) -> int | None:
    try:
        return int(gpu.split("x")[0])
    except ValueError:
        return None


def _search_int(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return int(m[1]) if m else None


def _row(r: dict[str, str], path: str) -> WeightLoadRow:
    value, unit = one_number(r["value"]), r["unit"].strip()
    scale = UNITS.get(unit)
    measured = None
    if value is not None and scale is not None:
        measured = value * scale
        RANGES[unit].check(measured, path, f"row {r['row_id']}.value")
    measurement = r["measurement"]
    backend = measurement.split("backend=")[1] if "backend=" in measurement else None
    return WeightLoadRow(r["row_id"], r["source_id"], r["setup_id"], r["grade"], r["engine"], r["model"],
                         measurement, r["value"], r["unit"], value, measured,
                         _first_word_number(r.get("model_bytes_gib", "")), _ranks(r.get("gpu", "")),
                         _search_int(r"chunk (\d+) B", r.get("transfer_size", "")),
                         _search_int(r"threads (\d+)", measurement), _search_int(r"block (\d+)\s*MB", measurement),
                         backend, MappingProxyType(dict(r)))


def read_weight_loading(path: str | os.PathLike) -> list[WeightLoadRow]:
    """The rows of one public weight-loading table at ``path``, in table order; a missing file or column
    (:data:`REQUIRED`) or a value out of its quantity's range is a one-line ScenarioError naming it."""
    path = str(path)
    rows, fields = read_csv(path)
    missing = [c for c in REQUIRED if c not in fields]
    if missing:
        raise ScenarioError(path, missing[0], "a column of the weight-loading tables (calibration/public/README.md)")
    return [_row(r, path) for r in rows]
