"""An MoE engine's iteration cost under continuous batching (:mod:`sim.batching`): the dense operators from the card's
specs and, as the ``experts`` operator, the routed experts an iteration's positions touch, served by the cache's
tiers with their stalls.

An iteration of ``n`` positions (decoding sequences' verification steps and prompt chunks) touches, per layer, the
distinct experts of ``n / positions_per_step`` sequences' draws of the routing law: the union law of
:mod:`sim.moe.expert_counts`, with the engine's whole cache (batched sequences share it). Its cost is
:func:`sim.moe.stepcost.step_times` without the dense work: resident experts at their roofline (bytes, or the
arithmetic of the tokens routed to each), misses computed by the host CPU within its budget or read over the link,
peers and disk, and the eager overhead on an iteration that reads over the link (membership changes every
iteration, so eagerness does not stick). The operator is the mean over sampled iterations of each size (sampled
once, with the run's generator, on a grid of sizes: exact up to :data:`EXACT`, then geometric), so a decode run stays
in closed form; what the tiers served is kept per size for the run's telemetry.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sim.batching.cost import StepCost
from sim.core.units import GB, KIB
from sim.moe.decode_batch import TierSampler, engine_step_law
from sim.moe.expert_counts import draws_per_step
from sim.moe.setup import EngineSetup
from sim.moe.spec_costs import tokens_per_expert

EXACT = 64  # iteration sizes (positions) sampled exactly; larger ones on a geometric grid
GRID_RATIO = 1.1  # between grid sizes (interpolated linearly)
SAMPLES = 64  # iterations sampled per size
TALLY = ("compute_s", "stall_s", "eager_s", "pcie_reads", "cpu_experts", "routed", "peer_experts", "disk_reads")


class ExpertOperator:
    """Expected seconds of the routed experts of an iteration of ``n`` positions, and what the tiers served."""

    def __init__(self, eng: EngineSetup, rng: np.random.Generator) -> None:
        self.eng, self.rng = eng, rng
        moe = eng.moe
        self.q = 1 + moe.draft.tokens
        self.params = dataclasses.replace(eng.params, break_mode="per_step", dense_s=0.0, host_s=0.0)
        self.means: dict[int, dict[str, float]] = {}

    def _size(self, n: int) -> dict[str, float]:
        """Means per iteration of ``n`` positions (sampled once)."""
        if n not in self.means:
            eng, moe = self.eng, self.eng.moe
            sequences = n / self.q
            law = TierSampler.build(engine_step_law(eng, eng.popularity, sequences * draws_per_step(
                moe.top_k, self.q, eng.law.locality)))
            counts = law.sample(eng, SAMPLES, self.rng)
            p = self.params
            if eng.specs is not None and eng.spec.step.gpu_expert_s is None and eng.specs.memory_gbps is not None:
                tpe = tokens_per_expert(n * moe.top_k, moe.experts_per_layer)
                p = dataclasses.replace(p, gpu_expert_s=eng.specs.gpu_expert_s(tpe))
            t = counts.times(p)
            row = {"seconds": float(t.total_s.mean()), "compute_s": float(t.compute_s.mean()),
                   "stall_s": float(t.stall_s.mean()), "eager_s": float(t.eager_s.mean()),
                   "pcie_reads": float(t.pcie_reads.mean()), "cpu_experts": float(t.cpu_experts.mean()),
                   "routed": float(counts.routed.mean()),
                   "peer_experts": float(counts.peer.sum(axis=(1, 2)).mean()) if counts.peer is not None else 0.0,
                   "disk_reads": float(counts.disk.sum(axis=1).mean()) if counts.disk is not None else 0.0}
            self.means[n] = row
        return self.means[n]

    def _bracket(self, positions: float) -> tuple[int, int, float]:
        """Grid sizes around ``positions`` and the weight of the upper one."""
        if positions <= EXACT:
            n = max(int(round(positions)), 1)
            return n, n, 0.0
        j = math.log(positions / EXACT) / math.log(GRID_RATIO)
        lo = int(round(EXACT * GRID_RATIO ** math.floor(j)))
        hi = int(round(EXACT * GRID_RATIO ** math.ceil(j)))
        return lo, hi, 0.0 if hi == lo else (positions - lo) / (hi - lo)

    def value(self, positions: float, key: str = "seconds") -> float:
        lo, hi, w = self._bracket(positions)
        a = self._size(lo)[key]
        return a if w == 0 else a + w * (self._size(hi)[key] - a)

    def __call__(self, positions: float) -> float:
        return self.value(positions)


def moe_step_cost(eng: EngineSetup, rng: np.random.Generator) -> tuple[StepCost, ExpertOperator]:
    """The iteration cost of MoE engine ``eng`` (continuous batching) and its experts operator."""
    experts = ExpertOperator(eng, rng)
    moe, specs = eng.moe, eng.specs
    q = experts.q
    overhead = eng.params.host_s
    kv = pair = 0.0
    if specs is not None and specs.dense_s_given is None and specs.dense_bytes is not None \
            and specs.memory_gbps is not None:
        memory = specs.memory_gbps * GB
        overhead += specs.layers * specs.layer_s
        weights = specs.dense_bytes / memory
        token = 2 * (specs.dense_params or 0.0) / (specs.compute_tflops * 1e12) if specs.compute_tflops else 0.0
    else:  # the dense work in seconds as the scenario gives it: constant per iteration
        weights, token = eng.params.dense_s, 0.0
    prompt = _prompt_token_s(eng) if token == 0 else 0.0  # no arithmetic rate known: the engine's prompt rate
    if specs is not None:
        kv = specs.kv_s_per_token
        if moe.hidden is not None and specs.compute_tflops:
            pair = 4 * moe.layers * moe.hidden / (specs.compute_tflops * 1e12)
    state = 0.0  # a hybrid model's linear-attention state, read and written once per decoding sequence and step
    if moe.state_kib_per_sequence and specs is not None and specs.memory_gbps is not None:
        state = 2 * moe.state_kib_per_sequence * KIB / (specs.memory_gbps * GB)
    return StepCost(overhead_s=overhead, weights_s=weights, token_s=token, kv_s_per_token=kv, pair_s=pair,
                    positions_per_step=q, prompt_token_s=prompt, experts_s=experts, state_s=state), experts


def _prompt_token_s(eng: EngineSetup) -> float:
    """Seconds per prompt position the scenario gives (``prefill.token_s`` or ``1 / prefill_tok_s``), else 0."""
    e = eng.spec
    if e.prefill is not None:
        return e.prefill.token_s
    return 1.0 / e.prefill_tok_s if e.prefill_tok_s else 0.0
