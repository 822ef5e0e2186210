"""PCIe links resolved from a scenario: the card's own maximum, the slot and the negotiated link kept apart."""

from __future__ import annotations

from dataclasses import dataclass

from sim.config.machines import Machine
from sim.config.scenario import Scenario
from sim.core.units import pcie_paper_gbps


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

    @property
    def label(self) -> str:
        """``Gen4 x16``, or ``unified memory`` for a unified chip (no PCIe link)."""
        return f"Gen{self.gen} x{self.lanes}" if self.card_max_gen else "unified memory"


def link_info(scn: Scenario, machine: Machine, gpu_name: str) -> LinkInfo:
    gpu = machine.gpus[gpu_name]
    card = scn.gpus[gpu.type]
    if card.pcie_max_gen is None:  # a unified-memory chip: a "copy" to the GPU stays in the one memory pool
        bw = float(card.hbm_gbps or 0.0)
        return LinkInfo(0, 0, slot_gen=gpu.slot_gen or 0, slot_lanes=gpu.slot_lanes, gen=0, lanes=0, paper_gbps=bw,
                        efficiency=1.0, gbps=bw, measured=False)
    gen = min(card.pcie_max_gen, gpu.slot_gen, gpu.negotiated_gen or 99)
    lanes = min(card.pcie_max_lanes, gpu.slot_lanes, gpu.negotiated_lanes or 99)
    paper = pcie_paper_gbps(gen, lanes)
    eff = gpu.pcie_efficiency if gpu.pcie_efficiency is not None else scn.pcie.efficiency
    measured = gpu.measured_link_gbps is not None
    gbps = gpu.measured_link_gbps if measured else paper * eff
    return LinkInfo(card.pcie_max_gen, card.pcie_max_lanes, slot_gen=gpu.slot_gen, slot_lanes=gpu.slot_lanes, gen=gen,
                    lanes=lanes, paper_gbps=paper, efficiency=eff, gbps=float(gbps), measured=measured)
