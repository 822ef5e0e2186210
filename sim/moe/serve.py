"""Serving an MoE model from an expert cache in VRAM: engine set-up (VRAM arithmetic, cache, tiers on peer GPUs,
host RAM and disk, driver paging, layer split), one request's decode, and the telemetry of a served workload.

``serve`` builds the workload (:mod:`sim.workload`), samples every request's GPU work (:mod:`sim.decode_batch`,
:mod:`sim.prefill`) and moves the requests through the engine (:mod:`sim.server`, :mod:`sim.batching`).
``decode_request`` decodes one request a chunk of verification steps at a time, by counts or by sampling every
lookup (the reference the vectorised path is checked against); :mod:`sim.stepcost` turns the distinct resident and
missed experts of each step and layer into step times. Telemetry per request is what the engines print: hit rate
over lookups, share of routed experts read over PCIe, decode tok/s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sim.config.scenario import Engine, Moe, Scenario
from sim.core.errors import SimulationError
from sim.core.units import GB, GIB, MIB
from sim.lab.hardware import link_info
from sim.moe.decode_batch import TierSampler, engine_step_law
from sim.moe.expert_cache import auto_slots, che_hit_probabilities, home_tiers, static_cache
from sim.moe.expert_counts import draws_per_step
from sim.moe.routing import AliasTables, RequestRouter, RoutingLaw, layer_popularity, request_popularity
from sim.moe.stepcost import StepParams, StepTimes, expected_tokens_per_step, step_times, tokens_per_step
from sim.serving.queue import Timeline, request_work, simulate
from sim.serving.served import RequestRecord, ServedRequests, as_served
from sim.serving.workload import build_table

CHUNK_STEPS = 64


@dataclass(frozen=True)
class EngineSetup:
    """What an engine looks like once started: its VRAM budget, cache and routing law."""

    machine: str
    engine: Engine
    moe: Moe
    vram_gib: float
    tenants_gib: float
    overhead_gib: float  # the engine's VRAM outside the expert cache
    free_gib: float  # free at start, before the expert cache
    slots: int
    law: RoutingLaw
    popularity: np.ndarray  # [layers, experts] of the served workload
    tables: AliasTables
    resident: np.ndarray  # static policy: flat mask of cached experts; lru/lfu: per-expert hit probability
    params: StepParams
    tier: np.ndarray  # flat: where an expert is served from when not in VRAM (0..P-1 peers, P host RAM, P+1 disk)
    peer_slots: tuple[int, ...] = ()
    host_slots: int | None = None  # experts host RAM holds (None: all)
    slot_slots: int = 0  # experts each decode slot caches (slots // parallel)
    prefill_resident: np.ndarray | None = None  # flat mask of experts in VRAM, whole cache (prefill streams the rest)
    peer_paged: tuple[bool, ...] = ()  # per peer: its free VRAM fell under the paging threshold
    vram: tuple[tuple[str, float, float], ...] = ()  # per GPU: (name, used MiB, total MiB)

    @property
    def peers(self) -> int:
        return len(self.peer_slots)

    @property
    def coverage(self) -> float:
        return self.slots / (self.moe.layers * self.moe.experts_per_layer)

    @property
    def cache_gib(self) -> float:
        return self.slots * self.moe.expert_mib * MIB / GIB


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
    per_slot = slots if e.batching else slots // e.parallel  # without batching, each decode slot has its share
    r = moe.routing
    law = RoutingLaw(moe.layers, moe.experts_per_layer, moe.top_k, r.exponent, r.locality, r.drift_weight,
                     r.drift_hot_experts, r.drift_concentration, r.exponent_spread)
    popularity = layer_popularity(law, np.random.default_rng(r.popularity_seed))
    profile = popularity if e.profile_seed is None else layer_popularity(law, np.random.default_rng(e.profile_seed))
    if e.policy == "static":
        resident = static_cache(profile, per_slot)
    elif e.policy == "lru":  # Che's approximation: each expert is resident with its characteristic-time probability
        resident = che_hit_probabilities(popularity.ravel(), per_slot)
    else:  # in-cache LFU under a stationary law keeps the most frequently used experts: a cache of the true profile
        resident = static_cache(popularity, per_slot)
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
    split: tuple[tuple[float, ...], ...] = ((), (), ())
    if e.placement == "layer_split":
        slots, resident, split, split_rows = _layer_split(scn, machine, moe, slots, ranked, e)
        per_slot = slots if e.batching else slots // e.parallel
        if per_slot < slots:
            resident = static_cache(ranked, per_slot)
        vram_rows[0] = (e.gpu, (gpu.reserved_gib + overhead) * GIB / MIB + slots * split[0][0] * moe.expert_mib
                        + moe.draft.head_mib, vram * GIB / MIB)
        vram_rows += split_rows
    host_slots = None if e.host_ram_gib is None else int(e.host_ram_gib * GIB // (moe.expert_mib * MIB))
    tier = home_tiers(ranked, slots, peer_slots, host_slots)  # ranks per_slot..slots: other slots; host RAM here
    s = e.step
    disk = scn.disks[m.disk] if e.host_ram_gib is not None and m.disk is not None else None
    params = StepParams(s.dense_s, s.gpu_expert_s, s.cpu_expert_s, s.pcie_latency_s, s.graph_break_s, s.host_s,
                        link_info(scn, m, e.gpu).gbps, moe.expert_mib * MIB, s.link_share, s.break_idle_share,
                        s.break_mode, tuple(expert_s), tuple(p.latency_s for p in e.peers.values()),
                        disk.read_gbps if disk is not None and disk.read_gbps else float("inf"),
                        disk.latency_s if disk is not None else 0.0, *split)
    return EngineSetup(machine, e, moe, vram, gpu.reserved_gib, overhead, free, slots, law, popularity,
                       AliasTables.build(popularity), resident, params, tier, tuple(peer_slots), host_slots, per_slot,
                       static_cache(ranked, slots), tuple(paged), tuple(vram_rows))


def _layer_split(scn: Scenario, machine: str, moe: Moe, slots: int, ranked: np.ndarray, e: Engine):
    """Every layer divided across the engine GPU and ``layer_split.gpus`` in proportion to the expert slots each can
    hold; together they cache the hottest experts of every layer. Returns (slots, resident mask, (shares, time
    scales, round trip per layer and card), VRAM rows of the added cards)."""
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
    return total, static_cache(ranked, total), (share, (1.0, *ls.layer_s_scale), xfer), rows


_SUMS = ("decode_s", "lookups", "hits", "peer_lookups", "disk_lookups", "routed", "pcie_reads", "cpu_experts",
         "peer_experts", "disk_reads", "compute_s", "stall_s", "break_s", "idle_s")


_SECONDS = ("decode_s", "compute_s", "stall_s", "break_s", "idle_s")


def _add_steps(acc: dict[str, float], t: StepTimes, **counts: int) -> None:
    if acc["first_step_s"] < 0:
        acc["first_step_s"] = float(t.total_s[0])
    acc["decode_s"] += float(t.total_s.sum())
    acc["pcie_reads"] += int(t.pcie_reads.sum())
    acc["cpu_experts"] += int(t.cpu_experts.sum())
    acc["compute_s"] += float(t.compute_s.sum())
    acc["stall_s"] += float(t.stall_s.sum())
    acc["break_s"] += float(t.break_s.sum())
    acc["idle_s"] += float(t.host_s.sum())
    for key, value in counts.items():
        acc[key] += value


def _steps_needed(made: np.ndarray, produced: int, tokens: int) -> tuple[int, int]:
    """How many of these steps finish the request, and the tokens produced after them."""
    done = np.cumsum(made) + produced
    n = int(min(np.searchsorted(done, tokens) + 1, made.size))
    return n, int(done[n - 1])


def decode_request(eng: EngineSetup, tokens: int, rng: np.random.Generator, fidelity: str = "counts",
                   acceptance: float | None = None) -> dict[str, float]:
    """Simulate the decode of one request of ``tokens`` generated tokens; returns its telemetry sums.

    ``fidelity``: ``counts`` samples the distinct experts per layer-step (:mod:`sim.expert_counts`); ``lookups``
    samples every lookup of every position."""
    router = RequestRouter.start(eng.law, eng.tables, rng, eng.popularity)
    acc: dict[str, float] = dict.fromkeys(_SUMS, 0)
    acc["first_step_s"] = -1.0
    a = eng.moe.draft.acceptance if acceptance is None or acceptance != acceptance else acceptance
    if fidelity == "counts":
        _decode_counts(eng, router, tokens, rng, acc, a)
    else:
        _decode_lookups(eng, router, tokens, rng, acc, a)
    return acc


def _decode_counts(eng: EngineSetup, router: RequestRouter, tokens: int, rng: np.random.Generator,
                   acc: dict[str, float], acceptance: float) -> None:
    moe = eng.moe
    positions = 1 + moe.draft.tokens
    sampler = TierSampler.build(engine_step_law(eng, request_popularity(eng.popularity, router.skew),
                                                draws_per_step(moe.top_k, positions, eng.law.locality),
                                                router.hot_set, router.drift_weight))
    law = sampler.law
    lookups_per_step = positions * moe.layers * moe.top_k
    host = eng.peers
    produced, eager = 0, False
    while produced < tokens:
        steps = max(8, int((tokens - produced) / expected_tokens_per_step(moe.draft.tokens, acceptance) * 1.2) + 1)
        made = tokens_per_step(moe.draft.tokens, acceptance, steps, rng)
        n, produced = _steps_needed(made, produced, tokens)
        c = sampler.sample(eng, n, rng)
        t = c.times(eng.params, eager)
        eager = t.eager_after
        lookups = n * lookups_per_step
        by_tier = rng.multinomial(lookups, law.lookup_shares)
        _add_steps(acc, t, lookups=lookups, hits=int(by_tier[0]), peer_lookups=int(by_tier[1:host + 1].sum()),
                   disk_lookups=int(by_tier[-1]), routed=int(c.routed.sum()),
                   peer_experts=0 if c.peer is None else int(c.peer.sum()),
                   disk_reads=0 if c.disk is None else int(c.disk.sum()))
    acc["output_tokens"] = produced


def _decode_lookups(eng: EngineSetup, router: RequestRouter, tokens: int, rng: np.random.Generator,
                    acc: dict[str, float], acceptance: float) -> None:
    moe = eng.moe
    positions = 1 + moe.draft.tokens
    layers, k = moe.layers, moe.top_k
    host = eng.peers
    produced, eager = 0, False
    while produced < tokens:
        ids = router.next_tokens(CHUNK_STEPS * positions).reshape(CHUNK_STEPS, positions, layers, k)
        made = tokens_per_step(moe.draft.tokens, acceptance, CHUNK_STEPS, rng)
        n, produced = _steps_needed(made, produced, tokens)
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
        tier = eng.tier[sorted_ids]
        fetch = first & ~sorted_hit
        per_tier = [(fetch & (tier == t)).sum(axis=2) for t in range(host + 2)]
        peer = np.stack(per_tier[:host], axis=2) if host else None
        disk = per_tier[host + 1] if eng.host_slots is not None else None
        t = step_times((first & sorted_hit).sum(axis=2), per_tier[host], eng.params, eager, peer, disk)
        eager = t.eager_after
        lookup_tier = np.where(hit, -1, eng.tier[per_layer])
        _add_steps(acc, t, lookups=int(hit.size), hits=int(hit.sum()),
                   peer_lookups=int(((lookup_tier >= 0) & (lookup_tier < host)).sum()),
                   disk_lookups=int((lookup_tier == host + 1).sum()), routed=int(first.sum()),
                   peer_experts=0 if peer is None else int(peer.sum()),
                   disk_reads=0 if disk is None else int(disk.sum()))
    acc["output_tokens"] = produced


def serve(scn: Scenario, rng: np.random.Generator) -> tuple[EngineSetup, ServedRequests, Timeline]:
    """Serve the scenario's workload on its engine (sim.server): returns the engine, the requests' telemetry (by
    column, in sending order) and the run's timeline."""
    assert scn.serve is not None
    sv = scn.serve
    eng = setup_engine(scn, sv.machine)
    table = build_table(sv, rng)
    work = request_work(eng, table, sv.max_tokens, rng, sv.fidelity)
    w = sv.workload
    factory = None
    if eng.engine.batching:
        from sim.moe.batching import BatchEngine, BatchSteps

        def factory(env, work_, parallel, queue_limit, timeout_s, tl, done):
            return BatchEngine(env, work_, parallel, queue_limit, timeout_s, tl, done,
                               work_.decode["steps"].astype(np.int64), BatchSteps(eng, rng))

    tl, _ = simulate(table, work, eng.engine.parallel, sv.request_overhead_s, w.think_s, w.think_law,
                     sv.admission.queue_limit, sv.admission.timeout_s, rng, factory)
    served = np.array([e in ("stop", "length") for e in tl.end], dtype=bool)
    d = work.decode
    cols: dict[str, np.ndarray] = {k: np.where(served, d[k], 0).astype(np.int64) for k in _SUMS if k not in _SECONDS}
    cols |= {k: np.where(served, d[k], 0.0) for k in _SECONDS}
    start = np.where(served, tl.start_s, tl.end_s)
    e = eng.engine
    gpu = np.full(len(table), np.nan)  # NaN: the request had the GPU alone (its GPU seconds are its decode_s)
    if e.batching or e.parallel > 1:  # decode shared the GPU: its rate is wall time; its GPU seconds are kept apart
        parts = d["compute_s"] + d["stall_s"] + d["break_s"] + d["idle_s"]
        gpu = np.where(served, parts, 0.0)
        if not e.batching:  # slots took turns: from the first token to the end, plus the first step
            wall = tl.end_s - tl.first_token_s + d["first_step_s"]
            cols["decode_s"] = np.where(served, wall, 0.0)
    cols |= {"id": np.arange(len(table), dtype=np.int64), "prompt_tokens": table.prompt_tokens.astype(np.int64),
             "output_tokens": np.where(served, work.output_tokens, 0).astype(np.int64), "start_s": tl.start_s.copy(),
             "ttft_s": np.where(served, tl.first_token_s - tl.sent_s, np.nan), "sent_s": tl.sent_s.copy(),
             "arrival_s": tl.arrival_s.copy(), "queue_wait_s": start - tl.arrival_s,
             "prefill_s": np.where(served, work.prefill_s, 0.0), "end_s": tl.end_s.copy(),
             "end": np.array(tl.end, dtype=object), "cached_tokens": table.cached_tokens.astype(np.int64),
             "client": table.client.astype(np.int64), "decode_gpu_s": gpu}
    return eng, ServedRequests(cols), tl


def _fsum(values: np.ndarray) -> float:
    """Sum in order, one float at a time (the totals a loop over the requests would give, to the last bit)."""
    return float(sum(values.tolist()))


def serve_metrics(eng: EngineSetup, all_recs, tl: Timeline | None = None) -> dict[str, float]:
    """Decode telemetry over the served requests; with the run's timeline, the load metrics too."""
    reqs = as_served(all_recs)
    r = reqs.subset(reqs.served)
    out = load_metrics(eng, reqs, tl) if tl is not None else {}
    if not len(r):
        return out
    c = r.columns
    tokens = int(c["output_tokens"].sum())
    wall = _fsum(c["decode_s"]) or float("nan")  # all step costs zero: no rate to report
    decode = _fsum(r.gpu_s) or float("nan")  # GPU seconds: the time shares are of these
    idle_share = eng.params.break_idle_share
    busy = _fsum(c["compute_s"] + c["stall_s"] + (1 - idle_share) * c["break_s"])
    routed = c["routed"]
    offload = c["peer_experts"] + c["cpu_experts"] + c["pcie_reads"]
    out |= {
        "expert_slots": float(eng.slots),
        "expert_coverage": eng.coverage,
        "expert_cache_gib": eng.cache_gib,
        "free_vram_gib": eng.free_gib,
        "expert_hit_rate": float(np.median(r.hit_rate)),
        "pcie_spill_share": float(np.median(r.pcie_share)),
        "decode_tok_s": tokens / wall,
        "decode_tok_s_median": float(np.median(r.decode_tok_s)),
        "gpu_busy_share": busy / decode,
        "compute_share": _fsum(c["compute_s"]) / decode,
        "stall_share": _fsum(c["stall_s"]) / decode,
        "eager_share": _fsum(c["break_s"]) / decode,
        "host_share": _fsum(c["idle_s"]) / decode,
        "requests_spilling_share": float(np.mean(c["pcie_reads"] > 0)),
        # routed experts not served from the engine GPU's VRAM: peers, host CPU, PCIe reads (Basalt's "pcie=")
        "offload_share": float(np.median(np.divide(offload, routed, out=np.zeros(routed.size), where=routed > 0))),
        "ttft_s_median": float(np.median(c["ttft_s"])),
        "requests": float(len(r)),
        "output_tokens": float(tokens),
    }
    pw = eng.engine.power
    if pw is not None:
        energy = _fsum(pw.busy_w * c["compute_s"] + pw.stalled_w * (c["stall_s"] + (1 - idle_share) * c["break_s"])
                       + pw.idle_w * (c["idle_s"] + idle_share * c["break_s"]))
        out["energy_j_per_token"] = energy / tokens
        out["gpu_power_w"] = energy / decode
    return out


def load_metrics(eng, recs, tl: Timeline) -> dict[str, float]:
    """Throughput, TTFT, queueing and admission over the whole run; VRAM per GPU. Little's law check: the
    time-averaged number of requests in the engine (integrated over the run) against arrival rate x mean time in it."""
    reqs = as_served(recs)
    c = reqs.columns
    served = reqs.served
    end = c["end"]
    admitted = end != "rejected"
    ttft = c["ttft_s"][served]
    wait = c["queue_wait_s"][admitted]
    span = tl.makespan_s
    n_served = int(served.sum())
    tokens = int(c["output_tokens"][served].sum())
    new_tokens = int((c["prompt_tokens"] - c["cached_tokens"])[served].sum())
    prefill = _fsum(c["prefill_s"][served])
    out: dict[str, float] = {
        "requests_completed": float(n_served),
        "requests_rejected": float((~admitted).sum()),
        "requests_cancelled": float((end == "cancelled").sum()),
        "requests_length": float((end == "length").sum()),
        "throughput_tok_s": tokens / span if span > 0 else float("nan"),
        "requests_per_s": n_served / span if span > 0 else float("nan"),
        "makespan_s": span,
        "queue_wait_mean_s": float(wait.mean()) if wait.size else 0.0,
        "queue_peak": float(tl.peak_queue),
        "gpu_active_share": tl.busy_s / span if span > 0 else float("nan"),
        "slots_active_mean": tl.slots_area / span if span > 0 else float("nan"),
        "prefill_tok_s": new_tokens / prefill if prefill > 0 else float("nan"),
    }
    if ttft.size:
        out |= {"ttft_p50_s": float(np.percentile(ttft, 50)), "ttft_mean_s": float(ttft.mean()),
                "ttft_p99_s": float(np.percentile(ttft, 99)),
                "e2e_mean_s": float(np.mean((c["end_s"] - c["sent_s"])[served]))}
    if span > 0 and admitted.any():  # Little's law: L (integrated) = lambda x W (per request)
        out["requests_in_engine_mean"] = tl.in_system_area / span
        out["little_lambda_w"] = int(admitted.sum()) / span * float(np.mean((c["end_s"] - c["arrival_s"])[admitted]))
    for name, used, total in eng.vram:
        out[f"vram.{name}.used_mib"] = used
        out[f"vram.{name}.free_mib"] = total - used
    return out


BUCKETS = (("pcie_spill", 0, 0), ("pcie_spill", 0, 0.5), ("pcie_spill", 0.5, 3), ("pcie_spill", 3, 5),
           ("pcie_spill", 5, None), ("hit_rate", 0, 90), ("hit_rate", 90, 95), ("hit_rate", 95, 99),
           ("hit_rate", 99, None))


def in_bucket(pct: np.ndarray, lo: float, hi: float | None) -> np.ndarray:
    """Requests whose share (percent) falls in [lo, hi); ``lo == hi == 0``: exactly 0; ``lo == 0``: (0, hi) for
    spill (above zero) as the source's buckets are cut."""
    if lo == 0 and hi == 0:
        return pct == 0
    upper = pct < hi if hi is not None else np.ones(pct.shape, dtype=bool)
    return upper & ((pct > 0) if lo == 0 else (pct >= lo))


def bucket_arrays(recs) -> dict[str, np.ndarray]:
    """Per served request: spill share and hit rate (percent) and decode tok/s, for :func:`bucket_requests`."""
    reqs = as_served(recs)
    r = reqs.subset(reqs.served)
    return {"pcie_spill": r.pcie_share * 100, "hit_rate": r.hit_rate * 100, "decode_tok_s": r.decode_tok_s}


def bucket_requests(arrays: dict[str, np.ndarray], by: str, lo: float, hi: float | None) -> tuple[int, float | None]:
    """(count, mean per-request decode tok/s) of the requests in one bucket: ``by`` is ``pcie_spill`` (cut as
    :func:`in_bucket`) or ``hit_rate`` ([lo, hi) percent)."""
    pct = arrays[by]
    mask = in_bucket(pct, lo, hi) if by == "pcie_spill" else (pct >= lo) & (pct < (hi if hi is not None else np.inf))
    return int(mask.sum()), (float(arrays["decode_tok_s"][mask].mean()) if mask.any() else None)


def spill_buckets(all_recs) -> list[dict]:
    """Served requests bucketed by PCIe spill share and by hit rate (percent), as ``strata_spill_buckets.csv`` is:
    count and mean per-request decode tok/s of each bucket."""
    arrays = bucket_arrays(all_recs)
    rows = []
    for by, lo, hi in BUCKETS:
        n, rate = bucket_requests(arrays, by, lo, hi)
        rows.append({"bucket_by": by, "low_pct": lo, "high_pct": hi, "requests": n, "decode_tok_s": rate})
    return rows


def request_rows(recs) -> Iterator[dict]:
    """``requests.csv``: one row per request, shares as fractions, times in seconds; a request that was rejected or
    cancelled has no decode figures (empty cells); a request without expert lookups (a dense model) no hit rate or
    spill share. Rows are made a chunk at a time, so the table streams to disk."""
    return as_served(recs).rows(_request_rows)


def _request_rows(recs: list[RequestRecord]) -> list[dict]:
    return [{"request": r.id, "client": r.client, "end": r.end, "sent_s": r.sent_s, "arrival_s": r.arrival_s,
             "queue_wait_s": r.queue_wait_s, "end_s": r.end_s, "e2e_s": r.end_s - r.sent_s,
             "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens, "prefill_s": r.prefill_s,
             "output_tokens": r.output_tokens,
             **({"hit_rate": r.hit_rate if r.lookups else None, "pcie_share": r.pcie_share if r.lookups else None,
                 "decode_tok_s": r.decode_tok_s}
                if r.end in ("stop", "length") else {"hit_rate": None, "pcie_share": None, "decode_tok_s": None}),
             "ttft_s": r.ttft_s, "start_s": r.start_s, "decode_s": r.decode_s, "decode_gpu_s": r.gpu_s,
             "compute_s": r.compute_s, "stall_s": r.stall_s,
             "eager_s": r.break_s, "host_s": r.idle_s, "lookups": r.lookups, "vram_hits": r.hits,
             "peer_lookups": r.peer_lookups, "disk_lookups": r.disk_lookups, "routed": r.routed,
             "cpu_experts": r.cpu_experts, "peer_experts": r.peer_experts, "pcie_reads": r.pcie_reads,
             "disk_reads": r.disk_reads} for r in recs]
