"""Expert routing of an MoE model: per-layer popularity laws, top-k routing without replacement, reuse between
consecutive tokens, and a vectorised sampler of expert lookups.

Every generated token routes to ``top_k`` *distinct* experts in each of ``layers`` MoE layers. A router takes the top-k
of noisy logits; this is modelled as Plackett-Luce sampling without replacement from the layer's law ``q`` (the
*popularity*, one row per layer summing to 1: ``q_e`` is the probability that expert ``e`` is a token's first choice).

- ``zipf``: q(rank r) ~ r^-exponent, each layer with its own random permutation of expert ids; ``uniform`` is the
  control (exponent 0). With ``exponent_depth_slope`` the exponent changes linearly with relative depth:
  ``exponent + slope * (depth - 1/2)``, depth 0 the first MoE layer and 1 the last (0: every layer alike), never
  below 0.
- inclusion: a token includes expert ``e`` with probability ``pi_e`` (``sum_e pi_e = top_k``, ``pi_e <= 1``). For
  Plackett-Luce there is no closed form; Rosen's approximation of successive sampling (the exponential race) gives
  ``pi_e = 1 - exp(-q_e t)`` with ``t`` solved per layer so the sum is ``top_k`` (:func:`inclusion_probabilities`;
  within 0.025 of the exact sampler on every expert of the laws the tests try, the cached mass within a point).
  The *lookup share* of an expert is ``pi_e / top_k`` (never above ``1 / top_k``), so a static cache hits with the
  cached share ``sum_cached pi_e / (top_k * layers)``, which a higher ``top_k`` at fixed slots never raises.
- reuse between consecutive tokens (``locality``, called reuse below): a token's experts in a layer are the first
  ``top_k`` distinct values of a stream of independent draws from ``q`` (exactly a Plackett-Luce sample); each
  position of the stream carries over to the next token's stream with probability ``reuse``, else is drawn afresh.
  Every stream is still independent draws, so every token is still an exact Plackett-Luce sample (the marginals
  never move), and consecutive tokens share experts partially, as real routers do: overlaps spread around their
  mean, rarely all or none. (Real traces keep hot experts a little longer than cold ones beyond their popularity;
  this law gives every expert about the same persistence, hot ones somewhat less.) Measured: the consecutive
  overlap ``E|E(t) & E(t+1)| / top_k``. The analytic companions treat the stream as about ``-log(1 - pi_e) / q_e``
  positions of which a share ``reuse`` carries over (Poisson mean field): a token includes an expert the previous
  one left out with ``b_e = 1 - (1 - pi_e)^(1 - reuse)`` (:func:`returning`) and keeps one it had with ``a_e = 1 -
  (1 - pi_e) b_e / pi_e``, a two-state chain per expert, so ``n`` consecutive tokens leave it out with ``(1 -
  pi_e)^(1 + (n - 1)(1 - reuse))`` (:func:`untouched`: what the counts fidelity, prefill and the LRU companion use),
  overlap ``sum_e (pi_e - (1 - pi_e) b_e) / top_k`` (:func:`consecutive_overlap`; reuse 0: ``sum pi^2 / top_k``,
  popularity alone). ``reuse`` is then about the share of a token's experts that repeat the previous token's beyond
  popularity (exactly so for experts of small inclusion). The sampler's overlap beyond popularity is about 5-8% of
  itself below the companion's (a token's stream is longer or shorter than the mean field's; positions past where
  the last token stopped carry values it never looked at).
- per-request skew: each request routes by ``q ** g`` renormalised per layer, ``g = exp(exponent_spread * z)`` (z
  standard normal): under Zipf, its own exponent ``exponent * g``. Some requests (code, repetition) concentrate on
  fewer experts than the profile, others spread wider; ``exponent_spread`` 0: all alike;
- per-request drift: each request has its own hot set of ``drift_hot_experts`` experts per layer, drawn uniformly, and
  its law is ``(1 - w) q + w uniform(hot set)`` with ``w = drift_weight``, so requests differ from the global profile
  and from each other (real traces are not a pure Zipf law); with ``drift_concentration`` > 0 each request draws its
  own ``w`` from a Beta law of that mean and concentration (lower: requests differ more, some far off the profile).

Sampling (:class:`RequestRouter`): one draw from a request's law is one random number through a Walker/Vose alias
table (its integer part picks a column, its fraction decides column or alias; one table per layer, built once), or,
for a request with its own skew, an inverse-CDF ``searchsorted`` over all layers' CDFs at once (each shifted to
``[layer, layer + 1]``). Without reuse a token's ``top_k`` slots are drawn at once and the repeats redrawn, a round at
a time for all tokens of a batch together (the first ``top_k`` distinct values of a stream, exact), the few left
after ``REDRAW_ROUNDS`` rounds completed from the law without the row's experts. With reuse each token's stream is
drawn to about twice the length a layer needs (longer for the tokens that need it, at most ``MAX_STREAM_PER_K *
top_k + 64`` positions, then completed exactly), carried positions forward-filled across a batch of tokens at once
(no Python loop per token) and the first distinct values taken by one sort per row: about 4,000 tokens a second for
48 layers of 512 experts, top-10 (Gumbel-top-k over every expert would cost 24,576 keys a token). Expert ids are
flat: ``layer * experts + expert``, so one id names one cache slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from sim.core.topk import inclusion_probabilities, zipf_weights  # noqa: F401 - used here, and re-exported


@dataclass(frozen=True)
class RoutingLaw:
    layers: int
    experts: int
    top_k: int
    exponent: float = 1.0  # Zipf exponent of expert popularity (0: uniform)
    locality: float = 0.0  # reuse: share of a token's experts kept from the previous token's (same layer)
    drift_weight: float = 0.0  # share of a request's law on its own hot set
    drift_hot_experts: int = 0  # experts per layer in a request's hot set
    drift_concentration: float = 0.0  # >0: each request draws its weight from Beta(drift_weight, concentration)
    exponent_spread: float = 0.0  # log-sd of a request's own skew: it routes by popularity ** exp(spread * z)
    exponent_depth_slope: float = 0.0  # change of the Zipf exponent from the first MoE layer to the last


def layer_exponents(law: RoutingLaw) -> np.ndarray:
    """[layers] Zipf exponent of each layer: ``exponent + slope * (depth - 1/2)``, depth from 0 (first) to 1 (last),
    at least 0 (a single layer has depth 1/2)."""
    depth = np.arange(law.layers) / (law.layers - 1) if law.layers > 1 else np.full(1, 0.5)
    return np.maximum(law.exponent + law.exponent_depth_slope * (depth - 0.5), 0.0)


def layer_popularity(law: RoutingLaw, rng: np.random.Generator) -> np.ndarray:
    """[layers, experts] routing law ``q``: each layer's Zipf law by rank, a random permutation of ids per layer."""
    probs = np.empty((law.layers, law.experts))
    for layer, exponent in enumerate(layer_exponents(law)):
        probs[layer, rng.permutation(law.experts)] = zipf_weights(law.experts, float(exponent))
    return probs


def request_popularity(popularity: np.ndarray, skew: float) -> np.ndarray:
    """A request's own routing law: ``popularity ** skew`` renormalised per layer (skew 1: the profile)."""
    if skew == 1.0:
        return popularity
    with np.errstate(divide="ignore"):
        w = np.exp(skew * np.log(popularity))
    return w / w.sum(axis=1, keepdims=True)


def lookup_shares(q: np.ndarray, top_k: int) -> np.ndarray:
    """The share of a layer's lookups each expert serves: ``pi / top_k`` (rows sum to 1, no entry above 1/top_k)."""
    return inclusion_probabilities(q, top_k) / top_k


def popularity_from_inclusion(pi: np.ndarray) -> np.ndarray:
    """The law ``q`` whose inclusion probabilities (Rosen) are ``pi`` (each row summing to top_k, every entry below
    1): ``q_e = -log(1 - pi_e) / sum_j -log(1 - pi_j)``, exactly, since ``t`` is then that sum."""
    w = -np.log1p(-np.asarray(pi, dtype=float))
    return w / w.sum(axis=-1, keepdims=True)


def returning(pi: np.ndarray, reuse: float) -> np.ndarray:
    """``b``: the probability that a token includes an expert the previous token left out, ``1 - (1 - pi)^(1 -
    reuse)`` (each of the ``-log(1 - pi) / q`` stream positions a token needs misses the expert; only the fresh ones
    can bring it). An expert in the previous token stays with ``a = 1 - (1 - pi) b / pi``, so ``pi`` is stationary."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.expm1((1.0 - reuse) * np.log1p(-np.minimum(np.asarray(pi, dtype=float), 1.0)))


def untouched(pi: np.ndarray, reuse: float, positions: float) -> np.ndarray:
    """Probability that ``positions`` consecutive tokens of one request all leave an expert out: ``(1 - pi) (1 -
    b)^(positions - 1) = (1 - pi)^(1 + (positions - 1)(1 - reuse))`` (0 positions: 1)."""
    pi = np.asarray(pi, dtype=float)
    if positions <= 0:
        return np.ones_like(pi)
    with np.errstate(divide="ignore"):
        return np.exp((1.0 + (positions - 1) * (1.0 - reuse)) * np.log1p(-np.minimum(pi, 1.0)))


def consecutive_overlap(pi: np.ndarray, reuse: float, top_k: int, distance: int = 1) -> np.ndarray:
    """Per layer, the expected ``|E(t) & E(t + distance)| / top_k``: ``sum_e (pi_e - (1 - pi_e) b_e) / top_k`` with
    the stream carried over ``distance`` tokens (``reuse^distance``); popularity alone (reuse 0) gives ``sum pi^2 /
    top_k``."""
    pi = np.asarray(pi, dtype=float)
    b = returning(pi, reuse ** distance)
    return (pi - (1.0 - pi) * b).sum(axis=-1) / top_k


def reuse_from_overlap(overlap: float, pi: np.ndarray, top_k: int) -> float:
    """The reuse that gives layers of inclusion ``pi`` [layers, experts] the mean consecutive overlap ``overlap``
    (bisection; 0 when popularity alone gives at least that much, at most 0.99)."""
    pi = np.asarray(pi, dtype=float)

    def mean(reuse: float) -> float:
        return float(np.mean(consecutive_overlap(pi, reuse, top_k)))

    if overlap <= mean(0.0):
        return 0.0
    lo, hi = 0.0, 0.99
    if overlap >= mean(hi):
        return hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mean(mid) < overlap else (lo, mid)
    return 0.5 * (lo + hi)


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
    """Samples the expert routes of one request (its own skew and drift hot set), a batch of tokens at a time.

    A token's experts in a layer are the first ``top_k`` distinct values of a stream of independent draws from the
    request's law (exactly a Plackett-Luce sample); each position of the stream carries over to the next token's
    stream with probability ``locality``, else is drawn afresh, so every stream is still independent draws and every
    token still an exact Plackett-Luce sample, while consecutive tokens share experts (more than popularity gives)."""

    law: RoutingLaw
    alias: AliasTables
    rng: np.random.Generator
    hot_set: np.ndarray | None = None  # [layers, drift_hot_experts] flat ids
    drift_weight: float = 0.0  # this request's share of its law on its hot set
    skew: float = 1.0  # this request routes by popularity ** skew (renormalised per layer)
    popularity: np.ndarray | None = None  # [layers, experts]: needed when skew != 1
    last: np.ndarray | None = None  # [layers, top_k] flat ids of the previous token
    stream: np.ndarray | None = None  # [layers, positions] the previous token's draw stream (flat ids)

    def __post_init__(self) -> None:
        self._cdf: np.ndarray | None = None  # built on first use: the counts fidelity never samples lookups
        self._dense: np.ndarray | None = None
        self._length = 0

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

    def own_law(self) -> np.ndarray:
        """[layers, experts] this request's law: the (skewed) popularity mixed with its hot set."""
        if self._dense is None:
            if self.popularity is not None:
                q = request_popularity(self.popularity, self.skew)
            else:  # the alias tables' own law
                layers, n = self.alias.prob.shape
                q = self.alias.prob / n
                np.add.at(q, (np.repeat(np.arange(layers), n), self.alias.alias.ravel()),
                          (1 - self.alias.prob).ravel() / n)
            if self.hot_set is not None and self.drift_weight > 0:
                q = (1.0 - self.drift_weight) * q
                np.add.at(q.reshape(-1), self.hot_set.ravel(), self.drift_weight / self.hot_set.shape[1])
            self._dense = q
        return self._dense

    def draw(self, layer: np.ndarray) -> np.ndarray:
        """One independent draw from this request's law for every entry of ``layer`` (layer indices, any shape):
        flat expert ids (int32), the same shape."""
        rng, n = self.rng, self.law.experts
        offset = layer.astype(np.int32) * np.int32(n)
        if self.skew == 1.0:
            prob, alias = self.alias.flat
            u = rng.random(layer.shape, dtype=np.float32) * n
            col = u.astype(np.int32)
            np.minimum(col, n - 1, out=col)
            flat = col + offset
            ids = np.where(u - col < prob[flat], flat, alias[flat])
        else:
            if self._cdf is None:  # its own law: inverse-CDF sampling (layer l's CDF shifted to [l, l + 1])
                cdf = np.cumsum(request_popularity(self.popularity, self.skew), axis=1)
                cdf[:, -1] = 1.0
                self._cdf = (cdf + np.arange(self.law.layers)[:, None]).ravel()
            at = rng.random(layer.shape) + layer
            ids = np.minimum(np.searchsorted(self._cdf, at, side="right"), offset + n - 1).astype(np.int32)
        if self.hot_set is not None and self.drift_weight > 0:
            mode = rng.random(layer.shape, dtype=np.float32)
            hot = mode < self.drift_weight
            if hot.any():
                h = self.hot_set.shape[1]
                pick = np.minimum((mode[hot] / np.float32(self.drift_weight) * h).astype(np.int32), h - 1)
                ids[hot] = self.hot_set[layer[hot], pick]
        return ids

    def stream_length(self) -> int:
        """Positions of the stream drawn at first: about twice the draws a layer needs for ``top_k`` distinct
        experts (Rosen's ``t``), so that few tokens need more; at most ``MAX_STREAM_PER_K * top_k + 64``."""
        if not self._length:
            q = self.own_law()
            k = self.law.top_k
            pi = inclusion_probabilities(q, k)
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where((pi < 1) & (q > 0), -np.log1p(-np.minimum(pi, 1 - 1e-15)) / np.where(q > 0, q, 1), 0)
            t = float(t.max())
            self._length = int(min(max(2 * k, np.ceil(2.0 * t + 4 * np.sqrt(t) + 4)), self.max_stream()))
        return self._length

    def max_stream(self) -> int:
        return MAX_STREAM_PER_K * self.law.top_k + 64

    def next_tokens(self, tokens: int) -> np.ndarray:
        """[tokens, layers, top_k] expert ids (layer-major flat ids: layer * experts + expert) of the next tokens,
        the ``top_k`` of a token and layer distinct."""
        law = self.law
        layers, k = law.layers, law.top_k
        if tokens <= 0:
            return np.zeros((0, layers, k), dtype=np.int32)
        if law.locality <= 0:
            ids = self._independent(tokens)
        else:
            width = max(self.stream_length(), 0 if self.stream is None else self.stream.shape[1])
            z = self._streams(tokens, 0, width)
            ids, short = first_distinct(z.reshape(tokens * layers, width), k)
            while short.size and width < self.max_stream():  # a token needs a longer stream: every token gets one
                more = min(width, self.max_stream() - width)
                z = np.concatenate([z, self._streams(tokens, width, width + more)], axis=2)
                width += more
                ids, short = first_distinct(z.reshape(tokens * layers, width), k)
            if short.size:  # a law so skewed that the stream is too long: the slots left from the restricted law
                self._complete(ids, short)
            self.stream = z[-1].copy()
        ids = ids.reshape(tokens, layers, k)
        self.last = ids[-1].copy()
        return ids

    def _independent(self, tokens: int) -> np.ndarray:
        """[tokens * layers, top_k] routes of tokens that share nothing beyond popularity: ``top_k`` independent
        draws, the repeats redrawn (a round at a time, all rows at once) until a row has ``top_k`` distinct (the
        first ``top_k`` distinct values of a stream), after ``REDRAW_ROUNDS`` rounds from the restricted law."""
        layers, k = self.law.layers, self.law.top_k
        rows = tokens * layers
        ids = self.draw(np.broadcast_to(np.arange(layers, dtype=np.int32)[None, :, None], (tokens, layers, k)))
        ids = ids.reshape(rows, k)
        todo = np.arange(rows)
        slot = np.arange(k, dtype=np.int64)
        for _ in range(REDRAW_ROUNDS):
            key = np.sort(ids[todo].astype(np.int64) * k + slot, axis=1)
            repeat = np.zeros(key.shape, dtype=bool)
            repeat[:, 1:] = key[:, 1:] // k == key[:, :-1] // k
            if not repeat.any():
                return ids
            r, j = np.nonzero(repeat)
            row, col = todo[r], key[r, j] % k
            ids[row, col] = self.draw(row % layers)
            todo = np.unique(row)
        key = np.sort(ids[todo].astype(np.int64) * k + slot, axis=1)
        repeat = np.zeros(key.shape, dtype=bool)
        repeat[:, 1:] = key[:, 1:] // k == key[:, :-1] // k
        r, j = np.nonzero(repeat)
        if r.size:
            ids[todo[r], key[r, j] % k] = -1
            self._complete(ids, np.unique(todo[r]))
        return ids

    def _streams(self, tokens: int, lo: int, hi: int) -> np.ndarray:
        """[tokens, layers, hi - lo] stream positions lo..hi-1 of the next tokens: each carried from the previous
        token's with probability ``locality`` (the stream before these tokens: ``self.stream``; positions it does not
        have were never looked at, so they are fresh), else a fresh draw."""
        layers = self.law.layers
        shape = (tokens, layers, hi - lo)
        fresh = self.draw(np.broadcast_to(np.arange(layers, dtype=np.int32)[None, :, None], shape))
        kept = self.rng.random(shape, dtype=np.float32) < self.law.locality
        before = self.stream[:, lo:hi] if self.stream is not None else np.zeros((layers, 0), dtype=np.int32)
        kept[0, :, before.shape[1]:] = False  # positions the previous stream lacks: fresh
        t = np.arange(1, tokens + 1, dtype=np.int32)[:, None, None]
        src = np.maximum.accumulate(np.where(kept, 0, t), axis=0)  # 0: the previous token's stream
        pad = np.zeros((1, layers, hi - lo), dtype=fresh.dtype)
        pad[0, :, :before.shape[1]] = before
        return np.take_along_axis(np.concatenate([pad, fresh]), src, axis=0)

    def _complete(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Fill the empty slots (-1) of rows ``rows`` of ``ids`` [rows, top_k] (row = token * layers + layer) one
        slot at a time, all rows at once, each from its layer's law without the experts its row already has
        (exact Plackett-Luce steps)."""
        layers, n, k = self.law.layers, self.law.experts, self.law.top_k
        q = self.own_law()
        for _ in range(k):
            empty = ids[rows] < 0
            need = rows[empty.any(axis=1)]
            if not need.size:
                return
            for a in range(0, need.size, COMPLETE_CHUNK):
                part = need[a:a + COMPLETE_CHUNK]
                layer = part % layers
                w = q[layer].copy()
                have = ids[part]
                r, c = np.nonzero(have >= 0)
                w[r, have[r, c] - layer[r] * n] = 0.0
                zero = w.sum(axis=1) <= 0
                if zero.any():  # fewer experts of positive weight than top_k: the rest uniformly
                    w[zero] = 1.0
                    rz = np.isin(r, np.flatnonzero(zero))
                    w[r[rz], have[r[rz], c[rz]] - layer[r[rz]] * n] = 0.0
                cdf = np.cumsum(w, axis=1)
                u = self.rng.random(part.size) * cdf[:, -1]
                pick = np.minimum((cdf <= u[:, None]).sum(axis=1), n - 1)
                slot = np.argmax(have < 0, axis=1)
                ids[part, slot] = (layer * n + pick).astype(np.int32)


REDRAW_ROUNDS = 12  # rounds of redrawing repeats before the slots left are drawn from the restricted law
MAX_STREAM_PER_K = 16  # stream positions at most per routed expert; rows still short complete exactly
COMPLETE_CHUNK = 4096  # rows completed at once (memory: this many x experts floats)


def first_distinct(z: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` distinct values of each row of ``z`` [rows, width], in stream order ([rows, k], -1 where a
    row has fewer), and the rows that have fewer."""
    rows, width = z.shape
    key = np.sort(z.astype(np.int64) * width + np.arange(width), axis=1)
    value = key // width
    new = np.ones(key.shape, dtype=bool)
    new[:, 1:] = value[:, 1:] != value[:, :-1]
    first = np.zeros(z.shape, dtype=bool)
    r, _ = np.nonzero(new)
    first[r, key[new] % width] = True
    rank = np.cumsum(first, axis=1)
    pick = first & (rank <= k)
    count = rank[:, -1]
    if (count >= k).all():
        return z[pick].reshape(rows, k).astype(np.int32), np.zeros(0, dtype=np.int64)
    out = np.full((rows, k), -1, dtype=np.int32)
    rr, cc = np.nonzero(pick)
    out[rr, rank[rr, cc] - 1] = z[rr, cc]
    return out, np.flatnonzero(count < k)
