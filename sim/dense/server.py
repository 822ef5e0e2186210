"""A dense model under continuous batching (vLLM / Sarathi style) on one GPU, iteration by iteration.

- a request is admitted, first come first served, when fewer than ``parallel`` sequences run and the KV pool can hold
  its whole prompt (reserved at admission); a request whose prompt and output together exceed the pool is rejected
  at once (it could never finish; engines refuse requests beyond their maximum length);
- every iteration processes each decoding sequence's next token, then fills what is left of ``token_budget`` with
  chunks of the admitted prompts, oldest first (chunked prefill); the iteration that reads a prompt's last chunk
  yields its first token;
- each decoding sequence's KV grows by a token per iteration; when the pool cannot hold the next iteration's growth,
  the running request that arrived last (decoding or still prefilling) is preempted: its KV is freed and it goes
  back to the head of the queue, to prefill its prompt and the tokens it had generated again (recompute, as vLLM);
- admission is judged with the KV as it will be when the iteration in progress ends, where the request joins;
- iteration times come from the roofline of :mod:`sim.dense.step`.

Event granularity: prefill iterations are one event each (a few per prompt); between two events a decode-only batch
runs in closed form, up to its next completion or until the pool fills, and is cut at the end of the iteration in
progress when a request is admitted. Per decoding sequence nothing is updated per iteration: its tokens, KV and GPU
share follow from global iteration and share counters read when it joins and when it leaves. ``exact=True`` runs
every decode iteration as its own event instead (the reference the closed form is tested against).
"""

from __future__ import annotations

import heapq
from array import array

import numpy as np
import simpy

from sim.dense.setup import DenseSetup
from sim.serving.queue import QueueSpec, Server, Timeline, Work


class DenseServer(Server):
    """Admission and queue as :class:`sim.serving.queue.Server`; the GPU runs iterations of the whole batch (its own
    process) and counts as busy only while an iteration runs (not while a prompt waits)."""

    busy_while_active = False  # counted by _busy

    def __init__(self, env: simpy.Environment, work: Work, spec: QueueSpec, tl: Timeline, done, setup: DenseSetup,
                 prompt: np.ndarray, cached: np.ndarray, exact: bool = False) -> None:
        super().__init__(env, work, spec, tl, done)
        self.setup, self.cost, self.exact = setup, setup.cost, exact
        self.capacity = setup.kv_pool_tokens
        n = len(prompt)
        # per request, as compact arrays (8 bytes each: a million requests cost tens of MB, not hundreds)
        self.prompt = array("q", prompt.tolist())  # prompt tokens (a readmission prefills these and those generated)
        self.cached = array("q", cached.tolist())
        self.output = array("q", work.output_tokens.tolist())
        self.generated = array("q", bytes(8 * n))
        self.share_s = array("d", bytes(8 * n))  # GPU seconds: each iteration's time divided among its sequences
        self.prefill_s = array("d", bytes(8 * n))  # seconds of the iterations that carried its prompt's chunks
        self.preempted_count = array("q", bytes(8 * n))
        # decoding sequences: join state, read back when they leave (nothing per iteration)
        self.join_iter = array("q", bytes(8 * n))
        self.join_context = array("q", bytes(8 * n))
        self.join_share = array("d", bytes(8 * n))
        self.decoding: dict[int, None] = {}  # in join order (the last is preempted first)
        self.finish_heap: list[tuple[int, int]] = []  # (iteration at which it has all its tokens, request)
        self.iteration = 0  # decode iterations so far (each decoding sequence gains a token per iteration)
        self.share_clock = 0.0  # sum over iterations of seconds / sequences in it, for decoding sequences
        self.context_join_sum = 0  # sum of join_context - join_iter over the decoding sequences
        self.prefilling: list[list[int]] = []  # [request, tokens left, tokens done], admission order
        self.reserved = 0  # KV tokens of the admitted prompts not yet decoding
        self.run: tuple[float, int, int, int] | None = None  # the decode run in progress: (start, k, context, n)
        self.growth = 0  # KV tokens the mixed iteration in progress adds when it ends
        self.wake = env.event()
        self.stats = {"iterations": 0, "memory_bound_iterations": 0, "prefill_iterations": 0, "preemptions": 0,
                      "batch_area": 0.0, "kv_area": 0.0, "kv_peak_tokens": 0, "busy_s": 0.0}
        env.process(self._loop())

    # --- admission -------------------------------------------------------------------------------------------
    def _kv_used(self) -> int:
        return self.reserved + self.context_join_sum + len(self.decoding) * self.iteration

    def _need(self, i: int) -> int:
        return self.prompt[i] + self.generated[i] + 1

    def _admissible(self, i: int) -> bool:  # its whole sequence must fit in the pool, or it could never finish
        return self.prompt[i] + self.output[i] + 1 <= self.capacity

    def _kv_at_boundary(self) -> int:
        """KV tokens in use when the iteration in progress ends (where an admission would join): a decode run's
        sequences have grown by a token per iteration since it started, and that iteration's too."""
        used = self._kv_used()
        if self.run is None:
            return used + self.growth
        start, k, context, n = self.run
        return used + k * min(self.cost.steps_within(k, context, n, self.env.now - start) + 1, n)

    def _has_room(self, i: int) -> bool:
        return super()._has_room(i) and self._kv_at_boundary() + self._need(i) <= self.capacity

    def _cancel(self, i: int) -> None:
        if self.generated[i] == 0 and self.preempted_count[i] == 0:  # a preempted request is not the client's to drop
            super()._cancel(i)

    def _start(self, i: int) -> None:
        super()._start(i)
        total = self.prompt[i] + self.generated[i]
        new = total - (self.cached[i] if self.preempted_count[i] == 0 else 0)
        self.reserved += total
        self.prefilling.append([i, max(new, 1), total - max(new, 1)])
        if not self.wake.triggered:
            self.wake.succeed()

    # --- decoding set ----------------------------------------------------------------------------------------
    def _join(self, i: int) -> None:
        """Request ``i`` has its first token: it decodes from the next iteration on."""
        left = self.output[i] - self.generated[i]
        context = self.prompt[i] + self.generated[i]  # its first token included
        self.reserved -= context - 1  # what its admission reserved
        if left <= 0:
            self._leave(i)
            return
        self.join_iter[i], self.join_context[i], self.join_share[i] = self.iteration, context, self.share_clock
        self.context_join_sum += context - self.iteration
        self.decoding[i] = None
        heapq.heappush(self.finish_heap, (self.iteration + left, i))

    def _depart(self, i: int) -> None:
        """Take ``i`` out of the decoding set (its KV goes with it), with the tokens and GPU share it gained."""
        del self.decoding[i]
        self.generated[i] += self.iteration - self.join_iter[i]
        self.share_s[i] += self.share_clock - self.join_share[i]
        self.context_join_sum -= self.join_context[i] - self.join_iter[i]

    def _leave(self, i: int) -> None:
        self.work.telemetry["decode_s"][i] = self.env.now - self.tl.first_token_s[i]
        self._complete(i)

    def _preempt(self) -> None:
        """Free the KV of the running request that arrived last (decoding or prefilling) and queue it first, to
        prefill its prompt and what it generated again."""
        arrival = self.tl.arrival_s
        i = max(self.active, key=lambda r: (arrival[r], r))
        if i in self.decoding:
            self._depart(i)
        else:  # its prompt's chunks so far are lost with its reservation
            entry = next(e for e in self.prefilling if e[0] == i)
            self.prefilling.remove(entry)
            self.reserved -= self.prompt[i] + self.generated[i]
        del self.active[i]
        self.preempted_count[i] += 1
        self.stats["preemptions"] += 1
        self.queue.appendleft(i)
        self.queued.add(i)

    def _due_at(self, i: int) -> int | None:
        """The iteration at which decoding request ``i`` has all its tokens (None: not decoding)."""
        return self.join_iter[i] + self.output[i] - self.generated[i] if i in self.decoding else None

    def _complete_due(self) -> None:
        heap = self.finish_heap
        while heap and heap[0][0] <= self.iteration:
            _, i = heapq.heappop(heap)
            if self._due_at(i) == self.iteration:  # else stale: preempted since
                self._depart(i)
                self._leave(i)

    # --- the GPU ---------------------------------------------------------------------------------------------
    def _next_due(self) -> int:
        heap = self.finish_heap
        while self._due_at(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # preempted since: stale
        return heap[0][0]

    def _loop(self):
        env = self.env
        while True:
            if self.wake.triggered:  # admissions so far are in the prefill list already
                self.wake = env.event()
            if not self.prefilling and not self.decoding:
                yield self.wake
                continue
            while self.active and self._kv_used() + len(self.decoding) > self.capacity:
                self._preempt()  # a lone request always fits (admission checked its whole sequence)
            if not self.prefilling and not self.decoding:
                continue
            k = len(self.decoding)
            context = self._kv_used() - self.reserved  # KV tokens the decoding sequences read
            budget = self.setup.token_budget - k
            if self.prefilling and budget > 0:
                yield from self._mixed_iteration(k, context, budget)
            else:
                yield from self._decode_run(k, context)
            self._admit_waiting()

    def _mixed_iteration(self, k: int, context: int, budget: int):
        """One iteration: every decoding sequence's token, then prompt chunks in the rest of the budget."""
        env, st = self.env, self.stats
        chunks: list[tuple[list[int], int]] = []
        reads, pairs = float(context), float(context)
        for entry in self.prefilling:
            take = min(budget, entry[1])
            chunks.append((entry, take))
            reads += entry[2] + take
            pairs += take * entry[2] + take * (take + 1) / 2
            budget -= take
            if budget == 0:
                break
        tokens = k + sum(take for _, take in chunks)
        dt, memory_bound = self.cost.iteration_s(tokens, reads, pairs)
        kv = self._kv_used()
        growth = k + sum(take == entry[1] for entry, take in chunks)  # a token per sequence, and first tokens
        self.growth = growth
        yield env.timeout(dt)
        self.growth = 0
        self._account()
        members = k + len(chunks)
        st["iterations"] += 1
        st["prefill_iterations"] += 1
        st["memory_bound_iterations"] += memory_bound
        self._busy(dt, members, kv, kv + growth)
        if k:
            self.iteration += 1
            self.share_clock += dt / members
        for entry, take in chunks:
            i = entry[0]
            self.share_s[i] += dt / members
            self.prefill_s[i] += dt * take / tokens  # its chunk's share of the iteration
            entry[1] -= take
            entry[2] += take
        self._complete_due()
        done = [entry for entry, _ in chunks if entry[1] == 0]
        if done:
            self.prefilling = [entry for entry in self.prefilling if entry[1] > 0]
            for entry in done:
                i = entry[0]
                if self.tl.first_token_s[i] != self.tl.first_token_s[i]:
                    self.tl.first_token_s[i] = env.now
                self.generated[i] += 1  # the prompt's last chunk yields a token
                self._join(i)

    def _decode_run(self, k: int, context: int):
        """Decode-only iterations up to the next completion or until the KV pool is full, cut at the end of the
        iteration in progress when a request is admitted."""
        env, cost, st = self.env, self.cost, self.stats
        n = min(self._next_due() - self.iteration, (self.capacity - self._kv_used()) // k)
        if self.exact:
            n = 1
        start = env.now
        kv = self._kv_used()
        total = cost.run_s(k, context, n)
        timer = env.timeout(total)
        self.run = (start, k, context, n)
        yield timer | self.wake
        done = n
        if not timer.processed:  # an admission: finish the iteration in progress, then let its prompt in
            done = min(cost.steps_within(k, context, n, env.now - start) + 1, n)
            end = start + cost.run_s(k, context, done)
            if end > env.now:
                yield env.timeout(end - env.now)
        self.run = None
        self._account()
        elapsed = cost.run_s(k, context, done)
        st["iterations"] += done
        st["memory_bound_iterations"] += cost.memory_bound_steps(k, context, done)
        self._busy(elapsed, k, kv, kv + k * done)
        self.iteration += done
        self.share_clock += elapsed / k
        self._complete_due()

    def _busy(self, seconds: float, members: int, kv_before: int, kv_after: int) -> None:
        """Count ``seconds`` of iterations of ``members`` sequences, the KV in use growing from ``kv_before`` to
        ``kv_after`` tokens."""
        st = self.stats
        st["busy_s"] += seconds
        st["batch_area"] += seconds * members
        st["kv_area"] += seconds * (kv_before + kv_after) / 2
        st["kv_peak_tokens"] = max(st["kv_peak_tokens"], kv_after)
        self.tl.busy_s += seconds
