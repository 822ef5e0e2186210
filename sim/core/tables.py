"""Measured tables: CSV files whose leading ``#`` lines carry provenance and units."""

from __future__ import annotations

import csv
import math

from sim.core.errors import ScenarioError


def read_measured(path: str) -> tuple[list[str], list[dict[str, str]]]:
    """(provenance lines without '# ', rows as dicts of strings). Errors are one-line ScenarioErrors."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise ScenarioError(path, "", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(path, "", f"not UTF-8 text (byte {exc.start})") from None
    provenance = [ln[1:].strip() for ln in lines if ln.startswith("#")]
    body = [ln for ln in lines if ln.strip() and not ln.startswith("#")]
    if not body:
        raise ScenarioError(path, "", "no header row")
    rows = list(csv.DictReader(body))
    return provenance, rows


def number(row: dict[str, str], key: str, source: str, line: int, required: bool = True) -> float | None:
    """A finite positive number from a measured row; None when blank and not required."""
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
