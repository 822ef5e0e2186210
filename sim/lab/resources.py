"""What a machine offers a load, resolved from a scenario: memory targets (each GPU's VRAM behind its link, or
unified memory) and the costs of its load stages (pure data)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sim.config.links import link_info
from sim.config.machines import Machine
from sim.config.scenario import Scenario
from sim.core.units import GB, GIB


@dataclass(frozen=True)
class MemoryTarget:
    """Where weights land: a GPU's VRAM (behind a link) or unified memory (no link)."""

    name: str
    capacity_bytes: float  # usable for weights, after other processes (bytes)
    link_gbps: float | None  # None: no PCIe stage (unified memory)


@dataclass(frozen=True)
class StageCosts:
    """Per-byte and per-request costs of the load stages of one machine (sim.lab.loaders fills them from the
    loader's kind). Times per chunk come from :func:`sim.lab.loading.stage_times`."""

    disk_gbps: float  # the device's sequential bandwidth (GB/s)
    disk_latency_s: float  # access latency per request (s)
    loader_s_per_gb: float  # host work per GB besides the copies below (s/GB)
    loader_s_per_tensor: float  # host work per tensor (s)
    request_bytes: float = math.inf  # bytes per disk request; inf: one request per chunk (generic loader)
    queue_depth: int = 1  # requests each reader keeps in flight
    stream_gbps: float = math.inf  # most one reader gets from the disk (GB/s)
    readers: int = 1  # readers loading at once
    copy_gbps: float | None = None  # host memcpy bandwidth of the copies (GB/s of payload)
    copies_gpu: int = 0  # host copies of a byte bound for a GPU
    copies_cpu: int = 0  # host copies of a byte kept in host RAM
    pageable: bool = False  # the host-to-GPU copy goes through the driver's staging copy
    hit_s_per_gb: float = 0.0  # mapping a page-cache hit (minor faults, s/GB)
    direct: bool = False  # direct I/O: the page cache is bypassed
    overlap: str | None = None  # serial, reads, uploads or pipelined (loading.GROUPS); None: the scenario's
    unified_in_place: bool = False  # unified memory uses the mapped file in place (llama.cpp on Metal)
    touch_in_place: bool = False  # mapped pages used in place are mapped during the load (MAP_POPULATE, warm-up)
    threads: int = 1  # threads one reader copies with, each at copy_gbps
    host_cap_gbps: float = math.inf  # most every copy of every reader gets together (GB/s of payload)
    convert_s_per_gb: float = 0.0  # a CPU dtype conversion pass on one thread (s/GB of input; 0: no conversion)
    rank_reads: str = "shard"  # what each of several readers reads: shard, all or files (sim.lab.ranks)
    rank_tensors: str = "all"  # which tensors each of several readers iterates: all or share

    def disk_gbps_effective(self) -> float:
        """GB/s the loader's readers get from the disk: requests of r bytes take latency + r / bandwidth, q of them
        in flight per reader, each reader at most the disk's per-stream limit."""
        if not math.isfinite(self.request_bytes):  # one request per chunk (generic): its latency is per chunk
            return min(self.disk_gbps, self.readers * self.stream_gbps)
        r = self.request_bytes / GB
        per_stream = min(self.queue_depth * r / (self.disk_latency_s + r / self.disk_gbps), self.stream_gbps)
        return min(self.disk_gbps, self.readers * per_stream)

    @property
    def copy_s_per_gb(self) -> float:
        """Seconds per GB of one host copy by one reader's threads (0 when the loader makes none): ``threads`` at
        ``copy_gbps`` each, at most ``host_cap_gbps``."""
        if not self.copy_gbps:
            return 0.0
        if self.threads == 1 and not math.isfinite(self.host_cap_gbps):
            return 1.0 / self.copy_gbps
        return 1.0 / min(self.copy_gbps * self.threads, self.host_cap_gbps)

    def pinned_copy_only(self) -> StageCosts:
        """A pinned host buffer copied to the GPU: nothing read, no loader work (the link probe)."""
        return replace(self, loader_s_per_gb=0.0, loader_s_per_tensor=0.0, copies_gpu=0, copies_cpu=0,
                       pageable=False, hit_s_per_gb=0.0, direct=False, convert_s_per_gb=0.0)


def memory_targets(scn: Scenario, machine: Machine) -> list[MemoryTarget]:
    if machine.kind == "unified":
        from sim.config.unified import gpu_memory_gib

        return [MemoryTarget("unified", gpu_memory_gib(scn, machine) * GIB, None)]
    out = []
    for name, gpu in machine.gpus.items():
        cap = max(0.0, scn.gpus[gpu.type].vram_gib - gpu.reserved_gib) * GIB
        out.append(MemoryTarget(name, cap, link_info(scn, machine, name).gbps))
    return out


def has_load_path(machine: Machine) -> bool:
    """A machine can load weights when it names a disk (and so, once validated, has loader costs)."""
    return machine.disk is not None


def model_bytes(scn: Scenario, model: str) -> float:
    return scn.models[model].weights_gib * GIB
