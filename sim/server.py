"""A serving engine under load (FIELD_NOTES section 3): arrivals, admission, a queue, decode slots sharing one GPU.

Life of a request: it is sent (open loop: at its arrival time; closed loop: when its client is ready), reaches the
engine after ``request_overhead_s`` (HTTP, tokenizer), is admitted or rejected (``queue_limit``), waits FIFO for a
free decode slot (cancelled after ``timeout_s``), prefills its new tokens, decodes, and ends ``stop`` (or
``length`` at ``max_tokens``).

The engine has ``parallel`` slots. Active slots take turns on the GPU and its link: each progresses at ``1 / k`` of
the GPU when ``k`` are active (processor sharing), so aggregate throughput is that of one slot with the slots' smaller
caches; with one slot it is a FIFO single server. Each request's GPU work (prefill + decode with its slot's share of
the expert cache) does not depend on what else runs, so it is sampled for all requests up front, vectorised
(:mod:`sim.decode_batch`); the event simulation (simpy) only moves requests through arrivals, the queue and the
slots: a handful of events per request, none per token. With ``batching`` one step serves every active slot instead
(:mod:`sim.batching`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import simpy

from .decode_batch import decode_many
from .prefill import prefill_seconds
from .workload import RequestTable


@dataclass
class Work:
    """GPU seconds each request needs, alone on the GPU, and its decode telemetry (arrays over requests)."""

    prefill_s: np.ndarray
    first_token_s: np.ndarray  # from the start of prefill to the first generated token
    total_s: np.ndarray  # prefill + decode
    output_tokens: np.ndarray  # generated (capped at max_tokens)
    capped: np.ndarray  # bool: reached max_tokens
    decode: dict[str, np.ndarray]


def request_work(eng, table: RequestTable, max_tokens: int | None, rng: np.random.Generator,
                 fidelity: str = "counts") -> Work:
    out = table.output_tokens if max_tokens is None else np.minimum(table.output_tokens, max_tokens)
    capped = out < table.output_tokens
    if fidelity == "counts":
        d = decode_many(eng, out, table.acceptance, rng)
    else:  # every lookup sampled, request by request (slow; for checking the counts law)
        from .moe_serve import decode_request
        rows = [decode_request(eng, int(k), rng, "lookups") for k in out]
        d = {key: np.array([r[key] for r in rows], dtype=float) for key in rows[0]} if rows else {}
    pre = prefill_seconds(eng, table.prompt_tokens, table.cached_tokens)
    return Work(pre, pre + d["first_step_s"], pre + d["decode_s"], out, capped, d)


@dataclass
class Timeline:
    """What happened to each request (arrays over requests; NaN where it did not happen)."""

    sent_s: np.ndarray
    arrival_s: np.ndarray  # reached the engine
    start_s: np.ndarray  # got a slot
    first_token_s: np.ndarray
    end_s: np.ndarray
    end: list[str]  # stop, length, cancelled, rejected
    busy_s: float = 0.0  # time with at least one active slot
    in_system_area: float = 0.0  # integral of the number of requests in the engine (queued or active) over time
    makespan_s: float = 0.0
    peak_queue: int = 0
    slots_area: float = 0.0  # integral of active slots over time


class Engine:
    """Slots, queue and admission; processor sharing of the GPU among active slots."""

    def __init__(self, env: simpy.Environment, work: Work, parallel: int, queue_limit: int | None,
                 timeout_s: float | None, tl: Timeline, done: list[simpy.Event]) -> None:
        self.env, self.work, self.parallel = env, work, parallel
        self.queue_limit, self.timeout_s = queue_limit, timeout_s
        self.tl, self.done = tl, done
        self.queue: deque[int] = deque()
        self.active: dict[int, float] = {}  # request -> GPU seconds still to do
        self.wake = env.event()
        self.last = 0.0
        self.in_system = 0
        env.process(self._gpu())

    def _account(self) -> None:
        """Advance the active slots' progress and the time integrals to now."""
        now = self.env.now
        dt = now - self.last
        if dt > 0:
            k = len(self.active)
            if k:
                for i in self.active:
                    self.active[i] -= dt / k
                self.tl.busy_s += dt
                self.tl.slots_area += dt * k
            self.tl.in_system_area += dt * self.in_system
        self.last = now

    def arrive(self, i: int) -> None:
        self._account()
        tl = self.tl
        tl.arrival_s[i] = self.env.now
        if len(self.active) < self.parallel:
            self.in_system += 1
            self._start(i)
            return
        if self.queue_limit is not None and len(self.queue) >= self.queue_limit:
            self._finish(i, "rejected")
            return
        self.in_system += 1
        self.queue.append(i)
        tl.peak_queue = max(tl.peak_queue, len(self.queue))
        if self.timeout_s is not None:
            self.env.process(self._timeout(i))

    def _timeout(self, i: int):
        yield self.env.timeout(self.timeout_s)
        if i in self.queue:
            self._account()
            self.queue.remove(i)
            self.in_system -= 1
            self._finish(i, "cancelled")

    def _start(self, i: int) -> None:
        self.tl.start_s[i] = self.env.now
        self.active[i] = float(self.work.total_s[i])
        if not self.wake.triggered:
            self.wake.succeed()

    def _finish(self, i: int, end: str) -> None:
        self.tl.end_s[i] = self.env.now
        self.tl.end[i] = end
        self.done[i].succeed()

    def _gpu(self):
        """Sleep until the next first token or completion among active slots, or until a slot starts."""
        work = self.work
        while True:
            if not self.active:
                yield self.wake
                self.wake = self.env.event()
                continue
            k = len(self.active)
            nxt, who, what = np.inf, -1, ""
            for i, left in self.active.items():
                if np.isnan(self.tl.first_token_s[i]):
                    to_first = left - (work.total_s[i] - work.first_token_s[i])
                    if to_first * k < nxt:
                        nxt, who, what = to_first * k, i, "first"
                if left * k < nxt:
                    nxt, who, what = left * k, i, "done"
            timer = self.env.timeout(max(nxt, 0.0))
            yield timer | self.wake
            if self.wake.triggered:
                self.wake = self.env.event()
            self._account()
            if not timer.processed and not timer.triggered:
                continue
            if what == "first":
                self.tl.first_token_s[who] = self.env.now
                self.active[who] = float(work.total_s[who] - work.first_token_s[who])  # exact, no drift
                continue
            if np.isnan(self.tl.first_token_s[who]):
                self.tl.first_token_s[who] = self.env.now
            del self.active[who]
            self.in_system -= 1
            self._finish(who, "length" if work.capped[who] else "stop")
            while self.queue and len(self.active) < self.parallel:
                self._start(self.queue.popleft())


def simulate(table: RequestTable, work: Work, parallel: int, overhead_s: float, think_s: float, think_law: str,
             queue_limit: int | None, timeout_s: float | None, rng: np.random.Generator) -> Timeline:
    """Move every request of ``table`` through the engine; returns when the last one ends."""
    n = len(table)
    nan = np.full(n, np.nan)
    tl = Timeline(nan.copy(), nan.copy(), nan.copy(), nan.copy(), nan.copy(), [""] * n)
    env = simpy.Environment()
    done = [env.event() for _ in range(n)]
    engine = Engine(env, work, parallel, queue_limit, timeout_s, tl, done)

    def send(i: int):
        tl.sent_s[i] = env.now
        if overhead_s > 0:
            yield env.timeout(overhead_s)
        engine.arrive(i)

    if table.closed_loop:
        clients = int(table.client.max()) + 1
        think = rng.exponential(think_s, n) if think_law == "exponential" and think_s > 0 else np.full(n, think_s)

        def client(c: int):
            for i in np.flatnonzero(table.client == c):
                yield env.process(send(int(i)))
                yield done[i]
                if think[i] > 0:
                    yield env.timeout(float(think[i]))

        for c in range(clients):
            env.process(client(c))
    else:
        def source():
            for i in range(n):
                wait = table.arrival_s[i] - env.now
                if wait > 0:
                    yield env.timeout(wait)
                env.process(send(i))

        env.process(source())
    env.run()
    engine._account()
    tl.makespan_s = float(np.nanmax(tl.end_s) - np.nanmin(tl.sent_s)) if n else 0.0
    return tl
