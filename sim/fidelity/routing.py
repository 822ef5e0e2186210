"""Expert cache and routing as a fidelity domain: the routing law and the expert-cache companions against every row of
``calibration/public/expert_cache.csv`` they can express.

The mechanism is the one ``sim fit-routing`` fits (:mod:`sim.calibration.routing_fit`): a request routes each layer
by a Zipf law by rank with its model's exponent, raised to the request's own skew ``exp(exponent_spread z)`` and mixed
with a hot set of its own (``drift_weight`` on ``drift_hot_fraction`` of the experts); consecutive tokens share
experts through ``locality``; inclusion probabilities by Rosen's approximation (:mod:`sim.moe.routing`). The caches
are the project's (:mod:`sim.moe.expert_cache`): a per-layer LRU by Che's approximation with reuse, started empty
and read for a request's tokens, or warm; a static cache of the hottest experts (ranked in-sample or from the
profile). A request of unknown skew is the ten skew deciles ``z = Phi^-1((i - 1/2) / 10)``; a statistic of one
request is their mean (weighted by tokens where it pools lookups).

Fitted (:meth:`RoutingDomain.fit`): an exponent per model of the training rows and the shared ``locality``,
``exponent_spread``, ``drift_weight``, ``drift_hot_fraction`` (``exponent_depth_slope`` held at 0, as sim
fit-routing holds it), by least squares on errors over each row's tolerance (1 point, 3 points for values the source
gives as ``~``), on the kinds sim fit-routing fits: hit rates and overlaps. Ranges across layers, reuse distances,
distinct experts and top-N shares are predicted, never fitted. A training source's per-prompt overlaps are matched
to the deciles sorted (the prompts are exchangeable); a predicted prompt overlap is the deciles' mean (which prompt
it is is not known without its measured value). A model no training row covers takes the shared default exponent:
the mean of the fitted models' exponents (the package default 1.0 when none is fitted).

How each source's rows are read (slot units, warm or cold caches, workloads, what is excluded and why):
:mod:`sim.fidelity.routing_rows`.

Throughput with and without a cache is not predicted: no row's setup is one an engine of the project expresses (the
llama.cpp engine has no expert cache; the MoE engine needs a model file, which DeepSeek-V4-Flash, Qwen3.8-Flash-Next,
Laguna and Nemotron lack, and a stated machine, which the Qwen3-30B-A3B runs of kekzl/imp lack; the rest are forks'
policies the project does not model). Every excluded row says why (:meth:`RoutingDomain.observations`); a row
whose hit rate is observed and whose tok/s is not says so in its label.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import norm

from sim.calibration.routing_fit import (
    EXPONENT,
    HELD,
    PROMPTS,
    SHARED,
    Params,
    _layer_range,
    _reuse_quantiles,
    prompt_laws,
)
from sim.fidelity.domain import Excluded, Observation, Prediction
from sim.fidelity.routing_rows import PCT, TABLE, RouteRow, read_table, rows_of, table_context
from sim.moe.expert_cache import lru_cold_hit_rates
from sim.moe.routing import consecutive_overlap, inclusion_probabilities

PUBLIC = Path(__file__).resolve().parents[2] / "calibration" / "public"
FTOL = 1e-3  # a fit stops when its cost changes by less than this share (errors are in tolerances of 1-3 points)
DEFAULT_EXPONENT = 1.0  # the package default (sim.config.models.Routing.exponent) when no model is fitted
PACKAGE = {"locality": 0.0, "exponent_spread": 0.0, "exponent_depth_slope": 0.0, "drift_weight": 0.0,
           "drift_hot_fraction": SHARED["drift_hot_fraction"][3]}  # sim.config.models.Routing's defaults (no drift)


@dataclass(frozen=True)
class RoutingFit:
    """Shared routing parameters fitted to training observations: the exponent of each model they cover, the shared
    reuse, skew and drift, and the default exponent of a model they do not cover."""

    params: Params
    default_exponent: float
    default_from: str  # how the default exponent was chosen
    rows: int  # training observations fitted
    cost: float
    evaluations: int

    def exponent(self, model: str) -> tuple[float, str]:
        if model in self.params.exponents:
            return self.params.exponents[model], f"exponent {self.params.exponents[model]:.3g} fitted"
        return self.default_exponent, f"model not in training: shared default exponent {self.default_exponent:.3g} " \
                                      f"({self.default_from})"


class RoutingDomain:
    """Expert-cache hit rates, overlaps and routing statistics of ``expert_cache.csv`` (see the module docstring).

    ``public``: the folder of the public tables; ``starts``: least-squares starts of a fit (the declared one and
    ``starts - 1`` drawn from ``seed``)."""

    name = "expert cache and routing"

    def __init__(self, public: str | os.PathLike = PUBLIC, starts: int = 1, seed: int = 0) -> None:
        self.path = os.path.join(str(public), TABLE)
        self.starts = starts
        self.seed = seed

    def observations(self) -> tuple[list[Observation], list[Excluded]]:
        rows = read_table(self.path)
        context = table_context(rows)
        obs: list[Observation] = []
        excluded: list[Excluded] = []
        for r in rows:
            got = rows_of(r, *context)
            if isinstance(got, str):
                excluded.append(Excluded(TABLE, r.row_id, r.source_id, r.setup_id, got))
                continue
            for quantity, unit, measured, key, label in got:
                obs.append(Observation(TABLE, r.row_id, r.source_id, r.setup_id, quantity, unit,
                                       float(measured), engine=r.engine[:60], grade=r.grade, label=label,
                                       key=key))
        return obs, excluded

    def fit(self, train: list[Observation]) -> RoutingFit:
        rows = [o for o in train if isinstance(o.key, RouteRow) and o.key.fitted]
        return fit_routing(rows, starts=self.starts, seed=self.seed)

    def predict(self, fitted: RoutingFit, observations: list[Observation]) -> list[Prediction]:
        keys = [o.key for o in observations]
        values = evaluate(fitted, keys)
        out = []
        for key, v in zip(keys, values, strict=True):
            value = float(np.mean(v)) if isinstance(v, np.ndarray) else float(v)
            out.append(Prediction(value, mechanism(fitted, key)))
        return out


def mechanism(fitted: RoutingFit, key: RouteRow) -> str:
    """Which part of the model gives the value: the cache companion, the workload read, and the exponent used."""
    ranked = "by the shared law" if key.ranking == "profile" else "in-sample"
    dist = "-".join(str(d) for d in key.distances)
    end = "lowest" if key.kind == "range_lo" else "highest"
    what = {"lru": f"per-layer LRU of {key.capacity:.4g} experts (Che with reuse)",
            "static": f"static cache of {key.capacity:.4g} experts per layer, ranked {ranked}",
            "overlap": "consecutive overlap: the mean over prompts of unknown skew",
            "overlap_d": f"overlap at distance {dist} (reuse^d)",
            "reuse_median": "reuse distances of the two-state chain",
            "reuse_p90": "reuse distances of the two-state chain",
            "range_lo": f"{key.stat} of the {end} layer (every layer alike: depth slope held 0)",
            "range_hi": f"{key.stat} of the {end} layer (every layer alike: depth slope held 0)",
            "distinct": "distinct experts of a layer over the tokens",
            "top_share": f"share of the {key.capacity:g} most frequent experts"}.get(key.kind, key.kind)
    _, exp_note = fitted.exponent(key.model)
    parts = [what, key.note, exp_note]
    if not key.layers_stated:
        parts.append(f"layers not stated: {key.layers} computed")
    return "; ".join(p for p in parts if p)


def _params_for(fitted: RoutingFit, model: str) -> Params:
    exponent, _ = fitted.exponent(model)
    return replace(fitted.params, exponents={model: exponent})


def evaluate(fitted: RoutingFit, keys: list[RouteRow]) -> list[float | np.ndarray]:
    """Each key's value under ``fitted``: a number, or for an overlap each decile's (sorted by skew)."""
    z = norm.ppf((np.arange(PROMPTS) + 0.5) / PROMPTS)
    laws: dict[tuple, np.ndarray] = {}
    out: list[float | np.ndarray] = [0.0] * len(keys)
    lru: dict[tuple, list[int]] = {}
    p = fitted.params
    rho = p.locality
    for i, key in enumerate(keys):
        geo = (key.model, key.layers, key.experts, key.top_k)
        if geo not in laws:
            q = prompt_laws(_params_for(fitted, key.model), key.model, key.layers, key.experts, key.top_k, z)
            laws[geo] = inclusion_probabilities(q, key.top_k)
        pi = laws[geo]
        k = key.top_k
        n = np.asarray(key.tokens, dtype=float)
        if key.kind == "lru":
            lru.setdefault((geo, key.tokens), []).append(i)
        elif key.kind == "static":
            out[i] = PCT * _static(pi, n, key)
        elif key.kind == "overlap":
            out[i] = PCT * consecutive_overlap(pi, rho, k).mean(axis=1)
        elif key.kind == "overlap_d":
            out[i] = PCT * float(np.mean([consecutive_overlap(pi, rho, k, d).mean() for d in key.distances]))
        elif key.kind in ("reuse_median", "reuse_p90"):
            med, p90 = _reuse_quantiles(pi, rho, np.rint(n).astype(int))
            out[i] = med if key.kind == "reuse_median" else p90
        elif key.kind in ("range_lo", "range_hi", "distinct"):
            stat = _layer_stat(pi, rho, n, k, key.stat or "distinct")
            if key.kind == "distinct":
                out[i] = float(stat.mean())
            else:
                lo, hi = _layer_range(stat)
                scale = PCT if key.stat in ("top1", "top8") else 1.0
                out[i] = scale * (lo if key.kind == "range_lo" else hi)
        elif key.kind == "top_share":
            ranked = -np.sort(-pi, axis=2)
            out[i] = PCT * float(ranked[:, :, :int(key.capacity)].sum(axis=2).mean() / k)
        else:
            raise ValueError(f"unknown kind {key.kind!r}")
    for (geo, tokens), idx in lru.items():
        pi = laws[geo]
        caps = sorted({keys[i].capacity for i in idx})
        n = np.asarray(tokens, dtype=float)
        e = pi.shape[2]
        rate = lru_cold_hit_rates(pi.reshape(-1, e), caps, rho, np.repeat(n, pi.shape[1]))
        rate = rate.reshape(pi.shape[0], pi.shape[1], len(caps)).mean(axis=1)  # [requests, capacities]
        pooled = (rate * n[:, None]).sum(axis=0) / n.sum()  # each request's lookups: top_k per token and layer
        for i in idx:
            out[i] = PCT * float(pooled[caps.index(keys[i].capacity)])
    return out


def _static(pi: np.ndarray, n: np.ndarray, key: RouteRow) -> float:
    """Hit rate of a static cache of ``key.capacity`` experts per layer: its lookup share (pi / top_k); a fractional
    capacity holds that share of the next expert's lookups."""
    w = n / n.sum()
    if key.ranking == "profile":  # the shared law's head: the first ranks of every layer (the hot sets are own)
        ranked = pi
    elif key.ranking == "pooled":
        ranked = -np.sort(-(pi * w[:, None, None]).sum(axis=0, keepdims=True), axis=2)
        w = np.ones(1)
    else:  # each request's own
        ranked = -np.sort(-pi, axis=2)
    whole = min(int(np.floor(key.capacity)), pi.shape[2])
    cached = ranked[:, :, :whole].sum(axis=2)
    if whole < pi.shape[2]:
        cached = cached + (key.capacity - whole) * ranked[:, :, whole]
    return float((cached.mean(axis=1) * w).sum() / key.top_k)


def _layer_stat(pi: np.ndarray, rho: float, n: np.ndarray, k: int, stat: str) -> np.ndarray:
    """[requests, layers] distinct experts over each request's tokens, top-1 or top-8 share, or entropy (bits)."""
    if stat == "distinct":
        with np.errstate(divide="ignore"):
            log_out = np.log1p(-np.minimum(pi, 1.0))
        return (-np.expm1((1.0 + (n[:, None, None] - 1.0) * (1.0 - rho)) * log_out)).sum(axis=2)
    share = pi / k
    if stat in ("top1", "top8"):
        ranked = -np.sort(-share, axis=2)
        return ranked[:, :, :1 if stat == "top1" else 8].sum(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(share > 0, share * np.log2(share), 0.0).sum(axis=2)


def _residuals(fitted: RoutingFit, rows: list[Observation]) -> np.ndarray:
    """Errors over tolerance of the fitted rows; a source's per-prompt overlaps matched to the deciles sorted."""
    values = evaluate(fitted, [o.key for o in rows])
    res = np.zeros(len(rows))
    groups: dict[str, list[int]] = {}
    for i, (o, v) in enumerate(zip(rows, values, strict=True)):
        if isinstance(v, np.ndarray):
            groups.setdefault(o.key.group, []).append(i)
        else:
            res[i] = (v - o.measured) / o.key.tolerance
    for idx in groups.values():
        pred = np.sort(np.asarray(values[idx[0]]))
        order = sorted(idx, key=lambda j: (rows[j].measured, rows[j].row_id))
        for rank, j in enumerate(order):
            v = pred[rank] if len(idx) == pred.size else float(np.mean(pred))
            res[j] = (v - rows[j].measured) / rows[j].key.tolerance
    return res


def fit_routing(rows: list[Observation], starts: int = 1, seed: int = 0) -> RoutingFit:
    """Least squares of the exponents of the models of ``rows`` and the shared parameters (bounds and starts of sim
    fit-routing's, ``exponent_depth_slope`` held at its value), from the declared start and ``starts - 1`` drawn from
    ``seed``. No rows: the package defaults."""
    rows = sorted(rows, key=lambda o: o.id)  # the same observations in any order give the same fit
    held = {name: value for name, (value, _) in HELD.items()}
    free = [name for name in SHARED if name not in held]
    models = sorted({o.key.model for o in rows})
    if not rows:
        return RoutingFit(Params({}, **PACKAGE), DEFAULT_EXPONENT, "package default: no training rows", 0, 0.0, 0)

    def unpack(x: np.ndarray) -> RoutingFit:
        vals = dict(held)
        vals.update(zip(free, map(float, x[len(models):]), strict=True))
        exps = dict(zip(models, map(float, x[:len(models)]), strict=True))
        return RoutingFit(Params(exps, **{n: vals[n] for n in SHARED}), float(np.mean(list(exps.values()))),
                          f"mean of the {len(models)} fitted models", len(rows), 0.0, 0)

    evals = 0

    def residuals(x: np.ndarray) -> np.ndarray:
        nonlocal evals
        evals += 1
        return _residuals(unpack(x), rows)

    lo = np.array([EXPONENT[1]] * len(models) + [SHARED[n][1] for n in free])
    hi = np.array([EXPONENT[2]] * len(models) + [SHARED[n][2] for n in free])
    rng = np.random.default_rng(seed)
    x_starts = [np.array([EXPONENT[3]] * len(models) + [SHARED[n][3] for n in free])]
    x_starts += [lo + (hi - lo) * (0.15 + 0.7 * rng.random(lo.size)) for _ in range(max(starts - 1, 0))]
    best = None
    for x0 in x_starts:
        res = least_squares(residuals, x0, bounds=(lo, hi), x_scale="jac", diff_step=1e-3, max_nfev=120, ftol=FTOL,
                            xtol=FTOL)
        if best is None or res.cost < best.cost:
            best = res
    out = unpack(best.x)
    return replace(out, cost=float(best.cost), evaluations=evals)
