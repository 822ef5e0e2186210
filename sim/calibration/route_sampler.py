"""The route trace the MoE engine's lookup sampler draws (:class:`sim.moe.routing.RequestRouter`), as a
:class:`sim.formats.route_trace.RouteTrace`: what ``sim fit-routing`` sets beside a measured trace to check a fitted
law's companions (:mod:`sim.calibration.routing_fit`)."""

from __future__ import annotations

import numpy as np

from sim.formats.route_trace import RouteTrace
from sim.moe.routing import AliasTables, RequestRouter, RoutingLaw, layer_popularity


def sampled_trace(law: RoutingLaw, tokens: np.ndarray, skews: np.ndarray, rng: np.random.Generator,
                  popularity: np.ndarray | None = None) -> RouteTrace:
    """A route trace the lookup sampler draws: request ``j`` routes ``tokens[j]`` tokens with its own skew
    ``skews[j]`` and its own hot set (the law's drift), from ``popularity`` (default: the law's Zipf layers on a
    permutation drawn from ``rng``); expert ids local to their layer."""
    pop = layer_popularity(law, rng) if popularity is None else popularity
    tables = AliasTables.build(pop)
    parts = []
    for j, (n, g) in enumerate(zip(np.asarray(tokens).tolist(), np.asarray(skews).tolist(), strict=True)):
        router = RequestRouter.start(law, tables, rng, pop)
        router.skew = float(g)
        ids = router.next_tokens(int(n)) - (np.arange(law.layers) * law.experts)[None, :, None]
        t, layer = np.meshgrid(np.arange(n), np.arange(law.layers), indexing="ij")
        parts.append((np.full(t.size, j), t.ravel(), layer.ravel(), ids.reshape(-1, law.top_k)))
    req, tok, lay, ex = (np.concatenate([x[i] for x in parts]) for i in range(4))
    order = np.lexsort((tok, lay, req))
    return RouteTrace("sampled", req[order], tok[order], lay[order], ex[order].astype(np.int64))
