"""The llama.cpp engine's cost parameters: what the hardware's specs do not determine.

Each is a share of a spec (bandwidth, throughput, link rate) the engine gets, or a fixed cost with a physical
meaning. ``DEFAULTS`` hold the fit to the public offload sweeps (``sim fit-offload``, calibration/llamacpp.yaml; a
test keeps them equal); a scenario's ``engine.llamacpp.costs`` overrides any of them. ``ASSUMED`` ones are not
fitted: a documented typical value the sweeps cannot separate from the fitted ones.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

# fitted to calibration/offload_public.csv (sim fit-offload); values the yaml file holds, repeated here so a
# scenario needs no calibration file
DEFAULTS: dict[str, float] = {
    "gpu_memory_efficiency": 0.8,
    "gpu_compute_efficiency": 0.458626,
    "cpu_memory_efficiency": 0.492576,
    "cpu_thread_gbps": 12.0,
    "cpu_gflops_per_core": 17.7365,
    "ik_cpu_gflops_per_core": 119.781,
    "split_s": 7.19263e-05,
    "token_s": 0.000341426,
    "gpu_layer_s": 4.59741e-06,
    "cpu_layer_s": 8.75578e-05,
    "link_share": 0.457113,
    "spill_link_share": 0.456191,
    "windows_reserved_gib": 0.457817,
    "cuda_context_mib": 350.0,
}

# 90% bands of measured / simulated (calibration/llamacpp.yaml band, band_within): over the rows kept out of the fit,
# and within one setup once a measured run anchors the prediction
BAND: dict[str, tuple[float, float]] = {"tg": (0.5474, 1.305), "pp": (0.4691, 1.551)}
BAND_WITHIN: dict[str, tuple[float, float]] = {"tg": (0.5144, 1.382), "pp": (0.3656, 1.649)}

ASSUMED = {  # name -> why it is not fitted
    "gpu_memory_efficiency": "held at the share of a card's memory bandwidth a decode step's reads get across the "
                             "project (sim.moe.spec_costs DEFAULTS: 0.8): the sweeps never run a step on the card "
                             "alone, so they cannot tell it from the step's fixed costs (fits from different starts "
                             "put it anywhere from 0.76 to 0.89)",
    "cpu_thread_gbps": "the sweeps' thread counts (4-12 threads, BV-gptoss-threads) all leave decode as it is: they "
                       "only bound it from below (about 30 GB/s / 4 threads); 12 GB/s is one desktop core's streaming "
                       "read",
    "cuda_context_mib": "typical VRAM of a CUDA context with cuBLAS on Ampere/Ada cards (300-500 MiB); the sweeps "
                        "cannot tell it from windows_reserved_gib",
}

UNITS = {"gpu_memory_efficiency": "fraction", "gpu_compute_efficiency": "fraction",
         "cpu_memory_efficiency": "fraction", "cpu_thread_gbps": "GB/s", "cpu_gflops_per_core": "GFLOP/s",
         "ik_cpu_gflops_per_core": "GFLOP/s", "split_s": "s", "token_s": "s", "gpu_layer_s": "s", "cpu_layer_s": "s",
         "link_share": "fraction", "spill_link_share": "fraction",
         "windows_reserved_gib": "GiB", "cuda_context_mib": "MiB"}


@dataclass(frozen=True)
class CostParams:
    """The parameters one engine runs with (see sim.config.llamacpp.LlamaCppCosts for each one's meaning)."""

    gpu_memory_efficiency: float
    gpu_compute_efficiency: float
    cpu_memory_efficiency: float
    cpu_thread_gbps: float
    cpu_gflops_per_core: float
    ik_cpu_gflops_per_core: float
    split_s: float
    token_s: float
    gpu_layer_s: float
    cpu_layer_s: float
    link_share: float
    spill_link_share: float
    windows_reserved_gib: float
    cuda_context_mib: float

    @classmethod
    def of(cls, overrides: Any = None) -> CostParams:
        """``DEFAULTS`` with the values ``overrides`` (a LlamaCppCosts section, a mapping, or None) sets."""
        values = dict(DEFAULTS)
        if overrides is not None:
            given = overrides if isinstance(overrides, dict) else overrides.model_dump()
            values |= {k: float(v) for k, v in given.items() if v is not None}
        return cls(**values)

    def with_values(self, **values: float) -> CostParams:
        return replace(self, **values)

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
