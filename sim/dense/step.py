"""Iteration time of a dense model under continuous batching: a roofline per iteration, in closed form over runs.

One iteration processes every decoding sequence's next token and, with chunked prefill, chunks of waiting prompts
(at most ``token_budget`` tokens in all). It reads the weights once and every token's KV context, and computes 2
FLOPs per parameter per token plus attention (``4 x layers x hidden`` FLOPs per pair of a token and a token of its
context). Reads and arithmetic overlap, so an iteration takes

    overhead_s + max(bytes / (memory_efficiency x hbm_gbps), flops / (compute_efficiency x tflops)).

Small batches are bound by reading the weights (decode speed ~ bandwidth / weight bytes, nearly flat in the batch),
large ones and prefill by arithmetic: the knee lies where ``2 x params x batch / compute rate`` overtakes ``weight
bytes / memory rate``.

Between two events (an arrival, a completion, the KV pool filling up) a decode-only batch does not change, and each
iteration's KV context grows by one token per sequence: both roofline terms are straight lines in the iteration
index, so the time of ``n`` iterations is a sum of at most two arithmetic series (:meth:`IterationCost.run_s`) and
the iterations finished by a given time come from a search over that sum (:meth:`IterationCost.steps_within`):
no event and no Python work per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.core.units import GB

KIB = 1024.0


@dataclass(frozen=True)
class IterationCost:
    """Seconds per unit of what an iteration does (all from named specs and efficiencies)."""

    overhead_s: float  # fixed per iteration (s)
    weights_s: float  # reading the weights once (s)
    kv_s_per_token: float  # reading one token's KV (s)
    token_s: float  # the matrix products of one token (s)
    pair_s: float  # attention of one (token, context token) pair (s)

    @classmethod
    def build(cls, *, weights_bytes: float, kv_kib_per_token: float, params_b: float, layers: int, hidden: int,
              hbm_gbps: float, tflops: float, memory_efficiency: float, compute_efficiency: float,
              overhead_s: float) -> IterationCost:
        """From the model's geometry (bytes, KiB per token, 1e9 parameters, layers, width), the card's specs (GB/s,
        TFLOP/s) and the engine's efficiencies (fractions) and overhead (s)."""
        memory = memory_efficiency * hbm_gbps * GB  # bytes/s
        compute = compute_efficiency * tflops * 1e12  # FLOP/s
        return cls(overhead_s, weights_bytes / memory, kv_kib_per_token * KIB / memory, 2 * params_b * 1e9 / compute,
                   4 * layers * hidden / compute)

    def iteration_s(self, tokens: int, context: float, pairs: float) -> tuple[float, bool]:
        """One iteration of ``tokens`` tokens reading ``context`` tokens of KV, with ``pairs`` attention pairs;
        and whether its reads (not its arithmetic) set its time."""
        memory = self.weights_s + self.kv_s_per_token * context
        compute = self.token_s * tokens + self.pair_s * pairs
        return self.overhead_s + max(memory, compute), memory >= compute

    def _lines(self, k: int, context: float) -> tuple[float, float, float, float]:
        """Decode of ``k`` sequences holding ``context`` KV tokens: iteration ``s`` reads ``context + k s`` tokens;
        returns (memory term at s = 0, its slope, compute term at s = 0, its slope)."""
        return (self.weights_s + self.kv_s_per_token * context, self.kv_s_per_token * k,
                self.token_s * k + self.pair_s * context, self.pair_s * k)

    def run_s(self, k: int, context: float, n: int) -> float:
        """Seconds of ``n`` decode iterations of ``k`` sequences holding ``context`` KV tokens at the first."""
        if n <= 0:
            return 0.0
        m0, m1, c0, c1 = self._lines(k, context)
        return n * self.overhead_s + _sum_of_max(m0, m1, c0, c1, n)

    def memory_bound_steps(self, k: int, context: float, n: int) -> int:
        """How many of those ``n`` iterations are bound by their reads."""
        m0, m1, c0, c1 = self._lines(k, context)
        split = _crossing(m0, m1, c0, c1, n)
        return split if m0 >= c0 else n - split

    def steps_within(self, k: int, context: float, n: int, seconds: float) -> int:
        """Iterations (at most ``n``) of that run that end within ``seconds``."""
        lo, hi = 0, n  # run_s(lo) <= seconds; find the largest such lo
        if self.run_s(k, context, n) <= seconds:
            return n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.run_s(k, context, mid) <= seconds:
                lo = mid
            else:
                hi = mid
        return lo


def _series(a: float, b: float, i: int, j: int) -> float:
    """sum of a + b s for s in [i, j)."""
    count = j - i
    return count * a + b * (i + j - 1) * count / 2 if count > 0 else 0.0


def _crossing(m0: float, m1: float, c0: float, c1: float, n: int) -> int:
    """The first s in [0, n] at which the line that leads at s = 0 no longer does (n if it always does)."""
    lead0, lead1, other0, other1 = (m0, m1, c0, c1) if m0 >= c0 else (c0, c1, m0, m1)
    if other1 <= lead1:
        return n
    meet = (lead0 - other0) / (other1 - lead1)  # >= 0: the lines meet here; up to it the leader stays ahead
    return n if meet >= n else int(min(math.floor(meet) + 1, n))


def _sum_of_max(m0: float, m1: float, c0: float, c1: float, n: int) -> float:
    """sum over s in [0, n) of max(m0 + m1 s, c0 + c1 s): two arithmetic series split where the lines cross."""
    split = _crossing(m0, m1, c0, c1, n)
    if m0 >= c0:
        return _series(m0, m1, 0, split) + _series(c0, c1, split, n)
    return _series(c0, c1, 0, split) + _series(m0, m1, split, n)
