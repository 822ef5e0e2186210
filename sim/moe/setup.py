"""An MoE engine once started: the VRAM arithmetic, the expert cache, tiers on peer GPUs, host RAM and disk, driver
paging, layer split, and its step costs.

Vocabulary: an *expert slot* holds one expert in a cache (VRAM or a peer's copies); the engine's ``parallel``
*sequences* (decode slots in the engines' own words) each cache ``expert_slots // parallel`` experts when they take
turns, or share the whole cache when they are batched. PCIe slots appear only in the hardware (``slot_gen``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.config.engine import Engine, Prefill
from sim.config.links import link_info
from sim.config.machines import GpuType
from sim.config.models import Moe
from sim.config.route_traces import routing_trace
from sim.config.scenario import Scenario
from sim.config.unified import card_capacity_gib
from sim.core.errors import SimulationError
from sim.core.units import GB, GIB, MIB
from sim.moe.expert_cache import auto_slots, che_reuse_hit_probabilities, home_tiers, static_cache
from sim.moe.routing import AliasTables, RoutingLaw, inclusion_probabilities, layer_popularity, lookup_shares
from sim.moe.spec_costs import DEFAULTS, StepSpecs, step_specs, tokens_per_expert
from sim.moe.stepcost import StepParams
from sim.moe.trace_replay import served_popularity
from sim.serving.metrics import VramRows


@dataclass(frozen=True)
class EnginePower:
    """The engine GPU's power draw by what it is doing (W)."""

    idle_w: float
    busy_w: float
    stalled_w: float


@dataclass(frozen=True)
class EngineSetup:
    """What an engine looks like once started: its VRAM budget, cache, tiers, routing law and step costs."""

    machine: str
    spec: Engine  # the scenario's engine section
    moe: Moe
    vram_gib: float
    tenants_gib: float
    overhead_gib: float  # the engine's VRAM outside the expert cache
    free_gib: float  # free at start, before the expert cache
    expert_slots: int  # experts the VRAM cache holds
    law: RoutingLaw
    popularity: np.ndarray  # [layers, experts] routing law q of the served workload (lookup shares: pi / top_k)
    alias: AliasTables  # samplers of that popularity, one per layer
    resident: np.ndarray  # static policy: flat mask of cached experts; lru/lfu: per-expert hit probability
    params: StepParams
    tier: np.ndarray  # flat: where an expert is served from when not in VRAM (0..P-1 peers, P host RAM, P+1 disk)
    peer_slots: tuple[int, ...] = ()  # expert copies on each peer GPU
    host_experts: int | None = None  # experts host RAM holds (None: all)
    slots_per_sequence: int = 0  # expert slots each sequence caches (expert_slots // parallel when they take turns)
    prefill_resident: np.ndarray | None = None  # flat mask of experts in VRAM, whole cache (prefill streams the rest)
    peer_paged: tuple[bool, ...] = ()  # per peer: its free VRAM fell under the paging threshold
    vram: VramRows = ()
    specs: StepSpecs | None = None  # what the step costs derive from, with their sources
    power: EnginePower | None = None
    derived_prefill: Prefill | None = None  # prefill from the specs, when the scenario gives no rate or section

    @property
    def peers(self) -> int:
        return len(self.peer_slots)

    @property
    def coverage(self) -> float:
        return self.expert_slots / (self.moe.layers * self.moe.experts_per_layer)

    @property
    def cache_gib(self) -> float:
        return self.expert_slots * self.moe.expert_mib * MIB / GIB


def engine_overhead_gib(e: Engine, moe: Moe) -> float:
    """VRAM the engine holds outside its expert cache (GiB): as given, or dense weights + KV for the context +
    runtime (CUDA context, activations)."""
    if e.overhead_gib is not None:
        return e.overhead_gib
    kv = (moe.kv_kib_per_token or 0.0) * e.context_tokens * 1024 / GIB
    return (moe.dense_gib or 0.0) + kv + e.runtime_gib


def setup_engine(scn: Scenario, machine: str) -> EngineSetup:
    m = scn.machines[machine]
    e = m.engine
    assert e is not None
    moe = scn.models[e.model].moe
    assert moe is not None
    gpu = m.gpus[e.gpu]
    vram = card_capacity_gib(scn, m, e.gpu)
    overhead = engine_overhead_gib(e, moe)
    free = vram - gpu.reserved_gib - overhead
    if free < 0:
        raise SimulationError(f"machines.{machine}.engine: does not fit on {e.gpu}: {vram:g} GiB less other tenants "
                              f"{gpu.reserved_gib:g} GiB leaves {vram - gpu.reserved_gib:.2f} GiB for an engine "
                              f"overhead of {overhead:.2f} GiB")
    total = moe.layers * moe.experts_per_layer
    slots = auto_slots(free, moe.expert_mib, e.cache_reserve_mib, moe.draft.head_mib) if e.expert_cache == "auto" \
        else int(e.expert_cache)
    slots = min(slots, total)
    # taking turns with a split cache, each sequence has its share; batched or shared, the whole cache
    per_sequence = slots if e.batching or e.slots == "shared" else slots // e.parallel
    r = moe.routing
    law = RoutingLaw(moe.layers, moe.experts_per_layer, top_k=moe.top_k, exponent=r.exponent, locality=r.locality,
                     drift_weight=r.drift_weight, drift_hot_experts=r.drift_hot_experts,
                     drift_concentration=r.drift_concentration, exponent_spread=r.exponent_spread,
                     exponent_depth_slope=r.exponent_depth_slope)
    popularity, law = served_popularity(law, r, routing_trace(r))  # the law q per layer (Zipf, or a trace's replay)
    shares = lookup_shares(popularity, moe.top_k)  # what a profile of lookups ranks: pi / top_k
    profile = shares if e.profile_seed is None else \
        lookup_shares(layer_popularity(law, np.random.default_rng(e.profile_seed)), moe.top_k)
    if e.policy == "static":
        resident = static_cache(profile, per_sequence)
    elif e.policy == "lru":  # Che over the fresh references, the previous token's experts kept by reuse hitting
        resident = che_reuse_hit_probabilities(inclusion_probabilities(popularity, moe.top_k).ravel(), per_sequence,
                                               law.locality)
    else:  # in-cache LFU under a stationary law keeps the most frequently used experts: a cache of the true profile
        resident = static_cache(shares, per_sequence)
    ranked = profile if e.policy == "static" else shares
    peer_slots: list[int] = []
    vram_rows = [(e.gpu, (gpu.reserved_gib + overhead) * GIB / MIB + slots * moe.expert_mib + moe.draft.head_mib,
                  vram * GIB / MIB)]
    paged: list[bool] = []
    expert_s: list[float] = []
    specs = step_specs(e, moe, scn.gpus[gpu.type], m)
    positions = 1 + moe.draft.tokens
    tier_order = np.argsort(-ranked.ravel(), kind="stable")
    for name, peer in e.peers.items():  # each holds at most the experts no faster tier holds
        g = m.gpus[name]
        card_mib = card_capacity_gib(scn, m, name) * GIB / MIB
        peer_free = card_capacity_gib(scn, m, name) - g.reserved_gib - peer.overhead_gib
        wanted = auto_slots(peer_free, moe.expert_mib, peer.reserve_mib, 0.0) if peer.slots == "auto" \
            else int(peer.slots)
        peer_slots.append(max(min(wanted, total - slots - sum(peer_slots)), 0))
        used = (g.reserved_gib + peer.overhead_gib) * GIB / MIB + peer_slots[-1] * moe.expert_mib + peer.runtime_mib
        vram_rows.append((name, used, card_mib))
        shortfall_mib = peer.paging_threshold_mib - (card_mib - used)
        paged.append(shortfall_mib > 0)
        if peer.expert_s is not None:
            own_s = peer.expert_s
        else:  # the expert's bytes over this card's memory rate
            own_s = moe.expert_mib * MIB / (specs.memory_efficiency * scn.gpus[g.type].hbm_gbps * GB)
        if paged[-1]:
            if peer.paging_gbps is None and peer.paging_link_share is None:
                raise SimulationError(f"machines.{machine}.engine.peers.{name}: {card_mib - used:.0f} MiB left free "
                                      f"is under paging_threshold_mib {peer.paging_threshold_mib:g}, and neither "
                                      "paging_gbps nor paging_link_share is given")
            rate = peer.paging_gbps if peer.paging_gbps is not None else \
                peer.paging_link_share * link_info(scn, m, name).gbps
            # the experts a step computes on this card, cycled through layer after layer: once the shortfall
            # exceeds their bytes every one of them is paged in (the driver evicts what the next layers need), a
            # smaller one pages that share of them
            start = slots + sum(peer_slots[:-1])
            held = tier_order[start:start + peer_slots[-1]]  # its experts, in placement order; touched per step:
            pi = np.minimum(shares.ravel()[held] * moe.top_k, 1.0)  # each position draws it with its inclusion
            step_mib = float(-np.expm1(positions * np.log1p(-np.minimum(pi, 1 - 1e-12))).sum()) * moe.expert_mib
            faulting = min(1.0, shortfall_mib / max(step_mib, moe.expert_mib))
            own_s += faulting * moe.expert_mib * MIB / (rate * GB)
        expert_s.append(own_s)
    split: dict[str, tuple[float, ...]] = {}
    if e.placement == "layer_split":
        slots, resident, split, split_rows = _layer_split(scn, machine, moe=moe, slots=slots, ranked=ranked, e=e)
        per_sequence = slots if e.batching or e.slots == "shared" else slots // e.parallel
        if per_sequence < slots:
            resident = static_cache(ranked, per_sequence)
        vram_rows[0] = (e.gpu, (gpu.reserved_gib + overhead) * GIB / MIB + slots * split["split_share"][0]
                        * moe.expert_mib + moe.draft.head_mib, vram * GIB / MIB)
        vram_rows += split_rows
    host_experts = None if e.host_ram_gib is None else int(e.host_ram_gib * GIB // (moe.expert_mib * MIB))
    tier = home_tiers(ranked, slots, peer_slots, host_experts)  # ranks per_sequence..slots: other sequences' share
    s = e.step
    disk = scn.disks[m.disk] if e.host_ram_gib is not None and m.disk is not None else None
    params = StepParams(dense_s=specs.dense_s(positions),
                        gpu_expert_s=specs.gpu_expert_s(tokens_per_expert(positions * moe.top_k,
                                                                          moe.experts_per_layer)),
                        cpu_expert_s=specs.cpu_expert_s if specs.cpu_expert_s is not None else float("inf"),
                        host_s=s.host_s, **specs.fixed,
                        link_gbps=link_info(scn, m, e.gpu).gbps, expert_bytes=moe.expert_mib * MIB,
                        link_share=s.link_share, break_idle_share=s.break_idle_share, break_mode=s.break_mode,
                        peer_expert_s=tuple(expert_s), peer_latency_s=tuple(p.latency_s for p in e.peers.values()),
                        disk_gbps=disk.read_gbps if disk is not None and disk.read_gbps else float("inf"),
                        disk_latency_s=disk.latency_s if disk is not None else 0.0, **split)
    return EngineSetup(machine=machine, spec=e, moe=moe, vram_gib=vram, tenants_gib=gpu.reserved_gib,
                       overhead_gib=overhead, free_gib=free, expert_slots=slots, law=law, popularity=popularity,
                       alias=AliasTables.build(popularity), resident=resident, params=params, tier=tier,
                       peer_slots=tuple(peer_slots), host_experts=host_experts, slots_per_sequence=per_sequence,
                       prefill_resident=static_cache(ranked, slots), peer_paged=tuple(paged), vram=tuple(vram_rows),
                       specs=specs, power=engine_power(e, scn.gpus[gpu.type]),
                       derived_prefill=derived_prefill(e, moe, specs))


def derived_prefill(e: Engine, moe: Moe, specs: StepSpecs) -> Prefill | None:
    """Without a prompt rate or a ``prefill`` section: prefill from the specs, layer by layer (each non-resident
    expert a prompt touches streams once over the link, overlapped with compute), each token costing its active
    parameters' arithmetic, 2 FLOPs each, at ``compute_efficiency`` x the card's tensor throughput."""
    if e.prefill is not None or e.prefill_tok_s is not None or specs.compute_tflops is None:
        return None
    active = (specs.dense_params or 0.0) + moe.layers * moe.top_k * specs.expert_params
    return Prefill(order="layer", overlap=True, token_s=2 * active / (specs.compute_tflops * 1e12))


def engine_power(e: Engine, card: GpuType) -> EnginePower | None:
    """The engine GPU's power by state (W): busy as given or the card's board power; stalled as given or at
    ``stalled_share`` (default: the Strata fit's) between idle and busy. None without a power section (a scenario
    check requires a busy power, given or from the card, when there is one)."""
    pw = e.power
    if pw is None:
        return None
    busy = pw.busy_w if pw.busy_w is not None else card.board_power_w
    assert busy is not None
    if pw.stalled_w is not None:
        stalled = pw.stalled_w
    else:
        share = pw.stalled_share if pw.stalled_share is not None else DEFAULTS["stalled_share"][0]
        stalled = pw.idle_w + share * (busy - pw.idle_w)
    return EnginePower(idle_w=pw.idle_w, busy_w=busy, stalled_w=stalled)


def _layer_split(scn: Scenario, machine: str, moe: Moe, slots: int, ranked: np.ndarray, e: Engine):
    """Every layer divided across the engine GPU and ``layer_split.gpus`` in proportion to the expert slots each can
    hold; together they cache the hottest experts of every layer. Returns (slots, resident mask, the step costs'
    split fields: shares, time scales and round trip per layer and card, VRAM rows of the added cards)."""
    m = scn.machines[machine]
    ls = e.layer_split
    assert ls is not None
    capacity = [slots]
    for name in ls.gpus:
        g = m.gpus[name]
        capacity.append(auto_slots(card_capacity_gib(scn, m, name) - g.reserved_gib, moe.expert_mib,
                                   e.cache_reserve_mib, 0.0))
    total = min(sum(capacity), moe.layers * moe.experts_per_layer)
    share = tuple(float(c) / sum(capacity) for c in capacity)
    rows = []  # each card holds its share of the experts the cards hold together
    for name, part in zip(ls.gpus, share[1:], strict=True):
        g = m.gpus[name]
        rows.append((name, g.reserved_gib * GIB / MIB + total * part * moe.expert_mib,
                     card_capacity_gib(scn, m, name) * GIB / MIB))
    positions = 1 + moe.draft.tokens
    xfer = tuple([0.0] + [2 * (ls.hop_s + positions * ls.activation_kib_per_token * 1024
                                / (link_info(scn, m, name).gbps * GB)) for name in ls.gpus])
    split = {"split_share": share, "split_scale": (1.0, *ls.layer_s_scale), "split_xfer_s": xfer}
    return total, static_cache(ranked, total), split, rows
