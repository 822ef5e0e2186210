"""Unit constants and the PCIe generation table.

Conventions used across the package (units are also spelled in names):
- ``GB`` is decimal (1e9 bytes), ``GiB`` is binary (2**30 bytes), ``MiB`` is 2**20 bytes.
- Bandwidths ``*_gbps`` are decimal GB per second, as in the measured tables.
- Times ``*_s`` are seconds of simulated time.
"""

from __future__ import annotations

GB = 1e9
GIB = float(2**30)
KIB = 1024.0
MIB = float(2**20)

# Usable bandwidth of one PCIe lane, per direction, in decimal GB/s, after line encoding
# (8b/10b for Gen1-2, 128b/130b for Gen3-5, 242B/256B FLIT for Gen6). These are the "paper"
# figures: Gen4 x16 = 31.5 GB/s and Gen2 x4 = 2.0 GB/s, as quoted in calibration/pcie_links.csv.
PCIE_LANE_GBPS: dict[int, float] = {
    1: 2.5 * 8 / 10 / 8,
    2: 5.0 * 8 / 10 / 8,
    3: 8.0 * 128 / 130 / 8,
    4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8,
    6: 64.0 * 242 / 256 / 8,
}
PCIE_LANE_COUNTS = (1, 2, 4, 8, 16)


def pcie_paper_gbps(gen: int, lanes: int) -> float:
    """Paper (spec) bandwidth per direction of a PCIe link, in decimal GB/s."""
    if gen not in PCIE_LANE_GBPS:
        raise ValueError(f"PCIe generation {gen} is not one of {sorted(PCIE_LANE_GBPS)}")
    if lanes not in PCIE_LANE_COUNTS:
        raise ValueError(f"PCIe lane count {lanes} is not one of {PCIE_LANE_COUNTS}")
    return PCIE_LANE_GBPS[gen] * lanes
