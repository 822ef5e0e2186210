"""Decode of many requests at once (counts fidelity): the mechanism of :mod:`sim.moe.lookups`, with the distinct
experts of each step sampled from their law instead of every lookup, vectorised across requests so a 10,000-request
trace costs seconds.

A request's decode does not depend on what else the engine is doing when slots take turns on the GPU, so every
request's verification steps are sampled up front: the tokens each step yields (its own draft acceptance), then the
distinct experts each step touches per layer and tier (:mod:`sim.moe.expert_counts`), then the step times
(:mod:`sim.moe.stepcost`, sticky eager mode per request). Requests are grouped by routing law: per-request skew is
quantised on a grid of ``SKEW_STEP`` in z (the tails, which make the spill buckets, keep their extremes), so one
law serves many requests;
requests with their own drift hot set get their own law.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.moe.expert_counts import CountSampler, StepLaw, draws_per_step, step_law
from sim.moe.routing import RequestRouter, request_popularity
from sim.moe.setup import EngineSetup
from sim.moe.stepcost import (
    StepParams,
    StepTimes,
    expected_tokens_per_step,
    layer_table,
    step_times,
    tokens_per_step,
)
from sim.serving.telemetry import SUM_NAMES

SKEW_STEP = 0.125  # grid of the per-request skew's normal deviate z: exponent error spread * 0.0625 at most
MAX_CELLS = 2_000_000  # steps x layers sampled at once (memory bound: a few arrays of this many int64)

FIELDS = (*SUM_NAMES, "first_step_s", "output_tokens", "steps")  # what decode_many returns per request


def engine_step_law(eng: EngineSetup, popularity: np.ndarray, draws: float, hot_set: np.ndarray | None = None,
                    weight: float = 0.0) -> StepLaw:
    """The law of the distinct experts a layer-step of ``draws`` draws touches on engine ``eng``, per tier."""
    tiered = eng.tier if eng.peers or eng.host_experts is not None else None
    return step_law(popularity, eng.resident, hot_set=hot_set, weight=weight, draws=draws, tier=tiered,
                    tiers=eng.peers + 2, default_tier=eng.peers)


@dataclass(frozen=True)
class StepCounts:
    """Distinct experts per [step, layer]: in VRAM, in host RAM, per peer [step, layer, peer], beyond host RAM."""

    resident: np.ndarray
    host: np.ndarray
    peer: np.ndarray | None
    disk: np.ndarray | None
    routed: np.ndarray  # per step, every tier

    def times(self, params: StepParams, eager: bool = False, starts: np.ndarray | None = None) -> StepTimes:
        return step_times(self.resident, self.host, p=params, eager=eager, peer=self.peer, disk=self.disk,
                          starts=starts)


@dataclass(frozen=True)
class TierSampler:
    """A step law and its count samplers (one per tier that can be touched)."""

    law: StepLaw
    resident: CountSampler
    missed: tuple[CountSampler | None, ...]

    @classmethod
    def build(cls, law: StepLaw) -> TierSampler:
        return cls(law, CountSampler.build(law.resident_mean, law.resident_var),
                   tuple(CountSampler.build(law.missed_mean[t], law.missed_var[t]) if law.missed_mean[t].any()
                         else None for t in range(law.missed_mean.shape[0])))

    def sample(self, eng: EngineSetup, steps: int, rng: np.random.Generator) -> StepCounts:
        layers = eng.moe.layers
        resident = self.resident.sample(steps, rng)
        counts = [np.zeros((steps, layers), dtype=np.int64) if s is None else s.sample(steps, rng)
                  for s in self.missed]
        host = eng.peers
        return StepCounts(resident, counts[host], np.stack(counts[:host], axis=2) if host else None,
                          counts[host + 1] if eng.host_experts is not None else None,
                          _row_sums(resident) + sum(_row_sums(c) for c in counts))


FUSED_BLOCK_STEPS = 1024  # steps per block of the fused path: its working set stays in the CPU caches


def fusable(eng: EngineSetup, lw: TierSampler, rng: np.random.Generator) -> bool:
    """The fused path applies: experts in VRAM or host RAM only (no peers, nothing beyond host RAM, no layer
    split), both counts drawn from tabulated grids, and a PCG64 stream (it is read at two offsets)."""
    return (not eng.peers and eng.host_experts is None and not eng.params.split_share
            and lw.resident.grid is not None and len(lw.missed) == 2 and lw.missed[0] is not None
            and lw.missed[0].grid is not None and lw.missed[1] is None
            and type(rng.bit_generator) is np.random.PCG64)


def fused_step_times(eng: EngineSetup, lw: TierSampler, steps: int, rng: np.random.Generator, starts: np.ndarray
                     ) -> tuple[StepTimes, np.ndarray]:
    """Exactly ``c = lw.sample(eng, steps, rng)`` then ``c.times(eng.params, starts=starts)`` (and ``c.routed``),
    bit for bit and leaving ``rng`` where they leave it, but block by block: the resident counts' uniforms are the
    stream's first ``steps x layers`` doubles and the host counts' the next as many, so two copies of the stream, one
    advanced past the first block of doubles, draw them a block at a time; every pass over a block then runs in
    cache instead of streaming arrays of millions of cells through memory. Each step's eager state follows from the
    running sum of reads (its request's, from ``starts``), so its stalls are read from the table within the block."""
    layers = eng.moe.layers
    p = eng.params
    resident, host = lw.resident, lw.missed[0]
    tab = layer_table(p, layers, resident.width - 1, host.width - 1)
    bg = rng.bit_generator
    state = bg.state
    streams = []
    for skip in (0, steps * layers):
        g = np.random.Generator(np.random.PCG64(0))  # its state is replaced at once
        g.bit_generator.state = state
        g.bit_generator.advance(skip)
        streams.append(g)
    step_reads = np.empty(steps, dtype=np.int64)
    missed = np.empty(steps, dtype=np.int64)
    routed = np.empty(steps, dtype=np.int64)
    compute = np.empty(steps)
    stall = np.empty(steps)
    in_eager = np.empty(steps, dtype=bool)
    done = np.empty(steps)  # reads so far, every step (the sticky eager state is read off it)
    # each step's request, and the reads before that request's first step: known once its first block is drawn
    first = starts[np.searchsorted(starts, np.arange(steps), side="right") - 1]
    block = FUSED_BLOCK_STEPS
    u_r, u_h = np.empty((block, layers)), np.empty((block, layers))
    r, m = np.empty((block, layers), dtype=np.int32), np.empty((block, layers), dtype=np.int32)
    total = 0.0
    for a in range(0, steps, block):
        n = min(block, steps - a)
        streams[0].random(out=u_r[:n])
        streams[1].random(out=u_h[:n])
        rr, mm = resident.invert(u_r[:n], r[:n]), host.invert(u_h[:n], m[:n])
        cell = rr * tab.width
        cell += mm
        reads = np.take(tab.reads, cell, mode="clip")
        step_reads[a:a + n] = reads.sum(axis=1, dtype=np.int32)
        missed[a:a + n] = mm.sum(axis=1, dtype=np.int32)
        routed[a:a + n] = rr.sum(axis=1, dtype=np.int32)
        compute[a:a + n] = np.take(tab.gpu, rr, mode="clip").sum(axis=1)
        # each step's eager state, as eager_steps gives it from the running sum of reads, then its stalls from
        # the table at that state: every cell of the row (zero where it cannot stall), summed as the row would be
        block_reads = step_reads[a:a + n].astype(float)
        done[a:a + n] = np.cumsum(block_reads) + total
        total = float(done[a + n - 1])
        f = first[a:a + n]
        if p.break_mode == "sticky":
            eager_rows = done[a:a + n] - (done[f] - step_reads[f]) > 0
        else:
            eager_rows = block_reads > 0
        in_eager[a:a + n] = eager_rows
        cell += (eager_rows * tab.cells).astype(np.int32)[:, None]
        stall[a:a + n] = np.take(tab.stall, cell, mode="clip").sum(axis=1)
    bg.advance(2 * steps * layers)  # past both, as the two draws leave it; advance() drops a buffered 32-bit half
    after = bg.state
    after["has_uint32"], after["uinteger"] = state["has_uint32"], state["uinteger"]
    bg.state = after
    times = StepTimes(compute, stall, eager_s=np.where(in_eager, p.graph_break_s, 0.0), host_s=np.full(steps, p.host_s),
                      pcie_reads=step_reads.astype(float), cpu_experts=(missed - step_reads).astype(float),
                      eager_after=False)
    return times, routed + missed


def _row_sums(counts: np.ndarray) -> np.ndarray:
    """Per-step totals of [steps, layers] counts (int32 sums are exact: a step touches far fewer than 2^31)."""
    return counts.sum(axis=1, dtype=np.int32) if counts.dtype == np.int32 else counts.sum(axis=1)


STEPS_AT_ONCE = 1_000_000  # verification steps whose drafts are drawn at once (memory: about 50 bytes each)


def steps_needed(tokens: np.ndarray, acceptance: np.ndarray, drafts: int, rng: np.random.Generator) -> np.ndarray:
    """Verification steps each request needs to generate its tokens: each step yields 1 + the leading accepted
    drafts (each accepted with the request's acceptance). Requests are drawn in blocks of at most
    ``STEPS_AT_ONCE`` steps, in order, so the draws (and the result) do not depend on the block size."""
    steps = np.zeros(tokens.size, dtype=np.int64)
    if drafts == 0:
        return tokens.astype(np.int64)
    need = tokens.astype(np.int64).copy()
    todo = np.arange(tokens.size)
    while todo.size:
        a = acceptance[todo]
        m = np.ceil(need[todo] / expected_tokens_per_step(drafts, a) * 1.3).astype(np.int64) + 8
        ends = np.cumsum(m)
        cuts = np.unique(np.searchsorted(ends, np.arange(STEPS_AT_ONCE, int(ends[-1]), STEPS_AT_ONCE), side="left"))
        left = []
        for lo, hi in zip(np.concatenate(([0], cuts + 1)), np.append(cuts + 1, todo.size), strict=True):
            if lo < hi:
                left.append(_draw_steps(todo[lo:hi], a[lo:hi], m=m[lo:hi], need=need, steps=steps, drafts=drafts,
                                        rng=rng))
        todo = np.concatenate(left)
    return steps


def _draw_steps(todo: np.ndarray, a: np.ndarray, m: np.ndarray, need: np.ndarray, steps: np.ndarray, drafts: int,
                rng: np.random.Generator) -> np.ndarray:
    """Draw ``m[i]`` steps for each request ``todo[i]``: add the steps it needed to ``steps`` if they sufficed,
    else all of them (and lower its ``need``); returns the requests still short."""
    owner = np.repeat(np.arange(todo.size), m)
    made = tokens_per_step(drafts, a[owner], owner.size, rng)
    starts = np.concatenate(([0], np.cumsum(m)[:-1]))
    done = np.cumsum(made)
    local = done - np.repeat(done[starts] - made[starts], m)
    reached = local >= np.repeat(need[todo], m)
    index = np.arange(owner.size) - np.repeat(starts, m)
    first = np.minimum.reduceat(np.where(reached, index, np.iinfo(np.int64).max), starts)
    finished = first < np.iinfo(np.int64).max
    steps[todo[finished]] += first[finished] + 1
    steps[todo[~finished]] += m[~finished]
    need[todo[~finished]] -= local[starts[~finished] + m[~finished] - 1]
    return todo[~finished]


def decode_many(eng: EngineSetup, tokens: np.ndarray, acceptance: np.ndarray, rng: np.random.Generator
                ) -> dict[str, np.ndarray]:
    """Per-request telemetry sums (see ``FIELDS``) of decoding ``tokens[i]`` tokens with draft acceptance
    ``acceptance[i]`` (NaN: the model's) on engine ``eng``."""
    moe = eng.moe
    n = tokens.size
    out = {f: np.zeros(n) for f in FIELDS}
    if n == 0:
        return out
    acc = np.where(np.isnan(acceptance), moe.draft.acceptance, acceptance)
    steps = steps_needed(tokens, acc, moe.draft.tokens, rng)
    out["steps"] = steps.astype(float)
    out["output_tokens"] = tokens.astype(float)
    law = eng.law
    positions = 1 + moe.draft.tokens
    draws = draws_per_step(moe.top_k, positions, law.locality)
    own = law.drift_weight > 0 and law.drift_hot_experts > 0
    z_bin = np.rint(rng.standard_normal(n) / SKEW_STEP).astype(np.int64) if law.exponent_spread > 0 \
        else np.zeros(n, dtype=np.int64)
    cache: dict[int, TierSampler] = {}

    def law_for(key: int, router: RequestRouter | None) -> TierSampler:
        if router is None and key in cache:
            return cache[key]
        skew = np.exp(law.exponent_spread * key * SKEW_STEP) if router is None else router.skew
        pop = request_popularity(eng.popularity, float(skew))
        built = TierSampler.build(engine_step_law(eng, pop, draws, None if router is None else router.hot_set,
                                                  0.0 if router is None else router.drift_weight))
        if router is None:
            cache[key] = built
        return built

    if own:  # each request its own hot set: its own law, built, used and dropped one at a time
        for i in range(n):
            router = RequestRouter.start(law, eng.alias, rng, eng.popularity)
            _decode_group(eng, np.array([i]), steps=steps, lw=law_for(0, router), positions=positions, rng=rng, out=out)
    else:
        for b in np.unique(z_bin):
            _decode_group(eng, np.flatnonzero(z_bin == b), steps=steps, lw=law_for(int(b), None), positions=positions,
                          rng=rng, out=out)
    return out


def _decode_group(eng: EngineSetup, members: np.ndarray, steps: np.ndarray, lw: TierSampler, positions: int,
                  rng: np.random.Generator, out: dict[str, np.ndarray]) -> None:
    moe = eng.moe
    layers = moe.layers
    host = eng.peers
    per_step_lookups = positions * layers * moe.top_k
    # batches of whole requests, at most MAX_CELLS step-layers each; a request longer than that is a batch alone
    max_steps = max(MAX_CELLS // layers, 1)
    bounds = [0]
    cells = 0
    for j, n_steps in enumerate(steps[members].tolist()):
        if j > bounds[-1] and (n_steps > max_steps or cells + n_steps > max_steps):
            bounds.append(j)
            cells = 0
        cells += n_steps
        if n_steps > max_steps:
            bounds.append(j + 1)
            cells = 0
    bounds = np.unique(np.append(bounds, members.size))
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        idx = members[lo:hi]
        n_steps = steps[idx]
        # a request longer than a batch goes in pieces, its eager state carried from one to the next
        pieces = [(0, int(n_steps.sum()))] if idx.size > 1 or n_steps[0] <= max_steps else \
            [(p, min(int(n_steps[0]), p + max_steps)) for p in range(0, int(n_steps[0]), max_steps)]
        eager = False
        for piece, (first, last) in enumerate(pieces):
            total = last - first
            starts = np.concatenate(([0], np.cumsum(n_steps)[:-1])) if len(pieces) == 1 else np.zeros(1, np.int64)
            if len(pieces) == 1 and fusable(eng, lw, rng):
                t, routed = fused_step_times(eng, lw, total, rng, starts)
                peer = disk = None
            else:
                c = lw.sample(eng, total, rng)
                if len(pieces) == 1:
                    t = c.times(eng.params, starts=starts)
                else:
                    t = c.times(eng.params, eager)
                    eager = t.eager_after
                routed, peer, disk = c.routed, c.peer, c.disk
            add = np.add.reduceat
            sums = {"decode_s": t.total_s, "compute_s": t.compute_s, "stall_s": t.stall_s, "eager_s": t.eager_s,
                    "host_s": t.host_s, "pcie_reads": t.pcie_reads, "cpu_experts": t.cpu_experts,
                    "routed": routed}
            if peer is not None:
                sums["peer_experts"] = peer.sum(axis=(1, 2))
            if disk is not None:
                sums["disk_reads"] = disk.sum(axis=1)
            for key, values in sums.items():
                out[key][idx] += add(values, starts)
            if piece == 0:
                out["first_step_s"][idx] = t.total_s[starts]
        lookups = n_steps * per_step_lookups
        by_tier = rng.multinomial(lookups, lw.law.lookup_shares)
        out["lookups"][idx] = lookups
        out["vram_hits"][idx] = by_tier[:, 0]
        out["peer_lookups"][idx] = by_tier[:, 1:host + 1].sum(axis=1)
        out["disk_lookups"][idx] = by_tier[:, -1]
