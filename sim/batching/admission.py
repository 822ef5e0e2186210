"""KV-limited admission when the pool is the engine's own, as its log reports it: one rule for every engine path.

A scenario that takes its KV pool from the engine's log (``scheduler.num_gpu_blocks_override`` x ``block_size``: the
``# GPU blocks`` or ``GPU KV cache size: N tokens`` line, beside which vLLM prints its maximum concurrency, the pool
over the tokens of a request of ``max_model_len``) states how many sequences the engine holds at once. A request starts
only while the pool holds its whole sequence (prompt and every token it will generate,
:func:`sequence_tokens`) beside the sequences already running, each of which keeps that booking until it ends; the
rest wait in the queue, first come first served. The booked KV bounds what the running sequences can ever hold, so
the pool never fills under them: nothing is preempted, and a pool of exactly ``k`` such sequences runs ``k`` at most.

The same rule serves both paths that can hold such a pool: the continuous-batching engine
(:class:`ReservingBatchingServer`, whose own admission would let in every prompt that fits now and preempt the newest
as their KV grows) and slots taking turns (:class:`ReservingSlotServer`, which otherwise has no KV limit at all). A
pool sized from VRAM, or a slot engine without one, keeps its engine's admission unchanged.
"""

from __future__ import annotations

import numpy as np
import simpy

from sim.batching.server import BatchingServer
from sim.config.engine import Engine
from sim.serving.queue import QueueSpec, Server, SharedGpuServer, Timeline, Work


def log_pool_tokens(e: Engine) -> int | None:
    """The KV pool engine ``e`` reports in its log (tokens: ``num_gpu_blocks_override`` x ``block_size``), or None
    when the scenario sizes it otherwise (or gives none)."""
    sc = e.scheduler
    if sc is None or sc.num_gpu_blocks_override is None:
        return None
    return sc.num_gpu_blocks_override * sc.block_size


def sequence_tokens(prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
    """KV tokens each request's whole sequence holds at most: its prompt and the tokens it generates (at least one,
    the first token's place, which a prompt holds while it is prefilled)."""
    return np.asarray(prompt, dtype=np.int64) + np.maximum(np.asarray(output, dtype=np.int64), 1)


class KvReservation:
    """The admission rule (a mixin before a :class:`sim.serving.queue.Server`): a request starts when the server has
    a place and the pool (``kv_pool_tokens``) holds its whole sequence (``kv_sequence``, tokens) beside the bookings
    of the running ones; one that could never fit is rejected at once."""

    def __init__(self, env: simpy.Environment, work: Work, spec: QueueSpec, tl: Timeline, done, *,
                 kv_pool_tokens: int, kv_sequence: np.ndarray, **kwargs) -> None:
        self.kv_pool = int(kv_pool_tokens)
        self.kv_sequence = np.asarray(kv_sequence, dtype=np.int64)
        self.kv_booking = np.zeros(self.kv_sequence.size, dtype=np.int64)  # tokens booked by each running request
        self.kv_booked = 0  # tokens booked in all
        self.kv_booked_peak = 0
        super().__init__(env, work, spec, tl, done, **kwargs)

    def _admissible(self, i: int) -> bool:
        return int(self.kv_sequence[i]) <= self.kv_pool

    def _has_room(self, i: int) -> bool:
        # the place (fewer than ``sequences`` run) as any server judges it; the booking replaces the batching
        # server's own KV check, whose room for the next step and watermark the booked KV already covers
        return Server._has_room(self, i) and self.kv_booked + int(self.kv_sequence[i]) <= self.kv_pool

    def _start(self, i: int) -> None:
        if not self.kv_booking[i]:
            self.kv_booking[i] = self.kv_sequence[i]
            self.kv_booked += int(self.kv_sequence[i])
            self.kv_booked_peak = max(self.kv_booked_peak, self.kv_booked)
        super()._start(i)

    def _release(self, i: int) -> None:
        self.kv_booked -= int(self.kv_booking[i])
        self.kv_booking[i] = 0

    def _complete(self, i: int) -> None:
        self._release(i)
        super()._complete(i)


class ReservingSlotServer(KvReservation, SharedGpuServer):
    """Slots taking turns on the GPU (:class:`sim.serving.queue.SharedGpuServer`) under the pool's admission rule."""


class ReservingBatchingServer(KvReservation, BatchingServer):
    """The continuous-batching engine (:class:`sim.batching.server.BatchingServer`) under the pool's admission rule.
    Its preemption guard keeps half a token of slack over the pool: the running sequences' KV, a sum of floats,
    reaches the booked total exactly when every one of them is at its last step, and its rounding must not
    preempt anything."""

    def __init__(self, env: simpy.Environment, work: Work, spec: QueueSpec, tl: Timeline, done, **kwargs) -> None:
        super().__init__(env, work, spec, tl, done, **kwargs)
        self.capacity = self.kv_pool + 0.5

    def _preempt(self) -> None:  # not reached while the bookings hold; were it reached, the victim's booking goes
        before = set(self.active)
        super()._preempt()
        for i in before - set(self.active):
            self._release(i)
