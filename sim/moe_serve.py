"""Serving an MoE model from an expert cache in VRAM: engine set-up (VRAM arithmetic, cache) and single-stream requests.

Requests are served one after another (a simpy process per request: prefill, then decode). A request's decode is
advanced a chunk of verification steps at a time: the routing of every position of every step is sampled with numpy,
the cache resolves hits, and :mod:`sim.stepcost` turns the distinct resident and missed experts of each step and
layer into step times. Telemetry per request is what the engines print: hit rate over lookups, share of routed
experts read over PCIe, decode tok/s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from .expert_cache import auto_slots, che_hit_probabilities, static_cache
from .hardware import link_info
from .routing import AliasTables, RequestRouter, RoutingLaw, layer_popularity
from .scenario import Engine, Moe, Scenario
from .stepcost import StepParams, step_times, tokens_per_step
from .units import GIB, MIB

CHUNK_STEPS = 64


@dataclass(frozen=True)
class EngineSetup:
    """What an engine looks like once started: its VRAM budget, cache and routing law."""

    machine: str
    engine: Engine
    moe: Moe
    vram_gib: float
    tenants_gib: float
    free_gib: float  # free at start, before the expert cache
    slots: int
    law: RoutingLaw
    popularity: np.ndarray  # [layers, experts] of the served workload
    tables: AliasTables
    resident: np.ndarray  # static policy: flat mask of cached experts; lru/lfu: per-expert hit probability
    params: StepParams

    @property
    def coverage(self) -> float:
        return self.slots / (self.moe.layers * self.moe.experts_per_layer)

    @property
    def cache_gib(self) -> float:
        return self.slots * self.moe.expert_mib * MIB / GIB


def setup_engine(scn: Scenario, machine: str) -> EngineSetup:
    m = scn.machines[machine]
    e = m.engine
    assert e is not None
    moe = scn.models[e.model].moe
    assert moe is not None
    gpu = m.gpus[e.gpu]
    vram = scn.gpus[gpu.type].vram_gib
    free = vram - gpu.reserved_gib - e.overhead_gib
    total = moe.layers * moe.experts_per_layer
    slots = auto_slots(free, moe.expert_mib, e.cache_reserve_mib, moe.draft.head_mib) if e.expert_cache == "auto" \
        else int(e.expert_cache)
    slots = min(slots, total)
    r = moe.routing
    law = RoutingLaw(moe.layers, moe.experts_per_layer, moe.top_k, r.exponent, r.locality, r.drift_weight,
                     r.drift_hot_experts, r.drift_concentration)
    popularity = layer_popularity(law, np.random.default_rng(r.popularity_seed))
    if e.policy == "static":
        profile = popularity if e.profile_seed is None else layer_popularity(law, np.random.default_rng(e.profile_seed))
        resident = static_cache(profile, slots)
    elif e.policy == "lru":  # Che's approximation: each expert is resident with its characteristic-time probability
        resident = che_hit_probabilities(popularity.ravel(), slots)
    else:  # in-cache LFU under a stationary law keeps the most frequently used experts: a cache of the true profile
        resident = static_cache(popularity, slots)
    s = e.step
    params = StepParams(s.dense_s, s.gpu_expert_s, s.cpu_expert_s, s.pcie_latency_s, s.graph_break_s, s.host_s,
                        link_info(scn, m, e.gpu).gbps, moe.expert_mib * MIB)
    return EngineSetup(machine, e, moe, vram, gpu.reserved_gib, free, slots, law, popularity,
                       AliasTables.build(popularity), resident, params)


@dataclass
class RequestRecord:
    id: int
    prompt_tokens: int
    output_tokens: int
    start_s: float
    ttft_s: float
    decode_s: float
    lookups: int
    hits: int
    routed: int  # distinct experts touched, summed over steps
    pcie_reads: int
    compute_s: float
    stall_s: float
    break_s: float
    idle_s: float

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 1.0

    @property
    def pcie_share(self) -> float:
        return self.pcie_reads / self.routed if self.routed else 0.0

    @property
    def decode_tok_s(self) -> float:
        return self.output_tokens / self.decode_s if self.decode_s > 0 else float("inf")


def decode_request(eng: EngineSetup, tokens: int, rng: np.random.Generator) -> dict[str, float]:
    """Simulate the decode of one request of ``tokens`` generated tokens; returns its telemetry sums."""
    moe = eng.moe
    positions = 1 + moe.draft.tokens
    layers, k = moe.layers, moe.top_k
    router = RequestRouter.start(eng.law, eng.tables, rng)
    acc = dict(first_step_s=-1.0, decode_s=0.0, lookups=0, hits=0, routed=0, pcie_reads=0, compute_s=0.0,
               stall_s=0.0, break_s=0.0, idle_s=0.0)
    produced = 0
    while produced < tokens:
        ids = router.next_tokens(CHUNK_STEPS * positions).reshape(CHUNK_STEPS, positions, layers, k)
        made = tokens_per_step(moe.draft.tokens, moe.draft.acceptance, CHUNK_STEPS, rng)
        done = np.cumsum(made) + produced
        n = int(min(np.searchsorted(done, tokens) + 1, CHUNK_STEPS))
        ids = ids[:n]
        per_layer = np.transpose(ids, (0, 2, 1, 3)).reshape(n, layers, positions * k)
        if eng.engine.policy == "lru":
            hit = rng.random(per_layer.shape) < eng.resident[per_layer]
        else:
            hit = eng.resident[per_layer]
        order = np.argsort(per_layer, axis=2, kind="stable")
        sorted_ids = np.take_along_axis(per_layer, order, axis=2)
        sorted_hit = np.take_along_axis(hit, order, axis=2)
        first = np.ones(sorted_ids.shape, dtype=bool)
        first[:, :, 1:] = sorted_ids[:, :, 1:] != sorted_ids[:, :, :-1]
        resident = (first & sorted_hit).sum(axis=2)
        missed = (first & ~sorted_hit).sum(axis=2)
        t = step_times(resident, missed, eng.params)
        if acc["first_step_s"] < 0:
            acc["first_step_s"] = float(t.total_s[0])
        acc["decode_s"] += float(t.total_s.sum())
        acc["lookups"] += int(hit.size)
        acc["hits"] += int(hit.sum())
        acc["routed"] += int(first.sum())
        acc["pcie_reads"] += int(t.pcie_reads.sum())
        acc["compute_s"] += float(t.compute_s.sum())
        acc["stall_s"] += float(t.stall_s.sum())
        acc["break_s"] += float(t.break_s.sum())
        acc["idle_s"] += float(t.host_s.sum())
        produced = int(done[n - 1])
    acc["output_tokens"] = produced
    return acc


def serve(scn: Scenario, rng: np.random.Generator) -> tuple[EngineSetup, list[RequestRecord]]:
    """Serve the scenario's requests one after another on its engine."""
    assert scn.serve is not None
    sv = scn.serve
    eng = setup_engine(scn, sv.machine)
    env = simpy.Environment()
    records: list[RequestRecord] = []
    lengths = rng.integers(sv.output_tokens_min, sv.output_tokens_max + 1, size=sv.requests)

    def requests():
        for i, tokens in enumerate(lengths):
            start = env.now
            prefill_s = sv.prompt_tokens / eng.engine.prefill_tok_s
            yield env.timeout(prefill_s)
            d = decode_request(eng, int(tokens), rng)
            yield env.timeout(d["decode_s"])
            records.append(RequestRecord(
                i, sv.prompt_tokens, d["output_tokens"], start, prefill_s + d["first_step_s"], d["decode_s"],
                d["lookups"], d["hits"], d["routed"], d["pcie_reads"], d["compute_s"], d["stall_s"], d["break_s"],
                d["idle_s"]))

    env.process(requests())
    env.run()
    return eng, records


def serve_metrics(eng: EngineSetup, recs: list[RequestRecord]) -> dict[str, float]:
    tokens = sum(r.output_tokens for r in recs)
    decode = sum(r.decode_s for r in recs)
    busy = sum(r.compute_s + r.stall_s + r.break_s for r in recs)
    out = {
        "expert_slots": float(eng.slots),
        "expert_coverage": eng.coverage,
        "expert_cache_gib": eng.cache_gib,
        "free_vram_gib": eng.free_gib,
        "expert_hit_rate": float(np.median([r.hit_rate for r in recs])),
        "pcie_spill_share": float(np.median([r.pcie_share for r in recs])),
        "decode_tok_s": tokens / decode,
        "decode_tok_s_median": float(np.median([r.decode_tok_s for r in recs])),
        "gpu_busy_share": busy / decode,
        "requests": float(len(recs)),
        "output_tokens": float(tokens),
    }
    pw = eng.engine.power
    if pw is not None:
        energy = sum(pw.busy_w * r.compute_s + pw.stalled_w * (r.stall_s + r.break_s) + pw.idle_w * r.idle_s
                     for r in recs)
        out["energy_j_per_token"] = energy / tokens
        out["gpu_power_w"] = energy / decode
    return out


def request_rows(recs: list[RequestRecord]) -> list[dict]:
    return [{"request": r.id, "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
             "hit_rate": r.hit_rate, "pcie_share": r.pcie_share, "decode_tok_s": r.decode_tok_s, "ttft_s": r.ttft_s,
             "decode_s": r.decode_s, "stall_s": r.stall_s, "graph_break_s": r.break_s} for r in recs]
