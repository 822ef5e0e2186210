"""Decode step time of an expert-offloading engine: stalls, not bandwidth (FIELD_NOTES section 3).

One verification step checks ``1 + draft tokens`` positions at once and touches, in each MoE layer, the union of the
experts those positions route to. Per layer:

- the GPU computes its share of the dense work and every touched expert resident in VRAM:
  ``gpu = dense_s / layers + gpu_expert_s * resident``;
- the host CPU computes missed experts (from host RAM) while the GPU works: it finishes ``floor(gpu / cpu_expert_s)``
  of them in that window; the rest are read by the GPU over PCIe (they are the spill);
- a layer that reads over PCIe waits ``pcie_latency_s + bytes / link_gbps``, overlapped with its own compute: it
  stalls only for what exceeds the compute window (so a little spill costs no transfer time, a lot is
  transfer-bound: the second cliff);
- a step with any PCIe read cannot run fully resident and pays ``graph_break_s`` once (it leaves the fused GPU
  path and synchronises with the host: the first cliff, whatever the amount of spill, hence the plateau);
- ``host_s`` of host work per step leaves the GPU idle.

The driver counts the GPU busy while it computes or waits inside a step (stalls, graph breaks): "busy but stalled".
Everything is vectorised over steps and layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .units import GB


@dataclass(frozen=True)
class StepParams:
    dense_s: float
    gpu_expert_s: float
    cpu_expert_s: float
    pcie_latency_s: float
    graph_break_s: float
    host_s: float
    link_gbps: float  # host -> GPU copy rate of the engine's link (GB/s)
    expert_bytes: float


@dataclass(frozen=True)
class StepTimes:
    """Seconds per step by what the GPU was doing, and experts read over PCIe per step."""

    compute_s: np.ndarray
    stall_s: np.ndarray  # waiting for PCIe reads beyond the compute window
    break_s: np.ndarray  # graph breaks
    host_s: np.ndarray  # GPU idle
    pcie_reads: np.ndarray

    @property
    def total_s(self) -> np.ndarray:
        return self.compute_s + self.stall_s + self.break_s + self.host_s


def step_times(resident: np.ndarray, missed: np.ndarray, p: StepParams) -> StepTimes:
    """``resident``, ``missed``: [steps, layers] counts of distinct experts a step touches in each layer."""
    layers = resident.shape[1]
    gpu = p.dense_s / layers + p.gpu_expert_s * resident
    on_cpu = np.minimum(missed, np.floor(gpu / p.cpu_expert_s + 1e-9))  # whole experts (guarding float rounding)
    reads = missed - on_cpu
    transfer = np.where(reads > 0, p.pcie_latency_s + reads * p.expert_bytes / (p.link_gbps * GB), 0.0)
    stall = np.maximum(transfer - gpu, 0.0).sum(axis=1)
    any_read = reads.sum(axis=1) > 0
    steps = resident.shape[0]
    return StepTimes(gpu.sum(axis=1), stall, np.where(any_read, p.graph_break_s, 0.0), np.full(steps, p.host_s),
                     reads.sum(axis=1))


def tokens_per_step(drafts: int, acceptance: float, steps: int, rng: np.random.Generator) -> np.ndarray:
    """Tokens a verification step yields: the leading accepted drafts plus the step's own token (1..drafts+1)."""
    if drafts == 0 or acceptance <= 0:
        return np.ones(steps, dtype=np.int64)
    accepted = rng.random((steps, drafts)) < acceptance
    leading = np.cumprod(accepted, axis=1).sum(axis=1)
    return leading + 1


def expected_tokens_per_step(drafts: int, acceptance: float) -> float:
    """E[1 + leading accepted drafts] = (1 - a^(d+1)) / (1 - a)."""
    a = acceptance
    return float(drafts + 1) if a >= 1 else (1 - a ** (drafts + 1)) / (1 - a)
