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


def _disk_step(rig: Rig, plan: ChunkPlan, i: int, res: LoadResult):
    """Read chunk i through the page cache; a miss queues for the shared disk."""
    size = float(plan.sizes[i])
    key = (plan.file, i)
    if rig.page_cache.contains(key):
        rig.page_cache.read(key, size)
        res.bytes_from_cache += size
        return
    t = rig.costs.disk_latency_s + size / GB / rig.costs.disk_gbps
    asked = rig.env.now
    with rig.disk.request() as req:
        yield req
        res.wait_s += rig.env.now - asked
        yield rig.env.timeout(t)
    res.disk_s += t
    rig.page_cache.read(key, size)
    res.bytes_from_disk += size


def _loader_step(rig: Rig, plan: ChunkPlan, i: int, res: LoadResult):
    t = float(plan.sizes[i]) / GB * rig.costs.loader_s_per_gb + float(plan.tensors[i]) * rig.costs.loader_s_per_tensor
    res.loader_s += t
    yield rig.env.timeout(t)


def _link_step(rig: Rig, plan: ChunkPlan, rates: np.ndarray, i: int, res: LoadResult):
    if not np.isfinite(rates[i]):  # spilled to host RAM, or unified memory: no link to cross
        return
    k = int(plan.target[i])
    t = float(plan.sizes[i]) / GB / float(rates[i])
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
    cached = rig.page_cache.read_all(plan.file, plan.sizes)
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
    elif composition == "serial":
        for i in range(plan.n):
            yield from _disk_step(rig, plan, i, res)
            yield from _loader_step(rig, plan, i, res)
            yield from _link_step(rig, plan, rates, i, res)
    else:
        to_loader = simpy.Store(env, capacity=buffer_chunks)
        to_link = simpy.Store(env, capacity=buffer_chunks)

        def reader():
            for i in range(plan.n):
                yield from _disk_step(rig, plan, i, res)
                yield to_loader.put(i)

        def converter():
            for _ in range(plan.n):
                i = yield to_loader.get()
                yield from _loader_step(rig, plan, i, res)
                yield to_link.put(i)

        def copier():
            for _ in range(plan.n):
                i = yield to_link.get()
                yield from _link_step(rig, plan, rates, i, res)

        env.process(reader())
        env.process(converter())
        yield env.process(copier())
    res.end_s = env.now
    return res
