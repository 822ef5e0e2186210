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

from sim.moe.decode_batch import decode_many
from sim.moe.prefill import prefill_seconds
from sim.serving.workload import RequestTable


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
    if eng.engine.batching:  # the decode depends on the batch: only the verification steps each request needs
        from sim.moe.batching import batch_lookups
        from sim.moe.decode_batch import FIELDS, steps_needed

        acc = np.where(np.isnan(table.acceptance), eng.moe.draft.acceptance, table.acceptance)
        d = {f: np.zeros(out.size) for f in FIELDS}
        d["steps"] = steps_needed(out, acc, eng.moe.draft.tokens, rng).astype(float)
        d["output_tokens"] = out.astype(float)
        batch_lookups(eng, d["steps"].astype(np.int64), d, rng)
    elif fidelity == "counts":
        d = decode_many(eng, out, table.acceptance, rng)
    else:  # every lookup sampled, request by request (slow; for checking the counts law)
        from sim.moe.serve import decode_request
        rows = [decode_request(eng, int(k), rng, "lookups", float(a)) for k, a in zip(out, table.acceptance,
                                                                                       strict=True)]
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
    """Slots, queue and admission; processor sharing of the GPU among active slots.

    Events are plain simpy timeouts with callbacks (no process per request): the next first token or completion
    among the active slots is scheduled whenever the active set changes, and a stale one (the set changed since)
    is ignored by its generation number."""

    def __init__(self, env: simpy.Environment, work: Work, parallel: int, queue_limit: int | None,
                 timeout_s: float | None, tl: Timeline, done: list[simpy.Event] | None) -> None:
        self.env, self.work, self.parallel = env, work, parallel
        self.queue_limit, self.timeout_s = queue_limit, timeout_s
        self.tl, self.done = tl, done
        self.queue: deque[int] = deque()
        self.queued: set[int] = set()  # the queue's members, for cancellation checks in O(1)
        self.active: dict[int, float] = {}  # request -> GPU seconds still to do
        self.after_first = work.total_s - work.first_token_s  # GPU seconds left once the first token is out
        self.generation = 0
        self.last = 0.0
        self.in_system = 0

    busy_while_active = True  # the GPU counts as busy whenever a slot is active (an engine that knows better: False)

    def _account(self) -> None:
        """Advance the active slots' progress and the time integrals to now."""
        now = self.env.now
        dt = now - self.last
        if dt > 0:
            k = len(self.active)
            if k:
                self._progress(dt, k)
                if self.busy_while_active:
                    self.tl.busy_s += dt
                self.tl.slots_area += dt * k
            self.tl.in_system_area += dt * self.in_system
        self.last = now

    def _progress(self, dt: float, k: int) -> None:
        """Processor sharing: each of the ``k`` active slots did ``dt / k`` of its GPU work."""
        for i in self.active:
            self.active[i] -= dt / k

    def arrive(self, i: int) -> None:
        self._account()
        tl = self.tl
        tl.arrival_s[i] = self.env.now
        if not self._admissible(i):
            self._finish(i, "rejected")
            return
        if not self.queue and self._has_room(i):  # first come, first served: nobody overtakes the queue
            self.in_system += 1
            self._start(i)
            self._schedule()
            return
        if self.queue_limit is not None and len(self.queue) >= self.queue_limit:
            self._finish(i, "rejected")
            return
        self.in_system += 1
        self.queue.append(i)
        self.queued.add(i)
        tl.peak_queue = max(tl.peak_queue, len(self.queue))
        if self.timeout_s is not None:
            self.env.timeout(self.timeout_s).callbacks.append(lambda _ev, i=i: self._cancel(i))

    def _has_room(self, i: int) -> bool:
        """Request ``i`` can start now (a free slot)."""
        return len(self.active) < self.parallel

    def _admissible(self, i: int) -> bool:
        """Request ``i`` could ever start (an engine whose memory can never hold it rejects it at once)."""
        return True

    def _cancel(self, i: int) -> None:
        if i in self.queued:
            self._account()
            self.queued.discard(i)
            self.queue.remove(i)
            self.in_system -= 1
            self._finish(i, "cancelled")

    def _start(self, i: int) -> None:
        self.queued.discard(i)
        self.tl.start_s[i] = self.env.now
        self.active[i] = float(self.work.total_s[i])

    def _finish(self, i: int, end: str) -> None:
        self.tl.end_s[i] = self.env.now
        self.tl.end[i] = end
        if self.done is not None:
            self.done[i].succeed()

    def _schedule(self) -> None:
        """Schedule the next first token or completion among the active slots."""
        self.generation += 1
        if not self.active:
            return
        k = len(self.active)
        first = self.tl.first_token_s
        nxt, who, what = np.inf, -1, ""
        for i, left in self.active.items():
            if first[i] != first[i] and self.after_first[i] > 0:  # first token not out yet, and not its last
                to_first = left - self.after_first[i]
                if to_first * k < nxt:
                    nxt, who, what = to_first * k, i, "first"
            if left * k < nxt:
                nxt, who, what = left * k, i, "done"
        gen = self.generation
        self.env.timeout(max(nxt, 0.0)).callbacks.append(lambda _ev: self._fire(gen, who, what))

    def _fire(self, gen: int, who: int, what: str) -> None:
        if gen != self.generation:
            return  # the active set changed since this was scheduled
        self._account()
        if what == "first":
            self.tl.first_token_s[who] = self.env.now
            self.active[who] = float(self.after_first[who])  # exact, no drift
        else:
            if self.tl.first_token_s[who] != self.tl.first_token_s[who]:
                self.tl.first_token_s[who] = self.env.now
            del self.active[who]
            self.in_system -= 1
            self._finish(who, "length" if self.work.capped[who] else "stop")
            while self.queue and self._has_room(self.queue[0]):
                self._start(self.queue.popleft())
        self._schedule()


class _Arrival(simpy.Event):
    """An event at exactly ``at`` (seconds, not before now) that precedes every other event of that instant, as if
    scheduled before the run began (arrivals are scheduled one at a time, in order)."""

    def __init__(self, env: simpy.Environment, at: float) -> None:
        super().__init__(env)
        self._ok, self._value = True, None
        now = env.now
        delay = at - now
        while now + delay < at:  # now + (at - now) can round off ``at`` by an ulp: land on it exactly
            delay = float(np.nextafter(delay, np.inf))
        while now + delay > at:
            delay = float(np.nextafter(delay, -np.inf))
        env.schedule(self, simpy.core.URGENT, delay)


def simulate(table: RequestTable, work: Work, parallel: int, overhead_s: float, think_s: float, think_law: str,
             queue_limit: int | None, timeout_s: float | None, rng: np.random.Generator, engine_factory=None
             ) -> tuple[Timeline, Engine]:
    """Move every request of ``table`` through the engine; returns when the last one ends, with the timeline and the
    engine. ``engine_factory``: builds another engine than :class:`Engine` from (env, work, parallel, queue_limit,
    timeout_s, timeline, done events), such as one whose steps serve every active sequence at once
    (:mod:`sim.batching`, :mod:`sim.dense_serve`)."""
    n = len(table)
    nan = np.full(n, np.nan)
    tl = Timeline(nan.copy(), nan.copy(), nan.copy(), nan.copy(), nan.copy(), [""] * n)
    env = simpy.Environment()
    closed = table.closed_loop
    done = [env.event() for _ in range(n)] if closed else None
    factory = engine_factory or Engine
    engine: Engine = factory(env, work, parallel, queue_limit, timeout_s, tl, done)

    def send(i: int) -> None:
        tl.sent_s[i] = env.now
        if overhead_s > 0:
            env.timeout(overhead_s).callbacks.append(lambda _ev: engine.arrive(i))
        else:
            engine.arrive(i)

    if closed:
        clients = int(table.client.max()) + 1
        think = rng.exponential(think_s, n) if think_law == "exponential" and think_s > 0 else np.full(n, think_s)

        run = np.zeros(n, dtype=np.int64) if table.run is None else table.run
        runs = int(run.max()) + 1
        active = [len(np.unique(table.client[run == r])) for r in range(runs)]
        barrier = [env.event() for _ in range(runs)]  # every client of run r has finished it

        def client(c: int):
            for r in range(runs):
                if r:
                    yield barrier[r - 1]
                mine = np.flatnonzero((table.client == c) & (run == r))
                for n_sent, i in enumerate(mine, 1):
                    send(int(i))
                    yield done[i]
                    if think[i] > 0 and n_sent < mine.size:  # the run ends at its last answer
                        yield env.timeout(float(think[i]))
                if mine.size:
                    active[r] -= 1
                    if active[r] == 0:
                        barrier[r].succeed()

        for c in range(clients):
            env.process(client(c))
    elif n:  # every arrival known in advance: each schedules the next (one pending event, whatever the trace)
        arrival = table.arrival_s

        def arrive(_ev, i: int = 0) -> None:
            if i + 1 < n:  # before sending i: a same-time successor still precedes what i's arrival schedules
                _Arrival(env, float(arrival[i + 1])).callbacks.append(lambda ev: arrive(ev, i + 1))
            send(i)

        _Arrival(env, float(arrival[0])).callbacks.append(arrive)
    env.run()
    engine._account()
    tl.makespan_s = float(np.nanmax(tl.end_s) - np.nanmin(tl.sent_s)) if n else 0.0
    return tl, engine
