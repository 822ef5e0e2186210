"""Scenario schema of a serving engine: its GPU, VRAM budget, expert cache and tiers, step and iteration costs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat

from sim.config.base import (
    MAX_GBPS,
    MAX_GIB,
    MAX_MIB,
    MAX_S,
    MAX_TOK_S,
    MIN_FRACTION,
    MIN_GBPS,
    MIN_TOK_S,
    Strict,
    input_file,
)
from sim.config.llamacpp import LlamaCpp


class StepCost(Strict):
    """Decode step-time mechanism of an expert-offloading engine (sim.moe.stepcost). What the card's specs determine
    is derived from them (sim.moe.spec_costs): bytes a step reads over the card's memory bandwidth, arithmetic over
    its tensor throughput, expert bytes over the host's DRAM bandwidth. What is fitted are the shares of those rates
    the engine gets and its fixed costs. A value in seconds given here (dense_s, gpu_expert_s, cpu_expert_s)
    replaces the derived one, as measured on that card."""

    memory_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=1, description="Share of the card's memory bandwidth (hbm_gbps) a step's weight "
        "and KV reads get (fraction).")
    compute_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=1, description="Share of the card's tensor throughput (tflops) a step's "
        "arithmetic gets (fraction).")
    layer_s: float | None = Field(
        None, ge=0, le=0.1, description="Fixed GPU time per layer per step besides its bytes and arithmetic: kernel "
        "launches, norms, router, synchronisation on the fused path (s).")
    cpu_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=1, description="Share of the host's paper DRAM bandwidth the CPU reads an "
        "expert's weights at when it computes a missed expert (fraction).")
    cpu_sync_s: float | None = Field(
        None, ge=0, le=0.1, description="Host round trip of a layer whose missed experts the CPU computes: "
        "activations to the host, the CPU woken, its results back (s).")
    cpu_budget_s: float | None = Field(
        None, ge=0, le=0.1, description="CPU time per layer the engine gives missed experts in host RAM: the CPU "
        "computes the misses it finishes within it, the rest cross PCIe (s).")
    dense_s: float | None = Field(None, gt=0, le=MAX_S, description="GPU time of a verification step outside routed "
                                  "experts, without the KV reads (s). Default: derived from the card's specs.")
    gpu_expert_s: float | None = Field(None, ge=0, le=MAX_S, description="GPU time per resident expert a step "
                                       "touches (s). Default: its bytes over the card's memory bandwidth.")
    cpu_expert_s: float | None = Field(None, gt=0, le=MAX_S, description="Host CPU time per missed expert it "
                                       "computes (s). Default: its bytes over the host's DRAM bandwidth.")
    pcie_latency_s: float | None = Field(
        None, ge=0, le=MAX_S, description="Fixed cost of a layer that reads experts over PCIe (s).")
    graph_break_s: float | None = Field(
        None, ge=0, le=MAX_S, description="Cost per step of running eagerly, off the fused GPU path, after a PCIe read "
        "(s).")
    link_share: float = Field(
        1.0, ge=MIN_FRACTION, le=1, description="Share of the link's host->GPU copy rate expert reads get (fraction).")
    break_idle_share: float = Field(
        0.0, ge=0, le=1, description="Share of graph_break_s with no kernel on the GPU (launch gaps) (fraction).")
    break_mode: Literal["sticky", "per_step"] = Field(
        "sticky", description="sticky: a request runs eagerly from its first PCIe read on; per_step: steps that read.")
    host_s: float = Field(0.0, ge=0, le=MAX_S, description="Host time per step with the GPU idle (sampling, "
                          "scheduling) (s).")


class Power(Strict):
    idle_w: float = Field(ge=0, le=5000, description="GPU power while idle (W).")
    busy_w: float | None = Field(None, ge=0, le=5000,
        description="GPU power while computing (W). Default: the card's board_power_w.")
    stalled_w: float | None = Field(None, ge=0, le=5000, description="GPU power while busy but waiting for experts "
                                    "(W). Default: idle_w + stalled_share x (busy_w - idle_w).")
    stalled_share: float | None = Field(
        None, ge=0, le=1, description="Where the stalled power sits between idle and busy (fraction).")


class PeerTier(Strict):
    """Another GPU of the machine holding expert copies and computing the routed experts it holds."""

    slots: Literal["auto"] | NonNegativeInt = Field(
        "auto", description="Expert copies it holds, or auto: its free VRAM (after reserved_gib, overhead_gib and "
        "reserve_mib) in whole slots.")
    overhead_gib: float = Field(0.0, ge=0, le=MAX_GIB,
        description="The engine's own VRAM on this GPU besides expert copies (GiB).")
    reserve_mib: float = Field(0.0, ge=0, le=MAX_MIB, description="VRAM left unused on this GPU (MiB).")
    expert_s: float | None = Field(None, gt=0, description="This GPU's time per routed expert it computes (s). "
                                   "Default: the expert's bytes over this card's memory bandwidth, at the engine's "
                                   "step.memory_efficiency.")
    latency_s: float = Field(ge=0, description="Activations to the peer and back, per layer that uses it (s).")
    runtime_mib: float = Field(
        0.0, ge=0, le=MAX_MIB,
        description="VRAM allocated on this GPU after the copies are placed (compute buffers, another "
        "process's working memory) (MiB): placement does not see it.")
    paging_threshold_mib: float = Field(
        0.0, ge=-MAX_MIB, le=MAX_MIB,
        description="When VRAM left free on this GPU falls under this (MiB), the driver pages its memory: of the "
        "experts a step computes there, the share that the shortfall is of their bytes (all of them once it "
        "exceeds what a step touches on the card) is paged in at paging_gbps.")
    paging_gbps: float | None = Field(
        None, ge=MIN_GBPS, le=MAX_GBPS,
        description="Rate at which the driver pages expert weights in over this GPU's link while its "
        "memory is oversubscribed (GB/s). Default: paging_link_share x the link's copy rate.")
    paging_link_share: float | None = Field(
        None, ge=1e-4, le=1, description="Share of this GPU's link rate the driver's page faults move expert "
        "weights at while its memory is oversubscribed (fraction).")


class Prefill(Strict):
    """Prompt processing in chunks (sim.moe.prefill): compute, streaming of the experts a chunk touches that are not in
    the engine GPU's VRAM (overlapped with compute), KV beyond the resident cells through host RAM."""

    chunk_tokens: int = Field(2048, gt=0, description="Prompt tokens per chunk (ubatch).")
    token_s: float = Field(gt=0, description="GPU time per prompt token within the resident KV (s).")
    fixed_s: float = Field(0.0, ge=0, description="Set-up time of each prefill that reads at least one token (s).")
    kv_resident_tokens: int | None = Field(
        None, gt=0, description="KV cells kept in VRAM; tokens beyond them stream their KV through host RAM.")
    kv_spill_token_s: float = Field(0.0, ge=0, description="Extra time per prompt token beyond kv_resident (s).")
    order: Literal["chunk", "layer"] = Field(
        "chunk", description="chunk: each chunk goes through every layer, streaming the experts it touches; layer: "
        "all new tokens go through one layer before the next, so each non-resident expert streams once per prefill.")
    overlap: bool = Field(
        True, description="Streaming overlaps compute (a chunk takes the longer); false: the chunk waits for its "
        "experts, then computes (the sum).")
    stream_gbps: float | None = Field(
        None, ge=MIN_GBPS, le=MAX_GBPS,
        description="Rate at which experts stream to the engine GPU during prefill (GB/s). Default: its link.")


class LayerSplit(Strict):
    """Layers divided across the machine's GPUs in proportion to the VRAM each gives the model."""

    hop_s: float = Field(ge=0, description="Latency of moving a step's activations across one card boundary (s).")
    activation_kib_per_token: float = Field(
        ge=0, description="Activations crossing a boundary per position per step (KiB).")
    gpus: list[str] = Field(description="GPUs in pipeline order after the engine's own.")
    layer_s_scale: list[PositiveFloat] = Field(
        description="Per listed GPU: its time per layer relative to the engine's GPU (>1: slower card).")


class Iteration(Strict):
    """Iteration cost of a dense continuous-batching engine (sim.batching.cost): ``overhead_s`` plus each operator's
    roofline (linear layers, decode attention, prefill attention), the longer of its reads at ``memory_efficiency``
    x the card's ``hbm_gbps`` and its arithmetic at ``compute_efficiency`` x its ``tflops``, summed. A value left
    out takes the card family's fitted one, and the engine's overhead (sim.batching.families)."""

    memory_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=1,
        description="Share of the card's memory bandwidth an iteration's reads get (fraction).")
    compute_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=1, description="Share of the card's tensor throughput an iteration's arithmetic gets "
        "(fraction).")
    overhead_s: float | None = Field(
        None, ge=0, le=MAX_S, description="Fixed time per iteration: scheduling, sampling, kernel launches (s).")
    token_budget: int = Field(
        512, gt=0, le=1_000_000, description="Tokens one iteration processes at most (chunked prefill, as Sarathi "
        "schedules): every decoding sequence's token first, then prefill chunks fill the rest.")
    kv_pool_gib: float | None = Field(
        None, gt=0, le=MAX_GIB,
        description="VRAM for KV (GiB). Default: the card's VRAM less other tenants, the weights and "
        "runtime_gib.")
    kv_read_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=1, description="Share of the card's memory bandwidth the attention kernels read KV "
        "at (fraction). Default: the card family's fitted value, else memory_efficiency.")
    attention_call_s: float | None = Field(
        None, ge=0, le=0.01, description="Fixed time of one layer's attention call per iteration besides its bytes "
        "(s). Default: the card family's fitted value, else 0.")
    server: Literal["vllm", "sglang"] = Field(
        "vllm", description="The serving engine whose per-iteration overhead applies when overhead_s is left out "
        "(sim.batching.families).")
    operators: str | None = input_file(
        "Profiled operator times of the model's linear layers on this card (Vidur's layout, "
        "calibration/vidur_a100/README.md: num_tokens, optional tensor_parallel, <operator>_median_ms per layer); "
        "they replace the linear layers' roofline. Default: the roofline.")
    allreduce_gbps: float | None = Field(
        None, ge=MIN_GBPS, le=MAX_GBPS, description="Tensor parallel: bandwidth of an all-reduce between the cards "
        "(GB/s; NVLink's where they have it). Default: the slowest card's host link (PCIe peer-to-peer).")
    allreduce_latency_s: float = Field(
        2e-5, ge=0, le=0.01, description="Tensor parallel: fixed time of one all-reduce (s; two per layer per "
        "iteration). Default 20 us: an assumed NCCL ring latency over PCIe, not fitted.")


class Scheduler(Strict):
    """A continuous-batching engine's scheduler (sim.batching), its knobs named as vLLM names them. Each left out takes
    the engine's older key (``parallel``, ``iteration.token_budget``, ``iteration.kv_pool_gib``) or vLLM's default."""

    max_num_seqs: int | None = Field(
        None, gt=0, le=4096, description="Sequences an iteration batches at most (default: the engine's parallel).")
    max_num_batched_tokens: int | None = Field(
        None, gt=0, le=1_000_000, description="Tokens one iteration processes at most: every decoding sequence's "
        "step first, then prompt chunks (default: iteration.token_budget, 512).")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="Share of the card's VRAM the engine takes for weights, activations "
        "(runtime_gib) and the KV pool, as vLLM sizes it; other tenants must leave that much free (fraction). "
        "Default: all the VRAM other tenants leave.")
    num_gpu_blocks_override: int | None = Field(
        None, gt=0, le=100_000_000, description="KV blocks of the pool, as the engine's log reports them ('# GPU "
        "blocks'); replaces the pool sized from VRAM.")
    block_size: int = Field(16, gt=0, le=4096, description="Tokens per KV block.")
    enable_chunked_prefill: bool = Field(
        True, description="Prompts in chunks mixed into decode iterations; off: each prompt whole in an iteration "
        "of its own while the decoders wait.")
    enable_prefix_caching: bool = Field(
        True, description="Tokens already in the prefix cache (a request's cached_tokens) are not prefilled.")
    preemption_mode: Literal["recompute", "swap"] = Field(
        "recompute", description="When the KV pool is full: recompute (free the newest sequence's KV, prefill it "
        "again later) or swap (its KV to host memory over the link and back).")


class Engine(Strict):
    """An expert-offloading serving engine on one GPU of a machine; its expert tiers below VRAM are peer GPUs, then
    host RAM, then the machine's disk (through the page cache)."""

    model: str = Field(description="Key of the MoE model it serves.")
    gpu: str | None = Field(None, description="Key of the machine's GPU it runs on (a llama.cpp engine on a machine "
                            "without GPUs has none).")
    overhead_gib: float | None = Field(
        None, ge=0, le=MAX_GIB,
        description="Fixed VRAM outside the expert cache: dense weights, KV, activations, CUDA context "
        "(GiB). Default: the model's dense_gib + KV for context_tokens + runtime_gib.")
    context_tokens: int = Field(0, ge=0, description="Context the engine allocates KV for (tokens).")
    runtime_gib: float = Field(0.0, ge=0, le=MAX_GIB, description="CUDA context, activations and buffers (GiB).")
    cache_reserve_mib: float = Field(700, ge=0, le=MAX_MIB, description="VRAM the engine keeps free (MiB).")
    expert_cache: Literal["auto"] | NonNegativeInt = Field(
        "auto", description="Slots of the expert cache, or auto: sized from the VRAM free at start.")
    policy: Literal["static", "lru", "lfu"] = Field("static", description="Expert-cache policy.")
    profile_seed: int | None = Field(
        None, ge=0, description="Static profile built on another workload (its popularity seed); default: served one.")
    prefill_tok_s: float | None = Field(
        None, ge=MIN_TOK_S, le=MAX_TOK_S,
        description="Prompt tokens read per second (tok/s), when no `prefill` mechanism is given.")
    prefill: Prefill | None = None
    parallel: int = Field(1, gt=0, le=256, description="Decode slots; the expert cache is divided among them.")
    tensor_parallel: int = Field(
        1, gt=0, le=64, description="Dense engine: cards the model is split across by tensor parallelism (vLLM's "
        "--tensor-parallel-size): the engine's gpu and the machine's next GPUs in their listed order, all of one type.")
    batching: bool = Field(
        False, description="Continuous batching: one step serves every active slot and fetches the union of their "
        "experts; the cache is shared, not divided. Default: slots take turns on the GPU, each with its share.")
    placement: Literal["experts", "layer_split"] = Field(
        "experts", description="experts: peers hold expert copies; layer_split: layers divided across the GPUs, "
        "activations cross every card boundary at every step.")
    layer_split: LayerSplit | None = None
    peers: dict[str, PeerTier] = Field(
        default_factory=dict, description="Peer GPUs of this machine holding expert copies, by GPU name, in order.")
    host_ram_gib: float | None = Field(
        None, ge=0, le=MAX_GIB,
        description="Host RAM for experts held nowhere in VRAM (GiB); the rest is read from the machine's "
        "disk each time. Default: all of them fit.")
    step: StepCost = StepCost()
    iteration: Iteration | None = Field(
        None, description="A dense model's iteration cost (continuous batching of up to `parallel` sequences).")
    scheduler: Scheduler | None = Field(
        None, description="Continuous batching's scheduler knobs (vLLM's names); with a dense model or "
        "batching: true.")
    slots: Literal["split", "shared"] = Field(
        "split", description="Slots taking turns (parallel > 1, no batching): split divides the expert cache among "
        "them (each sequence its share); shared keeps one cache every slot's steps use in turn.")
    power: Power | None = None
    llamacpp: LlamaCpp | None = Field(
        None, description="llama.cpp's placement and buffers (sim.llamacpp): the engine is llama.cpp, the "
        "sections above do not apply.")
