"""Decode step time of an expert-offloading engine: stalls, not bandwidth (FIELD_NOTES section 3).

One verification step checks ``1 + draft tokens`` positions at once and touches, in each MoE layer, the union of the
experts those positions route to. Per layer:

- the GPU first does the layer's dense work (attention, norms, the router, shared experts): ``dense_s / layers``;
  which experts the positions need is known only then, so nothing below overlaps it;
- then it computes every touched expert resident in VRAM, ``gpu_expert_s`` each (their bytes over its memory
  rate, :mod:`sim.moe.spec_costs`);
- meanwhile the missed experts in host RAM are served two ways: the host CPU computes as many as it finishes in
  ``cpu_budget_s`` per layer (the engine's budget), ``cpu_sync_s`` (activations to the host and results back) plus
  ``cpu_expert_s`` each (their bytes over the host's DRAM rate), and the GPU reads the rest over PCIe,
  ``pcie_latency_s + bytes / (link_share * link_gbps)``. Both paths start at the routing decision; the layer stalls
  for whatever of the slower one exceeds the GPU's expert work. So a miss never costs less than the hit it replaces
  while the layer's resident experts take less than a host round trip and one CPU expert (single-sequence decode:
  tests/test_spec_costs.py); a little spill costs no transfer time when the CPU absorbs it, a lot is
  transfer-bound: the second cliff;
- a request that has read over PCIe cannot run fully resident: it leaves the captured, fused GPU path and runs
  eagerly, synchronising with the host, which costs ``graph_break_s`` per step. With ``break_mode: sticky`` (the
  default) a request stays eager from its first PCIe read to its end (re-capturing the graph mid-request does not pay);
  with ``per_step`` only the steps that read pay. Either way the first read costs a step's worth whatever the amount
  of spill: the first cliff, then the plateau. Experts the CPU computes do not take a request off the fused path
  (a host node in the captured graph waits for them: the Strata tables show requests with CPU-computed misses and
  no PCIe read decoding at the fused rate);
- experts held by a peer GPU are computed there: the layer also waits for ``peer latency + peer expert time x
  experts`` (activations there and back), in parallel with its own expert work; peers are placed at start-up, so
  they do not take the request off the fused path;
- experts beyond host RAM are read from disk first (``disk latency + bytes / disk rate``), then cross PCIe;
- in an eager step the copies also run through the layer's share of the eager overhead (launch and sync gaps), so
  a few reads per layer hide entirely;
- ``host_s`` of host work per step leaves the GPU idle;
- layer split (another placement): every layer is divided across the cards in proportion to what each holds; each
  card does its share at its own speed, and every token's activations go to every card and back at every layer
  over its link, so a layer takes as long as its slowest card plus that card's round trip (the paths above overlap
  the whole layer there).

The attention's KV reads (seconds per token of context) are added per step by the callers, who know each request's
context (:mod:`sim.moe.decode_batch`).

The driver counts the GPU busy while it computes or waits inside a step (stalls, most of an eager step's overhead):
"busy but stalled"; ``break_idle_share`` of the eager overhead has no kernel on the GPU at all (launch gaps).
Everything is vectorised over steps and layers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from sim.core.units import GB


@dataclass(frozen=True, kw_only=True)
class StepParams:
    """The step-cost parameters of one engine (the scenario's ``engine.step``, its link and its tiers)."""

    dense_s: float  # GPU time of a step outside routed experts (s)
    gpu_expert_s: float  # GPU time per resident expert a step touches (s)
    cpu_expert_s: float  # host CPU time per missed expert it computes (s)
    pcie_latency_s: float  # fixed cost of a layer that reads experts over PCIe (s)
    graph_break_s: float  # cost per step of running eagerly, off the fused GPU path (s)
    host_s: float  # host time per step with the GPU idle (s)
    link_gbps: float  # host -> GPU copy rate of the engine's link (GB/s)
    expert_bytes: float  # bytes of one expert
    link_share: float = 1.0  # share of the link's copy rate expert reads get (fraction)
    break_idle_share: float = 0.0  # share of graph_break_s with no kernel on the GPU (launch gaps, host syncs)
    break_mode: str = "sticky"  # "sticky": eager from the first PCIe read on; "per_step": only steps that read
    peer_expert_s: tuple[float, ...] = ()  # per peer GPU: its time per expert it computes (s)
    peer_latency_s: tuple[float, ...] = ()  # per peer GPU: activations there and back per layer (s)
    disk_gbps: float = float("inf")  # read rate of experts beyond host RAM (GB/s)
    disk_latency_s: float = 0.0  # per layer that reads from disk (s)
    split_share: tuple[float, ...] = ()  # layer split: share of every layer each card holds (engine GPU first)
    split_scale: tuple[float, ...] = ()  # ... each card's time for the same work relative to the engine GPU
    split_xfer_s: tuple[float, ...] = ()  # ... activations to the card and back, per layer (s; 0 for the engine GPU)
    cpu_sync_s: float = 0.0  # host round trip of a layer whose missed experts the CPU computes (s)
    cpu_budget_s: float = float("inf")  # CPU time per layer-step the engine gives missed experts; beyond: PCIe (s)


@dataclass(frozen=True)
class StepTimes:
    """Seconds per step by what the GPU was doing, and experts read over PCIe per step."""

    compute_s: np.ndarray
    stall_s: np.ndarray  # waiting for the CPU, PCIe reads or peers beyond the expert work they overlap
    eager_s: np.ndarray  # eager-step overhead (off the fused path)
    host_s: np.ndarray  # GPU idle
    pcie_reads: np.ndarray  # experts read over PCIe per step (host RAM misses beyond the CPU window, disk reads)
    cpu_experts: np.ndarray  # experts computed by the host CPU per step
    eager_after: bool = False  # the request runs eagerly after these steps (sticky mode)

    @property
    def total_s(self) -> np.ndarray:
        return self.compute_s + self.stall_s + self.eager_s + self.host_s


def step_times(resident: np.ndarray, missed: np.ndarray, p: StepParams, eager: bool = False,
               peer: np.ndarray | None = None, disk: np.ndarray | None = None,
               starts: np.ndarray | None = None) -> StepTimes:
    """``resident``, ``missed``: [steps, layers] counts of distinct experts a step touches in each layer, in VRAM and
    in host RAM; ``peer``: [steps, layers, peers] held by each peer GPU; ``disk``: [steps, layers] beyond host RAM;
    ``eager``: the request already left the fused path in an earlier step; ``starts``: the steps belong to several
    requests, each starting (fused) at these sorted step indices."""
    if peer is None and disk is None and resident.size and resident.dtype.kind in "iu" and missed.dtype.kind in "iu":
        return _step_times_tabulated(resident, missed, p, eager, starts)
    layers = resident.shape[1]
    gpu = _layer_gpu_s(p, layers, resident)
    window = _expert_window_s(p, resident, gpu)
    on_cpu, reads, wait = host_split(p, missed)
    if disk is not None:  # experts beyond host RAM come from disk, then over PCIe with the layer's other reads
        link = p.link_share * p.link_gbps * GB
        pcie = np.where(reads + disk > 0, p.pcie_latency_s + (reads + disk) * p.expert_bytes / link, 0.0)
        pcie = pcie + np.where(disk > 0, p.disk_latency_s + disk * p.expert_bytes / (p.disk_gbps * GB), 0.0)
        cpu = np.where(on_cpu > 0, p.cpu_sync_s + on_cpu * p.cpu_expert_s, 0.0)
        wait = np.maximum(cpu, pcie)
        reads = reads + disk
    if peer is not None:
        for i, (expert_s, latency_s) in enumerate(zip(p.peer_expert_s, p.peer_latency_s, strict=True)):
            held = peer[:, :, i]
            wait = np.maximum(wait, np.where(held > 0, latency_s + expert_s * held, 0.0))
    step_reads = reads.sum(axis=1)
    in_eager, eager = eager_steps(p, step_reads, eager, starts)
    # copies proceed while the layer computes its experts and, in an eager step, through its launch and sync gaps
    window = window + np.where(in_eager, p.graph_break_s / layers, 0.0)[:, None]
    stall = np.maximum(wait - window, 0.0).sum(axis=1)
    steps = resident.shape[0]
    return StepTimes(gpu.sum(axis=1), stall, eager_s=np.where(in_eager, p.graph_break_s, 0.0),
                     host_s=np.full(steps, p.host_s), pcie_reads=step_reads, cpu_experts=on_cpu.sum(axis=1),
                     eager_after=eager)


def _layer_gpu_s(p: StepParams, layers: int, resident: np.ndarray) -> np.ndarray:
    """GPU seconds of one layer-step with ``resident`` touched experts in VRAM (layer split: the slowest card)."""
    gpu = p.dense_s / layers + p.gpu_expert_s * resident
    if p.split_share:  # layer split: every card does its share of every layer; the layer waits for the slowest
        gpu = np.max([share * scale * gpu + xfer for share, scale, xfer
                      in zip(p.split_share, p.split_scale, p.split_xfer_s, strict=True)], axis=0)
    return gpu


def _expert_window_s(p: StepParams, resident: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """GPU seconds of a layer-step that the host's and the peers' paths overlap: its resident experts' work (after
    the dense work that decides the routing); with a layer split, the whole layer."""
    return gpu if p.split_share else p.gpu_expert_s * resident


def host_split(p: StepParams, missed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How ``missed`` experts in host RAM (per layer-step) are served: (computed by the CPU, read over PCIe, seconds
    until both are done). The engine's policy: the CPU takes the misses it finishes within ``cpu_budget_s`` per
    layer, the rest cross PCIe. The split depends on neither the GPU nor the link, so a faster card or link only
    shortens the work. The CPU's path starts at the routing decision: ``cpu_sync_s`` plus ``cpu_expert_s`` each;
    the reads' path ``pcie_latency_s + bytes / (link_share x link_gbps)``."""
    m = np.asarray(missed, dtype=float)
    on_cpu = np.minimum(m, cpu_budget_experts(p))
    reads = m - on_cpu
    cpu = np.where(on_cpu > 0, p.cpu_sync_s + on_cpu * p.cpu_expert_s, 0.0)
    pcie = np.where(reads > 0, p.pcie_latency_s + reads * p.expert_bytes / (p.link_share * p.link_gbps * GB), 0.0)
    return on_cpu, reads, np.maximum(cpu, pcie)


def cpu_budget_experts(p: StepParams) -> float:
    """Missed experts the CPU takes per layer-step: those it finishes within ``cpu_budget_s`` (whole experts)."""
    if p.cpu_expert_s == float("inf"):
        return 0.0
    return float(np.floor(p.cpu_budget_s / p.cpu_expert_s + 1e-9))  # guarding float rounding


def eager_steps(p: StepParams, step_reads: np.ndarray, eager: bool, starts: np.ndarray | None
                 ) -> tuple[np.ndarray, bool]:
    """Which steps run off the fused path, and whether the request stays eager after them."""
    if p.break_mode == "sticky" and starts is not None:
        done = np.cumsum(step_reads)
        before = np.repeat(done[starts] - step_reads[starts], np.diff(np.append(starts, step_reads.size)))
        return done - before > 0, eager
    if p.break_mode == "sticky":
        in_eager = np.logical_or(eager, np.cumsum(step_reads) > 0)
        return in_eager, bool(in_eager[-1]) if in_eager.size else eager
    return step_reads > 0, eager


@dataclass(frozen=True)
class LayerTable:
    """Everything a layer-step costs, as a function of its (resident, missed) counts only: the same expressions as
    :func:`step_times`, evaluated once on the grid of counts, so a [steps, layers] batch is a few table reads."""

    width: int  # missed counts 0 .. width - 1
    gpu: np.ndarray  # [resident]
    reads: np.ndarray  # [resident * width + missed] (int)
    stall: np.ndarray  # [eager * cells + resident * width + missed]
    stalls: np.ndarray  # [resident * width + missed] (bool): the cell can stall (on the fused path; eager stalls less)

    @property
    def cells(self) -> int:
        """(resident, missed) pairs the table holds."""
        return self.gpu.size * self.width


@functools.lru_cache(maxsize=64)
def layer_table(p: StepParams, layers: int, resident_max: int, missed_max: int) -> LayerTable:
    r = np.arange(resident_max + 1)
    m = np.arange(missed_max + 1)
    gpu = _layer_gpu_s(p, layers, r)
    window = _expert_window_s(p, r, gpu)
    _, reads, wait = host_split(p, np.broadcast_to(m[None, :], (r.size, m.size)))
    stall = [np.maximum(wait - (window + add)[:, None], 0.0).ravel() for add in (0.0, p.graph_break_s / layers)]
    return LayerTable(m.size, gpu, reads.astype(np.int32).ravel(), np.concatenate(stall), stall[0] > 0)


def _step_times_tabulated(resident: np.ndarray, missed: np.ndarray, p: StepParams, eager: bool,
                          starts: np.ndarray | None) -> StepTimes:
    """:func:`step_times` without peers or disk, by table reads: every per-layer value is the one the expressions
    give (the same floating-point operations on the same counts), summed in the same order. A layer stalls only
    where its host paths outlast its expert work, so stalls are looked up there alone."""
    steps, layers = resident.shape
    tab = layer_table(p, layers, int(resident.max()), int(missed.max()))
    cell = resident.astype(np.int32, copy=True)
    cell *= tab.width
    cell += missed
    reads = np.take(tab.reads, cell, mode="clip", out=np.empty_like(cell))  # cell is in range: clip skips checks
    at = np.flatnonzero(np.take(tab.stalls, cell, mode="clip"))
    gpu = np.take(tab.gpu, resident, mode="clip", out=np.empty(resident.shape))
    return tabulated_step_times(p, tab, layers=layers, compute_s=gpu.sum(axis=1),
                                step_reads=reads.sum(axis=1, dtype=np.int32),
                                step_missed=missed.sum(axis=1, dtype=np.int32), at=at, cells_at=cell.reshape(-1)[at],
                                eager=eager, starts=starts)


def tabulated_step_times(p: StepParams, tab: LayerTable, layers: int, compute_s: np.ndarray, step_reads: np.ndarray,
                         step_missed: np.ndarray, at: np.ndarray, cells_at: np.ndarray, eager: bool,
                         starts: np.ndarray | None) -> StepTimes:
    """Step times from per-step totals (compute seconds; PCIe reads and missed experts, whole numbers) and the flat
    [steps x layers] positions ``at`` of the layers that can stall, with their table cells: each step's eager state
    from its reads, then the stalls of those layers alone, summed per step as the whole row would be."""
    steps = compute_s.size
    reads = step_reads.astype(float)
    in_eager, eager = eager_steps(p, reads, eager, starts)
    stall = np.zeros(steps * layers)
    stall[at] = tab.stall[cells_at + in_eager[at // layers] * tab.cells]
    return StepTimes(compute_s, stall.reshape(steps, layers).sum(axis=1),
                     eager_s=np.where(in_eager, p.graph_break_s, 0.0), host_s=np.full(steps, p.host_s),
                     pcie_reads=reads, cpu_experts=(step_missed - step_reads).astype(float), eager_after=eager)


def tokens_per_step(drafts: int, acceptance, steps: int, rng: np.random.Generator) -> np.ndarray:
    """Tokens a verification step yields: the leading accepted drafts plus the step's own token (1..drafts+1).
    ``acceptance``: one fraction, or one per step."""
    a = np.asarray(acceptance, dtype=float)
    if drafts == 0 or (a.ndim == 0 and a <= 0):
        return np.ones(steps, dtype=np.int64)
    accepted = rng.random((steps, drafts)) < (a[:, None] if a.ndim else a)
    leading = np.argmin(accepted, axis=1)  # the first rejected draft; 0 as well when every draft is accepted
    leading[accepted[np.arange(steps), leading]] = drafts
    return leading + 1


def expected_tokens_per_step(drafts: int, acceptance):
    """E[1 + leading accepted drafts] = (1 - a^(d+1)) / (1 - a), for one acceptance or an array of them."""
    a = np.asarray(acceptance, dtype=float)
    e = np.where(a >= 1, float(drafts + 1), (1 - a ** (drafts + 1)) / np.maximum(1 - a, 1e-12))
    return float(e) if e.ndim == 0 else e
