"""What llama.cpp would allocate with some settings, before it loads: the model's tensors (read once per file), the
backend and the cards' names, where each tensor goes and every device's memory. The engine (:mod:`sim.llamacpp.setup`)
loads with these; the fit (:mod:`sim.llamacpp.fit`) measures placements with them."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sim.config.llamacpp import LlamaCpp
from sim.config.scenario import Scenario
from sim.config.unified import card_capacity_gib
from sim.core.errors import ScenarioError
from sim.core.units import GIB
from sim.llamacpp.backends import compute_path, default_backend, device_name, flash_attn_auto
from sim.llamacpp.layers import mixers
from sim.llamacpp.memory import DeviceMemory, device_memory
from sim.llamacpp.params import CostParams
from sim.llamacpp.placement import ModelTensors, Placement, model_tensors, parse_rules, place
from sim.modelfiles.geometry import ModelGeometry


@functools.lru_cache(maxsize=64)
def _geometry(path: str, quant: str | None) -> ModelGeometry:
    from sim.modelfiles import read_model_file

    return read_model_file(path, quant)


@functools.lru_cache(maxsize=64)
def placement_model(path: str, quant: str | None, weights_gib: float | None) -> ModelTensors:
    """The model's tensors, scaled to the file's size (GiB) when one is given."""
    return model_tensors(_geometry(path, quant), weights_gib * GIB if weights_gib else None)


@functools.lru_cache(maxsize=4096)
def _placed(path: str, quant: str | None, weights_gib: float | None, ngl: int, n_cpu_moe: int, cpu_moe: bool,
            rules: tuple[str, ...], gpus: tuple[str, ...], split: tuple[float, ...]) -> Placement:
    """A placement, computed once per model and flags (a sweep or a fit asks for the same ones many times)."""
    parsed = parse_rules(list(rules), "scenario", "override_tensor", gpus)
    return place(placement_model(path, quant, weights_gib), n_gpu_layers=ngl, gpus=gpus, split=list(split),
                 rules=parsed, n_cpu_moe=n_cpu_moe, cpu_moe=cpu_moe)


def machine_backend(scn: Scenario, machine: str, settings: LlamaCpp) -> str:
    """The backend the engine runs its cards with: the settings' own, else its first card's vendor's usual one; a
    machine without cards is CPU-only."""
    m = scn.machines[machine]
    if not m.gpus or settings.backend == "cpu":
        return "cpu"
    if settings.backend != "auto":
        return settings.backend
    assert m.engine is not None
    key = m.engine.gpu or next(iter(m.gpus))
    return default_backend(scn.gpus[m.gpus[key].type].vendor)


def gpu_names(scn: Scenario, machine: str, backend: str = "cuda") -> tuple[list[str], tuple[str, ...]]:
    """The machine's GPU keys, the engine's own first (llama.cpp's device 0), and their names under ``backend``
    (none for a CPU-only build)."""
    m = scn.machines[machine]
    assert m.engine is not None
    if backend == "cpu" or not m.gpus:
        return [], ()
    first = m.engine.gpu or next(iter(m.gpus))
    keys = [first] + [k for k in m.gpus if k != first]
    return keys, tuple(device_name(backend, i) for i in range(len(keys)))


@dataclass(frozen=True)
class Allocations:
    """What llama.cpp allocates with some settings, before it loads: the backend, the cards (scenario keys, the names
    the backend gives them, their types, their prompt kernels' paths), the cost parameters, the tensors and where
    each goes, and every device's memory (the CPU first)."""

    backend: str
    keys: list[str]
    names: tuple[str, ...]
    cards: list
    paths: list[str]
    params: CostParams
    os_name: str
    tensors: ModelTensors
    placement: Placement
    flash_attn: bool
    memory: list[DeviceMemory]


def allocations(scn: Scenario, machine: str, s: LlamaCpp, params: CostParams | None = None) -> Allocations:
    """Where llama.cpp would put every tensor and buffer of ``machine`` with settings ``s`` (none of them resolved
    by a fit: :mod:`sim.llamacpp.fit` measures placements with this), whether or not the cards can hold them."""
    m = scn.machines[machine]
    assert m.engine is not None
    backend = machine_backend(scn, machine, s)
    keys, names = gpu_names(scn, machine, backend)
    cards = [scn.gpus[m.gpus[k].type] for k in keys]
    # a card whose matrix throughput is not published is costed on its vector units (Intel publishes XMX in INT8
    # only): the path follows what can be costed
    paths = [compute_path(backend, c.vendor, (c.matrix_units or "tensor_core") if c.tflops else "none",
                          s.vulkan_matrix) for c in cards]
    host = m.host
    os_name = host.os if host is not None else "linux"
    p = params if params is not None else CostParams.of(s.costs, backend=backend, path=paths[0] if paths else None,
                                                        os_name=os_name, isa=host.isa if host is not None else None)
    spec = scn.models[m.engine.model]
    if spec.file is None:
        raise ScenarioError("scenario", f"models.{m.engine.model}.file", "missing: a llama.cpp engine reads its "
                            "model's tensors from a config.json or a .gguf file")
    tensors = placement_model(spec.file, spec.quant, spec.weights_gib)
    free: dict[str, float] = {}
    for key, name in zip(keys, names, strict=True):
        reserved = m.gpus[key].reserved_gib + (p.get("windows_reserved_gib") if os_name == "windows" else 0.0)
        free[name] = max(card_capacity_gib(scn, m, key) - reserved, 0.0) * GIB
    split = s.tensor_split or [free[n] for n in names]
    if len(split) != len(names):
        raise ScenarioError("scenario", f"machines.{machine}.engine.llamacpp.tensor_split",
                            f"{len(split)} shares: expected one per GPU of the machine ({len(names)})")
    parse_rules(s.override_tensor, "scenario", f"machines.{machine}.engine.llamacpp.override_tensor", names)
    placement = _placed(spec.file, spec.quant, spec.weights_gib, s.n_gpu_layers if names else 0, s.n_cpu_moe,
                        s.cpu_moe, tuple(s.override_tensor), names, tuple(split))
    ubatch = min(s.ubatch_size, s.batch_size)
    flash = flash_attn_auto(backend) if s.flash_attn == "auto" else bool(s.flash_attn)
    memory = device_memory(placement, mixers(tensors.geometry), ctx_size=s.ctx_size, ubatch=ubatch,
                           cache_type_k=s.cache_type_k, cache_type_v=s.cache_type_v, flash_attn=flash,
                           kv_offload=s.kv_offload, free_bytes=free,
                           context_mib={n: p.get("context_mib", backend) for n in names}, sequences=s.parallel,
                           backend=backend, op_offload=s.op_offload, stages_host_weights=s.build == "llama.cpp")
    return Allocations(backend, keys, names, cards, paths, p, os_name, tensors, placement, flash, memory)
