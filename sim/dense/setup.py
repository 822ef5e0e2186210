"""A dense engine once started: the weights and the runtime take their VRAM, the KV pool is what the scheduler's
sizing gives (:mod:`sim.batching.pool`), counted in tokens of context; its iteration costs from the card's specs and
the engine's efficiencies (:class:`sim.batching.cost.StepCost`)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.batching.cost import StepCost
from sim.batching.pool import kv_pool, scheduler_for
from sim.batching.server import Scheduler
from sim.config.engine import Engine
from sim.config.links import link_info
from sim.config.scenario import Scenario
from sim.config.unified import card_capacity_gib
from sim.core.units import GB, GIB, KIB, MIB
from sim.serving.metrics import VramRows


@dataclass(frozen=True)
class DenseSetup:
    """A dense engine once started: its iteration costs, its scheduler and its KV pool."""

    machine: str
    spec: Engine  # the scenario's engine section
    model: str
    cost: StepCost
    scheduler: Scheduler
    kv_pool_tokens: int
    kv_pool_gib: float
    weights_gib: float
    tenants_gib: float
    vram: VramRows

    @property
    def token_budget(self) -> int:
        return self.scheduler.token_budget


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
    capacity = card_capacity_gib(scn, m, e.gpu)
    pool = kv_pool(f"machines.{machine}.engine", e, vram_gib=capacity, tenants_gib=gpu.reserved_gib,
                   weights_gib=spec.weights_gib, kv_kib_per_token=arch.kv_kib_per_token,
                   state_kib_per_sequence=arch.state_kib_per_sequence)
    assert it.memory_efficiency is not None and it.compute_efficiency is not None and it.overhead_s is not None
    assert card.hbm_gbps is not None and card.tflops is not None
    cost = StepCost.build(weights_bytes=spec.weights_gib * GIB, kv_kib_per_token=arch.kv_kib_per_token,
                          params_b=arch.params_b, layers=arch.layers, hidden=arch.hidden,
                          hbm_gbps=card.hbm_gbps, tflops=card.tflops, memory_efficiency=it.memory_efficiency,
                          compute_efficiency=it.compute_efficiency, overhead_s=it.overhead_s,
                          state_kib_per_sequence=arch.state_kib_per_sequence)
    swap = arch.kv_kib_per_token * KIB / (link_info(scn, m, e.gpu).gbps * GB)
    used = (gpu.reserved_gib + pool.engine_gib) * GIB / MIB
    return DenseSetup(machine=machine, spec=e, model=e.model, cost=cost, scheduler=scheduler_for(e, pool, swap),
                      kv_pool_tokens=pool.tokens, kv_pool_gib=pool.gib, weights_gib=spec.weights_gib,
                      tenants_gib=gpu.reserved_gib, vram=((e.gpu, used, capacity * GIB / MIB),))
