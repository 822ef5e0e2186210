"""Request workloads: the table of requests a run serves, and who sends them (sim.server replays it).

- ``sequential``: one request after another (a single closed-loop client with no think time);
- ``closed``: ``clients`` clients; each sends its next request ``think_s`` after its previous answer (or rejection);
  the requests may be split into ``runs`` back-to-back runs (a benchmark's repetitions): each run, the clients start
  together once every client has finished the previous one;
- ``open``: arrivals at ``rate_per_s``, Poisson (exponential gaps) or evenly spaced;
- ``trace``: replay a CSV of arrivals and lengths (the Azure LLM inference trace layout ``arrived_at,
  num_prefill_tokens, num_decode_tokens``, or this project's ``arrival_s, prompt_tokens, cached_tokens,
  output_tokens, acceptance``);
- ``agent``: ``clients`` concurrent sessions of ``turns`` turns; each turn's prompt is the whole earlier conversation
  (cached: the engine's prompt cache holds it) plus ``turn_tokens`` new tokens.

Closed-loop and agent requests have no arrival time in the table (NaN): the server sets it when the client sends.
Lengths are drawn here once per run, so the same seed gives the same requests whatever the engine does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import ScenarioError
from .scenario import Serve

AZURE_COLUMNS = {"arrived_at": "arrival_s", "num_prefill_tokens": "prompt_tokens", "num_decode_tokens": "output_tokens"}
TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")


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

    def __len__(self) -> int:
        return int(self.prompt_tokens.size)

    @property
    def closed_loop(self) -> bool:
        return bool(len(self) and self.client[0] >= 0)


def output_lengths(sv: Serve, n: int, rng: np.random.Generator) -> np.ndarray:
    """Generation lengths (tokens): uniform on [min, max], or exponential with ``output_tokens_mean`` (>= 1)."""
    if sv.output_tokens_mean is not None:
        return np.maximum(1, np.rint(rng.exponential(sv.output_tokens_mean, n))).astype(np.int64)
    return rng.integers(sv.output_tokens_min, sv.output_tokens_max + 1, size=n).astype(np.int64)


def build_table(sv: Serve, rng: np.random.Generator) -> RequestTable:
    w = sv.workload
    n = sv.requests
    if w.kind == "trace":
        assert w.trace is not None
        return read_trace(w.trace, n, w.time_scale)
    out = output_lengths(sv, n, rng)
    prompt = np.full(n, sv.prompt_tokens, dtype=np.int64) if sv.prompt_tokens_mean is None \
        else np.rint(rng.exponential(sv.prompt_tokens_mean, n)).astype(np.int64)
    cached = np.minimum(np.full(n, sv.cached_tokens, dtype=np.int64), prompt)
    nan = np.full(n, np.nan)
    if w.kind == "open":
        assert w.rate_per_s is not None
        gaps = rng.exponential(1.0 / w.rate_per_s, n) if w.arrival_law == "poisson" else np.full(n, 1 / w.rate_per_s)
        arrival = np.cumsum(gaps) - gaps[0]  # the first request arrives at 0
        return RequestTable(arrival, prompt, cached, out, nan, np.full(n, -1, dtype=np.int64))
    clients = 1 if w.kind == "sequential" else w.clients
    per_run = -(-n // w.runs)
    index = np.arange(n, dtype=np.int64)
    client = index % per_run % clients  # in each run, client c sends its requests c, c + clients, ...
    if w.kind == "agent":
        prompt, cached = agent_contexts(out, client, w.turns, w.turn_tokens, sv.prompt_tokens)
    return RequestTable(nan, prompt, cached, out, nan, client, index // per_run)


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
        cached[i] = context[c]
        prompt[i] = context[c] + new
        context[c] = prompt[i] + out[i]
        turn_of[c] += 1
    return prompt, cached


def read_trace(path: str, limit: int, time_scale: float = 1.0) -> RequestTable:
    """The first ``limit`` rows of a trace CSV; errors name the file, the column and what was expected."""
    try:
        df = pd.read_csv(path, comment="#")
    except FileNotFoundError:
        raise ScenarioError(path, "serve.workload.trace", "file not found") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ScenarioError(path, "serve.workload.trace", f"not a readable CSV ({str(exc).splitlines()[0]})") from None
    df = df.rename(columns=AZURE_COLUMNS)
    missing = [c for c in TRACE_COLUMNS if c not in df.columns]
    if missing:
        raise ScenarioError(path, missing[0], "a column of the trace (arrived_at, num_prefill_tokens, "
                            "num_decode_tokens, or arrival_s, prompt_tokens, output_tokens)")
    df = df.head(limit)
    if df.empty:
        raise ScenarioError(path, "serve.workload.trace", "no requests in the trace")
    cols: dict[str, np.ndarray] = {}
    for name, kind in (("arrival_s", float), ("prompt_tokens", int), ("output_tokens", int),
                       ("cached_tokens", int), ("acceptance", float)):
        if name not in df.columns:
            continue
        values = pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
        if name == "acceptance":
            bad = np.flatnonzero(~((values >= 0) & (values <= 1)) & ~np.isnan(values))
        if bad.size:
            row = int(bad[0])
            raise ScenarioError(path, f"row {row + 2}.{name}", f"bad value {df[name].iloc[row]!r}: expected a "
                                + ("fraction in [0, 1]" if name == "acceptance" else "non-negative number"))
        cols[name] = values.astype(np.int64) if kind is int else values
    n = len(df)
    arrival = cols["arrival_s"] * time_scale
    if np.any(np.diff(arrival) < 0):
        row = int(np.flatnonzero(np.diff(arrival) < 0)[0]) + 1
        raise ScenarioError(path, f"row {row + 2}.arrival_s", "arrival times in non-decreasing order")
    out = np.maximum(cols["output_tokens"], 1)
    cached = cols.get("cached_tokens", np.zeros(n, dtype=np.int64))
    prompt = cols["prompt_tokens"]
    if np.any(cached > prompt):
        row = int(np.flatnonzero(cached > prompt)[0])
        raise ScenarioError(path, f"row {row + 2}.cached_tokens", "at most prompt_tokens")
    return RequestTable(arrival, prompt, cached, out, cols.get("acceptance", np.full(n, np.nan)),
                        np.full(n, -1, dtype=np.int64))
