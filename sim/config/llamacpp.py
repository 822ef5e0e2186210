"""Scenario schema of a llama.cpp engine (sim.llamacpp): its placement and buffers, named after llama.cpp's flags so a
command line copies over (``-ngl 99 --n-cpu-moe 30 -ub 1024`` is ``n_gpu_layers: 99, n_cpu_moe: 30,
ubatch_size: 1024``), the cost parameters it was calibrated with, and the llama-bench workload (``bench:``)."""

from __future__ import annotations

import functools
from typing import Literal, Protocol

from pydantic import Field, PositiveInt, field_validator, model_validator

from sim.config.base import MAX_GIB, MIN_FRACTION, Strict
from sim.core.errors import ScenarioError
from sim.formats.inputs import shown_path

FIT_TARGET_MIB = 1024  # --fit-target: memory each card keeps free after llama.cpp's fit (MiB; common/common.h)
FIT_CTX_MIN = 4096  # --fit-ctx: the smallest context the fit cuts to (tokens; common/common.h fit_params_min_ctx)
MAX_CTX = 10_000_000  # -c, KV cells (tokens): contexts are at most about 1e7 tokens
MAX_UBATCH = 1_000_000  # -b and -ub (tokens)
MAX_PARALLEL = 1024  # -np, server slots
MAX_RULES = 1024  # -ot rules of one engine: each is searched in every tensor's name (a per-layer list: some 400)
MAX_SHARE = 1e15  # a -ts proportion (any scale, even bytes): their sum must stay finite
MAX_BENCH_VALUES = 4096  # values of one llama-bench list (-p, -n, -d; bench.n_prompt, ...), the command line's too
MAX_BENCH_TESTS = 512  # simulated tests of one run (each -p and -n at each -d, times each sweep's values): some 7.5 ms
# CPU each, so the largest accepted run takes about 4 s; a larger sweep is split into runs (-ncmoe 0-255, 256-511, ...)
KvType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


def at_most(values: object, most: int, what: str, why: str = "") -> object:
    """``values`` when a list of at most ``most`` items (or not a list: the schema says so); else a ValueError, before
    the items are read."""
    if isinstance(values, list | tuple) and len(values) > most:
        raise ValueError(f"{len(values):,} {what}: expected at most {most:,}{why}")
    return values


class LlamaCppCosts(Strict):
    """The engine's shares of what the hardware's specs allow and its fixed costs, for the engine's own backend
    (sim.llamacpp.params: the defaults are the fit to the public llama-bench tables, calibration/llamacpp.yaml). A
    value here overrides the fitted one."""

    gpu_memory_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=1, description="Share of a card's memory bandwidth its weight and KV reads get "
        "(fraction).")
    matrix_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=4, description="Share of the card's dense FP16 matrix throughput prompt matrix "
        "products get on its matrix units (int8 kernels can exceed 1) (fraction).")
    vector_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=4, description="Share of the card's FP32 vector throughput its vector kernels get "
        "(prompts without matrix kernels, every decode step's arithmetic) (fraction).")
    gemm_half_rows: float | None = Field(
        None, gt=0, le=4096, description="A matrix kernel's fixed work per weight, as rows: a product of r rows runs "
        "at r / (r + this) of its rate (rows).")
    fp16_matrix_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=1, description="Share of the card's dense FP16 matrix throughput cuBLAS/hipBLAS get "
        "on a prompt's float weights and on types without int8 kernels (fraction).")
    expert_half_rows: float | None = Field(
        None, gt=0, le=4096, description="The same fixed work per weight for a prompt's routed experts (mul_mat_id) "
        "(rows).")
    flash_attn_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=4, description="Share of the path's peak a prompt's flash attention gets "
        "(fraction).")
    node_s: float | None = Field(
        None, ge=0, le=0.01, description="Fixed cost of one compute-graph node the card runs (a kernel launch) (s).")
    token_s: float | None = Field(
        None, ge=0, le=1, description="Fixed time per decode step or prompt ubatch: graph build, sampling (s).")
    context_mib: float | None = Field(
        None, ge=0, le=16384, description="Device memory the backend holds besides its buffers on each card used: "
        "driver context, libraries, pools (MiB).")
    cpu_memory_efficiency: float | None = Field(
        None, ge=MIN_FRACTION, le=1, description="Share of the host's paper DRAM bandwidth the CPU reads weights "
        "at when it computes them (fraction).")
    cpu_thread_gbps: float | None = Field(
        None, gt=0, le=1000, description="DRAM bandwidth one CPU thread pulls (GB/s): fewer threads than "
        "bandwidth / this leave bandwidth unused.")
    cpu_flops_efficiency: float | None = Field(
        None, gt=0, le=2, description="Share of the CPU's FP32 SIMD peak (cores x clock x FLOPs per cycle) its "
        "prompt kernels get (fraction).")
    ik_cpu_flops_efficiency: float | None = Field(
        None, gt=0, le=2, description="The same with ik_llama.cpp's CPU kernels (fraction).")
    split_s: float | None = Field(
        None, ge=0, le=0.1, description="One hand-over of the activations between devices (CPU and a GPU, or two "
        "GPUs) along a step's path: copy, synchronisation, wake-up (s).")
    link_share: float | None = Field(
        None, ge=MIN_FRACTION, le=1, description="Share of the link's copy rate weights mapped from the file "
        "(pageable host memory) cross it at when the GPU computes them for a large batch (fraction); with "
        "--no-mmap they sit in pinned memory and cross at the link's rate.")
    spill_link_share: float | None = Field(
        None, ge=MIN_FRACTION, le=1, description="Share of the link's rate a card reads memory the driver moved "
        "to shared system memory at (fraction).")
    windows_reserved_gib: float | None = Field(
        None, ge=0, le=MAX_GIB, description="VRAM Windows' desktop compositor (WDDM) keeps on a card (GiB).")


class LlamaCpp(Strict):
    """llama.cpp (or ik_llama.cpp, Ollama, LM Studio: llama.cpp underneath) on one machine: which tensors each device
    holds, the buffers it allocates, how a step and a prompt run across the CPU and the GPUs."""

    n_gpu_layers: int = Field(999, ge=-1, le=100_000, description="-ngl: the last N layers on the GPUs, the output "
                              "head counting as the last one (llama.cpp: i_gpu_start = n_layer + 1 - n_gpu_layers); "
                              "-1: auto (with fit on, the fit places layers; else every layer).")
    n_cpu_moe: int = Field(0, ge=0, le=100_000, description="--n-cpu-moe: routed experts of the first N layers stay "
                           "in host RAM, computed by the CPU.")
    cpu_moe: bool = Field(False, description="--cpu-moe: every layer's routed experts stay on the CPU.")
    override_tensor: list[str] = Field(
        default_factory=list, description="-ot rules 'REGEX=BUFFER' (BUFFER: CPU or a card as the backend names it: "
        "CUDA0, ROCm0, Vulkan0, Metal, SYCL0, ...): a tensor whose GGUF name (blk.12.ffn_up_exps.weight) the first "
        "matching rule finds goes to that buffer.")
    ctx_size: int = Field(4096, ge=0, le=MAX_CTX, description="-c: KV cells allocated, all slots together (0: the "
                          "model's training context; with the fit on, that per slot unless kv_unified, or what the fit "
                          "cuts it to) "
                          "(tokens).")
    batch_size: int = Field(2048, ge=1, le=MAX_UBATCH, description="-b: logical batch (tokens).")
    ubatch_size: int = Field(512, ge=1, le=MAX_UBATCH, description="-ub: physical batch a prompt is processed in "
                             "(tokens).")
    threads: int | None = Field(None, ge=1, le=4096, description="-t: CPU threads (default: the host's cores).")
    threads_batch: int | None = Field(None, ge=1, le=4096, description="-tb: CPU threads for prompts, batches of "
                                      "more than one token (default: threads).")
    flash_attn: bool | Literal["auto"] = Field("auto", description="-fa: flash attention (auto: on where the "
                                               "backend has the kernel, every GPU backend here).")
    cache_type_k: KvType = Field("f16", description="-ctk: type of the K cache.")
    cache_type_v: KvType = Field("f16", description="-ctv: type of the V cache.")
    parallel: PositiveInt = Field(1, le=MAX_PARALLEL, description="-np: server slots decoding together.")
    kv_unified: bool = Field(False, description="-kvu: one KV cache all slots share (a slot may use every cell); "
                             "off: each slot gets ctx_size / parallel cells.")
    fit: bool = Field(False, description="--fit: before loading, llama.cpp sets what the user left unset (-c 0, "
                      "-ngl -1) so that every card keeps fit_target_mib free (sim.llamacpp.fit); on by default in "
                      "current builds.")
    fit_target_mib: float = Field(float(FIT_TARGET_MIB), ge=0, le=1 << 20, description="--fit-target: memory each "
                                  "card keeps free after the fit (MiB).")
    fit_ctx: int = Field(FIT_CTX_MIN, ge=1, le=MAX_CTX, description="--fit-ctx: the smallest context the fit cuts -c "
                         "0 to (tokens).")
    mmap: bool = Field(True, description="--mmap / --no-mmap: weights for the CPU mapped from the file (pageable), "
                       "or read into pinned host memory (copied to a card at the link's full rate).")
    tensor_split: list[float] | None = Field(
        None, description="-ts: share of the GPU layers per card, in order (default: in proportion to free VRAM).")
    kv_offload: bool = Field(True, description="--no-kv-offload sets false: KV of GPU layers stays in host RAM.")
    op_offload: bool = Field(True, description="--no-op-offload sets false: large batches of CPU-held weights run on "
                             "the CPU instead of being copied to the GPU.")
    offload_min_batch: int = Field(32, ge=1, le=1_000_000, description="Tokens of a batch from which an operation on "
                                   "CPU-held weights is copied to the GPU and run there (ggml-cuda: 32; ik_llama.cpp "
                                   "takes GGML_CUDA_MIN_BATCH_OFFLOAD).")
    sysmem_fallback: bool | None = Field(
        None, description="The driver backs allocations beyond VRAM with shared system memory instead of failing "
        "(default: on under Windows, off under Linux).")
    build: Literal["llama.cpp", "ik_llama.cpp"] = Field("llama.cpp", description="Which engine build: ik_llama.cpp "
                                                        "has its own CPU kernels.")
    backend: Literal["auto", "cuda", "hip", "vulkan", "metal", "sycl", "opencl", "cpu"] = Field(
        "auto", description="The GPU backend the build runs the cards with (auto: CUDA on NVIDIA, HIP on AMD, SYCL on "
        "Intel, Metal on Apple; cpu: a CPU-only build, every layer on the CPU).")
    vulkan_matrix: Literal["auto", "coopmat2", "coopmat", "none"] = Field(
        "auto", description="Vulkan only: the cooperative-matrix extension its prompt kernels use (auto: "
        "NV_coopmat2 on NVIDIA cards with tensor cores, KHR_coopmat on other cards with matrix units, none: "
        "scalar shaders).")
    costs: LlamaCppCosts = LlamaCppCosts()

    @field_validator("override_tensor", mode="before")
    @classmethod
    def _few_rules(cls, rules: object) -> object:
        return at_most(rules, MAX_RULES, "rules")

    @field_validator("tensor_split")
    @classmethod
    def _finite_split(cls, shares: list[float] | None) -> list[float] | None:
        if shares is not None and any(abs(x) > MAX_SHARE for x in shares):
            raise ValueError(f"expected proportions of at most {MAX_SHARE:.0e} (any scale: 3,1 or 24,24)")
        return shares


class Bench(Strict):
    """A llama-bench run: every pp test processes ``n_prompt`` tokens after ``n_depth`` tokens of context, every tg
    test generates ``n_gen`` tokens after ``n_depth`` (llama-bench -p, -n, -d). Each list holds at most
    :data:`MAX_BENCH_VALUES` values and the run at most :data:`MAX_BENCH_TESTS` tests, as on the command line."""

    machine: str = Field(description="Machine whose llama.cpp engine runs the tests.")
    n_prompt: list[int] = Field(default_factory=lambda: [512], description="-p: prompt lengths (tokens; 0: none).")
    n_gen: list[int] = Field(default_factory=lambda: [128], description="-n: generated lengths (tokens; 0: none).")
    n_depth: list[int] = Field(default_factory=lambda: [0], description="-d: context already in the KV (tokens).")

    @field_validator("n_prompt", "n_gen", "n_depth", mode="before")
    @classmethod
    def _few(cls, values: object) -> object:
        return at_most(values, MAX_BENCH_VALUES, "values", ", as llama-bench's lists on a command line")

    def tests(self) -> int:
        """How many tests the run has: every pp and tg length above 0 at every depth."""
        return (sum(1 for p in self.n_prompt if p) + sum(1 for n in self.n_gen if n)) * len(self.n_depth)

    @model_validator(mode="after")
    def _bounded(self) -> Bench:
        if self.tests() > MAX_BENCH_TESTS:
            raise ValueError(f"{self.tests():,} tests (pp and tg lengths above 0, times depths): expected at most "
                             f"{MAX_BENCH_TESTS:,} (split the lists into several runs)")
        return self


class Matcher(Protocol):
    """A compiled ``-ot`` regex: ``search(name)`` is a match (truthy) when the expression is found anywhere in the
    tensor's name, as llama.cpp's ``std::regex_search``, else None."""

    def search(self, text: str) -> object | None: ...


@functools.lru_cache(maxsize=1024)
def compile_rule(pattern: str) -> Matcher:
    """``pattern`` compiled by RE2, whose matching takes time linear in the name whatever the pattern (a pasted
    ``(.|.)*Z`` backtracks for minutes in Python's re); raises ValueError with RE2's reason when it cannot compile
    (backreferences and lookaround have no linear-time match)."""
    import re2

    options = re2.Options()
    options.log_errors = False  # else RE2 writes its own lines on stderr
    try:
        return re2.compile(pattern, options)
    except (re2.error, UnicodeError, TypeError, ValueError) as exc:
        reason = exc.args[0] if exc.args else exc
        raise ValueError(reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)) from None


def _shown(text: str, width: int = 60) -> str:
    """``text`` quoted for a one-line error: control characters escaped, cut to ``width`` characters."""
    shown = shown_path(text)
    return f"'{shown}'" if len(shown) <= width else f"'{shown[:width - 3]}...'"


def parse_rules(rules: list[str], source: str, key: str, gpus: tuple[str, ...]) -> list[tuple[Matcher, str]]:
    """``-ot`` rules ``REGEX=BUFFER`` as (compiled expression, device). A buffer is CPU or a card (CUDA0, ROCm0,
    Vulkan0, Metal, ...; any case; a ``_Host``/``_Mapped`` suffix is CPU memory too). The expressions are RE2's
    (:func:`compile_rule`), searched anywhere in a tensor's name. Raises ScenarioError naming the rule."""
    out = []
    for i, rule in enumerate(rules):
        pattern, sep, buffer = rule.rpartition("=")
        if not sep or not pattern:
            raise ScenarioError(source, f"{key}.{i}", f"{_shown(rule)}: expected a rule REGEX=BUFFER, e.g. "
                                "'blk\\.(1[0-9])\\.ffn_.*_exps=CPU'")
        try:
            compiled = compile_rule(pattern)
        except ValueError as exc:
            raise ScenarioError(source, f"{key}.{i}", f"{_shown(pattern)}: not a regular expression RE2 compiles "
                                f"({exc}); sim matches -ot rules with RE2, in time linear in the name, which has no "
                                "backreference nor lookaround") from None
        device = buffer.strip().upper()
        by_upper = {g.upper(): g for g in gpus}
        if device.endswith(("_HOST", "_MAPPED")) or device == "CPU":
            device = "CPU"
        elif device in by_upper:
            device = by_upper[device]
        else:
            raise ScenarioError(source, f"{key}.{i}", f"buffer {_shown(buffer)}: expected CPU or one of the machine's "
                                f"cards ({', '.join(gpus) or 'none'})")
        out.append((compiled, device))
    return out
