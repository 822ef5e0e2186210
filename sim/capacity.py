"""The most load a served scenario takes while meeting latency goals (``sim capacity``).

A goal is a statistic of the served requests and a bound: ``ttft_p99<1s``, ``tpot_p99<50ms``, ``e2e_p50<=20s``,
``ttft_mean<300ms``. The statistics are ``ttft`` (first token - sent), ``tpot`` (decode seconds per output token
after the first), ``e2e`` (end - sent) and ``queue_wait``, each as ``p50``, ``p90``, ``p95``, ``p99``, ``mean`` or
``max``; and ``rejected_share`` (requests rejected or cancelled, fraction).

The load is the open loop's arrival rate (``serve.workload.rate_per_s``, requests/s) or the closed loop's users
(``serve.workload.clients``). For each seed the search brackets the capacity by doubling or halving the load, then
bisects (to ``rtol`` of the rate, or to one user) on that seed's own runs: every load sees the same random stream
(common random numbers, so the comparison between two loads is paired). The answer is the median of the seeds'
capacities, with their lowest and highest as its spread.

Statistics are taken in steady state: over the requests sent between ``WINDOW`` quantiles of the send times (the
first requests meet an empty engine, the last ones a draining one), and for a closed loop not before its users'
ramp ends (``serve.workload.ramp_s``). At the answer, the goodput is the rate of requests in that window that meet
every goal's bound themselves (their own TTFT, TPOT, e2e below each bound; DistServe's definition), per second.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from sim.core.errors import ScenarioError

STATISTICS = ("ttft", "tpot", "e2e", "queue_wait")
AGGREGATES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "mean": None, "max": 100.0}
UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
WINDOW = (0.1, 0.9)  # quantiles of the send times bounding the steady part of a run
MAX_DOUBLINGS = 24  # bracketing steps at most (a factor of 16 million)
MIN_RATE = 1e-4  # requests/s: below it no rate meets the goals
_GOAL = re.compile(r"^\s*([a-z0-9_]+?)(?:_(p50|p90|p95|p99|mean|max))?\s*(<=|<)\s*([0-9.eE+-]+)\s*([a-z]*)\s*$")


@dataclass(frozen=True)
class Goal:
    """A bound on one statistic of a run's steady-state requests (seconds, or a fraction)."""

    text: str
    statistic: str  # ttft, tpot, e2e, queue_wait or rejected_share
    aggregate: str  # p50 ... max, mean ("" for rejected_share)
    bound: float  # seconds (a latency) or a fraction
    inclusive: bool

    @property
    def key(self) -> str:
        return f"{self.statistic}_{self.aggregate}" if self.aggregate else self.statistic

    def met(self, value: float) -> bool:
        return value <= self.bound if self.inclusive else value < self.bound


def parse_goal(text: str) -> Goal:
    """``ttft_p99<1s`` -> a :class:`Goal`; a one-line error naming what was expected otherwise."""
    m = _GOAL.match(text.lower())
    expected = (f"expected STATISTIC_AGGREGATE<VALUE[UNIT] such as 'ttft_p99<1s': statistics "
                f"{', '.join(STATISTICS)} with {', '.join(AGGREGATES)}, or rejected_share<FRACTION; units s, ms, us")
    if not m:
        raise ScenarioError("--goal", text, expected)
    statistic, aggregate, op, number, unit = m.groups()
    try:
        value = float(number)
    except ValueError:
        raise ScenarioError("--goal", text, expected) from None
    if statistic == "rejected_share":
        if aggregate or unit or not 0 <= value <= 1:
            raise ScenarioError("--goal", text, "rejected_share takes a fraction from 0 to 1 and no unit")
        return Goal(text, statistic, "", value, op == "<=")
    if statistic not in STATISTICS or aggregate is None or unit not in UNITS:
        raise ScenarioError("--goal", text, expected)
    seconds = value * UNITS[unit]
    if not (math.isfinite(seconds) and seconds > 0):
        raise ScenarioError("--goal", text, "expected a positive, finite bound")
    return Goal(text, statistic, aggregate, seconds, op == "<=")


@dataclass(frozen=True)
class Outcome:
    """One run's steady-state statistics at one load."""

    load: float
    seed: int
    values: dict[str, float]  # goal key -> value
    met: bool
    goodput_per_s: float  # requests/s in the window meeting every goal's bound themselves
    requests_per_s: float  # requests/s completed in the window
    throughput_tok_s: float  # output tokens/s of the window's requests
    window_requests: int


def steady_outcome(columns: dict[str, np.ndarray], goals: Sequence[Goal], load: float, seed: int,
                   ramp_s: float = 0.0) -> Outcome:
    """The goals' statistics over the steady part of a run (its requests' columns, as :mod:`sim.serving.served`
    stores them: sent_s, ttft_s, end_s, output_tokens, decode_s, queue_wait_s, end)."""
    sent = columns["sent_s"]
    lo, hi = np.nanquantile(sent, WINDOW) if len(sent) else (0.0, 0.0)
    lo = max(lo, ramp_s)
    inside = (sent >= lo) & (sent <= hi)
    if inside.sum() < 2:
        inside = np.isfinite(sent)
    end = columns["end"][inside]
    served = np.isin(end, ("stop", "length"))
    ttft = columns["ttft_s"][inside][served]
    e2e = (columns["end_s"] - columns["sent_s"])[inside][served]
    out = columns["output_tokens"][inside][served]
    decode = columns["decode_s"][inside][served]
    tpot = np.where(out > 1, decode / np.maximum(out - 1, 1), np.nan)
    wait = columns["queue_wait_s"][inside][served]
    per_request = {"ttft": ttft, "tpot": tpot, "e2e": e2e, "queue_wait": wait}
    values: dict[str, float] = {}
    ok_each = np.ones(len(ttft), dtype=bool)
    for g in goals:
        if g.statistic == "rejected_share":
            values[g.key] = float(1 - served.mean()) if len(end) else 0.0
            continue
        a = per_request[g.statistic]
        a_ok = a[np.isfinite(a)]
        q = AGGREGATES[g.aggregate]
        values[g.key] = (float(a_ok.mean()) if q is None else float(np.percentile(a_ok, q))) if a_ok.size \
            else math.inf
        ok_each &= ~np.isfinite(a) | (a <= g.bound if g.inclusive else a < g.bound)
    met = all(g.met(values[g.key]) for g in goals) and bool(served.any())
    span = float(hi - lo) if hi > lo else math.nan
    rate = float(served.sum()) / span if span > 0 else math.nan
    return Outcome(load, seed, values, met, float(ok_each.sum()) / span if span > 0 else math.nan, rate,
                   float(out.sum()) / span if span > 0 else math.nan, int(inside.sum()))


@dataclass
class SeedSearch:
    """One seed's search: every load run, and the highest that met the goals."""

    seed: int
    runs: list[Outcome] = field(default_factory=list)
    capacity: float = 0.0
    bounded: bool = True  # a failing load was found above it


Evaluate = Callable[[float, int], Outcome]


def search_seed(evaluate: Evaluate, start: float, seed: int, integer: bool, rtol: float,
                ceiling: float) -> SeedSearch:
    """Bracket then bisect the highest load ``evaluate`` meets the goals at, for one seed."""
    s = SeedSearch(seed)
    memo: dict[float, bool] = {}

    def ok(load: float) -> bool:
        if load not in memo:
            o = evaluate(load, seed)
            s.runs.append(o)
            memo[load] = o.met
        return memo[load]

    floor = 1.0 if integer else MIN_RATE
    load = max(floor, round(start) if integer else start)
    if ok(load):
        lo, hi = load, None
        for _ in range(MAX_DOUBLINGS):
            nxt = min(load * 2, ceiling)
            if nxt <= load:
                break
            load = nxt
            if not ok(load):
                hi = load
                break
            lo = load
        if hi is None:
            s.capacity, s.bounded = lo, False
            return s
    else:
        hi, lo = load, None
        for _ in range(MAX_DOUBLINGS):
            load = max(floor, math.floor(load / 2) if integer else load / 2)
            if ok(load):
                lo = load
                break
            hi = load
            if load <= floor:
                break
        if lo is None:
            s.capacity = 0.0
            return s
    while (hi - lo > 1) if integer else (hi - lo > rtol * lo):
        mid = (lo + hi) // 2 if integer else math.sqrt(lo * hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    s.capacity = lo
    return s


@dataclass
class Capacity:
    """The answer over every seed: the median capacity, its spread, and the runs at it."""

    axis: str  # rate_per_s or clients
    goals: list[Goal]
    searches: list[SeedSearch]
    at_answer: list[Outcome]
    capacity: float
    low: float
    high: float
    bounded: bool

    @property
    def runs(self) -> int:
        return sum(len(s.runs) for s in self.searches)


def find_capacity(evaluate: Evaluate, goals: Sequence[Goal], seeds: Sequence[int], start: float, axis: str,
                  rtol: float = 0.02, ceiling: float = 1e6) -> Capacity:
    """Search every seed, then run each seed at the median capacity for the goodput there."""
    integer = axis == "clients"
    searches = [search_seed(evaluate, start, seed, integer, rtol, ceiling) for seed in seeds]
    caps = np.array([s.capacity for s in searches])
    answer = float(np.median(caps))
    if integer:
        answer = float(math.floor(answer))
    at: list[Outcome] = []
    for s in searches if answer > 0 else ():  # a seed that already ran the answer's load is not run again
        done = next((o for o in s.runs if o.load == answer), None)
        if done is None:
            done = evaluate(answer, s.seed)
            s.runs.append(done)
        at.append(done)
    return Capacity(axis, list(goals), searches, at, answer, float(caps.min()), float(caps.max()),
                    all(s.bounded for s in searches))


def axis_of(kind: str, given: str | None, source: str) -> str:
    """The load a workload of ``kind`` is searched over: ``rate_per_s`` (open loop) or ``clients`` (closed)."""
    natural = {"open": "rate_per_s", "closed": "clients", "agent": "clients", "chat": "clients"}.get(kind)
    axis = given or natural
    if axis is None:
        raise ScenarioError(source, "serve.workload.kind", f"{kind!r}: a capacity is searched over an open loop's "
                            "rate_per_s or a closed loop's clients; expected kind open, closed, agent or chat")
    if axis == "rate_per_s" and kind != "open" or axis == "clients" and kind not in ("closed", "agent", "chat"):
        raise ScenarioError(source, "serve.workload.kind", f"{kind!r} has no {axis} to search over")
    return axis


def scenario_evaluator(path: str, overrides: Sequence, goals: Sequence[Goal], axis: str
                       ) -> tuple[Evaluate, float, float, float]:
    """(evaluate(load, seed), the scenario's own load, its closed-loop ramp, the highest load worth trying: a
    closed loop's users at most its requests) for the scenario at ``path``."""
    from sim.config.load import load_scenario
    from sim.runner import run

    base, _ = load_scenario(path, overrides)
    assert base.serve is not None
    start = float(base.serve.workload.rate_per_s or 1.0) if axis == "rate_per_s" else float(base.serve.workload.clients)
    ramp = float(getattr(base.serve.workload, "ramp_s", 0.0) or 0.0)

    def evaluate(load: float, seed: int) -> Outcome:
        value = float(load) if axis == "rate_per_s" else int(load)
        scn, _ = load_scenario(path, [*overrides, (f"serve.workload.{axis}", value)])
        res = run(scn, seed)
        if res.serving is None:
            raise ScenarioError(path, "serve", "nothing is served: a capacity needs a serve section")
        return steady_outcome(res.serving.requests.columns, goals, load, seed, ramp)

    ceiling = float(base.serve.requests) if axis == "clients" else 1e6
    return evaluate, start, ramp, ceiling
