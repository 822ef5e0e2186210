"""What one iteration of a continuous-batching engine costs: each operator its own roofline, their times added.

One iteration processes every decoding sequence's next step (``positions_per_step`` positions each: one, or one plus
the draft tokens a verification step checks) and, with chunked prefill, chunks of admitted prompts. A GPU runs it as
kernels one after another, so an operator's reads cannot hide under another's arithmetic; each takes the longer of
its bytes over the memory rate and its FLOPs over the compute rate, and the iteration is their sum:

- ``linear``: the dense weights (everything outside routed experts) read once, ``2 x parameters`` FLOPs per
  position: ``max(weights_s, token_s x positions)``. Small batches are bound by the read, large ones and prompt
  chunks by the arithmetic;
- ``experts`` (MoE): the routed experts the iteration's positions touch, served from the cache's tiers with their
  stalls (:mod:`sim.moe.batch_cost`); a function of the positions only;
- ``state`` (a model with linear-attention layers, Gated DeltaNet): each decoding sequence reads and writes its
  fixed-size state once per step, whatever its context;
- ``decode attention``: each decoding sequence reads its whole KV once per step, and each of its positions does
  ``4 x layers x hidden`` FLOPs per context token: ``max(kv_s_per_token, pair_s x positions) x context``; the KV is
  read at the attention kernels' own efficiency where it was measured, and each layer's call has a fixed ramp
  (``attention_fixed_s`` per iteration, every layer);
- ``prefill attention``: a chunk reads the KV of the prompt before it and its own, and does the pairs' arithmetic
  (causal): ``max(kv_s_per_token x reads, pair_s x pairs)``;
- ``overhead_s``: scheduling, sampling, launches, per iteration (and ``prompt_token_s`` per prompt token, for an
  engine that gives its prompt rate rather than the specs it derives from).

Where the linear layers' operators were profiled on the card for the model (Vidur's tables, read by
:mod:`sim.formats.operator_profiles`), their measured time replaces the ``linear`` roofline. With tensor parallelism
over ``N`` cards each holds ``1 / N`` of the weights, heads and KV and works on its share in parallel, and every
layer adds two all-reduces of the positions' activations (``2 (N - 1) / N`` of their bytes over the cards' link,
plus a latency each).

Between two events a decode-only batch does not change: every term but the decode attention is a constant per
iteration and that one grows linearly with the context (``growth`` tokens per iteration), so ``n`` iterations take
``n x fixed + a x (n x context + growth x n (n - 1) / 2)`` (:meth:`StepCost.run_s`) and the iterations finished by a
given time solve a quadratic (:meth:`StepCost.steps_within`): no event and no Python work per token.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sim.core.units import GB, KIB


class LinearLayerTimes(Protocol):
    """What the engine needs of a profiled operator table (:class:`sim.formats.operator_profiles.OperatorTable`,
    handed to it by the set-up): a layer's linear operators in seconds for a batch of ``tokens`` tokens."""

    def layer_s(self, tokens: float) -> float: ...


ACTIVATION_BYTES = 2  # bytes per activation value an all-reduce moves (FP16/BF16)


@dataclass(frozen=True)
class StepCost:
    """Seconds per unit of what an iteration does (all from named specs and efficiencies)."""

    overhead_s: float  # fixed per iteration (s)
    weights_s: float  # reading the dense weights once (s)
    token_s: float  # the dense matrix products of one position (s)
    kv_s_per_token: float  # reading one context token's KV (s)
    pair_s: float  # attention arithmetic of one (position, context token) pair (s)
    positions_per_step: int = 1  # positions a decoding sequence processes per iteration
    prompt_token_s: float = 0.0  # per prompt-chunk token, when an engine gives its prompt rate instead of specs (s)
    experts_s: Callable[[float], float] | None = field(default=None, compare=False)  # MoE: seconds for n positions
    state_s: float = 0.0  # a decoding sequence's linear-attention state read and written once per iteration (s)
    linear_table: LinearLayerTimes | None = field(default=None, compare=False)  # profiled linear operators, per layer
    table_layers: int = 0  # layers the profiled block is repeated over
    allreduce_fixed_s: float = 0.0  # tensor parallel: the all-reduces' latencies per iteration (s)
    allreduce_token_s: float = 0.0  # tensor parallel: the all-reduces' transfer per position (s)
    attention_fixed_s: float = 0.0  # the attention kernels' fixed ramp per iteration, every layer's call (s)
    # what linear_s and _decode_terms computed, by their argument: an iteration repeats a few thousand batch sizes,
    # each asked for tens of times (a profiled table's lookup is a bisection and an interpolation)
    _linear: dict = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)
    _terms: dict = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)

    @classmethod
    def build(cls, *, weights_bytes: float, kv_kib_per_token: float, params_b: float, layers: int, hidden: int,
              hbm_gbps: float, tflops: float, memory_efficiency: float, compute_efficiency: float,
              overhead_s: float, positions_per_step: int = 1,
              experts_s: Callable[[float], float] | None = None, state_kib_per_sequence: float = 0.0,
              linear_table: LinearLayerTimes | None = None, tensor_parallel: int = 1, allreduce_gbps: float = 0.0,
              allreduce_latency_s: float = 0.0, kv_read_efficiency: float | None = None,
              attention_call_s: float = 0.0) -> StepCost:
        """From the model's geometry (dense bytes, KiB of KV per token, 1e9 dense parameters, layers, width), the
        card's specs (GB/s, TFLOP/s) and the engine's efficiencies (fractions) and overhead (s); ``linear_table``:
        the linear layers' profiled operators on that card (at that tensor-parallel degree); ``tensor_parallel``
        cards, their all-reduces at ``allreduce_gbps`` (GB/s) and ``allreduce_latency_s`` each; the attention
        kernels read KV at ``kv_read_efficiency`` (default: ``memory_efficiency``) and each layer's call takes
        ``attention_call_s`` besides its bytes."""
        n = tensor_parallel
        memory = memory_efficiency * hbm_gbps * GB * n  # bytes/s, all cards together
        kv_memory = (kv_read_efficiency or memory_efficiency) * hbm_gbps * GB * n
        compute = compute_efficiency * tflops * 1e12 * n  # FLOP/s
        fixed = token = 0.0
        if n > 1:
            fixed = 2 * layers * allreduce_latency_s
            token = 2 * layers * 2 * (n - 1) / n * hidden * ACTIVATION_BYTES / (allreduce_gbps * GB)
        return cls(overhead_s, weights_bytes / memory, 2 * params_b * 1e9 / compute, kv_kib_per_token * KIB / kv_memory,
                   4 * layers * hidden / compute, positions_per_step, experts_s=experts_s,
                   state_s=2 * state_kib_per_sequence * KIB / memory, linear_table=linear_table,
                   table_layers=layers if linear_table is not None else 0, allreduce_fixed_s=fixed,
                   allreduce_token_s=token, attention_fixed_s=layers * attention_call_s)

    # --- the operators ---------------------------------------------------------------------------------------
    def linear_s(self, positions: float) -> float:
        """The dense matrix products of ``positions`` positions: weights read once, or their arithmetic (or their
        profiled time); with tensor parallelism, the layers' all-reduces too."""
        known = self._linear.get(positions)
        if known is not None:
            return known
        seconds = self._linear_s(positions)
        self._linear[positions] = seconds
        return seconds

    def _linear_s(self, positions: float) -> float:
        if self.linear_table is not None:
            seconds = self.table_layers * self.linear_table.layer_s(positions)
        else:
            seconds = max(self.weights_s, self.token_s * positions)
        if self.allreduce_fixed_s:
            seconds += self.allreduce_fixed_s + self.allreduce_token_s * positions
        return seconds

    def routed_s(self, positions: float) -> float:
        """The routed experts ``positions`` positions touch (0 for a dense model)."""
        return self.experts_s(positions) if self.experts_s is not None and positions > 0 else 0.0

    @property
    def decode_attention_s_per_token(self) -> float:
        """Decode attention per token of context a decoding sequence holds (reads or arithmetic, the longer)."""
        return max(self.kv_s_per_token, self.pair_s * self.positions_per_step)

    def prefill_attention_s(self, reads: float, pairs: float) -> float:
        """Prompt chunks' attention: ``reads`` KV tokens read, ``pairs`` (position, context token) pairs."""
        return max(self.kv_s_per_token * reads, self.pair_s * pairs) if pairs > 0 else 0.0

    def iteration_s(self, k: int, context: float, chunk_tokens: int = 0, chunk_reads: float = 0.0,
                    chunk_pairs: float = 0.0) -> tuple[float, bool]:
        """One iteration of ``k`` decoding sequences holding ``context`` KV tokens and prompt chunks of
        ``chunk_tokens`` tokens (``chunk_reads`` KV tokens read, ``chunk_pairs`` attention pairs); and whether its
        linear layers are bound by reading the weights (not by their arithmetic)."""
        positions = k * self.positions_per_step + chunk_tokens
        seconds = (self.overhead_s + self.linear_s(positions) + self.prompt_token_s * chunk_tokens
                   + self.routed_s(positions)
                   + self.decode_attention_s_per_token * context + self.prefill_attention_s(chunk_reads, chunk_pairs))
        if self.state_s:
            seconds += self.state_s * k
        if self.attention_fixed_s:
            seconds += self.attention_fixed_s
        return seconds, self.weights_s >= self.token_s * positions

    # --- decode runs in closed form --------------------------------------------------------------------------
    def _decode_terms(self, k: int) -> tuple[float, float]:
        """(seconds of a decode iteration of ``k`` sequences outside its attention, attention seconds per token)."""
        known = self._terms.get(k)
        if known is None:
            known = self._terms[k] = self._decode_terms_of(k)
        return known

    def _decode_terms_of(self, k: int) -> tuple[float, float]:
        positions = k * self.positions_per_step
        fixed = self.overhead_s + self.linear_s(positions) + self.routed_s(positions) + self.attention_fixed_s
        if self.state_s:
            fixed += self.state_s * k
        return fixed, self.decode_attention_s_per_token

    def run_s(self, k: int, context: float, n: int, growth: float | None = None) -> float:
        """Seconds of ``n`` decode iterations of ``k`` sequences holding ``context`` KV tokens at the first, the
        context growing by ``growth`` tokens per iteration (default: one per sequence)."""
        if n <= 0:
            return 0.0
        g = float(k) if growth is None else growth
        fixed, per_token = self._decode_terms(k)
        return n * fixed + per_token * (n * context + g * n * (n - 1) / 2)

    def memory_bound_steps(self, k: int, n: int) -> int:
        """How many of ``n`` decode iterations of ``k`` sequences have weight-bound linear layers (all or none)."""
        return n if self.weights_s >= self.token_s * k * self.positions_per_step else 0

    def steps_within(self, k: int, context: float, n: int, seconds: float, growth: float | None = None) -> int:
        """Iterations (at most ``n``) of that run that end within ``seconds``."""
        if self.run_s(k, context, n, growth) <= seconds:
            return n
        g = float(k) if growth is None else growth
        fixed, per_token = self._decode_terms(k)
        # run_s(m) = A m^2 + B m with A = per_token g / 2, B = fixed + per_token (context - g / 2): the root, then
        # checked both ways against rounding
        a, b = per_token * g / 2, fixed + per_token * (context - g / 2)
        if a > 0:
            m = int((-b + math.sqrt(max(b * b + 4 * a * seconds, 0.0))) / (2 * a))
        else:
            m = int(seconds / b) if b > 0 else n
        m = max(0, min(m, n))
        while m > 0 and self.run_s(k, context, m, growth) > seconds:
            m -= 1
        while m < n and self.run_s(k, context, m + 1, growth) <= seconds:
            m += 1
        return m
