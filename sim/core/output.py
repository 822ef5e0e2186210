"""Writing results: atomic files, JSON that is byte-identical for identical inputs, tidy CSV tables."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import stat
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
    interrupted write never leaves a half file under the real name. A character device (``/dev/null``, a terminal)
    is written in place, never replaced (as root, a rename would swap ``/dev/null`` for a plain file); any other
    path that is not a regular file (a FIFO, a socket) is refused in one line."""
    if _write_in_place(path, write):
        return
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:  # from here on, however it stops (Ctrl-C included), no temporary file stays behind
        os.close(fd)
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_in_place(path: str, write: Callable[[str], None]) -> bool:
    """Whether ``path`` is an existing character device (``/dev/null``, a terminal) or a pipe with a reader
    (``/dev/stdout`` into ``| less``), then written through directly; a one-line error for a FIFO nobody reads (the
    write would wait forever) or a socket; False for a regular or new file."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # not there yet (or a name the writer will refuse itself)
        return False
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return False
    held = None
    if stat.S_ISFIFO(mode):
        try:  # a FIFO opens for writing without blocking only when a reader holds it open
            held = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return _refuse_target(path, "a FIFO no process reads")
    elif not stat.S_ISCHR(mode):
        return _refuse_target(path, "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    try:
        write(path)
    finally:  # the probe stays open until the text is written: closed first, the reader would see the end at once
        if held is not None:
            os.close(held)
    return True


def _refuse_target(path: str, kind: str) -> bool:
    from sim.core.errors import ScenarioError

    raise ScenarioError(path, "", f"{kind}: expected a file to write (sim writes a new file and renames it)")


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8, line endings as given) to ``path`` atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)

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


# the temporary files atomic_write_with makes for NAME.csv or NAME.json: ".NAME.csv.RANDOM08.tmp" (RANDOM08:
# mkstemp's 8 random letters, digits or underscores); a write cut short (kill -9, power loss) leaves one behind
_TEMP_NAME = re.compile(r"\.[^/]+\.(?:csv|json)\.[a-z0-9_]{8}\.tmp")


def remove_stale_temps(folder: str) -> list[str]:
    """Remove what writes of :func:`write_outputs` cut short left in ``folder``: only files named as its temporary
    files are (``.NAME.csv.RANDOM08.tmp``, ``.NAME.json.RANDOM08.tmp``), never another file. The names removed."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in sorted(names):
        path = os.path.join(folder, name)
        if _TEMP_NAME.fullmatch(name) and os.path.isfile(path) and not os.path.islink(path):
            try:
                os.unlink(path)
            except OSError:
                continue
            removed.append(name)
    return removed


def _remove_durably(path: str) -> None:
    """Remove ``path`` (if there) and make the removal reach the disk before anything else is written."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_outputs(out_dir: str, summary: Mapping[str, Any], tables: Mapping[str, Table],
                  summary_name: str = "summary.json") -> list[str]:
    """Write each table as ``NAME.csv`` and then the summary, last: its presence means the run finished. Into a
    folder that holds an earlier run, the earlier summary is removed first (a run cut short leaves none, never the
    old one beside new tables) and so are the temporary files earlier writes cut short left (only those; other files
    stay). Each :class:`Table` has its header even with no rows, and rows given as an iterator stream to disk."""
    os.makedirs(out_dir, exist_ok=True)
    summary_path = os.path.join(out_dir, summary_name)
    _remove_durably(summary_path)
    remove_stale_temps(out_dir)
    written = []
    for name, table in tables.items():
        path = os.path.join(out_dir, f"{name}.csv")
        write_table(path, table)
        written.append(path)
    atomic_write_text(summary_path, dumps(summary))
    written.append(summary_path)
    return written
