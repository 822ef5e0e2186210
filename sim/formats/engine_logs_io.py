"""Reading log files for :mod:`sim.formats.engine_logs` and writing its table: the files checked by the input layer
(:mod:`sim.formats.inputs`) and sniffed for text, lines read one at a time in bounded memory, and the summary, CSV and
JSON written row by row (nothing holds every row)."""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
import stat
from collections.abc import Callable, Iterator
from typing import Any

from sim.core.output import clean
from sim.core.text import plural
from sim.formats.inputs import check_file, shown_path

MAX_LINE = 65_536  # characters of one line examined; a longer line is counted as not understood
SNIFF = 65_536  # bytes at the start of a file checked for binary data
FLUSH_ROWS = 1000  # rows of CSV or JSON written at a time
WHAT = "a text log"  # what a log file is expected to be, in errors


class LongLine(str):
    """The start of a line longer than :data:`MAX_LINE` characters (the rest was skipped, never held)."""


def check_text_file(path: str) -> None:
    """Refuse, as a one-line ScenarioError, what is not a readable regular file of text: what
    :func:`sim.formats.inputs.check_file` refuses (a NUL byte in the name, a missing file, a directory, a FIFO or
    device: it could be endless), or a NUL byte or invalid UTF-8 in the first :data:`SNIFF` bytes."""
    from sim.core.errors import ScenarioError
    from sim.formats.inputs import read_head

    head, size = read_head(path, "", WHAT, SNIFF)
    at = head.find(b"\0")
    if at < 0:
        try:
            codecs.getincrementaldecoder("utf-8")().decode(head, final=size <= len(head))
        except UnicodeDecodeError as exc:
            at = exc.start
    if at >= 0:
        raise ScenarioError(shown_path(path), "", f"not a text log (binary data at byte {at:,})")


def _open_text(path: str) -> io.TextIOWrapper:
    """``path`` opened for reading text without blocking (a file swapped for a FIFO since it was checked is
    refused, never waited on; undecodable bytes replaced)."""
    from sim.core.errors import ScenarioError

    check_file(path, "", WHAT)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ScenarioError(shown_path(path), "", f"replaced while being read: expected {WHAT} in a regular file")
        return open(fd, encoding="utf-8", errors="replace", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def file_lines(path: str) -> Iterator[str]:
    """The lines of a text file, read one at a time (as ``str.splitlines`` splits them; undecodable bytes replaced);
    a line longer than :data:`MAX_LINE` characters comes as a :class:`LongLine` of its first 160."""
    from sim.core.errors import ScenarioError

    try:
        with _open_text(path) as fh:
            while chunk := fh.readline(MAX_LINE + 1):
                if len(chunk) > MAX_LINE and not chunk.endswith("\n"):
                    while (rest := fh.readline(MAX_LINE)) and not rest.endswith("\n"):
                        pass  # skipped: only the start is shown
                    yield LongLine(chunk[:160])
                else:
                    yield from chunk.splitlines()
    except OSError as exc:
        raise ScenarioError(shown_path(path), "", f"cannot read: {exc.strerror or exc}") from None


def _indented(value: Any, pad: str) -> str:
    """``value`` as the JSON ``sim.core.output.dumps`` writes, its lines after the first indented by ``pad``."""
    return json.dumps(clean(value), indent=2, allow_nan=False).replace("\n", "\n" + pad)


class JsonRows:
    """Write ``{"rows": [...], "facts": ..., ...}`` exactly as ``dumps`` would, the rows as they come."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.count = 0
        self.buf: list[str] = ['{\n  "rows": [']

    def row(self, row: dict) -> None:
        """Write one row."""
        self.buf.append(("\n    " if self.count == 0 else ",\n    ") + _indented(row, "    "))
        self.count += 1
        if len(self.buf) >= FLUSH_ROWS:
            self.write("".join(self.buf))
            self.buf = []

    def finish(self, rest: dict) -> None:
        """Close the rows and write the other keys of ``rest`` after them."""
        self.buf.append("\n  ]" if self.count else "]")
        for key, value in rest.items():
            self.buf.append(f",\n  {json.dumps(key)}: " + _indented(value, "  "))
        self.buf.append("\n}\n")
        self.write("".join(self.buf))
        self.buf = []


class CsvRows:
    """Write the CSV header, then rows as they come."""

    def __init__(self, write: Callable[[str], None], fields: tuple[str, ...]) -> None:
        self.write = write
        self.out = io.StringIO()
        self.writer = csv.DictWriter(self.out, fieldnames=fields, lineterminator="\n")
        self.writer.writeheader()
        self.pending = 0

    def _flush(self) -> None:
        self.write(self.out.getvalue())
        self.out.seek(0)
        self.out.truncate()
        self.pending = 0

    def row(self, row: dict) -> None:
        """Write one row."""
        self.writer.writerow(row)
        self.pending += 1
        if self.pending >= FLUSH_ROWS:
            self._flush()

    def finish(self) -> None:
        """Write what is left."""
        self._flush()


SUMMARY_KEYS = (("prefill_tok_s", "prefill tok/s", 1), ("decode_tok_s", "decode tok/s", 1), ("ttft_s", "TTFT s", 1),
                ("acceptance", "acceptance %", 100), ("expert_hit_rate", "hit %", 100), ("pcie_share", "pcie %", 100),
                ("generation_throughput_tok_s", "generation tok/s", 1),
                ("prompt_throughput_tok_s", "prompt tok/s", 1))


def summary_lines(t: Any) -> list[str]:
    """The default output of ``sim logs``: counts, medians and ranges per engine, start-up facts, examples of lines
    not understood (``t`` is a :class:`sim.formats.engine_logs.LogTable`)."""
    out = [f"{plural(t.lines, 'line')}: {plural(t.row_count, 'row')}, {plural(len(t.facts), 'start-up fact')}, "
           f"{t.not_understood:,} not understood"
           + (f", {plural(t.incomplete, 'incomplete request summary', 'incomplete request summaries')}"
              if t.incomplete else "")]
    for e in sorted(t.engines):
        (count,), columns = t.engines[e]
        parts = [f"{count:,} {e} {'row' if count == 1 else 'rows'}"]
        for key, label, _ in SUMMARY_KEYS:
            values = sorted(columns[key])
            if values:
                mid = values[len(values) // 2] if len(values) % 2 else (values[len(values) // 2 - 1]
                                                                          + values[len(values) // 2]) / 2
                parts.append(f"{label} median {mid:.4g} ({values[0]:.4g}-{values[-1]:.4g})")
        out.append("  " + "; ".join(parts))
    phases = getattr(t, "phases", None)
    if phases:
        out.append("  vLLM start-up phases: " + ", ".join(f"{k} {n:,}" for k, n in sorted(phases.items())))
    for f in t.facts:
        out.append("  start-up: " + ", ".join(f"{k}={v}" for k, v in f.items() if v is not None))
    for name, number, text, *reason in t.examples:
        why = f" ({reason[0]})" if reason and reason[0] else ""
        out.append(f"  not understood{why}, {name}:{number}: {text}")
    return out
