"""Request traces and lengths tables: CSVs of requests' arrivals and lengths, in the Azure LLM inference trace
layout (``arrived_at, num_prefill_tokens, num_decode_tokens``) or this project's (``arrival_s, prompt_tokens,
cached_tokens, output_tokens, acceptance``), read as :class:`TraceRows`. A lengths table is a trace without arrival
times. How a run serves them is :mod:`sim.serving.workload`'s.

Bounded as every input is: a regular file of at most ``MAX_FILE_BYTES`` bytes and ``MAX_FILE_ROWS`` rows, token
counts whole numbers up to ``MAX_TOKENS`` (prompts) and ``MAX_OUTPUT_TOKENS`` (outputs); a bad cell is one error
naming the file, its line and column.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import numpy as np

from sim.core.errors import ScenarioError
from sim.formats.inputs import read_text

AZURE_COLUMNS = {"arrived_at": "arrival_s", "num_prefill_tokens": "prompt_tokens", "num_decode_tokens": "output_tokens"}
TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
OPTIONAL_COLUMNS = ("cached_tokens", "acceptance")
MAX_TOKENS = 10**8  # a trace's prompt token counts: no request is longer
MAX_OUTPUT_TOKENS = 10**7  # ... and its generated tokens (decoding 1e7 tokens already takes about a minute)
MAX_FILE_ROWS = 10**7  # lines of a trace or lengths table file (the shipped ones: at most 40,000)
MAX_FILE_BYTES = 256 * 2**20  # ... and its size (bytes; the shipped ones: at most 0.9 MB)


@dataclass(frozen=True)
class TraceRows:
    """A trace's requests as the file gives them, in file order: arrival times (s, scaled; None when the file has no
    arrival times: sent one after another), prompt and cached tokens, output tokens as written, draft acceptance
    (NaN where the cell is empty)."""

    arrival_s: np.ndarray | None  # float64
    prompt_tokens: np.ndarray  # int64
    cached_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    acceptance: np.ndarray  # float64


PARSED_TABLES = 16  # tables kept parsed per process (a sweep's points share them; see read_trace_rows)
_parsed: dict[tuple, TraceRows] = {}


def read_trace_rows(path: str, limit: int, time_scale: float = 1.0, key_path: str = "serve.workload.trace",
                    lengths_only: bool = False) -> TraceRows:
    """The first ``limit`` rows of a trace CSV (``lengths_only``: a table of lengths, arrival times not needed), its
    arrival times scaled by ``time_scale``; errors name the file, the column and what was expected.

    A bad cell's key path is ``row N.column``, N being its line in the file (comment and blank lines counted).

    Parsed once per process and file content: the text is read (and checked) every time, and a table whose bytes,
    limit, scale and kind were parsed before is that parse again (its arrays read-only), so the points of a sweep
    (each worker) pay for the parse once, never for a file changed since. At most :data:`PARSED_TABLES` are kept.
    """
    import hashlib

    text = _read_table_text(path, key_path)
    key = (hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest(), limit, time_scale, lengths_only)
    if key not in _parsed:
        rows = _parse_trace_rows(text, path, limit, time_scale, key_path, lengths_only)
        for array in (rows.arrival_s, rows.prompt_tokens, rows.cached_tokens, rows.output_tokens, rows.acceptance):
            if array is not None:
                array.setflags(write=False)
        if len(_parsed) >= PARSED_TABLES:
            _parsed.pop(next(iter(_parsed)))
        _parsed[key] = rows
    return _parsed[key]


def _parse_trace_rows(text: str, path: str, limit: int, time_scale: float, key_path: str,
                      lengths_only: bool) -> TraceRows:
    """:func:`read_trace_rows` of a table's text, parsed."""
    df = _plain_numeric_csv(text, limit) or _pandas_csv(text, path, key_path)
    lines: list[list[int]] = []  # the data rows' line numbers, found only when an error names a row
    total = len(df)

    def line_of(row: int) -> int:
        if not lines:
            lines.append(_data_lines(text, total))
        return lines[0][row] if row < len(lines[0]) else row + 2

    if df.index_columns:  # pandas took the extra leading fields of the rows as an index
        raise ScenarioError(path, f"row {line_of(0)}", "no more fields than the header has columns")
    names = [str(c).strip() for c in df.columns]
    shown = {ours: azure for azure, ours in AZURE_COLUMNS.items() if azure in names}  # errors name the file's columns
    if shown:  # the Azure layout: its missing columns are named as it names them
        shown.update({ours: azure for azure, ours in AZURE_COLUMNS.items() if ours not in names})
    df.columns = [AZURE_COLUMNS.get(c, c) for c in names]
    for name in (*TRACE_COLUMNS, *OPTIONAL_COLUMNS):
        if list(df.columns).count(name) > 1:
            raise ScenarioError(path, shown.get(name, name), "a single column (the Azure and this project's names "
                                "of a column count as the same column)")
    missing = [c for c in TRACE_COLUMNS if c not in df.columns and (c != "arrival_s" or (shown and not lengths_only))]
    if missing:
        raise ScenarioError(path, shown.get(missing[0], missing[0]), "a column of the trace (arrived_at, "
                            "num_prefill_tokens, num_decode_tokens, or arrival_s, prompt_tokens, output_tokens)")
    df = df.head(max(limit, 0))
    if not len(df):
        raise ScenarioError(path, key_path, "no requests in the trace")

    def key(row: int, name: str) -> str:
        return f"row {line_of(row)}.{shown.get(name, name)}"

    cols: dict[str, np.ndarray] = {}
    for name in (*TRACE_COLUMNS, *OPTIONAL_COLUMNS):
        if name not in df.columns:
            continue
        values = df.numbers(name)
        with np.errstate(invalid="ignore"):
            if name == "acceptance":  # an empty cell: the model's acceptance
                ok = df.empty_cells(name) | ((values >= 0) & (values <= 1))
                expected = "a fraction in [0, 1]"
            elif name == "arrival_s":
                ok = np.isfinite(values) & (values >= 0)
                expected = "a non-negative number of seconds"
            else:
                top = MAX_OUTPUT_TOKENS if name == "output_tokens" else MAX_TOKENS
                ok = np.isfinite(values) & (values >= 0) & (values <= top) & (values == np.floor(values))
                expected = f"a whole number of tokens from 0 to {top:.0e}".replace("e+0", "e")
        if not ok.all():
            row = int(np.flatnonzero(~ok)[0])
            raise ScenarioError(path, key(row, name), f"{_cell(df.cell(name, row))}: expected {expected}")
        cols[name] = values.astype(np.int64) if name.endswith("_tokens") else values
    n = len(df)
    if "arrival_s" not in cols:  # no arrival times: replayed one after another by a single client
        cols["arrival_s"] = np.zeros(n)
        sequential = True
    else:
        sequential = False
    with np.errstate(over="ignore"):
        arrival = cols["arrival_s"] * time_scale
    if not np.isfinite(arrival).all():
        row = int(np.flatnonzero(~np.isfinite(arrival))[0])
        raise ScenarioError(path, key(row, "arrival_s"), f"a time that stays finite when scaled by "
                            f"serve.workload.time_scale ({time_scale:g})")
    if np.any(np.diff(arrival) < 0):
        row = int(np.flatnonzero(np.diff(arrival) < 0)[0]) + 1
        raise ScenarioError(path, key(row, "arrival_s"), "arrival times in non-decreasing order")
    cached = cols.get("cached_tokens", np.zeros(n, dtype=np.int64))
    prompt = cols["prompt_tokens"]
    if np.any(cached > prompt):
        row = int(np.flatnonzero(cached > prompt)[0])
        raise ScenarioError(path, key(row, "cached_tokens"), f"at most {shown.get('prompt_tokens', 'prompt_tokens')}")
    return TraceRows(None if sequential else arrival, prompt, cached, cols["output_tokens"],
                     cols.get("acceptance", np.full(n, np.nan)))


def _read_table_text(path: str, key_path: str) -> str:
    """The text of a trace or lengths table, read through the one input layer (:func:`sim.formats.inputs.read_text`: a
    regular file, not a device or a pipe, which may never end; at most ``MAX_FILE_BYTES`` bytes; UTF-8 without NUL
    bytes, a leading BOM dropped), of at most ``MAX_FILE_ROWS`` rows after the header (ScenarioError otherwise)."""
    text = read_text(path, key_path, "a CSV file", max_bytes=MAX_FILE_BYTES, max_lines=None)
    breaks = text.count("\n") + text.count("\r") - text.count("\r\n")  # line ends as _data_lines splits them
    if breaks > MAX_FILE_ROWS + 1:
        raise ScenarioError(path, key_path, f"more than {MAX_FILE_ROWS:,} rows: expected at most {MAX_FILE_ROWS:,} "
                            "lines after the header")
    return text


class _Cells:
    """A trace's cells by column (text as written, None for an empty cell), the first rows only once cut."""

    def __init__(self, columns: list[str], cells: list[list], rows: int, index_columns: bool = False,
                 plain: bool = False, numbers: list[np.ndarray] | None = None) -> None:
        self.columns, self.cells, self.rows = columns, cells, rows
        self._numbers = numbers  # a plain table's columns as floats, read once
        self.index_columns = index_columns  # the rows had more fields than the header (pandas made them an index)
        self.plain = plain  # every cell is a plain number (no empty or odd cells)

    def __len__(self) -> int:
        return self.rows

    def head(self, n: int) -> _Cells:
        return _Cells(self.columns, [c[:n] for c in self.cells], min(n, self.rows), self.index_columns, self.plain,
                      None if self._numbers is None else [v[:n] for v in self._numbers])

    def column(self, name: str) -> list:
        return self.cells[self.columns.index(name)]

    def numbers(self, name: str) -> np.ndarray:
        """The column as floats, NaN where a cell is empty or not a number."""
        if self.plain:
            if self._numbers is not None:
                return self._numbers[self.columns.index(name)].copy()
            return np.array(self.column(name), dtype=float)
        import pandas as pd

        return pd.to_numeric(pd.Series(self.column(name), dtype=object), errors="coerce").to_numpy(dtype=float)

    def empty_cells(self, name: str) -> np.ndarray:
        return np.array([c is None for c in self.column(name)], dtype=bool)

    def cell(self, name: str, row: int):
        return self.column(name)[row]


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# one way only to match a number (no nested repetition to backtrack through); ASCII digits, as pandas reads them
_PLAIN_NUMBER = r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_PLAIN_CHARS = re.compile(r"[0-9.,eE+\-\n]*")  # the characters plain numbers, commas and line ends are made of
_STRAY_PLUS = re.compile(r"(?<![eE])\+")  # a '+' anywhere but in an exponent


def _plain_numeric_csv(text: str, limit: int) -> _Cells | None:
    """The cells of a plain CSV without pandas (a header of distinct plain names, rows of plain numbers, the same
    number of fields everywhere, no quotes, no comments after data): the shipped traces. None for anything else,
    which pandas reads (its parsing and errors apply)."""
    lines = [line for line in re.split(r"\r\n|\r|\n", text) if line and line[0] != "#"]
    if not lines or '"' in text or "#" in text.partition("\n")[2].replace("\n#", ""):
        return None
    header = lines[0].split(",")
    if len(set(header)) != len(header) or not all(_PLAIN_NAME.fullmatch(h) for h in header):
        return None
    data = lines[1:]
    fields = len(header) - 1
    if any(line.count(",") != fields for line in data):
        return None
    first = data[:max(limit, 0)]
    block = "\n".join(first)
    flat = block.replace("\n", ",").split(",") if first else []  # the cells, row after row
    # plain numbers only: ASCII digits, '.', a sign before a number or its exponent, e/E; then each cell read as a
    # float (what the plain number grammar, _PLAIN_NUMBER, admits and nothing else: a bad cell fails to convert)
    if first and (not _PLAIN_CHARS.fullmatch(block) or ("+" in block and _STRAY_PLUS.search(block))):
        return None
    try:
        values = np.array(flat, dtype=float)
    except ValueError:
        return None
    width = fields + 1
    columns = [flat[j::width] for j in range(width)] if first else [[] for _ in header]
    numbers = [values[j::width] for j in range(width)] if first else [np.zeros(0) for _ in header]
    return _Cells(header, columns, len(data), plain=True, numbers=numbers)


def _pandas_csv(text: str, path: str, key_path: str) -> _Cells:
    import pandas as pd  # here, not at the top: a plain trace, or a run without one, does not pay for pandas

    try:
        df = pd.read_csv(io.StringIO(text), comment="#", dtype=str)  # text cells: errors quote them as written
    except ValueError as exc:  # ParserError, EmptyDataError
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ScenarioError(path, key_path, f"not a readable CSV ({first})") from None
    cells = [[v if isinstance(v, str) else None for v in df.iloc[:, j].tolist()] for j in range(df.shape[1])]
    return _Cells([str(c) for c in df.columns], cells, len(df), not isinstance(df.index, pd.RangeIndex))


def _data_lines(text: str, rows: int) -> list[int]:
    """Line numbers (from 1) of the ``rows`` data rows of a CSV, skipping blank and comment lines as pandas does; a
    header on line 1 and one line per row when the text does not map line for line (quoted line breaks)."""
    lines = [i + 1 for i, line in enumerate(re.split(r"\r\n|\r|\n", text)) if line.strip() and line[0] != "#"]
    return lines[1:] if len(lines) == rows + 1 else list(range(2, rows + 2))


def _cell(value: object) -> str:
    """A trace cell as written, shortened, for an error message."""
    if not isinstance(value, str):
        return "an empty cell"
    text = repr(value[:41])  # no more than is shown
    return "bad value " + (text if len(text) <= 40 else text[:37] + "...")
