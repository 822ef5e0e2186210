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

from dataclasses import dataclass, replace

import numpy as np

from sim.config.serve import Serve
from sim.formats.request_traces import MAX_FILE_ROWS, MAX_OUTPUT_TOKENS, MAX_TOKENS, read_trace_rows

MAX_TABLE_ROWS = MAX_FILE_ROWS  # a lengths table is read whole (rows)


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
    """The first ``limit`` requests of a trace CSV (read by :func:`sim.formats.request_traces.read_trace_rows`;
    ``lengths_only``: a table of lengths, arrival times not needed); every request generates at least one token.
    Without arrival times the rows are sent one after another by a single client."""
    rows = read_trace_rows(path, limit, time_scale, key_path, lengths_only)
    n = rows.prompt_tokens.size
    out = np.maximum(rows.output_tokens, 1)
    if rows.arrival_s is None:
        return RequestTable(np.full(n, np.nan), rows.prompt_tokens, cached_tokens=rows.cached_tokens,
                            output_tokens=out, acceptance=rows.acceptance, client=np.zeros(n, dtype=np.int64),
                            run=np.zeros(n, dtype=np.int64))
    return RequestTable(rows.arrival_s, rows.prompt_tokens, cached_tokens=rows.cached_tokens, output_tokens=out,
                        acceptance=rows.acceptance, client=np.full(n, -1, dtype=np.int64))
