"""Hardware resolved from a scenario: PCIe links, memory targets and per-machine stage costs (pure data)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.config.scenario import Machine, Scenario
from sim.core.units import GB, GIB, pcie_paper_gbps


@dataclass(frozen=True)
class LinkInfo:
    """One GPU's host link. The card's own maximum and the negotiated link are kept apart."""

    card_max_gen: int
    card_max_lanes: int
    slot_gen: int
    slot_lanes: int
    gen: int  # negotiated generation
    lanes: int  # negotiated lanes
    paper_gbps: float  # spec bandwidth of the negotiated link (GB/s)
    efficiency: float  # share of paper a copy delivers
    gbps: float  # what a host->GPU copy gets (GB/s)
    measured: bool  # gbps came from a measured figure, not gen x lanes x efficiency


@dataclass(frozen=True)
class MemoryTarget:
    """Where weights land: a GPU's VRAM (behind a link) or unified memory (no link)."""

    name: str
    capacity_bytes: float  # usable for weights, after other processes (bytes)
    link_gbps: float | None  # None: no PCIe stage (unified memory)


@dataclass(frozen=True)
class StageCosts:
    """Per-byte and per-request costs of the load stages of one machine."""

    disk_gbps: float
    disk_latency_s: float
    loader_s_per_gb: float
    loader_s_per_tensor: float


def link_info(scn: Scenario, machine: Machine, gpu_name: str) -> LinkInfo:
    gpu = machine.gpus[gpu_name]
    card = scn.gpus[gpu.type]
    gen = min(card.pcie_max_gen, gpu.slot_gen, gpu.negotiated_gen or 99)
    lanes = min(card.pcie_max_lanes, gpu.slot_lanes, gpu.negotiated_lanes or 99)
    paper = pcie_paper_gbps(gen, lanes)
    eff = gpu.pcie_efficiency if gpu.pcie_efficiency is not None else scn.pcie.efficiency
    measured = gpu.measured_link_gbps is not None
    gbps = gpu.measured_link_gbps if measured else paper * eff
    return LinkInfo(card.pcie_max_gen, card.pcie_max_lanes, gpu.slot_gen, gpu.slot_lanes,
                    gen, lanes, paper, eff, float(gbps), measured)


def memory_targets(scn: Scenario, machine: Machine) -> list[MemoryTarget]:
    if machine.kind == "unified":
        assert machine.unified_memory_gib is not None
        return [MemoryTarget("unified", machine.unified_memory_gib * GIB, None)]
    out = []
    for name, gpu in machine.gpus.items():
        cap = max(0.0, scn.gpus[gpu.type].vram_gib - gpu.reserved_gib) * GIB
        out.append(MemoryTarget(name, cap, link_info(scn, machine, name).gbps))
    return out


def has_load_path(machine: Machine) -> bool:
    """A machine can load weights when it names a disk (and so, once validated, has loader costs)."""
    return machine.disk is not None


def stage_costs(scn: Scenario, machine: Machine) -> StageCosts:
    disk = scn.disks[machine.disk]
    return StageCosts(disk.read_gbps, disk.latency_s, machine.loader.s_per_gb, machine.loader.s_per_tensor)


def model_bytes(scn: Scenario, model: str) -> float:
    return scn.models[model].weights_gib * GIB


def model_gb(scn: Scenario, model: str) -> float:
    return model_bytes(scn, model) / GB
