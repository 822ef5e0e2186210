"""Read what llama-bench and ik_llama.cpp's llama-sweep-bench print into one record per measured test, in any output
format (found from the text, which may mix them with log lines): llama-bench ``-o md`` (``| model | size | params |
backend | ngl | ... | test | t/s |``, also rows whose header was cut off: size, count, backend, model and ngl are known
by form and place), ``-o csv | json | jsonl | sql`` (the fields of llama-bench's ``test::get_fields()``, older and
ik_llama.cpp sets included), llama-sweep-bench's ``| PP | TG | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s |`` (a pp
and a tg record per row; the ``main: n_kv_max = ...`` line before it gives batch sizes, threads, ngl, fa) and its
``--output-format jsonl``. Every non-blank line goes to one place: a record (or a header, separator or JSON bracket),
``skipped`` (log lines, build info, other tables: llama-batched-bench's is read by :mod:`sim.formats.batched_bench`)
or ``bad`` with a reason (a row of a table's shape whose values cannot be read, or are outside their range:
:mod:`sim.formats.bench_ranges`). Nothing raises on any text but :class:`ScenarioError` for an input over
``MAX_BYTES`` or ``MAX_LINES``.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from sim.core.errors import ScenarioError
from sim.formats.bench_ranges import FIELD_NAMES, MD_NAMES, SWEEP_NAMES, checked
from sim.formats.bench_ranges import Bad as _Bad  # a value that cannot be read: its message is the bad line's reason

MAX_BYTES = 50_000_000  # largest input read (bytes of UTF-8)
MAX_LINES = 1_000_000  # most lines read
MAX_REASON_CHARS = 200  # a bad line's reason, at most (characters)


@dataclass(slots=True)
class BenchRecord:
    """One test: ``n_prompt`` prompt tokens processed and / or ``n_gen`` generated after ``n_depth`` in the KV cache, at
    ``avg_ts`` ± ``stddev_ts`` tokens per second (``None``: not given); other fields ``None`` when not given;
    ``seconds`` one repetition's time (T_PP / T_TG, avg_ns); ``extra`` other columns or fields, as text."""

    line: int  # 1-based line number of the row (of the first line of a JSON object)
    format: str  # md, csv, json, jsonl, sql, sweep-bench, sweep-bench-jsonl
    test: str  # llama-bench's label: pp512, tg128, pp512+tg128, "pp512 @ d4096" (ik_llama.cpp: tg128@pp4096)
    n_prompt: int
    n_gen: int
    n_depth: int
    avg_ts: float
    stddev_ts: float | None = None
    n_gpu_layers: int | None = None
    n_cpu_moe: int | None = None
    n_ubatch: int | None = None
    n_batch: int | None = None
    n_threads: int | None = None
    type_k: str | None = None
    type_v: str | None = None
    flash_attn: bool | str | None = None  # True, False or "auto"
    model_type: str | None = None
    model_size_bytes: int | None = None
    model_n_params: int | None = None
    backend: str | None = None
    tensor_buft_overrides: str | None = None  # as printed: "exps=CPU", "a=CPU;b=CUDA0", "none"
    use_mmap: bool | None = None
    seconds: float | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class BadLine:
    """A line of a table's or record's shape whose values could not be read."""

    line: int
    reason: str


@dataclass
class BenchRuns:
    """The records read from one text and where every other line went; ``format`` is the records' one format,
    ``mixed`` for several, ``none`` for no record."""

    source: str
    format: str
    records: list[BenchRecord] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # 1-based line numbers
    bad: list[BadLine] = field(default_factory=list)


_NUM = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"  # unambiguous: no backtracking
_INT = re.compile(r"[+-]?[0-9]{1,18}")
_FLOAT = re.compile(_NUM)
_TS = re.compile(rf"({_NUM}|nan|-?inf)\s*(?:±|\+-|\+/-)\s*({_NUM}|nan|-?inf)", re.IGNORECASE)
_TEST = re.compile(r"(?:pp([0-9]{1,9}))?(\+)?(?:tg([0-9]{1,9}))?(?:\s*@\s*d([0-9]{1,9}))?")
_TEST_GP = re.compile(r"tg([0-9]{1,9})\s*@\s*pp([0-9]{1,9})")
_SIZE = re.compile(rf"({_NUM})\s*(TiB|GiB|MiB|KiB|TB|GB|MB|KB)")
_PARAMS = re.compile(rf"({_NUM})\s*([KMBT])")
_SWEEP_NUM = re.compile(rf"{_NUM}|-?nan|-?inf", re.IGNORECASE)
_BUILD = re.compile(r"build:\s*([0-9a-fA-F]+)\s*\(([0-9]+)\)")
_COMMAND = re.compile(r"(?:^|[\s/\\])(?:llama-bench|llama-sweep-bench|sweep-bench|llama-server|llama-cli|"
                      r"llama-batched-bench)(?:\.exe)?(?:\s|$)")
_JSON_START = re.compile(r"\{|\[\s*(?:\{|$)")
_SQL_COLUMN = re.compile(r"\w+\s+(?:TEXT|INTEGER|REAL)\s*,?", re.IGNORECASE)
_INSERT = re.compile(r"INSERT INTO\s+\w+\s*\(([^)]*)\)\s*VALUES\s*\((.*)\)\s*;?", re.IGNORECASE)
_LOAD = ("llm_load_tensors", "load_tensors:", "llama_model_load", "llama_model_loader", "llm_load_print_meta",
         "print_info:", "llama_new_context", "llama_context:", "system_info:")  # a new run's model loading
_SIZE_UNITS = {"TiB": 2**40, "GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "TB": 1e12, "GB": 1e9, "MB": 1e6, "KB": 1e3}
_PARAM_UNITS = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
_BACKENDS = {"cpu", "cuda", "metal", "vulkan", "sycl", "rocm", "hip", "musa", "cann", "blas", "gpu blas", "rpc",
             "opencl", "kompute", "zendnn", "webgpu", "zdnn", "hexagon", "blis", "amx"}
_CPU_BACKENDS = {"cpu", "blas", "zendnn"}  # with one of these llama-bench prints threads, not ngl, after the backend
_SWEEP_COLUMNS = ("pp", "tg", "n_kv", "t_pp s", "s_pp t/s", "t_tg s", "s_tg t/s")
_SWEEP_JSON = ("pp", "tg", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg")
_SWEEP_EXTRA = {"rss hwm": "rss_hwm_mib", "vram delta": "vram_delta_mib"}  # sweep-bench --sweep-memory, MiB
# markdown column names (llama-bench's display names, older and ik_llama.cpp ones) and csv / json / sql fields ->
# record fields
_MD_COLUMNS = {"model": "model_type", "size": "model_size_bytes", "params": "model_n_params", "backend": "backend",
               "ngl": "n_gpu_layers", "ncmoe": "n_cpu_moe", "threads": "n_threads", "fa": "flash_attn",
               "mmap": "use_mmap", "ot": "tensor_buft_overrides", "lm": "load_mode"}
_FIELDS = {"model_size": "model_size_bytes", "backends": "backend", "override_tensor": "tensor_buft_overrides"}
_INT_FIELDS = {"n_gpu_layers", "n_cpu_moe", "n_ubatch", "n_batch", "n_threads", "model_size_bytes", "model_n_params"}
_STR_FIELDS = {"type_k", "type_v", "model_type", "backend", "tensor_buft_overrides"}
for _name in (*_INT_FIELDS, *_STR_FIELDS, "flash_attn", "use_mmap", "load_mode"):
    _MD_COLUMNS.setdefault(_name, _name)
    _FIELDS.setdefault(_name, _name)
_FIELDS.pop("model_size_bytes")
_IK_BACKENDS = (("cuda", "CUDA"), ("vulkan", "Vulkan"), ("metal", "Metal"), ("sycl", "SYCL"),
                ("gpu_blas", "GPU BLAS"), ("blas", "BLAS"))  # older and ik_llama.cpp builds: one flag per backend
_BENCH_KEYS = {"avg_ts", "n_prompt", "n_gen", "stddev_ts", "avg_ns", "model_type", "build_commit"}
_SWEEP_KEYS = {"speed_pp", "speed_tg", "t_pp", "t_tg"}
_WORDS = {"1": True, "true": True, "yes": True, "on": True, "enabled": True, "0": False, "false": False, "no": False,
          "off": False, "disabled": False, "-1": "auto", "auto": "auto"}  # llama-bench prints fa -1 for auto
_LOAD_MMAP = {"mmap": True, "mmap+mlock": True, "auto": True, "none": False, "mlock": False, "dio": False}


def label_for(n_prompt: int, n_gen: int, n_depth: int) -> str:
    """llama-bench's name for a test: ``pp512``, ``tg128``, ``pp512+tg128``, with `` @ d4096`` at a depth."""
    label = f"pp{n_prompt}" if not n_gen else f"tg{n_gen}" if not n_prompt else f"pp{n_prompt}+tg{n_gen}"
    return label + (f" @ d{n_depth}" if n_depth > 0 else "")


def parse_label(label: str) -> tuple[int, int, int] | None:
    """(n_prompt, n_gen, n_depth) of a test label, or None. ik_llama.cpp's ``tg128@pp4096`` generates 128 tokens
    after a 4096-token prompt (its t/s counts the generated tokens only): depth 4096."""
    gp = _TEST_GP.fullmatch(label.strip())
    if gp:
        return 0, int(gp[1]), int(gp[2])
    match = _TEST.fullmatch(label.strip())
    if not match or not (match[1] or match[3]) or bool(match[2]) != bool(match[1] and match[3]):
        return None
    return int(match[1] or 0), int(match[3] or 0), int(match[4] or 0)


def cut_reason(text: str) -> str:  # a bad line's reason, at most MAX_REASON_CHARS
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 3] + "..."


def _clean(cell: str) -> str:
    return cell.strip().strip("*`").strip()


def _int(value: Any, name: str, low: int | None = None) -> int:
    """``value`` (text or JSON) as an int of at least ``low``; else :class:`_Bad`."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and _INT.fullmatch(value.strip()):
        value = int(value.strip())
    if not isinstance(value, int):
        raise _Bad(f"{name} is not an integer: {cut_reason(repr(value))}")
    if abs(value) >= 2**62 or (low is not None and value < low):
        raise _Bad(f"{name} is {'negative' if value < 0 else 'out of range'}: {cut_reason(str(value))}")
    return int(value)


def _float(value: Any, name: str) -> float:
    """``value`` (text or JSON) as a finite non-negative float; else :class:`_Bad`."""
    if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
        value = value.strip()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(f"{name} is not a number: {cut_reason(repr(value))}")
    number = float(value) if not isinstance(value, int) or abs(value) < 2**62 else math.inf
    if not math.isfinite(number) or number < 0:
        raise _Bad(f"{name} is not a finite non-negative number: {cut_reason(repr(value))}")
    return number


def _word(value: Any, name: str, auto: bool = False) -> bool | str:
    """A 0/1 (true/false, on/off) value; with ``auto`` also -1 or auto (fa)."""
    word = _WORDS.get(str(value).strip().lower())
    if word is None or (word == "auto" and not auto):
        raise _Bad(f"{name} is not 0 or 1: {cut_reason(repr(value))}")
    return word


def _scaled(value: str, name: str, pattern: re.Pattern, units: dict[str, float], example: str) -> int:
    """A size (``16.49 GiB``, bytes) or a count (``30.53 B``), else :class:`_Bad`."""
    match = pattern.fullmatch(value.strip())
    scaled = float(match[1]) * units[match[2]] if match else -1.0
    if not 0 <= scaled < 1e18:
        raise _Bad(f"{name} is not a value like {example}: {cut_reason(repr(value))}")
    return int(round(scaled))


def _set(out: dict[str, Any], name: str, value: Any, where: str) -> None:
    """Store the record field ``name`` read from ``value`` (text or JSON) in ``out``."""
    if name in _INT_FIELDS:
        out[name] = _int(value, where)
    elif name in _STR_FIELDS:
        out[name] = str(value).strip()
    elif name in ("flash_attn", "use_mmap"):
        out[name] = _word(value, where, auto=name == "flash_attn")
    elif name == "load_mode":
        out["use_mmap"] = _LOAD_MMAP.get(str(value).strip().lower())
        out.setdefault("extra", {})["load_mode"] = str(value)


def _sizes(n_prompt: int, n_gen: int, n_depth: int, label: str | None) -> tuple[str, int, int, int]:
    """(test, n_prompt, n_gen, n_depth) from a test label when there is one, else from the counts."""
    if label is None:
        return label_for(n_prompt, n_gen, n_depth), n_prompt, n_gen, n_depth
    parsed = parse_label(label)
    if parsed is None:
        raise _Bad(f"test is not a llama-bench test such as pp512 or tg128: {cut_reason(repr(label))}")
    return label.strip(), *parsed


def _from_fields(values: dict[str, Any], line: int, fmt: str) -> BenchRecord:
    """A record from llama-bench's named fields (csv, json, jsonl, sql)."""
    if "avg_ts" not in values:
        raise _Bad("no avg_ts field")
    avg_ts = _float(values["avg_ts"], "avg_ts")
    stddev = None if values.get("stddev_ts") in (None, "") else _float(values["stddev_ts"], "stddev_ts")
    label = values.get("test") if isinstance(values.get("test"), str) and values["test"].strip() else None
    if label is None and ("n_prompt" not in values or "n_gen" not in values):
        raise _Bad("no n_prompt / n_gen fields nor a test label")
    counts = (_int(values.get(key, 0), key, 0) for key in ("n_prompt", "n_gen", "n_depth"))
    test, n_prompt, n_gen, n_depth = _sizes(*counts, label)
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in _FIELDS and value is not None:
            _set(out, _FIELDS[key], value, key)
        elif key not in ("avg_ts", "stddev_ts", "n_prompt", "n_gen", "n_depth", "test") and isinstance(
                value, (str, int, float, bool)):
            out.setdefault("extra", {})[key] = str(int(value) if isinstance(value, bool) else value)
    if "backend" not in out and any(flag in values for flag, _ in _IK_BACKENDS):
        out["backend"] = next((name for flag, name in _IK_BACKENDS if str(values.get(flag)).lower() in ("1", "true")),
                              "CPU")
    if "avg_ns" in values:
        out["seconds"] = _float(values["avg_ns"], "avg_ns") / 1e9
    return checked(BenchRecord(line, fmt, test, n_prompt, n_gen, n_depth, avg_ts, stddev, **out), FIELD_NAMES)


def _md_row(cells: list[str], names: list[str] | None, line: int) -> BenchRecord:
    """A llama-bench markdown row, by its header's column ``names`` or, without a header, by form and place: t/s last,
    the test before it; a size, a count and a backend by their form, the model before them, ngl right after a
    GPU-only backend (llama-bench's order); other cells in ``extra`` as ``col<N>`` (1-based)."""
    values = dict(zip(names, cells, strict=True)) if names else {}
    speed = _TS.fullmatch(_clean(values["t/s"] if names else cells[-1]))
    if not speed:
        raise _Bad(f"t/s is not 'mean ± stddev': {cut_reason(repr(values['t/s'] if names else cells[-1]))}")
    avg_ts, stddev = _float(speed[1], "t/s"), _float(speed[2], "t/s stddev")
    test, n_prompt, n_gen, n_depth = _sizes(0, 0, 0, _clean(values["test"] if names else cells[-2]))
    out: dict[str, Any] = {}
    extra: dict[str, str] = {}
    backend_at = None
    for index, (name, cell) in enumerate(values.items() if names else (("", c) for c in cells[:-2])):
        text, target = _clean(cell), _MD_COLUMNS.get(name)
        if names:
            target = "" if name in ("t/s", "test") else target
        elif "model_size_bytes" not in out and _SIZE.fullmatch(text):
            target = "model_size_bytes"
        elif "model_n_params" not in out and _PARAMS.fullmatch(text):
            target = "model_n_params"
        elif "backend" not in out and text and {p.strip() for p in re.split(r"[,+]", text.lower())} <= _BACKENDS:
            target, backend_at = "backend", index
        elif index == 0 and text and not _FLOAT.fullmatch(text):
            target = "model_type"
        elif backend_at == index - 1 and _INT.fullmatch(text) and not _CPU_BACKENDS & set(re.split(
                r"\s*[,+]\s*", out["backend"].lower())):
            target = "n_gpu_layers"
        if target == "model_size_bytes":
            out[target] = _scaled(text, name or "size", _SIZE, _SIZE_UNITS, "16.49 GiB")
        elif target == "model_n_params":
            out[target] = _scaled(text, name or "params", _PARAMS, _PARAM_UNITS, "30.53 B")
        elif target:
            _set(out, target, text, name or target)
        elif target is None:
            extra[name or f"col{index + 1}"] = text
    out.setdefault("extra", {}).update(extra)
    return checked(BenchRecord(line, "md", test, n_prompt, n_gen, n_depth, avg_ts, stddev, **out), MD_NAMES)


def _sweep_pair(step: tuple, line: int, fmt: str, context: dict[str, Any], extra: dict[str, str] | None = None,
                places: tuple[int, int] = (2, 3)) -> list[BenchRecord]:
    """The pp and tg records of one sweep-bench step (PP, TG, N_KV, T_PP, S_PP, T_TG, S_TG); ``places`` are the
    decimals printed for speeds and times, within whose rounding speed = tokens / time is checked."""
    depth, out = _int(step[2], "N_KV", 0), []
    for kind, tokens, seconds, speed in (("PP", step[0], step[3], step[4]), ("TG", step[1], step[5], step[6])):
        tokens = _int(tokens, kind, 0)
        if tokens == 0:
            continue
        time_s, rate = _float(seconds, f"T_{kind} s"), _float(speed, f"S_{kind} t/s")
        fields = {key: context[key] for key in ("n_batch", "n_ubatch", "flash_attn", "n_gpu_layers") if key in context}
        if context.get("n_threads_batch" if kind == "PP" else "n_threads") is not None:
            fields["n_threads"] = context["n_threads_batch" if kind == "PP" else "n_threads"]
        n_prompt, n_gen = (tokens, 0) if kind == "PP" else (0, tokens)
        record = checked(BenchRecord(line, fmt, label_for(n_prompt, n_gen, depth), n_prompt, n_gen, depth, rate,
                                     seconds=time_s, extra=dict(extra or {}), **fields),
                         SWEEP_NAMES | {"avg_ts": f"S_{kind} t/s", "seconds": f"T_{kind} s"})
        expected = tokens / time_s
        if abs(rate - expected) > expected * (0.6 * 10 ** -places[1] / time_s + 0.01) + 0.6 * 10 ** -places[0]:
            raise _Bad(f"S_{kind} t/s {rate:g} is not {kind} / T_{kind} s = {expected:.2f}")
        out.append(record)
    return out


class _Reader:
    """One pass over the lines; state: the markdown table, csv header and sweep-bench parameters in force."""

    def __init__(self, lines: list[str], source: str):
        self.lines, self.runs, self.in_array = lines, BenchRuns(source=source, format="none"), False  # in_array: JSON
        self.md_names: list[str] | None = None  # the header of the llama-bench or sweep-bench table in force
        self.md_kind = ""  # "bench" or "sweep"
        self.run_records: list[BenchRecord] = []  # markdown records since the last run boundary (for a build footer)
        self.csv_names: list[str] | None = None
        self.sweep_context: dict[str, Any] = {}

    def add(self, index: int, make: Any, *args: Any) -> list[BenchRecord]:
        """The records ``make(*args)`` gives, kept; a :class:`_Bad` makes line ``index`` bad."""
        try:
            made = make(*args)
        except _Bad as exc:
            self.runs.bad.append(BadLine(index + 1, cut_reason(str(exc))))
            return []
        self.runs.records.extend(made if isinstance(made, list) else [made])
        return made if isinstance(made, list) else [made]

    def line(self, index: int) -> int:
        """Read line ``index``; the index of the next line to read."""
        text = self.lines[index].strip()
        while text.startswith(">"):  # a quoted paste
            text = text[1:].strip()
        if not text:
            self.md_names = None
            return index + 1
        if text[0] == "|":
            self.pipe_row(index, text)
        elif _JSON_START.match(text):
            return self.json_at(index, text)
        elif text in ("]", "],", ","):
            self.in_array = False
        elif text[:12].upper() == "CREATE TABLE" or text == ");" or _SQL_COLUMN.fullmatch(text):
            pass  # llama-bench's CREATE TABLE statement (-o sql)
        elif text[:11].upper() == "INSERT INTO":
            self.sql_row(index, text)
        elif not self.csv_line(index, text):
            self.other(index, text)
        return index + 1

    def other(self, index: int, text: str) -> None:
        """A line that is no row: counted skipped; read for the build or the parameters it reports; a boundary
        between runs ends the table and parameters in force."""
        self.runs.skipped.append(index + 1)
        build = _BUILD.match(text)
        if build:
            for record in self.run_records:
                record.extra.setdefault("build_commit", build[1])
                record.extra.setdefault("build_number", build[2])
        if build or text.startswith(("#", "```")) or _COMMAND.search(text):
            self.md_names = None
            self.run_records, self.sweep_context = [], {}
            self.csv_names = self.csv_names if build else None
        elif text.startswith("main:") and "n_kv_max" in text and len(text) < 2000:
            self.md_names = None
            self.sweep_context = {key: int(value) for key, value in re.findall(r"(\w{1,40})\s*=\s*(-?[0-9]{1,9})\b",
                                                                              text)}
            if "flash_attn" in self.sweep_context:
                self.sweep_context["flash_attn"] = {1: True, 0: False}.get(self.sweep_context["flash_attn"], "auto")
        elif text.startswith(_LOAD):
            self.sweep_context = {}

    def pipe_row(self, index: int, text: str) -> None:
        body = text[1:-1] if text.endswith("|") and len(text) > 1 else text[1:]
        cells = [cell.strip() for cell in body.split("|")]
        if not text.strip("|-: "):
            return  # a header's separator
        names = [_clean(cell).lower() for cell in cells] if ("t/s" in text or "N_KV" in text) else []
        if ("test" in names and "t/s" in names) or ("b" not in names and all(  # B: llama-batched-bench's table
                column in names for column in _SWEEP_COLUMNS)):
            self.md_names, self.md_kind = names, "bench" if "test" in names else "sweep"
            if self.md_kind == "bench":
                self.run_records, self.sweep_context = [], {}
            return
        names = self.md_names or []
        if self.md_kind == "bench" and len(cells) > len(names) and "ot" in names:  # a regex's | split the ot cell
            at, more = names.index("ot"), len(cells) - len(names)
            cells = cells[:at] + ["|".join(cells[at:at + more + 1])] + cells[at + more + 1:]
        if names and len(cells) == len(names) and self.md_kind == "bench":
            self.run_records += self.add(index, _md_row, cells, names, index + 1)
            return
        if names and len(cells) == len(names):
            values = dict(zip(names, cells, strict=True))
            extra = {_SWEEP_EXTRA.get(name, name): values[name] for name in names if name not in _SWEEP_COLUMNS}
            self.add(index, _sweep_pair, tuple(values[name] for name in _SWEEP_COLUMNS), index + 1, "sweep-bench",
                     self.sweep_context, extra)
            return
        self.md_names = None  # a row of another shape ends the table
        if len(cells) in (7, 9) and all(_SWEEP_NUM.fullmatch(cell) for cell in cells[:7]):  # a headerless step
            extra = {"rss_hwm_mib": cells[7], "vram_delta_mib": cells[8]} if len(cells) == 9 else None
            self.add(index, _sweep_pair, tuple(cells[:7]), index + 1, "sweep-bench", self.sweep_context, extra)
        elif len(cells) >= 2 and ("±" in cells[-1] or "+-" in cells[-1]):  # a headerless llama-bench row
            self.run_records += self.add(index, _md_row, cells, None, index + 1)
        else:
            self.runs.skipped.append(index + 1)

    def csv_line(self, index: int, text: str) -> bool:
        """Read a csv header or row; False when ``text`` is neither."""
        if "," not in text:
            return False
        try:
            fields = next(csv.reader([text]), None) if self.csv_names or "avg_ts" in text else None
        except csv.Error:
            fields = None
        if fields and "avg_ts" in fields and ("n_prompt" in fields or "test" in fields):
            self.csv_names = [name.strip() for name in fields]
            self.md_names = None
            return True
        if fields is None or self.csv_names is None or len(fields) != len(self.csv_names):
            return False
        self.add(index, _from_fields, dict(zip(self.csv_names, fields, strict=True)), index + 1, "csv")
        return True

    def json_at(self, index: int, text: str) -> int:
        """Read the JSON object (or array of objects) starting on line ``index``, up to the next line that starts
        one (so any text is read once); the next line to read."""
        if text == "[":
            self.in_array = True
            return index + 1
        end = index + 1
        while end < len(self.lines) and not _JSON_START.match(self.lines[end].lstrip()):
            end += 1
        chunk = "\n".join(self.lines[index:end])
        try:
            value, stop = json.JSONDecoder().raw_decode(chunk, chunk.index(text[0]))
        except (ValueError, RecursionError) as exc:
            keys = set(re.findall(r'"(\w+)"\s*:', chunk[:4000]))
            if (_BENCH_KEYS | _SWEEP_KEYS) & keys and "pl" not in keys:  # pl: llama-batched-bench's jsonl (its nan)
                self.runs.bad.append(BadLine(index + 1, cut_reason(f"unreadable JSON: {exc}")))
            else:
                self.runs.skipped.append(index + 1)
            return index + 1
        fmt = "json" if self.in_array or isinstance(value, list) else "jsonl"
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, dict) or "pl" in item or not (_BENCH_KEYS | _SWEEP_KEYS) & set(item):
                self.runs.skipped.append(index + 1)
            elif _SWEEP_KEYS & set(item):
                self.add(index, self.sweep_json, item, index + 1)
            else:
                self.add(index, _from_fields, item, index + 1, fmt)
        self.in_array = self.in_array and not chunk[stop:].split("\n", 1)[0].strip().startswith("]")
        return index + chunk.count("\n", 0, stop) + 1

    @staticmethod
    def sweep_json(item: dict[str, Any], line: int) -> list[BenchRecord]:
        """The records of one line of ``llama-sweep-bench --output-format jsonl``."""
        missing = [name for name in _SWEEP_JSON if name not in item]
        if missing:
            raise _Bad(f"sweep-bench record without {', '.join(missing)}")
        context = {key: item[key] for key in ("n_batch", "n_ubatch", "n_gpu_layers", "n_threads", "n_threads_batch")
                   if isinstance(item.get(key), int)}
        if "flash_attn" in item:
            context["flash_attn"] = _word(item["flash_attn"], "flash_attn", auto=True)
        extra = {key: str(item[key]) for key in _SWEEP_EXTRA.values() if key in item}
        return _sweep_pair(tuple(item[name] for name in _SWEEP_JSON), line, "sweep-bench-jsonl", context, extra, (6, 6))

    def sql_row(self, index: int, text: str) -> None:
        match = _INSERT.fullmatch(text)
        try:  # the values are quoted with ' ('' for a quote), or bare
            values = next(csv.reader([match[2]], quotechar="'", skipinitialspace=True)) if match else None
        except csv.Error:
            values = None
        names = [name.strip() for name in match[1].split(",")] if match else []
        if values is None or len(values) != len(names):
            self.runs.bad.append(BadLine(index + 1, "unreadable INSERT statement (fields and values do not pair)"))
        else:
            self.add(index, _from_fields, dict(zip(names, values, strict=True)), index + 1, "sql")


def read_bench_output(text: str, source: str) -> BenchRuns:
    """The llama-bench / llama-sweep-bench records in ``text`` (``source`` names it in errors), in whichever output
    format; see the module's docstring. Raises :class:`ScenarioError` for an input of more than ``MAX_BYTES`` bytes
    or ``MAX_LINES`` lines, and nothing else."""
    if not isinstance(text, str):
        raise ScenarioError(source, "", "expected llama-bench output as text")
    if len(text) > MAX_BYTES or (len(text) * 4 > MAX_BYTES and len(text.encode("utf-8", "replace")) > MAX_BYTES):
        raise ScenarioError(source, "", f"expected at most {MAX_BYTES // 1_000_000} MB of llama-bench output")
    lines = text.split("\n")
    if len(lines) > MAX_LINES:
        raise ScenarioError(source, "", f"expected at most {MAX_LINES} lines of llama-bench output, got {len(lines)}")
    reader, index = _Reader([line.rstrip("\r") for line in lines], source), 0
    while index < len(lines):
        index = reader.line(index)
    formats = {record.format for record in reader.runs.records}
    reader.runs.format = formats.pop() if len(formats) == 1 else ("mixed" if formats else "none")
    return reader.runs
