"""Fit the routing law (:mod:`sim.moe.routing`) to public routing statistics of real MoE traces.

The table (``calibration/routing_public.csv``: rows of the shared measurements' ``expert_cache.csv`` and a ``role``,
``fit`` or ``check``) holds per model a per-layer LRU's hit rate by capacity (a replay of measured expert ids), each
prompt's consecutive-token overlap ``|E(t) & E(t+1)| / top_k``, and ranges and typical values of reuse distance,
overlap at larger distances, experts used, top-1 and top-8 shares and entropy; behind them batch 1, 10 prompts of
about 140 tokens, a per-layer LRU of token sets started empty per prompt and cut to capacity at each token's end
(the source's ``analyze_locality.py``).

The model of those numbers is the routing law's own analytic companions, per prompt and layer: the prompt's law (a
Zipf law by rank with its model's exponent, changed with depth by ``exponent_depth_slope``, raised to the prompt's
skew ``exp(exponent_spread z)``), its inclusion probabilities (Rosen), the two-state chain of the reuse (``locality``)
for overlaps at any distance, distinct experts and reuse distances, and Che with reuse for a cold LRU
(:func:`sim.moe.expert_cache.lru_cold_hit_rate`). The ten prompts take the skews of the ten deciles' midpoints ``z =
Phi^-1((i - 1/2) / 10)``; the measured per-prompt overlaps, sorted, are compared with the prompts' sorted (which
prompt is which is not known). Fitted: an exponent per model and the shared ``locality``, ``exponent_spread`` and
``exponent_depth_slope``, by least squares on errors in units of each row's tolerance (1 point for hit rates and
overlaps, 3 for values the source gives as ``~``), from several starts (deterministic), standard errors from the
Jacobian where the rows over-determine them. Every row is also simulated from sampled routes
(:class:`sim.moe.routing.RequestRouter`, the seed given) and measured as the source measured its traces
(:class:`sim.formats.route_trace.RouteTrace`): the ``sampled`` column checks the companions. Ranges (``a-b``) are met
when the simulated range across layers lies inside them (error: the distance from the range). ``sim fit-routing
--trace`` fits a route trace's statistics instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.core.errors import ScenarioError
from sim.formats.routing_stats import RoutingStatistic, read_routing_table
from sim.moe.expert_cache import lru_cold_hit_rates
from sim.moe.routing import (
    RoutingLaw,
    consecutive_overlap,
    inclusion_probabilities,
    layer_exponents,
    returning,
    zipf_weights,
)

MAX_LAYER_EXPERTS = 2**16  # MoE layers x experts per layer of a model the fit takes (the shipped: 48 x 128)
MAX_PROMPT_TOKENS, GAP_CELLS = 100_000, 2**22  # a prompt's tokens a layer; reuse gaps x layers x experts at a time
PROMPTS = 10  # the source's prompts per model
PROMPT_TOKENS = 140  # tokens per prompt and layer when the table does not say
TOL_POINT = 0.01  # tolerance of a hit rate or an overlap (fraction): one point
TOL_ROUGH = 0.03  # ... of a value the source gives as "~"


@dataclass(frozen=True)
class Observation:
    """One measured number (or range) of the table: a quantity of one model."""

    row_id: str
    model: str
    quantity: str  # lru_hit_rate, overlap (one prompt's), overlap_d (at a distance), reuse_median, reuse_p90, *_range
    measured: float | tuple[float, float]
    role: str  # fit or check
    layers: int
    experts: int
    top_k: int
    capacity: int = 0  # lru_hit_rate: slots per layer
    distances: tuple[int, ...] = (1,)  # overlap_d: tokens apart (several: their mean, as "d=8-16" is read)
    prompt: str = ""  # overlap: the prompt's trace
    tokens: int = 0  # overlap: the prompt's tokens per layer
    tolerance: float = TOL_POINT
    unit: str = "fraction"

    @property
    def is_range(self) -> bool:
        return isinstance(self.measured, tuple)


@dataclass(frozen=True)
class Params:
    """The fitted routing parameters: an exponent per model, the shared reuse, skew spread, depth slope and drift
    (a request's own hot set: its weight, and its size as a fraction of a layer's experts)."""

    exponents: dict[str, float]
    locality: float
    exponent_spread: float
    exponent_depth_slope: float
    drift_weight: float = 0.0
    drift_hot_fraction: float = 0.0

    def hot_experts(self, experts: int) -> int:
        return int(round(self.drift_hot_fraction * experts)) if self.drift_weight > 0 else 0

    def law(self, model: str, layers: int, experts: int, top_k: int) -> RoutingLaw:
        h = self.hot_experts(experts)
        return RoutingLaw(layers, experts, top_k, exponent=self.exponents[model], locality=self.locality,
                          exponent_spread=self.exponent_spread, exponent_depth_slope=self.exponent_depth_slope,
                          drift_weight=self.drift_weight if h else 0.0, drift_hot_experts=h)


SHARED = {  # name: (unit, lower bound, upper bound, start)
    "locality": ("fraction", 0.0, 0.95, 0.3),
    "exponent_spread": ("1", 0.0, 1.0, 0.2),
    "exponent_depth_slope": ("1", -2.0, 2.0, 0.0),
    "drift_weight": ("fraction", 0.0, 0.95, 0.4),
    "drift_hot_fraction": ("fraction", 1.0 / 32, 0.75, 0.25),
}
HELD = {"exponent_depth_slope": (0.0, "the fitted rows pool every layer (per-layer hit rates and overlaps are not in "
                                      "the table); only the ranges across layers, which are checks, see depth")}
EXPONENT = ("1", 0.0, 4.0, 1.0)


def geometry_problem(layers: int, experts: int, tokens: int = 0) -> str | None:
    """Why ``layers`` x ``experts`` or prompts of ``tokens`` tokens a layer are beyond the fit's arrays, or None."""
    if tokens > MAX_PROMPT_TOKENS:
        return f"prompts of {tokens:,} tokens: expected at most {MAX_PROMPT_TOKENS:,} tokens per layer"
    cells = layers * experts
    return None if cells <= MAX_LAYER_EXPERTS else (f"{layers:,} layers x {experts:,} experts = {cells:,}: expected "
                                                    f"at most {MAX_LAYER_EXPERTS:,} for the routing fit")


TOLERANCES = {"reuse_median": 1.0, "reuse_p90": 2.0, "distinct_range": 4.0, "top8_range": 0.03,
              "entropy_range": 0.2}  # in each statistic's unit; the others: TOL_POINT (overlap_d "~": TOL_ROUGH)


def observation(stat: RoutingStatistic) -> Observation:
    """The observation a routing table's statistic is to the fit: its tolerance, and the prompt of ``PROMPT_TOKENS``
    named by the row when the workload states none."""
    tolerance = TOLERANCES.get(stat.statistic, TOL_POINT)
    if stat.statistic == "overlap_d" and stat.approximate:
        tolerance = TOL_ROUGH
    overlap = stat.statistic == "overlap"
    return Observation(stat.row_id, stat.model, stat.statistic, stat.value, stat.role, stat.layers, stat.experts,
                       stat.top_k, capacity=stat.capacity, distances=stat.distances,
                       prompt=(stat.prompt or stat.table_row) if overlap else "",
                       tokens=(PROMPT_TOKENS if stat.tokens is None else stat.tokens) if overlap else 0,
                       tolerance=tolerance, unit=stat.unit)


def read_table(path: str) -> list[Observation]:
    """The observations of a routing table (:func:`sim.formats.routing_stats.read_routing_table`), each model's
    geometry and each prompt's tokens within the fit's arrays (:func:`geometry_problem`, a one-line ScenarioError
    naming the row and column)."""
    out = []
    for stat in read_routing_table(path):
        if too_large := geometry_problem(stat.layers, stat.experts):
            raise ScenarioError(path, f"row {stat.table_row}.n_experts", too_large)
        if stat.statistic == "overlap" and (too_long := geometry_problem(0, 0, stat.tokens or 0)):
            raise ScenarioError(path, f"row {stat.table_row}.workload", too_long)
        out.append(observation(stat))
    return out


@dataclass
class Workload:
    """The prompts of one model: tokens per layer of each, in the order their skews rise."""

    tokens: np.ndarray

    @property
    def z(self) -> np.ndarray:
        from scipy.stats import norm  # here: a table read (and refused) does not wait for scipy

        n = self.tokens.size
        return norm.ppf((np.arange(n) + 0.5) / n)


def workloads(obs: list[Observation]) -> dict[str, Workload]:
    """Each model's prompts: the tokens of its measured prompts (sorted by their overlap, as the skews are), else
    ``PROMPTS`` of ``PROMPT_TOKENS``."""
    out = {}
    for model in sorted({o.model for o in obs}):
        prompts = sorted((o for o in obs if o.model == model and o.quantity == "overlap"), key=lambda o: o.measured)
        tokens = [o.tokens for o in prompts] or [PROMPT_TOKENS] * PROMPTS
        out[model] = Workload(np.array(tokens, dtype=int))
    return out


def prompt_laws(p: Params, model: str, layers: int, experts: int, top_k: int, z: np.ndarray,
                seed: int = 0) -> np.ndarray:
    """[prompts, layers, experts] each prompt's law: each layer's Zipf law by rank (the profile's permutation), raised
    to the prompt's skew, mixed with its own hot set (``drift_weight`` on ``drift_hot_fraction`` of the experts, drawn
    per prompt and layer from ``seed``: the same sets at every evaluation; a fractional size weights its last
    expert by the fraction, so the law moves smoothly with it)."""
    law = RoutingLaw(layers, experts, top_k, exponent=p.exponents[model], exponent_depth_slope=p.exponent_depth_slope)
    ex = layer_exponents(law)
    skew = np.exp(p.exponent_spread * np.asarray(z))
    q = np.array([[zipf_weights(experts, float(e * g)) for e in ex] for g in skew])
    if p.drift_weight > 0:
        size = min(max(p.drift_hot_fraction * experts, 1.0), float(experts))
        whole = int(np.floor(size))
        weights = np.zeros(experts)
        weights[:whole] = 1.0
        if whole < experts:
            weights[whole] = size - whole
        weights /= weights.sum()
        rng = np.random.default_rng(seed)
        order = np.argsort(rng.random((q.shape[0], layers, experts)), axis=2)  # hot set: the first of a permutation
        hot = np.zeros_like(q)
        np.put_along_axis(hot, order, np.broadcast_to(weights, q.shape), axis=2)
        q = (1.0 - p.drift_weight) * q + p.drift_weight * hot
    return q


def predict_model(obs: list[Observation], p: Params, model: str, wl: Workload, full: bool = True) -> dict[str, object]:
    """Each quantity of ``model`` the companions give under ``p``: keyed by quantity (and capacity or distance);
    ``full`` False: only what fit rows use (no ranges, no reuse distances)."""
    o0 = next(o for o in obs if o.model == model)
    k = o0.top_k
    q = prompt_laws(p, model, o0.layers, o0.experts, k, wl.z)
    pi = inclusion_probabilities(q, k)
    rho = p.locality
    n = wl.tokens
    out: dict[str, object] = {}
    per_prompt = consecutive_overlap(pi, rho, k).mean(axis=1)  # [prompts]
    out["overlap"] = np.sort(per_prompt)
    caps = sorted({o.capacity for o in obs if o.model == model and o.quantity == "lru_hit_rate"})
    if caps:
        rate = lru_cold_hit_rates(pi.reshape(-1, pi.shape[2]), caps, rho, np.repeat(n, pi.shape[1]))
        rate = rate.reshape(pi.shape[0], pi.shape[1], len(caps)).mean(axis=1)  # [prompts, capacities]
        for c, cap in enumerate(caps):  # pooled: each prompt's references, top_k per token and layer
            out[("lru", cap)] = float((rate[:, c] * n).sum() / n.sum())
    for o in obs:
        if o.model != model:
            continue
        if o.quantity == "overlap_d":
            out[("overlap_d", o.distances)] = float(np.mean([consecutive_overlap(pi, rho, k, d).mean()
                                                             for d in o.distances]))
    statics = sorted({o.capacity for o in obs if o.model == model and o.quantity == "static_hit_rate"})
    if statics:  # per layer, the experts the prompts together use most, in the sample: their share of lookups
        pooled = (pi * n[:, None, None]).sum(axis=0) / n.sum()  # [layers, experts] inclusion over all prompts
        ranked = -np.sort(-pooled, axis=1)
        for cap in statics:
            out[("static", cap)] = float(ranked[:, :cap].sum(axis=1).mean() / k)
    if not full:
        return out
    # distinct experts over each prompt, per layer (median over prompts), and the share statistics
    with np.errstate(divide="ignore"):
        log_out = np.log1p(-np.minimum(pi, 1.0))
    distinct = (-np.expm1((1.0 + (n[:, None, None] - 1.0) * (1.0 - rho)) * log_out)).sum(axis=2)
    out["distinct_range"] = _layer_range(distinct)
    share = pi / k
    ranked = -np.sort(-share, axis=2)
    out["top1_range"] = _layer_range(ranked[:, :, 0])
    out["top8_range"] = _layer_range(ranked[:, :, :8].sum(axis=2))
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(share > 0, share * np.log2(share), 0.0).sum(axis=2)
    out["entropy_range"] = _layer_range(ent)
    med, p90 = _reuse_quantiles(pi, rho, n)
    out["reuse_median"], out["reuse_p90"] = med, p90
    return out


def _layer_range(x: np.ndarray) -> tuple[float, float]:
    """(min, max) across layers of the per-layer median over prompts."""
    m = np.median(x, axis=0)
    return float(m.min()), float(m.max())


def _reuse_quantiles(pi: np.ndarray, rho: float, tokens: np.ndarray) -> tuple[float, float]:
    """Median reuse distance pooled over prompts and layers, and the median over prompts and layers of each one's
    90th percentile. Within a prompt of ``n`` tokens a gap ``g`` has ``n - g`` chances: expected reuses ``sum_e (n -
    g) pi_e P_e(g)``, ``P_e(1) = a_e``, ``P_e(g) = (1 - a_e) b_e (1 - b_e)^(g - 2)`` (the two-state chain)."""
    b = returning(pi, rho)
    a = 1.0 - np.divide((1.0 - pi) * b, pi, out=np.zeros_like(pi), where=pi > 0)
    pooled = np.zeros(max(int(tokens.max()) - 1, 1))
    p90s: list[int] = []
    step = max(GAP_CELLS // pi[0].size, 1)  # gaps at a time: arrays of at most GAP_CELLS cells
    for j, n in ((j, n) for j, n in enumerate(tokens.tolist()) if n > 1):
        counts = np.concatenate([_reuse_counts(pi[j], a[j], b[j], n, np.arange(lo, min(lo + step, n)))
                                 for lo in range(1, n, step)])  # [gaps, layers]
        pooled[:n - 1] += counts.sum(axis=1)
        cdf = np.cumsum(counts, axis=0) / np.maximum(counts.sum(axis=0), 1e-300)
        p90s.extend((np.argmax(cdf >= 0.9, axis=0) + 1).tolist())
    cdf = np.cumsum(pooled) / max(pooled.sum(), 1e-300)
    return float(np.argmax(cdf >= 0.5) + 1), float(np.median(p90s)) if p90s else float("nan")


def _reuse_counts(pi: np.ndarray, a: np.ndarray, b: np.ndarray, n: int, g: np.ndarray) -> np.ndarray:
    """[gaps, layers] expected reuses at each gap ``g`` of a prompt of ``n`` tokens (:func:`_reuse_quantiles`)."""
    pg = np.where((g == 1)[:, None, None], a[None], (1 - a)[None] * b[None] * (1 - b)[None] ** np.maximum(
        g - 2, 0)[:, None, None])
    return ((n - g)[:, None, None] * pi[None] * pg).sum(axis=2)


def simulated(o: Observation, pred: dict[str, dict[str, object]], obs: list[Observation]) -> object:
    """The companions' value for observation ``o``."""
    m = pred[o.model]
    if o.quantity == "lru_hit_rate":
        return m[("lru", o.capacity)]
    if o.quantity == "static_hit_rate":
        return m[("static", o.capacity)]
    if o.quantity == "overlap":
        prompts = sorted((x for x in obs if x.model == o.model and x.quantity == "overlap"),
                         key=lambda x: (x.measured, x.row_id))
        return float(m["overlap"][prompts.index(o)])
    if o.quantity == "overlap_d":
        return m[("overlap_d", o.distances)]
    return m[o.quantity]


def error(o: Observation, value: object) -> float:
    """Simulated minus measured (a range: the distance outside it, signed; 0 inside)."""
    if o.is_range:
        lo, hi = o.measured
        vlo, vhi = value
        return float(min(vlo - lo, 0.0) + max(vhi - hi, 0.0))
    return float(value) - float(o.measured)


@dataclass
class FitResult:
    params: Params
    stderr: dict[str, float | None]
    observations: list[Observation]
    rows: list[dict]  # per observation: id, quantity, measured, simulated, sampled, error, role, tolerance
    cost: float
    evaluations: int
    seed: int
    held: dict[str, str] = field(default_factory=dict)


def _unpack(x: np.ndarray, models: list[str], free: list[str], held: dict[str, float]) -> Params:
    exps = dict(zip(models, map(float, x[:len(models)]), strict=True))
    vals = {**held, **dict(zip(free, map(float, x[len(models):]), strict=True))}
    return Params(exps, **{n: vals[n] for n in SHARED})


def predict(obs: list[Observation], p: Params, wls: dict[str, Workload], full: bool = True
            ) -> dict[str, dict[str, object]]:
    return {m: predict_model(obs, p, m, wls[m], full) for m in wls}


def fit(obs: list[Observation], seed: int = 0, held: dict[str, float] | None = None,
        sample: bool = True, starts: int = 2) -> FitResult:
    """Least squares on the ``fit`` rows (errors over tolerance), from the declared starts and ``starts - 1`` more
    drawn from ``seed``; every row evaluated, and (``sample``) simulated from sampled routes too. ``held``: shared
    parameters held at a value (default: :data:`HELD`)."""
    from scipy.optimize import least_squares

    held = {n: v for n, (v, _) in HELD.items()} if held is None else dict(held)
    models = sorted({o.model for o in obs})
    free = [n for n in SHARED if n not in held]
    wls = workloads(obs)
    fitted = [o for o in obs if o.role == "fit" and not o.is_range and o.quantity not in ("reuse_median", "reuse_p90")]
    if not fitted:
        raise ScenarioError("routing table", "role", "no fit rows")
    evals = 0

    def residuals(x: np.ndarray) -> np.ndarray:
        nonlocal evals
        evals += 1
        p = _unpack(x, models, free, held)
        pred = predict(obs, p, wls, full=False)
        return np.array([error(o, simulated(o, pred, obs)) / o.tolerance for o in fitted])

    lo = np.array([EXPONENT[1]] * len(models) + [SHARED[n][1] for n in free])
    hi = np.array([EXPONENT[2]] * len(models) + [SHARED[n][2] for n in free])
    best = None
    rng = np.random.default_rng(seed)
    x_starts = [np.array([EXPONENT[3]] * len(models) + [SHARED[n][3] for n in free])]
    x_starts += [lo + (hi - lo) * (0.15 + 0.7 * rng.random(lo.size)) for _ in range(max(starts - 1, 0))]
    for x0 in x_starts:
        res = least_squares(residuals, x0, bounds=(lo, hi), x_scale="jac", diff_step=1e-3, max_nfev=120)
        if best is None or res.cost < best.cost:
            best = res
    p = _unpack(best.x, models, free, held)
    names = [f"exponent.{m}" for m in models] + free
    stderr: dict[str, float | None] = dict.fromkeys(names)
    dof = len(fitted) - len(names)
    if dof > 0:
        j = best.jac
        try:
            cov = np.linalg.inv(j.T @ j) * (2 * best.cost / dof)
            for i, name in enumerate(names):
                at_bound = np.isclose(best.x[i], lo[i], atol=1e-6) or np.isclose(best.x[i], hi[i], atol=1e-6)
                stderr[name] = None if at_bound or cov[i, i] < 0 else float(np.sqrt(cov[i, i]))
        except np.linalg.LinAlgError:
            pass
    pred = predict(obs, p, wls)
    sampled = sample_statistics(obs, p, wls, seed) if sample else {}
    rows = []
    for o in obs:
        value = simulated(o, pred, obs)
        rows.append({"row_id": o.row_id, "model": o.model, "quantity": o.quantity, "role": o.role,
                     "capacity": o.capacity or None, "measured": o.measured, "simulated": value,
                     "sampled": sampled.get(o.row_id), "error": error(o, value), "tolerance": o.tolerance,
                     "unit": o.unit})
    return FitResult(p, stderr, obs, rows, float(best.cost), evals, seed,
                     held={n: HELD[n][1] if n in HELD else "held by the caller" for n in held})


def sample_statistics(obs: list[Observation], p: Params, wls: dict[str, Workload], seed: int) -> dict[str, object]:
    """Every row measured on sampled routes as the source measured its traces (:mod:`sim.calibration.route_sampler`:
    a prompt's skew decile, its own hot sets): LRU of token sets cold per prompt, overlaps, shares, entropy, reuse."""
    from sim.calibration.route_sampler import sampled_trace
    from sim.moe.trace_replay import lru_hit_rates

    out: dict[str, object] = {}
    rng = np.random.default_rng(seed)
    for model, wl in wls.items():
        mine = [o for o in obs if o.model == model]
        law = p.law(model, mine[0].layers, mine[0].experts, mine[0].top_k)
        trace = sampled_trace(law, wl.tokens, np.exp(law.exponent_spread * wl.z), rng)
        caps = sorted({o.capacity for o in mine if o.quantity == "lru_hit_rate"})
        lru = dict(zip(caps, lru_hit_rates(trace, caps), strict=True)) if caps else {}
        o1, who = trace.overlap(1)
        per_prompt = np.sort([o1[who == j].mean() for j in range(wl.tokens.size)])
        stats = trace.per_request_layer()
        prompts = sorted((x for x in mine if x.quantity == "overlap"), key=lambda x: (x.measured, x.row_id))
        names = {"distinct_range": "distinct", "top1_range": "top1", "top8_range": "top8", "entropy_range": "entropy"}
        for o in mine:
            if o.quantity == "lru_hit_rate":
                out[o.row_id] = float(lru[o.capacity])
            elif o.quantity == "static_hit_rate":
                c, t = trace.counts(law.experts)
                out[o.row_id] = float(-np.sort(-c, axis=1)[:, :o.capacity].sum() / (t.sum() * law.top_k))
            elif o.quantity == "overlap":
                out[o.row_id] = float(per_prompt[prompts.index(o)])
            elif o.quantity == "overlap_d":
                out[o.row_id] = float(np.mean([trace.overlap(x)[0].mean() for x in o.distances]))
            elif o.quantity == "reuse_median":
                out[o.row_id] = float(np.median(np.concatenate(trace.reuse_distances())))
            elif o.quantity == "reuse_p90":
                out[o.row_id] = float(np.nanmedian(stats["reuse_p90"]))
            elif o.quantity in names:
                out[o.row_id] = _layer_range(stats[names[o.quantity]])
    return out
