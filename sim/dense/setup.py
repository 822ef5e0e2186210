"""A dense engine once started: the weights and the runtime take their VRAM, what other tenants leave beyond that
is the KV pool (or ``iteration.kv_pool_gib``), counted in tokens of context; its iteration costs from the card's
specs and the engine's efficiencies."""

from __future__ import annotations

from dataclasses import dataclass

from sim.config.engine import Engine
from sim.config.scenario import Scenario
from sim.core.errors import SimulationError
from sim.core.units import GIB, MIB
from sim.dense.step import KIB, IterationCost
from sim.serving.metrics import VramRows


@dataclass(frozen=True)
class DenseSetup:
    """A dense engine once started: its iteration costs and its KV pool."""

    machine: str
    spec: Engine  # the scenario's engine section
    model: str
    cost: IterationCost
    token_budget: int  # tokens one iteration processes at most
    kv_pool_tokens: int
    kv_pool_gib: float
    weights_gib: float
    tenants_gib: float
    vram: VramRows


def setup_dense(scn: Scenario, machine: str) -> DenseSetup:
    m = scn.machines[machine]
    e = m.engine
    assert e is not None and e.iteration is not None
    spec = scn.models[e.model]
    arch = spec.dense
    assert arch is not None
    gpu = m.gpus[e.gpu]
    card = scn.gpus[gpu.type]
    it = e.iteration
    left = card.vram_gib - gpu.reserved_gib - spec.weights_gib - e.runtime_gib
    pool = it.kv_pool_gib if it.kv_pool_gib is not None else left
    if left <= 0 or pool > left + 1e-9:
        raise SimulationError(f"machines.{machine}.engine: does not fit on {e.gpu}: {card.vram_gib:g} GiB less other "
                              f"tenants {gpu.reserved_gib:g} GiB, weights {spec.weights_gib:g} GiB and runtime "
                              f"{e.runtime_gib:g} GiB leaves {left:.2f} GiB for a KV pool"
                              + (f" of {pool:g} GiB" if it.kv_pool_gib is not None else ""))
    tokens = int(pool * GIB // (arch.kv_kib_per_token * KIB))
    if tokens < 1:
        raise SimulationError(f"machines.{machine}.engine: a KV pool of {pool:g} GiB holds no token of "
                              f"{arch.kv_kib_per_token:g} KiB")
    assert it.memory_efficiency is not None and it.compute_efficiency is not None and it.overhead_s is not None
    assert card.hbm_gbps is not None and card.tflops is not None
    cost = IterationCost.build(weights_bytes=spec.weights_gib * GIB, kv_kib_per_token=arch.kv_kib_per_token,
                               params_b=arch.params_b, layers=arch.layers, hidden=arch.hidden,
                               hbm_gbps=card.hbm_gbps, tflops=card.tflops, memory_efficiency=it.memory_efficiency,
                               compute_efficiency=it.compute_efficiency, overhead_s=it.overhead_s)
    used = (gpu.reserved_gib + spec.weights_gib + e.runtime_gib + pool) * GIB / MIB
    return DenseSetup(machine=machine, spec=e, model=e.model, cost=cost, token_budget=it.token_budget,
                      kv_pool_tokens=tokens, kv_pool_gib=pool, weights_gib=spec.weights_gib,
                      tenants_gib=gpu.reserved_gib, vram=((e.gpu, used, card.vram_gib * GIB / MIB),))
