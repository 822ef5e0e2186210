"""A public table read for a fidelity domain: its rows as stripped strings, bounded, with one-line errors."""

from __future__ import annotations

import csv

from sim.core.errors import ScenarioError

MAX_ROWS = 100_000


def read_csv(path: str) -> tuple[list[dict[str, str]], list[str]]:
    """The rows of the CSV table at ``path`` (every cell stripped) and its columns; a missing or unreadable file,
    or one of more than :data:`MAX_ROWS` rows, is a ScenarioError naming it."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            rows = []
            for n, r in enumerate(reader):
                if n >= MAX_ROWS:
                    raise ScenarioError(path, "", f"more than {MAX_ROWS:,} rows")
                rows.append({k: (v or "").strip() for k, v in r.items() if k is not None})
            fields = list(reader.fieldnames or [])
    except FileNotFoundError:
        raise ScenarioError(path, "", "file not found") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ScenarioError(path, "", f"cannot read: {exc}") from None
    return rows, fields
