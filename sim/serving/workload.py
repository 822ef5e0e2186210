"""Request workloads: the table of requests a run serves, and who sends them (sim.serving.queue replays it).

- ``sequential``: one request after another (a single closed-loop client with no think time);
- ``closed``: ``clients`` clients; each sends its next request ``think_s`` after its previous answer (or rejection);
  the requests may be split into ``runs`` back-to-back runs (a benchmark's repetitions): each run, the clients start
  together once every client has finished the previous one;
- ``open``: arrivals at ``rate_per_s``, Poisson (exponential gaps) or evenly spaced;
- ``trace``: replay a CSV of arrivals and lengths (the Azure LLM inference trace layout ``arrived_at,
  num_prefill_tokens, num_decode_tokens``, or this project's ``arrival_s, prompt_tokens, cached_tokens,
  output_tokens, acceptance``; without ``arrival_s`` the rows are sent one after another by a single client, as an
  engine log's requests were);
- ``agent``: ``clients`` concurrent sessions of ``turns`` turns; each turn's prompt is the whole earlier conversation
  (cached: the engine's prompt cache holds it) plus ``turn_tokens`` new tokens;
- ``chat``: ``clients`` closed-loop clients, each running sessions of ``turns`` turns back to back (``think_s``
  between turns); turn t's prompt is the session's whole conversation so far (its earlier prompts and answers) plus
  new user tokens, the prompt lengths drawn as for any request (``prompt_tokens``, ``prompt_tokens_mean`` or
  ``lengths``). Nothing of it is hand-set as cached: the history is a prefix the engine's cache may hold.

Shared prefixes: with ``system_prompt_tokens`` N, every prompt begins with one of ``system_prompts`` system prompts
of N tokens (each request draws one uniformly, a chat session once for all its turns; the draw comes after every
other, so the lengths and arrivals are those of the same workload without it). Each request carries its prefix
identity in :class:`RequestTable`'s ``prefix_segment`` and ``prefix_tokens``: two (segment id, tokens) pairs in
prompt order, the system prompt (ids 0 to K-1) and the chat session's history (ids K + session; its tokens the
conversation before this turn), -1 where there is none. Engines with a prefix cache (:mod:`sim.batching.prefix`)
find their hits there; the others see longer prompts.

Closed-loop, agent and chat requests have no arrival time in the table (NaN): the server sets it when the client
sends. Lengths are drawn here once per run, so the same seed gives the same requests whatever the engine does.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, replace

import numpy as np

from sim.config.serve import Serve
from sim.core.errors import ScenarioError
from sim.core.inputs import read_text

AZURE_COLUMNS = {"arrived_at": "arrival_s", "num_prefill_tokens": "prompt_tokens", "num_decode_tokens": "output_tokens"}
TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
OPTIONAL_COLUMNS = ("cached_tokens", "acceptance")
MAX_TOKENS = 10**8  # a trace's prompt token counts: no request is longer
MAX_OUTPUT_TOKENS = 10**7  # ... and its generated tokens (decoding 1e7 tokens already takes about a minute)
MAX_FILE_ROWS = 10**7  # lines of a trace or lengths table file (the shipped ones: at most 40,000)
MAX_FILE_BYTES = 256 * 2**20  # ... and its size (bytes; the shipped ones: at most 0.9 MB)
MAX_TABLE_ROWS = MAX_FILE_ROWS  # a lengths table is read whole


@dataclass(frozen=True)
class RequestTable:
    """One row per request, in sending order. Times in seconds, lengths in tokens."""

    arrival_s: np.ndarray  # float64; NaN: sent by a closed-loop client when it is ready
    prompt_tokens: np.ndarray  # int64, including the cached ones
    cached_tokens: np.ndarray  # int64: already in the engine's prompt cache (only the rest is prefilled)
    output_tokens: np.ndarray  # int64: the length the request would generate (before max_tokens)
    acceptance: np.ndarray  # float64: draft acceptance of this request; NaN: the model's
    client: np.ndarray  # int64: closed loop / agent: the client (session slot) sending it; -1: open loop
    run: np.ndarray | None = None  # int64: closed loop: the run it belongs to (clients start each run together)
    # shared prefixes, None without any: per request two (segment id, tokens) pairs in prompt order, column 0 the
    # system prompt, column 1 the chat session's history (tokens of the conversation before this turn); id -1: none.
    # int32 (16 bytes a request: a million requests take 16 MB)
    prefix_segment: np.ndarray | None = None  # int32, shape (n, 2)
    prefix_tokens: np.ndarray | None = None  # int32, shape (n, 2)

    def __len__(self) -> int:
        return int(self.prompt_tokens.size)

    @property
    def closed_loop(self) -> bool:
        return bool(len(self) and self.client[0] >= 0)


def output_lengths(sv: Serve, n: int, rng: np.random.Generator) -> np.ndarray:
    """Generation lengths (tokens): uniform on [min, max], or exponential with ``output_tokens_mean`` (>= 1)."""
    if sv.output_tokens_mean is not None:
        drawn = np.rint(rng.exponential(sv.output_tokens_mean, n))
        return np.clip(drawn, 1, MAX_OUTPUT_TOKENS).astype(np.int64)
    return rng.integers(sv.output_tokens_min, sv.output_tokens_max + 1, size=n).astype(np.int64)


def build_table(sv: Serve, rng: np.random.Generator) -> RequestTable:
    """The requests of ``sv``, their shared prefixes last (see the module docstring)."""
    table = _requests(sv, rng)
    w = sv.workload
    if w.system_prompt_tokens and w.kind != "chat":
        table = with_system_prompt(table, w.system_prompt_tokens, w.system_prompts, rng)
    return table


def _requests(sv: Serve, rng: np.random.Generator) -> RequestTable:
    w = sv.workload
    n = sv.requests
    if w.kind == "trace":
        assert w.trace is not None
        return read_trace(w.trace, n, w.time_scale)
    if w.lengths is not None:
        prompt, out = sampled_lengths(w.lengths, n, w.lengths_max_tokens, rng)
    else:
        out = output_lengths(sv, n, rng)
        prompt = np.full(n, sv.prompt_tokens, dtype=np.int64) if sv.prompt_tokens_mean is None \
            else np.clip(np.rint(rng.exponential(sv.prompt_tokens_mean, n)), 0, MAX_TOKENS).astype(np.int64)
    cached = np.minimum(np.full(n, sv.cached_tokens, dtype=np.int64), prompt)
    nan = np.full(n, np.nan)
    if w.kind == "open":
        assert w.rate_per_s is not None
        gaps = rng.exponential(1.0 / w.rate_per_s, n) if w.arrival_law == "poisson" else np.full(n, 1 / w.rate_per_s)
        arrival = np.cumsum(gaps) - gaps[0]  # the first request arrives at 0
        return RequestTable(arrival, prompt, cached_tokens=cached, output_tokens=out, acceptance=nan,
                            client=np.full(n, -1, dtype=np.int64))
    clients = 1 if w.kind == "sequential" else w.clients
    runs = min(w.runs, n)
    index = np.arange(n, dtype=np.int64)
    run = index * runs // n  # exactly ``runs`` runs, none empty, their sizes within one request of each other
    client = (index - np.searchsorted(run, run)) % clients  # in each run, client c sends its requests c, c + clients..
    if w.kind == "agent":
        answered = out if sv.max_tokens is None else np.minimum(out, sv.max_tokens)  # what the next turn carries
        prompt, cached = agent_contexts(answered, client, w.turns, w.turn_tokens, sv.prompt_tokens)
    if w.kind == "chat":
        answered = out if sv.max_tokens is None else np.minimum(out, sv.max_tokens)
        segment, tokens = chat_sessions(prompt, answered, client, w.turns, w.system_prompt_tokens,
                                        w.system_prompts, rng)
        prompt = np.minimum(w.system_prompt_tokens + tokens[:, 1].astype(np.int64) + prompt, MAX_TOKENS)
        cached = np.minimum(np.full(n, sv.cached_tokens, dtype=np.int64), prompt)
        return RequestTable(nan, prompt, cached_tokens=cached, output_tokens=out, acceptance=nan, client=client,
                            run=run, prefix_segment=segment, prefix_tokens=tokens)
    return RequestTable(nan, prompt, cached_tokens=cached, output_tokens=out, acceptance=nan, client=client, run=run)


def with_system_prompt(table: RequestTable, tokens: int, prompts: int, rng: np.random.Generator) -> RequestTable:
    """``table`` with a system prompt of ``tokens`` before every prompt, each request's drawn uniformly from
    ``prompts`` distinct ones (no draw for a single one); the cached tokens stay those given."""
    n = len(table)
    which = rng.integers(0, prompts, size=n).astype(np.int32) if prompts > 1 else np.zeros(n, dtype=np.int32)
    segment = np.stack([which, np.full(n, -1, dtype=np.int32)], axis=1)
    length = np.stack([np.full(n, tokens, dtype=np.int32), np.zeros(n, dtype=np.int32)], axis=1)
    prompt = np.minimum(table.prompt_tokens + tokens, MAX_TOKENS)
    return replace(table, prompt_tokens=prompt, prefix_segment=segment, prefix_tokens=length)


def chat_sessions(user: np.ndarray, answered: np.ndarray, client: np.ndarray, turns: int, system_tokens: int,
                  system_prompts: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The prefix identity of chat turns (``prefix_segment``, ``prefix_tokens`` of :class:`RequestTable`): each
    client runs sessions of ``turns`` turns back to back, in sending order; a turn's history is everything its
    session said before it (``user`` tokens and ``answered`` tokens of each earlier turn). Sessions are numbered as
    they start; each draws its system prompt (when there are several, after every other draw)."""
    n = user.size
    history = np.zeros(n, dtype=np.int64)
    session = np.zeros(n, dtype=np.int64)
    clients = int(client.max()) + 1 if n else 0
    turn_of = np.zeros(clients, dtype=np.int64)
    context = np.zeros(clients, dtype=np.int64)
    current = np.zeros(clients, dtype=np.int64)
    started = 0
    for i, c in enumerate(client.tolist()):  # one pass per request (not per token)
        if turn_of[c] % turns == 0:
            context[c] = 0
            current[c] = started
            started += 1
        history[i] = min(context[c], MAX_TOKENS - system_tokens)  # no longer than a prompt may be
        session[i] = current[c]
        context[c] += user[i] + answered[i]
        turn_of[c] += 1
    has_system = system_tokens > 0
    drawn = rng.integers(0, system_prompts, size=started) if has_system and system_prompts > 1 \
        else np.zeros(started, dtype=np.int64)
    first = np.where(has_system, drawn[session], -1) if n else np.zeros(0, dtype=np.int64)
    segment = np.stack([first, system_prompts + session], axis=1).astype(np.int32)
    length = np.stack([np.full(n, system_tokens, dtype=np.int64), history], axis=1).astype(np.int32)
    return segment, length


def sampled_lengths(path: str, n: int, max_tokens: int | None, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) tokens of ``n`` requests drawn with replacement from the rows of a lengths table (read and
    checked as a trace without arrival times); with ``max_tokens``, the prompt is shortened so that prompt + output
    fit and the output keeps at least one token."""
    table = read_trace(path, MAX_TABLE_ROWS, key_path="serve.workload.lengths", lengths_only=True)
    rows = rng.integers(0, len(table), size=n)
    prompt, out = table.prompt_tokens[rows].copy(), table.output_tokens[rows].copy()
    if max_tokens is not None:
        out = np.minimum(out, max_tokens - 1)
        prompt = np.clip(np.minimum(prompt, max_tokens - out), 0, None)
    return prompt, out


def agent_contexts(out: np.ndarray, client: np.ndarray, turns: int, turn_tokens: int, first_prompt: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and cached tokens of agent turns: each client runs sessions of ``turns`` turns back to back; a turn's
    prompt is the whole earlier conversation (cached) plus ``turn_tokens`` new tokens; a session's first turn also
    carries ``first_prompt`` tokens (system prompt, task) and nothing cached."""
    prompt = np.zeros(out.size, dtype=np.int64)
    cached = np.zeros(out.size, dtype=np.int64)
    turn_of = np.zeros(int(client.max()) + 1 if client.size else 0, dtype=np.int64)
    context = np.zeros_like(turn_of)
    for i, c in enumerate(client):  # one pass per request (not per token)
        if turn_of[c] % turns == 0:
            context[c] = 0
        new = turn_tokens + (first_prompt if turn_of[c] % turns == 0 else 0)
        cached[i] = max(min(context[c], MAX_TOKENS - new), 0)  # a conversation longer than a prompt keeps its tail
        prompt[i] = cached[i] + new
        context[c] = prompt[i] + out[i]
        turn_of[c] += 1
    return prompt, cached


def read_trace(path: str, limit: int, time_scale: float = 1.0, key_path: str = "serve.workload.trace",
               lengths_only: bool = False) -> RequestTable:
    """The first ``limit`` rows of a trace CSV (``lengths_only``: a table of lengths, arrival times not needed);
    errors name the file, the column and what was expected.

    A bad cell's key path is ``row N.column``, N being its line in the file (comment and blank lines counted).
    """
    text = _read_table_text(path, key_path)
    df = _plain_numeric_csv(text, limit) or _pandas_csv(text, path, key_path)
    rows = _data_lines(text, len(df))
    if df.index_columns:  # pandas took the extra leading fields of the rows as an index
        raise ScenarioError(path, f"row {rows[0] if rows else 2}", "no more fields than the header has columns")
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
        return f"row {rows[row]}.{shown.get(name, name)}"

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
    out = np.maximum(cols["output_tokens"], 1)
    cached = cols.get("cached_tokens", np.zeros(n, dtype=np.int64))
    prompt = cols["prompt_tokens"]
    if np.any(cached > prompt):
        row = int(np.flatnonzero(cached > prompt)[0])
        raise ScenarioError(path, key(row, "cached_tokens"), f"at most {shown.get('prompt_tokens', 'prompt_tokens')}")
    if sequential:
        return RequestTable(np.full(n, np.nan), prompt, cached_tokens=cached, output_tokens=out,
                            acceptance=cols.get("acceptance", np.full(n, np.nan)), client=np.zeros(n, dtype=np.int64),
                            run=np.zeros(n, dtype=np.int64))
    return RequestTable(arrival, prompt, cached_tokens=cached, output_tokens=out,
                        acceptance=cols.get("acceptance", np.full(n, np.nan)), client=np.full(n, -1, dtype=np.int64))


def _read_table_text(path: str, key_path: str) -> str:
    """The text of a trace or lengths table, read through the one input layer (:func:`sim.core.inputs.read_text`: a
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
                 plain: bool = False) -> None:
        self.columns, self.cells, self.rows = columns, cells, rows
        self.index_columns = index_columns  # the rows had more fields than the header (pandas made them an index)
        self.plain = plain  # every cell is a plain number (no empty or odd cells)

    def __len__(self) -> int:
        return self.rows

    def head(self, n: int) -> _Cells:
        return _Cells(self.columns, [c[:n] for c in self.cells], min(n, self.rows), self.index_columns, self.plain)

    def column(self, name: str) -> list:
        return self.cells[self.columns.index(name)]

    def numbers(self, name: str) -> np.ndarray:
        """The column as floats, NaN where a cell is empty or not a number."""
        if self.plain:
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
    row = re.compile(_PLAIN_NUMBER + ("," + _PLAIN_NUMBER) * fields)
    if not all(row.fullmatch(line) for line in first):
        return None
    columns = [list(c) for c in zip(*(line.split(",") for line in first), strict=True)] if first \
        else [[] for _ in header]
    return _Cells(header, columns, len(data), plain=True)


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
