"""Scenario schema of a served workload: requests, their lengths and arrivals, admission."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, model_validator

from sim.config.base import MAX_TOK_S, MIN_TOK_S, Strict, input_file

MAX_TOTAL_TOKENS = 10**10  # default serve.max_total_tokens: simulated tokens a scenario may ask for


class Workload(Strict):
    """Where requests come from (sim.serving.workload)."""

    kind: Literal["sequential", "closed", "open", "trace", "agent", "chat"] = Field(
        "sequential", description="sequential: one request after another; closed: `clients` clients, each sending "
        "its next request `think_s` after its last answer; open: arrivals at `rate_per_s`; trace: replay a CSV; "
        "agent: `clients` sessions whose context grows turn by turn (hand-set as cached); chat: `clients` "
        "closed-loop clients running sessions of `turns` turns, each turn's prompt resending the whole conversation "
        "so far plus new user tokens (the prompt lengths), its hits left to the engine's prefix cache.")
    clients: int = Field(1, gt=0, le=100_000, description="Closed-loop clients, or concurrent agent or chat sessions.")
    think_s: float = Field(
        0.0, ge=0, le=1e9, description="Mean time between an answer and the client's next request (s).")
    think_law: Literal["fixed", "exponential"] = Field("fixed", description="Law of the think time.")
    runs: int = Field(
        1, gt=0, description="Closed loop: the requests are sent in this many back-to-back runs; each run the clients "
        "start together (a benchmark's repetitions).")
    ramp_s: float = Field(
        0.0, ge=0, le=1e7, description="Closed loop: the clients' first requests spread evenly over this many "
        "seconds (client c of N starts at c x ramp_s / N), as a load generator ramps its users up; 0: all at once.")
    rate_per_s: float | None = Field(None, ge=MIN_TOK_S, le=MAX_TOK_S,
        description="Open loop: mean arrival rate (requests/s).")
    arrival_law: Literal["poisson", "uniform"] = Field(
        "poisson", description="Open loop: poisson (exponential gaps) or uniform (evenly spaced).")
    trace: str | None = input_file(
        "Trace CSV (relative to the scenario file): columns arrived_at (s), num_prefill_tokens, "
        "num_decode_tokens (Azure 2023 layout), optional cached_tokens and acceptance; or arrival_s, prompt_tokens, "
        "cached_tokens, output_tokens, acceptance.")
    time_scale: float = Field(1.0, ge=1e-6, le=1e6,
        description="Trace: arrival times multiplied by this (<1: more load).")
    lengths: str | None = input_file(
        "Not a trace: each request's prompt and output lengths drawn (with replacement) from the "
        "rows of this CSV (relative to the scenario file): num_prefill_tokens, num_decode_tokens (Azure and Vidur "
        "layout) or prompt_tokens, output_tokens; other columns ignored.")
    lengths_max_tokens: int | None = Field(
        None, gt=1, le=100_000_000, description="With lengths: prompt + output at most this many tokens, the prompt "
        "shortened to fit (as Vidur caps its traces); at least one output token.")
    turn_tokens: int = Field(
        2000, gt=0, le=10_000_000, description="Agent: new prompt tokens per turn (tool output, user text).")
    turns: int = Field(8, gt=0, le=1_000_000, description="Agent, chat: turns per session.")
    system_prompt_tokens: int = Field(
        0, ge=0, le=10_000_000, description="A shared system prompt of this many tokens put before every prompt "
        "(the prompt lengths drawn, given or replayed are what follows it); the engine's prefix cache may hold it "
        "(tokens). 0: none.")
    system_prompts: int = Field(
        1, gt=0, le=1_000_000, description="Distinct system prompts of system_prompt_tokens each; every request "
        "(chat: every session) draws one uniformly.")

    @model_validator(mode="after")
    def _shared_prefix(self) -> Workload:
        if self.system_prompt_tokens and self.kind == "agent":
            raise ValueError("system_prompt_tokens: not with kind agent, whose context is hand-set as cached; "
                             "kind chat sends sessions whose history and system prompt the prefix cache holds")
        if self.system_prompts > 1 and not self.system_prompt_tokens:
            raise ValueError(f"system_prompts: {self.system_prompts} system prompts of no tokens: set "
                             "system_prompt_tokens too")
        return self


class Admission(Strict):
    """What the engine does with requests it cannot start at once. Default: unbounded FIFO, rejects nothing."""

    queue_limit: NonNegativeInt | None = Field(
        None, description="Requests that may wait; an arrival finding it full is rejected. Default: unbounded.")
    timeout_s: PositiveFloat | None = Field(
        None, description="A request still waiting after this long is cancelled (s). Default: never.")


class Serve(Strict):
    """Requests served by a machine's engine: where they come from, their lengths, and admission."""

    machine: str = Field(description="Machine whose engine serves the requests.")
    requests: int = Field(100, gt=0, le=1_000_000, description="Number of requests (trace: its first rows).")
    output_tokens_min: int = Field(
        150, gt=0, le=10_000_000, description="Shortest generation (tokens); lengths are uniform.")
    output_tokens_max: int = Field(260, gt=0, le=10_000_000, description="Longest generation (tokens).")
    output_tokens_mean: PositiveFloat | None = Field(
        None, le=1e6, description="If set, lengths are exponential with this mean (tokens, at least 1, at most 1e6) "
        "instead of uniform.")
    prompt_tokens: int = Field(26, ge=0, le=100_000_000, description="Prompt tokens of each request.")
    prompt_tokens_mean: PositiveFloat | None = Field(
        None, le=1e7, description="If set, prompt lengths are exponential with this mean (tokens, at most 1e7) "
        "instead of fixed.")
    cached_tokens: int = Field(0, ge=0, description="Of those, tokens already in the engine's prompt cache.")
    max_tokens: int | None = Field(
        None, gt=0, le=10_000_000, description="Generation cap; a request that reaches it ends 'length'.")
    request_overhead_s: float = Field(
        0.0, ge=0, le=1e9, description="Client, HTTP and tokenizer time before a request reaches the engine queue "
        "(s); part of TTFT, not GPU time.")
    max_total_tokens: int = Field(
        MAX_TOTAL_TOKENS, gt=0, le=10**15, description="Most tokens (prompt + output, summed over the requests) the "
        "scenario may ask to simulate; a larger workload is refused before it runs (days of wall time). Raise it "
        "when you mean it.")
    workload: Workload = Workload()
    admission: Admission = Admission()
    fidelity: Literal["counts", "lookups"] = Field(
        "counts", description="counts: sample distinct experts per layer-step (fast); lookups: every expert lookup.")

    @model_validator(mode="after")
    def _chat_clients(self) -> Serve:
        per_run = -(-self.requests // min(self.workload.runs, self.requests))  # the largest run
        if self.workload.kind == "chat" and self.workload.clients > per_run:
            raise ValueError(f"workload.clients: {self.workload.clients} chat clients but at most {per_run} requests "
                             "in a run: the others would never send anything (fewer clients or more requests)")
        return self
