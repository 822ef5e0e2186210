"""A dense engine once started: the weights and the runtime take their VRAM, the KV pool is what the scheduler's
sizing gives (:mod:`sim.batching.pool`), counted in tokens of context; its iteration costs from the card's specs and
the engine's efficiencies (:class:`sim.batching.cost.StepCost`)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.batching.cost import StepCost
from sim.batching.families import IterationCosts, iteration_costs
from sim.batching.pool import kv_pool, scheduler_for
from sim.batching.server import Scheduler
from sim.config.engine import Engine, Iteration
from sim.config.links import link_info
from sim.config.operator_profiles import iteration_operators
from sim.config.scenario import Scenario
from sim.config.unified import card_capacity_gib
from sim.core.errors import ScenarioError
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
    tensor_parallel: int = 1  # cards the model is split across
    costs: IterationCosts | None = None  # the efficiencies and overhead used, and where those not given came from

    @property
    def token_budget(self) -> int:
        return self.scheduler.token_budget


def tp_gpus(scn: Scenario, machine: str) -> list[str]:
    """The GPUs a dense engine's tensor parallelism spans: its ``gpu`` and the machine's next ones, in order."""
    m = scn.machines[machine]
    e = m.engine
    assert e is not None and e.gpu is not None
    names = list(m.gpus)
    start = names.index(e.gpu)
    chosen = names[start:start + e.tensor_parallel]
    where = f"machines.{machine}.engine.tensor_parallel"
    if len(chosen) < e.tensor_parallel:
        raise ScenarioError("scenario", where, f"{e.tensor_parallel} cards from {e.gpu} on, but the machine lists "
                            f"{len(chosen)} GPU{'s' if len(chosen) != 1 else ''} from there ({', '.join(chosen)})")
    types = {m.gpus[g].type for g in chosen}
    if len(types) > 1:
        raise ScenarioError("scenario", where, f"cards of several types ({', '.join(sorted(types))}): tensor "
                            "parallelism is modelled over cards of one type")
    return chosen


def setup_dense(scn: Scenario, machine: str) -> DenseSetup:
    m = scn.machines[machine]
    e = m.engine
    assert e is not None
    spec = scn.models[e.model]
    arch = spec.dense
    assert arch is not None
    gpu = m.gpus[e.gpu]
    card = scn.gpus[gpu.type]
    it = e.iteration or Iteration()
    n = e.tensor_parallel
    cards = tp_gpus(scn, machine)
    capacity = card_capacity_gib(scn, m, e.gpu)
    tenants = max(m.gpus[g].reserved_gib for g in cards)
    # each card holds 1/n of the weights and of every token's KV: the pool (in tokens) is one card's
    pool = kv_pool(f"machines.{machine}.engine", e, vram_gib=capacity, tenants_gib=tenants,
                   weights_gib=spec.weights_gib / n, kv_kib_per_token=arch.kv_kib_per_token / n,
                   state_kib_per_sequence=arch.state_kib_per_sequence / n)
    costs = iteration_costs(it.memory_efficiency, it.compute_efficiency, it.overhead_s,
                            getattr(card, "family", None), it.server, it.kv_read_efficiency, it.attention_call_s)
    assert card.hbm_gbps is not None and card.tflops is not None
    links = [link_info(scn, m, g).gbps for g in cards]
    table = iteration_operators(it.operators, n, f"machines.{machine}.engine.iteration.operators")
    cost = StepCost.build(weights_bytes=spec.weights_gib * GIB, kv_kib_per_token=arch.kv_kib_per_token,
                          params_b=arch.params_b, layers=arch.layers, hidden=arch.hidden,
                          hbm_gbps=card.hbm_gbps, tflops=card.tflops, memory_efficiency=costs.memory_efficiency,
                          compute_efficiency=costs.compute_efficiency, overhead_s=costs.overhead_s,
                          state_kib_per_sequence=arch.state_kib_per_sequence, linear_table=table,
                          tensor_parallel=n, allreduce_gbps=it.allreduce_gbps or min(links),
                          allreduce_latency_s=it.allreduce_latency_s, kv_read_efficiency=costs.kv_read_efficiency,
                          attention_call_s=costs.attention_call_s)
    swap = arch.kv_kib_per_token / n * KIB / (min(links) * GB)
    used = (tenants + pool.engine_gib) * GIB / MIB
    vram = tuple((g, used, capacity * GIB / MIB) for g in cards)
    return DenseSetup(machine=machine, spec=e, model=e.model, cost=cost, scheduler=scheduler_for(e, pool, swap),
                      kv_pool_tokens=pool.tokens, kv_pool_gib=pool.gib, weights_gib=spec.weights_gib,
                      tenants_gib=tenants, vram=vram, tensor_parallel=n, costs=costs)
