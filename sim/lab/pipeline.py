"""The loading pipeline as simpy processes: disk and PCIe links are shared resources, the page cache is shared state.

Processes only schedule; how long each chunk takes in each stage comes from :mod:`sim.lab.loading`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from sim.core.units import GB
from sim.lab import loading
from sim.lab.loading import ChunkPlan, link_rates
from sim.lab.pagecache import PageCache
from sim.lab.resources import StageCosts


@dataclass
class Rig:
    """A machine's shared load resources inside one simulation."""

    env: simpy.Environment
    costs: StageCosts
    page_cache: PageCache
    disk: simpy.Resource
    links: dict[str, simpy.Resource]

    @classmethod
    def build(cls, env: simpy.Environment, costs: StageCosts, page_cache: PageCache,
              link_names: list[str], disk: simpy.Resource | None = None) -> Rig:
        """A rig with its own links; the disk is its own unless a shared one (same disk key) is given."""
        links = {n: simpy.Resource(env, 1) for n in link_names}
        return cls(env, costs, page_cache, disk or simpy.Resource(env, 1), links)


@dataclass
class LoadResult:
    """What one simulated load did. Stage seconds are busy time in that stage (waits for a shared resource excluded)."""

    model: str
    bytes: float
    start_s: float = 0.0
    end_s: float = 0.0
    disk_s: float = 0.0
    loader_s: float = 0.0
    link_s: float = 0.0
    wait_s: float = 0.0
    bytes_from_disk: float = 0.0
    bytes_from_cache: float = 0.0
    bytes_over_link: float = 0.0
    spilled_bytes: float = 0.0

    @property
    def wall_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def gbps(self) -> float:
        """Bytes of the model per second of wall time (GB/s)."""
        return self.bytes / GB / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def link_gbps(self) -> float:
        """Bytes that crossed a link per second of wall time (GB/s); spilled bytes never cross."""
        return self.bytes_over_link / GB / self.wall_s if self.wall_s > 0 else float("inf")


@dataclass(frozen=True)
class ChunkTimes:
    """Each chunk's stage seconds when it is a page-cache miss and when it is a hit (:func:`loading.stage_times`)."""

    miss: loading.StageTimes
    hit: loading.StageTimes

    @classmethod
    def of(cls, plan: ChunkPlan, costs: StageCosts) -> ChunkTimes:
        return cls(loading.stage_times(plan, costs, np.zeros(plan.n, dtype=bool)),
                   loading.stage_times(plan, costs, np.ones(plan.n, dtype=bool)))


def _disk_step(rig: Rig, plan: ChunkPlan, times: ChunkTimes, i: int, res: LoadResult, hits: list[bool]):
    """Read chunk i through the page cache; a miss queues for the shared disk."""
    size = float(plan.sizes[i])
    key = (plan.file, i)
    if not rig.costs.direct and rig.page_cache.contains(key):
        rig.page_cache.read(key, size)
        res.bytes_from_cache += size
        hits[i] = True
        return
    t = float(times.miss.disk[i])
    busy = min(t, size / GB / rig.costs.disk_gbps)  # the device's own transfer time; the rest is this reader's
    asked = rig.env.now                                # requests waiting on their latency, when others may read
    with rig.disk.request() as req:
        yield req
        res.wait_s += rig.env.now - asked
        yield rig.env.timeout(busy)
    if t > busy:
        yield rig.env.timeout(t - busy)
    res.disk_s += t
    if not rig.costs.direct:
        rig.page_cache.read(key, size)
    res.bytes_from_disk += size


def _loader_step(rig: Rig, times: ChunkTimes, i: int, res: LoadResult, hits: list[bool]):
    t = float((times.hit if hits[i] else times.miss).loader[i])
    res.loader_s += t
    yield rig.env.timeout(t)


def _link_step(rig: Rig, plan: ChunkPlan, rates: np.ndarray, times: ChunkTimes, i: int, res: LoadResult):
    if not np.isfinite(rates[i]):  # spilled to host RAM, or unified memory: no link to cross
        return
    k = int(plan.target[i])
    t = float(times.miss.link[i])
    asked = rig.env.now
    with rig.links[plan.targets[k].name].request() as req:
        yield req
        res.wait_s += rig.env.now - asked
        yield rig.env.timeout(t)
    res.link_s += t
    res.bytes_over_link += float(plan.sizes[i])


def _exclusive_load(rig: Rig, plan: ChunkPlan, rates: np.ndarray, composition: str, buffer_chunks: int,
                    res: LoadResult):
    """The whole load as one event: valid when no other load can use this disk or these links meanwhile.

    The page cache sees the same reads in the same order and the stage times come from the same mechanism, so
    the result equals the chunk-by-chunk simulation (the tests check it); the resources are held throughout, so
    a load that broke the assumption would wait rather than overlap unnoticed.
    """
    env = rig.env
    cached = rig.page_cache.read_all(plan.file, plan.sizes, direct=rig.costs.direct)
    times = loading.stage_times(plan, rig.costs, cached)
    crosses = np.isfinite(rates)  # spilled chunks and unified memory have an infinite "link"
    res.disk_s, res.loader_s, res.link_s = float(times.disk.sum()), float(times.loader.sum()), float(times.link.sum())
    res.bytes_from_cache = float(plan.sizes[cached].sum())
    res.bytes_from_disk = float(plan.sizes[~cached].sum())
    res.bytes_over_link = float(plan.sizes[crosses].sum())
    requests = [rig.disk.request()] + [link.request() for link in rig.links.values()]
    asked = env.now
    yield env.all_of(requests)
    res.wait_s += env.now - asked
    yield env.timeout(loading.load_time(times, composition, buffer_chunks))
    for resource, req in zip([rig.disk, *rig.links.values()], requests, strict=True):
        resource.release(req)


def load(rig: Rig, plan: ChunkPlan, model: str, composition: str, buffer_chunks: int, exclusive: bool = False):
    """simpy process: load ``plan``; its value is a :class:`LoadResult`.

    ``exclusive``: the caller guarantees no concurrent load on this disk or these links (a lone job), so the
    load is one event instead of a few per chunk.
    """
    env = rig.env
    res = LoadResult(model=model, bytes=plan.total_bytes, start_s=env.now, spilled_bytes=plan.spilled_bytes)
    rates = link_rates(plan)
    if exclusive:
        yield from _exclusive_load(rig, plan, rates=rates, composition=composition, buffer_chunks=buffer_chunks,
                                   res=res)
        res.end_s = env.now
        return res
    times = ChunkTimes.of(plan, rig.costs)
    hits = [False] * plan.n

    def stage(name: str, i: int):
        if name == "disk":
            yield from _disk_step(rig, plan, times, i, res, hits)
        elif name == "loader":
            yield from _loader_step(rig, times, i, res, hits)
        else:
            yield from _link_step(rig, plan, rates, times, i, res)

    groups = loading.GROUPS[composition]  # each group a process; buffers of buffer_chunks chunks between them
    buffers = [simpy.Store(env, capacity=buffer_chunks) for _ in groups[1:]]

    def worker(k: int):
        for i in range(plan.n):
            if k:
                i = yield buffers[k - 1].get()
            for name in groups[k]:
                yield from stage(name, i)
            if k < len(buffers):
                yield buffers[k].put(i)

    for k in range(len(groups) - 1):
        env.process(worker(k))
    yield env.process(worker(len(groups) - 1))
    res.end_s = env.now
    return res
