"""MoE expert caches in VRAM: slot arithmetic, policies, and their analytic companions.

Ids are flat (``layer * experts + expert``), one id per cache slot.

- :func:`auto_slots`: the engine's own sizing, slots = (free VRAM - cache reserve - draft-head reserve) / slot size.
- Static cache: pre-filled hottest-first from a ranked (layer, expert) profile of lookup shares (``pi / top_k``, see
  :func:`sim.moe.routing.lookup_shares`); its hit rate is the lookup share of the cached experts
  (:func:`static_hit_rate`).
- LRU and LFU, exact, one lookup at a time (the reference the fast paths are checked against; slow by design), and
  exact LRU of token sets (:func:`lru_set_hit_counts`: a token's experts of a layer requested together, evicted at
  the token's end, as trace studies simulate a per-layer expert cache).
- Che's approximation for LRU under independent references: a characteristic time T solves
  sum_i (1 - exp(-lambda_i T)) = C, and expert i hits with probability 1 - exp(-lambda_i T).
- Its companion with reuse between consecutive tokens (:func:`che_reuse_hit_probabilities`): time counts tokens; an
  expert is in the cache when a token within the last ``T`` referenced it, each token including it as the two-state
  chain of :mod:`sim.moe.routing` does (``pi`` per token, ``b`` after a token without it, ``a = 1 - (1 - pi) b / pi``
  after one with it). ``T`` solves ``sum_i (1 - (1 - pi_i)(1 - b_i)^(T - 1)) = C`` and a reference hits with ``1 - (1
  - a_i)(1 - b_i)^(T - 1)``: Che over the fresh references, every repeat of the previous token a hit (reuse 0:
  Che in discrete time, ``1 - (1 - pi)^T``). :func:`lru_cold_hit_rate`: the same for a cache started empty and
  read for a given number of tokens (the window is ``min(T, tokens so far)``).
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
    """Expected hit rate of a static cache: lookups are spread evenly over layers, each by its layer's lookup shares
    ``popularity`` (rows summing to 1: :func:`sim.moe.routing.lookup_shares` of the routing law)."""
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


def characteristic_time(pi: np.ndarray, b: np.ndarray, capacity: float | np.ndarray) -> np.ndarray:
    """Per row of ``pi``, ``b`` [rows, items], the window ``T`` (tokens) whose expected distinct references fill
    ``capacity`` (one, or one per row): ``sum (1 - (1 - pi)(1 - b)^(T - 1)) = capacity`` for ``T >= 1``, ``T
    sum(pi)`` below one token; inf when the capacity holds every item of positive weight. The occupancy is concave
    and increasing in ``T``, so Newton's method from ``T = 1`` (where it is at most the capacity) rises monotonically
    to the root."""
    pi, b = np.atleast_2d(pi).astype(float), np.atleast_2d(b).astype(float)
    cap = np.broadcast_to(np.asarray(capacity, dtype=float), pi.shape[:1])
    total = pi.sum(axis=1)
    out = np.full(pi.shape[0], np.inf)
    below = cap < total
    out[below] = cap[below] / total[below]
    todo = np.flatnonzero(~below & (cap < (pi > 0).sum(axis=1)))
    if todo.size:
        p, stay = pi[todo], 1.0 - np.minimum(b[todo], 1.0)
        with np.errstate(divide="ignore"):
            log_stay = np.where(stay > 0, np.log(np.where(stay > 0, stay, 1.0)), 0.0)
        want = cap[todo]
        t = np.ones(todo.size)
        live = np.arange(todo.size)
        for _ in range(500):
            w = (1.0 - p[live]) * np.exp((t[live, None] - 1.0) * log_stay[live])
            f = (1.0 - w).sum(axis=1) - want[live]
            slope = -(w * log_stay[live]).sum(axis=1)
            step = np.divide(-f, slope, out=np.zeros_like(f), where=slope > 0)
            t[live] += step
            live = live[step > 1e-10 * t[live]]
            if not live.size:
                break
        out[todo] = t
    return out


def che_reuse_hit_probabilities(pi: np.ndarray, capacity: float, reuse: float) -> np.ndarray:
    """Per item (flat ``pi``: per-token inclusion of every expert one LRU cache holds), the probability that a
    reference hits a warm LRU cache of ``capacity`` slots when consecutive tokens share experts through ``reuse``."""
    from sim.moe.routing import returning

    pi = np.asarray(pi, dtype=float)
    b = returning(pi, reuse)
    t = float(characteristic_time(pi[None], b[None], capacity)[0])
    return _window_hits(pi, b, t)


def _window_hits(pi: np.ndarray, b: np.ndarray, window: float | np.ndarray) -> np.ndarray:
    """Hit probability of a reference whose item is in the cache when referenced within ``window`` tokens."""
    a = 1.0 - np.divide((1.0 - pi) * b, pi, out=np.zeros_like(pi), where=pi > 0)
    w = np.asarray(window, dtype=float)
    if np.ndim(w):
        w = w.reshape(w.shape + (1,) * (pi.ndim - w.ndim))
    if np.all(np.isinf(w)):
        return np.ones_like(pi)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        long = 1.0 - (1.0 - a) * np.power(1.0 - np.minimum(b, 1.0), np.maximum(np.minimum(w, 1e300) - 1.0, 0.0))
    short = a * np.minimum(w, 1.0)
    return np.where(np.isinf(w), 1.0, np.where(w >= 1.0, long, short))


def che_reuse_hit_rate(pi: np.ndarray, capacity: float, reuse: float) -> float:
    """Share of references that hit (weighted by ``pi``)."""
    pi = np.asarray(pi, dtype=float)
    return float((pi * che_reuse_hit_probabilities(pi, capacity, reuse)).sum() / pi.sum())


def lru_cold_hit_rate(pi: np.ndarray, capacity: float, reuse: float, tokens: int | np.ndarray) -> np.ndarray:
    """Per row of ``pi`` [caches, items] (a per-layer cache each), the expected share of the references of
    ``tokens`` tokens (one number, or one per row) that hit an LRU cache of ``capacity`` slots started empty: token
    ``t`` finds an item that a token within the last ``min(T, t - 1)`` referenced (``T``:
    :func:`characteristic_time`), the sum over tokens in closed form (a geometric series while the window grows)."""
    return lru_cold_hit_rates(pi, [capacity], reuse, tokens)[:, 0]


def lru_cold_hit_rates(pi: np.ndarray, capacities: list[float], reuse: float, tokens: int | np.ndarray
                       ) -> np.ndarray:
    """:func:`lru_cold_hit_rate` at several capacities at once: [caches, capacities]."""
    from sim.moe.routing import returning

    pi = np.atleast_2d(np.asarray(pi, dtype=float))
    rows = pi.shape[0]
    caps = np.asarray(capacities, dtype=float)
    b = returning(pi, reuse)
    a = 1.0 - np.divide((1.0 - pi) * b, pi, out=np.zeros_like(pi), where=pi > 0)
    stay = 1.0 - np.minimum(b, 1.0)
    tok = np.broadcast_to(np.asarray(tokens, dtype=float), (rows,))
    refs = pi.sum(axis=1) * tok
    out = np.zeros((rows, caps.size))
    for c, cap in enumerate(caps):
        t_c = characteristic_time(pi, b, cap)
        grow = np.maximum(np.where(np.isinf(t_c), tok - 1, np.minimum(tok - 1, np.ceil(t_c) - 1)), 0.0)
        # tokens 2 .. grow + 1 see a window of t - 1 < T tokens: sum_w (1 - (1 - a) stay^(w - 1)) in closed form
        with np.errstate(divide="ignore", invalid="ignore"):
            series = np.where(b > 0, (1.0 - np.power(stay, grow[:, None])) / np.where(b > 0, b, 1.0), grow[:, None])
        early = (pi * (grow[:, None] - (1.0 - a) * series)).sum(axis=1)
        rest = np.maximum(tok - 1 - grow, 0.0)
        late = np.zeros(rows)
        finite = ~np.isinf(t_c) & (rest > 0)
        if finite.any():
            late[finite] = rest[finite] * (pi[finite] * _window_hits(pi[finite], b[finite], t_c[finite])).sum(axis=1)
        out[:, c] = np.divide(early + late, refs, out=np.zeros_like(refs), where=refs > 0)
    return out


def lru_set_hit_counts(routes: np.ndarray, capacities: list[int] | np.ndarray, items: int) -> np.ndarray:
    """Exact per-layer LRU of token sets over many caches at once: ``routes`` [caches, tokens, top_k] item ids (0 ..
    items-1; -1: the cache has no such token), each token's ids requested together in order, each inserted as most
    recent, the cache cut to its capacity at the token's end (a token's experts are all needed). Returns, per
    capacity, the hits summed over caches (references: ``(routes >= 0).sum()``)."""
    caches, tokens, k = routes.shape
    caps = np.asarray(capacities)
    last = np.full((caches, items), -np.inf)
    rows = np.arange(caches)[:, None]
    hits = np.zeros(caps.size, dtype=np.int64)
    order = np.arange(k) / (k + 1.0)  # within a token the later-inserted is the more recent
    for t in range(tokens):
        e = routes[:, t, :]
        valid = e >= 0
        ee = np.where(valid, e, 0)
        seen = last[rows, ee]
        rank = (last[:, None, :] > seen[:, :, None]).sum(axis=2)  # more recent items (cut at the last token's end)
        ok = valid & np.isfinite(seen)
        hits += ((rank[None] < caps[:, None, None]) & ok[None]).sum(axis=(1, 2))
        r, c = np.nonzero(valid)
        last[r, e[r, c]] = t + order[c]
    return hits


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
