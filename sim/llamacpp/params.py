"""The llama.cpp engine's cost parameters: what the hardware's specs do not determine.

Each is a share of a spec (bandwidth, throughput, link rate) the engine's kernels get, or a fixed cost with a
physical meaning. Most come in *families* kept per backend (CUDA, HIP, Vulkan, Metal, SYCL, OpenCL, the CPU) or
per prompt-kernel path (:data:`sim.llamacpp.backends.PATHS`): a backend's kernels are its own, so each gets its own
share, fitted across every card that backend was measured on and never per card. A family also has a pooled value
(its name alone, e.g. ``gpu_memory_efficiency``): what a backend without measurements of its own gets.

``DEFAULTS`` hold the fit to the public llama-bench tables (``sim fit-offload``, calibration/llamacpp.yaml; a test
keeps them equal); a scenario's ``engine.llamacpp.costs`` overrides any of them for its engine's backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.llamacpp.backends import BACKENDS, MATRIX_PATHS, PATHS, VECTOR_PATHS

ISAS = ("avx2", "avx512", "neon", "sve2", "rvv", "rv64gc")


@dataclass(frozen=True)
class Family:
    """A parameter kept per backend (or per path): its keys, unit, bounds and meaning."""

    keys: tuple[str, ...]
    unit: str
    bounds: tuple[float, float]
    meaning: str


FAMILIES: dict[str, Family] = {
    "gpu_memory_efficiency": Family(BACKENDS, "fraction", (0.05, 1.0),
                                    "share of a card's memory bandwidth its weight and cache reads get"),
    "matrix_efficiency": Family(MATRIX_PATHS, "fraction", (0.005, 4.0),
                                "share of a card's dense FP16 matrix throughput a prompt's matrix products get on "
                                "a path that runs them on its matrix units; llama.cpp's quantized kernels multiply "
                                "in int8 (MMQ, integer dot products), which runs at up to 4x the FP16-with-FP32-"
                                "accumulate figure on GeForce cards, so this can exceed 1"),
    "fp16_matrix_efficiency": Family(("cuda_matrix", "hip_matrix"), "fraction", (0.005, 1.0),
                                     "share of a card's dense FP16 matrix throughput cuBLAS/hipBLAS get on a "
                                     "prompt's float weights (F16, BF16) and on types CUDA/HIP have no int8 "
                                     "kernels for (dequantized to f16 first)"),
    "vector_efficiency": Family(VECTOR_PATHS, "fraction", (0.005, 4.0),
                                "share of a card's FP32 vector throughput (without AMD's dual issue) its vector "
                                "kernels get: a prompt's matrix products on a path without matrix kernels, and every "
                                "decode step's arithmetic"),
    "gemm_half_rows": Family(PATHS + ("cpu",), "rows", (0.5, 4096.0),
                             "a matrix kernel's fixed work per weight, as rows of the product: a product of r rows "
                             "runs at r / (r + this) of the path's rate (tiles loaded and converted, pipelines "
                             "filled; a routed expert's product has only the rows routed to it)"),
    "expert_half_rows": Family(PATHS + ("cpu",), "rows", (0.5, 4096.0),
                               "the same for a prompt's routed experts, multiplied by a different kernel "
                               "(mul_mat_id: each expert gathers the rows routed to it)"),
    "flash_attn_efficiency": Family(MATRIX_PATHS, "fraction", (0.005, 4.0),
                                    "share of the matrix peak a prompt's flash-attention kernel gets on a path with "
                                    "matrix kernels"),
    "vector_flash_efficiency": Family(VECTOR_PATHS, "fraction", (0.005, 4.0),
                                      "share of the vector peak a prompt's flash-attention kernel gets on a path "
                                      "without them (a scalar kernel)"),
    "node_s": Family(BACKENDS + ("cpu",), "s", (1e-8, 2e-3),
                     "fixed cost of one graph node the device runs: a kernel launch or dispatch (GPU), a barrier "
                     "of its threads (CPU)"),
    "token_s": Family(BACKENDS + ("cpu",), "s", (1e-6, 0.05),
                      "fixed cost of one step (graph build and upload, synchronisation, sampling)"),
    "cpu_flops_efficiency": Family(ISAS, "fraction", (0.005, 4.0),
                                   "share of the CPU's FP32 SIMD peak (cores x clock x FLOPs per cycle) llama.cpp's "
                                   "quantized CPU kernels get in prompts, by instruction set (its kernels are "
                                   "written per ISA; integer dot products can exceed the FP32 peak)"),
    "ik_cpu_flops_efficiency": Family(ISAS, "fraction", (0.005, 4.0),
                                      "the same with ik_llama.cpp's CPU kernels"),
    "link_share": Family(("linux", "windows", "macos"), "fraction", (0.05, 1.0),
                         "share of the link's rate pageable (mmap) weights cross at when a card computes them for a "
                         "large batch, by operating system (its driver stages pageable copies its own way)"),
    "context_mib": Family(BACKENDS, "MiB", (0.0, 4096.0),
                          "device memory a backend holds besides its buffers: driver context, libraries, pools"),
}

GLOBALS: dict[str, tuple[str, tuple[float, float], str]] = {  # name -> (unit, bounds, meaning)
    "cpu_memory_efficiency": ("fraction", (0.05, 1.0), "share of the host's paper DRAM bandwidth the CPU reads "
                              "weights at (one value for llama.cpp's and ik_llama.cpp's kernels: a share per build "
                              "made the held-out rows worse)"),

    "cpu_thread_gbps": ("GB/s", (0.5, 200.0), "DRAM bandwidth one CPU thread pulls"),
    "split_s": ("s", (0.0, 2e-3), "one hand-over of the activations between devices along a step's path"),
    "spill_link_share": ("fraction", (0.005, 1.0), "share of the link's rate a card reads memory the driver moved "
                         "to shared system memory at"),
    "windows_reserved_gib": ("GiB", (0.0, 3.0), "VRAM Windows' desktop compositor (WDDM) keeps on a card"),
    "soc_compute_share": ("fraction", (0.1, 1.5), "share of its derived (or vendor) peak a unified-memory chip's GPU "
                          "sustains in a prompt's matrix products (GB10, Strix Halo, Apple M): the chip shares one "
                          "power budget with its CPU and memory (GB10's 140 W SoC, Strix Halo's 45-120 W package), so "
                          "its clock under a long matrix product stays below the boost clock the peak is derived "
                          "at; one value for every such chip. Decode's bandwidth-bound kernels and flash attention "
                          "run at their paths' own rates (a share on them too made the held-out unified rows worse: "
                          "batched S_TG 23% and S_PP 17% against 11% and 8%)"),
}

# Where every fit starts and what its pooled values are held near (sim.calibration.llamacpp_fit: a log-normal prior
# of sd POOL_SD): physically plausible values chosen before any fit, never the shipped fit's (a leave-one-source-out
# refit centred on a fit to every source would have seen the held-out one). Shares: decode kernels stream weights at
# about 80% of a card's bandwidth, CPUs at about half their paper DRAM rate; matrix kernels reach most of a card's
# FP16 rate, vector ones about 40% of FP32; a kernel launch costs a few microseconds, a step's graph a few hundred.
PRIORS: dict[str, float] = {
    "gpu_memory_efficiency": 0.8, "matrix_efficiency": 0.8, "vector_efficiency": 0.4, "fp16_matrix_efficiency": 0.6,
    "gemm_half_rows": 32.0, "expert_half_rows": 32.0, "flash_attn_efficiency": 0.3, "vector_flash_efficiency": 0.2,
    "node_s": 4e-6, "token_s": 3e-4, "context_mib": 350.0, "cpu_memory_efficiency": 0.5, "cpu_thread_gbps": 12.0,
    "cpu_flops_efficiency": 0.25, "ik_cpu_flops_efficiency": 0.8, "split_s": 7e-05, "link_share": 0.45,
    "spill_link_share": 0.45, "windows_reserved_gib": 0.458, "soc_compute_share": 1.0,
}

# the fit's values (calibration/llamacpp.yaml), repeated here so a scenario needs no calibration file
DEFAULTS: dict[str, float] = {
    "context_mib": 443.949,
    "context_mib.hip": 443.949,
    "context_mib.vulkan": 435.217,
    "cpu_flops_efficiency": 0.526189,
    "cpu_flops_efficiency.avx2": 0.539645,
    "cpu_flops_efficiency.avx512": 0.526189,
    "cpu_memory_efficiency": 0.57662,
    "cpu_thread_gbps": 12.0,
    "expert_half_rows": 57.7965,
    "expert_half_rows.cpu": 10.253,
    "expert_half_rows.cuda_matrix": 86.5796,
    "expert_half_rows.cuda_vector": 141.182,
    "expert_half_rows.hip_matrix": 57.9985,
    "expert_half_rows.vulkan_coopmat": 53.5214,
    "flash_attn_efficiency": 0.26376,
    "flash_attn_efficiency.cuda_matrix": 0.599587,
    "flash_attn_efficiency.hip_matrix": 0.150927,
    "flash_attn_efficiency.vulkan_coopmat": 0.261038,
    "flash_attn_efficiency.vulkan_coopmat2": 0.263101,
    "fp16_matrix_efficiency": 0.404222,
    "fp16_matrix_efficiency.cuda_matrix": 0.358646,
    "fp16_matrix_efficiency.hip_matrix": 0.425109,
    "gemm_half_rows": 70.5262,
    "gemm_half_rows.cpu": 70.7901,
    "gemm_half_rows.cuda_matrix": 69.3078,
    "gemm_half_rows.cuda_vector": 70.6098,
    "gemm_half_rows.hip_matrix": 76.1502,
    "gemm_half_rows.hip_vector": 70.0972,
    "gemm_half_rows.metal_vector": 69.4786,
    "gemm_half_rows.opencl_vector": 70.8364,
    "gemm_half_rows.vulkan_coopmat": 71.8349,
    "gemm_half_rows.vulkan_coopmat2": 69.633,
    "gemm_half_rows.vulkan_vector": 70.0715,
    "gpu_memory_efficiency": 0.83676,
    "gpu_memory_efficiency.cuda": 0.929997,
    "gpu_memory_efficiency.hip": 0.838823,
    "gpu_memory_efficiency.metal": 0.815997,
    "gpu_memory_efficiency.opencl": 0.80981,
    "gpu_memory_efficiency.vulkan": 0.832665,
    "ik_cpu_flops_efficiency": 0.718291,
    "ik_cpu_flops_efficiency.avx2": 0.730094,
    "ik_cpu_flops_efficiency.avx512": 0.69804,
    "link_share": 0.557787,
    "link_share.linux": 0.627629,
    "link_share.windows": 0.526194,
    "matrix_efficiency": 0.666117,
    "matrix_efficiency.cuda_matrix": 1.13009,
    "matrix_efficiency.hip_matrix": 0.558483,
    "matrix_efficiency.vulkan_coopmat": 0.413724,
    "matrix_efficiency.vulkan_coopmat2": 0.718052,
    "node_s": 3.32225e-06,
    "node_s.cpu": 3.35116e-06,
    "node_s.cuda": 1.87402e-06,
    "node_s.hip": 3.4077e-06,
    "node_s.metal": 3.33719e-06,
    "node_s.opencl": 3.34079e-06,
    "node_s.vulkan": 3.37628e-06,
    "soc_compute_share": 0.472615,
    "spill_link_share": 0.41468,
    "split_s": 5.03382e-05,
    "token_s": 0.000299977,
    "token_s.cpu": 0.000299915,
    "token_s.cuda": 0.000297723,
    "token_s.hip": 0.000301885,
    "token_s.metal": 0.000299956,
    "token_s.opencl": 0.000300083,
    "token_s.vulkan": 0.000300306,
    "vector_efficiency": 0.51161,
    "vector_efficiency.cuda_vector": 0.0863393,
    "vector_efficiency.hip_vector": 0.548806,
    "vector_efficiency.metal_vector": 1.31527,
    "vector_efficiency.opencl_vector": 0.490624,
    "vector_efficiency.vulkan_vector": 0.513633,
    "vector_flash_efficiency": 0.331855,
    "vector_flash_efficiency.cuda_vector": 0.331765,
    "vector_flash_efficiency.metal_vector": 0.33962,
    "vector_flash_efficiency.vulkan_vector": 0.3322,
    "windows_reserved_gib": 0.458,
}

# 90% bands of measured / simulated over held-out rows (leave one source out), and within one setup once a
# measured run anchors the prediction (calibration/llamacpp.yaml band, band_within)
BAND: dict[str, tuple[float, float]] = {"tg": (0.4228, 1.671), "pp": (0.2194, 2.123)}
BAND_WITHIN: dict[str, tuple[float, float]] = {"tg": (0.707, 1.379), "pp": (0.4466, 2.232)}
# near an anchor: [CPU weight share apart (-1: the same flags, a repeat), lo, hi] (sim.fidelity.llamacpp.near_bands)
BAND_NEAR: dict[str, list[tuple[float, float, float]]] = {
    "tg": [(-1.0, 0.8282, 1.208), (0.02, 0.6317, 1.583), (0.1, 0.3771, 2.652), (0.25, 0.3032, 3.298),
           (1.0, 0.2469, 4.051)],
    "pp": [(-1.0, 0.4728, 2.115), (0.02, 0.2671, 3.744), (0.1, 0.1913, 5.228), (0.25, 0.5165, 1.936),
           (1.0, 0.3658, 2.734)]}

ASSUMED = {  # name -> why it is not fitted
    "cpu_thread_gbps": "the sweeps' thread counts (4-12 threads, BV-gptoss-threads) all leave decode as it is: they "
                       "only bound it from below (about 30 GB/s / 4 threads); 12 GB/s is one desktop core's streaming "
                       "read",
}


def unit(name: str) -> str:
    """The unit of a parameter (a family member's is its family's)."""
    family = name.split(".", 1)[0]
    if family in FAMILIES:
        return FAMILIES[family].unit
    return GLOBALS[name][0]


def bounds(name: str) -> tuple[float, float]:
    family = name.split(".", 1)[0]
    if family in FAMILIES:
        return FAMILIES[family].bounds
    return GLOBALS[name][1]


# scenario override keys (sim.config.llamacpp.LlamaCppCosts) -> the family they set for the engine's own backend
OVERRIDES = {"gpu_memory_efficiency": "backend", "matrix_efficiency": "path", "vector_efficiency": "path",
             "flash_attn_efficiency": "path", "vector_flash_efficiency": "path", "gemm_half_rows": "path",
             "expert_half_rows": "path", "fp16_matrix_efficiency": "path",
             "node_s": "backend", "token_s": "backend", "context_mib": "backend", "link_share": "os",
             "cpu_flops_efficiency": "isa", "ik_cpu_flops_efficiency": "isa"}


@dataclass(frozen=True)
class CostParams:
    """The parameters one engine (or a fit) runs with: pooled family values, per-backend values where known, and
    the global ones, by name (``gpu_memory_efficiency`` pooled, ``gpu_memory_efficiency.cuda`` CUDA's)."""

    values: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULTS))

    @classmethod
    def of(cls, overrides: Any = None, backend: str | None = None, path: str | None = None,
           base: Mapping[str, float] | None = None, os_name: str | None = None, isa: str | None = None
           ) -> CostParams:
        """``base`` (default: DEFAULTS) with what ``overrides`` (a LlamaCppCosts section, a mapping or None) sets:
        a family's value is set for ``backend`` (or ``path``, or the operating system), a dotted name as it is."""
        values = dict(base if base is not None else DEFAULTS)
        if overrides is not None:
            given = overrides if isinstance(overrides, Mapping) else overrides.model_dump()
            for k, v in given.items():
                if v is None:
                    continue
                scope = OVERRIDES.get(k)
                key = {"backend": backend, "path": path, "os": os_name, "isa": isa}.get(scope or "")
                if path is not None and path.endswith("_vector"):  # a vector path's own families
                    k = {"matrix_efficiency": "vector_efficiency",
                         "flash_attn_efficiency": "vector_flash_efficiency"}.get(k, k)
                values[f"{k}.{key}" if key else k] = float(v)
        return cls(values)

    def get(self, family: str, key: str | None = None) -> float:
        """The value of ``family`` for ``key`` (a backend or path): its own, else the family's pooled value."""
        if key is not None:
            own = self.values.get(f"{family}.{key}")
            if own is not None:
                return own
        return self.values[family]

    def name(self, family: str, key: str | None) -> str:
        """The parameter a ledger names for ``family`` at ``key``: the dotted name when the values hold it (or the
        family is per key), else the pooled one."""
        if key is None or family not in FAMILIES:
            return family
        return f"{family}.{key}"

    def resolved(self, names: set[str] | list[str]) -> dict[str, float]:
        """Values of dotted or plain names, a dotted one falling back to its family's pooled value."""
        out = {}
        for n in names:
            if n in self.values:
                out[n] = self.values[n]
            else:
                family, _, key = n.partition(".")
                out[n] = self.get(family, key or None)
        return out

    def lookup(self) -> Values:
        """A mapping of every parameter name a ledger can name to its value (dotted names resolved on first use)."""
        return Values(self)

    def with_values(self, **values: float) -> CostParams:
        return CostParams(dict(self.values) | {k: float(v) for k, v in values.items()})

    def as_dict(self) -> dict[str, float]:
        return dict(sorted(self.values.items()))


class Values(dict):
    """Parameter values by the names ledgers use, a dotted name resolved from its family when first asked for."""

    def __init__(self, params: CostParams) -> None:
        super().__init__(params.values)
        self._params = params

    def __missing__(self, name: str) -> float:
        family, _, key = name.partition(".")
        value = self._params.get(family, key or None)
        self[name] = value
        return value
