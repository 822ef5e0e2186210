"""Scenario schema of the hardware: PCIe, loading, disks, GPU types, a machine's GPUs, loader and engine."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from sim.config.base import MAX_GBPS, MAX_GIB, MAX_MIB, MAX_TOK_S, MIN_FRACTION, MIN_GBPS, Gen, Lanes, Strict
from sim.config.engine import Engine


class Pcie(Strict):
    efficiency: float = Field(
        0.84, ge=MIN_FRACTION, le=1,
        description="Share of the paper PCIe bandwidth a host->GPU copy delivers (fraction). "
        "Fitted to calibration/loading_stages.csv (84-85% measured on Gen4 x16 and Gen2 x4).",
    )


class MmapCosts(Strict):
    """What reading a memory-mapped file costs under one operating system."""

    request_kib: float = Field(128.0, gt=0, le=1 << 20,
        description="Bytes one page fault reads from disk (KiB): the OS's read-around, one request in flight.")
    queue_depth: int = Field(2, ge=1, le=64,
        description="Fault reads in flight: Linux reads the next window ahead asynchronously when a sequential "
        "reader reaches the marked page (mm/readahead.c), so one window is read while the last is used.")
    hit_s_per_gb: float = Field(0.0, ge=0, le=100,
        description="Reading mapped pages already in the page cache (minor faults), per decimal GB (s/GB).")
    source: str = ""


class WindowsMmap(MmapCosts):
    request_kib: float = Field(32.0, gt=0, le=1 << 20, description="Bytes one page fault reads (KiB); assumed: "
                               "8-page fault clusters for mapped data files.")
    queue_depth: int = Field(1, ge=1, le=64, description="Fault reads in flight (assumed: one).")


class MacosMmap(MmapCosts):
    request_kib: float = Field(16.0, gt=0, le=1 << 20, description="Bytes one page fault reads (KiB); assumed: "
                               "one 16 KiB page.")
    queue_depth: int = Field(1, ge=1, le=64, description="Fault reads in flight (assumed: one).")


class MmapByOs(Strict):
    linux: MmapCosts = Field(MmapCosts(), description="read_ahead_kb default 128 KiB: a fault reads ra_pages around "
                             "the page (mm/filemap.c do_sync_mmap_readahead).")
    windows: WindowsMmap = WindowsMmap()
    macos: MacosMmap = MacosMmap()


class HostCosts(Strict):
    """What a loader's code path costs the host CPU, shared across machines (sim.lab.loaders: which kind runs which
    path on how many threads). Fitted by `sim fit-loads` and the loads fidelity domain (sim.fidelity.loads)."""

    copy_gbps_per_thread: float = Field(10.0, ge=MIN_GBPS, le=MAX_GBPS,
        description="One thread's copy of a large buffer (GB/s of payload): a tensor read out of the page cache, the "
        "driver's staging copy of a pageable host-to-GPU copy. A property of a CPU core, not of the DRAM channels; "
        "used when machines.M.loader.copy_gbps is not given.")
    convert_gbps_per_thread: float = Field(2.0, ge=MIN_GBPS, le=MAX_GBPS,
        description="One thread's CPU dtype conversion (GB/s of input): BF16 to F16, a dequantization (loaders that "
        "convert on the CPU: machines.M.loader.converts).")
    python_s_per_tensor: float = Field(0.0, ge=0, le=1,
        description="Per-tensor work of a Python loader (s): open the tensor's view, the weight loader's narrow and "
        "copy_ call, the allocation (safetensors, vllm, Run:ai's iterator).")
    fastsafetensors_s_per_tensor: float = Field(0.0, ge=0, le=1,
        description="Per-tensor work of fastsafetensors (s): wrapping each tensor of its device buffer, its "
        "broadcast or scatter to the other ranks.")
    native_s_per_tensor: float = Field(0.0, ge=0, le=1,
        description="Per-tensor work of a C/C++ loader (s): llama.cpp's tensor_set, InstantTensor's scheduling.")


class LoadingConfig(Strict):
    composition: Literal["serial", "pipelined"] = Field(
        "serial",
        description="For loaders of kind generic: serial: per-byte stage costs add (real safetensors loaders); "
        "pipelined: stages overlap through bounded buffers (streaming loaders). Other kinds overlap as they do.",
    )
    chunk_mib: float = Field(256.0, ge=1, le=MAX_MIB,
        description="Size of one chunk moved through the stages (MiB); chunks are "
        "also cut where one GPU's share of the model ends.")
    buffer_chunks: int = Field(2, ge=1, le=100_000, description="Chunks each pipelined buffer holds between two "
                               "stages (at most 100,000: the chunks of the largest load, sim.config.checks).")
    mmap: MmapByOs = Field(MmapByOs(), description="Costs of memory-mapped reads per operating system (loaders of "
                           "the mmap kinds).")
    copy_share_of_dram: float = Field(
        0.309, ge=MIN_FRACTION, le=1,
        description="Most a machine's host copies get all at once (every thread of every rank), as a share of the "
        "host's paper DRAM bandwidth, when machines.M.loader.copy_gbps is not given (fraction; no cap when the "
        "host's DRAM is not stated). BV-3070Ti: numpy.copyto 17.78 GB/s on dual-channel DDR4-3600 (57.6 GB/s).")
    host: HostCosts = Field(HostCosts(), description="The host CPU's costs per byte and per tensor by loader code "
                            "path (shared across machines).")


class Disk(Strict):
    read_gbps: float | None = Field(
        None, ge=MIN_GBPS, le=MAX_GBPS,
        description="Sequential read bandwidth (decimal GB/s). Required, here or from a calibration file.")
    latency_s: float = Field(0.0, ge=0, le=60,
        description="Access latency of one read request (s): a request of r bytes takes latency_s + r / read_gbps, "
        "and a reader with q requests in flight gets at most q r / (latency_s + r / read_gbps). With a loader of "
        "kind generic, one request per chunk.")
    stream_gbps: float | None = Field(None, ge=MIN_GBPS, le=MAX_GBPS,
        description="Most one reader (one stream of requests) gets from the disk (GB/s; a USB bridge, say). "
        "Default: no limit below read_gbps.")


class GpuType(Strict):
    vram_gib: float = Field(gt=0, le=MAX_GIB, description="VRAM capacity (GiB).")
    pcie_max_gen: Gen | None = Field(None, description="Highest PCIe generation the card itself supports (required "
                                     "for a card; a unified-memory chip has none).")
    pcie_max_lanes: Lanes = Field(16, description="Widest PCIe link the card itself supports (lanes).")
    hbm_gbps: float | None = Field(None, ge=MIN_GBPS, le=MAX_GBPS,
        description="Memory bandwidth (GB/s, card spec); a dense engine's "
        "iterations read the weights and KV at a share of it.")
    tflops: float | None = Field(None, ge=1e-6, le=1e6,
        description="Dense FP16/BF16 tensor throughput with FP32 accumulate, no sparsity (TFLOP/s, card spec); "
        "matrix products run at a share of it.")
    int8_tops: float | None = Field(None, ge=1e-6, le=1e6,
        description="Dense INT8 tensor throughput (TOPS, card spec).")
    fp32_tflops: float | None = Field(None, ge=1e-6, le=1e6,
        description="Peak FP32 vector (shader, non-tensor) throughput at the boost clock, an FMA counted as 2 "
        "(TFLOP/s, card spec or shaders x 2 x boost clock): what a backend without matrix instructions computes on.")
    matrix_units: Literal["none", "tensor_core", "wmma", "mfma", "xmx", "neural_accelerator"] | None = Field(None,
        description="The card's matrix hardware: none, tensor_core (NVIDIA), wmma (AMD RDNA 3/4), mfma (AMD CDNA), "
        "xmx (Intel Arc), neural_accelerator (Apple M5). tflops is a rate of these units.")
    board_power_w: float | None = Field(None, gt=0, le=5000,
        description="Total board (graphics) power (W, card spec): an engine's busy power unless its power section "
        "says otherwise.")
    memory: str = Field("", description="Memory technology (GDDR6X, HBM3, LPDDR5X, ...).")
    vendor: str = Field("", description="nvidia, amd, intel or apple.")
    family: Literal["pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "gcn", "rdna1", "rdna2",
                    "rdna3", "rdna3.5", "rdna4", "cdna2", "cdna3", "alchemist", "battlemage", "apple_m1", "apple_m2",
                    "apple_m3", "apple_m4", "apple_m5"] | None = Field(
        None, description="Architecture family: a dense serving engine's iteration costs left out take its fitted "
        "values (sim.batching.families).")
    unified: bool = Field(False, description="Unified memory shared with the CPU (Apple M-series, GB10).")
    name: str = Field("", description="Marketing name (catalog).")
    source: str = Field("", description="Where the numbers come from (vendor spec sheet URL).")
    note: str = ""

    @model_validator(mode="after")
    def _link(self) -> GpuType:
        if self.pcie_max_gen is None and not self.unified:
            raise ValueError("pcie_max_gen: missing: the highest PCIe generation the card supports (only a "
                             "unified-memory chip, unified: true, has none)")
        return self


class Gpu(Strict):
    type: str = Field(description="Key of a GPU type under 'gpus'.")
    slot_gen: Gen | None = Field(description="PCIe generation the motherboard slot offers (null for a "
                                 "unified-memory chip, which has no slot: filled in for one).")
    slot_lanes: Lanes = Field(16, description="Lanes the slot offers (electrically).")
    negotiated_gen: Gen | None = Field(
        None, description="Generation the link really trains to under load, when lower than card and slot allow.")
    negotiated_lanes: Lanes | None = Field(
        None, description="Lanes the link really trains to under load, when fewer than card and slot allow.")
    pcie_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=1, description="Overrides pcie.efficiency for this link.")
    measured_link_gbps: float | None = Field(
        None, ge=MIN_GBPS, le=MAX_GBPS,
        description="A measured host->GPU copy rate (GB/s); replaces gen x lanes x efficiency.")
    reserved_gib: float = Field(0.0, ge=0, le=MAX_GIB,
        description="VRAM taken by other processes and the driver (GiB).")


class Host(Strict):
    """The host CPU and its memory: what computes experts held in host RAM, and how fast it reads them."""

    type: str | None = Field(None, description="Key of a host in the catalog (`sim catalog --kind hosts`); its "
                             "fields are defaults for the ones below.")
    dram: str = Field("", description="DRAM kind (DDR4, DDR5, LPDDR5X, ...).")
    mt_s: float | None = Field(None, ge=100, le=20000, description="DRAM transfer rate (MT/s).")
    channels: int | None = Field(None, ge=1, le=24, description="64-bit DRAM channels populated.")
    dram_gbps: float | None = Field(None, ge=MIN_GBPS, le=MAX_GBPS,
        description="Paper DRAM bandwidth (GB/s). Default: channels x 8 bytes x mt_s.")
    cores: int | None = Field(None, ge=1, le=1024, description="CPU cores.")
    threads: int | None = Field(None, ge=1, le=2048, description="Hardware threads.")
    bus_bits: int | None = Field(None, ge=8, le=1536, description="DRAM data bus width (bits), for a bus narrower "
                                 "than one 64-bit channel (the Raspberry Pi 5's 32-bit LPDDR4X); channels otherwise.")
    base_ghz: float | None = Field(None, gt=0, le=10, description="Base clock of the (performance) cores (GHz).")
    boost_ghz: float | None = Field(None, gt=0, le=10,
        description="Highest boost clock of the (performance) cores, one core loaded (GHz).")
    fp32_flops_per_cycle: int | None = Field(None, ge=1, le=256,
        description="Peak FP32 FLOP per cycle of one (performance) core: 2 x FMA units x FP32 SIMD lanes (Zen 3 "
        "AVX2: 2 x 2 x 8 = 32).")
    isa: Literal["avx2", "avx512", "neon", "sve2", "rv64gc", "rvv"] | None = Field(None,
        description="Widest vector instruction set the cores run (rv64gc: RISC-V without the vector extension).")
    e_cores: int | None = Field(None, ge=0, le=1024,
        description="Of the cores, how many are efficiency cores (hybrid CPUs); the clock and FLOP fields above "
        "describe the others.")
    e_boost_ghz: float | None = Field(None, gt=0, le=10, description="Highest clock of the efficiency cores (GHz).")
    e_fp32_flops_per_cycle: int | None = Field(None, ge=1, le=256,
        description="Peak FP32 FLOP per cycle of one efficiency core.")
    ram_gib: float | None = Field(None, gt=0, le=MAX_GIB, description="Host RAM installed (GiB).")
    os: Literal["linux", "windows", "macos"] = Field(
        "linux", description="Operating system: under Windows the NVIDIA driver backs VRAM allocations beyond the "
        "card with shared system memory (sysmem fallback) and the desktop keeps some VRAM.")
    name: str = ""
    source: str = ""
    note: str = ""

    @property
    def paper_gbps(self) -> float | None:
        """DRAM bandwidth on paper (GB/s): as given, or channels x 8 bytes x MT/s, or bus_bits / 8 bytes x MT/s."""
        if self.dram_gbps is not None:
            return self.dram_gbps
        if self.channels is not None and self.mt_s is not None:
            return self.channels * 8 * self.mt_s / 1000
        if self.bus_bits is not None and self.mt_s is not None:
            return self.bus_bits / 8 * self.mt_s / 1000
        return None


LoaderKind = Literal["generic", "safetensors", "vllm", "vllm_prefetch", "fastsafetensors", "fastsafetensors_gds",
                     "llamacpp_mmap", "llamacpp_no_mmap", "llamacpp_direct_io", "runai_streamer", "instanttensor"]


class Loader(Strict):
    """How a machine's weights get from the file to their memory (sim.lab.loaders says what each kind does)."""

    kind: LoaderKind = Field(
        "generic", description="generic: per-byte and per-tensor host costs, one disk request per chunk; the others "
        "are real loaders' paths (mmap or read or direct I/O, their copies, pageable or pinned host-to-GPU "
        "copies, overlap).")
    s_per_gb: float | None = Field(
        None, ge=0, description="Host-side loader cost per decimal GB (s/GB) beyond the copies the kind makes. "
        "generic: required, here or from a calibration; other kinds: default 0.")
    s_per_tensor: float | None = Field(None, ge=0, le=1, description="Host-side loader cost per tensor (s). Default 0: "
        "no public measurement separates it from the per-byte costs.")
    copy_gbps: float | None = Field(None, ge=MIN_GBPS, le=MAX_GBPS,
        description="Host memory copy bandwidth (GB/s of payload, memcpy of a large buffer) the kind's copies run "
        "at: a tensor materialised out of the page cache, the driver's staging copy of a pageable host-to-GPU "
        "copy. Default: loading.copy_share_of_dram of the host's paper DRAM bandwidth; required (here or from a "
        "calibration) by kinds other than generic when the machine has no host DRAM figures.")
    request_kib: float | None = Field(None, gt=0, le=1 << 22,
        description="Bytes per disk request (KiB). Default: the kind's (mmap: the OS's fault read-around).")
    queue_depth: int | None = Field(None, ge=1, le=4096,
        description="Disk requests each reader keeps in flight. Default: the kind's.")
    readers: int = Field(1, ge=1, le=64,
        description="Tensor-parallel ranks loading at once: they share the disk, the page cache and the host's "
        "copies; each rank reads what its kind reads per rank (sim.lab.ranks), each GPU keeps its own link.")
    threads: int | None = Field(None, ge=1, le=1024,
        description="Copy threads of one rank (fastsafetensors' max_threads, Run:ai's concurrency). Default: the "
        "kind's.")
    converts: bool = Field(False, description="The loader converts the weights' dtype on the CPU (a BF16 "
                           "checkpoint served as F16 through a blocking copy_: PyTorch converts on the CPU).")


class Startup(Strict):
    """Start-up phases a server log shows, besides reading the weights (seconds; default 0: not counted)."""

    process_s: float = Field(0.0, ge=0, le=3600, description="Process start and engine initialisation (s).")
    gpu_context_s: float = Field(0.0, ge=0, le=600,
        description="Driver context creation per GPU (s; one GPU on unified memory).")
    kv_alloc_s: float = Field(0.0, ge=0, le=3600, description="KV cache allocation and profiling (s).")
    warmup_s: float = Field(0.0, ge=0, le=7200, description="Graph capture, compilation or warm-up run (s).")
    compile_s: float = Field(0.0, ge=0, le=7200,
        description="vLLM's torch.compile (Dynamo and Inductor, or loading the compiled graphs from the cache) (s).")
    graph_capture_s: float = Field(0.0, ge=0, le=7200, description="vLLM's CUDA graph capture (s).")
    source: str = Field("", description="Where the phase times come from.")


class Machine(Strict):
    kind: Literal["discrete", "unified"] = Field(
        "discrete", description="discrete: GPUs behind PCIe; unified: one memory pool shared by the CPU and a GPU "
        "(GB10, Strix Halo, Apple M), no PCIe stage. Filled in as unified for a machine whose GPU is a unified-memory "
        "chip.")
    disk: str | None = Field(None, description="Key of a disk under 'disks' holding the model files (none: no loads).")
    page_cache_gib: float = Field(0.0, ge=0, le=MAX_GIB, description="Host RAM available to the page cache (GiB).")
    loader: Loader = Loader()
    startup: Startup = Startup()
    host: Host | None = Field(None, description="The host CPU and DRAM (experts computed on the CPU).")
    engine: Engine | None = Field(None, description="An expert-offloading engine serving an MoE model.")
    gpus: dict[str, Gpu] = Field(default_factory=dict, description="GPUs of the machine, by name (a unified machine: "
                                 "its chip, one).")
    unified_memory_gib: float | None = Field(None, gt=0, le=MAX_GIB,
        description="Unified memory the GPU may allocate (GiB): macOS's iogpu.wired_limit_mb, Linux's amdgpu GTT "
        "(amdgpu.gttsize, ttm.pages_limit) with the BIOS carve-out. With a GPU entry the default is the platform's "
        "rule applied to host.ram_gib (sim.config.unified); without one (a loading-only machine) required.")
    decode_tok_s: dict[str, Annotated[float, Field(gt=0, le=MAX_TOK_S)]] = Field(
        default_factory=dict, description="Measured decode rate per model key (tokens/s).")
    decode_jitter_cv: float = Field(
        0.0, ge=0, description="Coefficient of variation of a job's realised decode rate around the table value.")
    resident_models: list[str] = Field(default_factory=list, description="Models loaded in VRAM at t=0.")
    page_cache_models: list[str] = Field(default_factory=list, description="Models page-cached at t=0.")
    busy_until_s: float = Field(0.0, ge=0, description="Work already queued on the machine at t=0 (s).")
    on_overflow: Literal["error", "spill"] = Field(
        "error", description="A model that does not fit in VRAM: error (machine not eligible) or spill to host RAM.")
    note: str = ""

    @model_validator(mode="after")
    def _kind_fields(self) -> Machine:
        cpu_only = self.engine is not None and self.engine.llamacpp is not None
        if self.kind == "discrete" and not self.gpus and not cpu_only:
            raise ValueError("a discrete machine needs at least one entry under 'gpus' (only a llama.cpp engine runs "
                             "on the CPU alone)")
        if self.kind == "unified":
            if len(self.gpus) > 1:
                raise ValueError("a unified-memory machine has one GPU (its chip's), not "
                                 f"{len(self.gpus)}")
            if not self.gpus and self.unified_memory_gib is None:
                raise ValueError("a unified-memory machine needs 'unified_memory_gib', or its chip under 'gpus' "
                                 "(e.g. gpus: {gpu0: {type: gb10}})")
        return self
