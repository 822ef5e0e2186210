"""Load-stage mechanism (no simpy): chunk plans, per-chunk stage times and closed-form load times.

A load moves a model's weight bytes in chunks through up to three stages:

1. disk   -> page cache : bytes at the loader's effective disk rate (skipped when the chunk is already page-cached,
   unless the loader reads with direct I/O)
2. loader (host CPU)    : per byte, per tensor and per host copy (:func:`stage_times`)
3. PCIe link -> VRAM    : ``bytes / link_gbps`` (absent on unified memory and for bytes spilled to host RAM); the
   staging copy of a pageable copy is the host's, in stage 2

Composition ``serial`` adds the stage times of every chunk. Composition ``pipelined`` overlaps the stages: with
stage completion times C_s[i] of chunk i, C_s[i] = max(C_s[i-1], C_{s-1}[i]) + t_s[i] (a flow shop), which for
equal chunks is ``sum(t[0]) + (n - 1) * max_s t_s``. The simulation (:mod:`sim.lab.pipeline`) additionally bounds
the buffers between stages; with equal chunk times the bound changes nothing, which the tests check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.core.units import GB
from sim.lab import ranks
from sim.lab.resources import MemoryTarget, StageCosts


@dataclass(frozen=True)
class ChunkPlan:
    """How a model's bytes are cut into chunks and where each chunk lands."""

    file: str  # page-cache identity of the weight files
    sizes: np.ndarray  # bytes per chunk
    tensors: np.ndarray  # tensors per chunk (fractional share of the model's tensor count)
    target: np.ndarray  # index into ``targets`` per chunk, -1 for bytes spilled to host RAM
    targets: tuple[MemoryTarget, ...]
    placed_bytes: tuple[float, ...]  # bytes placed on each target
    spilled_bytes: float

    @property
    def total_bytes(self) -> float:
        return float(self.sizes.sum())

    @property
    def n(self) -> int:
        return int(self.sizes.size)


def split_bytes(total: float, free: Sequence[float]) -> tuple[list[float], float]:
    """Split ``total`` bytes over memory targets in proportion to their free bytes (as layer-split loaders do).

    Returns (bytes per target, bytes that did not fit).
    """
    free_arr = np.maximum(np.asarray(free, dtype=float), 0.0)
    room = float(free_arr.sum())
    if room <= 0:
        return [0.0] * len(free_arr), float(total)
    placed = min(total, room)
    return list(free_arr * (placed / room)), float(total - placed)


def plan_chunks(file: str, total_bytes: float, tensors: int, chunk_bytes: float,
                targets: Sequence[MemoryTarget], free_bytes: Sequence[float]) -> ChunkPlan:
    """Cut ``total_bytes`` into chunks of ``chunk_bytes``, also cut where one target's share ends, so that every
    chunk lands on exactly one target (or in host RAM when spilled)."""
    placed, spilled = split_bytes(total_bytes, free_bytes)
    grid = np.arange(0.0, total_bytes, chunk_bytes)[1:]
    cuts = np.cumsum(placed)[:-1] if spilled <= 0 else np.cumsum(placed)
    edges = np.sort(np.concatenate(([0.0], grid, cuts[(cuts > 0) & (cuts < total_bytes)], [total_bytes])))
    edges = edges[np.concatenate(([True], edges[1:] != edges[:-1]))]  # np.unique's values; it imports numpy.ma
    sizes = np.diff(edges)
    keep = sizes > 0.5  # drop sub-byte slivers left by floating-point rounding
    sizes, starts = sizes[keep], edges[:-1][keep]
    if sizes.size == 0:  # a model of under a byte: one chunk
        sizes, starts = np.array([total_bytes]), np.array([0.0])
    sizes[-1] += total_bytes - sizes.sum()
    middles = starts + sizes / 2
    target = np.searchsorted(np.cumsum(placed), middles, side="right")
    target = np.where(target >= len(placed), -1, target)
    tens = sizes / total_bytes * tensors if total_bytes > 0 else np.zeros_like(sizes)
    return ChunkPlan(file, sizes, tensors=tens, target=target.astype(int), targets=tuple(targets),
                     placed_bytes=tuple(placed), spilled_bytes=spilled)


@dataclass(frozen=True)
class StageTimes:
    """Seconds each chunk spends in each stage (0 where a stage is skipped)."""

    disk: np.ndarray
    loader: np.ndarray
    link: np.ndarray

    def as_matrix(self) -> np.ndarray:
        return np.vstack([self.disk, self.loader, self.link])


def link_rates(plan: ChunkPlan) -> np.ndarray:
    """Link GB/s per chunk; inf where the chunk crosses no link (unified memory or spilled)."""
    rates = np.array([t.link_gbps if t.link_gbps is not None else np.inf for t in plan.targets] + [np.inf])
    return rates[plan.target]  # index -1 picks the trailing inf


def stage_times(plan: ChunkPlan, costs: StageCosts, cached: np.ndarray) -> StageTimes:
    """Per-chunk stage times; ``cached`` marks chunks already in the page cache (no disk read).

    - disk: a miss (every chunk under direct I/O) reads at the loader's effective disk rate
      (:meth:`StageCosts.disk_gbps_effective`); the generic loader pays ``latency_s`` once per chunk instead;
    - loader: the host's work per byte and per tensor, its copies (a byte that crosses a link to a GPU and a byte
      kept in host or unified memory may be copied a different number of times) at ``copy_gbps`` per thread, the
      driver's staging copy of a byte copied to a GPU from pageable memory, mapping the cached pages the loader
      reads (mmap hits; pages used in place are not read at load) and a CPU dtype conversion when the loader
      converts; with several readers (tensor-parallel ranks), one rank's share of that work, at least what the
      host's copies of all ranks allow (:func:`sim.lab.ranks.rank_loader_s`);
    - link: bytes over the link.
    Unified memory and bytes kept in host RAM cross no link.
    """
    gb = plan.sizes / GB
    miss = np.ones_like(cached, dtype=bool) if costs.direct else ~cached
    if math.isfinite(costs.request_bytes):
        disk = np.where(miss, gb / costs.disk_gbps_effective(), 0.0)
    else:
        disk = np.where(miss, costs.disk_latency_s + gb / costs.disk_gbps_effective(), 0.0)
    rates = link_rates(plan)
    crosses = np.isfinite(rates)
    # a byte in unified memory is copied as one bound for a GPU is, its pageable copy a plain copy (no link),
    # unless the loader uses the mapping in place there (llama.cpp on Metal)
    unified = (plan.target >= 0) & ~crosses & (not costs.unified_in_place)
    gpu_copies = costs.copies_gpu + (1 if costs.pageable else 0)
    copies = np.where(crosses, costs.copies_gpu, np.where(unified, gpu_copies, costs.copies_cpu))
    per_gb = costs.loader_s_per_gb + copies * costs.copy_s_per_gb
    touched = crosses | (copies > 0)  # a mapped page used in place (kept in host RAM) is not read at load,
    if costs.touch_in_place:  # unless the loader maps every page within the load (llama.cpp)
        touched = np.ones_like(touched)
    per_gb = per_gb + np.where(miss | ~touched, 0.0, costs.hit_s_per_gb)
    staging = costs.copy_s_per_gb if costs.pageable else 0.0  # the driver's copy into its pinned buffer
    if costs.readers > 1:  # what each tensor-parallel rank reads, and what it keeps (sim.lab.ranks)
        kept_gb = np.where(crosses, staging, 0.0) + costs.convert_s_per_gb
        staged = np.where(crosses, 1 if costs.pageable else 0, 0)
        loader = ranks.rank_loader_s(gb, per_gb, kept_gb, copies, staged, plan.tensors, costs)
    else:
        per_gb = per_gb + np.where(crosses, staging, 0.0)
        if costs.convert_s_per_gb:  # a CPU pass over every byte converted (blocking copy_ converts on the CPU)
            per_gb = per_gb + costs.convert_s_per_gb
        loader = gb * per_gb + plan.tensors * costs.loader_s_per_tensor
    link = gb / rates
    if costs.readers > 1 and crosses.any():  # readers copy to their own GPUs at once
        link = link * parallel_link_share(plan.target[crosses], link[crosses], costs.readers)
    return StageTimes(disk, loader, link)


def parallel_link_share(targets: np.ndarray, seconds: np.ndarray, readers: int) -> float:
    """How much of the summed link time remains when ``readers`` copy to their GPUs at once: the busiest GPU's link
    time, or the total over as many links as there are readers, whichever is longer (a fraction, at most 1)."""
    total = float(seconds.sum())
    if total <= 0:
        return 1.0
    per_link = [float(seconds[targets == t].sum()) for t in np.unique(targets)]
    return max(max(per_link), total / min(readers, len(per_link))) / total


def serial_time(t: StageTimes) -> float:
    return float(t.disk.sum() + t.loader.sum() + t.link.sum())


GROUPS: dict[str, tuple[tuple[str, ...], ...]] = {
    "serial": (("disk", "loader", "link"),),  # one after another, chunk by chunk
    "pipelined": (("disk",), ("loader",), ("link",)),  # every stage overlaps the others
    "reads": (("disk",), ("loader", "link")),  # reads ahead overlap copies that stay serial (vLLM's prefetch)
    "uploads": (("disk", "loader"), ("link",)),  # reads and host copies on one thread, uploads async (llama.cpp)
}


def grouped(t: StageTimes, composition: str) -> np.ndarray:
    """Seconds per chunk of each group of stages that run one after another (rows: groups, in order)."""
    return np.vstack([sum(getattr(t, stage) for stage in group) for group in GROUPS[composition]])


def pipelined_time(t: StageTimes | np.ndarray, buffer_chunks: int | None = None) -> float:
    """Makespan of a pipeline of stages (a :class:`StageTimes`: three; a matrix: a row per stage).

    Unbounded buffers (``buffer_chunks=None``), vectorised: C_s[i] = max(C_s[i-1], C_{s-1}[i]) + t_s[i] unrolls to
    C_s = S_s + cummax(C_{s-1} - S_s + t_s) with S_s = cumsum(t_s).

    Bounded buffers of ``b`` chunks between stages (blocking after service, as the simulation's stores do): chunk i
    starts stage s at max(its hand-over from stage s-1, the hand-over of chunk i-1 from stage s), and is handed
    over from stage s once served and once chunk i-b has started stage s+1 (room in the buffer).
    """
    m = t.as_matrix() if isinstance(t, StageTimes) else t
    n = m.shape[1]
    if n == 0:
        return 0.0
    if buffer_chunks is None:
        prev = np.cumsum(m[0])
        for ts in m[1:]:
            s = np.cumsum(ts)
            prev = s + np.maximum.accumulate(prev - s + ts)
        return float(prev[-1])
    b = buffer_chunks
    k = m.shape[0]
    start = np.zeros((k, n))
    out = np.zeros((k, n))  # hand-over time from each stage
    rows = m.tolist()
    for i in range(n):
        for s in range(k):
            ready = out[s - 1, i] if s else 0.0
            free = out[s, i - 1] if i else 0.0
            start[s, i] = max(ready, free)
            done = start[s, i] + rows[s][i]
            out[s, i] = done if s == k - 1 or i < b else max(done, start[s + 1, i - b])
        # stage s+1 of chunk i-b started before chunk i finished stage s, so the order of the loops is safe
    return float(out[-1, -1])


def load_time(t: StageTimes, composition: str, buffer_chunks: int | None = None) -> float:
    """Seconds to load with the given composition (:data:`GROUPS`; ``buffer_chunks`` bounds the buffers between
    groups)."""
    if composition == "serial":
        return serial_time(t)
    if composition == "pipelined":
        return pipelined_time(t, buffer_chunks)
    return pipelined_time(grouped(t, composition), buffer_chunks)
