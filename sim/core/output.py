"""Writing results: atomic files, JSON that is byte-identical for identical inputs, tidy CSV tables."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Table:
    """A tidy table: its columns (the CSV header, written even when there are no rows) and its rows (a list, or an
    iterator that streams to disk). A row holds exactly these columns; a key outside them is an error, a missing one
    an empty cell."""

    columns: tuple[str, ...]
    rows: Iterable[Mapping[str, Any]]


def clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become None, tuples become lists, numpy scalars become Python numbers."""
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(obj: Any) -> str:
    return json.dumps(clean(obj), indent=2, allow_nan=False) + "\n"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_with(path: str, write: Callable[[str], None]) -> None:
    """Let ``write(tmp)`` fill a temporary file beside ``path``, flush it to disk, then rename it over ``path``: an
    interrupted write never leaves a half file under the real name."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8, line endings as given) to ``path`` atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)

    atomic_write_with(path, write)


def csv_text(rows: Iterable[Mapping[str, Any]]) -> str:
    rows = list(rows)
    buf = io.StringIO()
    if not rows:
        return ""
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in clean(r).items()})
    return buf.getvalue()


def write_csv_stream(path: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write rows that all have the same columns (those of the first) to ``path`` as they come, atomically: a long
    table never sits in memory whole."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            w = None
            for r in rows:
                if w is None:
                    w = csv.DictWriter(fh, fieldnames=list(r), lineterminator="\n")
                    w.writeheader()
                w.writerow({k: ("" if v is None else v) for k, v in clean(r).items()})

    atomic_write_with(path, write)


def write_table(path: str, table: Table) -> None:
    """Write ``table`` to ``path`` as CSV, atomically, its rows as they come (a long table never sits in memory
    whole); the header is written even when there are no rows."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(table.columns), lineterminator="\n")
            w.writeheader()
            for r in table.rows:
                w.writerow({k: ("" if v is None else v) for k, v in clean(r).items()})

    atomic_write_with(path, write)


def write_outputs(out_dir: str, summary: Mapping[str, Any], tables: Mapping[str, Table | Iterable[dict]],
                  summary_name: str = "summary.json") -> list[str]:
    """Write each table as ``NAME.csv`` and then the summary (last, so its presence means the run finished). A
    :class:`Table` has its header even with no rows; plain rows given as a list take their columns from the rows, as
    an iterator (streaming) from the first row."""
    written = []
    for name, rows in tables.items():
        path = os.path.join(out_dir, f"{name}.csv")
        if isinstance(rows, Table):
            write_table(path, rows)
        elif isinstance(rows, list):
            atomic_write_text(path, csv_text(rows))
        else:
            write_csv_stream(path, rows)
        written.append(path)
    path = os.path.join(out_dir, summary_name)
    atomic_write_text(path, dumps(summary))
    written.append(path)
    return written
