"""Load probes: the three measurements of the field notes, simulated on each machine.

- cold: page cache dropped, then the model is loaded;
- hot: the same load again right after (files now page-cached as far as RAM allows);
- link: host memory -> GPU copy alone (pinned buffer, no disk, no loader), absent on unified memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import simpy

from sim.config.links import link_info
from sim.config.machines import Machine
from sim.config.scenario import Scenario
from sim.core.units import GB, GIB, MIB
from sim.lab.loaders import composition, stage_costs
from sim.lab.loading import plan_chunks
from sim.lab.pagecache import PageCache
from sim.lab.pipeline import LoadResult, Rig, load
from sim.lab.resources import memory_targets


@dataclass(frozen=True)
class ProbeReport:
    machine: str
    model: str
    gb: float
    fits: bool
    cold: LoadResult
    hot: LoadResult
    link: LoadResult | None

    @property
    def disk_s_per_gb(self) -> float:
        """1/cold - 1/hot: the field notes' decomposition."""
        return 1.0 / self.cold.gbps - 1.0 / self.hot.gbps

    @property
    def other_s_per_gb(self) -> float:
        """1/hot: loader plus link seconds per GB."""
        return 1.0 / self.hot.gbps


def probe_machine(scn: Scenario, name: str, model: str, gib: float | None = None) -> ProbeReport:
    """Simulate cold, hot and link-only loads of ``model`` (or of ``gib`` GiB of it) on an otherwise idle machine."""
    m: Machine = scn.machines[name]
    spec = scn.models[model]
    total = (gib if gib is not None else spec.weights_gib) * GIB
    targets = memory_targets(scn, m)
    capacity = [t.capacity_bytes for t in targets]
    fits = total <= sum(capacity) * (1 + 1e-12)
    chunk = scn.loading.chunk_mib * MIB
    plan = plan_chunks(model, total, tensors=spec.tensors, chunk_bytes=chunk, targets=targets, free_bytes=capacity)
    costs = stage_costs(scn, m)
    env = simpy.Environment()
    rig = Rig.build(env, costs, PageCache(m.page_cache_gib * GIB), [t.name for t in targets if t.link_gbps])
    comp, buf = composition(scn, costs), scn.loading.buffer_chunks

    def sequence():
        cold = yield env.process(load(rig, plan, model, comp, buf, exclusive=True))
        hot = yield env.process(load(rig, plan, model, comp, buf, exclusive=True))
        link = None
        if any(t.link_gbps for t in targets):
            # A pinned buffer copied to the GPU: nothing read from disk, no loader work, the same links.
            pinned = Rig.build(env, costs.pinned_copy_only(), PageCache(np.inf), list(rig.links))
            pinned.page_cache.warm(model, plan.sizes)
            link_plan = replace(plan, tensors=np.zeros_like(plan.tensors))
            link = yield env.process(load(pinned, link_plan, model, comp, buf, exclusive=True))
        return cold, hot, link

    proc = env.process(sequence())
    env.run()
    cold, hot, link = proc.value
    return ProbeReport(name, model, gb=total / GB, fits=fits, cold=cold, hot=hot, link=link)


def probe_metrics(rep: ProbeReport) -> dict[str, float]:
    """Flat metrics ``load.<machine>.*`` for one probe report."""
    p = f"load.{rep.machine}."
    out = {
        p + "gb": rep.gb,
        p + "cold_gbps": rep.cold.gbps,
        p + "hot_gbps": rep.hot.gbps,
        p + "cold_s": rep.cold.wall_s,
        p + "hot_s": rep.hot.wall_s,
        p + "disk_s_per_gb": rep.disk_s_per_gb,
        p + "other_s_per_gb": rep.other_s_per_gb,
        p + "spilled_gib": rep.cold.spilled_bytes / GIB,
    }
    for phase, r in (("cold", rep.cold), ("hot", rep.hot)):
        out[f"{p}{phase}.disk_s"] = r.disk_s
        out[f"{p}{phase}.loader_s"] = r.loader_s
        out[f"{p}{phase}.link_s"] = r.link_s
    out[p + "fits"] = float(rep.fits)
    if rep.link is not None:
        out[p + "link_gbps"] = rep.link.link_gbps
        out[p + "link_s"] = rep.link.wall_s
    return out


def link_metrics(scn: Scenario, name: str) -> dict[str, float]:
    m = scn.machines[name]
    out: dict[str, float] = {}
    for gpu in m.gpus:
        li = link_info(scn, m, gpu)
        p = f"link.{name}.{gpu}."
        out.update({p + "gen": li.gen, p + "lanes": li.lanes, p + "paper_gbps": li.paper_gbps, p + "gbps": li.gbps,
                    p + "card_max_gen": li.card_max_gen, p + "card_max_lanes": li.card_max_lanes})
    return out
