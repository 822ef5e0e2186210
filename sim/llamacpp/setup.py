"""A llama.cpp engine from a scenario: the model's tensors, their placement, each device's allocations, the
hardware's rates; or why it cannot load."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sim.config.links import link_info
from sim.config.llamacpp import LlamaCpp
from sim.config.scenario import Scenario
from sim.config.unified import pool_gib
from sim.core.errors import ScenarioError, SimulationError
from sim.core.units import GB, GIB
from sim.llamacpp.allocations import (  # noqa: F401 - re-exported: the engine's users read them here
    Allocations,
    _placed,
    allocations,
    gpu_names,
    machine_backend,
    placement_model,
)
from sim.llamacpp.backends import uses_matrix_units
from sim.llamacpp.costs import REFERENCE_GHZ, Device, Engine, Hardware
from sim.llamacpp.fit import resolve
from sim.llamacpp.memory import DeviceMemory, out_of_memory
from sim.llamacpp.params import CostParams
from sim.llamacpp.placement import CPU, ModelTensors, Placement
from sim.llamacpp.routing import DRIFT_WEIGHT, batch_inclusion, model_exponent

OS_RESERVED_GIB = 2.0  # assumed: host RAM the OS and its other programs keep (GiB); a mapping gets what is left


@dataclass
class LlamaSetup:
    """The engine once loaded: its settings, model, placement, every device's memory, and its cost engine."""

    machine: str
    settings: LlamaCpp
    model_name: str
    tensors: ModelTensors
    memory: list[DeviceMemory]
    engine: Engine
    threads: int
    os: str
    notes: list[str]
    backend: str = "cuda"
    prompt_engine: Engine | None = None  # the engine prompts run on when -tb differs from -t (None: ``engine``)

    @property
    def prompt(self) -> Engine:
        """The engine of a prompt's batches: its CPU computes with -tb threads."""
        return self.prompt_engine if self.prompt_engine is not None else self.engine

    @property
    def placement(self) -> Placement:
        return self.engine.placement

    def vram_gib(self) -> float:
        return sum(m.total for m in self.memory if m.device != CPU) / GIB

    def ram_gib(self) -> float:
        return sum(m.total for m in self.memory if m.device == CPU) / GIB


@functools.cache
def dual_issue(gpu_type: str) -> float:
    """How many times a card's published FP32 rate counts each ALU (AMD RDNA 3/4's dual issue counts 2: the catalog's
    shader_flop_per_clk 4). llama.cpp's vector kernels are not compiled into dual-issue pairs, so they run at the
    single-issue rate (assumed: the compilers' VOPD pairing is the exception in compute kernels)."""
    from sim.catalog import gpu_entries

    return float(gpu_entries().get(gpu_type, {}).get("shader_flop_per_clk", 2)) / 2.0


def cpu_peak_flops(host, threads: int) -> float:
    """The FP32 SIMD peak (FLOP/s) ``threads`` threads get: one per core, performance cores first (clock x FLOPs per
    cycle each); 0 when the host's clock or SIMD width is not known (a run that computes on the CPU then says so)."""
    cores = host.cores or 1
    if not host.boost_ghz or not host.fp32_flops_per_cycle:
        return 0.0
    e = host.e_cores or 0
    used = min(threads, cores)
    p_used = min(used, cores - e)
    peak = p_used * host.boost_ghz * host.fp32_flops_per_cycle
    if used > p_used and host.e_boost_ghz and host.e_fp32_flops_per_cycle:
        peak += (used - p_used) * host.e_boost_ghz * host.e_fp32_flops_per_cycle
    return peak * 1e9


def _cpu_device(scn: Scenario, machine: str, threads: int, p: CostParams, ram_resident: float,
                cpu_weights: float) -> Device:
    m = scn.machines[machine]
    host = m.host
    paper = host.paper_gbps if host is not None else None
    if paper is None:
        raise ScenarioError("scenario", f"machines.{machine}.host", "missing: a host type, or dram_gbps, or "
                            "channels and mt_s (the CPU's weights are read at its DRAM bandwidth)")
    assert host is not None
    peak = cpu_peak_flops(host, threads)
    disk_bps = 0.0
    if m.disk is not None and m.disk in scn.disks and scn.disks[m.disk].read_gbps:
        disk_bps = float(scn.disks[m.disk].read_gbps) * GB
    resident = 1.0 if cpu_weights <= 0 else min(1.0, max(ram_resident, 0.0) / cpu_weights)
    return Device(CPU, "cpu", paper * GB, peak, peak, thread_bps=threads * p.get("cpu_thread_gbps") * GB,
                  resident_share=resident if disk_bps > 0 else 1.0, disk_bps=disk_bps, isa=host.isa or "")


def setup_llamacpp(scn: Scenario, machine: str, settings: LlamaCpp | None = None,
                   params: CostParams | None = None) -> LlamaSetup:
    """The engine on ``machine`` with its scenario settings (or ``settings``); raises SimulationError when a card
    cannot hold its allocations and the driver does not fall back to system memory."""
    m = scn.machines[machine]
    assert m.engine is not None
    s = settings if settings is not None else m.engine.llamacpp
    assert s is not None
    s, fitted = resolve(scn, machine, s)
    a = allocations(scn, machine, s, params)
    backend, keys, names, cards, paths, p = a.backend, a.keys, a.names, a.cards, a.paths, a.params
    host, os_name, spec, tensors, placement, flash, memory = m.host, a.os_name, scn.models[m.engine.model], \
        a.tensors, a.placement, a.flash_attn, a.memory
    fallback = s.sysmem_fallback if s.sysmem_fallback is not None else os_name == "windows"
    notes = [] if fitted is None else [fitted.summary()]
    for mem in memory:
        if mem.excess > 0:
            if not fallback:
                raise SimulationError(out_of_memory(mem, backend))
            notes.append(f"{mem.device}: {mem.excess / GIB:.2f} GiB beyond VRAM in shared system memory (the "
                         "driver's sysmem fallback): the card reads it over the link")
    cpu_mem = memory[0]
    cpu_gib = cpu_mem.total / GIB
    ram_gib = host.ram_gib if host is not None else None
    if m.kind == "unified" and m.gpus:  # one pool: the CPU's buffers get what the GPU's leave
        ram_gib = pool_gib(scn, m) - sum(mem.total for mem in memory[1:]) / GIB
    ram_for_weights = GIB * ((ram_gib if ram_gib else float("inf")) - OS_RESERVED_GIB) - (cpu_mem.kv + cpu_mem.compute)
    cores = (host.cores if host is not None else None) or 1
    threads = s.threads or cores
    cpu = _cpu_device(scn, machine, threads, p, ram_for_weights if s.mmap else float("inf"), cpu_mem.weights)
    if host is not None and ram_gib is not None and cpu_gib > ram_gib - OS_RESERVED_GIB:
        if s.mmap and cpu.resident_share < 1.0:
            notes.append(f"CPU: {cpu_mem.weights / GIB:.2f} GiB of mapped weights, {cpu.resident_share:.0%} "
                         f"resident in {ram_gib:g} GiB of RAM: the rest is read from the disk every pass")
        else:
            notes.append(f"CPU: {cpu_gib:.2f} GiB of weights, KV and buffers in {ram_gib:g} GiB of host RAM: "
                         "the OS pages the weights from disk each pass (no disk named for the machine: not "
                         "modelled, expect far slower than shown)")
    devices: dict[str, Device] = {CPU: cpu}
    for mem, key, name, card, path in zip(memory[1:], keys, names, cards, paths, strict=True):
        if card.hbm_gbps is None:
            raise ScenarioError("scenario", f"gpus.{m.gpus[key].type}.hbm_gbps", "missing: the card's memory "
                                "bandwidth (GB/s) sets its read rate")
        vector = getattr(card, "fp32_tflops", None)
        if vector is None:
            raise ScenarioError("scenario", f"gpus.{m.gpus[key].type}.fp32_tflops", "missing: the card's FP32 "
                                "vector throughput (TFLOP/s) sets its arithmetic without matrix units")
        vector = vector / dual_issue(m.gpus[key].type)
        peak = card.tflops if uses_matrix_units(path) and card.tflops else vector
        devices[name] = Device(name, backend, card.hbm_gbps * GB, peak * 1e12, vector * 1e12, path,
                               link_info(scn, m, key).gbps * GB, mem.spill_share, soc=card.unified)
    hw = Hardware(devices, p, names[0] if names else None, dram=(host.paper_gbps or 0.0) * GB if host else 0.0,
                  ik_kernels=s.build == "ik_llama.cpp", os=os_name,
                  host_factor=REFERENCE_GHZ / host.boost_ghz if host is not None and host.boost_ghz else 1.0)
    g = tensors.geometry
    expert_min = s.offload_min_batch
    if s.build == "ik_llama.cpp" and "offload_min_batch" not in s.model_fields_set and g.is_moe:
        # ik_llama.cpp offloads a routed-expert op when tokens x experts used >= 32 x experts: each expert it copies
        # then serves at least 32 tokens (ggml-cuda.cu of ik_llama.cpp; docs/research/llamacpp_internals.md)
        expert_min = -(-s.offload_min_batch * g.experts_per_layer // max(g.top_k, 1))
    inclusion: tuple[float, ...] = ()
    if g.is_moe:  # the experts a batch touches follow the model's routing law (sim.llamacpp.routing)
        routing = spec.moe.routing if spec.moe is not None else None
        drift = routing.drift_weight if routing is not None and "drift_weight" in routing.model_fields_set \
            else DRIFT_WEIGHT
        inclusion = batch_inclusion(g.experts_per_layer, g.top_k, model_exponent(spec.file, routing), drift)
    engine = Engine(placement, hw, s.cache_type_k, s.cache_type_v, s.kv_offload, s.op_offload, s.offload_min_batch,
                    expert_offload_min_batch=expert_min, pinned_host=not s.mmap and bool(names), flash_attn=flash,
                    expert_inclusion=inclusion)
    prompt_engine = None
    if s.threads_batch is not None and s.threads_batch != threads:
        from dataclasses import replace

        batch_cpu = _cpu_device(scn, machine, s.threads_batch, p, ram_for_weights if s.mmap else float("inf"),
                                cpu_mem.weights)
        prompt_engine = replace(engine, hw=replace(hw, devices={**devices, CPU: batch_cpu}), _memo={})
    return LlamaSetup(machine, s, m.engine.model, tensors, memory, engine, threads, os_name, notes, backend,
                      prompt_engine)
