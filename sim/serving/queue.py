"""A serving engine under load, as a queue (FIELD_NOTES section 3): arrivals, admission, a FIFO queue, the GPU's
places, and the run's time integrals. It knows nothing about what a request costs: that comes from the engine.

Life of a request: it is sent (open loop: at its arrival time; closed loop: when its client is ready), reaches the
engine after ``overhead_s`` (HTTP, tokenizer), is admitted or rejected (``queue_limit``), waits FIFO for a place
(cancelled after ``timeout_s``), is served, and ends ``stop`` (or ``length`` at ``max_tokens``).

:class:`Server` is what every engine shares, in the spirit of simpy's resources (a base that queues, subclasses
that say what a request holds): a subclass gives an admitted request its place (``_start``, extended), says whether
one can start now and ever (``_has_room``, ``_admissible``), takes it out when it is done (``_complete``) and lets
the queue in when room may have been freed (``_admit_waiting``). :class:`SharedGpuServer` is the plain one: up to
``sequences`` requests take turns on the GPU (processor sharing: each of ``k`` active ones progresses at ``1 / k``),
each needing the GPU seconds :class:`Work` says; with one it is a FIFO single server. An engine whose steps serve
every active sequence at once subclasses :class:`Server` with a process of its own (the batching engine,
:mod:`sim.batching.server`).

Events are plain simpy timeouts with callbacks (no process per request): a handful per request, none per token.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from sim.config.serve import Serve
from sim.serving.workload import RequestTable


@dataclass
class Work:
    """What each request needs of the GPU, alone on it, and what its engine measured of it (arrays over requests)."""

    prefill_s: np.ndarray
    first_token_s: np.ndarray  # from the start of prefill to the first generated token
    total_s: np.ndarray  # prefill + decode
    output_tokens: np.ndarray  # generated (capped at max_tokens)
    capped: np.ndarray  # bool: reached max_tokens
    telemetry: dict[str, np.ndarray]  # per quantity of sim.serving.telemetry the engine sums (and its own)


@dataclass(frozen=True)
class QueueSpec:
    """How requests reach an engine and wait for it."""

    sequences: int  # requests served at once at most (decode slots, a batch)
    overhead_s: float = 0.0  # client, HTTP, tokenizer: from sending to reaching the engine (s)
    think_s: float = 0.0  # closed loop: from an answer to the client's next request (s, mean)
    think_law: str = "fixed"  # fixed or exponential
    queue_limit: int | None = None  # requests that may wait; None: unbounded
    timeout_s: float | None = None  # a request waiting longer is cancelled (s); None: never
    ramp_s: float = 0.0  # closed loop: the clients' first requests spread evenly over this long (s)

    @classmethod
    def of(cls, sv: Serve, sequences: int) -> QueueSpec:
        """The queue a scenario's ``serve`` section describes, in front of an engine of ``sequences``."""
        return cls(sequences, overhead_s=sv.request_overhead_s, think_s=sv.workload.think_s,
                   think_law=sv.workload.think_law, queue_limit=sv.admission.queue_limit,
                   timeout_s=sv.admission.timeout_s, ramp_s=sv.workload.ramp_s)


@dataclass
class Timeline:
    """What happened to each request (arrays over requests; NaN where it did not happen)."""

    sent_s: np.ndarray
    arrival_s: np.ndarray  # reached the engine
    start_s: np.ndarray  # got its place
    first_token_s: np.ndarray
    end_s: np.ndarray
    end: list[str]  # stop, length, cancelled, rejected
    busy_s: float = 0.0  # time the GPU worked
    in_system_area: float = 0.0  # integral of the number of requests in the engine (queued or active) over time
    makespan_s: float = 0.0
    peak_queue: int = 0
    active_area: float = 0.0  # integral of the active requests over time
    peak_active: int = 0  # most requests active (holding a place: a decode slot, a batch's sequence) at once
    peak_waiting: int = 0  # most requests waiting at once, preempted ones back in the queue included

    @classmethod
    def empty(cls, n: int) -> Timeline:
        nan = np.full(n, np.nan)
        return cls(sent_s=nan.copy(), arrival_s=nan.copy(), start_s=nan.copy(), first_token_s=nan.copy(),
                   end_s=nan.copy(), end=[""] * n)


class Server:
    """Admission, the FIFO queue, cancellation and the time integrals of one engine; what an admitted request does
    on the GPU is the subclass's (see the module docstring)."""

    busy_while_active = True  # the GPU counts as busy whenever a request is active (else the subclass counts it)

    def __init__(self, env: simpy.Environment, work: Work, spec: QueueSpec, tl: Timeline,
                 done: list[simpy.Event] | None) -> None:
        self.env, self.work, self.spec = env, work, spec
        self.tl, self.done = tl, done
        self.queue: deque[int] = deque()
        self.queued: set[int] = set()  # the queue's members, for cancellation checks in O(1)
        self.active: dict[int, float] = {}  # request -> what the subclass keeps of it (GPU seconds still to do)
        self.last = 0.0
        self.in_system = 0

    def _account(self) -> None:
        """Advance the time integrals to now."""
        now, tl = self.env.now, self.tl
        dt = now - self.last
        if dt > 0:
            k = len(self.active)
            if k:
                if self.busy_while_active:
                    tl.busy_s += dt
                tl.active_area += dt * k
            tl.in_system_area += dt * self.in_system
        self.last = now
        waiting = len(self.queue)  # a preempted request rejoins it too
        if waiting > tl.peak_waiting:
            tl.peak_waiting = waiting

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
            return
        if self.spec.queue_limit is not None and len(self.queue) >= self.spec.queue_limit:
            self._finish(i, "rejected")
            return
        self.in_system += 1
        self.queue.append(i)
        self.queued.add(i)
        tl.peak_queue = max(tl.peak_queue, len(self.queue))
        if self.spec.timeout_s is not None:
            self.env.timeout(self.spec.timeout_s).callbacks.append(lambda _ev, i=i: self._cancel(i))

    def _has_room(self, i: int) -> bool:
        """Request ``i`` can start now: fewer than ``sequences`` are active."""
        return len(self.active) < self.spec.sequences

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
        """Request ``i`` leaves the queue for its place on the GPU (subclasses extend this with what it holds there);
        a request started again (after preemption) keeps its first start."""
        self.queued.discard(i)
        if self.tl.start_s[i] != self.tl.start_s[i]:
            self.tl.start_s[i] = self.env.now
        self.active[i] = 0.0
        self.tl.peak_active = max(self.tl.peak_active, len(self.active))

    def _complete(self, i: int) -> None:
        """Active request ``i`` has all its tokens."""
        del self.active[i]
        self.in_system -= 1
        self._finish(i, "length" if self.work.capped[i] else "stop")

    def _admit_waiting(self) -> None:
        """Start queued requests, in order, while there is room."""
        while self.queue and self._has_room(self.queue[0]):
            self._start(self.queue.popleft())

    def _finish(self, i: int, end: str) -> None:
        self.tl.end_s[i] = self.env.now
        self.tl.end[i] = end
        if self.done is not None:
            self.done[i].succeed()


class SharedGpuServer(Server):
    """Up to ``sequences`` requests take turns on the GPU (processor sharing), each needing the GPU seconds of its
    :class:`Work`, alone. The next first token or completion among the active requests is scheduled whenever the
    active set changes; a stale one (the set changed since) is ignored by its generation number."""

    def __init__(self, env: simpy.Environment, work: Work, spec: QueueSpec, tl: Timeline,
                 done: list[simpy.Event] | None) -> None:
        super().__init__(env, work, spec, tl, done)
        self.after_first = work.total_s - work.first_token_s  # GPU seconds left once the first token is out
        self.generation = 0

    def _account(self) -> None:
        """Processor sharing: each of the ``k`` active requests did ``dt / k`` of its GPU work since the last event."""
        dt = self.env.now - self.last
        k = len(self.active)
        if dt > 0 and k:
            for i in self.active:
                self.active[i] -= dt / k
        super()._account()

    def arrive(self, i: int) -> None:
        super().arrive(i)
        if i in self.active:  # it started at once: every active request's pace changed
            self._schedule()

    def _start(self, i: int) -> None:
        super()._start(i)
        self.active[i] = float(self.work.total_s[i])

    def _schedule(self) -> None:
        """Schedule the next first token or completion among the active requests."""
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
            self._complete(who)
            self._admit_waiting()
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


ServerFactory = Callable[[simpy.Environment, Work, QueueSpec, Timeline, "list[simpy.Event] | None"], Server]


def run_queue(table: RequestTable, work: Work, spec: QueueSpec, rng: np.random.Generator,
              server: ServerFactory = SharedGpuServer) -> tuple[Timeline, Server]:
    """Move every request of ``table`` through an engine's queue; returns when the last one ends, with the timeline
    and the server. ``server`` builds the engine's server from (env, work, spec, timeline, done events)."""
    n = len(table)
    tl = Timeline.empty(n)
    env = simpy.Environment()
    closed = table.closed_loop
    done = [env.event() for _ in range(n)] if closed else None
    engine = server(env, work, spec, tl, done)

    def send(i: int) -> None:
        tl.sent_s[i] = env.now
        if spec.overhead_s > 0:
            env.timeout(spec.overhead_s).callbacks.append(lambda _ev: engine.arrive(i))
        else:
            engine.arrive(i)

    if closed:
        think_s = spec.think_s
        think = rng.exponential(think_s, n) if spec.think_law == "exponential" and think_s > 0 else np.full(n, think_s)
        run = np.zeros(n, dtype=np.int64) if table.run is None else table.run
        runs = int(run.max()) + 1
        active = [len(np.unique(table.client[run == r])) for r in range(runs)]
        barrier = [env.event() for _ in range(runs)]  # every client of run r has finished it

        clients = int(table.client.max()) + 1

        def client(c: int):
            if spec.ramp_s > 0 and c:  # users ramped up: client c of N starts at c / N of the ramp
                yield env.timeout(spec.ramp_s * c / clients)
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
