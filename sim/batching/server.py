"""Continuous batching (vLLM / SGLang / Sarathi style) on one device, iteration by iteration: the one engine dense and
MoE models are served by when they batch.

- a request is admitted, first come first served, when fewer than ``max_num_seqs`` sequences run and the KV pool can
  hold its whole prompt (reserved at admission) with the decoders' next step and still leave ``watermark`` of it
  free; a request whose prompt and output together exceed the pool is rejected at once (it could never finish;
  engines refuse requests beyond their maximum length);
- every iteration processes each decoding sequence's next step, then fills what is left of the token budget
  (``max_num_batched_tokens``) with chunks of the admitted prompts, oldest first (chunked prefill; without it a
  prompt is taken whole, alone with the decoders); the iteration that reads a prompt's last chunk yields its first
  token. Tokens found in the prefix cache are not prefilled: a request's hand-set ``cached`` tokens (at its first
  admission), or with a workload of shared prefixes (system prompts, chat sessions) what the engine's own prefix
  cache holds of them (:mod:`sim.batching.prefix`), whichever is more;
- a decoding sequence's KV grows by the tokens each step yields (one, or with speculative decoding its request's
  mean accepted tokens per verification step); when the pool cannot hold the next iteration's growth, the running
  request that arrived last (decoding or still prefilling) is preempted and goes back to the head of the queue:
  ``recompute`` frees its KV and prefills its prompt and what it generated again (vLLM's default), ``swap`` moves
  its KV to host memory over the link and back when it is readmitted (each way costs the next iteration that long);
- admission is judged with the KV as it will be when the iteration in progress ends, where the request joins;
- iteration times come from :class:`sim.batching.cost.StepCost` (each operator its own roofline, summed).

Event granularity: prefill iterations are one event each (a few per prompt); between two events a decode-only batch
runs in closed form, up to its next completion or until the pool fills, and is cut at the end of the iteration in
progress when a request is admitted. Per decoding sequence nothing is updated per iteration: its steps, KV and GPU
share follow from global iteration and share counters read when it joins and when it leaves. ``exact=True`` runs
every decode iteration as its own event instead (the reference the closed form is tested against).

Prefix cache (a workload with shared prefixes and ``prefix_caching`` on): the KV in use is each running request's own
KV (its context less the tokens the cache holds for it) plus the segments running requests reference, each held once
however many share it; idle cached segments count as free for admission and are evicted, least recently released
first, when the KV in use and they would overflow the pool (checked at every admission and at the end of every
iteration or decode run, where the KV has grown). Hand-set ``cached`` tokens stay charged to their request, as
before. Without shared prefixes nothing of this runs.
"""

from __future__ import annotations

import heapq
from array import array
from dataclasses import dataclass

import numpy as np
import simpy

from sim.batching.cost import StepCost
from sim.batching.prefix import PrefixCache
from sim.serving.queue import QueueSpec, Server, Timeline, Work


@dataclass(frozen=True)
class Scheduler:
    """The scheduling knobs, as vLLM names them (``max_num_seqs`` is the queue's ``sequences``)."""

    token_budget: int  # max_num_batched_tokens: tokens one iteration processes at most
    kv_pool_tokens: int  # KV the pool holds (tokens)
    chunked_prefill: bool = True  # enable_chunked_prefill: prompts in chunks; else each prompt whole
    prefix_caching: bool = True  # enable_prefix_caching: a request's cached tokens are not prefilled
    preemption: str = "recompute"  # "recompute" or "swap"
    watermark: float = 0.01  # share of the pool a new prompt must leave free (vLLM's and Vidur's 1% of blocks)
    swap_s_per_token: float = 0.0  # moving one token's KV to host memory or back (s)
    block_size: int = 16  # tokens per KV block: the prefix cache holds whole blocks


class BatchingServer(Server):
    """Admission and queue as :class:`sim.serving.queue.Server`; the device runs iterations of the whole batch (its
    own process) and counts as busy only while an iteration runs (not while a prompt waits)."""

    busy_while_active = False  # counted by _busy

    def __init__(self, env: simpy.Environment, work: Work, spec: QueueSpec, tl: Timeline, done, cost: StepCost,
                 sched: Scheduler, prompt: np.ndarray, cached: np.ndarray, steps: np.ndarray | None = None,
                 exact: bool = False, prefix: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        super().__init__(env, work, spec, tl, done)
        self.cost, self.sched, self.exact = cost, sched, exact
        self.capacity = sched.kv_pool_tokens
        n = len(prompt)
        output = work.output_tokens
        # decode steps after the first token (which the prompt's last chunk yields); speculative decoding: fewer
        steps = np.maximum(output - 1, 0) if steps is None else np.minimum(steps, np.maximum(output - 1, 0))
        steps = np.where((output > 1) & (steps < 1), 1, steps)
        rate = np.divide(np.maximum(output - 1, 0), steps, out=np.ones(n), where=steps > 0)
        # per request, as compact arrays (8 bytes each: a million requests cost tens of MB, not hundreds)
        self.prompt = array("q", prompt.tolist())  # prompt tokens (a readmission prefills these and those generated)
        self.cached = array("q", (cached if sched.prefix_caching else np.zeros(n, dtype=np.int64)).tolist())
        self.output = array("q", output.tolist())
        self.steps = array("q", steps.astype(np.int64).tolist())  # decode steps it needs in all
        self.rate = array("d", rate.tolist())  # tokens (and KV) a decode step adds
        self.steps_done = array("q", bytes(8 * n))
        self.first_done = array("b", bytes(n))  # its prompt's last chunk has yielded the first token
        self.share_s = array("d", bytes(8 * n))  # device seconds: each iteration's time divided among its sequences
        self.prefill_s = array("d", bytes(8 * n))  # seconds of the iterations that carried its prompt's chunks
        self.preempted_count = array("q", bytes(8 * n))
        self.swapped = array("b", bytes(n))  # its KV waits in host memory (swap preemption)
        self.held = array("q", bytes(8 * n))  # KV tokens its admission reserved
        # decoding sequences: join state, read back when they leave (nothing per iteration)
        self.join_iter = array("q", bytes(8 * n))
        self.join_share = array("d", bytes(8 * n))
        self.decoding: dict[int, None] = {}  # in join order (the last is preempted first)
        self.finish_heap: list[tuple[int, int]] = []  # (iteration at which it has all its tokens, request)
        self.iteration = 0  # decode iterations so far
        self.share_clock = 0.0  # sum over iterations of seconds / sequences in it, for decoding sequences
        self.context_join_sum = 0.0  # sum over decoding sequences of (KV at join - rate x join iteration)
        self.rate_sum = 0.0  # KV tokens the decoding sequences add per iteration
        self.prefilling: list[list[int]] = []  # [request, tokens left, tokens done], admission order
        self.reserved = 0  # KV tokens of the admitted prompts not yet decoding
        self.pending_s = 0.0  # swap time the next iteration carries (s)
        self.swapping_in: list[int] = []  # readmitted swapped sequences, joining at the next iteration
        self.run: tuple[float, int, float, int, float] | None = None  # decode run: (start, k, context, n, growth)
        self.growth = 0.0  # KV tokens the mixed iteration in progress adds when it ends
        self.wake = env.event()
        # the prefix cache, with a workload of shared prefixes (``prefix``: RequestTable's prefix_segment and
        # prefix_tokens) and prefix caching on
        self.cache = PrefixCache(sched.block_size) if sched.prefix_caching and prefix is not None else None
        if self.cache is not None:
            self._prefix_spans(*prefix)
        self.stats = {"iterations": 0, "memory_bound_iterations": 0, "prefill_iterations": 0, "preemptions": 0,
                      "swaps": 0, "batch_area": 0.0, "kv_area": 0.0, "kv_peak_tokens": 0.0, "busy_s": 0.0,
                      "swap_s": 0.0}
        env.process(self._loop())

    def _prefix_spans(self, segment: np.ndarray, tokens: np.ndarray) -> None:
        """Per request, its system prompt's and its session's segment ids and the tokens each covers in whole blocks
        (the session's: from the system prompt's last full block to the history's)."""
        n = len(self.prompt)
        block = self.sched.block_size
        system = tokens[:, 0].astype(np.int64) // block * block
        history = (tokens[:, 0].astype(np.int64) + tokens[:, 1]) // block * block - system
        self.seg_system = array("i", segment[:, 0].tolist())
        self.span_system = array("q", system.tolist())
        self.seg_history = array("i", segment[:, 1].tolist())
        self.span_history = array("q", history.tolist())
        self.shared = array("q", bytes(8 * n))  # tokens of its KV the cache holds (charged to the cache, once)
        self.referencing = array("b", bytes(n))  # it references its segments (admitted, not preempted since)
        self.prefix_hit = array("q", bytes(8 * n))  # tokens it found in the cache at its first admission
        self.shared_decoding = 0  # sum of ``shared`` over the decoding sequences

    def _segments(self, i: int) -> tuple[tuple[int, int], tuple[int, int]]:
        return (self.seg_system[i], self.span_system[i]), (self.seg_history[i], self.span_history[i])

    # --- KV accounting ---------------------------------------------------------------------------------------
    def _kv_used(self) -> float:
        used = self.reserved + self.context_join_sum + self.rate_sum * self.iteration
        if self.cache is not None:  # the referenced segments once, not within each sequence's context
            used += self.cache.referenced_tokens - self.shared_decoding
        return used

    def _decode_context(self) -> float:
        """KV tokens the decoding sequences read (each its whole context, shared blocks included)."""
        if self.cache is None:
            return self._kv_used() - self.reserved
        return self.context_join_sum + self.rate_sum * self.iteration

    def _context(self, i: int) -> int:
        """KV tokens request ``i`` holds once its prompt and what it generated are in (whole tokens)."""
        return self.prompt[i] + self._generated(i)

    def _generated(self, i: int) -> int:
        return int(round(self.first_done[i] + self.rate[i] * self.steps_done[i]))

    def _admissible(self, i: int) -> bool:  # its whole sequence must fit in the pool, or it could never finish
        return self.prompt[i] + self.output[i] + 1 <= self.capacity

    def _kv_at_boundary(self) -> float:
        """KV tokens in use when the iteration in progress ends (where an admission would join): a decode run's
        sequences have grown since it started, and that iteration's too."""
        used = self._kv_used()
        if self.run is None:
            return used + self.growth
        start, k, context, n, growth = self.run
        return used + growth * min(self.cost.steps_within(k, context, n, self.env.now - start, growth) + 1, n)

    def _has_room(self, i: int) -> bool:
        # its prompt (and first token's place) beside the KV as the iteration in progress leaves it, with room for
        # the decoders' next step: else it would be preempted at once and readmitted after, over and over
        need = self._context(i) + (1 - self.first_done[i])
        keep = self.sched.watermark * self.capacity if self.first_done[i] == 0 else 0.0
        if self.cache is None or self.swapped[i]:
            return super()._has_room(i) and self._kv_at_boundary() + need + self.rate_sum + keep <= self.capacity
        kv = self._kv_at_boundary()
        self.cache.fit(self.capacity - kv)  # what the KV's growth since the last check has evicted
        segments = self._segments(i)  # its hit is not its own KV; its idle segments leave the free space
        need += self.cache.idle_of(segments) - self.cache.lookup(segments)
        return super()._has_room(i) and kv + need + self.rate_sum + keep <= self.capacity

    def _cancel(self, i: int) -> None:
        if self.first_done[i] == 0 and self.preempted_count[i] == 0:  # a preempted request is not the client's
            super()._cancel(i)

    def _start(self, i: int) -> None:
        super()._start(i)
        total = self._context(i)
        hit = 0
        if self.cache is not None and not self.swapped[i]:
            segments = self._segments(i)
            hit = self.cache.lookup(segments)
            self.cache.acquire(segments)
            self.referencing[i] = 1
            self.shared[i] = hit
            if self.preempted_count[i] == 0:
                self.prefix_hit[i] = hit
        self.held[i] = total + (1 - self.first_done[i]) - hit  # the first token's place too, until it joins
        self.reserved += self.held[i]
        if self.swapped[i]:  # its KV comes back from host memory: it decodes on from the next iteration
            self.swapped[i] = 0
            self.swapping_in.append(i)
        else:
            new = total - max(self.cached[i] if self.preempted_count[i] == 0 else 0, hit)
            self.prefilling.append([i, max(new, 1), total - max(new, 1)])
        if self.cache is not None:
            self.cache.fit(self.capacity - self._kv_at_boundary())
        if not self.wake.triggered:
            self.wake.succeed()

    def _cache_prefix(self, i: int) -> None:
        """Request ``i`` has read its prompt: its segments are resident in full, held by the cache from now on."""
        assert self.cache is not None
        added = self.cache.insert(self.seg_system[i], self.span_system[i])
        self.shared[i] += added + self.cache.insert(self.seg_history[i], self.span_history[i])

    def _release_prefix(self, i: int, finished: bool) -> None:
        """Request ``i`` stops referencing its segments; a finished chat turn leaves its whole sequence in its
        session's segment (the next turn resends it)."""
        if self.cache is None or not self.referencing[i]:
            return
        if finished and self.seg_history[i] >= 0:
            self.cache.insert(self.seg_history[i], self.cache.full(self._context(i)) - self.span_system[i])
        self.cache.release(self._segments(i))
        self.referencing[i] = 0
        self.shared[i] = 0

    def _swap(self, tokens: int) -> None:
        seconds = tokens * self.sched.swap_s_per_token
        self.pending_s += seconds
        self.stats["swap_s"] += seconds

    # --- decoding set ----------------------------------------------------------------------------------------
    def _join(self, i: int) -> None:
        """Request ``i`` has its first token: it decodes from the next iteration on."""
        context = self._context(i)
        self.reserved -= self.held[i]
        left = self.steps[i] - self.steps_done[i]
        if left <= 0:
            self._leave(i)
            return
        self.join_iter[i], self.join_share[i] = self.iteration, self.share_clock
        self.context_join_sum += context - self.rate[i] * self.iteration
        if self.cache is not None:
            self.shared_decoding += self.shared[i]
        self.rate_sum += self.rate[i]
        self.decoding[i] = None
        heapq.heappush(self.finish_heap, (self.iteration + left, i))

    def _depart(self, i: int) -> None:
        """Take ``i`` out of the decoding set (its KV goes with it), with the steps and device share it gained."""
        del self.decoding[i]
        self.context_join_sum -= self._context(i) - self.rate[i] * self.join_iter[i]
        self.rate_sum -= self.rate[i]
        self.steps_done[i] += self.iteration - self.join_iter[i]
        self.share_s[i] += self.share_clock - self.join_share[i]
        if self.cache is not None:
            self.shared_decoding -= self.shared[i]
        if not self.decoding:  # no drift of float sums between busy periods
            self.context_join_sum = self.rate_sum = 0.0

    def _leave(self, i: int) -> None:
        self.work.telemetry["decode_s"][i] = self.env.now - self.tl.first_token_s[i]
        self._release_prefix(i, finished=True)
        self._complete(i)

    def _preempt(self) -> None:
        """Free the KV of the running request that arrived last (decoding or prefilling) and queue it first: to
        prefill its prompt and what it generated again, or (swap, decoding) to bring its KV back."""
        arrival = self.tl.arrival_s
        i = max(self.active, key=lambda r: (arrival[r], r))
        if i in self.decoding:
            self._depart(i)
            if self.sched.preemption == "swap":
                self.swapped[i] = 1
                self.stats["swaps"] += 1
                self._swap(self._context(i))
        else:  # its prompt's chunks so far are lost with its reservation
            entry = next(e for e in self.prefilling if e[0] == i)
            self.prefilling.remove(entry)
            self.reserved -= self.held[i]
        self._release_prefix(i, finished=False)
        del self.active[i]
        self.preempted_count[i] += 1
        self.stats["preemptions"] += 1
        self.queue.appendleft(i)
        self.queued.add(i)

    def _due_at(self, i: int) -> int | None:
        """The iteration at which decoding request ``i`` has all its tokens (None: not decoding)."""
        return self.join_iter[i] + self.steps[i] - self.steps_done[i] if i in self.decoding else None

    def _complete_due(self) -> None:
        heap = self.finish_heap
        while heap and heap[0][0] <= self.iteration:
            _, i = heapq.heappop(heap)
            if self._due_at(i) == self.iteration:  # else stale: preempted since
                self._depart(i)
                self._leave(i)

    # --- the device ------------------------------------------------------------------------------------------
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
            for i in self.swapping_in:  # their KV back from host memory: the next iteration carries the copy
                self._swap(self._context(i))
                self._join(i)
            self.swapping_in.clear()
            if not self.prefilling and not self.decoding:
                yield self.wake
                continue
            used = self._kv_used()
            while self.active and used + self.rate_sum > self.capacity:
                self._preempt()  # a lone request always fits (admission checked its whole sequence)
                used = self._kv_used()
            if not self.prefilling and not self.decoding:
                continue
            k = len(self.decoding)
            # KV tokens the decoding sequences read (what _decode_context gives, from the pool's use just taken)
            context = used - self.reserved if self.cache is None else self._decode_context()
            budget = self.sched.token_budget - k * self.cost.positions_per_step
            if self.prefilling and (budget > 0 or not self.sched.chunked_prefill):
                yield from self._mixed_iteration(k, context, budget, used)
            else:
                yield from self._decode_run(k, context)
            self._admit_waiting()

    def _mixed_iteration(self, k: int, context: float, budget: int, kv: float):
        """One iteration: every decoding sequence's step, then prompt chunks in the rest of the budget (without
        chunked prefill: the oldest prompt whole); ``kv``: the pool's use as it starts (tokens)."""
        env, st, cost = self.env, self.stats, self.cost
        chunked = self.sched.chunked_prefill
        chunks: list[tuple[list[int], int]] = []
        reads, pairs, chunk_tokens = 0.0, 0.0, 0
        if not chunked:  # whole prompts while they fit the budget (the first one always)
            budget = max(self.sched.token_budget, self.prefilling[0][1])
        for entry in self.prefilling:
            left, done_tokens = entry[1], entry[2]
            take = budget if budget < left else left
            if not chunked and take < left:
                break  # a prompt is taken whole or waits
            chunks.append((entry, take))
            reads += done_tokens + take
            pairs += take * done_tokens + take * (take + 1) / 2
            chunk_tokens += take
            budget -= take
            if budget <= 0:
                break
        if not chunked:  # a prefill iteration of its own: the decoders wait (prefill first)
            k, context = 0, 0.0
        dt, memory_bound = cost.iteration_s(k, context, chunk_tokens, reads, pairs)
        dt += self.pending_s
        self.pending_s = 0.0
        growth = self.rate_sum if k else 0.0  # decode steps (first tokens have their places reserved)
        self.growth = growth
        yield env.timeout(dt)
        self.growth = 0.0
        self._account()
        members = k + len(chunks)
        st["iterations"] += 1
        st["prefill_iterations"] += 1
        st["memory_bound_iterations"] += memory_bound
        self._busy(dt, members, kv, kv + growth)
        share = dt / members
        if k:
            self.iteration += 1
            self.share_clock += share
        if self.cache is not None:  # the pool as the iteration leaves it
            self.cache.fit(self.capacity - self._kv_used())
        tokens = k * cost.positions_per_step + chunk_tokens
        share_s, prefill_s = self.share_s, self.prefill_s
        finished = False
        for entry, take in chunks:
            i = entry[0]
            share_s[i] += share
            prefill_s[i] += dt * take / tokens  # its chunk's share of the iteration
            entry[1] -= take
            entry[2] += take
            finished = finished or entry[1] == 0
        self._complete_due()
        if finished:
            done = [entry for entry, _ in chunks if entry[1] == 0]
            self.prefilling = [entry for entry in self.prefilling if entry[1] > 0]
            first_token = self.tl.first_token_s
            for entry in done:
                i = entry[0]
                if first_token[i] != first_token[i]:
                    first_token[i] = env.now
                self.first_done[i] = 1  # the prompt's last chunk yields a token
                if self.cache is not None:
                    self._cache_prefix(i)
                self._join(i)

    def _decode_run(self, k: int, context: float):
        """Decode-only iterations up to the next completion or until the KV pool is full, cut at the end of the
        iteration in progress when a request is admitted."""
        env, cost, st = self.env, self.cost, self.stats
        growth = self.rate_sum
        room = int((self.capacity - self._kv_used()) // growth) if growth > 0 else self._next_due() - self.iteration
        n = max(min(self._next_due() - self.iteration, room), 1)
        if self.exact or self.pending_s:
            n = 1
        start = env.now
        kv = self._kv_used()
        extra = self.pending_s
        self.pending_s = 0.0
        total = cost.run_s(k, context, n, growth) + extra
        timer = env.timeout(total)
        self.run = (start + extra, k, context, n, growth)
        yield timer | self.wake
        done = n
        if not timer.processed:  # an admission: finish the iteration in progress, then let its prompt in
            done = min(cost.steps_within(k, context, n, max(env.now - start - extra, 0.0), growth) + 1, n)
            end = start + extra + cost.run_s(k, context, done, growth)
            if end > env.now:
                yield env.timeout(end - env.now)
        self.run = None
        self._account()
        elapsed = cost.run_s(k, context, done, growth) + extra
        st["iterations"] += done
        st["memory_bound_iterations"] += cost.memory_bound_steps(k, done)
        self._busy(elapsed, k, kv, kv + growth * done)
        self.iteration += done
        self.share_clock += elapsed / k
        if self.cache is not None:  # the pool as the run leaves it (its KV grew all along)
            self.cache.fit(self.capacity - self._kv_used())
        self._complete_due()

    def _busy(self, seconds: float, members: int, kv_before: float, kv_after: float) -> None:
        """Count ``seconds`` of iterations of ``members`` sequences, the KV in use growing from ``kv_before`` to
        ``kv_after`` tokens."""
        st = self.stats
        st["busy_s"] += seconds
        st["batch_area"] += seconds * members
        st["kv_area"] += seconds * (kv_before + kv_after) / 2
        if kv_after > st["kv_peak_tokens"]:
            st["kv_peak_tokens"] = kv_after
        self.tl.busy_s += seconds
