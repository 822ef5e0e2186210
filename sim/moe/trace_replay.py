"""What the MoE engine makes of a route trace (:class:`sim.formats.route_trace.RouteTrace`, read by
:mod:`sim.formats` and handed over by :func:`sim.config.route_traces.routing_trace`): a scenario's ``routing.trace``
replayed as the served law (:func:`served_popularity`: each layer's law the one whose inclusion probabilities are the
trace's smoothed frequencies, the reuse the one that gives the trace's mean consecutive overlap), and the hit rate of
a per-layer LRU of token sets started cold for each request (:func:`lru_hit_rates`,
:func:`sim.moe.expert_cache.lru_set_hit_counts`) at any capacity.

The engine reads no file: a trace is anything with the :class:`Routes` shape.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

import numpy as np

from sim.core.errors import ScenarioError
from sim.moe.expert_cache import lru_set_hit_counts
from sim.moe.routing import RoutingLaw, layer_popularity, popularity_from_inclusion, reuse_from_overlap

LRU_CELLS = 2**22  # an LRU replay's routes and recency arrays at a time (caches x (tokens + experts) x top_k)


class Routes(Protocol):
    """A route trace as the engine uses it (:class:`sim.formats.route_trace.RouteTrace`)."""

    path: str
    request: np.ndarray
    experts: np.ndarray

    @property
    def top_k(self) -> int: ...

    @property
    def layers(self) -> int: ...

    @property
    def expert_count(self) -> int: ...

    def groups(self) -> list[tuple[int, int, int, int]]: ...

    def requests(self) -> np.ndarray: ...

    def inclusion(self, experts: int | None = None) -> np.ndarray: ...

    def overlap(self, distance: int = 1) -> tuple[np.ndarray, np.ndarray]: ...

    def per_request_layer(self) -> dict[str, np.ndarray]: ...


def lru_hit_rates(trace: Routes, capacities: list[int]) -> np.ndarray:
    """Hit rate of a per-layer LRU of token sets of each capacity, started cold for each request, pooled over
    requests and layers (hits over references)."""
    groups = sorted(trace.groups(), key=lambda g: g[3] - g[2], reverse=True)  # longest first: batches pad less
    hits, references, i = np.zeros(len(capacities), dtype=np.int64), 0, 0
    while i < len(groups):  # caches in batches of at most LRU_CELLS cells (one long request among short ones)
        length = groups[i][3] - groups[i][2]
        batch = groups[i:i + max(LRU_CELLS // ((length + trace.expert_count) * trace.top_k), 1)]
        routes = np.full((len(batch), length, trace.top_k), -1, dtype=np.int64)
        for j, (_, _, a, b) in enumerate(batch):
            routes[j, :b - a] = trace.experts[a:b]
        hits += lru_set_hit_counts(routes, capacities, trace.expert_count)  # whole numbers: any batching sums
        references += int((routes >= 0).sum())
        i += len(batch)
    return hits / float(references)


def trace_summary(trace: Routes, capacities: list[int] = (8, 16, 32, 64, 128)) -> dict:
    """The trace's statistics in one mapping (:mod:`sim.formats.route_trace`'s, and the LRU hit rates)."""
    o1, who = trace.overlap(1)
    stats = trace.per_request_layer()
    caps = [c for c in capacities if c >= 1]
    return {
        "requests": int(trace.requests().size), "layers": trace.layers, "top_k": trace.top_k,
        "experts": trace.expert_count, "rows": int(trace.request.size),
        "overlap": {d: float(np.mean(trace.overlap(d)[0])) if trace.overlap(d)[0].size else None
                    for d in (1, 2, 4, 8, 16)},
        "overlap_per_request": {int(r): float(o1[who == r].mean()) for r in np.unique(who)},
        "lru_hit_rate": dict(zip(caps, map(float, lru_hit_rates(trace, caps)), strict=True)),
        "reuse_median": float(np.nanmedian(stats["reuse_median"])),
        "reuse_p90_median": float(np.nanmedian(stats["reuse_p90"])),
        "distinct_range": (float(np.nanmin(stats["distinct"])), float(np.nanmax(stats["distinct"]))),
    }


def replay_law(trace: Routes, law: RoutingLaw) -> tuple[np.ndarray, float]:
    """The served law [layers, experts] and reuse a trace gives a model of ``law``'s geometry: the law whose
    inclusion probabilities are the trace's smoothed frequencies, and the reuse of its mean consecutive overlap."""
    path = trace.path
    if trace.layers != law.layers:
        raise ScenarioError(path, "routing.trace", f"{trace.layers} layers in the trace: the model has {law.layers} "
                            "MoE layers")
    if trace.top_k != law.top_k:
        raise ScenarioError(path, "routing.trace", f"{trace.top_k} experts a row: the model routes top_k "
                            f"{law.top_k}")
    if trace.expert_count > law.experts:
        raise ScenarioError(path, "routing.trace", f"expert id {trace.expert_count - 1}: the model has "
                            f"{law.experts} experts per layer")
    pi = trace.inclusion(law.experts)
    overlap = trace.overlap(1)[0]
    reuse = reuse_from_overlap(float(overlap.mean()), pi, law.top_k) if overlap.size else 0.0
    return popularity_from_inclusion(pi), reuse


def served_popularity(law: RoutingLaw, routing, trace: Routes | None = None) -> tuple[np.ndarray, RoutingLaw]:
    """The served popularity [layers, experts] of a scenario's ``routing`` section (sim.config.models.Routing) and
    the law it serves with: Zipf per layer on the ``popularity_seed`` permutation, or the replay of ``trace``, the
    route trace its ``routing.trace`` names (its reuse replacing ``locality``)."""
    if trace is not None:
        popularity, reuse = replay_law(trace, law)
        return popularity, replace(law, locality=reuse)
    return layer_popularity(law, np.random.default_rng(routing.popularity_seed)), law
