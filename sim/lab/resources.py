"""What a machine offers a load, resolved from a scenario: memory targets (each GPU's VRAM behind its link, or
unified memory) and the costs of its load stages (pure data)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.config.links import link_info
from sim.config.machines import Machine
from sim.config.scenario import Scenario
from sim.core.units import GIB


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
