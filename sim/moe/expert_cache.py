"""MoE expert caches in VRAM: slot arithmetic, policies, and their analytic companions.

Ids are flat (``layer * experts + expert``), one id per cache slot.

- :func:`auto_slots`: the engine's own sizing, slots = (free VRAM - cache reserve - draft-head reserve) / slot size.
- Static cache: pre-filled hottest-first from a ranked (layer, expert) profile; its hit rate is the popularity mass of
  the cached experts (:func:`static_hit_rate`).
- LRU and LFU, exact, one lookup at a time (the reference the fast paths are checked against; slow by design).
- Che's approximation for LRU under independent references: a characteristic time T solves
  sum_i (1 - exp(-lambda_i T)) = C, and expert i hits with probability 1 - exp(-lambda_i T).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from sim.core.units import GIB, MIB


def auto_slots(free_gib: float, slot_mib: float, reserve_mib: float, draft_reserve_mib: float) -> int:
    """Expert-cache slots the engine allocates from the VRAM free at start (whole slots)."""
    usable_mib = free_gib * GIB / MIB - reserve_mib - draft_reserve_mib
    return max(0, int(usable_mib // slot_mib))


def static_cache(profile: np.ndarray, slots: int) -> np.ndarray:
    """Boolean mask over flat ids of the ``slots`` hottest (layer, expert) pairs of a popularity ``profile`` [L, E].

    The profile is ranked across all layers at once, as the engine's ranked-pairs profile is, so hot layers get more
    slots. It may come from a different workload than the one served.
    """
    flat = profile.ravel()
    mask = np.zeros(flat.size, dtype=bool)
    if slots > 0:
        mask[np.argsort(-flat, kind="stable")[:slots]] = True
    return mask


def static_hit_rate(mask: np.ndarray, popularity: np.ndarray) -> float:
    """Expected hit rate of a static cache: lookups are spread evenly over layers, each by its layer's popularity."""
    layers = popularity.shape[0]
    return float((popularity.ravel() * mask).sum() / layers)


def che_characteristic_time(rates: np.ndarray, capacity: int) -> float:
    """T with sum_i (1 - exp(-rates_i T)) = capacity (Che et al. 2002)."""
    from scipy.optimize import brentq

    rates = np.asarray(rates, dtype=float)
    if capacity >= np.count_nonzero(rates):
        return np.inf
    f = lambda t: np.sum(-np.expm1(-rates * t)) - capacity  # noqa: E731
    hi = 1.0 / rates[rates > 0].max()
    while f(hi) < 0:
        hi *= 2
    return brentq(f, 0.0, hi, xtol=1e-12 * hi)


def che_hit_probabilities(rates: np.ndarray, capacity: int) -> np.ndarray:
    """Per-item LRU hit probability under independent references (Che's approximation)."""
    t = che_characteristic_time(rates, capacity)
    return np.ones_like(rates, dtype=float) if np.isinf(t) else -np.expm1(-np.asarray(rates, float) * t)


def che_hit_rate(rates: np.ndarray, capacity: int) -> float:
    rates = np.asarray(rates, dtype=float)
    return float((rates * che_hit_probabilities(rates, capacity)).sum() / rates.sum())


def lru_hits(ids: np.ndarray, capacity: int, warm: np.ndarray | None = None) -> np.ndarray:
    """Exact LRU over a stream of ids (one lookup at a time); True where a lookup hits. ``warm``: ids resident first,
    least recently used first."""
    cache: OrderedDict[int, None] = OrderedDict((int(i), None) for i in (warm if warm is not None else ())[-capacity:])
    stream = ids.ravel().tolist()
    hits = np.zeros(len(stream), dtype=bool)
    for n, key in enumerate(stream):
        if key in cache:
            cache.move_to_end(key)
            hits[n] = True
        elif capacity > 0:
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits.reshape(ids.shape)


def lfu_hits(ids: np.ndarray, capacity: int) -> np.ndarray:
    """Exact in-cache LFU: a miss evicts the resident id with the fewest lookups so far (oldest first on ties).
    O(capacity) per miss: a reference for tests and small studies."""
    counts: dict[int, int] = {}
    resident: dict[int, int] = {}  # id -> insertion order
    stream = ids.ravel().tolist()
    hits = np.zeros(len(stream), dtype=bool)
    for n, key in enumerate(stream):
        counts[key] = counts.get(key, 0) + 1
        if key in resident:
            hits[n] = True
        elif capacity > 0:
            if len(resident) >= capacity:
                victim = min(resident, key=lambda k: (counts[k], resident[k]))
                del resident[victim]
            resident[key] = n
    return hits.reshape(ids.shape)


def home_tiers(profile: np.ndarray, slots: int, peer_slots: list[int], host_experts: int | None) -> np.ndarray:
    """Where each expert (flat id) is served from when the VRAM cache does not hold it: ``0 .. P-1`` a peer GPU,
    ``P`` host RAM, ``P + 1`` disk. Placement follows the ranked profile hottest-first, as the engine's start-up
    does: the first ``slots`` fill the VRAM cache (their home when an LRU cache misses them is host RAM, not counted
    against ``host_experts``, the experts it holds that are kept nowhere in VRAM), the next
    ``peer_slots[0]`` go to the first peer GPU and so on, then host RAM holds up to ``host_experts`` (None: all) and
    the rest stay on disk."""
    order = np.argsort(-profile.ravel(), kind="stable")
    peers = len(peer_slots)
    tier = np.full(order.size, peers, dtype=np.int8)
    pos = slots
    for i, n in enumerate(peer_slots):
        tier[order[pos:pos + n]] = i
        pos += n
    if host_experts is not None:
        tier[order[pos + host_experts:]] = peers + 1
    return tier
