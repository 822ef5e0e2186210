"""Decode rate of a dense model: the measured table rate, slowed when part of the weights could not be placed.

Weights that did not fit (``on_overflow: spill``) stay in host memory and are streamed to the GPU for every token,
as offloading engines do, so each token costs ``1 / table_rate + spilled_GB / stream_gbps`` seconds. The stream
path is the slowest of the machine's PCIe links, or the disk on a unified-memory machine (weights beyond unified
memory page in from the SSD). Computing the spilled layers on the CPU instead is not modelled.
"""

from __future__ import annotations

from sim.core.units import GB


def decode_tok_s(table_tok_s: float, spilled_bytes: float, stream_gbps: float) -> float:
    """Tokens per second with ``spilled_bytes`` of weights streamed per token at ``stream_gbps`` (GB/s)."""
    if spilled_bytes <= 0:
        return table_tok_s
    return 1.0 / (1.0 / table_tok_s + spilled_bytes / GB / stream_gbps)
