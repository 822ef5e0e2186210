"""Step costs of an expert-offloading engine from the hardware's specs and the model's geometry.

What specs determine is derived; what they do not is a named efficiency or fixed cost, fitted by a calibration on one
card and carried to another by its specs:

- a step's dense work (attention, norms, router, shared experts, embeddings: every weight outside the routed
  experts) reads the dense weights once per step at ``memory_efficiency`` x the card's ``hbm_gbps`` and does
  2 FLOPs per dense parameter per position at ``compute_efficiency`` x its ``tflops``, the longer of the two (a
  roofline), plus ``layer_s`` of fixed time per layer (kernel launches, synchronisation: host-side work that does
  not scale with the card);
- attention reads every cached token's KV once per step: ``kv_bytes_per_token / (memory_efficiency x hbm_gbps)``
  seconds per token of context (the step's context term);
- a resident expert a step touches costs its bytes over the same memory rate, or its arithmetic for the tokens
  routed to it, the longer;
- a missed expert the host CPU computes costs its bytes over ``cpu_efficiency`` x the host's paper DRAM bandwidth
  (decode on a CPU is memory-bound);
- a peer GPU's expert costs its bytes over that card's memory rate.

Values in seconds a scenario writes (``step.dense_s``, ``gpu_expert_s``, ``cpu_expert_s``, a peer's ``expert_s``)
replace the derived ones. Fixed costs and efficiencies the scenario and its calibrations leave open take the
package defaults (:data:`DEFAULTS`, each with its source); every value used is listed with where it came from
(:attr:`StepSpecs.sources`), which ``sim run`` reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.config.engine import Engine
from sim.config.machines import GpuType, Machine
from sim.config.models import Moe
from sim.core.units import GB, GIB, MIB

# Package defaults of what the specs do not determine: (value, unit, source). The fitted ones are the shipped Strata
# calibration's (calibration/strata_moe.yaml, one RTX 5090 on PCIe Gen3); tests/test_spec_costs.py checks they agree.
DEFAULTS: dict[str, tuple[float, str, str]] = {
    "memory_efficiency": (0.8, "fraction", "assumed: share of memory bandwidth decode kernels reach"),
    "compute_efficiency": (0.5, "fraction", "assumed: share of tensor throughput small-batch matrix products reach"),
    "layer_s": (7.30167e-05, "s", "fitted on the RTX 5090 (calibration/strata_moe.yaml)"),
    "cpu_efficiency": (0.766036, "fraction", "fitted on the RTX 5090 host (calibration/strata_moe.yaml)"),
    "cpu_sync_s": (1.94727e-05, "s", "the RTX 5090 host's, from a fit that freed it (calibration/strata_moe.yaml)"),
    "cpu_budget_s": (0.000165272, "s", "the RTX 5090 host's, from a fit that freed it (calibration/strata_moe.yaml)"),
    "pcie_latency_s": (3.0e-5, "s", "assumed: per-layer transfer set-up (calibration/strata_moe.yaml holds it)"),
    "graph_break_s": (0.00740121, "s", "fitted on the RTX 5090 (calibration/strata_moe.yaml)"),
    "bits_per_weight": (4.5, "bits", "assumed: Q4_K, when the model file does not say"),
    "stalled_share": (0.28645, "fraction", "fitted on the RTX 5090 (calibration/strata_moe.yaml)"),
}


FIXED = ("pcie_latency_s", "graph_break_s", "cpu_sync_s", "cpu_budget_s")  # fixed costs a step takes as they are


@dataclass(frozen=True)
class Source:
    """One value a step cost uses, and where it came from."""

    name: str
    value: float
    unit: str
    how: str  # "scenario", "derived: ...", "default: ..."


@dataclass(frozen=True)
class StepSpecs:
    """Everything the step costs of one engine derive from, and the derivations (all seconds per step or layer)."""

    layers: int
    memory_efficiency: float  # share of a card's memory bandwidth the engine's reads get (any of its cards)
    memory_gbps: float | None  # memory_efficiency x hbm_gbps (GB/s); None: the card's bandwidth is not known
    compute_tflops: float | None  # compute_efficiency x tflops (TFLOP/s)
    layer_s: float
    dense_bytes: float | None
    dense_params: float | None
    expert_bytes: float
    expert_params: float
    kv_bytes_per_token: float
    dense_s_given: float | None
    gpu_expert_s_given: float | None
    cpu_expert_s: float | None
    fixed: dict[str, float] = field(default_factory=dict)  # fixed costs (s): pcie_latency_s, graph_break_s, ...
    sources: tuple[Source, ...] = field(default=(), compare=False)

    def dense_s(self, positions: int) -> float:
        """GPU seconds of a step's dense work over ``positions`` positions, without the KV reads."""
        if self.dense_s_given is not None:
            return self.dense_s_given
        assert self.dense_bytes is not None and self.memory_gbps is not None
        read = self.dense_bytes / (self.memory_gbps * GB)
        flops = 2 * self.dense_params * positions / (self.compute_tflops * 1e12) if self.compute_tflops else 0.0
        return self.layers * self.layer_s + max(read, flops)

    def gpu_expert_s(self, tokens_per_expert: float) -> float:
        """GPU seconds of one resident expert a step touches, ``tokens_per_expert`` positions routed to it."""
        if self.gpu_expert_s_given is not None:
            return self.gpu_expert_s_given
        assert self.memory_gbps is not None
        read = self.expert_bytes / (self.memory_gbps * GB)
        flops = 2 * self.expert_params * tokens_per_expert / (self.compute_tflops * 1e12) if self.compute_tflops \
            else 0.0
        return max(read, flops)

    @property
    def kv_s_per_token(self) -> float:
        """GPU seconds a step spends reading one token of context's KV (0 when the card's bandwidth is unknown)."""
        return self.kv_bytes_per_token / (self.memory_gbps * GB) if self.memory_gbps else 0.0


def tokens_per_expert(lookups: float, experts: int) -> float:
    """Positions routed to each distinct expert a layer-step touches, at least: ``lookups`` over the distinct
    experts they can reach (taken all different until they cover the layer)."""
    return lookups / min(max(lookups, 1.0), experts)


def _pick(name: str, given: float | None, sources: list[Source], unit: str | None = None) -> float:
    """The scenario's value, else the package default; recorded."""
    if given is not None:
        sources.append(Source(name, float(given), unit or DEFAULTS[name][1], "scenario"))
        return float(given)
    value, u, why = DEFAULTS[name]
    sources.append(Source(name, value, u, f"default: {why}"))
    return value


def _dense_params(moe: Moe, dense_bytes: float | None, bits: float, sources: list[Source]) -> float | None:
    """The dense weights' parameters: the model section's own count (a model file's), else their bytes at the
    experts' bits per weight (the dense weights may be stored at other bits: BF16 attention beside MXFP4 experts)."""
    if moe.dense_params_b is not None:
        sources.append(Source("dense_params", moe.dense_params_b * 1e9, "parameters", "scenario"))
        return moe.dense_params_b * 1e9
    return None if dense_bytes is None else dense_bytes * 8 / bits


def step_specs(e: Engine, moe: Moe, card: GpuType, machine: Machine) -> StepSpecs:
    """The step-cost inputs of engine ``e`` serving ``moe`` on ``card`` in ``machine``, with their sources."""
    s = e.step
    src: list[Source] = []
    mem_eff = _pick("memory_efficiency", s.memory_efficiency, src)
    comp_eff = _pick("compute_efficiency", s.compute_efficiency, src)
    memory = mem_eff * card.hbm_gbps if card.hbm_gbps else None
    compute = comp_eff * card.tflops if card.tflops else None
    bits = _pick("bits_per_weight", moe.bits_per_weight, src)
    expert_bytes = moe.expert_mib * MIB
    dense_bytes = moe.dense_gib * GIB if moe.dense_gib is not None else None
    layer_s = _pick("layer_s", s.layer_s, src) if s.dense_s is None else 0.0
    cpu = None
    if s.cpu_expert_s is not None:
        cpu = s.cpu_expert_s
        src.append(Source("cpu_expert_s", cpu, "s", "scenario"))
    else:
        host = machine.host
        dram = host.paper_gbps if host is not None else None
        if dram is not None:
            cpu_eff = _pick("cpu_efficiency", s.cpu_efficiency, src)
            cpu = expert_bytes / (cpu_eff * dram * GB)
            src.append(Source("cpu_expert_s", cpu, "s", f"derived: {moe.expert_mib:g} MiB at {cpu_eff:.3g} x "
                              f"{dram:g} GB/s host DRAM"))
    fixed = {name: _pick(name, getattr(s, name), src) for name in FIXED}
    specs = StepSpecs(layers=moe.layers, memory_efficiency=mem_eff, memory_gbps=memory, compute_tflops=compute,
                      layer_s=layer_s,
                      dense_bytes=dense_bytes, dense_params=_dense_params(moe, dense_bytes, bits, src),
                      expert_bytes=expert_bytes, expert_params=expert_bytes * 8 / bits,
                      kv_bytes_per_token=(moe.kv_kib_per_token or 0.0) * 1024, dense_s_given=s.dense_s,
                      gpu_expert_s_given=s.gpu_expert_s, cpu_expert_s=cpu, fixed=fixed)
    positions = 1 + moe.draft.tokens
    if s.dense_s is not None:
        src.append(Source("dense_s", s.dense_s, "s", "scenario"))
    elif dense_bytes is not None and memory is not None:
        src.append(Source("dense_s", specs.dense_s(positions), "s", f"derived: {moe.layers} layers x layer_s + "
                          f"{moe.dense_gib:g} GiB dense at {mem_eff:.3g} x {card.hbm_gbps:g} GB/s, or its "
                          f"arithmetic at {comp_eff:.3g} x {card.tflops or 0:g} TFLOP/s if longer"))
    if s.gpu_expert_s is not None:
        src.append(Source("gpu_expert_s", s.gpu_expert_s, "s", "scenario"))
    elif memory is not None:
        tpe = tokens_per_expert(positions * moe.top_k, moe.experts_per_layer)
        src.append(Source("gpu_expert_s", specs.gpu_expert_s(tpe), "s", f"derived: {moe.expert_mib:g} MiB at "
                          f"{mem_eff:.3g} x {card.hbm_gbps:g} GB/s"))
    if specs.kv_bytes_per_token and memory is not None:
        src.append(Source("kv_s_per_token", specs.kv_s_per_token, "s", f"derived: {moe.kv_kib_per_token:g} KiB of "
                          f"KV per token at {mem_eff:.3g} x {card.hbm_gbps:g} GB/s"))
    return StepSpecs(**{**specs.__dict__, "sources": tuple(src)})
