"""Leave-one-source-out: refit a domain without each held-out group and predict that group's rows.

A group is what the benchmark holds out at once: a source (a table's ``source_id``) together with every other source
measured on one of its machines (a ``setup_id``), transitively, so that no row of a held-out machine ever trains the
fit that predicts it. The figure a note reports is the held-out one; the in-sample fit (every group trained) is kept
beside it for comparison only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from sim.fidelity.domain import Domain, Excluded, Observation, Prediction


@dataclass(frozen=True)
class Result:
    """One observation, what the held-out fit predicted for it, and the in-sample prediction."""

    observation: Observation
    group: str
    held_out: Prediction
    in_sample: Prediction | None = None

    @property
    def error(self) -> float:
        """Held-out relative error (simulated / measured - 1; NaN when the mechanism says the run cannot happen)."""
        return relative_error(self.held_out.value, self.observation.measured)

    @property
    def abs_error(self) -> float:
        """Held-out error in the observation's own unit (simulated - measured)."""
        v = self.held_out.value
        return v - self.observation.measured if math.isfinite(v) else float("nan")

    @property
    def in_sample_error(self) -> float:
        if self.in_sample is None:
            return float("nan")
        return relative_error(self.in_sample.value, self.observation.measured)


def relative_error(simulated: float, measured: float) -> float:
    """simulated / measured - 1, NaN when either is not a finite number or the measured value is 0."""
    if not (math.isfinite(simulated) and math.isfinite(measured)) or measured == 0:
        return float("nan")
    return simulated / measured - 1.0


def groups(observations: Iterable[Observation]) -> dict[str, str]:
    """Each source's group: the sources connected through shared machines (union-find over source and setup ids),
    named by the group's first source in sorted order."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    for o in observations:
        union("source:" + o.source, "machine:" + (o.machine or o.source))
    members: dict[str, list[str]] = {}
    for key in list(parent):
        if key.startswith("source:"):
            members.setdefault(find(key), []).append(key.removeprefix("source:"))
    out: dict[str, str] = {}
    for sources in members.values():
        name = sorted(sources)[0]
        for s in sources:
            out[s] = name
    return out


def _held_out(domain: Domain, train: list[Observation], test: list[Observation]) -> list[Prediction]:
    return domain.predict(domain.fit(train), test)


def run(domain: Domain, workers: int = 1, only: Callable[[str], bool] | None = None,
        in_sample: bool = True) -> tuple[list[Result], list[Excluded]]:
    """Every observation of ``domain`` predicted by a fit without its group (``only``: the groups to hold out, by
    name; the others are still trained on), with the in-sample prediction beside it. ``workers`` > 1 refits groups in
    parallel processes (the domain must be picklable); results are the same either way."""
    observations, excluded = domain.observations()
    group_of = groups(observations)
    by_group: dict[str, list[Observation]] = {}
    for o in observations:
        by_group.setdefault(group_of[o.source], []).append(o)
    names = sorted(g for g in by_group if only is None or only(g))
    jobs = [([o for o in observations if group_of[o.source] != g], by_group[g]) for g in names]
    if workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            held = list(pool.map(_held_out, [domain] * len(jobs), *zip(*jobs, strict=True)))
    else:
        held = [_held_out(domain, train, test) for train, test in jobs]
    inside: dict[str, Prediction] = {}
    if in_sample and observations:
        chosen = [o for g in names for o in by_group[g]]
        inside = dict(zip((o.id for o in chosen), domain.predict(domain.fit(observations), chosen), strict=True))
    results = []
    for g, preds in zip(names, held, strict=True):
        for o, p in zip(by_group[g], preds, strict=True):
            results.append(Result(o, g, p, inside.get(o.id)))
    return results, excluded
