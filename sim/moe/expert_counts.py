"""Fast fidelity: sample how many distinct experts each verification step touches, not every lookup.

A step checks ``positions`` tokens of a request at once (a batch step: those of ``sequences`` requests); each token
routes to ``top_k`` distinct experts per layer (Plackett-Luce from the request's law ``q``, :mod:`sim.moe.routing`),
including expert ``e`` with probability ``pi_e`` (``sum pi = top_k``); consecutive positions of a request share
experts through the reuse (``locality``). A layer-step leaves expert ``e`` untouched with ``u_e = (1 - pi_e) (1 -
b_e)^(positions - 1)`` per sequence (``b_e = 1 - (1 - pi_e)^(1 - reuse)``, the two-state chain of
:func:`sim.moe.routing.untouched`), ``u_e^sequences`` for the batch, so it touches ``sum_e (1 - u_e^sequences)``
distinct experts on average, ``top_k`` for one position. The request's law ``q`` is the popularity raised to its skew,
renormalised, mixed with its hot set: ``(1 - w) q + w uniform(hot set)``.

Summing over the experts of each tier (VRAM cache, peers, host RAM, disk) gives the mean distinct count there; its
variance is that of independent touches less the negative covariance that a fixed ``top_k`` per token induces, in
Hajek's form for fixed-size designs: ``var(sum_A) = sum_A v - c (sum_A w)^2`` with ``v = tau (1 - tau)``, ``w`` the
covariance weight of each expert and ``c`` set so that the whole layer's count has the variance of the number of new
experts the later positions bring (0 for one position: exactly ``top_k``). Each count is then drawn from a binomial of
that mean and variance (resident ones too: they set the compute time, hence the window the CPU has for misses), one
uniform per count by inverse CDF, instead of ``positions * top_k`` lookups and a sort. Lookups split over the tiers as
a multinomial with the lookup shares ``sum_e pi_e / top_k * [e in tier]``.

``tests/test_moe_serve.py`` checks this against the lookup-level path (``fidelity: lookups``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from sim.moe.routing import inclusion_probabilities


@dataclass(frozen=True)
class StepDraws:
    """What one layer-step routes: ``positions`` consecutive tokens of each of ``sequences`` independent requests,
    each token ``top_k`` distinct experts, consecutive tokens of a request sharing experts through ``reuse``. A number
    times it is a batch of that many such steps' requests (``k * draws``: a batch step of ``k`` sequences)."""

    top_k: int
    positions: int = 1
    reuse: float = 0.0
    sequences: float = 1.0

    def __mul__(self, other: float) -> StepDraws:
        return StepDraws(self.top_k, self.positions, self.reuse, self.sequences * float(other))

    __rmul__ = __mul__

    def __float__(self) -> float:
        """Lookups a layer-step makes (``sequences x positions x top_k``)."""
        return float(self.top_k * self.positions * self.sequences)


@dataclass(frozen=True)
class StepLaw:
    """Per-layer law of the distinct experts one verification step touches, for one request."""

    resident_mean: np.ndarray  # [layers] in the VRAM cache
    resident_var: np.ndarray  # [layers]
    missed_mean: np.ndarray  # [tiers, layers] fetched from each tier below VRAM
    missed_var: np.ndarray  # [tiers, layers]
    lookup_shares: np.ndarray  # [1 + tiers] probability that a lookup is served by VRAM, then each tier

    @property
    def hit_rate(self) -> float:
        return float(self.lookup_shares[0])


def step_law(popularity: np.ndarray, residency: np.ndarray, hot_set: np.ndarray | None, weight: float,
             draws: StepDraws, tier: np.ndarray | None = None, tiers: int = 1, default_tier: int = 0) -> StepLaw:
    """``popularity`` [layers, experts]: the request's law ``q``; ``residency``: flat per-expert probability of being
    in the VRAM cache (0/1 for a static cache; an LRU lookup's hit probability); ``hot_set``: [layers, h] flat ids of
    the request's own hot set (or None); ``weight``: its share of the law; ``draws``: what a layer-step routes
    (:func:`draws_per_step`); ``tier``: flat tier (0 .. tiers-1) an expert is fetched from when not in VRAM (None:
    all from ``default_tier``)."""
    if not isinstance(draws, StepDraws):
        raise TypeError("step_law: draws must be a StepDraws (see draws_per_step), not a number of draws")
    layers, experts = popularity.shape
    if hot_set is not None and weight > 0:
        q = (1.0 - weight) * popularity.ravel()
        q[hot_set.ravel()] += weight / hot_set.shape[1]
        q = q.reshape(layers, experts)
    else:
        q = popularity
    k, b_seq = draws.top_k, draws.sequences
    pi = inclusion_probabilities(q, k)
    r = residency.reshape(layers, experts).astype(float)
    with np.errstate(divide="ignore"):
        log_out = np.log1p(-np.minimum(pi, 1.0))
    stay_out = np.exp((1.0 - draws.reuse) * log_out)  # 1 - b: a later token leaves out what the last one did
    u1 = np.exp((1.0 + (draws.positions - 1) * (1.0 - draws.reuse)) * log_out)  # one sequence's step leaves it out
    tau1 = 1.0 - u1
    with np.errstate(divide="ignore"):
        touch = -np.expm1(b_seq * np.log(np.maximum(u1, 0.0))) if b_seq != 1 else tau1
    fetched = touch * (1.0 - r)
    held = touch * r
    # Hajek: cov(e, f) = -c w_e w_f with w = v1 u1^(sequences - 1) (a batch's sequences are independent) and c =
    # sequences * (1 - V / D) / D, D = sum v1, V the variance of a sequence's whole count (0 for one position)
    v1 = tau1 * (1.0 - tau1)
    d = v1.sum(axis=1)
    total_var = np.minimum(step_count_variance(pi, stay_out, draws), d)
    c = np.divide(b_seq * (1.0 - np.divide(total_var, d, out=np.zeros_like(d), where=d > 0)), d,
                  out=np.zeros_like(d), where=d > 0)
    w = v1 * (u1 ** (b_seq - 1.0) if b_seq != 1 else 1.0)

    def variance(f: np.ndarray, wa: np.ndarray) -> np.ndarray:
        s1 = wa.sum(axis=1)
        return np.maximum((f * (1 - f)).sum(axis=1) - c * s1 * s1, 0.0)

    share = pi / k
    lookup_missed = share * (1.0 - r)
    mean = np.zeros((tiers, layers))
    var = np.zeros((tiers, layers))
    shares = np.zeros(1 + tiers)
    shares[0] = (share * r).sum() / layers
    if tier is None:
        t = default_tier
        mean[t], var[t] = fetched.sum(axis=1), variance(fetched, w * (1.0 - r))
        shares[1 + t] = lookup_missed.sum() / layers
    else:
        tr = tier.reshape(layers, experts)
        for t in range(tiers):
            f = np.where(tr == t, fetched, 0.0)
            mean[t], var[t] = f.sum(axis=1), variance(f, np.where(tr == t, w * (1.0 - r), 0.0))
            shares[1 + t] = lookup_missed[tr == t].sum() / layers
    shares = np.clip(shares, 0.0, None)
    return StepLaw(held.sum(axis=1), variance(held, w * r), mean, var, shares / shares.sum())


def step_count_variance(pi: np.ndarray, stay_out: np.ndarray, draws: StepDraws) -> np.ndarray:
    """[layers] variance of the distinct experts one sequence's step touches in a layer: ``top_k`` at the first
    position, then each later position brings ``N_t`` new ones; ``N_t`` is taken as its fresh slots (``top_k (1 -
    reuse)`` on average, binomial) times the chance a fresh one is new, the positions independent. ``stay_out``:
    ``1 - b``, the chance a token leaves out an expert the token before left out."""
    if draws.positions <= 1:
        return np.zeros(pi.shape[0])
    k, reuse = draws.top_k, draws.reuse
    fresh = k * (1.0 - reuse)
    out = 1.0 - pi  # untouched by the first t positions
    total = np.zeros(pi.shape[0])
    for _ in range(draws.positions - 1):
        new = (out * (1.0 - stay_out)).sum(axis=1)  # mean new experts this position brings
        out = out * stay_out
        p = np.clip(np.divide(new, fresh, out=np.zeros_like(new), where=fresh > 0), 0.0, 1.0)
        total += fresh * p * (1 - p) + k * reuse * (1 - reuse) * p * p
    return total


def binomial_matching(mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, p) of the binomial with the given mean and about the given variance: ``p = 1 - var / mean``, ``N =
    ceil(mean / p)``, then ``p = mean / N`` so the mean is exact; rounding N up leaves the variance a little above
    the target (never above the mean)."""
    mean = np.asarray(mean, dtype=float)
    p = np.clip(1.0 - np.divide(var, mean, out=np.zeros_like(mean), where=mean > 0), 1e-9, 1.0)
    n = np.ceil(mean / p - 1e-9).astype(np.int64)
    return n, np.divide(mean, n, out=np.zeros_like(mean), where=n > 0)


GRID = 4096  # inverse-CDF table resolution: exact values at u = j / GRID bracket every draw


@dataclass(frozen=True)
class CountSampler:
    """Draws [steps, layers] counts, each layer its own binomial law, by inverting one table of CDFs: layer ``l``'s
    CDF is stored shifted to ``[l, l + 1]`` so a single ``searchsorted`` serves all layers (one uniform per count).

    Fast path: the exact inverse at the grid points ``u = j / GRID`` is tabulated; a draw between two grid points with
    the same value has that value (the inverse CDF is monotone), so only draws that straddle a jump of the CDF (a few
    per thousand) need the search. The result is exactly the searched one."""

    cdf: np.ndarray  # flat, increasing: layer l's CDF + l
    width: int  # entries per layer (max N + 1)
    grid: np.ndarray | None = None  # flat [layers, GRID + 1]: value for u in [j / GRID, (j + 1) / GRID), or -1 where
    # the CDF jumps inside that interval (the draw needs the search)

    @classmethod
    def build(cls, mean: np.ndarray, var: np.ndarray) -> CountSampler:
        n, p = binomial_matching(mean, var)
        # beyond mean + 12 sd the tail mass is far below one draw in 1e12: truncate the table there
        k = np.arange(int(min(n.max(), np.max(mean + 12 * np.sqrt(var)) + 12)) + 1)
        nn, pp = n[:, None], p[:, None]
        rest = np.maximum(nn - k, 0)
        log_fact = log_factorials(int(n.max()))
        with np.errstate(invalid="ignore", divide="ignore"):
            log_pmf = (log_fact[nn] - log_fact[k] - log_fact[rest]
                       + np.where(k > 0, k * np.log(pp), 0.0) + np.where(rest > 0, rest * np.log1p(-pp), 0.0))
        pmf = np.where(k[None, :] <= nn, np.exp(log_pmf), 0.0)
        cdf = np.minimum(np.cumsum(pmf, axis=1), 1.0)
        cdf[:, -1] = 1.0
        cdf += np.arange(mean.size)[:, None]
        flat = cdf.ravel()
        layers = np.arange(mean.size)
        points = np.arange(GRID) / GRID  # the grid's last point (u = 1) is never reached: it is marked to search
        # grid[l, j]: entries of layer l's CDF at or below u = j / GRID (compared shifted, as the draws are), i.e.
        # the count of entries whose first grid point at or above them is j or before
        first = np.concatenate([np.searchsorted(points + layer, cdf[layer], side="left") for layer in layers])
        counts = np.bincount(first + np.repeat(layers * (GRID + 1), k.size), minlength=mean.size * (GRID + 1))
        grid = np.cumsum(counts.reshape(mean.size, GRID + 1), axis=1).astype(np.int32)
        grid[:, :-1][grid[:, :-1] != grid[:, 1:]] = -1
        grid[:, -1] = -1  # u * GRID rounds up to GRID only for u within an ulp of 1: search
        return cls(flat, k.size, grid.ravel())

    def sample(self, steps: int, rng: np.random.Generator) -> np.ndarray:
        layers = self.cdf.size // self.width
        u = rng.random((steps, layers))
        if self.grid is None:
            return np.searchsorted(self.cdf, u + np.arange(layers), side="right") - np.arange(layers) * self.width
        return self.invert(u, np.empty(u.shape, dtype=np.int32))

    def invert(self, u: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The counts of uniforms ``u`` [steps, layers] into ``out`` (int32, same shape), by the tabulated grid."""
        assert out.flags.c_contiguous  # written through a flat view below
        layers = u.shape[1]
        j = (u * GRID).astype(np.int32)
        j += np.arange(0, layers * (GRID + 1), GRID + 1, dtype=np.int32)
        np.take(self.grid, j, mode="clip", out=out)  # j is in range: clip skips the checks
        jump = np.flatnonzero(out < 0)
        if jump.size:
            layer = jump % layers
            flat = out.reshape(-1)
            flat[jump] = np.searchsorted(self.cdf, u.reshape(-1)[jump] + layer, side="right") - layer * self.width
        return out


@functools.lru_cache(maxsize=8)
def log_factorials(n: int) -> np.ndarray:
    """``log(k!)`` for k = 0 .. n (``math.lgamma``, exact to the last bits of the C library)."""
    return np.array([math.lgamma(k + 1) for k in range(n + 1)])


def draws_per_step(top_k: int, positions: int, locality: float) -> StepDraws:
    """What one verification step of ``positions`` tokens routes per layer, consecutive tokens sharing experts
    through ``locality`` (the reuse); ``k * draws_per_step(...)``: a batch step of ``k`` sequences."""
    return StepDraws(top_k, positions, locality)
