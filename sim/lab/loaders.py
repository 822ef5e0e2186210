"""Real loaders' paths from file to memory, as stage costs (pure data, no simpy).

Each kind says how its bytes leave the disk (memory-mapped page faults, ``read()`` calls or direct I/O, with the
request size and the requests in flight), how many times the host copies them (a tensor materialised out of the
page cache, the driver's staging copy of a pageable host-to-GPU copy), whether the copy to the GPU is pinned or
pageable, and whether reading overlaps the copies. What the code of each loader does, with sources:
docs/research/loaders.md.

- ``generic``: the first version's loader: ``s_per_gb`` and ``s_per_tensor`` on the host, one disk request per chunk.
- ``safetensors``: PyTorch with safetensors (``safe_open`` maps the file, ``get_tensor`` gives a view of the mapping,
  ``Tensor.to(device)`` copies it from pageable memory). Serial.
- ``vllm``: vLLM's default loader: the same path (the safetensors iterator, then ``param.data.copy_``).
- ``vllm_prefetch``: the same, with the files read ahead into the page cache by large sequential reads overlapping
  the load.
- ``fastsafetensors``: 16 threads reading 16 MiB at a time through the page cache into pinned buffers, each copied
  to the GPU while the others read (its path without GPUDirect Storage).
- ``fastsafetensors_gds``: GPUDirect Storage: the file read straight into GPU memory, past the page cache (a warm
  load is as slow as a cold one).
- ``llamacpp_mmap``: llama.cpp's default: the file is mapped; tensors bound for a GPU are copied from the mapping
  (pageable), tensors kept on the CPU are used in place (their pages are read in and mapped all the same).
- ``llamacpp_no_mmap``: ``--no-mmap``: ``read()`` into buffers (host tensors into their own, GPU tensors through
  pinned staging buffers uploaded asynchronously while the next is read).
- ``llamacpp_direct_io``: ``--direct-io``: O_DIRECT reads of 64 MiB into pinned buffers, past the page cache.
- ``runai_streamer``: Run:ai Model Streamer through vLLM: 16 threads read the files into a CPU buffer, each tensor is
  then copied to the GPU from it; every tensor-parallel rank streams the whole checkpoint.
- ``instanttensor``: direct I/O into pinned buffers pipelined with the copies to the GPU; ranks read their own files.

The host's share of a load (:mod:`sim.lab.loading`) is a property of the kind's code, not of one machine's DRAM:
its copies run on ``threads`` threads at ``loading.host.copy_gbps_per_thread`` each, every copy of every rank at
most ``loading.copy_share_of_dram`` of the host's paper DRAM bandwidth; each tensor costs the kind's code path
(``loading.host.<python|fastsafetensors|native>_s_per_tensor``); a loader that converts the dtype on the CPU pays
a pass at ``loading.host.convert_gbps_per_thread``. What tensor-parallel ranks share: :mod:`sim.lab.ranks`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.config.machines import Machine
from sim.config.scenario import Scenario
from sim.core.units import KIB
from sim.lab import loading
from sim.lab.loading import ChunkPlan
from sim.lab.resources import StageCosts


@dataclass(frozen=True)
class LoaderPath:
    """What one kind of loader does with each byte, each tensor and each tensor-parallel rank."""

    read: str  # mmap | read | direct
    request_kib: float | None  # bytes per disk request (KiB); None: the OS's mmap read-around
    queue_depth: int  # requests in flight per reader
    copies_gpu: int  # host copies of a byte bound for a GPU, before the copy to the GPU
    copies_cpu: int  # host copies of a byte kept in host RAM
    pageable: bool  # the copy to the GPU goes from pageable memory (through the driver's staging copy)
    overlap: str  # how stages overlap: serial, reads, uploads or pipelined (sim.lab.loading.GROUPS)
    linux_request_scale: float = 1.0  # posix_fadvise(SEQUENTIAL) doubles Linux's read-around
    linux_queue_depth: int | None = None  # requests in flight under Linux, when its readahead adds one
    unified_in_place: bool = False  # on unified memory the mapping is used in place (no copy)
    touches_in_place: bool = False  # pages used in place are mapped during the load all the same
    code: str = "python"  # python | fastsafetensors | native: which per-tensor cost of loading.host the kind pays
    threads: int = 1  # threads one rank copies with (loading.host.copy_gbps_per_thread each)
    rank_reads: str = "shard"  # per tensor-parallel rank: its shard, all (the whole checkpoint) or files (its own)
    rank_tensors: str = "all"  # per rank: all (every rank iterates every tensor) or share (its own tensors)


PATHS: dict[str, LoaderPath] = {
    # safe_open maps the file and get_tensor returns a view of the mapping (no host copy); .to(device) and vLLM's
    # param.data.copy_ copy from that pageable memory (docs/research/loaders.md, 3). Every TP rank opens every file
    # and iterates every tensor, and copies its narrowed shard (docs/research/loaders.md, 3, TP reads)
    "safetensors": LoaderPath("mmap", None, 1, copies_gpu=0, copies_cpu=0, pageable=True, overlap="serial"),
    "vllm": LoaderPath("mmap", None, 1, copies_gpu=0, copies_cpu=0, pageable=True, overlap="serial"),
    # the prefetch strategy: 8 threads reading 16 MiB blocks into the page cache while the load runs
    "vllm_prefetch": LoaderPath("read", 16 * 1024, 8, copies_gpu=0, copies_cpu=0, pageable=True, overlap="reads"),
    # without GDS (its default with several GPUs): 16 threads pread 16 MiB through the page cache into pinned
    # bounce buffers and copy each to the GPU (docs/research/loaders.md, 3); ranks read distinct files, then every
    # tensor is broadcast or scattered in a collective all ranks join
    "fastsafetensors": LoaderPath("read", 16 * 1024, 16, copies_gpu=1, copies_cpu=1, pageable=False,
                                  overlap="pipelined", code="fastsafetensors", threads=16, rank_reads="files"),
    # with GPUDirect Storage: cuFileRead from the file straight into GPU memory, past the page cache
    "fastsafetensors_gds": LoaderPath("direct", 16 * 1024, 16, copies_gpu=0, copies_cpu=0, pageable=False,
                                      overlap="pipelined", code="fastsafetensors", threads=16, rank_reads="files"),
    # mmap with posix_fadvise(SEQUENTIAL): twice the read-around on Linux; GPU tensors copied from the mapping one
    # tensor_set at a time, CPU tensors used in place; every page is mapped within its load time all the same: by
    # MAP_POPULATE on Linux, by the warm-up run its load time ends with elsewhere (docs/research/loaders.md, 1.1, 1.4)
    "llamacpp_mmap": LoaderPath("mmap", None, 1, copies_gpu=0, copies_cpu=0, pageable=True, overlap="serial",
                                linux_request_scale=2.0, unified_in_place=True, touches_in_place=True,
                                code="native"),
    # --no-mmap: serial 1 MiB reads into 4 pinned staging buffers, up to 3 uploads in flight; CPU tensors read into
    # their own buffers (one copy out of the page cache either way). Under Linux a sequential read() keeps the next
    # window in flight (mm/readahead.c: async_size = size), two requests at once (docs/research/loaders.md, 2)
    "llamacpp_no_mmap": LoaderPath("read", 1024, 1, copies_gpu=1, copies_cpu=1, pageable=False, overlap="uploads",
                                   code="native", linux_queue_depth=2),
    # --direct-io (llama.cpp PR #18012): O_DIRECT reads of up to 64 MiB, one at a time, into 4 pinned buffers
    # uploaded asynchronously; host tensors through an aligned bounce buffer and a memcpy (docs/research/loaders.md,
    # 1.2-1.3)
    "llamacpp_direct_io": LoaderPath("direct", 64 * 1024, 1, copies_gpu=0, copies_cpu=1, pageable=False,
                                     overlap="uploads", code="native"),
    # Run:ai Model Streamer through vLLM: its threads read the files (16 threads of 2 MiB reads from a file system
    # by default, runai-model-streamer docs/src/env-vars.md) into a CPU buffer, then vLLM's weight loader copies
    # each tensor to the GPU from that pageable buffer; every rank streams the whole checkpoint
    # (weight_utils.runai_safetensors_weights_iterator: stream_files(hf_weights_files) on every rank), reads
    # overlapping the copies
    "runai_streamer": LoaderPath("read", 2 * 1024, 16, copies_gpu=1, copies_cpu=1, pageable=True, overlap="reads",
                                 threads=16, rank_reads="all"),
    # InstantTensor: direct I/O into pinned buffers, pipelined with the copies to the GPU (docs/benchmark.md of
    # scitix/InstantTensor @48b6353: "pipelined prefetch" and direct I/O); ranks read their own files
    "instanttensor": LoaderPath("direct", 16 * 1024, 16, copies_gpu=0, copies_cpu=0, pageable=False,
                                overlap="pipelined", code="native", threads=16, rank_reads="files",
                                rank_tensors="share"),
}


def host_os(machine: Machine) -> str:
    return machine.host.os if machine.host is not None else "linux"


def copy_bandwidth(scn: Scenario, machine: Machine) -> float | None:
    """GB/s of one of the loader's host copies (one thread): as given for the machine, else the host's per-thread
    copy rate (loading.host.copy_gbps_per_thread), at most the share of the host's paper DRAM all copies get."""
    if machine.loader.copy_gbps is not None:
        return machine.loader.copy_gbps
    return min(scn.loading.host.copy_gbps_per_thread, host_cap_gbps(scn, machine))


def host_cap_gbps(scn: Scenario, machine: Machine) -> float:
    """Most every copy thread of every rank gets together (GB/s of payload): loading.copy_share_of_dram of the
    host's paper DRAM bandwidth; no cap when the machine's copy rate is given or its DRAM is not stated."""
    paper = machine.host.paper_gbps if machine.host is not None else None
    if machine.loader.copy_gbps is not None or paper is None:
        return math.inf
    return scn.loading.copy_share_of_dram * paper


def stage_costs(scn: Scenario, machine: Machine) -> StageCosts:
    """The stage costs of ``machine``'s loader, from its kind, its disk and its operating system's mmap costs."""
    disk = scn.disks[machine.disk]
    ld = machine.loader
    stream = disk.stream_gbps if disk.stream_gbps is not None else math.inf
    if ld.kind == "generic":
        return StageCosts(disk.read_gbps, disk.latency_s, ld.s_per_gb, ld.s_per_tensor or 0.0, stream_gbps=stream,
                          readers=ld.readers)
    path = PATHS[ld.kind]
    host = scn.loading.host
    copy_gbps = copy_bandwidth(scn, machine)
    os_name = host_os(machine)
    mmap = getattr(scn.loading.mmap, os_name)
    scale = path.linux_request_scale if os_name == "linux" else 1.0
    request_kib = ld.request_kib or path.request_kib or mmap.request_kib * scale
    per_tensor = ld.s_per_tensor if ld.s_per_tensor is not None else getattr(host, f"{path.code}_s_per_tensor")
    return StageCosts(
        disk.read_gbps, disk.latency_s, ld.s_per_gb or 0.0,
        per_tensor,
        request_bytes=request_kib * KIB,
        queue_depth=ld.queue_depth or (mmap.queue_depth if path.read == "mmap" else
                                       path.linux_queue_depth or path.queue_depth if os_name == "linux" else
                                       path.queue_depth),
        stream_gbps=stream,
        readers=ld.readers, copy_gbps=copy_gbps, copies_gpu=path.copies_gpu, copies_cpu=path.copies_cpu,
        pageable=path.pageable, hit_s_per_gb=mmap.hit_s_per_gb if path.read == "mmap" else 0.0,
        direct=path.read == "direct", overlap=path.overlap, unified_in_place=path.unified_in_place,
        touch_in_place=path.touches_in_place,
        threads=ld.threads or path.threads, host_cap_gbps=host_cap_gbps(scn, machine),
        convert_s_per_gb=1.0 / host.convert_gbps_per_thread if ld.converts else 0.0,
        rank_reads=path.rank_reads, rank_tensors=path.rank_tensors)


def lone_load_s(scn: Scenario, costs: StageCosts, plan: ChunkPlan, cached: np.ndarray) -> float:
    """Seconds of one load with nothing else using its disk and links, ``cached`` marking page-cache hits."""
    times = loading.stage_times(plan, costs, cached)
    return loading.load_time(times, composition(scn, costs), scn.loading.buffer_chunks)


def composition(scn: Scenario, costs: StageCosts) -> str:
    """How the stages overlap (sim.lab.loading.GROUPS): the loader kind's, or the scenario's for generic loaders."""
    return scn.loading.composition if costs.overlap is None else costs.overlap
