"""``sim run`` without the CLI: probes every machine's load, runs the jobs, returns metrics and tables."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.config.links import link_info
from sim.config.scenario import Scenario
from sim.core.output import Table
from sim.engines import kind_for
from sim.lab.jobs import JobRecord, run_jobs
from sim.lab.probes import ProbeReport, link_metrics, probe_machine, probe_metrics
from sim.lab.resources import has_load_path
from sim.lab.startup import startup_metrics
from sim.serving.engine import EngineKind, ServeRun


@dataclass
class RunResult:
    """One ``sim run``: each machine's load probes, every job, and the served workload with its engine's kind."""

    scenario: Scenario
    seed: int
    probes: list[ProbeReport]
    jobs: list[JobRecord]
    kind: EngineKind | None = None  # the kind of engine that served, and what it served (both None: nothing)
    serving: ServeRun | None = None
    serve_metrics: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    bench: list[Any] = field(default_factory=list)  # llama-bench tests (sim.llamacpp.bench.BenchRow), when asked
    bench_setup: Any = None  # the engine the bench section's machine loads (sim.llamacpp.setup.LlamaSetup)

    @property
    def engine(self) -> Any:
        """The serving engine as it started (its kind's set-up), or None."""
        return self.serving.setup if self.serving is not None else None

    @property
    def requests(self):
        """The served requests (:class:`sim.serving.served.ServedRequests`); empty when nothing was served."""
        return self.serving.requests if self.serving is not None else []


def report_model(scn: Scenario) -> str | None:
    if scn.report.load_model:
        return scn.report.load_model
    if scn.jobs:
        return next(iter(scn.jobs.values())).model
    return next(iter(scn.models), None)


def run(scn: Scenario, seed: int) -> RunResult:
    rng = np.random.default_rng(seed)
    model = report_model(scn)
    loaders = [name for name, m in scn.machines.items() if has_load_path(m)]
    probes = [probe_machine(scn, name, model) for name in loaders] if model else []
    jobs = run_jobs(scn, rng)
    res = RunResult(scn, seed, probes, jobs)
    res.kind = kind_for(scn)
    if res.kind is not None:  # its own random stream: adding a serve section leaves the jobs' draws unchanged
        res.serving = res.kind.serve(scn, np.random.default_rng([seed, 1]))
        res.serve_metrics = res.kind.metrics(res.serving)
    if scn.bench is not None:
        from sim.llamacpp.bench import largest_setup, run_bench

        res.bench = run_bench(scn)
        res.bench_setup = largest_setup(scn)
    res.metrics = flat_metrics(res)
    return res


def run_record(scn: Scenario, seed: int) -> dict:
    """What a sweep stores of one run: every metric, or why the scenario cannot be simulated at that point."""
    from sim.core.errors import SimulationError

    try:
        res = run(scn, seed)
    except SimulationError as exc:
        return {"metrics": {}, "error": str(exc)}
    return {"metrics": res.metrics, "error": None}


def flat_metrics(res: RunResult) -> dict[str, float]:
    m: dict[str, float] = {}
    for p in res.probes:
        m.update(probe_metrics(p))
        m.update(startup_metrics(p.machine, res.scenario.machines[p.machine], p.cold.wall_s, p.hot.wall_s))
    for name in res.scenario.machines:
        m.update(link_metrics(res.scenario, name))
    m.update(res.serve_metrics)
    for key, value in bench_metrics(res.bench).items():  # a served workload's own rates win over the bench's
        m.setdefault(key, value)
    done = [j for j in res.jobs if not math.isnan(j.completed_s)]
    m["jobs.count"] = len(res.jobs)
    m["jobs.placed"] = len(done)
    m["jobs.ties"] = sum(j.decision.tie for j in res.jobs)
    if done:
        m["jobs.makespan_s"] = max(j.completed_s for j in done)
        m["jobs.mean_abs_prediction_error_s"] = float(np.mean([abs(j.completed_s - j.predicted_completion_s)
                                                               for j in done]))
    for j in res.jobs:
        p = f"job.{j.id}."
        for e in j.estimates:
            if e.eligible:
                m[f"{p}estimate_s.{e.machine}"] = e.total_s
        m[p + "tie"] = float(j.decision.tie)
        if j.machine is not None:
            m.update({p + "predicted_s": j.predicted_completion_s, p + "completed_s": j.completed_s,
                      p + "wait_s": j.wait_s, p + "load_s": j.load_s, p + "decode_s": j.decode_s})
    return {k: float(v) for k, v in m.items() if v is not None and math.isfinite(float(v))}


def bench_metrics(rows: list) -> dict[str, float]:
    """llama-bench's rates: ``bench.TEST.tok_s`` per test, ``prefill_tok_s`` and ``decode_tok_s`` of the first pp and
    tg tests (llama-bench's pp and tg)."""
    m: dict[str, float] = {}
    for r in rows:
        if r.error:
            continue
        m[f"bench.{r.test.replace(' @ ', '_')}.tok_s"] = r.tok_s
        key = "prefill_tok_s" if r.n_prompt else "decode_tok_s"
        m.setdefault(key, r.tok_s)
    return m


def job_dict(j: JobRecord) -> dict:
    return {
        "id": j.id, "model": j.model, "tokens": j.tokens, "arrival_s": j.arrival_s, "machine": j.machine,
        "tie": j.decision.tie, "tied": list(j.decision.tied), "reason": j.decision.reason,
        "estimates_s": {e.machine: e.total_s for e in j.estimates if e.eligible},
        "estimate_parts_s": {e.machine: {"wait_s": e.wait_s, "load_s": e.load_s, "decode_s": e.decode_s}
                             for e in j.estimates if e.eligible},
        "not_eligible": {e.machine: e.why_not for e in j.estimates if not e.eligible},
        "predicted_s": j.predicted_completion_s, "completed_s": j.completed_s,
        "wait_s": j.wait_s if j.machine else None, "load_s": j.load_s, "decode_s": j.decode_s,
        "decode_tok_s": j.decode_tok_s, "spilled_gib": j.spilled_gib,
    }


def summary(res: RunResult, scenario_file: str) -> dict:
    out = {"scenario": res.scenario.name, "scenario_file": scenario_file, "seed": res.seed,
           "metrics": res.metrics, "jobs": [job_dict(j) for j in res.jobs]}
    if res.kind is not None and res.serving is not None:
        out |= res.kind.summary(res.serving)
    if res.bench:
        out["bench"] = [r.as_dict() for r in res.bench]
    return out


LOADS = ("machine", "model", "gb", "fits", "cold_gbps", "hot_gbps", "link_gbps", "disk_s_per_gb", "other_s_per_gb")
LOAD_STAGES = ("machine", "phase", "stage", "seconds", "wall_s")
LINKS = ("machine", "gpu", "card_max", "slot", "negotiated", "paper_gbps", "efficiency", "gbps", "measured")
JOBS = ("id", "model", "tokens", "arrival_s", "machine", "tie", "reason", "predicted_s", "completed_s", "wait_s",
        "load_s", "decode_s", "decode_tok_s", "spilled_gib")
ESTIMATES = ("job", "machine", "eligible", "wait_s", "load_s", "decode_s", "total_s", "chosen", "why_not")


def tables(res: RunResult) -> dict[str, Table]:
    """Tidy tables of the run, each with its columns (a header even with no rows); ``requests`` streams to disk."""
    loads, stages, estimates, jobs = [], [], [], []
    for p in res.probes:
        row = {"machine": p.machine, "model": p.model, "gb": p.gb, "fits": p.fits,
               "cold_gbps": p.cold.gbps, "hot_gbps": p.hot.gbps, "link_gbps": p.link.link_gbps if p.link else None,
               "disk_s_per_gb": p.disk_s_per_gb, "other_s_per_gb": p.other_s_per_gb}
        loads.append(row)
        for phase, r in (("cold", p.cold), ("hot", p.hot), ("link", p.link)):
            if r is None:
                continue
            for stage, sec in (("disk", r.disk_s), ("loader", r.loader_s), ("link", r.link_s)):
                stages.append({"machine": p.machine, "phase": phase, "stage": stage, "seconds": sec,
                               "wall_s": r.wall_s})
    for j in res.jobs:
        for e in j.estimates:
            estimates.append({"job": j.id, "machine": e.machine, "eligible": e.eligible, "wait_s": e.wait_s,
                              "load_s": e.load_s, "decode_s": e.decode_s, "total_s": e.total_s if e.eligible else None,
                              "chosen": e.machine == j.machine, "why_not": e.why_not})
        d = job_dict(j)
        jobs.append({k: d[k] for k in JOBS})
    links = []
    for name, m in res.scenario.machines.items():
        for g in m.gpus:
            li = link_info(res.scenario, m, g)
            links.append({"machine": name, "gpu": g, "card_max": f"Gen{li.card_max_gen} x{li.card_max_lanes}",
                          "slot": f"Gen{li.slot_gen} x{li.slot_lanes}", "negotiated": f"Gen{li.gen} x{li.lanes}",
                          "paper_gbps": li.paper_gbps, "efficiency": li.efficiency, "gbps": li.gbps,
                          "measured": li.measured})
    out = {"loads": Table(LOADS, loads), "load_stages": Table(LOAD_STAGES, stages), "links": Table(LINKS, links),
           "jobs": Table(JOBS, jobs), "estimates": Table(ESTIMATES, estimates)}
    if res.kind is not None and res.serving is not None:
        out |= res.kind.tables(res.serving)
    if res.bench:
        from sim.llamacpp.bench import BENCH_COLUMNS

        out["bench"] = Table(BENCH_COLUMNS, [r.as_dict() for r in res.bench])
    return out
