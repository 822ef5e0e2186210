"""An MoE engine once started: the VRAM arithmetic, the expert cache, tiers on peer GPUs, host RAM and disk, driver
paging, layer split, and its step costs.

Vocabulary: an *expert slot* holds one expert in a cache (VRAM or a peer's copies); the engine's ``parallel``
*sequences* (decode slots in the engines' own words) each cache ``expert_slots // parallel`` experts when they take
turns, or share the whole cache when they are batched. PCIe slots appear only in the hardware (``slot_gen``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.config.engine import Engine
from sim.config.links import link_info
from sim.config.models import Moe
from sim.config.scenario import Scenario
from sim.core.errors import SimulationError
from sim.core.units import GB, GIB, MIB
from sim.moe.expert_cache import auto_slots, che_hit_probabilities, home_tiers, static_cache
from sim.moe.routing import AliasTables, RoutingLaw, layer_popularity
from sim.moe.stepcost import StepParams
from sim.serving.metrics import VramRows


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
    popularity: np.ndarray  # [layers, experts] of the served workload
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
    vram = scn.gpus[gpu.type].vram_gib
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
    per_sequence = slots if e.batching else slots // e.parallel  # taking turns, each sequence has its share
    r = moe.routing
    law = RoutingLaw(moe.layers, moe.experts_per_layer, top_k=moe.top_k, exponent=r.exponent, locality=r.locality,
                     drift_weight=r.drift_weight, drift_hot_experts=r.drift_hot_experts,
                     drift_concentration=r.drift_concentration, exponent_spread=r.exponent_spread)
    popularity = layer_popularity(law, np.random.default_rng(r.popularity_seed))
    profile = popularity if e.profile_seed is None else layer_popularity(law, np.random.default_rng(e.profile_seed))
    if e.policy == "static":
        resident = static_cache(profile, per_sequence)
    elif e.policy == "lru":  # Che's approximation: each expert is resident with its characteristic-time probability
        resident = che_hit_probabilities(popularity.ravel(), per_sequence)
    else:  # in-cache LFU under a stationary law keeps the most frequently used experts: a cache of the true profile
        resident = static_cache(popularity, per_sequence)
    ranked = profile if e.policy == "static" else popularity
    peer_slots: list[int] = []
    vram_rows = [(e.gpu, (gpu.reserved_gib + overhead) * GIB / MIB + slots * moe.expert_mib + moe.draft.head_mib,
                  vram * GIB / MIB)]
    paged: list[bool] = []
    expert_s: list[float] = []
    for name, peer in e.peers.items():  # each holds at most the experts no faster tier holds
        g = m.gpus[name]
        card_mib = scn.gpus[g.type].vram_gib * GIB / MIB
        peer_free = scn.gpus[g.type].vram_gib - g.reserved_gib - peer.overhead_gib
        wanted = auto_slots(peer_free, moe.expert_mib, peer.reserve_mib, 0.0) if peer.slots == "auto" \
            else int(peer.slots)
        peer_slots.append(max(min(wanted, total - slots - sum(peer_slots)), 0))
        used = (g.reserved_gib + peer.overhead_gib) * GIB / MIB + peer_slots[-1] * moe.expert_mib + peer.runtime_mib
        vram_rows.append((name, used, card_mib))
        paged.append(card_mib - used < peer.paging_threshold_mib)
        if paged[-1] and peer.paging_gbps is None:
            raise SimulationError(f"machines.{machine}.engine.peers.{name}: {card_mib - used:.0f} MiB left free is "
                                  f"under paging_threshold_mib {peer.paging_threshold_mib:g}, and paging_gbps "
                                  "is not given")
        # paged: every expert the card computes first comes over its link at the driver's paging rate
        expert_s.append(peer.expert_s + (moe.expert_mib * MIB / (peer.paging_gbps * GB) if paged[-1] else 0.0))
    split: dict[str, tuple[float, ...]] = {}
    if e.placement == "layer_split":
        slots, resident, split, split_rows = _layer_split(scn, machine, moe=moe, slots=slots, ranked=ranked, e=e)
        per_sequence = slots if e.batching else slots // e.parallel
        if per_sequence < slots:
            resident = static_cache(ranked, per_sequence)
        vram_rows[0] = (e.gpu, (gpu.reserved_gib + overhead) * GIB / MIB + slots * split["split_share"][0]
                        * moe.expert_mib + moe.draft.head_mib, vram * GIB / MIB)
        vram_rows += split_rows
    host_experts = None if e.host_ram_gib is None else int(e.host_ram_gib * GIB // (moe.expert_mib * MIB))
    tier = home_tiers(ranked, slots, peer_slots, host_experts)  # ranks per_sequence..slots: other sequences' share
    s = e.step
    disk = scn.disks[m.disk] if e.host_ram_gib is not None and m.disk is not None else None
    params = StepParams(dense_s=s.dense_s, gpu_expert_s=s.gpu_expert_s, cpu_expert_s=s.cpu_expert_s,
                        pcie_latency_s=s.pcie_latency_s, graph_break_s=s.graph_break_s, host_s=s.host_s,
                        link_gbps=link_info(scn, m, e.gpu).gbps, expert_bytes=moe.expert_mib * MIB,
                        link_share=s.link_share, break_idle_share=s.break_idle_share, break_mode=s.break_mode,
                        peer_expert_s=tuple(expert_s), peer_latency_s=tuple(p.latency_s for p in e.peers.values()),
                        disk_gbps=disk.read_gbps if disk is not None and disk.read_gbps else float("inf"),
                        disk_latency_s=disk.latency_s if disk is not None else 0.0, **split)
    return EngineSetup(machine=machine, spec=e, moe=moe, vram_gib=vram, tenants_gib=gpu.reserved_gib,
                       overhead_gib=overhead, free_gib=free, expert_slots=slots, law=law, popularity=popularity,
                       alias=AliasTables.build(popularity), resident=resident, params=params, tier=tier,
                       peer_slots=tuple(peer_slots), host_experts=host_experts, slots_per_sequence=per_sequence,
                       prefill_resident=static_cache(ranked, slots), peer_paged=tuple(paged), vram=tuple(vram_rows))


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
        capacity.append(auto_slots(scn.gpus[g.type].vram_gib - g.reserved_gib, moe.expert_mib, e.cache_reserve_mib,
                                   0.0))
    total = min(sum(capacity), moe.layers * moe.experts_per_layer)
    share = tuple(float(c) / sum(capacity) for c in capacity)
    rows = []  # each card holds its share of the experts the cards hold together
    for name, part in zip(ls.gpus, share[1:], strict=True):
        g = m.gpus[name]
        rows.append((name, g.reserved_gib * GIB / MIB + total * part * moe.expert_mib,
                     scn.gpus[g.type].vram_gib * GIB / MIB))
    positions = 1 + moe.draft.tokens
    xfer = tuple([0.0] + [2 * (ls.hop_s + positions * ls.activation_kib_per_token * 1024
                                / (link_info(scn, m, name).gbps * GB)) for name in ls.gpus])
    split = {"split_share": share, "split_scale": (1.0, *ls.layer_s_scale), "split_xfer_s": xfer}
    return total, static_cache(ranked, total), split, rows
