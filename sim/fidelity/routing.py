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

How each source's rows are read (what the table's columns leave implicit), from the sources' own text:

- BV-lru-sim, BV-routing-overlap, BV-routing-stats (beyondvram locality-analysis.json, docs/moe-track-plan.md):
  a per-layer LRU of token sets started empty for every prompt (``analyze_locality.py``), the prompts' tokens per
  layer from the overlap rows' ``workload`` (the same traces).
- BV-cache-poc(-tput): the author's per-tensor LRU (gate, up and down of a layer each cache the same experts: a
  per-layer LRU of that many experts), a cache started empty for each run; a run's tokens per layer are the stats
  JSON's lookups over its tensors and top_k (``hits + misses`` over ``tensors x top_k``, 142 for both layer ranges).
  Predicted, never fitted: the source's own replay of the same runs gives 38.9% and 42.4% against its engine
  counter's 25.3% and 31.3% (row EC0054's notes, from docs/moe-track-plan.md), so the counter sees lookups a replay
  of the routes (and so the routing law) does not; fitting them would bend the law of every model to the engine's
  counting.
- IMP1374, IMP2061 (kekzl/imp): a slot is one (projection, expert) key, three per expert
  (https://github.com/kekzl/imp/blob/6e67989b42482685d9d4e2b668bb56ce079277df/tools/analysis/expert_cache_sim.py:
  "A key in the device cache is (projection, expert), three per selected expert, and all three share a slot budget";
  https://github.com/kekzl/imp/pull/1374: ``3 * top_k = 24`` slots, "where the cache barely holds a single token"):
  slots / 3 experts per layer; one request, cache cold (256 decode tokens; a 300-token generation); top_k the routed
  experts (the trace records only those; the shared expert is not looked up).
- LCPP27861: per-layer LRU of experts over a long instrumented trace: warm; the static hot list learned on one half
  of the workload and measured on the other: ranked by the profile (the shared Zipf law), not in-sample.
- FT174 (https://github.com/FlashML-org/FreeToken/issues/174): the stationary oracle keeps "top-C experts per layer
  by observed frequency, C = cache_size/num_layers" (the window's own frequencies: in-sample, pooled over its
  requests).

A model whose MoE layer count the table does not state is computed with ``NOMINAL_LAYERS``: every layer has the same
law (depth slope 0), so pooled statistics do not depend on the count.

Throughput with and without a cache is not predicted: no row's setup is one an engine of the project expresses (the
llama.cpp engine has no expert cache; the MoE engine needs a model file, which DeepSeek-V4-Flash, Qwen3.8-Flash-Next,
Laguna and Nemotron lack, and a stated machine, which the Qwen3-30B-A3B runs of kekzl/imp lack; the rest are forks'
policies the project does not model). Every excluded row says why (:meth:`RoutingDomain.observations`); a row
whose hit rate is observed and whose tok/s is not says so in its label.
"""

from __future__ import annotations

import csv
import math
import os
import re
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
    TOL_POINT,
    TOL_ROUGH,
    Params,
    _layer_range,
    _reuse_quantiles,
    prompt_laws,
)
from sim.core.errors import ScenarioError
from sim.fidelity.domain import Excluded, Observation, Prediction
from sim.moe.expert_cache import lru_cold_hit_rates
from sim.moe.routing import consecutive_overlap, inclusion_probabilities

TABLE = "expert_cache.csv"
PUBLIC = Path(__file__).resolve().parents[2] / "calibration" / "public"
NOMINAL_LAYERS = 16  # MoE layers computed when the table does not state them (pooled statistics do not depend on it)
FTOL = 1e-3  # a fit stops when its cost changes by less than this share (errors are in tolerances of 1-3 points)
WARM_TOKENS = 10**7  # a warm LRU: a cache read for this many tokens (its cold start under 1e-5 of the lookups)
KEYS_PER_EXPERT = 3  # kekzl/imp's cache keys: (projection, expert), gate, up and down of each expert
DEFAULT_EXPONENT = 1.0  # the package default (sim.config.models.Routing.exponent) when no model is fitted
PACKAGE = {"locality": 0.0, "exponent_spread": 0.0, "exponent_depth_slope": 0.0, "drift_weight": 0.0,
           "drift_hot_fraction": SHARED["drift_hot_fraction"][3]}  # sim.config.models.Routing's defaults (no drift)
PCT = 100.0
MAX_ROWS = 100_000


@dataclass(frozen=True)
class RouteRow:
    """What the mechanism needs of one observation (its ``key``): never its measured value."""

    model: str
    layers: int
    experts: int
    top_k: int
    kind: str  # lru, static, overlap, overlap_d, reuse_median, reuse_p90, range_lo, range_hi, distinct, top_share
    tokens: tuple[float, ...]  # tokens per layer of each of the PROMPTS requests (the skew deciles)
    capacity: float = 0.0  # experts a layer's cache holds (a fraction: that share of the next); top-N's N
    ranking: str = "pooled"  # static: pooled (in-sample over the requests), own (each request's), profile (shared law)
    distances: tuple[int, ...] = (1,)  # overlap_d: tokens apart (their mean)
    stat: str = ""  # range ends: distinct, top1, top8, entropy
    fitted: bool = False  # enters the fit (hit rates and overlaps)
    tolerance: float = TOL_POINT * PCT  # of the error in the fit, in the observation's unit
    group: str = ""  # overlap: the prompts matched together (source and model)
    layers_stated: bool = True
    note: str = ""  # how the row was read, for the mechanism string


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


def _num(text: str) -> float | None:
    """The leading number of a cell ("~67", "~10 (uniform 6.2)", "31.27"), None when there is none."""
    m = re.match(r"\s*~?\s*([0-9]+(?:\.[0-9]+)?)", text or "")
    return float(m.group(1)) if m else None


def _value(text: str) -> float:
    """A cell's leading number (NaN when it holds none)."""
    v = _num(text)
    return float("nan") if v is None else v


def _pct(text: str) -> float:
    """A fraction cell in percent (NaN when it holds no number)."""
    return round(_value(text) * PCT, 9)


def _int(text: str) -> int | None:
    m = re.match(r"\s*([0-9]+)", text or "")
    return int(m.group(1)) if m else None


def read_table(path: str | os.PathLike) -> list[dict[str, str]]:
    """The rows of ``expert_cache.csv`` (a missing file or column is a ScenarioError naming it)."""
    path = str(path)
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            rows = []
            for n, r in enumerate(reader):
                if n >= MAX_ROWS:
                    raise ScenarioError(path, "", f"more than {MAX_ROWS:,} rows")
                rows.append({k: (v or "").strip() for k, v in r.items() if k is not None})
            fields = reader.fieldnames or []
    except FileNotFoundError:
        raise ScenarioError(path, "", "file not found") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ScenarioError(path, "", f"cannot read: {exc}") from None
    need = ("row_id", "source_id", "setup_id", "grade", "engine", "model", "n_moe_layers", "n_experts", "top_k",
            "cache_policy", "cache_slots_per_layer", "cache_slots_total", "hit_rate_pct", "metric_name",
            "metric_value", "workload", "notes", "tg_tok_s", "cached_layers")
    missing = [c for c in need if c not in fields]
    if missing:
        raise ScenarioError(path, missing[0], "a column of expert_cache.csv (calibration/public/README.md)")
    return rows


def _prompt_tokens(rows: list[dict[str, str]]) -> dict[str, tuple[float, ...]]:
    """Per model, the tokens per layer of the traced prompts (the overlap rows' workload "...: 139 tokens/layer"),
    in table order."""
    out: dict[str, list[float]] = {}
    for r in rows:
        m = re.search(r":\s*(\d+)\s*tokens/layer", r["workload"])
        if r["metric_name"].lower().startswith("mean consecutive-token expert overlap") and m:
            out.setdefault(r["model"], []).append(float(m.group(1)))
    return {k: tuple(v) for k, v in out.items() if len(v) == PROMPTS}


def _run_tokens(rows: list[dict[str, str]]) -> dict[str, float]:
    """BV-cache-poc: per cached-layer range, a run's tokens per layer: lookups over tensors and top_k."""
    out = {}
    for r in rows:
        m = re.search(r"hits=(\d+)\s+misses=(\d+)\s+tensors=(\d+)", r["notes"])
        k = _int(r["top_k"])
        if m and k:
            out[r["cached_layers"]] = (int(m.group(1)) + int(m.group(2))) / (int(m.group(3)) * k)
    return out


def _excluded_why(r: dict[str, str]) -> str | None:
    """Why a row cannot be expressed, or None (checked before it is read)."""
    src, policy, engine = r["source_id"], r["cache_policy"].lower(), r["engine"].lower()
    model, notes = r["model"], r["notes"].lower()
    if "over disk" in engine or "disk-resident" in notes:
        return "a RAM cache of disk-resident experts (RAM over disk), not the VRAM expert cache the project models"
    if not model or model.lower().startswith("not specified"):
        return "model not stated (and the hardware of the run not stated)"
    if "fate" in policy:
        if r["hit_rate_pct"]:
            return ("FATE pool: prefetches the experts it predicts (fate_prefetched), a policy the project does not "
                    "model (LRU or static); its tok/s is that fork's")
        return ("tok/s of a llama.cpp fork with its cache off (default --fit placement): a llama.cpp offload run, "
                "the llama.cpp domain's, not an expert-cache row")
    if "adaptive" in policy:
        return ("adaptive hot-expert cache with admission after repeated use (ADMIT_AFTER): a policy the project "
                "does not model; DeepSeek-V4-Flash has no model file in calibration/models (and the host is not "
                "stated)")
    if "heat-protected" in policy or "soft mode" in policy:
        return ("moe-cache with heat-protected eviction / partial expert eviction: a policy the project does not "
                "model; Laguna-S-2.1's geometry and model file not available")
    if "lfru" in policy:
        return "GPU not stated; LFRU policy (frequency and recency), which the project does not model"
    if "pin hottest half" in policy:
        return "hybrid policy (hottest half pinned, LRU on the rest): the project's caches are LRU or static"
    if "resident fraction" in policy:
        return ("tensor-parallel ranks (TP=3), each with its own resident fraction and a host pool streamed per "
                "forward; geometry (experts, top_k) not stated; no engine models tensor parallelism")
    if src.startswith("C3090-929"):
        return ("tok/s of llama.cpp forks quoted third-hand: cache sizes, geometry and host CPU not stated; no "
                "model file for Laguna-S-2.1 or DeepSeek-V4 in calibration/models")
    if src.startswith("LCPP26563"):
        return ("tok/s of llama.cpp on SYCL with every MoE layer on the CPU and a hot-expert store: the llama.cpp "
                "engine has no expert cache; DeepSeek-V4-Flash has no model file in calibration/models")
    if src.startswith("IMP1365"):
        if r["hit_rate_pct"]:
            return ("cache size not stated (the engine's default budget, no slots in the row); its tok/s: hardware "
                    "not stated (the GPU only from the repository's README; host, RAM and PCIe link not stated)")
        return ("tok/s only: hardware not stated (the GPU only from the repository's README; host, RAM and PCIe "
                "link not stated)")
    if src == "LCPP27861-csantiago78" and not r["hit_rate_pct"]:
        return ("tok/s only: 2x RTX 3090 with a dual-socket Xeon whose model is not stated; Qwen3.8-Flash-Next has "
                "no model file in calibration/models")
    if src == "BV-cache-poc-tput" and not r["hit_rate_pct"]:
        return ("tok/s of the cache build with its cache off at llama.cpp's partial -ngl placement: a llama.cpp "
                "offload run (the llama.cpp engine has no expert cache; the llama.cpp domain's)")
    if src.startswith("FT174"):
        if "live experts" in r["metric_name"].lower():
            return "tokens of the serving window not stated (distinct experts need them)"
        if "oracle" not in policy:
            return "a range over the serving window (8-18%), not one value to predict"
    return None


def _geometry(r: dict[str, str]) -> tuple[int, int, int, bool] | None:
    experts, k = _int(r["n_experts"]), _int(r["top_k"])
    if not experts or not k or k > experts:
        return None
    layers = _int(r["n_moe_layers"])
    return (layers or NOMINAL_LAYERS), experts, k, bool(layers)


def _rows_of(r: dict[str, str], prompts: dict[str, tuple[float, ...]], runs: dict[str, float]
             ) -> list[tuple[str, str, float, RouteRow, str]] | str:
    """The observations of one row as (quantity, unit, measured, key, label), or why it is excluded."""
    why = _excluded_why(r)
    if why:
        return why
    geo = _geometry(r)
    if geo is None:
        return "geometry (experts per layer, top_k) not stated"
    layers, experts, k, stated = geo
    model, src = r["model"], r["source_id"]
    base = dict(model=model, layers=layers, experts=experts, top_k=k, layers_stated=stated)
    policy, metric = r["cache_policy"].lower(), r["metric_name"].lower()
    value = r["metric_value"]
    rough = TOL_ROUGH * PCT if "~" in r["hit_rate_pct"] else TOL_POINT * PCT
    hit = _num(r["hit_rate_pct"])
    traced = prompts.get(model)
    out: list[tuple[str, str, float, RouteRow, str]] = []
    if src == "BV-lru-sim" and hit is not None and traced:
        cap = float(_int(r["cache_slots_per_layer"]) or 0)
        key = RouteRow(kind="lru", tokens=traced, capacity=cap, fitted=True, note="trace replay, cold per prompt",
                       **base)
        out.append(("hit_rate", "%", hit, key, f"{model} per-layer LRU @{cap:g} (replay of traces)"))
    elif src in ("BV-cache-poc", "BV-cache-poc-tput") and hit is not None:
        tokens = runs.get(r["cached_layers"])
        if tokens is None:
            return "tokens of the run not stated (no stats counts for this layer range)"
        cap = float(_int(r["cache_slots_per_layer"]) or 0)
        key = RouteRow(kind="lru", tokens=(tokens,) * PROMPTS, capacity=cap,
                       note=f"engine counter, a run of {tokens:.0f} tokens, cold; predicted, not fitted (the "
                            "source's replay of the same runs: 38.9/42.4%)", **base)
        extra = "; its tok/s not predicted (llama.cpp placement with a per-tensor cache)" if r["tg_tok_s"] else ""
        out.append(("hit_rate", "%", hit, key, f"{model} per-tensor LRU @{cap:g}, layers {r['cached_layers']}"
                    f"{extra}"))
    elif src == "BV-routing-overlap" and metric.startswith("mean consecutive-token expert overlap") and traced:
        key = RouteRow(kind="overlap", tokens=traced, fitted=True, group=f"{src}|{model}", **base)
        out.append(("overlap", "%", _pct(value), key, f"{model} consecutive overlap, {r['workload'][:40]}"))
    elif src == "BV-routing-stats" and traced:
        common = dict(tokens=traced, **base)
        if metric.startswith("median reuse distance"):
            out.append(("reuse_median", "tokens", _value(value), RouteRow(kind="reuse_median", **common),
                        f"{model} median reuse distance"))
        elif metric.startswith("median per-layer p90 reuse distance"):
            out.append(("reuse_p90", "tokens", _value(value), RouteRow(kind="reuse_p90", **common),
                        f"{model} median per-layer p90 reuse distance"))
        elif metric.startswith("overlap vs distance"):
            labels = (re.findall(r"d=([\d/-]+)", metric) or [""])[0].split("/")
            parts = [p.strip() for p in value.split("/")]
            if len(labels) != len(parts):
                return "overlap vs distance: one value per distance expected"
            for lab, part in zip(labels, parts, strict=True):
                ends = tuple(int(x) for x in lab.split("-"))  # "8-16": the mean at its ends, as sim fit-routing reads
                tol = TOL_ROUGH * PCT if "~" in part else TOL_POINT * PCT
                key = RouteRow(kind="overlap_d", distances=ends, fitted=True, tolerance=tol, **common)
                out.append((f"overlap_d{lab}", "%", _pct(part), key, f"{model} overlap at distance {lab}"))
        else:
            names = {"experts used per layer": ("distinct", "distinct_experts", "experts"),
                     "top-1 expert share": ("top1", "top1_share", "%"),
                     "top-8 expert share": ("top8", "top8_share", "%"),
                     "routing entropy": ("entropy", "entropy", "bits")}
            hit_name = next((n for n in names if metric.startswith(n)), None)
            m = re.match(r"\s*([0-9.]+)\s*-\s*([0-9.]+)", value)
            if hit_name is None or not m:
                return f"routing statistic not read: {r['metric_name'][:60]}"
            stat, qty, unit = names[hit_name]
            for end, text in (("lo", m.group(1)), ("hi", m.group(2))):
                key = RouteRow(kind=f"range_{end}", stat=stat, **common)
                out.append((f"{qty}_{end}", unit, float(text), key,
                            f"{model} {hit_name} across layers: {'lowest' if end == 'lo' else 'highest'} layer"))
    elif src == "IMP1374-kekzl" and hit is not None:
        slots = _int(r["cache_slots_per_layer"]) or 0
        key = RouteRow(kind="lru", tokens=(256.0,) * PROMPTS, capacity=slots / KEYS_PER_EXPERT, fitted=True,
                       note="engine counter, one request of 256 decode tokens, cold", **base)
        out.append(("hit_rate", "%", hit, key, f"{model} LRU pool {slots} keys/layer = {slots / 3:.1f} experts; "
                    "its tok/s not predicted (hardware not stated)"))
    elif src == "IMP2061-kekzl":
        if hit is not None and policy == "lru":
            slots = _int(r["cache_slots_per_layer"]) or 0
            key = RouteRow(kind="lru", tokens=(300.0,) * PROMPTS, capacity=slots / KEYS_PER_EXPERT, fitted=True,
                           note="trace replay, one 300-token generation, cold", **base)
            out.append(("hit_rate", "%", hit, key, f"{model} per-layer LRU {slots} keys = {slots / 3:.1f} experts"))
        elif metric.startswith("layer-0 distinct experts touched"):
            m = re.match(r"\s*(\d+)\s+of\s+\d+;\s*top-(\d+)\s+carry\s+(\d+)%", value)
            t = re.search(r"in\s+(\d+)\s+tokens", metric)
            tokens = int(t.group(1)) if t else 0
            if not m or not tokens:
                return "distinct experts / top-N share not read"
            common = dict(tokens=(float(tokens),) * PROMPTS, **base)
            out.append(("distinct_experts", "experts", float(m.group(1)),
                        RouteRow(kind="distinct", note=f"one layer, one request of {tokens} tokens", **common),
                        f"{model} distinct experts of a layer in {tokens} tokens"))
            n = int(m.group(2))
            out.append((f"top{n}_share", "%", float(m.group(3)),
                        RouteRow(kind="top_share", capacity=float(n), ranking="own",
                                 note=f"one layer, one request of {tokens} tokens", **common),
                        f"{model} share of activations on a layer's {n} most frequent experts"))
    elif src == "LCPP27861-csantiago78" and hit is not None:
        cap = float(_int(r["cache_slots_per_layer"]) or 0)
        if "static" in policy:
            key = RouteRow(kind="static", tokens=(1.0,) * PROMPTS, capacity=cap, ranking="profile", fitted=True,
                           tolerance=rough, note="hot list learned on other requests (the shared law)", **base)
            out.append(("hit_rate", "%", hit, key, f"{model} static top-{cap:g}, held-out half"))
        else:
            key = RouteRow(kind="lru", tokens=(float(WARM_TOKENS),) * PROMPTS, capacity=cap, fitted=True,
                           tolerance=rough, note="long instrumented trace: warm", **base)
            out.append(("hit_rate", "%", hit, key, f"{model} per-layer LRU @{cap:g}, warm"))
    elif src == "FT174-angelbaba01L" and hit is not None:
        slots = float(_int(r["cache_slots_total"]) or 0)
        key = RouteRow(kind="static", tokens=(1.0,) * PROMPTS, capacity=slots / layers, fitted=True,
                       note=f"oracle of the window's own frequencies, {slots:g} slots / {layers} layers", **base)
        out.append(("hit_rate", "%", hit, key, f"{model} stationary oracle, {slots:g} slots ({slots / layers:.1f} "
                    "experts per layer)"))
    if not out:
        return "not a statistic this domain reads (no hit rate vs cache size, overlap or routing statistic)"
    if any(not math.isfinite(o[2]) for o in out):
        return "value not a number"
    return out


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
        prompts, runs = _prompt_tokens(rows), _run_tokens(rows)
        obs: list[Observation] = []
        excluded: list[Excluded] = []
        for r in rows:
            got = _rows_of(r, prompts, runs)
            if isinstance(got, str):
                excluded.append(Excluded(TABLE, r["row_id"], r["source_id"], r["setup_id"], got))
                continue
            for quantity, unit, measured, key, label in got:
                obs.append(Observation(TABLE, r["row_id"], r["source_id"], r["setup_id"], quantity, unit,
                                       float(measured), engine=r["engine"][:60], grade=r["grade"], label=label,
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
