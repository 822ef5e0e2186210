"""A small lab of machines as a simpy simulation: FIFO job queues, VRAM residency, loads and decode.

Each machine serves one job at a time from a FIFO queue. A job whose model is not resident loads it through the
machine's load pipeline (page cache, disk, links; machines naming the same disk share it), unloading
least-recently-used models when memory is short; then it decodes at the machine's table rate (slowed when weights
spilled to host RAM). At arrival the dispatcher estimates every machine from a projection of that machine's state
after the jobs already queued there (residency, page cache, free time), using the same loading mechanism, and the
job then really runs, so predicted and simulated completion can be compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import simpy

from sim.config.machines import Machine
from sim.config.scenario import Job, Scenario
from sim.core.errors import SimulationError
from sim.core.units import GIB, MIB
from sim.lab import loading
from sim.lab.decode import decode_tok_s
from sim.lab.dispatch import Decision, Estimate, decide
from sim.lab.loaders import composition, lone_load_s, stage_costs
from sim.lab.pagecache import PageCache
from sim.lab.pipeline import LoadResult, Rig, load
from sim.lab.residency import Residency
from sim.lab.resources import MemoryTarget, has_load_path, memory_targets, model_bytes
from sim.lab.startup import fixed_s


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
class Projection:
    """The dispatcher's view of a machine once the jobs already sent to it have run."""

    free_at_s: float
    residency: Residency
    page_cache: PageCache


@dataclass
class MachineState:
    name: str
    spec: Machine
    targets: list[MemoryTarget]
    rig: Rig
    queue: simpy.Resource
    residency: Residency
    projection: Projection
    stream_gbps: float  # where spilled weights come from, per token (GB/s)


class Lab:
    """Machines of a scenario inside one simpy environment."""

    def __init__(self, scn: Scenario, rng: np.random.Generator, env: simpy.Environment | None = None,
                 exclusive_loads: bool = False):
        """``exclusive_loads``: the caller runs a single job, so no two loads can overlap and each load may be
        simulated as one event (identical result, far fewer events)."""
        self.scn = scn
        self.rng = rng
        self.exclusive_loads = exclusive_loads
        self.env = env or simpy.Environment()
        disks = {name: simpy.Resource(self.env, 1) for name in scn.disks}
        self.machines: dict[str, MachineState] = {}
        for name, spec in scn.machines.items():
            if not has_load_path(spec):
                continue  # a machine with no disk takes no jobs
            targets = memory_targets(scn, spec)
            cache = PageCache(spec.page_cache_gib * GIB)
            costs = stage_costs(scn, spec)
            rig = Rig.build(self.env, costs, cache, [t.name for t in targets if t.link_gbps], disks[spec.disk])
            links = [t.link_gbps for t in targets if t.link_gbps]
            residency = Residency(targets)
            for model in spec.page_cache_models:
                cache.warm(model, self.plan(residency, model).sizes)
            for i, model in enumerate(spec.resident_models):
                if not self._fits(residency, model) and spec.on_overflow == "error":
                    raise SimulationError(f"machines.{name}.resident_models.{i}: {self._no_fit(residency, model)}")
                self._make_resident(residency, model)
                if len(residency.models) < i + 1:
                    raise SimulationError(f"machines.{name}.resident_models: {', '.join(spec.resident_models)} do not "
                                          f"fit in {residency.capacity_bytes() / GIB:.1f} GiB together")
            ms = MachineState(name, spec, targets=targets, rig=rig, queue=simpy.Resource(self.env, 1),
                              residency=residency,
                              projection=Projection(spec.busy_until_s, residency.copy(), cache.copy()),
                              stream_gbps=min(links) if links else costs.disk_gbps)
            if spec.busy_until_s > 0:
                self.env.process(self._busy(ms, spec.busy_until_s))
            self.machines[name] = ms
        self.records: list[JobRecord] = []

    # -- mechanism glue ------------------------------------------------------------------------------------------
    def plan(self, residency: Residency, model: str, free: list[float] | None = None) -> loading.ChunkPlan:
        """Chunks of ``model`` over the residency's memory targets, given free bytes per target (default: all)."""
        spec = self.scn.models[model]
        chunk = self.scn.loading.chunk_mib * MIB
        targets = residency.targets
        free = free if free is not None else [t.capacity_bytes for t in targets]
        return loading.plan_chunks(model, model_bytes(self.scn, model), tensors=spec.tensors, chunk_bytes=chunk,
                                   targets=targets, free_bytes=free)

    def _make_resident(self, residency: Residency, model: str) -> loading.ChunkPlan:
        """Unload least-recently-used models until ``model`` fits (or spills), place it, return its plan."""
        plan = self.plan(residency, model, residency.make_room(model_bytes(self.scn, model)))
        residency.add(model, plan)
        return plan

    def _fits(self, residency: Residency, model: str) -> bool:
        return model_bytes(self.scn, model) <= residency.capacity_bytes() * (1 + 1e-12)

    def _no_fit(self, residency: Residency, model: str) -> str:
        return (f"{model} needs {model_bytes(self.scn, model) / GIB:.1f} GiB, "
                f"{residency.capacity_bytes() / GIB:.1f} GiB usable (on_overflow: error)")

    def _predict(self, ms: MachineState, model: str, commit: bool) -> tuple[float, float]:
        """(load seconds, spilled bytes) the mechanism predicts on the projected state; ``commit`` applies the job."""
        proj = ms.projection
        if model in proj.residency:
            if commit:
                proj.residency.touch(model)
            return 0.0, proj.residency.spilled_bytes(model)
        residency = proj.residency if commit else proj.residency.copy()
        cache = proj.page_cache if commit else proj.page_cache.copy()
        plan = self._make_resident(residency, model)
        costs = ms.rig.costs
        cached = cache.read_all(plan.file, plan.sizes, direct=costs.direct)
        return fixed_s(ms.spec) + lone_load_s(self.scn, costs, plan, cached), plan.spilled_bytes

    def estimate(self, ms: MachineState, job: Job) -> Estimate:
        rate = ms.spec.decode_tok_s.get(job.model)
        if rate is None:
            return Estimate(ms.name, False, why_not=f"no decode rate for {job.model}")
        if not self._fits(ms.residency, job.model) and ms.spec.on_overflow == "error":
            return Estimate(ms.name, False, why_not=self._no_fit(ms.residency, job.model))
        load_s, spilled = self._predict(ms, job.model, commit=False)
        rate = decode_tok_s(rate, spilled, ms.stream_gbps)
        wait = max(0.0, ms.projection.free_at_s - self.env.now)
        return Estimate(ms.name, True, wait_s=wait, load_s=load_s, decode_s=job.tokens / rate, decode_tok_s=rate,
                        spilled_gib=spilled / GIB)

    def _decode_rate(self, ms: MachineState, model: str) -> float:
        base = decode_tok_s(ms.spec.decode_tok_s[model], ms.residency.spilled_bytes(model), ms.stream_gbps)
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
        plan = self._make_resident(ms.residency, model)
        fixed = fixed_s(ms.spec)
        if fixed > 0:  # the server's process, GPU contexts, KV allocation and warm-up (sim.lab.startup)
            yield self.env.timeout(fixed)
        result = yield self.env.process(load(ms.rig, plan, model=model, composition=composition(self.scn, ms.rig.costs),
                                             buffer_chunks=self.scn.loading.buffer_chunks,
                                             exclusive=self.exclusive_loads))
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
        rec = JobRecord(job_id, job.model, tokens=job.tokens, arrival_s=job.arrival_s, estimates=estimates,
                        decision=decision)
        self.records.append(rec)
        if decision.chosen is None:
            return rec
        ms = self.machines[decision.chosen]
        est = next(e for e in estimates if e.machine == ms.name)
        rec.predicted_completion_s = env.now + est.total_s
        self._predict(ms, job.model, commit=True)
        ms.projection.free_at_s = max(env.now, ms.projection.free_at_s) + est.load_s + est.decode_s
        with ms.queue.request() as req:
            yield req
            rec.start_s = env.now
            if job.model in ms.residency:
                ms.residency.touch(job.model)
            else:
                result = yield env.process(self.run_load(ms, job.model))
                rec.load = result
                rec.load_s = env.now - rec.start_s  # the whole start: its fixed phases and the weights
            rec.spilled_gib = ms.residency.spilled_bytes(job.model) / GIB
            rec.decode_tok_s = self._decode_rate(ms, job.model)
            rec.decode_s = job.tokens / rec.decode_tok_s
            yield env.timeout(rec.decode_s)
            rec.completed_s = env.now
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
            try:
                lab = Lab(_initial_for_job(scn, job), rng, exclusive_loads=True)
            except SimulationError as exc:
                if job.resident_on is None:
                    raise
                raise SimulationError(f"jobs.{job_id}.resident_on: {str(exc).split(': ', 1)[1]} "
                                      "(as resident on the machines listed)") from None
            proc = lab.env.process(lab.job(job_id, job))
            lab.env.run()
            out.append(proc.value)
        return out
    lab = Lab(scn, rng)
    procs = [lab.env.process(lab.job(job_id, scn.jobs[job_id])) for job_id in order]
    lab.env.run()
    return [p.value for p in procs]


def single_job_completion_s(scn: Scenario, machine: str, model: str, tokens: int, rng: np.random.Generator) -> float:
    """Simulated completion time of one job pinned to ``machine``, from the scenario's initial state."""
    lab = Lab(scn, rng, exclusive_loads=True)
    proc = lab.env.process(lab.job("probe", Job(model=model, tokens=tokens), force_machine=machine))
    lab.env.run()
    rec: JobRecord = proc.value
    if rec.machine is None:
        raise SimulationError(f"{machine} cannot run {model}: {rec.decision.reason}")
    return rec.completed_s
