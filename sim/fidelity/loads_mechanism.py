"""The loading mechanism's value for one row of the public weight-loading tables, under the shared parameters
(:data:`PARAMETERS`): a disk's requests, host copies on their threads, per-tensor work, the GPU link, page-cache hits
(:mod:`sim.lab.loaders`, :mod:`sim.lab.loading`). :mod:`sim.fidelity.loads` reads the rows into :class:`RowSpec`
and :mod:`sim.fidelity.loads_fit` fits the parameters."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from sim.config.links import link_info
from sim.config.scenario import Scenario
from sim.core.units import GB, KIB
from sim.fidelity.domain import Prediction
from sim.lab import loading
from sim.lab.loaders import composition, copy_bandwidth, host_cap_gbps, stage_costs
from sim.lab.resources import StageCosts

# name: (stated start, low, high, unit, what). The start is the value a held-out group gets when no training row
# depends on the parameter; chosen before any fit (specifications or the schema's defaults where there are any).
PARAMETERS: dict[str, tuple[float, float, float, str, str]] = {
    "pcie_efficiency": (0.84, 0.3, 0.99, "fraction", "share of the paper PCIe bandwidth a host-to-GPU copy gets "
                        "(sim's default, calibration/loading.yaml)"),
    "copy_gbps_per_thread": (10.0, 0.5, 100.0, "GB/s", "one thread's copy of a large buffer (loading.host)"),
    "copy_share_of_dram": (0.309, 0.02, 0.98, "fraction", "most all copies of a host get at once, of its paper DRAM"),
    "python_s_per_tensor": (1e-4, 1e-8, 0.1, "s", "per-tensor work of a Python loader (loading.host)"),
    "fastsafetensors_s_per_tensor": (1e-4, 1e-8, 0.1, "s", "per-tensor work of fastsafetensors (loading.host)"),
    "native_s_per_tensor": (1e-5, 1e-9, 0.01, "s", "per-tensor work of a C/C++ loader (loading.host)"),
    "convert_gbps_per_thread": (2.0, 0.05, 100.0, "GB/s", "one thread's CPU dtype conversion (loading.host)"),
    "hit_s_per_gb_linux": (0.05, 1e-5, 20.0, "s/GB", "mapping page-cache hits under Linux (loading.mmap)"),
    "hit_s_per_gb_windows": (0.05, 1e-5, 20.0, "s/GB", "mapping page-cache hits under Windows"),
    "hit_s_per_gb_macos": (0.05, 1e-5, 20.0, "s/GB", "mapping page-cache hits under macOS"),
    "flash_access_mb": (0.25, 1e-3, 100.0, "MB", "a flash device's access time per request, as the transfer time "
                        "of this many MB at its own bandwidth"),
    "nvme_gbps": (3.5, 0.2, 30.0, "GB/s", "sequential read of an NVMe drive the source does not identify (a PCIe "
                  "3.0 x4 drive's 3.94 GB/s interface at sim's default PCIe efficiency)"),
    "network_latency_s": (5e-4, 1e-6, 0.5, "s", "round trip of one request to network storage"),
    "llamacpp_fixed_s": (1.0, 1e-3, 120.0, "s", "llama.cpp's fixed start inside its load time: context, buffers, "
                         "warm-up run"),
    "rocm_pageable_s_per_copy": (1e-4, 1e-8, 0.1, "s", "the ROCm runtime's cost of one copy to the GPU from "
                                 "pageable memory (one per tensor), beyond its bytes"),
    "server_start_s": (2.0, 1e-3, 120.0, "s", "a server process's start until it serves, beyond llama.cpp's load "
                       "time (an application's 'model start': process spawn, server init, first health check)"),
}
LOGIT = ("pcie_efficiency", "copy_share_of_dram")
GEN5_X4_PAPER_GBPS = 4 * 32 * 128 / 130 / 8  # PCIe 5.0 x4: 4 lanes x 32 GT/s x 128b/130b / 8 bits (GB/s)
RATES = ("direct_read_gbps", "copy_gbps", "host_copy_gbps", "h2d_pinned_gbps", "h2d_pageable_gbps",
         "read_gbps_during_load")


@dataclass(frozen=True)
class RowSpec:
    """How one row is predicted: its machine (a validated one-machine scenario), what was measured and, for a
    load, its chunk plan and which chunks the page cache holds."""

    row_id: str
    quantity: str
    setup: str
    scenario: Scenario = field(repr=False)
    os: str = "linux"
    disk_class: str = "flash"
    disk_gbps: float | str | None = None  # stated GB/s, "nvme", "gen5_x4" or None (no disk)
    request_kib: float | None = None
    queue_depth: int | None = None
    copies_cpu: int | None = None
    unified_in_place: bool | None = None
    tmpfs: bool = False
    fixed: str = ""  # "llamacpp": add llama.cpp's fixed start; "server": and a server process's start
    payload_share: float = 1.0
    rocm: bool = False  # the GPU runs ROCm (its pageable copies cost rocm_pageable_s_per_copy each)
    plan: loading.ChunkPlan | None = field(default=None, repr=False)
    cached: np.ndarray | None = field(default=None, repr=False)
    how: str = ""


def start_values() -> dict[str, float]:
    return {k: v[0] for k, v in PARAMETERS.items()}


def _disk(spec: RowSpec, p: dict[str, float]) -> tuple[float, float]:
    """(GB/s, latency s) of the row's disk under parameters ``p``."""
    if spec.disk_gbps == "nvme" or spec.disk_gbps is None:
        bw = p["nvme_gbps"]
    elif spec.disk_gbps == "gen5_x4":
        bw = GEN5_X4_PAPER_GBPS * p["pcie_efficiency"]
    else:
        bw = float(spec.disk_gbps)
    lat = p["network_latency_s"] if spec.disk_class == "network" else p["flash_access_mb"] * 1e-3 / bw
    return bw, lat


def _with_params(scn: Scenario, spec: RowSpec, p: dict[str, float]) -> Scenario:
    """``scn`` with the shared parameters ``p`` set where the scenario holds them (no validation: the values are
    within the schema's bounds by :data:`PARAMETERS`)."""
    host = scn.loading.host.model_copy(update={k: p[k] for k in ("copy_gbps_per_thread", "convert_gbps_per_thread",
                                                                 "python_s_per_tensor", "native_s_per_tensor",
                                                                 "fastsafetensors_s_per_tensor")})
    mm = scn.loading.mmap
    os_costs = getattr(mm, spec.os).model_copy(update={"hit_s_per_gb": p[f"hit_s_per_gb_{spec.os}"]})
    ld = scn.loading.model_copy(update={"host": host, "copy_share_of_dram": p["copy_share_of_dram"],
                                        "mmap": mm.model_copy(update={spec.os: os_costs})})
    bw, lat = _disk(spec, p)
    disk = scn.disks["d"].model_copy(update={"read_gbps": bw, "latency_s": lat})
    return scn.model_copy(update={"loading": ld, "pcie": scn.pcie.model_copy(update={"efficiency":
                                                                                    p["pcie_efficiency"]}),
                                  "disks": {"d": disk}})


def _overrides(costs: StageCosts, spec: RowSpec) -> StageCosts:
    """The row's own reading of its loader (setups file): copies into its own host buffers, the mapping not used in
    place on unified memory, a direct-I/O read of tmpfs being a CPU copy."""
    if spec.copies_cpu is not None:
        costs = replace(costs, copies_cpu=spec.copies_cpu)
    if spec.unified_in_place is not None:
        costs = replace(costs, unified_in_place=spec.unified_in_place)
    if spec.tmpfs and costs.direct:
        costs = replace(costs, direct=False, copies_gpu=costs.copies_gpu + 1)
    return costs


def _runtime(costs: StageCosts, spec: RowSpec, p: dict[str, float]) -> StageCosts:
    """The GPU runtime's own per-copy cost: ROCm's copies from pageable memory, one per tensor."""
    if spec.rocm and costs.pageable:
        return replace(costs, loader_s_per_tensor=costs.loader_s_per_tensor + p["rocm_pageable_s_per_copy"])
    return costs


def own_host_bytes(plan: loading.ChunkPlan, costs: StageCosts) -> float:
    """Bytes the load itself holds in host RAM outside the page cache while it runs: what it copies into its own
    buffers there (unified memory not used in place, host tensors it copies), the room the page cache loses."""
    rates = loading.link_rates(plan)
    in_host = ~np.isfinite(rates)
    unified = in_host & (plan.target >= 0)
    copied_unified = unified & (not costs.unified_in_place)
    copied_host = in_host & (plan.target < 0) & (costs.copies_cpu > 0)
    return float(plan.sizes[copied_unified | copied_host].sum())


# -- the mechanism's value for one row --------------------------------------------------------------------------
def predict_one(p: dict[str, float], spec: RowSpec) -> Prediction:
    scn = _with_params(spec.scenario, spec, p)
    m = scn.machines["m"]
    q = spec.quantity
    if q == "h2d_pinned_gbps":
        return Prediction(link_info(scn, m, "g0").gbps, "link: paper x PCIe efficiency")
    if q == "h2d_pageable_gbps":
        link, copy = link_info(scn, m, "g0").gbps, copy_bandwidth(scn, m)
        return Prediction(1 / (1 / link + 1 / copy), f"staging copy {100 * link / (link + copy):.0f}%, "
                          f"link {100 * copy / (link + copy):.0f}%")
    if q == "copy_gbps":
        return Prediction(copy_bandwidth(scn, m), "one thread's copy")
    if q == "host_copy_gbps":
        return Prediction(host_cap_gbps(scn, m) / spec.payload_share, "the share of paper DRAM all copies get")
    costs = _runtime(_overrides(stage_costs(scn, m), spec), spec, p)
    if q in ("direct_read_gbps", "read_gbps_during_load"):
        if spec.request_kib is not None:
            costs = replace(costs, request_bytes=spec.request_kib * KIB, queue_depth=1, readers=1)
        r = costs.request_bytes / GB
        lat = costs.disk_latency_s
        share = lat / (lat + r / costs.disk_gbps)
        return Prediction(costs.disk_gbps_effective(), f"request latency {100 * share:.0f}%, transfer "
                          f"{100 * (1 - share):.0f}% ({costs.request_bytes / KIB:g} KiB x {costs.queue_depth})")
    assert spec.plan is not None and spec.cached is not None
    times = loading.stage_times(spec.plan, costs, spec.cached)
    comp = composition(scn, costs)
    wall = loading.load_time(times, comp, scn.loading.buffer_chunks)
    fixed = (p["llamacpp_fixed_s"] if spec.fixed else 0.0) + (p["server_start_s"] if spec.fixed == "server" else 0.0)
    return Prediction(wall + fixed, _mechanism(times, costs, spec, fixed))


def _mechanism(times: loading.StageTimes, costs: StageCosts, spec: RowSpec, fixed: float) -> str:
    """Which stages the load's seconds go to (shares of the stages' sums)."""
    assert spec.plan is not None
    per_tensor = float(spec.plan.tensors.sum()) * costs.loader_s_per_tensor
    if costs.readers > 1 and costs.rank_tensors == "share":
        per_tensor /= costs.readers
    parts = {"disk": float(times.disk.sum()), "host copies": max(float(times.loader.sum()) - per_tensor, 0.0),
             "per-tensor": per_tensor, "link": float(times.link.sum()), "fixed start": fixed}
    total = sum(parts.values()) or 1.0
    shown = [f"{k} {100 * v / total:.0f}%" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])
             if v / total >= 0.05]
    hit = float(np.mean(spec.cached)) if spec.cached is not None and spec.cached.size else 0.0
    return ", ".join(shown) + f" ({spec.how}; page cache {100 * hit:.0f}%)"
