"""Scenario files: pydantic models, YAML loading, calibration overlays and ``--set`` overrides.

Collections are maps keyed by name so every knob has a dotted path (``machines.rtx4090_box.loader.s_per_gb``).
Units are in key names. Unknown keys are errors with a did-you-mean.
"""

from __future__ import annotations

import copy
import difflib
import functools
import os
import pickle
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sim.core.errors import ScenarioError

Gen = Literal[1, 2, 3, 4, 5, 6]
Lanes = Literal[1, 2, 4, 8, 16]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, coerce_numbers_to_str=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML reads yes/no/true as booleans; a boolean where a number is expected is a mistake, not 1 or 0."""
        if isinstance(value, bool) and cls.model_fields[info.field_name].annotation is not bool:
            raise ValueError(f"expected a number or text, not the boolean {value}")
        return value


class Pcie(Strict):
    efficiency: float = Field(
        0.84, gt=0, le=1,
        description="Share of the paper PCIe bandwidth a host->GPU copy delivers (fraction). "
        "Fitted to calibration/loading_stages.csv (84-85% measured on Gen4 x16 and Gen2 x4).",
    )


class LoadingConfig(Strict):
    composition: Literal["serial", "pipelined"] = Field(
        "serial",
        description="serial: per-byte stage costs add (real safetensors loaders); "
        "pipelined: stages overlap through bounded buffers (streaming loaders).",
    )
    chunk_mib: float = Field(256.0, ge=1, description="Size of one chunk moved through the stages (MiB); chunks are "
                             "also cut where one GPU's share of the model ends.")
    buffer_chunks: int = Field(2, ge=1, description="Chunks each pipelined buffer holds between two stages.")


class Disk(Strict):
    read_gbps: float | None = Field(
        None, gt=0, description="Sequential read bandwidth (decimal GB/s). Required, here or from a calibration file.")
    latency_s: float = Field(0.0, ge=0, le=60, description="Fixed cost of one chunk read request (s).")


class GpuType(Strict):
    vram_gib: float = Field(gt=0, description="VRAM capacity (GiB).")
    pcie_max_gen: Gen = Field(description="Highest PCIe generation the card itself supports.")
    pcie_max_lanes: Lanes = Field(16, description="Widest PCIe link the card itself supports (lanes).")
    hbm_gbps: float | None = Field(None, gt=0, description="Memory bandwidth (GB/s, card spec); a dense engine's "
                                   "iterations read the weights and KV at a share of it.")
    tflops: float | None = Field(None, gt=0, description="Dense FP16/BF16 tensor throughput (TFLOP/s, card spec); a "
                                 "dense engine's matrix products run at a share of it.")


class Gpu(Strict):
    type: str = Field(description="Key of a GPU type under 'gpus'.")
    slot_gen: Gen = Field(description="PCIe generation the motherboard slot offers.")
    slot_lanes: Lanes = Field(16, description="Lanes the slot offers (electrically).")
    negotiated_gen: Gen | None = Field(
        None, description="Generation the link really trains to under load, when lower than card and slot allow.")
    negotiated_lanes: Lanes | None = Field(
        None, description="Lanes the link really trains to under load, when fewer than card and slot allow.")
    pcie_efficiency: float | None = Field(None, gt=0, le=1, description="Overrides pcie.efficiency for this link.")
    measured_link_gbps: float | None = Field(
        None, gt=0, description="A measured host->GPU copy rate (GB/s); replaces gen x lanes x efficiency.")
    reserved_gib: float = Field(0.0, ge=0, description="VRAM taken by other processes and the driver (GiB).")


class Loader(Strict):
    s_per_gb: float | None = Field(
        None, ge=0, description="Host-side loader cost per decimal GB (s/GB). Required, here or from a calibration.")
    s_per_tensor: float = Field(0.0, ge=0, description="Host-side loader cost per tensor (s).")


class StepCost(Strict):
    """Decode step-time mechanism of an expert-offloading engine (sim.stepcost); every value fitted, in seconds."""

    dense_s: float | None = Field(None, gt=0, description="GPU time of a verification step outside routed experts (s).")
    gpu_expert_s: float | None = Field(None, ge=0, description="GPU time per resident expert a step touches (s).")
    cpu_expert_s: float | None = Field(None, gt=0, description="Host CPU time per missed expert it computes (s).")
    pcie_latency_s: float | None = Field(
        None, ge=0, description="Fixed cost of a layer that reads experts over PCIe (s).")
    graph_break_s: float | None = Field(
        None, ge=0, description="Cost per step of running eagerly, off the fused GPU path, after a PCIe read (s).")
    link_share: float = Field(
        1.0, gt=0, le=1, description="Share of the link's host->GPU copy rate expert reads get (fraction).")
    break_idle_share: float = Field(
        0.0, ge=0, le=1, description="Share of graph_break_s with no kernel on the GPU (launch gaps) (fraction).")
    break_mode: Literal["sticky", "per_step"] = Field(
        "sticky", description="sticky: a request runs eagerly from its first PCIe read on; per_step: steps that read.")
    host_s: float = Field(0.0, ge=0, description="Host time per step with the GPU idle (sampling, scheduling) (s).")


class Power(Strict):
    idle_w: float = Field(ge=0, description="GPU power while idle (W).")
    busy_w: float = Field(ge=0, description="GPU power while computing (W).")
    stalled_w: float = Field(ge=0, description="GPU power while busy but waiting for experts (W).")


class PeerTier(Strict):
    """Another GPU of the machine holding expert copies and computing the routed experts it holds."""

    slots: Literal["auto"] | NonNegativeInt = Field(
        "auto", description="Expert copies it holds, or auto: its free VRAM (after reserved_gib, overhead_gib and "
        "reserve_mib) in whole slots.")
    overhead_gib: float = Field(0.0, ge=0, description="The engine's own VRAM on this GPU besides expert copies (GiB).")
    reserve_mib: float = Field(0.0, ge=0, description="VRAM left unused on this GPU (MiB).")
    expert_s: float = Field(gt=0, description="This GPU's time per routed expert it computes (s).")
    latency_s: float = Field(ge=0, description="Activations to the peer and back, per layer that uses it (s).")
    runtime_mib: float = Field(
        0.0, ge=0, description="VRAM allocated on this GPU after the copies are placed (compute buffers, another "
        "process's working memory) (MiB): placement does not see it.")
    paging_threshold_mib: float = Field(
        0.0, description="When VRAM left free on this GPU falls under this (MiB), the driver pages its memory and "
        "every expert it computes is paged in at paging_gbps.")
    paging_gbps: float | None = Field(
        None, gt=0, description="Rate at which the driver pages expert weights in over this GPU's link while its "
        "memory is oversubscribed (GB/s): each expert it computes then also waits expert bytes / this rate.")


class Prefill(Strict):
    """Prompt processing in chunks (sim.prefill): compute, streaming of the experts a chunk touches that are not in
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
    stream_gbps: PositiveFloat | None = Field(
        None, description="Rate at which experts stream to the engine GPU during prefill (GB/s). Default: its link.")


class LayerSplit(Strict):
    """Layers divided across the machine's GPUs in proportion to the VRAM each gives the model."""

    hop_s: float = Field(ge=0, description="Latency of moving a step's activations across one card boundary (s).")
    activation_kib_per_token: float = Field(
        ge=0, description="Activations crossing a boundary per position per step (KiB).")
    gpus: list[str] = Field(description="GPUs in pipeline order after the engine's own.")
    layer_s_scale: list[PositiveFloat] = Field(
        description="Per listed GPU: its time per layer relative to the engine's GPU (>1: slower card).")


class Iteration(Strict):
    """Iteration cost of a dense continuous-batching engine (sim.dense_step): each iteration takes ``overhead_s`` +
    the longer of its reads (weights once, plus every sequence's KV) at ``memory_efficiency`` x the card's
    ``hbm_gbps`` and its arithmetic (2 FLOPs per parameter per token, attention per token pair) at
    ``compute_efficiency`` x its ``tflops``."""

    memory_efficiency: float | None = Field(
        None, gt=0, le=1, description="Share of the card's memory bandwidth an iteration's reads get (fraction).")
    compute_efficiency: float | None = Field(
        None, gt=0, le=1, description="Share of the card's tensor throughput an iteration's arithmetic gets "
        "(fraction).")
    overhead_s: float | None = Field(
        None, ge=0, description="Fixed time per iteration: scheduling, sampling, kernel launches (s).")
    token_budget: int = Field(
        512, gt=0, le=1_000_000, description="Tokens one iteration processes at most (chunked prefill, as Sarathi "
        "schedules): every decoding sequence's token first, then prefill chunks fill the rest.")
    kv_pool_gib: float | None = Field(
        None, gt=0, description="VRAM for KV (GiB). Default: the card's VRAM less other tenants, the weights and "
        "runtime_gib.")


class Engine(Strict):
    """An expert-offloading serving engine on one GPU of a machine; its expert tiers below VRAM are peer GPUs, then
    host RAM, then the machine's disk (through the page cache)."""

    model: str = Field(description="Key of the MoE model it serves.")
    gpu: str = Field(description="Key of the machine's GPU it runs on.")
    overhead_gib: float | None = Field(
        None, ge=0, description="Fixed VRAM outside the expert cache: dense weights, KV, activations, CUDA context "
        "(GiB). Default: the model's dense_gib + KV for context_tokens + runtime_gib.")
    context_tokens: int = Field(0, ge=0, description="Context the engine allocates KV for (tokens).")
    runtime_gib: float = Field(0.0, ge=0, description="CUDA context, activations and buffers (GiB).")
    cache_reserve_mib: float = Field(700, ge=0, description="VRAM the engine keeps free (MiB).")
    expert_cache: Literal["auto"] | NonNegativeInt = Field(
        "auto", description="Slots of the expert cache, or auto: sized from the VRAM free at start.")
    policy: Literal["static", "lru", "lfu"] = Field("static", description="Expert-cache policy.")
    profile_seed: int | None = Field(
        None, ge=0, description="Static profile built on another workload (its popularity seed); default: served one.")
    prefill_tok_s: float | None = Field(
        None, gt=0, description="Prompt tokens read per second (tok/s), when no `prefill` mechanism is given.")
    prefill: Prefill | None = None
    parallel: int = Field(1, gt=0, le=256, description="Decode slots; the expert cache is divided among them.")
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
        None, ge=0, description="Host RAM for experts held nowhere in VRAM (GiB); the rest is read from the machine's "
        "disk each time. Default: all of them fit.")
    step: StepCost = StepCost()
    iteration: Iteration | None = Field(
        None, description="A dense model's iteration cost (continuous batching of up to `parallel` sequences).")
    power: Power | None = None


class Machine(Strict):
    kind: Literal["discrete", "unified"] = Field(
        "discrete", description="discrete: GPUs behind PCIe; unified: Apple-style unified memory, no PCIe stage.")
    disk: str | None = Field(None, description="Key of a disk under 'disks' holding the model files (none: no loads).")
    page_cache_gib: float = Field(0.0, ge=0, description="Host RAM available to the page cache (GiB).")
    loader: Loader = Loader()
    engine: Engine | None = Field(None, description="An expert-offloading engine serving an MoE model.")
    gpus: dict[str, Gpu] = Field(default_factory=dict, description="GPUs of a discrete machine, by name.")
    unified_memory_gib: float | None = Field(None, gt=0, description="Unified memory usable for weights (GiB).")
    decode_tok_s: dict[str, PositiveFloat] = Field(
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
        if self.kind == "discrete" and not self.gpus:
            raise ValueError("a discrete machine needs at least one entry under 'gpus'")
        if self.kind == "unified":
            if self.gpus:
                raise ValueError("a unified-memory machine has no 'gpus' (no PCIe stage)")
            if self.unified_memory_gib is None:
                raise ValueError("a unified-memory machine needs 'unified_memory_gib'")
        return self


class Routing(Strict):
    """Expert popularity of the served workload (see sim.routing)."""

    exponent: float = Field(1.0, ge=0, le=5, description="Zipf exponent of expert popularity per layer (0: uniform).")
    locality: float = Field(0.0, ge=0, lt=1, description="Probability a lookup repeats the previous token's expert.")
    drift_weight: float = Field(0.0, ge=0, le=1, description="Share of a request's lookups on its own hot set.")
    drift_hot_experts: int = Field(0, ge=0, description="Experts per layer in a request's own hot set.")
    drift_concentration: float = Field(
        0.0, ge=0, description="0: every request has drift_weight; >0: each draws it from a Beta law of that mean and "
        "this concentration (lower: requests differ more).")
    exponent_spread: float = Field(
        0.0, ge=0, le=2, description="Log-sd of a request's own skew: it routes by popularity ** exp(spread * z), "
        "renormalised (under Zipf: its own exponent).")
    popularity_seed: int = Field(0, ge=0, description="Which permutation of expert ids per layer the workload uses.")


class Draft(Strict):
    tokens: int = Field(0, ge=0, le=16, description="Draft tokens proposed per verification step (0: no drafting).")
    acceptance: float = Field(0.0, ge=0, lt=1, description="Probability each draft token is accepted (fraction).")
    head_mib: float = Field(0.0, ge=0, description="VRAM the draft head reserves (MiB).")


class Moe(Strict):
    layers: int = Field(gt=0, description="MoE layers.")
    experts_per_layer: int = Field(gt=0, description="Routed experts per layer.")
    top_k: int = Field(gt=0, description="Experts routed per token per layer.")
    expert_mib: float = Field(gt=0, description="Bytes of one expert, i.e. one cache slot (MiB).")
    dense_gib: float | None = Field(
        None, ge=0, description="Weights outside the routed experts: attention, shared experts, embeddings (GiB).")
    kv_kib_per_token: float | None = Field(None, ge=0, description="KV cache per token of context (KiB).")
    routing: Routing = Routing()
    draft: Draft = Draft()

    @model_validator(mode="after")
    def _k_fits(self) -> Moe:
        if self.top_k > self.experts_per_layer:
            raise ValueError("top_k cannot exceed experts_per_layer")
        if self.routing.drift_hot_experts > self.experts_per_layer:
            raise ValueError("routing.drift_hot_experts cannot exceed experts_per_layer")
        return self


class Dense(Strict):
    """Geometry of a dense transformer (from its published configuration): what an iteration reads and computes."""

    params_b: float = Field(gt=0, le=100_000, description="Parameters (billions): 2 FLOPs each per token.")
    layers: int = Field(gt=0, description="Transformer layers.")
    hidden: int = Field(gt=0, description="Model width: attention costs 4 x layers x hidden FLOPs per token per "
                        "token of context.")
    kv_kib_per_token: float = Field(gt=0, description="KV cache per token of context, all layers (KiB).")


class ModelSpec(Strict):
    weights_gib: float = Field(gt=0, le=65536, description="Bytes of weights to load (GiB).")
    tensors: int = Field(0, ge=0, description="Tensors in the weight files (loader per-tensor cost).")
    moe: Moe | None = Field(None, description="Mixture-of-experts geometry, when the model has routed experts.")
    dense: Dense | None = Field(None, description="Dense geometry, for serving it with a continuous-batching engine.")


class TieBreak(Strict):
    rule: Literal["prefer", "fastest_decode", "fastest_load", "shortest_queue", "smallest_estimate"] = Field(
        "prefer", description="What decides between machines whose estimates tie.")
    order: list[str] = Field(default_factory=list, description="Machine preference order for rule 'prefer'.")


class Dispatch(Strict):
    tie_threshold: float = Field(
        0.10, ge=0, description="Estimates within this relative difference of the best are a tie (fraction).")
    tie_break: TieBreak = TieBreak()
    isolation: Literal["shared", "per_job"] = Field(
        "shared",
        description="shared: all jobs flow through one simulation with queues; "
        "per_job: each job is a separate case starting from the initial machine state.",
    )


class Job(Strict):
    model: str
    tokens: int = Field(ge=0, description="Tokens to generate (0: only make the model resident).")
    arrival_s: float = Field(0.0, ge=0, description="When the job is submitted (s).")
    resident_on: list[str] | None = Field(
        None, description="per_job isolation only: machines where the model is resident when this job starts.")


class Workload(Strict):
    """Where requests come from (sim.workload)."""

    kind: Literal["sequential", "closed", "open", "trace", "agent"] = Field(
        "sequential", description="sequential: one request after another; closed: `clients` clients, each sending "
        "its next request `think_s` after its last answer; open: arrivals at `rate_per_s`; trace: replay a CSV; "
        "agent: `clients` sessions whose context grows turn by turn.")
    clients: int = Field(1, gt=0, le=100_000, description="Closed-loop clients, or concurrent agent sessions.")
    think_s: float = Field(
        0.0, ge=0, le=1e9, description="Mean time between an answer and the client's next request (s).")
    think_law: Literal["fixed", "exponential"] = Field("fixed", description="Law of the think time.")
    runs: int = Field(
        1, gt=0, description="Closed loop: the requests are sent in this many back-to-back runs; each run the clients "
        "start together (a benchmark's repetitions).")
    rate_per_s: PositiveFloat | None = Field(None, description="Open loop: mean arrival rate (requests/s).")
    arrival_law: Literal["poisson", "uniform"] = Field(
        "poisson", description="Open loop: poisson (exponential gaps) or uniform (evenly spaced).")
    trace: str | None = Field(
        None, description="Trace CSV (relative to the scenario file): columns arrived_at (s), num_prefill_tokens, "
        "num_decode_tokens (Azure 2023 layout), optional cached_tokens and acceptance; or arrival_s, prompt_tokens, "
        "cached_tokens, output_tokens, acceptance.")
    time_scale: PositiveFloat = Field(1.0, description="Trace: arrival times multiplied by this (<1: more load).")
    lengths: str | None = Field(
        None, description="Not a trace: each request's prompt and output lengths drawn (with replacement) from the "
        "rows of this CSV (relative to the scenario file): num_prefill_tokens, num_decode_tokens (Azure and Vidur "
        "layout) or prompt_tokens, output_tokens; other columns ignored.")
    lengths_max_tokens: int | None = Field(
        None, gt=1, le=100_000_000, description="With lengths: prompt + output at most this many tokens, the prompt "
        "shortened to fit (as Vidur caps its traces); at least one output token.")
    turn_tokens: int = Field(
        2000, gt=0, le=10_000_000, description="Agent: new prompt tokens per turn (tool output, user text).")
    turns: int = Field(8, gt=0, le=1_000_000, description="Agent: turns per session.")


class Admission(Strict):
    """What the engine does with requests it cannot start at once. Default: unbounded FIFO, rejects nothing."""

    queue_limit: NonNegativeInt | None = Field(
        None, description="Requests that may wait; an arrival finding it full is rejected. Default: unbounded.")
    timeout_s: PositiveFloat | None = Field(
        None, description="A request still waiting after this long is cancelled (s). Default: never.")


class Serve(Strict):
    """Requests served by a machine's engine: where they come from, their lengths, and admission."""

    machine: str = Field(description="Machine whose engine serves the requests.")
    requests: int = Field(100, gt=0, le=1_000_000, description="Number of requests (trace: its first rows).")
    output_tokens_min: int = Field(
        150, gt=0, le=10_000_000, description="Shortest generation (tokens); lengths are uniform.")
    output_tokens_max: int = Field(260, gt=0, le=10_000_000, description="Longest generation (tokens).")
    output_tokens_mean: PositiveFloat | None = Field(
        None, le=1e6, description="If set, lengths are exponential with this mean (tokens, at least 1, at most 1e7) "
        "instead of uniform.")
    prompt_tokens: int = Field(26, ge=0, le=100_000_000, description="Prompt tokens of each request.")
    prompt_tokens_mean: PositiveFloat | None = Field(
        None, le=1e7, description="If set, prompt lengths are exponential with this mean (tokens, at most 1e8) "
        "instead of fixed.")
    cached_tokens: int = Field(0, ge=0, description="Of those, tokens already in the engine's prompt cache.")
    max_tokens: int | None = Field(
        None, gt=0, le=10_000_000, description="Generation cap; a request that reaches it ends 'length'.")
    request_overhead_s: float = Field(
        0.0, ge=0, le=1e9, description="Client, HTTP and tokenizer time before a request reaches the engine queue "
        "(s); part of TTFT, not GPU time.")
    workload: Workload = Workload()
    admission: Admission = Admission()
    fidelity: Literal["counts", "lookups"] = Field(
        "counts", description="counts: sample distinct experts per layer-step (fast); lookups: every expert lookup.")


class FreeParameter(Strict):
    """A parameter `sim calibrate` may move, searched in log space between its bounds."""

    lo: PositiveFloat = Field(description="Lowest value (the parameter's unit).")
    hi: PositiveFloat = Field(description="Highest value.")
    start: PositiveFloat | None = Field(None, description="Starting value (default: the scenario's own value).")
    unit: str = Field("1", description="Unit of the value, written into the calibration file.")


class HeldParameter(Strict):
    """A value `sim calibrate` writes into the calibration file without fitting it, with the reason."""

    value: float = Field(description="The value (its unit).")
    unit: str = Field("1", description="Unit of the value.")
    why: str = Field(min_length=1, description="Why it is held: its source, or why the tables cannot separate it.")


class Variant(Strict):
    """A named variant of the scenario that a measured table was taken on: another scenario file (relative to this
    one) and/or changed values. The free and held parameters apply to it too."""

    scenario: str | None = Field(None, description="Another scenario file, relative to this one.")
    set: dict[str, Any] = Field(default_factory=dict, description="dotted.path: value changes, as --set.")


class RowValue(Strict):
    """A scenario value taken from a row: the mean of some columns, times a scale."""

    mean_of: list[str] = Field(min_length=1, description="Columns whose mean is taken.")
    scale: PositiveFloat = Field(1.0, description="Factor from the columns' unit to the path's (percent: 0.01).")


class CellSpec(Strict):
    """How one measured cell (a quantity, a column of a row) is simulated."""

    metric: str = Field(description="A metric of `sim run --json` (decode_tok_s, expert_hit_rate, "
                        "vram.gpu0.used_mib, ...) of the cell's experiment.")
    variant: str | None = Field(None, description="The variant it was measured on (default: the table's).")
    set: dict[str, Any] = Field(default_factory=dict, description="Further dotted.path: value changes (workload).")
    scale: PositiveFloat = Field(1.0, description="Factor from the table's unit to the metric's (percent: 0.01).")
    kind: Literal["rate", "share"] = Field("rate", description="rate: error as a ratio; share: as a difference.")
    tolerance: PositiveFloat = Field(description="Relative (rate) or absolute (share) error the project claims.")
    ratio_to: str | None = Field(None, description="A variant whose same metric divides this one (a measured "
                                 "ratio of two runs); 'base' is the scenario as written.")


class TableMap(Strict):
    """How a measured table maps onto this scenario (`calibrate.tables.<file name>`)."""

    kind: Literal["quantities", "rows", "buckets"] = Field(
        description="quantities: quantity,value rows; rows: one row per setting, columns measured; buckets: requests "
        "pooled and bucketed by spill share or hit rate (bucket_by,low_pct,high_pct,decode_tok_s).")
    variant: str | None = Field(None, description="The variant its cells were measured on (default: base).")
    set: dict[str, Any] = Field(default_factory=dict, description="dotted.path: value changes for every cell.")
    cells: dict[str, CellSpec] = Field(default_factory=dict, description="quantities: quantity -> how it is "
                                       "simulated; rows: column -> how it is simulated.")
    row_key: str | None = Field(None, description="rows: the column naming each row.")
    row_set: dict[str, str | RowValue] = Field(default_factory=dict, description="rows: dotted.path -> the column "
                                               "(or columns) whose value it takes in each row.")
    row_variant: dict[str, str] = Field(default_factory=dict, description="rows: row name -> variant; with this "
                                        "map, rows it does not name are not simulated.")
    pool: list[str] = Field(default_factory=lambda: ["base"], min_length=1,
                            description="buckets: variants whose requests pool.")
    tolerance: PositiveFloat = Field(0.15, description="buckets: relative error claimed per bucket.")


class RequestObservable(Strict):
    kind: Literal["rate", "share"] = Field(description="rate: error as a ratio; share: as a difference.")
    tolerance: PositiveFloat = Field(description="Relative (rate) or absolute (share) error for one request.")


def _request_observables() -> dict[str, RequestObservable]:
    return {"prefill_tok_s": RequestObservable(kind="rate", tolerance=0.3),
            "decode_tok_s": RequestObservable(kind="rate", tolerance=0.3),
            "ttft_s": RequestObservable(kind="rate", tolerance=0.3),
            "expert_hit_rate": RequestObservable(kind="share", tolerance=0.01),
            "pcie_share": RequestObservable(kind="share", tolerance=0.01)}


class Calibrate(Strict):
    """What `sim calibrate` fits (dotted paths of this scenario and their bounds), what it holds, and how measured
    tables map onto the scenario; `sim validate` checks the same cells."""

    free: dict[str, FreeParameter] = Field(default_factory=dict)
    held: dict[str, HeldParameter] = Field(default_factory=dict)
    stages: list[Annotated[list[str], Field(min_length=1)]] = Field(
        default_factory=list, description="Fit the free parameters in these groups, "
                                    "one after another (default: all at once).")
    variants: dict[str, Variant] = Field(default_factory=dict)
    tables: dict[str, TableMap] = Field(default_factory=dict, description="Keyed by the table's file name.")
    requests: dict[str, RequestObservable] = Field(
        default_factory=_request_observables, description="Per observable of a replayed request (logs, request "
        "tables): its kind and tolerance.")
    replicas: int = Field(1, ge=1, le=1000, description="Times each replayed request is simulated (each with its own "
                          "random numbers); its simulated figures are their medians, so one request's luck of the "
                          "draw does not decide the fit.")
    checks: dict[str, str] = Field(default_factory=dict, description="Target name pattern -> why it is held out of "
                                   "the fit (still claimed by sim validate).")
    unclaimed: dict[str, str] = Field(default_factory=dict, description="Target name pattern -> why it is neither "
                                      "fitted nor claimed (reported by sim validate as info).")


class Report(Strict):
    load_model: str | None = Field(None, description="Model whose cold/hot/link load each machine reports.")


class InputSpread(Strict):
    """How unsure a measured input value of the scenario is (`--uncertainty` draws it log-normally)."""

    log_sd: PositiveFloat = Field(le=2.0, description="Standard deviation of log(value): relative run-to-run scatter.")
    why: str = Field(min_length=1, description="Where the figure comes from.")


class Scenario(Strict):
    name: str
    description: str = ""
    calibrations: list[str] = Field(
        default_factory=list, description="Calibration files (relative to this file) filling parameters.")
    seed: int = Field(0, ge=0, description="Default seed; --seed overrides.")
    pcie: Pcie = Pcie()
    loading: LoadingConfig = LoadingConfig()
    disks: dict[str, Disk] = Field(default_factory=dict)
    gpus: dict[str, GpuType] = Field(default_factory=dict)
    models: dict[str, ModelSpec]
    machines: dict[str, Machine]
    dispatch: Dispatch = Dispatch()
    jobs: dict[str, Job] = Field(default_factory=dict)
    serve: Serve | None = None
    calibrate: Calibrate = Calibrate()
    uncertainty: dict[str, InputSpread] = Field(
        default_factory=dict, description="dotted.path -> the scatter of a measured input value (a single-sample "
        "decode rate, say), drawn by --uncertainty besides the calibrations' fitted covariance.")
    report: Report = Report()


class _CalibrateOnly(Strict):
    calibrate: Calibrate = Calibrate()


def read_calibrate(path: str) -> Calibrate:
    """The ``calibrate`` section of a scenario file alone, validated: the rest may wait for the values being fitted."""
    raw = read_yaml(path)
    section = raw.get("calibrate") if isinstance(raw, dict) else None
    try:
        return _CalibrateOnly.model_validate({"calibrate": section or {}}).calibrate
    except ValidationError as exc:
        raise _format_validation_error(path, exc) from None


def _cross_reference_errors(s: Scenario) -> list[tuple[str, Any, str]]:
    """Keys that name other entries must name existing ones: (path, value, expected)."""
    errs: list[tuple[str, Any, str]] = []

    def need(path: str, value: str, pool: dict, what: str) -> None:
        if value not in pool:
            errs.append((path, value, _expected_one_of(value, list(pool), what)))

    maps = {"disks": s.disks, "gpus": s.gpus, "models": s.models, "machines": s.machines, "jobs": s.jobs}
    maps.update({f"machines.{n}.gpus": m.gpus for n, m in s.machines.items()})
    for where, entries in maps.items():
        for key in entries:
            if "." in key or not key.strip():
                errs.append((f"{where}.{key}", key, "a name without dots (dots separate the parts of a key path)"))
    chunk = s.loading.chunk_mib / 1024
    for mname, spec in s.models.items():
        if spec.weights_gib / chunk > MAX_CHUNKS:
            errs.append(("loading.chunk_mib", s.loading.chunk_mib,
                         f"at most {MAX_CHUNKS:,} chunks per model; {mname} would need "
                         f"{spec.weights_gib / chunk:,.0f}: raise chunk_mib"))
    for dname, d in s.disks.items():
        if d.read_gbps is None:
            errs.append((f"disks.{dname}.read_gbps", None, _CALIBRATED))
    for mname, m in s.machines.items():
        if m.disk is not None:
            need(f"machines.{mname}.disk", m.disk, s.disks, "a disk")
            if m.loader.s_per_gb is None:
                errs.append((f"machines.{mname}.loader.s_per_gb", None, _CALIBRATED))
        if m.engine is not None:
            e, p = m.engine, f"machines.{mname}.engine"
            need(f"{p}.model", e.model, s.models, "a model")
            need(f"{p}.gpu", e.gpu, m.gpus, "a GPU of this machine")
            spec = s.models.get(e.model)
            if spec is not None and (spec.moe is None) == (spec.dense is None):
                errs.append((f"{p}.model", e.model, "a model with an 'moe' or a 'dense' section (one of them)"))
            if spec is not None and spec.moe is not None and e.iteration is not None:
                errs.append((f"{p}.iteration", "...", "no 'iteration' section for an MoE model (its decode step "
                             "cost is under 'step')"))
        if m.engine is not None and is_dense_engine(s, m.engine):
            errs.extend(_dense_engine_errors(s, m, f"machines.{mname}.engine", m.engine))
        elif m.engine is not None:
            e, p = m.engine, f"machines.{mname}.engine"
            for field, value in e.step:
                if value is None:
                    errs.append((f"{p}.step.{field}", None, _CALIBRATED))
            moe = s.models[e.model].moe if e.model in s.models else None
            if e.overhead_gib is None and moe is not None:
                if moe.dense_gib is None:
                    errs.append((f"{p}.overhead_gib", None, f"a value, or models.{e.model}.moe.dense_gib to derive it"))
                elif e.context_tokens > 0 and moe.kv_kib_per_token is None:
                    errs.append((f"models.{e.model}.moe.kv_kib_per_token", None,
                                 f"a value: {p}.context_tokens needs it to derive the engine overhead"))
            for peer in e.peers:
                need(f"{p}.peers.{peer}", peer, m.gpus, "a GPU of this machine")
                if peer == e.gpu:
                    errs.append((f"{p}.peers.{peer}", peer, "a GPU other than the engine's own"))
            if e.prefill_tok_s is None and e.prefill is None:
                errs.append((f"{p}.prefill_tok_s", None, "a prompt rate (tok/s), or a 'prefill' section"))
            if e.placement == "layer_split":
                ls = e.layer_split
                if ls is None:
                    errs.append((f"{p}.layer_split", None, "a 'layer_split' section for placement layer_split"))
                else:
                    if e.peers:
                        errs.append((f"{p}.peers", list(e.peers), "no peers with placement layer_split (the cards "
                                     "hold layers, not expert copies): --set " + p + ".peers={}"))
                    for i, gname in enumerate(ls.gpus):
                        need(f"{p}.layer_split.gpus.{i}", gname, m.gpus, "a GPU of this machine")
                        if gname == e.gpu or gname in ls.gpus[:i]:
                            errs.append((f"{p}.layer_split.gpus.{i}", gname, "a GPU other than the engine's and "
                                         "the others listed"))
                    if len(ls.layer_s_scale) != len(ls.gpus):
                        errs.append((f"{p}.layer_split.layer_s_scale", ls.layer_s_scale,
                                     f"one value per GPU of layer_split.gpus ({len(ls.gpus)})"))
            if e.host_ram_gib is not None and m.disk is None:
                errs.append((f"{p}.host_ram_gib", e.host_ram_gib, "a machine 'disk' to hold the experts beyond it"))
        for gname, g in m.gpus.items():
            need(f"machines.{mname}.gpus.{gname}.type", g.type, s.gpus, "a GPU type")
            card = s.gpus.get(g.type)
            if card is None:
                continue
            for what, neg, card_max, slot in (("gen", g.negotiated_gen, card.pcie_max_gen, g.slot_gen),
                                              ("lanes", g.negotiated_lanes, card.pcie_max_lanes, g.slot_lanes)):
                if neg is not None and neg > min(card_max, slot):
                    errs.append((f"machines.{mname}.gpus.{gname}.negotiated_{what}", neg,
                                 f"a link cannot train above the card's maximum ({card_max}) or the slot's ({slot})"))
        for key in m.decode_tok_s:
            need(f"machines.{mname}.decode_tok_s.{key}", key, s.models, "a model")
        for i, key in enumerate(m.resident_models):
            need(f"machines.{mname}.resident_models.{i}", key, s.models, "a model")
        for i, key in enumerate(m.page_cache_models):
            need(f"machines.{mname}.page_cache_models.{i}", key, s.models, "a model")
    for jname, j in s.jobs.items():
        need(f"jobs.{jname}.model", j.model, s.models, "a model")
        for i, key in enumerate(j.resident_on or []):
            need(f"jobs.{jname}.resident_on.{i}", key, s.machines, "a machine")
        if j.resident_on is not None and s.dispatch.isolation != "per_job":
            errs.append((f"jobs.{jname}.resident_on", j.resident_on, "only with dispatch.isolation: per_job"))
    for i, key in enumerate(s.dispatch.tie_break.order):
        need(f"dispatch.tie_break.order.{i}", key, s.machines, "a machine")
    if s.serve is not None:
        need("serve.machine", s.serve.machine, s.machines, "a machine")
        if s.serve.machine in s.machines and s.machines[s.serve.machine].engine is None:
            errs.append(("serve.machine", s.serve.machine, "a machine with an 'engine'"))
        w = s.serve.workload
        if s.serve.cached_tokens > s.serve.prompt_tokens:
            errs.append(("serve.cached_tokens", s.serve.cached_tokens, "at most prompt_tokens"))
        if w.kind == "open" and w.rate_per_s is None:
            errs.append(("serve.workload.rate_per_s", None, "a rate (requests/s) for an open-loop workload"))
        per_run = -(-s.serve.requests // min(w.runs, s.serve.requests))  # the largest run
        if w.kind in ("closed", "agent") and w.clients > per_run:
            errs.append(("serve.workload.clients", w.clients, f"at most the requests of a run ({s.serve.requests} "
                         f"requests in {w.runs} runs: {per_run}); more clients would never send anything (fewer "
                         "serve.workload.runs or more serve.requests)"))
        if s.serve.fidelity == "lookups" and s.machines.get(s.serve.machine) is not None and \
                s.machines[s.serve.machine].engine is not None and s.machines[s.serve.machine].engine.batching:
            errs.append(("serve.fidelity", "lookups", "counts with engine.batching (a batch step samples counts)"))
        if w.kind == "trace" and w.trace is None:
            errs.append(("serve.workload.trace", None, "a trace CSV path for a trace workload"))
        if w.lengths is not None and w.kind in ("trace", "agent"):
            errs.append(("serve.workload.lengths", w.lengths, f"no lengths table for a {w.kind} workload (its "
                         "requests' lengths come from the " + ("trace)" if w.kind == "trace" else "conversation)")))
        if s.serve.output_tokens_max < s.serve.output_tokens_min:
            errs.append(("serve.output_tokens_max", s.serve.output_tokens_max, "at least output_tokens_min"))
    if s.report.load_model is not None:
        need("report.load_model", s.report.load_model, s.models, "a model")
    return errs


def is_dense_engine(s: Scenario, e: Engine) -> bool:
    """The engine serves a dense model (continuous batching, sim.dense_serve), not an MoE from an expert cache."""
    spec = s.models.get(e.model)
    return spec is not None and spec.moe is None and spec.dense is not None


def _dense_engine_errors(s: Scenario, m: Machine, p: str, e: Engine) -> list[tuple[str, Any, str]]:
    """What a dense model's engine needs: an iteration section with every cost, and a card with its specs."""
    errs: list[tuple[str, Any, str]] = []
    if e.iteration is None:
        errs.append((f"{p}.iteration", None, "an 'iteration' section (memory_efficiency, compute_efficiency, "
                     "overhead_s) for a dense model"))
    else:
        for field in ("memory_efficiency", "compute_efficiency", "overhead_s"):
            if getattr(e.iteration, field) is None:
                errs.append((f"{p}.iteration.{field}", None, _CALIBRATED))
    for field in ("peers", "layer_split", "host_ram_gib"):
        if getattr(e, field):
            errs.append((f"{p}.{field}", getattr(e, field), "nothing: a dense model has no experts to place"))
    if e.step != StepCost():
        errs.append((f"{p}.step", "...", "nothing: a dense model's iterations cost what its 'iteration' section "
                     "says"))
    if e.power is not None:
        errs.append((f"{p}.power", "...", "nothing: power is not modelled for a dense engine"))
    gpu = m.gpus.get(e.gpu)
    card = s.gpus.get(gpu.type) if gpu is not None else None
    if card is not None:
        for field in ("hbm_gbps", "tflops"):
            if getattr(card, field) is None:
                errs.append((f"gpus.{gpu.type}.{field}", None, "the card's spec (a dense engine's iterations are "
                             "bound by memory bandwidth and tensor throughput)"))
    return errs


MAX_CHUNKS = 100_000

_CALIBRATED = "missing: expected a value here or from a calibration file named under 'calibrations'"


def _expected_one_of(value: str, names: list[str], what: str) -> str:
    hint = difflib.get_close_matches(str(value), names, n=1)
    extra = f" (did you mean '{hint[0]}'?)" if hint else ""
    return f"expected {what}, one of {sorted(names)}{extra}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _model_for_path(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class that owns the last key of ``loc`` (to suggest field names)."""
    cls: Any = Scenario
    for part in loc[:-1]:
        if cls is None:
            return None
        if isinstance(part, int):
            continue
        fields = getattr(cls, "model_fields", None)
        if fields is None:
            return None
        if part in fields:
            ann = fields[part].annotation
            cls = _inner_model(ann)
        else:  # a map key such as a machine name: the model is the map's value type
            continue
    return cls if isinstance(cls, type) and issubclass(cls, BaseModel) else None


def _inner_model(ann: Any) -> Any:
    args = getattr(ann, "__args__", None)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    if args:
        for a in reversed(args):
            inner = _inner_model(a)
            if inner is not None:
                return inner
    return None


def _format_validation_error(source: str, exc: ValidationError) -> ScenarioError:
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))
    path = ".".join(str(p) for p in loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        owner = _model_for_path(loc)
        names = list(owner.model_fields) if owner else []
        hint = difflib.get_close_matches(str(loc[-1]), names, n=1)
        extra = f"; did you mean '{hint[0]}'?" if hint else (f"; expected one of {names}" if names else "")
        return ScenarioError(source, path, f"unknown key{extra}")
    if kind == "missing":
        return ScenarioError(source, path, "missing required key")
    msg = err["msg"]
    if kind == "value_error":
        return ScenarioError(source, path, msg.removeprefix("Value error, "))
    msg = msg.removeprefix("Input should be ")
    return ScenarioError(source, path, f"bad value {_short(err.get('input'))}: expected {msg[0].lower() + msg[1:]}")


class _UniqueKeys:
    """A loader mixin that rejects a key repeated in one map (the last one would silently win)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one map", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class _UniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    """A SafeLoader with unique keys."""


class _FastUniqueKeyLoader(_UniqueKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same on libyaml's parser when PyYAML has it (several times faster); errors are reported from a re-read
    with the pure-Python loader, so their wording does not depend on which parser is installed."""


_YAML_CACHE: dict[str, tuple[tuple[int, ...], bytes]] = {}


def _parse_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_FastUniqueKeyLoader)  # noqa: S506 - a safe loader subclass
    except yaml.YAMLError:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - raises the message users see


def read_yaml(path: str) -> Any:
    """Read a YAML file; any problem becomes a one-line ScenarioError. Parsed files are kept (keyed by their
    modification time and size) and each call gets its own copy, so a sweep that loads one scenario a thousand times
    parses it once."""
    try:
        st = os.stat(path)
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        hit = _YAML_CACHE.get(os.path.abspath(path))
        if hit is not None and hit[0] == stamp:
            return pickle.loads(hit[1])
        with open(path, encoding="utf-8") as fh:
            data = _parse_yaml(fh.read())
        frozen = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)  # a copy per call: callers may change theirs
        _YAML_CACHE[os.path.abspath(path)] = (stamp, frozen)
        return pickle.loads(frozen)
    except FileNotFoundError:
        raise ScenarioError(path, "", "file not found") from None
    except IsADirectoryError:
        raise ScenarioError(path, "", "is a directory, expected a YAML file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(path, "", f"YAML syntax error: {where}{problem}") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise ScenarioError(path, "", f"cannot read: {exc}") from None


def number_at(value: Any) -> float | None:
    """A value found at a dotted path as a number: YAML 1.1 reads ``30e-6`` (no dot) as text, which the models accept
    as a number, so text that parses as one counts; booleans do not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def get_dotted(data: Any, path: str) -> tuple[bool, Any]:
    """(found, value) at dotted ``path`` inside nested dicts/lists."""
    node = data
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def set_dotted(data: dict, path: str, value: Any, source: str, create_entries: bool = True) -> str | None:
    """Set ``value`` at dotted ``path`` inside nested dicts/lists.

    Missing sections of the schema are created. A missing entry of a named map (``machines.NEW``) is created only
    with ``create_entries``, else it is an error with a did-you-mean. Returns the path of a created entry, if any.
    """
    parts = path.split(".")
    if not path or any(p == "" for p in parts):
        raise ScenarioError(source, path, "expected a dotted key path such as machines.NAME.disk")
    node: Any = data
    walked: list[str] = []
    created: str | None = None
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        here = ".".join(walked) or "(top level)"
        if isinstance(node, list):
            if not part.isdigit() or int(part) > len(node) or (int(part) == len(node) and not last):
                raise ScenarioError(source, path, f"'{part}' is not an index of the list at {here} "
                                    f"(length {len(node)})")
            idx = int(part)
            if last:
                if idx == len(node):
                    node.append(value)
                else:
                    node[idx] = value
                return created
            node = node[idx]
        elif isinstance(node, dict):
            if last:
                node[part] = value
                return created
            if node.get(part) is None:
                kind = _schema_kind(walked + [part])
                if part in node or kind == "section":
                    node[part] = {}
                elif kind == "entry" and create_entries:
                    node[part] = {}
                    created = created or ".".join(walked + [part])
                else:
                    hint = difflib.get_close_matches(part, [str(k) for k in node], n=1)
                    extra = f" (did you mean '{hint[0]}'?)" if hint else ""
                    raise ScenarioError(source, path, f"no key '{part}' under {here}{extra}")
            node = node[part]
        else:
            raise ScenarioError(source, path, f"{here} holds {_short(node)}, not a map")
        walked.append(part)
    return created


def _schema_kind(parts: list[str]) -> str | None:
    """'section' when ``parts`` names a section of the schema, 'entry' for an entry of a named map, else None."""
    cls: Any = Scenario
    in_map = False
    kind: str | None = None
    for part in parts:
        if in_map:  # any name is a key of a named map; its value type comes next
            in_map, kind = False, "entry"
            continue
        fields = getattr(cls, "model_fields", None)
        if fields is None or part not in fields:
            return None
        ann = fields[part].annotation
        in_map = getattr(ann, "__origin__", None) is dict
        cls = _inner_model(ann)
        kind = "section"
    return kind


def parse_set(expr: str) -> tuple[str, Any]:
    """``a.b.c=value`` -> (path, value) with the value read as YAML (numbers, booleans, lists, maps)."""
    if "=" not in expr:
        raise ScenarioError("--set", expr, "expected dotted.path=value")
    path, raw = expr.split("=", 1)
    value = _yaml_value(raw)
    return path.strip(), (copy.deepcopy(value) if isinstance(value, dict | list) else value)


@functools.lru_cache(maxsize=65536)
def _yaml_value(raw: str) -> Any:
    """A --set value read as YAML (the C parser where PyYAML has it); kept, as sweeps repeat the same values."""
    if not raw.strip():
        return ""
    try:
        return yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe loaders
    except yaml.YAMLError:
        return raw


@dataclass
class _Origin:
    """Where a value at ``path`` came from, to blame the right file or --set in an error."""

    path: str
    source: str
    created: str | None = None


def _apply_calibrations(raw: dict, source: str) -> list[_Origin]:
    """Fill values the scenario leaves open from its calibration files (explicit scenario values win)."""
    cals = raw.get("calibrations") or []
    if not isinstance(cals, list):
        raise ScenarioError(source, "calibrations", f"bad value {_short(cals)}: expected a list of file paths")
    base_dir = os.path.dirname(os.path.abspath(source))
    origins = []
    for i, rel in enumerate(cals):
        if not isinstance(rel, str):
            raise ScenarioError(source, f"calibrations.{i}", f"bad value {_short(rel)}: expected a file path")
        cal_path = os.path.relpath(os.path.normpath(os.path.join(base_dir, rel)))
        cal = read_yaml(cal_path)
        params = cal.get("parameters") if isinstance(cal, dict) else None
        if not isinstance(params, dict):
            raise ScenarioError(cal_path, "parameters", "expected a map of dotted.path: value")
        for key, value in params.items():
            if not get_dotted(raw, str(key))[0]:
                set_dotted(raw, str(key), value, cal_path, create_entries=False)
                origins.append(_Origin(str(key), cal_path))
    return origins


def load_scenario(path: str, overrides: list[str] | tuple[str, ...] = ()) -> tuple[Scenario, dict]:
    """Load a scenario: its own values, then calibration values it leaves open, then ``--set`` overrides.

    Returns the validated scenario and the resolved mapping that was validated.
    """
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ScenarioError(path, "", f"expected a YAML map at the top level, got {type(raw).__name__}")
    resolved = raw  # read_yaml's own copy
    sets = [(expr, *parse_set(expr)) for expr in overrides]
    early = [s for s in sets if s[1].split(".")[0] == "calibrations"]  # which calibrations apply is set first
    origins: list[_Origin] = []
    for expr, key, value in early:
        set_dotted(resolved, key, value, f"{path} (--set {expr})")
    origins += _apply_calibrations(resolved, path)
    for expr, key, value in sets:
        if (expr, key, value) not in early:
            label = f"{path} (--set {expr})"
            origins.append(_Origin(key, label, set_dotted(resolved, key, value, label)))
    for name in ("trace", "lengths"):
        key = f"serve.workload.{name}"
        if not any(k == key or key.startswith(k + ".") for _, k, _ in sets):  # --set paths: from the cwd
            _resolve_trace_path(resolved, path, name)
    try:
        return validate(resolved, path), resolved
    except ScenarioError as exc:
        raise _blame(exc, origins, resolved) from None


def _resolve_trace_path(raw: dict, source: str, name: str = "trace") -> None:
    """A relative trace (or lengths) path written in the scenario is relative to the scenario file (as calibration
    paths are); one given with --set is relative to the current directory."""
    workload = (raw.get("serve") or {}).get("workload") if isinstance(raw.get("serve"), dict) else None
    trace = workload.get(name) if isinstance(workload, dict) else None
    if isinstance(trace, str) and not os.path.isabs(trace):
        workload[name] = os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(source)),
                                                                       trace)))


def _blame(exc: ScenarioError, origins: list[_Origin], resolved: dict) -> ScenarioError:
    """Name the calibration file or --set that supplied the bad value, and hint at typos in created entries."""
    for o in reversed(origins):
        inside = exc.path == o.path or exc.path.startswith(o.path + ".")  # the bad value is (within) what o set
        in_created = o.created is not None and (exc.path + ".").startswith(o.created + ".")
        if inside or in_created:
            problem = exc.problem
            if o.created is not None:
                parent, _, name = o.created.rpartition(".")
                siblings = [k for k in get_dotted(resolved, parent)[1] if k != name]
                hint = difflib.get_close_matches(name, siblings, n=1)
                problem += f" (--set created a new entry '{name}' under {parent}" + (
                    f"; did you mean '{hint[0]}'?)" if hint else ")")
            return ScenarioError(o.source, exc.path, problem)
    sets = [o.source.split("(--set ", 1)[1].rstrip(")") for o in origins if "(--set " in o.source]
    if sets:  # not attributable to one override, but the overrides may be why
        return ScenarioError(f"{exc.source} (with --set {' --set '.join(sets)})", exc.path, exc.problem)
    return exc


def validate(raw: dict, source: str) -> Scenario:
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise _format_validation_error(source, exc) from None
    errs = _cross_reference_errors(scenario)
    if errs:
        path, value, expected = errs[0]
        raise ScenarioError(source, path, expected if value is None else f"bad value {_short(value)}: {expected}")
    return scenario


def json_schema() -> dict:
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "sim scenario"
    return schema
