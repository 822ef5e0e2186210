"""A llama.cpp engine from a scenario: the model's tensors, their placement, each device's allocations, the
hardware's rates; or why it cannot load."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sim.config.links import link_info
from sim.config.llamacpp import LlamaCpp
from sim.config.scenario import Scenario
from sim.core.errors import ScenarioError, SimulationError
from sim.core.units import GIB
from sim.llamacpp.costs import Engine, Hardware, Rates, cpu_rates, gpu_rates
from sim.llamacpp.memory import DeviceMemory, device_memory, out_of_memory
from sim.llamacpp.params import CostParams
from sim.llamacpp.placement import CPU, ModelTensors, Placement, model_tensors, parse_rules, place
from sim.modelfiles.geometry import ModelGeometry


@functools.lru_cache(maxsize=64)
def _geometry(path: str, quant: str | None) -> ModelGeometry:
    from sim.modelfiles import read_model_file

    return read_model_file(path, quant)


@functools.lru_cache(maxsize=64)
def placement_model(path: str, quant: str | None, weights_gib: float) -> ModelTensors:
    """The model's tensors, scaled to the file's size (GiB)."""
    return model_tensors(_geometry(path, quant), weights_gib * GIB)


@functools.lru_cache(maxsize=4096)
def _placed(path: str, quant: str | None, weights_gib: float, ngl: int, n_cpu_moe: int, cpu_moe: bool,
            rules: tuple[str, ...], gpus: tuple[str, ...], split: tuple[float, ...]) -> Placement:
    """A placement, computed once per model and flags (a sweep or a fit asks for the same ones many times)."""
    parsed = parse_rules(list(rules), "scenario", "override_tensor", gpus)
    return place(placement_model(path, quant, weights_gib), n_gpu_layers=ngl, gpus=gpus, split=list(split),
                 rules=parsed, n_cpu_moe=n_cpu_moe, cpu_moe=cpu_moe)


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

    @property
    def placement(self):
        return self.engine.placement

    def vram_gib(self) -> float:
        return sum(m.total for m in self.memory if m.device != CPU) / GIB

    def ram_gib(self) -> float:
        return sum(m.total for m in self.memory if m.device == CPU) / GIB


def gpu_names(scn: Scenario, machine: str) -> tuple[list[str], tuple[str, ...]]:
    """The machine's GPU keys, the engine's own first (llama.cpp's CUDA0), and their llama.cpp names."""
    m = scn.machines[machine]
    assert m.engine is not None
    keys = [m.engine.gpu] + [k for k in m.gpus if k != m.engine.gpu]
    return keys, tuple(f"CUDA{i}" for i in range(len(keys)))


def setup_llamacpp(scn: Scenario, machine: str, settings: LlamaCpp | None = None,
                   params: CostParams | None = None) -> LlamaSetup:
    """The engine on ``machine`` with its scenario settings (or ``settings``); raises SimulationError when a card
    cannot hold its allocations and the driver does not fall back to system memory."""
    m = scn.machines[machine]
    assert m.engine is not None
    s = settings if settings is not None else m.engine.llamacpp
    assert s is not None
    p = params if params is not None else CostParams.of(s.costs)
    spec = scn.models[m.engine.model]
    if spec.file is None:
        raise ScenarioError("scenario", f"models.{m.engine.model}.file", "missing: a llama.cpp engine reads its "
                            "model's tensors from a config.json or a .gguf file")
    tensors = placement_model(spec.file, spec.quant, spec.weights_gib)
    keys, names = gpu_names(scn, machine)
    host = m.host
    os_name = host.os if host is not None else "linux"
    free: dict[str, float] = {}
    for key, name in zip(keys, names, strict=True):
        card = scn.gpus[m.gpus[key].type]
        reserved = m.gpus[key].reserved_gib + (p.windows_reserved_gib if os_name == "windows" else 0.0)
        free[name] = max(card.vram_gib - reserved, 0.0) * GIB
    split = s.tensor_split or [free[n] for n in names]
    if len(split) != len(names):
        raise ScenarioError("scenario", f"machines.{machine}.engine.llamacpp.tensor_split",
                            f"{len(split)} shares: expected one per GPU of the machine ({len(names)})")
    parse_rules(s.override_tensor, "scenario", f"machines.{machine}.engine.llamacpp.override_tensor", names)
    placement = _placed(spec.file, spec.quant, spec.weights_gib, s.n_gpu_layers, s.n_cpu_moe, s.cpu_moe,
                        tuple(s.override_tensor), names, tuple(split))
    ubatch = min(s.ubatch_size, s.batch_size)
    memory = device_memory(placement, ctx_size=s.ctx_size, ubatch=ubatch, cache_type_k=s.cache_type_k,
                           cache_type_v=s.cache_type_v, flash_attn=s.flash_attn is not False,
                           kv_offload=s.kv_offload, free_bytes=free, cuda_context_mib=p.cuda_context_mib)
    fallback = s.sysmem_fallback if s.sysmem_fallback is not None else os_name == "windows"
    notes = []
    for mem in memory:
        if mem.excess > 0:
            if not fallback:
                raise SimulationError(out_of_memory(mem))
            notes.append(f"{mem.device}: {mem.excess / GIB:.2f} GiB beyond VRAM in shared system memory (the "
                         "driver's sysmem fallback): the card reads it over the link")
    cpu_gib = memory[0].total / GIB
    if host is not None and host.ram_gib is not None and cpu_gib > host.ram_gib:
        notes.append(f"CPU: {cpu_gib:.2f} GiB of weights, KV and buffers in {host.ram_gib:g} GiB of host RAM: the OS "
                     "pages the weights from disk each pass (not modelled: expect far slower than shown)")
    cores = (host.cores if host is not None else None) or 1
    threads = s.threads or cores
    paper = host.paper_gbps if host is not None else None
    if paper is None:
        raise ScenarioError("scenario", f"machines.{machine}.host", "missing: a host type, or dram_gbps, or "
                            "channels and mt_s (the CPU's weights are read at its DRAM bandwidth)")
    rates: dict[str, Rates] = {CPU: cpu_rates(paper, cores, threads, p, s.build)}
    for mem, key, name in zip(memory[1:], keys, names, strict=True):
        card = scn.gpus[m.gpus[key].type]
        if card.hbm_gbps is None:
            raise ScenarioError("scenario", f"gpus.{m.gpus[key].type}.hbm_gbps", "missing: the card's memory "
                                "bandwidth (GB/s) sets its read rate")
        rates[name] = gpu_rates(card.hbm_gbps, card.tflops, link_info(scn, m, key).gbps, mem.spill_share, p)
    hw = Hardware(rates, p, names[0] if names else None, dram=paper * 1e9)
    engine = Engine(placement, hw, s.cache_type_k, s.cache_type_v, s.kv_offload, s.op_offload, s.offload_min_batch,
                    pinned_host=not s.mmap and bool(names))
    return LlamaSetup(machine, s, m.engine.model, tensors, memory, engine, threads, os_name, notes)
