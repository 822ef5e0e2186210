"""Fast fidelity: sample how many distinct experts each verification step touches, not every lookup.

A step checks ``positions`` tokens at once; in each layer each of the ``top_k`` routing slots draws a fresh expert for
its first position and, for every later position, a fresh one with probability ``1 - locality`` (otherwise it repeats
the previous position's). So a layer-step makes on average ``n = top_k * (1 + (positions - 1) * (1 - locality))``
independent draws from the request's own law ``q`` (the popularity raised to the request's skew, renormalised, mixed
with its hot set: ``(1 - w) * q + w * uniform(hot set)``), and expert ``e`` is touched with probability
``1 - (1 - q_e)^n``. Summing over the experts of each tier (VRAM cache, peers, host RAM, disk) gives the mean and
variance of the distinct experts a layer-step touches there (the variance of independent touches, less the negative
covariance a fixed number of draws induces, to first order). Each count is then drawn from a binomial of that mean and
variance (resident ones too: they set the compute time, hence the window the CPU has for misses), one uniform per
count by inverse CDF, instead of ``positions * top_k`` lookups and a sort. Lookups split over the tiers as a
multinomial with the request's probabilities ``sum_e q_e * [e in tier]``.

``tests/test_moe_serve.py`` checks this against the lookup-level path (``fidelity: lookups``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np


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
             draws: float, tier: np.ndarray | None = None, tiers: int = 1, default_tier: int = 0) -> StepLaw:
    """``popularity`` [layers, experts]; ``residency``: flat per-expert probability of being in the VRAM cache (0/1
    for a static cache); ``hot_set``: [layers, h] flat ids of the request's own hot set (or None); ``weight``: its
    share of lookups; ``draws``: mean independent draws per layer-step; ``tier``: flat tier (0 .. tiers-1) an expert
    is fetched from when not in VRAM (None: all from ``default_tier``)."""
    layers, experts = popularity.shape
    if hot_set is not None and weight > 0:
        q = (1.0 - weight) * popularity.ravel()
        q[hot_set.ravel()] += weight / hot_set.shape[1]
        q = q.reshape(layers, experts)
    else:
        q = popularity
    r = residency.reshape(layers, experts).astype(float)
    qc = np.minimum(q, 1.0 - 1e-12)
    touch = -np.expm1(draws * np.log1p(-qc))
    fetched = touch * (1.0 - r)
    # a fixed number of draws makes touches negatively correlated: cov(i, j) ~ -n a_i a_j x_i x_j with a = 1 - touch
    # (untouched) and x = q / (1 - q), to first order in n q_i q_j
    x = (1.0 - touch) * qc / (1.0 - qc)
    ax = x * (1.0 - r)

    def variance(f: np.ndarray, w: np.ndarray) -> np.ndarray:
        s1 = w.sum(axis=1)
        return np.maximum((f * (1 - f)).sum(axis=1) - draws * (s1 * s1 - (w * w).sum(axis=1)), 0.0)

    lookup_missed = q * (1.0 - r)
    mean = np.zeros((tiers, layers))
    var = np.zeros((tiers, layers))
    shares = np.zeros(1 + tiers)
    shares[0] = (q * r).sum() / layers
    if tier is None:
        k = default_tier
        mean[k], var[k] = fetched.sum(axis=1), variance(fetched, ax)
        shares[1 + k] = lookup_missed.sum() / layers
    else:
        t = tier.reshape(layers, experts)
        for k in range(tiers):
            f = np.where(t == k, fetched, 0.0)
            mean[k], var[k] = f.sum(axis=1), variance(f, np.where(t == k, ax, 0.0))
            shares[1 + k] = lookup_missed[t == k].sum() / layers
    shares = np.clip(shares, 0.0, None)
    held = touch * r
    return StepLaw(held.sum(axis=1), variance(held, x * r), mean, var, shares / shares.sum())


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


def draws_per_step(top_k: int, positions: int, locality: float) -> float:
    return top_k * (1.0 + (positions - 1) * (1.0 - locality))
