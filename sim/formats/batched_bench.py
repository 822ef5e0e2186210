"""Read what ``llama-batched-bench`` (llama.cpp's ``tools/batched-bench``) prints into one record per row: its
markdown table ``| PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |`` (columns found by
name, more columns kept in ``extra``; a row whose header was cut off is read by place), the
``main: n_kv_max = ..., n_batch = ..., n_ubatch = ..., flash_attn = ..., is_pp_shared = ..., n_gpu_layers = ...,
n_threads = ..., n_threads_batch = ...`` line before it (newer builds add ``is_tg_separate``), and its
``--output-format jsonl`` lines (``{"n_kv_max": ..., "pp": ..., "pl": ..., "speed": ...}``), which carry the
settings themselves.

A row is checked the way the tool computes it, within the rounding of what it prints (``%8.3f`` times, ``%8.2f``
speeds; ``%f`` in jsonl): ``N_KV`` is ``B*(PP+TG)``, or ``PP+B*TG`` with ``-pps`` (newer builds without
``-kvu`` count ``B*(PP+TG)`` there too); at most the header's ``n_kv_max`` (the tool skips larger tests);
``T = T_PP + T_TG``; ``S_PP = B*PP / T_PP`` (``PP / T_PP`` with ``-pps``), ``S_TG = B*TG / T_TG``, ``S = N_KV / T``
(newer builds: the tokens processed over ``T``). A speed of no tokens (``-ntg 0``) may be ``nan``. Negative,
non-finite or inconsistent values, and values outside their range (:mod:`sim.formats.bench_ranges`: 1e300 t/s over a
printed 0.000 s agrees with its time), make the line ``bad`` with a reason; it never becomes a record. Every non-blank
line goes to one place: a record (or a header or separator), ``skipped`` or ``bad``. Nothing raises on any text but
:class:`ScenarioError` for an input over ``MAX_BYTES`` or ``MAX_LINES``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from sim.core.errors import ScenarioError
from sim.formats.bench_ranges import BATCHED_NAMES, BATCHED_RANGES, out_of_range
from sim.formats.llama_bench import MAX_BYTES, MAX_LINES, BadLine, cut_reason

COLUMNS = ("pp", "tg", "b", "n_kv", "t_pp s", "s_pp t/s", "t_tg s", "s_tg t/s", "t s", "s t/s")  # header, lower case
JSON_KEYS = ("pp", "tg", "pl", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg", "t", "speed")
HEADER_KEYS = ("n_kv_max", "n_batch", "n_ubatch", "flash_attn", "is_pp_shared", "is_tg_separate", "n_gpu_layers",
               "n_threads", "n_threads_batch")  # what the main: line (or a jsonl line) tells of the run
TABLE_PLACES = (3, 2)  # decimals of times and of speeds in the table
JSON_PLACES = (6, 6)  # in jsonl (%f)
INT_MAX = 2**31 - 1  # the tool prints int32 values

_NUM = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_INT = re.compile(r"[+-]?[0-9]{1,12}")
_CELL = re.compile(rf"{_NUM}|[+-]?nan|[+-]?inf", re.IGNORECASE)
_SETTING = re.compile(r"(\w{1,40})\s*=\s*(-?[0-9]{1,12})\b")
_NAN_JSON = re.compile(r"(:\s*)([+-]?)(nan|inf)\b", re.IGNORECASE)  # printf's nan / -nan / inf are not JSON
_PROGRAM = re.compile(r"(?:^|[\s/\\])(?:llama-bench|llama-sweep-bench|sweep-bench|llama-server|llama-cli|"
                      r"llama-batched-bench|batched-bench)(?:\.exe)?(?:\s|$)")
_LOAD = ("llm_load_tensors", "load_tensors:", "llama_model_load", "llama_model_loader")  # a new run's model loading
_FA = {1: True, 0: False, -1: "auto"}


@dataclass(slots=True)
class BatchedRecord:
    """One row: ``b`` sequences (the table's B, jsonl's pl) of ``pp`` prompt tokens (processed once with
    ``-pps``) then ``tg`` generated tokens each, ``n_kv`` KV cells used; times in s, speeds in tok/s (``None``: no
    tokens, printed nan); the header's settings (``None``: not given; ``is_pp_shared`` without a header as the
    numbers of a row with B > 1 tell); ``extra`` other columns, as text."""

    line: int  # 1-based line number of the row
    format: str  # batched-bench (the table) or batched-bench-jsonl
    pp: int
    tg: int
    b: int
    n_kv: int
    t_pp_s: float
    s_pp_tok_s: float | None
    t_tg_s: float
    s_tg_tok_s: float | None
    t_s: float
    s_tok_s: float | None
    n_kv_max: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    flash_attn: bool | str | None = None  # True, False or "auto" (printed 1, 0, -1)
    is_pp_shared: bool | None = None
    is_tg_separate: bool | None = None
    n_gpu_layers: int | None = None
    n_threads: int | None = None
    n_threads_batch: int | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class BatchedRuns:
    """The rows read from one text and where every other line went; ``format`` is the records' one format,
    ``mixed`` for both, ``none`` for no record."""

    source: str
    format: str
    records: list[BatchedRecord] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # 1-based line numbers
    bad: list[BadLine] = field(default_factory=list)


class _Bad(Exception):
    """A value that cannot be read or does not add up; its message is the bad line's reason."""


def _int(value: Any, name: str, low: int) -> int:
    """``value`` (a cell or a JSON value) as an int from ``low`` to int32's largest; else :class:`_Bad`."""
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{name} is not an integer: {cut_reason(repr(value))}")
    if not low <= value <= INT_MAX:
        raise _Bad(f"{name} is {'below ' + str(low) if value < low else 'out of range'}: {cut_reason(str(value))}")
    return value


def _number(value: Any, name: str) -> float:
    """``value`` as a float (nan and inf allowed: the caller decides); else :class:`_Bad`."""
    if isinstance(value, str) and _CELL.fullmatch(value.strip()):
        return float(value.strip())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or abs(value) > 1e300:
        raise _Bad(f"{name} is not a number: {cut_reason(repr(value))}")
    return float(value)


def _time(value: Any, name: str) -> float:
    seconds = _number(value, name)
    if not math.isfinite(seconds) or seconds < 0:
        raise _Bad(f"{name} is not a finite non-negative time: {cut_reason(repr(value))}")
    return seconds


def _in_range(values: dict[str, Any]) -> None:
    """:class:`_Bad` when one of ``values`` (record fields) is outside its range (:data:`BATCHED_RANGES`)."""
    why = out_of_range(values, BATCHED_RANGES, BATCHED_NAMES)
    if why:
        raise _Bad(why)


def _speed(value: Any, key: str, tokens: dict[int, str], seconds: float, time_name: str,
           places: tuple[int, int]) -> tuple[float | None, list[int]]:
    """(the speed, the token counts it may be of): those of ``tokens`` (count -> how it is reckoned) that the speed
    ``value`` (of the record field ``key``) equals over ``seconds``, within the rounding of both printed numbers;
    :class:`_Bad` when none does or it is outside its range."""
    name = BATCHED_NAMES[key]
    rate = _number(value, name)
    if math.isfinite(rate) and rate >= 0:
        _in_range({key: rate})
    half_t, half_s = 0.5 * 10 ** -places[0], 0.5 * 10 ** -places[1]
    matched = []
    for count in tokens:
        if count == 0:
            if math.isnan(rate) or 0 <= rate <= half_s:  # 0 / 0 prints nan, 0 / t prints 0.00
                matched.append(count)
            continue
        if not math.isfinite(rate) or rate < 0:
            continue
        low = count / (seconds + half_t)
        high = count / (seconds - half_t) if seconds > half_t else math.inf
        slack = half_s + 1e-6 * rate  # the tool's float32 arithmetic
        if low - slack <= rate <= high + slack:
            matched.append(count)
    if matched:
        return (None if math.isnan(rate) else rate), matched
    if not math.isfinite(rate) or rate < 0:
        raise _Bad(f"{name} is not a finite non-negative speed: {cut_reason(repr(value))}")
    count, how = next(iter(tokens.items()))
    expected = count / seconds if seconds > 0 else math.inf
    raise _Bad(f"{name} {rate:g} is not {how} / {time_name} = {expected:.2f}")


def batched_row(cells: tuple, line: int, fmt: str, context: dict[str, Any], extra: dict[str, str] | None = None,
                places: tuple[int, int] = TABLE_PLACES) -> BatchedRecord:
    """The record of one row's ten values (PP, TG, B, N_KV, T_PP, S_PP, T_TG, S_TG, T, S), checked against each
    other and the run's ``context`` (the header's settings); :class:`_Bad` when they do not add up."""
    pp, tg, b, n_kv = (_int(v, name, low) for v, name, low in zip(cells[:4], ("PP", "TG", "B", "N_KV"), (0, 0, 1, 0),
                                                                   strict=True))
    t_pp, t_tg, t = _time(cells[4], "T_PP s"), _time(cells[6], "T_TG s"), _time(cells[8], "T s")
    _in_range({"pp": pp, "tg": tg, "n_kv": n_kv, "t_pp_s": t_pp, "t_tg_s": t_tg, "t_s": t})
    shared = context.get("is_pp_shared")
    apart, together = b * (pp + tg), pp + b * tg
    if n_kv != apart and (shared is False or n_kv != together):
        raise _Bad(f"N_KV {n_kv} is not B*(PP+TG) = {apart}" + (f" nor PP+B*TG = {together} (-pps)"
                                                                 if shared is not False else ""))
    if context.get("n_kv_max") is not None and n_kv > context["n_kv_max"]:
        raise _Bad(f"N_KV {n_kv} is above n_kv_max = {context['n_kv_max']} (the tool skips such a test)")
    slack = 3 * 0.5 * 10 ** -places[0] + 1e-6 * t
    if abs(t - (t_pp + t_tg)) > slack:
        raise _Bad(f"T s {t:g} is not T_PP s + T_TG s = {t_pp + t_tg:.{places[0]}f}")
    prompts = {b * pp: "B*PP", pp: "PP (-pps)"} if shared is None else {pp: "PP (-pps)"} if shared else {b * pp: "B*PP"}
    if n_kv == together != apart:  # only a shared prompt is counted once
        prompts = {pp: "PP (-pps)"}
    s_pp, prompt = _speed(cells[5], "s_pp_tok_s", prompts, t_pp, "T_PP s", places)
    s_tg, _ = _speed(cells[7], "s_tg_tok_s", {b * tg: "B*TG"}, t_tg, "T_TG s", places)
    totals = {n_kv: "N_KV"} | {p + b * tg: "the tokens processed" for p in prompt}
    s, total = _speed(cells[9], "s_tok_s", totals, t, "T s", places)
    prompt = [p for p in prompt if n_kv in total or p + b * tg in total]  # the reckonings S agrees with
    fields = {key: context[key] for key in HEADER_KEYS if context.get(key) is not None}
    if shared is None and pp and b > 1 and len(prompt) == 1:
        fields["is_pp_shared"] = prompt[0] == pp  # no header: the row's numbers tell
    return BatchedRecord(line, fmt, pp, tg, b, n_kv, t_pp, s_pp, t_tg, s_tg, t, s, extra=dict(extra or {}), **fields)


def header_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The run's settings from the main: line's or a jsonl line's ``KEY = integer`` pairs: counts as ints,
    flash_attn as True / False / "auto", is_pp_shared and is_tg_separate as booleans."""
    out: dict[str, Any] = {}
    for key in HEADER_KEYS:
        value = values.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > INT_MAX:
            continue
        if key == "flash_attn":
            out[key] = _FA.get(value)
        elif key in ("is_pp_shared", "is_tg_separate"):
            out[key] = {0: False, 1: True}.get(value)
        else:
            out[key] = value
    return out


def _json_number(match: re.Match) -> str:
    """printf's ``nan``, ``-nan``, ``inf`` or ``-inf`` after a key, as Python's JSON reads them."""
    if match[3].lower() == "nan":
        return match[1] + "NaN"
    return match[1] + ("-" if match[2] == "-" else "") + "Infinity"


class _Reader:
    """One pass over the lines; state: the table header and the run's settings in force."""

    def __init__(self, lines: list[str], source: str):
        self.lines, self.runs = lines, BatchedRuns(source=source, format="none")
        self.names: list[str] | None = None  # the header of the table in force, lower case
        self.context: dict[str, Any] = {}

    def add(self, index: int, make: Any, *args: Any) -> None:
        """Keep the record ``make(*args)`` gives; a :class:`_Bad` makes line ``index`` bad."""
        try:
            self.runs.records.append(make(*args))
        except _Bad as exc:
            self.runs.bad.append(BadLine(index + 1, cut_reason(str(exc))))

    def line(self, index: int) -> None:
        text = self.lines[index].strip()
        while text.startswith(">"):  # a quoted paste
            text = text[1:].strip()
        if not text:
            self.names = None
        elif text[0] == "|":
            self.pipe_row(index, text)
        elif text[0] == "{" and '"pl"' in text and len(text) < 10_000:
            self.json_line(index, text)
        else:
            self.other(index, text)

    def other(self, index: int, text: str) -> None:
        """A line that is no row: skipped; the main: line sets the run's settings (bad when one is outside its
        range: the run's rows are then read without them), a new run ends them."""
        if text.startswith("main:") and "n_kv_max" in text and len(text) < 2000:
            self.names = None
            self.context = header_settings({k: int(v) for k, v in _SETTING.findall(text)})
            why = out_of_range(self.context, BATCHED_RANGES, {})
            if why:
                self.context = {}
                self.runs.bad.append(BadLine(index + 1, cut_reason(why)))
                return
        elif text.startswith(("#", "```", *_LOAD)) or _PROGRAM.search(text):
            self.names, self.context = None, {}
        self.runs.skipped.append(index + 1)

    def pipe_row(self, index: int, text: str) -> None:
        body = text[1:-1] if text.endswith("|") and len(text) > 1 else text[1:]
        cells = [cell.strip() for cell in body.split("|")]
        if not text.strip("|-: "):
            return  # a header's separator
        names = [cell.strip("*` ").lower() for cell in cells]
        if all(column in names for column in COLUMNS):
            self.names = names
            return
        numeric = all(_CELL.fullmatch(cell) for cell in cells)
        if self.names is not None and len(cells) == len(self.names):
            values = dict(zip(self.names, cells, strict=True))
            extra = {name: values[name] for name in self.names if name not in COLUMNS}
            self.add(index, batched_row, tuple(values[name] for name in COLUMNS), index + 1, "batched-bench",
                     self.context, extra)
        elif self.names is not None and numeric:
            self.runs.bad.append(BadLine(index + 1, f"{len(cells)} cells under a header of {len(self.names)}"))
            self.names = None
        elif len(cells) == len(COLUMNS) and numeric:  # a row whose header was not copied
            self.names = None
            self.add(index, batched_row, tuple(cells), index + 1, "batched-bench", self.context)
        else:
            self.names = None  # a row of another table
            self.runs.skipped.append(index + 1)

    def json_line(self, index: int, text: str) -> None:
        """One line of ``--output-format jsonl``: its settings and its row."""
        try:
            item = json.loads(_NAN_JSON.sub(_json_number, text))
        except (ValueError, RecursionError) as exc:
            self.runs.bad.append(BadLine(index + 1, cut_reason(f"unreadable JSON: {exc}")))
            return
        if not isinstance(item, dict) or not {"speed_tg", "t_tg"} & set(item):
            self.runs.skipped.append(index + 1)
            return
        missing = [key for key in JSON_KEYS if key not in item]
        if missing:
            self.runs.bad.append(BadLine(index + 1, f"batched-bench record without {', '.join(missing)}"))
            return
        extra = {key: str(value) for key, value in item.items() if key not in JSON_KEYS and key not in HEADER_KEYS}
        settings = header_settings(item)
        why = out_of_range(settings, BATCHED_RANGES, {})
        if why:
            self.runs.bad.append(BadLine(index + 1, cut_reason(why)))
            return
        self.add(index, batched_row, tuple(item[key] for key in JSON_KEYS), index + 1, "batched-bench-jsonl",
                 settings, extra, JSON_PLACES)


def read_batched_output(text: str, source: str) -> BatchedRuns:
    """The llama-batched-bench rows in ``text`` (``source`` names it in errors); see the module's docstring. Raises
    :class:`ScenarioError` for an input of more than ``MAX_BYTES`` bytes or ``MAX_LINES`` lines, and nothing else."""
    if not isinstance(text, str):
        raise ScenarioError(source, "", "expected llama-batched-bench output as text")
    if len(text) > MAX_BYTES or (len(text) * 4 > MAX_BYTES and len(text.encode("utf-8", "replace")) > MAX_BYTES):
        raise ScenarioError(source, "", f"expected at most {MAX_BYTES // 1_000_000} MB of llama-batched-bench output")
    lines = text.split("\n")
    if len(lines) > MAX_LINES:
        raise ScenarioError(source, "", f"expected at most {MAX_LINES} lines of llama-batched-bench output, got "
                            f"{len(lines)}")
    reader = _Reader([line.rstrip("\r") for line in lines], source)
    for index in range(len(lines)):
        reader.line(index)
    formats = {record.format for record in reader.runs.records}
    reader.runs.format = formats.pop() if len(formats) == 1 else ("mixed" if formats else "none")
    return reader.runs
