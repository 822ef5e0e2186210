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
  <n> reqs, Waiting|Pending: <n> reqs, GPU KV cache usage: <%>, Prefix cache hit rate: <%>``), v0 and v1;
- vLLM's start-up phases as its source prints them (``Loading weights took <s> seconds``, ``Model loading took <GiB>
  GiB and <s> seconds``, ``Dynamo bytecode transform time: <s> s``, ``Compiling a graph for ... takes <s> s``,
  ``Directly load the compiled graph(s) ... took <s> s``, ``torch.compile takes <s> s in total``, ``Graph capturing
  finished in <s> secs, took <GiB> GiB``, ``init engine (profile, create kv cache, warmup model) took <s> seconds``
  and their newer forms): one start-up fact each, counted per phase (``LogTable.phases``).

Lines are paired only within one request block: consecutive lines of one source (a llama.cpp block ends at a
line of another format or prefix, a blank line, a line not understood or a new request's start); a half whose other
half never came is counted as incomplete, never paired with another source's line. Every value read is checked
against its quantity's range (:mod:`sim.formats.engine_log_values`: the input layer's tokens, seconds, tok/s, shares),
a printed rate against its tokens over its time, a part against its whole (cached and prompt tokens, hits and
lookups); a line with a value that fails, or longer than 65,536 characters, is counted as not understood with the
reason, and nothing of it is kept. Anything else is counted as not understood (with the first few examples);
nothing raises on any input.
Rows are handed on as they are completed (``read_logs(..., sink=...)``), so a log of any length is read in bounded
memory.
"""

from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from sim.formats.engine_log_patterns import (
    ANSI,
    BASALT_AUTO,
    BASALT_DONE,
    BASALT_LOADED,
    BASALT_READ,
    LINE_PREFIX,
    LLAMA_CHATTER,
    LLAMA_DRAFT,
    LLAMA_EVAL,
    LLAMA_IDS,
    LLAMA_OTHER,
    LLAMA_PROMPT,
    LLAMA_SLOT,
    LLAMA_TOTAL,
    LOADED_PART,
    NUM,
    STRATA_HIT,
    STRATA_PROBE,
    STRATA_PROMPT,
    STRATA_SLOTS,
    STRATA_START,
    VLLM_FIELDS,
    VLLM_PERCENT,
    VLLM_PHASE_LINES,
    VLLM_PHASE_STARTS,
    VLLM_PREFIX_LINE,
    VLLM_SPEC,
    VLLM_SPEC_RATE,
    VLLM_STATS,
)
from sim.formats.engine_log_values import OutOfRange, _check, _check_fact, _f, _pct, check_rate, check_share, timing
from sim.formats.engine_logs_io import MAX_LINE, SUMMARY_KEYS, LongLine, check_text_file, file_lines, summary_lines

__all__ = ["EXAMPLES", "MAX_LINE", "NUM", "ROW_FIELDS", "LogTable", "OutOfRange", "log_sources", "read_logs",
           "summary_lines"]

ROW_FIELDS = ("engine", "line", "prompt_tokens", "cached_tokens", "prefill_s", "prefill_tok_s", "output_tokens",
              "decode_s", "decode_tok_s", "ttft_s", "acceptance", "expert_hit_rate", "pcie_share", "end_reason",
              "prompt_throughput_tok_s", "generation_throughput_tok_s", "running", "waiting", "kv_usage",
              "prefix_hit_rate")
EXAMPLES = 5
@dataclass
class LogTable:
    """What a log says: request and statistics rows, start-up facts, and what was not understood. ``rows`` holds
    the rows only when no sink took them; ``row_count`` and ``engines`` (per engine: rows and the summary's
    columns) always count them."""

    rows: list[dict] = field(default_factory=list)
    facts: list[dict] = field(default_factory=list)  # start-up lines: placement, slots, link probe, vLLM phases
    phases: dict[str, int] = field(default_factory=dict)  # vLLM start-up phase lines read, per phase
    lines: int = 0
    not_understood: int = 0
    examples: list[tuple[str, int, str, str | None]] = field(default_factory=list)  # (file, line, text, reason)
    incomplete: int = 0  # a request summary or timing block whose other half never came
    row_count: int = 0
    engines: dict[str, tuple[list[int], dict[str, array]]] = field(default_factory=dict)
    sink: Callable[[dict], None] | None = None
    last: dict | None = None  # the latest row, still open to the line after it (a draft or prefix rate)

    def add(self, row: dict) -> None:
        """A completed row; the one before it is handed on."""
        self.close_last()
        self.last = row

    def close_last(self) -> None:
        """Hand on the latest row: counted, its summary columns kept, kept or given to the sink."""
        row, self.last = self.last, None
        if row is None:
            return
        self.row_count += 1
        count, columns = self.engines.setdefault(row["engine"], ([0], {k: array("d") for k, _, _ in SUMMARY_KEYS}))
        count[0] += 1
        for key, _, scale in SUMMARY_KEYS:
            if row[key] is not None:
                columns[key].append(row[key] * scale)
        if self.sink is None:
            self.rows.append(row)
        else:
            self.sink(row)


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
    if pre_rate is None and prefill_s and cached <= prompt:
        pre_rate = (prompt - cached) / prefill_s
    row = _check(_row("basalt", where, prompt_tokens=prompt, cached_tokens=cached, prefill_s=prefill_s,
                      prefill_tok_s=pre_rate, output_tokens=out, decode_tok_s=rate,
                      decode_s=out / rate if rate else None, ttft_s=_f(m["ttft"]),
                      acceptance=None if m["acc"] is None else _f(m["acc"]) / 100, end_reason=m["end"],
                      expert_hit_rate=None if m["hit"] is None else _f(m["hit"]) / 100,
                      pcie_share=None if m["pcie"] is None else _f(m["pcie"]) / 100))
    check_rate("prefill_tok_s", m["prefill_rate"], prompt - cached, m["prefill_s"])  # the new tokens' rate
    return row


def _tag(prefix: str) -> str:
    """Which source printed a llama.cpp timing line: its prefix without spacing and numbers, but with slot and task
    ids (a timestamp differs from line to line; a slot or task is another request)."""
    return re.sub(r"\d+", "#", "".join(prefix.split())) + "|" + ",".join(LLAMA_IDS.findall(prefix))


class _Reader:
    """One file's reader: the request blocks open in it, and the rows of the line being read (kept only when the
    whole line is understood)."""

    def __init__(self, table: LogTable) -> None:
        self.t = table
        self.staged: list[dict] = []  # rows of the current line
        self.strata: dict | None = None  # a Strata request waiting for its hit-rate line
        self.llama: dict | None = None  # a llama.cpp timing block being read
        self.llama_tag = ""
        self.draft: float | None = None
        self.closed_tag: str | None = None  # the source of the llama.cpp block its total line just closed
        self.after_stats = False  # the line before was a vLLM statistics line

    def last_row(self) -> dict | None:
        return self.staged[-1] if self.staged else self.t.last

    def commit(self) -> None:
        for row in self.staged:
            self.t.add(row)
        self.staged = []

    def switch(self, source: str) -> None:
        """A line of ``source`` (basalt, strata, vllm, llama): it ends the blocks of the other sources."""
        if source != "llama":
            self.flush_llama()
            self.closed_tag = self.draft = None
        if source != "strata" and self.strata is not None:
            self.strata = None
            self.t.incomplete += 1
        self.after_stats = False

    def blank(self) -> None:
        """A blank line: a new block of lines follows."""
        self.flush_llama()
        self.closed_tag = self.draft = None
        self.after_stats = False
        self.commit()

    def failed(self) -> None:
        """The line was not understood: its rows are dropped and every open block ends."""
        self.staged = []
        self.switch("")
        self.commit()

    def finish(self) -> None:
        self.switch("")
        self.commit()

    def flush_llama(self) -> bool:
        """End the open llama.cpp block: a row when it has both halves, else an incomplete one. True for a row."""
        b, self.llama = self.llama, None
        if b is None:
            return False
        if b["output_tokens"] is None or b["prompt_tokens"] is None:
            self.t.incomplete += 1
            self.draft = None
            return False
        b["acceptance"] = self.draft
        self.draft = None
        if b["prefill_s"] is not None and b["ttft_s"] is None:
            b["ttft_s"] = b["prefill_s"]
        self.staged.append(b)
        return True

    @staticmethod
    def _strata_prompt_row(m: re.Match, where: str) -> dict:
        """The row of a Strata request summary's first line, its numbers checked."""
        out, decode_ms = int(m["out"]), _f(m["decode_ms"])
        prompt, read, prefill_ms = int(m["prompt"]), int(m["read"]), _f(m["prefill_ms"])
        row = _check(_row("strata", where, prompt_tokens=prompt, cached_tokens=int(m["reused"]),
                          prefill_s=None if prefill_ms is None else prefill_ms / 1000,
                          prefill_tok_s=read / (prefill_ms / 1000) if prefill_ms else None, output_tokens=out,
                          decode_s=None if decode_ms is None else decode_ms / 1000, decode_tok_s=_f(m["rate"]),
                          ttft_s=None if prefill_ms is None else prefill_ms / 1000,
                          acceptance=None if m["acc"] is None else _f(m["acc"]) / 100))
        if read > prompt:
            raise OutOfRange(f"{read:,} read is more than prompt_tokens {prompt:,}")
        check_rate("decode_tok_s", m["rate"], out, m["decode_ms"], 1e-3)
        return row

    @staticmethod
    def _strata_hit_values(m: re.Match) -> dict:
        """The hit rate and PCIe share of a Strata request summary's second line, checked against their counts."""
        hit = _check({"expert_hit_rate": _pct(m["hit"]), "pcie_share": _pct(m["pcie"])})
        check_share("expert_hit_rate", m["hit"], int(m["hits"]), int(m["lookups"]), "hits", "lookups")
        if m["more"] is not None:
            check_share("pcie_share", m["pcie"], int(m["more"]), int(m["routed"]), "more read", "routed")
        return hit

    def _strata_prompt(self, row: dict) -> None:
        if self.strata is not None:
            self.t.incomplete += 1
        self.strata = row

    def _strata_hit(self, hit: dict) -> None:
        if self.strata is None:
            self.t.incomplete += 1
            return
        row, self.strata = self.strata, None
        row.update(hit)
        self.staged.append(row)

    def line(self, text: str, where: str) -> bool:
        """Read one line; True when something in it was understood."""
        done = [_basalt(m, where) for m in BASALT_DONE.finditer(text)]
        if done:
            self.switch("basalt")
            self.staged += done
            return True
        if BASALT_READ.search(text):
            self.switch("basalt")
            return True
        m = BASALT_LOADED.search(text)
        if m:
            parts = LOADED_PART.findall(m["rest"])
            self.switch("basalt")
            self.t.facts.append(_check_fact({"engine": "basalt", "line": where, "kind": "loaded", "gib": _f(m["gib"]),
                                             "seconds": _f(m["s"]), **{f"{k}_gib": _f(v) for k, v in parts}}))
            return True
        m = BASALT_AUTO.search(text)
        if m:
            self.switch("basalt")
            self.t.facts.append(_check_fact({"engine": "basalt", "line": where, "kind": "auto",
                                             "resident_gb": _f(m["gb"]), "pool": int(m["pool"])}))
            return True
        strata = sorted([(m.start(), "prompt", self._strata_prompt_row(m, where)) for m in STRATA_PROMPT.finditer(text)]
                        + [(m.start(), "hit", self._strata_hit_values(m)) for m in STRATA_HIT.finditer(text)],
                        key=lambda e: e[0])  # every entry checked before any is used
        if strata:
            self.switch("strata")
        for _, kind, values in strata:  # request summaries, in order (both halves may share a line)
            if kind == "prompt":
                self._strata_prompt(values)
            else:
                self._strata_hit(values)
        if strata:
            return True
        if STRATA_START.search(text):
            facts = []
            m = STRATA_SLOTS.search(text)
            if m:
                facts.append(_check_fact({"engine": "strata", "line": where, "kind": "expert_cache",
                                          "free_gib": _f(m["free"]), "reserve_mib": _f(m["reserve"]),
                                          "head_mib": _f(m["head"]), "slots": int(m["slots"])}))
            m = STRATA_PROBE.search(text)
            if m:
                facts.append(_check_fact({"engine": "strata", "line": where, "kind": "pcie_probe",
                                          "gbps": _f(m["gbps"])}))
            self.switch("strata")
            self.t.facts += facts
            return True
        return self._vllm(text, where)

    def _vllm_phase(self, text: str, where: str) -> bool:
        """A vLLM start-up phase line (``Loading weights took``, ``init engine ... took``, ...): a fact with the
        phase and its seconds (and GiB or compilation seconds where the line gives them), counted per phase."""
        found: tuple[str, re.Match] | None = None
        for phase, rx in VLLM_PHASE_LINES.items():
            m = rx.search(text)
            if m is not None:
                found = (phase, m)
                break
        if found is None:
            for phase, (head, tail) in VLLM_PHASE_STARTS.items():
                h = head.search(text)
                m = None if h is None else tail.search(text, h.end())
                if m is not None:
                    found = (phase, m)
                    break
        if found is None:
            return False
        phase, m = found
        groups = m.groupdict()
        fact = {"engine": "vllm", "line": where, "kind": "phase", "phase": phase, "seconds": _f(groups["s"])}
        if groups.get("gib") is not None:
            fact["gib"] = _f(groups["gib"])
        if groups.get("compile") is not None:
            fact["compilation_s"] = _f(groups["compile"])
        if fact["seconds"] is None:
            raise OutOfRange(f"{phase} without a finite number of seconds")
        self.switch("vllm")
        self.t.facts.append(_check_fact(fact))
        self.t.phases[phase] = self.t.phases.get(phase, 0) + 1
        return True

    def _vllm(self, text: str, where: str) -> bool:
        if self._vllm_phase(text, where):
            return True
        starts = [m.start() for m in VLLM_STATS.finditer(text)]
        if starts:
            self.switch("vllm")
        for j, at in enumerate(starts):  # one row per statistics entry, even two on one line
            segment = text[at:starts[j + 1] if j + 1 < len(starts) else len(text)]
            values: dict = {}
            for key, rx in VLLM_FIELDS.items():
                m = rx.search(segment)
                if m is not None:
                    v = _f(m["v"])
                    values[key] = v / 100 if key in VLLM_PERCENT and v is not None else (
                        int(m["v"]) if key in ("running", "waiting") else v)
            self.staged.append(_row("vllm", where, **_check(values)))
        if starts:
            self.after_stats = True
            return True
        m = VLLM_PREFIX_LINE.search(text)  # v0 prints the prefix-cache hit rate on the line after the statistics
        if m:
            rate = _check({"prefix_hit_rate": _pct(m["v"])})["prefix_hit_rate"]
            last = self.last_row() if self.after_stats else None
            self.switch("vllm")
            if last is not None and last["engine"] == "vllm" and last["prefix_hit_rate"] is None:
                last["prefix_hit_rate"] = rate
            return True
        m = VLLM_SPEC.search(text)
        m = None if m is None else VLLM_SPEC_RATE.search(text, m.end())
        if m:
            v = _f(m["v"])
            acceptance = _check({"acceptance": None if v is None else (v / 100 if m["pct"] else v)})
            self.switch("vllm")
            self.staged.append(_row("vllm", where, **acceptance))
            return True
        return self._llama(text, where)

    def _open(self, tag: str, where: str) -> dict:
        if self.llama is None:
            self.llama, self.llama_tag = _row("llama.cpp", where), tag
        return self.llama

    def _llama(self, text: str, where: str) -> bool:
        """llama.cpp timing lines; several on one line are taken in order of position."""
        prompts = list(LLAMA_PROMPT.finditer(text))
        starts, ends = [m.start() for m in prompts], [m.end() for m in prompts]
        events = [(m.start(), "prompt", m) for m in prompts]
        for m in LLAMA_EVAL.finditer(text):
            i = bisect.bisect_right(starts, m.start()) - 1
            if i < 0 or m.start() >= ends[i]:  # not the tail of a "prompt eval time"
                events.append((m.start(), "eval", m))
        events += [(m.start(), "total", m) for m in LLAMA_TOTAL.finditer(text)]
        events += [(m.start(), "draft", m) for m in LLAMA_DRAFT.finditer(text)]
        if not events:
            if LLAMA_SLOT.search(text):  # a block's prefix on a line of its own: the next block starts
                self.switch("llama")
                self.flush_llama()
                self.closed_tag = None
                return True
            return bool(LLAMA_OTHER.search(text)) or bool(LLAMA_CHATTER.search(text))
        events.sort(key=lambda e: e[0])
        values = [timing(kind, m) for _, kind, m in events]  # every entry checked before any is used
        tag = _tag(text[:events[0][0]])
        self.switch("llama")
        if self.llama is not None and tag != self.llama_tag:  # another source's timings: no pairing across
            self.flush_llama()
        if self.closed_tag != tag:
            self.closed_tag = None
        for (_, kind, _), checked in zip(events, values, strict=True):
            if kind == "draft":
                rate = checked["acceptance"]
                last = self.last_row()
                if self.llama is None and self.closed_tag == tag and last is not None \
                        and last["engine"] == "llama.cpp" and last["acceptance"] is None:
                    last["acceptance"] = rate  # printed after the block's total time
                else:
                    self.draft = rate
            elif kind == "total":
                self.closed_tag = tag if self.flush_llama() else None
            else:
                half = "prompt_tokens" if kind == "prompt" else "output_tokens"
                if self.llama is not None and (self.llama[half] is not None or kind == "prompt"
                                               and self.llama["output_tokens"] is not None):
                    self.flush_llama()  # a new request starts
                self._open(tag, where).update(checked)
                self.closed_tag = None
        return True


def log_sources(paths: Iterable[str]) -> list[tuple[str, Iterator[str]]]:
    """Each log file with its lines, read as they are used; a file that is unreadable, not a regular file or not
    text is a one-line ScenarioError, found before any line is read."""
    paths = list(paths)
    for path in paths:
        check_text_file(path)
    return [(path, file_lines(path)) for path in paths]


def read_logs(sources: Iterable[tuple[str, Iterable[str]]], sink: Callable[[dict], None] | None = None) -> LogTable:
    """Parse (name, lines) sources; every line is read, whatever it holds. With ``sink``, each row is given to it
    as it is completed instead of being kept in ``rows``."""
    table = LogTable(sink=sink)
    for name, lines in sources:
        reader = _Reader(table)
        for number, raw in enumerate(lines, 1):
            table.lines += 1
            reason = None
            if isinstance(raw, LongLine) or len(raw) > MAX_LINE:
                ok, reason, text = False, f"line longer than {MAX_LINE:,} characters", raw[:160]
            else:
                text = LINE_PREFIX.sub("", ANSI.sub("", raw.rstrip("\r\n")), count=1)
                if not text.strip():
                    reader.blank()
                    continue
                try:
                    ok = reader.line(text, f"{name}:{number}")
                except OutOfRange as exc:
                    ok, reason = False, str(exc)
                except (ValueError, TypeError, OverflowError, ZeroDivisionError):
                    ok = False
            if ok:
                reader.commit()
                continue
            reader.failed()
            table.not_understood += 1
            if len(table.examples) < EXAMPLES:
                shown = "".join(c if c.isprintable() else "?" for c in text[:160])
                table.examples.append((name, number, shown, reason))
        reader.finish()
    table.close_last()
    return table
