"""The public tables of ``calibration/public/`` read for a fidelity domain or a calibration: their rows as strings,
bounded, with one-line errors."""

from __future__ import annotations

import csv
import io

from sim.core.errors import ScenarioError
from sim.formats.inputs import read_text

MAX_ROWS = 100_000


def read_csv(path: str) -> tuple[list[dict[str, str]], list[str]]:
    """The rows of the CSV table at ``path`` (every cell stripped) and its columns; a missing or unreadable file
    (checked by :mod:`sim.formats.inputs`), or one of more than :data:`MAX_ROWS` rows, is a ScenarioError naming it."""
    text = read_text(path, "", "a CSV table")
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        rows = []
        for n, r in enumerate(reader):
            if n >= MAX_ROWS:
                raise ScenarioError(path, "", f"more than {MAX_ROWS:,} rows")
            rows.append({k: (v or "").strip() for k, v in r.items() if k is not None})
        fields = list(reader.fieldnames or [])
    except csv.Error as exc:
        raise ScenarioError(path, "", f"cannot read: {exc}") from None
    return rows, fields


def read_cells(path: str) -> list[dict[str, str | None]]:
    """The rows of the CSV table at ``path`` (read through :mod:`sim.formats.inputs`) as pandas reads them with every
    cell a string, an empty cell None."""
    import pandas as pd

    df = pd.read_csv(io.StringIO(read_text(path, "", "a CSV table")), dtype=str, keep_default_na=False)
    return [{k: (v if v != "" else None) for k, v in row.items()} for row in df.to_dict("records")]
