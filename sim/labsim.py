"""A small lab of machines as a simpy simulation: FIFO job queues, VRAM residency, loads and decode.

Each machine serves one job at a time from a FIFO queue. A job that needs a model that is not resident loads it
through the machine's shared load pipeline (page cache, disk, links), evicting least-recently-used resident models
when VRAM is short; then it decodes at the machine's table rate. The dispatcher estimates every machine at the
job's arrival, from the same loading mechanism, and the job then really runs, so predicted and simulated
completion can be compared.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import simpy

from . import loading
from .dispatch import Decision, Estimate, decide
from .hardware import MemoryTarget, memory_targets, model_bytes, stage_costs
from .loadsim import LoadResult, Rig, load
from .pagecache import PageCache
from .scenario import Job, Machine, Scenario
from .units import GIB, MIB


@dataclass
class JobRecord:
    id: str
    model: str
    tokens: int
    arrival_s: float
    estimates: list[Estimate]
    decision: Decision
    predicted_completion_s: float = math.nan
    start_s: float = math.nan
    load_s: float = 0.0
    decode_s: float = 0.0
    completed_s: float = math.nan
    decode_tok_s: float = math.nan
    spilled_gib: float = 0.0
    load: LoadResult | None = None

    @property
    def machine(self) -> str | None:
        return self.decision.chosen

    @property
    def wait_s(self) -> float:
        return self.start_s - self.arrival_s


@dataclass
class MachineState:
    """One machine inside a simulation: its load rig, queue, resident models and the dispatcher's projections."""

    name: str
    spec: Machine
    targets: list[MemoryTarget]
    rig: Rig
    queue: simpy.Resource
    resident: OrderedDict[str, list[float]] = field(default_factory=OrderedDict)  # model -> bytes per target, LRU first
    projected_free_s: float = 0.0
    projected_models: set[str] = field(default_factory=set)

    def free_bytes(self) -> list[float]:
        used = np.zeros(len(self.targets))
        for placed in self.resident.values():
            used += placed
        return [t.capacity_bytes - u for t, u in zip(self.targets, used, strict=True)]

    def capacity_bytes(self) -> float:
        return sum(t.capacity_bytes for t in self.targets)


class Lab:
    """Machines of a scenario inside one simpy environment."""

    def __init__(self, scn: Scenario, rng: np.random.Generator, env: simpy.Environment | None = None):
        self.scn = scn
        self.rng = rng
        self.env = env or simpy.Environment()
        self.machines: dict[str, MachineState] = {}
        for name, spec in scn.machines.items():
            targets = memory_targets(scn, spec)
            cache = PageCache(spec.page_cache_gib * GIB)
            rig = Rig.build(self.env, stage_costs(scn, spec), cache, [t.name for t in targets if t.link_gbps])
            ms = MachineState(name, spec, targets, rig, simpy.Resource(self.env, 1), projected_free_s=spec.busy_until_s)
            for model in spec.page_cache_models:
                cache.warm(model, self.plan(ms, model).sizes)
            for model in spec.resident_models:
                self._make_resident(ms, model)
            if spec.busy_until_s > 0:
                self.env.process(self._busy(ms, spec.busy_until_s))
            self.machines[name] = ms
        self.records: list[JobRecord] = []

    # -- mechanism glue ------------------------------------------------------------------------------------------
    def plan(self, ms: MachineState, model: str, free: list[float] | None = None) -> loading.ChunkPlan:
        spec = self.scn.models[model]
        chunk = self.scn.loading.chunk_mib * MIB
        free = free if free is not None else [t.capacity_bytes for t in ms.targets]
        return loading.plan_chunks(model, model_bytes(self.scn, model), spec.tensors, chunk, ms.targets, free)

    def _free_after_eviction(self, ms: MachineState, need: float, commit: bool) -> list[float]:
        """Free bytes per target after unloading LRU resident models until ``need`` bytes fit (or none are left)."""
        evictable = list(ms.resident)
        free = ms.free_bytes()
        while sum(free) < need and evictable:
            victim = evictable.pop(0)
            free = [f + b for f, b in zip(free, ms.resident[victim], strict=True)]
            if commit:
                del ms.resident[victim]
        return free

    def _make_resident(self, ms: MachineState, model: str) -> loading.ChunkPlan:
        free = self._free_after_eviction(ms, model_bytes(self.scn, model), commit=True)
        plan = self.plan(ms, model, free)
        ms.resident[model] = list(plan.placed_bytes)
        return plan

    def fits(self, ms: MachineState, model: str) -> bool:
        return model_bytes(self.scn, model) <= ms.capacity_bytes() * (1 + 1e-12)

    def predict_load_s(self, ms: MachineState, model: str) -> float:
        """Load time the loading mechanism predicts now (0 when resident or projected resident by queued jobs)."""
        if model in ms.resident or model in ms.projected_models:
            return 0.0
        free = self._free_after_eviction(ms, model_bytes(self.scn, model), commit=False)
        plan = self.plan(ms, model, free)
        cached = np.array([ms.rig.page_cache.contains((plan.file, i)) for i in range(plan.n)], dtype=bool)
        times = loading.stage_times(plan, ms.rig.costs, cached)
        return loading.load_time(times, self.scn.loading.composition)

    def estimate(self, ms: MachineState, job: Job) -> Estimate:
        rate = ms.spec.decode_tok_s.get(job.model)
        if rate is None:
            return Estimate(ms.name, False, why_not=f"no decode rate for {job.model}")
        if not self.fits(ms, job.model) and ms.spec.on_overflow == "error":
            need = model_bytes(self.scn, job.model) / GIB
            return Estimate(ms.name, False, why_not=f"{job.model} needs {need:.1f} GiB, "
                            f"{ms.capacity_bytes() / GIB:.1f} GiB usable (on_overflow: error)")
        wait = max(0.0, ms.projected_free_s - self.env.now)
        return Estimate(ms.name, True, wait, self.predict_load_s(ms, job.model), job.tokens / rate, rate)

    def _decode_rate(self, ms: MachineState, model: str) -> float:
        base = ms.spec.decode_tok_s[model]
        cv = ms.spec.decode_jitter_cv
        if cv <= 0:
            return base
        sigma2 = math.log1p(cv * cv)
        return base * float(self.rng.lognormal(-sigma2 / 2, math.sqrt(sigma2)))

    # -- processes -----------------------------------------------------------------------------------------------
    def _busy(self, ms: MachineState, until_s: float):
        with ms.queue.request() as req:
            yield req
            yield self.env.timeout(until_s)

    def run_load(self, ms: MachineState, model: str):
        """simpy process: make ``model`` resident on ``ms`` through the load pipeline."""
        plan = self._make_resident(ms, model)
        result = yield self.env.process(load(ms.rig, plan, model, self.scn.loading.composition,
                                             self.scn.loading.buffer_chunks))
        return result

    def job(self, job_id: str, job: Job, force_machine: str | None = None):
        """simpy process: arrive, get dispatched, queue, load if needed, decode."""
        env = self.env
        yield env.timeout(job.arrival_s)
        estimates = [self.estimate(ms, job) for ms in self.machines.values()]
        if force_machine is not None:
            est = next(e for e in estimates if e.machine == force_machine)
            decision = Decision(force_machine if est.eligible else None, False, (force_machine,),
                                "forced" if est.eligible else est.why_not)
        else:
            decision = decide(estimates, self.scn.dispatch.tie_threshold, self.scn.dispatch.tie_break)
        rec = JobRecord(job_id, job.model, job.tokens, job.arrival_s, estimates, decision)
        self.records.append(rec)
        if decision.chosen is None:
            return rec
        ms = self.machines[decision.chosen]
        est = next(e for e in estimates if e.machine == ms.name)
        rec.predicted_completion_s = env.now + est.total_s
        ms.projected_free_s = max(env.now, ms.projected_free_s) + est.load_s + est.decode_s
        ms.projected_models.add(job.model)
        with ms.queue.request() as req:
            yield req
            rec.start_s = env.now
            if job.model in ms.resident:
                ms.resident.move_to_end(job.model)
            else:
                result = yield env.process(self.run_load(ms, job.model))
                rec.load = result
                rec.load_s = result.wall_s
                rec.spilled_gib = result.spilled_bytes / GIB
            rate = self._decode_rate(ms, job.model)
            rec.decode_tok_s = rate
            rec.decode_s = job.tokens / rate
            yield env.timeout(rec.decode_s)
            rec.completed_s = env.now
        if not any(r.model == job.model and math.isnan(r.completed_s) and r.machine == ms.name
                   for r in self.records):
            ms.projected_models.discard(job.model)
        return rec


def _initial_for_job(scn: Scenario, job: Job) -> Scenario:
    """per_job isolation: the initial machine state, with the job's model resident exactly where it says."""
    if job.resident_on is None:
        return scn
    machines = {}
    for name, m in scn.machines.items():
        models = [x for x in m.resident_models if x != job.model]
        if name in job.resident_on:
            models.append(job.model)
        machines[name] = m.model_copy(update={"resident_models": models})
    return scn.model_copy(update={"machines": machines})


def run_jobs(scn: Scenario, rng: np.random.Generator) -> list[JobRecord]:
    """Run every job of the scenario; returns the records in job order."""
    order = list(scn.jobs)
    if scn.dispatch.isolation == "per_job":
        out = []
        for job_id in order:
            job = scn.jobs[job_id]
            lab = Lab(_initial_for_job(scn, job), rng)
            proc = lab.env.process(lab.job(job_id, job))
            lab.env.run()
            out.append(proc.value)
        return out
    lab = Lab(scn, rng)
    procs = [lab.env.process(lab.job(job_id, scn.jobs[job_id])) for job_id in order]
    lab.env.run()
    return [p.value for p in procs]


def single_job_completion_s(scn: Scenario, machine: str, model: str, tokens: int, seed: int) -> float:
    """Simulated completion time of one job pinned to ``machine``, from the scenario's initial state.

    A fresh generator from ``seed`` for every call (common random numbers), so that completion is monotone in tokens.
    """
    lab = Lab(scn, np.random.default_rng(seed))
    proc = lab.env.process(lab.job("probe", Job(model=model, tokens=tokens), force_machine=machine))
    lab.env.run()
    rec: JobRecord = proc.value
    if rec.machine is None:
        raise ValueError(f"{machine} cannot run {model}: {rec.decision.reason}")
    return rec.completed_s
