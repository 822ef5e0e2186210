"""Real engine logs to a tidy table (``sim logs FILE...``): one row per completed request or statistics line.

Formats are detected per line; several entries run together on one line are all read. Understood:

- Basalt: the completion line ``s1 done pp=<prompt>/<cached>c <s>s [<tok/s>t/s] tg=<n> <tok/s>t/s acc=<%>
  ttft=<s>s end=<reason> hit=<%> pcie=<%>`` (with or without the ``[server]`` prefix), its start-up lines
  ``loaded <GiB>GiB <s>s cuda0=... ram=... cudaN-copy=...`` and ``auto resident=<GB>GB pool=<n>``, and the progress
  line ``s1 read ...`` (recognised, not a completion);
- Strata: the two-line request summary ``strata serve: prompt <n> tokens = <reused> reused + <read> read in <ms> ms,
  <n> generated in <ms> ms (<tok/s> tok/s)...`` followed by ``strata serve: decode expert cache hit rate: <%> (<hits>
  hits / <lookups> lookups); <n> more read ... (<%> of all <routed> routed)``, and its start-up lines (PCIe probe,
  expert cache auto, profile, pre-fill);
- llama.cpp / llama-server / ik_llama.cpp timing blocks (``prompt eval time = <ms> ms / <n> tokens (...)``, ``eval
  time = <ms> ms / <n> runs|tokens (...)``, ``total time = ...``), with the ``llama_perf_context_print:``,
  ``llama_print_timings:`` or ``print_timings:`` prefixes, log timestamps, and llama-server's ``draft acceptance
  rate`` line;
- vLLM periodic statistics (``Avg prompt throughput: ... tokens/s, Avg generation throughput: ... tokens/s, Running:
  <n> reqs, Waiting|Pending: <n> reqs, GPU KV cache usage: <%>, Prefix cache hit rate: <%>``), v0 and v1.

Anything else is counted as not understood (with the first few examples); nothing raises on any input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from sim.core.text import plural

ROW_FIELDS = ("engine", "line", "prompt_tokens", "cached_tokens", "prefill_s", "prefill_tok_s", "output_tokens",
              "decode_s", "decode_tok_s", "ttft_s", "acceptance", "expert_hit_rate", "pcie_share", "end_reason",
              "prompt_throughput_tok_s", "generation_throughput_tok_s", "running", "waiting", "kv_usage",
              "prefix_hit_rate")
NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
EXAMPLES = 5

BASALT_DONE = re.compile(
    rf"\bs(?P<slot>\d+)\s+done\s+pp\s*=\s*(?P<prompt>\d+)\s*/\s*(?P<cached>\d+)\s*c\s+(?P<prefill_s>{NUM})\s*s"
    rf"(?:\s+(?P<prefill_rate>{NUM})\s*t/s)?\s+tg\s*=\s*(?P<out>\d+)\s+(?P<decode_rate>{NUM})\s*t/s"
    rf"(?:\s+acc\s*=\s*(?P<acc>{NUM})\s*%)?\s+ttft\s*=\s*(?P<ttft>{NUM})\s*s\s+end\s*=\s*(?P<end>\w+)"
    rf"(?:\s+hit\s*=\s*(?P<hit>{NUM})\s*%)?(?:\s+pcie\s*=\s*(?P<pcie>{NUM})\s*%)?")
BASALT_READ = re.compile(r"\bs\d+\s+read\b")
BASALT_LOADED = re.compile(
    rf"\bloaded\s+(?P<gib>{NUM})\s*GiB\s+(?P<s>{NUM})\s*s(?P<rest>(?:\s+[\w-]+=\s*{NUM}\s*GiB)+)")
BASALT_AUTO = re.compile(rf"\bauto\s+resident\s*=\s*(?P<gb>{NUM})\s*GB\s+pool\s*=\s*(?P<pool>\d+)")
STRATA_PROMPT = re.compile(
    rf"strata serve:\s+prompt\s+(?P<prompt>\d+)\s+tokens\s*=\s*(?P<reused>\d+)\s+reused\s*\+\s*(?P<read>\d+)\s+read"
    rf"\s+in\s+(?P<prefill_ms>{NUM})\s*ms,\s*(?P<out>\d+)\s+generated\s+in\s+(?P<decode_ms>{NUM})\s*ms"
    rf"\s*\(\s*(?P<rate>{NUM})\s*tok/s\s*\)(?:,\s*drafts accepted\s*(?P<acc>{NUM})?\s*%?)?")
STRATA_HIT = re.compile(
    rf"strata serve:\s+decode expert cache hit rate:\s*(?P<hit>{NUM})\s*%\s*\(\s*(?P<hits>\d+)\s+hits\s*/\s*"
    rf"(?P<lookups>\d+)\s+lookups\s*\)(?:;\s*(?P<more>\d+)\s+more read[^(]*\(\s*(?P<pcie>{NUM})\s*%\s+of all\s+"
    rf"(?P<routed>\d+)\s+routed\s*\))?")
STRATA_START = re.compile(r"strata (?:generate|serve):\s+(?:PCIe probe|expert cache auto|profile|pre-filled)")
STRATA_SLOTS = re.compile(rf"expert cache auto:\s*(?P<free>{NUM})\s*GiB free,\s*(?P<reserve>{NUM})\s*MiB reserved"
                          rf"(?:\s*\(\+(?P<head>{NUM})\s*MiB[^)]*\))?\s*->\s*(?P<slots>\d+)\s+slots")
STRATA_PROBE = re.compile(rf"PCIe probe:\s*(?P<gbps>{NUM})\s*GB/s")
LNUM = r"\d+(?:[.,]\d+)?|[-+]?nan|inf"  # llama.cpp prints %.2f, with a decimal comma in some locales
LLAMA_PROMPT = re.compile(
    rf"(?:prompt\s+eval|peval) time\s*=\s*(?P<ms>{LNUM})\s*ms\s*/\s*(?P<n>\d+)\s*(?:tokens|runs)"
    rf"(?:\s*\(\s*(?P<per>{LNUM})\s*ms per (?:token|run),?\s*(?:(?P<rate>{LNUM})\s*tokens per second)?\s*\))?")
LLAMA_EVAL = re.compile(
    rf"(?<![\w])(?:generation )?eval time\s*=\s*(?P<ms>{LNUM})\s*ms\s*/\s*(?P<n>\d+)\s*(?:tokens|runs)"
    rf"(?:\s*\(\s*(?P<per>{LNUM})\s*ms per (?:token|run),?\s*(?:(?P<rate>{LNUM})\s*tokens per second)?\s*\))?")
LLAMA_TOTAL = re.compile(rf"total time\s*=\s*(?P<ms>{LNUM})\s*ms(?:\s*/\s*(?P<n>\d+)\s*tokens)?")
LLAMA_OTHER = re.compile(r"(?:load|sample|sampling|samplers|unaccounted) time\s*=|graphs reused\s*=")
LLAMA_SLOT = re.compile(r"\bslot\s+print_timings?\s*:\s*id\s+\d+\s*\|\s*task\s+-?\d+\s*\|\s*$")
LLAMA_CHATTER = re.compile(r"^(?:slot|srv)\s+[\w ]{1,14}:\s|^INFO\s*\[\s*[\w ]+\]")
LLAMA_DRAFT = re.compile(rf"draft acceptance(?: rate)?\s*=\s*(?P<rate>{LNUM})")
LINE_PREFIX = re.compile(r"^(?:\[\d+\]\s*)?(?:\d+\.\d{2}\.\d{3}\.\d{3}\s+[IWED]\s+)?")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
VLLM_STATS = re.compile(r"Avg prompt throughput:")
VLLM_FIELDS = {
    "prompt_throughput_tok_s": re.compile(rf"Avg prompt throughput:\s*(?P<v>{NUM})\s*tokens/s"),
    "generation_throughput_tok_s": re.compile(rf"Avg generation throughput:\s*(?P<v>{NUM})\s*tokens/s"),
    "running": re.compile(r"Running:\s*(?P<v>\d+)\s*reqs"),
    "waiting": re.compile(r"(?:Waiting|Pending):\s*(?P<v>\d+)\s*reqs"),
    "kv_usage": re.compile(rf"GPU KV cache usage:\s*(?P<v>{NUM})\s*%"),
    "prefix_hit_rate": re.compile(rf"(?<!External )(?<!MM )Prefix cache hit rate:\s*(?:GPU:\s*)?(?P<v>{NUM})\s*%"),
}
VLLM_PREFIX_LINE = re.compile(rf"Prefix cache hit rate:\s*GPU:\s*(?P<v>{NUM})\s*%")
VLLM_SPEC = re.compile(rf"(?:Speculative metrics|SpecDecoding metrics):.*?Draft acceptance rate:\s*"
                       rf"(?P<v>{NUM}|nan)(?P<pct>\s*%)?")
VLLM_PERCENT = ("kv_usage", "prefix_hit_rate")

@dataclass
class LogTable:
    """What a log says: request and statistics rows, start-up facts, and what was not understood."""

    rows: list[dict] = field(default_factory=list)
    facts: list[dict] = field(default_factory=list)  # start-up lines: placement, slots, link probe
    lines: int = 0
    not_understood: int = 0
    examples: list[tuple[str, int, str]] = field(default_factory=list)  # (file, line number, text)
    incomplete: int = 0  # a request summary whose second half never came


def _f(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.replace(",", "."))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _row(engine: str, where: str, **values) -> dict:
    row = dict.fromkeys(ROW_FIELDS)
    row.update(engine=engine, line=where, **values)
    return row


def _basalt(m: re.Match, where: str) -> dict:
    out = int(m["out"])
    rate = _f(m["decode_rate"])
    prefill_s = _f(m["prefill_s"])
    prompt, cached = int(m["prompt"]), int(m["cached"])
    pre_rate = _f(m["prefill_rate"])
    if pre_rate is None and prefill_s:
        pre_rate = (prompt - cached) / prefill_s
    return _row("basalt", where, prompt_tokens=prompt, cached_tokens=cached, prefill_s=prefill_s,
                prefill_tok_s=pre_rate, output_tokens=out, decode_tok_s=rate,
                decode_s=out / rate if rate else None, ttft_s=_f(m["ttft"]),
                acceptance=None if m["acc"] is None else _f(m["acc"]) / 100, end_reason=m["end"],
                expert_hit_rate=None if m["hit"] is None else _f(m["hit"]) / 100,
                pcie_share=None if m["pcie"] is None else _f(m["pcie"]) / 100)


class _Reader:
    def __init__(self, table: LogTable) -> None:
        self.t = table
        self.strata: dict | None = None  # a Strata request waiting for its hit-rate line
        self.llama: dict | None = None  # a llama.cpp timing block being read
        self.draft: float | None = None

    def flush_llama(self) -> None:
        b, self.llama = self.llama, None
        if b is None or b.get("output_tokens") is None and b.get("prompt_tokens") is None:
            return
        b["acceptance"] = self.draft
        self.draft = None
        if b.get("prefill_s") is not None and b.get("ttft_s") is None:
            b["ttft_s"] = b["prefill_s"]
        self.t.rows.append(b)

    def _strata_prompt(self, m: re.Match, where: str) -> None:
        if self.strata is not None:
            self.t.incomplete += 1
        out, decode_ms = int(m["out"]), _f(m["decode_ms"])
        read, prefill_ms = int(m["read"]), _f(m["prefill_ms"])
        self.strata = _row("strata", where, prompt_tokens=int(m["prompt"]), cached_tokens=int(m["reused"]),
                           prefill_s=None if prefill_ms is None else prefill_ms / 1000,
                           prefill_tok_s=read / (prefill_ms / 1000) if prefill_ms else None, output_tokens=out,
                           decode_s=None if decode_ms is None else decode_ms / 1000, decode_tok_s=_f(m["rate"]),
                           ttft_s=None if prefill_ms is None else prefill_ms / 1000,
                           acceptance=None if m["acc"] is None else _f(m["acc"]) / 100)

    def _strata_hit(self, m: re.Match) -> None:
        if self.strata is None:
            self.t.incomplete += 1
            return
        row, self.strata = self.strata, None
        hit = _f(m["hit"])
        row["expert_hit_rate"] = None if hit is None else hit / 100
        row["pcie_share"] = None if m["pcie"] is None or _f(m["pcie"]) is None else _f(m["pcie"]) / 100
        self.t.rows.append(row)

    def line(self, text: str, where: str) -> bool:
        """Read one line; True when something in it was understood."""
        found = False
        for m in BASALT_DONE.finditer(text):
            self.t.rows.append(_basalt(m, where))
            found = True
        if found:
            return True
        if BASALT_READ.search(text):
            return True
        m = BASALT_LOADED.search(text)
        if m:
            parts = dict(re.findall(rf"([\w-]+)=\s*({NUM})\s*GiB", m["rest"]))
            self.t.facts.append({"engine": "basalt", "line": where, "kind": "loaded", "gib": _f(m["gib"]),
                                 "seconds": _f(m["s"]), **{f"{k}_gib": _f(v) for k, v in parts.items()}})
            return True
        m = BASALT_AUTO.search(text)
        if m:
            self.t.facts.append({"engine": "basalt", "line": where, "kind": "auto", "resident_gb": _f(m["gb"]),
                                 "pool": int(m["pool"])})
            return True
        strata = sorted([(m.start(), "prompt", m) for m in STRATA_PROMPT.finditer(text)]
                        + [(m.start(), "hit", m) for m in STRATA_HIT.finditer(text)], key=lambda e: e[0])
        for _, kind, m in strata:  # request summaries, in order (both halves may share a line)
            if kind == "prompt":
                self._strata_prompt(m, where)
            else:
                self._strata_hit(m)
        if strata:
            return True
        if STRATA_START.search(text):
            m = STRATA_SLOTS.search(text)
            if m:
                self.t.facts.append({"engine": "strata", "line": where, "kind": "expert_cache",
                                     "free_gib": _f(m["free"]), "reserve_mib": _f(m["reserve"]),
                                     "head_mib": _f(m["head"]), "slots": int(m["slots"])})
            m = STRATA_PROBE.search(text)
            if m:
                self.t.facts.append({"engine": "strata", "line": where, "kind": "pcie_probe",
                                     "gbps": _f(m["gbps"])})
            return True
        starts = [m.start() for m in VLLM_STATS.finditer(text)]
        for j, at in enumerate(starts):  # one row per statistics entry, even two on one line
            segment = text[at:starts[j + 1] if j + 1 < len(starts) else len(text)]
            values: dict = {}
            for key, rx in VLLM_FIELDS.items():
                m = rx.search(segment)
                if m is not None:
                    v = _f(m["v"])
                    values[key] = v / 100 if key in VLLM_PERCENT and v is not None else (
                        int(m["v"]) if key in ("running", "waiting") else v)
            self.t.rows.append(_row("vllm", where, **values))
        if starts:
            return True
        m = VLLM_PREFIX_LINE.search(text)  # v0 prints the prefix-cache hit rate on a line of its own
        if m:
            last = self.t.rows[-1] if self.t.rows else None
            if last is not None and last["engine"] == "vllm" and last["prefix_hit_rate"] is None:
                last["prefix_hit_rate"] = _f(m["v"]) / 100 if _f(m["v"]) is not None else None
            return True
        m = VLLM_SPEC.search(text)
        if m:
            v = _f(m["v"])
            self.t.rows.append(_row("vllm", where, acceptance=None if v is None else (v / 100 if m["pct"] else v)))
            return True
        return self._llama(text, where)

    def _llama(self, text: str, where: str) -> bool:
        """llama.cpp timing lines; several on one line are taken in order of position."""
        prompts = list(LLAMA_PROMPT.finditer(text))
        spans = [(m.start(), m.end()) for m in prompts]
        events = [(m.start(), "prompt", m) for m in prompts]
        events += [(m.start(), "eval", m) for m in LLAMA_EVAL.finditer(text)
                   if not any(a <= m.start() < b for a, b in spans)]  # the tail of a "prompt eval time"
        events += [(m.start(), "total", m) for m in LLAMA_TOTAL.finditer(text)]
        events += [(m.start(), "draft", m) for m in LLAMA_DRAFT.finditer(text)]
        if not events:
            if LLAMA_SLOT.search(text):  # a block's prefix on a line of its own: the next block starts
                self.flush_llama()
                return True
            return bool(LLAMA_OTHER.search(text)) or bool(LLAMA_CHATTER.search(text))
        for _, kind, m in sorted(events, key=lambda e: e[0]):
            if kind == "draft":
                rate = _f(m["rate"])
                last = self.t.rows[-1] if self.t.rows else None
                if self.llama is None and last is not None and last["engine"] == "llama.cpp" \
                        and last["acceptance"] is None:
                    last["acceptance"] = rate  # printed after the block's total time
                else:
                    self.draft = rate
            elif kind == "total":
                self.flush_llama()
            elif kind == "prompt":
                if self.llama is not None and self.llama.get("prompt_tokens") is not None:
                    self.flush_llama()
                ms, n = _f(m["ms"]), int(m["n"])
                self.llama = self.llama or _row("llama.cpp", where)
                rate = _f(m["rate"])
                self.llama.update(prompt_tokens=n, prefill_s=None if ms is None else ms / 1000,
                                  prefill_tok_s=rate if rate is not None else (n / (ms / 1000) if ms else None))
            else:
                ms, n = _f(m["ms"]), int(m["n"])
                self.llama = self.llama or _row("llama.cpp", where)
                rate = _f(m["rate"])
                self.llama.update(output_tokens=n, decode_s=None if ms is None else ms / 1000,
                                  decode_tok_s=rate if rate is not None else (n / (ms / 1000) if ms else None))
        return True


def log_sources(paths: Iterable[str]) -> list[tuple[str, list[str]]]:
    """The lines of each log file (undecodable bytes replaced); an unreadable file is a one-line ScenarioError."""
    from sim.core.errors import ScenarioError

    sources = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                sources.append((path, fh.read().splitlines()))
        except OSError as exc:
            raise ScenarioError(path, "", f"cannot read: {exc.strerror or exc}") from None
    return sources


def read_logs(sources: Iterable[tuple[str, Iterable[str]]]) -> LogTable:
    """Parse (name, lines) sources; every line is read, whatever it holds."""
    table = LogTable()
    for name, lines in sources:
        reader = _Reader(table)
        for number, raw in enumerate(lines, 1):
            text = LINE_PREFIX.sub("", ANSI.sub("", raw.rstrip("\r\n")), count=1)
            table.lines += 1
            try:
                ok = reader.line(text, f"{name}:{number}") if text.strip() else True
            except (ValueError, TypeError, OverflowError, ZeroDivisionError):
                ok = False
            if not ok:
                table.not_understood += 1
                if len(table.examples) < EXAMPLES:
                    shown = "".join(c if c.isprintable() else "?" for c in text[:160])
                    table.examples.append((name, number, shown))
        reader.flush_llama()
        if reader.strata is not None:
            table.incomplete += 1
    return table


def summary_lines(t: LogTable) -> list[str]:
    out = [f"{plural(t.lines, 'line')}: {plural(len(t.rows), 'row')}, {plural(len(t.facts), 'start-up fact')}, "
           f"{t.not_understood:,} not understood"
           + (f", {plural(t.incomplete, 'incomplete request summary', 'incomplete request summaries')}"
              if t.incomplete else "")]
    engines = sorted({r["engine"] for r in t.rows})
    for e in engines:
        rows = [r for r in t.rows if r["engine"] == e]
        parts = [f"{len(rows):,} {e} {'row' if len(rows) == 1 else 'rows'}"]
        for key, label, scale in (("prefill_tok_s", "prefill tok/s", 1), ("decode_tok_s", "decode tok/s", 1),
                                  ("ttft_s", "TTFT s", 1), ("acceptance", "acceptance %", 100),
                                  ("expert_hit_rate", "hit %", 100), ("pcie_share", "pcie %", 100),
                                  ("generation_throughput_tok_s", "generation tok/s", 1),
                                  ("prompt_throughput_tok_s", "prompt tok/s", 1)):
            values = sorted(r[key] * scale for r in rows if r[key] is not None)
            if values:
                mid = values[len(values) // 2] if len(values) % 2 else (values[len(values) // 2 - 1]
                                                                          + values[len(values) // 2]) / 2
                parts.append(f"{label} median {mid:.4g} ({values[0]:.4g}-{values[-1]:.4g})")
        out.append("  " + "; ".join(parts))
    for f in t.facts:
        out.append("  start-up: " + ", ".join(f"{k}={v}" for k, v in f.items() if v is not None))
    for name, number, text in t.examples:
        out.append(f"  not understood, {name}:{number}: {text}")
    return out
