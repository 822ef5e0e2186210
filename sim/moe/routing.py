"""Expert routing of an MoE model: per-layer popularity laws and a vectorised sampler of expert lookups.

Every generated token routes ``top_k`` lookups in each of ``layers`` MoE layers. Each lookup draws an expert id from
that layer's popularity (the marginal routing frequency of each expert), so a static cache holding a set of experts
hits with probability equal to their popularity mass; this is the law the analytic companions assume.

- ``zipf``: p(rank r) ~ r^-exponent, each layer with its own random permutation of expert ids; ``uniform`` is the
  control (exponent 0).
- temporal locality: with probability ``locality`` a lookup repeats the expert the previous token used in the same
  layer and position (consecutive tokens share experts);
- per-request skew: each request routes by the popularity raised to its own power ``g = exp(exponent_spread * z)``
  (z standard normal), renormalised per layer: under Zipf, its own exponent ``exponent * g``. Some requests (code,
  repetition) concentrate on fewer experts than the profile, others spread wider; ``exponent_spread`` 0: all alike;
- per-request drift: each request has its own hot set of ``drift_hot_experts`` experts per layer, drawn uniformly, and
  a share ``drift_weight`` of its lookups falls on that set, so requests differ from the global profile and from each
  other (real traces are not a pure Zipf law); with ``drift_concentration`` > 0 each request draws its own share from
  a Beta law of that mean and concentration (lower: requests differ more, some far off the profile).

Sampling uses Walker/Vose alias tables, one per layer, built once: a lookup is one random number (its integer part
picks a column, its fraction decides column or alias) and two gathers, for a whole batch of tokens at once with numpy
(no Python loop per lookup). A request with its own skew samples its own law by inverse CDF instead (one
``searchsorted`` over all layers' CDFs, each shifted to ``[layer, layer + 1]``). Expert ids are flat:
``layer * experts + expert``, so one id names one cache slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class RoutingLaw:
    layers: int
    experts: int
    top_k: int
    exponent: float = 1.0  # Zipf exponent of expert popularity (0: uniform)
    locality: float = 0.0  # probability that a lookup repeats the previous token's expert (same layer, position)
    drift_weight: float = 0.0  # share of a request's lookups that fall on its own hot set
    drift_hot_experts: int = 0  # experts per layer in a request's hot set
    drift_concentration: float = 0.0  # >0: each request draws its weight from Beta(drift_weight, concentration)
    exponent_spread: float = 0.0  # log-sd of a request's own skew: it routes by popularity ** exp(spread * z)


def zipf_weights(experts: int, exponent: float) -> np.ndarray:
    """Popularity by rank (rank 1 first), normalised."""
    w = np.arange(1, experts + 1, dtype=float) ** -exponent
    return w / w.sum()


def layer_popularity(law: RoutingLaw, rng: np.random.Generator) -> np.ndarray:
    """[layers, experts] routing probabilities: the same law by rank, a random permutation of ids per layer."""
    by_rank = zipf_weights(law.experts, law.exponent)
    probs = np.empty((law.layers, law.experts))
    for layer in range(law.layers):
        probs[layer, rng.permutation(law.experts)] = by_rank
    return probs


def request_popularity(popularity: np.ndarray, skew: float) -> np.ndarray:
    """A request's own routing law: ``popularity ** skew`` renormalised per layer (skew 1: the profile)."""
    if skew == 1.0:
        return popularity
    with np.errstate(divide="ignore"):
        w = np.exp(skew * np.log(popularity))
    return w / w.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class AliasTables:
    """Vose alias tables, one row per layer: draw column c uniformly, keep it with prob[c] else take alias[c]."""

    prob: np.ndarray  # [layers, experts] float
    alias: np.ndarray  # [layers, experts] int

    @classmethod
    def build(cls, probs: np.ndarray) -> AliasTables:
        layers, n = probs.shape
        prob = np.zeros((layers, n))
        alias = np.zeros((layers, n), dtype=np.int64)
        for row in range(layers):
            scaled = probs[row] * n
            small = [i for i in range(n) if scaled[i] < 1.0]
            large = [i for i in range(n) if scaled[i] >= 1.0]
            while small and large:
                s, g = small.pop(), large.pop()
                prob[row, s], alias[row, s] = scaled[s], g
                scaled[g] -= 1.0 - scaled[s]
                (small if scaled[g] < 1.0 else large).append(g)
            for i in small + large:
                prob[row, i], alias[row, i] = 1.0, i
        return cls(prob, alias)

    @cached_property
    def flat(self) -> tuple[np.ndarray, np.ndarray]:
        """Tables flattened to 1-D (layer-major) for fast gathers: (prob float32, alias as flat index int32)."""
        layers, n = self.prob.shape
        offset = (np.arange(layers) * n)[:, None]
        return self.prob.astype(np.float32).ravel(), (self.alias + offset).astype(np.int32).ravel()


@dataclass
class RequestRouter:
    """Samples the expert lookups of one request (its own drift hot set), a batch of tokens at a time."""

    law: RoutingLaw
    alias: AliasTables
    rng: np.random.Generator
    hot_set: np.ndarray | None = None  # [layers, drift_hot_experts] flat ids
    drift_weight: float = 0.0  # this request's share of lookups on its hot set
    skew: float = 1.0  # this request routes by popularity ** skew (renormalised per layer)
    popularity: np.ndarray | None = None  # [layers, experts]: needed when skew != 1
    last: np.ndarray | None = None  # [layers, top_k] flat ids of the previous token

    def __post_init__(self) -> None:
        self._cdf: np.ndarray | None = None  # built on first use: the counts fidelity never samples lookups
        self._offset = (np.arange(self.law.layers, dtype=np.int32) * self.law.experts)[:, None]
        self._layer_index = np.arange(self.law.layers)[:, None]

    @classmethod
    def start(cls, law: RoutingLaw, alias: AliasTables, rng: np.random.Generator,
              popularity: np.ndarray | None = None) -> RequestRouter:
        skew = float(np.exp(law.exponent_spread * rng.standard_normal())) if law.exponent_spread > 0 else 1.0
        hot = None
        if law.drift_weight > 0 and law.drift_hot_experts > 0:
            keys = rng.random((law.layers, law.experts))
            hot = np.argpartition(keys, law.drift_hot_experts - 1, axis=1)[:, :law.drift_hot_experts]
            hot = (hot + (np.arange(law.layers) * law.experts)[:, None]).astype(np.int32)
        weight = law.drift_weight
        if hot is not None and law.drift_concentration > 0 and 0 < weight < 1:
            c = law.drift_concentration
            weight = float(rng.beta(weight * c, (1 - weight) * c))
        return cls(law, alias, rng, hot_set=hot, drift_weight=weight, skew=skew, popularity=popularity)

    def next_tokens(self, tokens: int) -> np.ndarray:
        """[tokens, layers, top_k] expert ids (layer-major flat ids: layer * experts + expert) for the next tokens."""
        law, rng = self.law, self.rng
        n, layers, k = law.experts, law.layers, law.top_k
        prob, alias = self.alias.flat
        shape = (tokens, layers, k)
        u = rng.random(shape, dtype=np.float32) * n
        col = u.astype(np.int32)
        np.minimum(col, n - 1, out=col)
        flat = col + self._offset
        if self.skew == 1.0:
            ids = np.where(u - col < prob[flat], flat, alias[flat])
        else:
            if self._cdf is None:  # its own law: inverse-CDF sampling (layer l's CDF shifted to [l, l + 1])
                cdf = np.cumsum(request_popularity(self.popularity, self.skew), axis=1)
                cdf[:, -1] = 1.0
                self._cdf = (cdf + np.arange(self.law.layers)[:, None]).ravel()
            at = rng.random(shape) + self._layer_index[None, :, :]
            ids = np.minimum(np.searchsorted(self._cdf, at, side="right"), self._offset[None] + n - 1).astype(np.int32)
        if self.hot_set is not None or law.locality > 0:
            mode = rng.random(shape, dtype=np.float32)
            if self.hot_set is not None:
                # a share drift_weight of the fresh lookups falls on the request's hot set; reuse the alias draw's
                # fractional part as the uniform index into it
                from_hot = mode >= law.locality
                from_hot &= (mode - law.locality) < self.drift_weight * (1.0 - law.locality)
                pick = ((u - col) * law.drift_hot_experts).astype(np.int32)
                np.minimum(pick, law.drift_hot_experts - 1, out=pick)
                hot_ids = self.hot_set[self._layer_index, pick]
                ids = np.where(from_hot, hot_ids, ids)
            if law.locality > 0:
                reuse = mode < law.locality
                if self.last is None:
                    reuse[0] = False
                else:
                    ids = np.concatenate([self.last[None], ids])
                    reuse = np.concatenate([np.zeros((1, layers, k), bool), reuse])
                # forward fill: a reused lookup takes the id of the latest fresh lookup before it (same layer, slot)
                t = np.arange(ids.shape[0], dtype=np.int32)[:, None, None]
                src = np.maximum.accumulate(np.where(reuse, 0, t), axis=0)
                ids = np.take_along_axis(ids, src, axis=0)
                if self.last is not None:
                    ids = ids[1:]
        self.last = ids[-1].copy()
        return ids
