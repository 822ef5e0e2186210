"""The rows of ``calibration/public/expert_cache.csv`` as the routing domain reads them (:mod:`sim.fidelity.routing`):
each row's observations with the key the mechanism needs (never the measured value), or why it is excluded.

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
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from sim.calibration.routing_fit import PROMPTS, TOL_POINT, TOL_ROUGH
from sim.formats.public_routing import ExpertCacheRow, read_expert_cache

TABLE = "expert_cache.csv"
NOMINAL_LAYERS = 16  # MoE layers computed when the table does not state them (pooled statistics do not depend on it)
WARM_TOKENS = 10**7  # a warm LRU: a cache read for this many tokens (its cold start under 1e-5 of the lookups)
KEYS_PER_EXPERT = 3  # kekzl/imp's cache keys: (projection, expert), gate, up and down of each expert
PCT = 100.0


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


def _pct(value: float) -> float:
    """A fraction in percent (NaN stays NaN)."""
    return round(value * PCT, 9)


def read_table(path: str | os.PathLike) -> list[ExpertCacheRow]:
    """The rows of ``expert_cache.csv`` (:func:`sim.formats.public_routing.read_expert_cache`: a missing file or
    column is a ScenarioError naming it)."""
    return read_expert_cache(path)


def _prompt_tokens(rows: list[ExpertCacheRow]) -> dict[str, tuple[float, ...]]:
    """Per model, the tokens per layer of the traced prompts (the overlap rows' workload "...: 139 tokens/layer"),
    in table order."""
    out: dict[str, list[float]] = {}
    for r in rows:
        if r.metric_name.lower().startswith("mean consecutive-token expert overlap") and r.prompt_tokens is not None:
            out.setdefault(r.model, []).append(r.prompt_tokens)
    return {k: tuple(v) for k, v in out.items() if len(v) == PROMPTS}


def _run_tokens(rows: list[ExpertCacheRow]) -> dict[str, float]:
    """BV-cache-poc: per cached-layer range, a run's tokens per layer: lookups over tensors and top_k."""
    out = {}
    for r in rows:
        if r.stats_lookups and r.top_k:
            hits, misses, tensors = r.stats_lookups
            out[r.cached_layers] = (hits + misses) / (tensors * r.top_k)
    return out


def table_context(rows: list[ExpertCacheRow]) -> tuple[dict[str, tuple[float, ...]], dict[str, float]]:
    """What a row's reading takes from other rows of its source: the traced prompts' tokens, a run's tokens."""
    return _prompt_tokens(rows), _run_tokens(rows)


def _excluded_why(r: ExpertCacheRow) -> str | None:
    """Why a row cannot be expressed, or None (checked before it is read)."""
    src, policy, engine = r.source_id, r.cache_policy.lower(), r.engine.lower()
    model, notes = r.model, r.notes.lower()
    if "over disk" in engine or "disk-resident" in notes:
        return "a RAM cache of disk-resident experts (RAM over disk), not the VRAM expert cache the project models"
    if not model or model.lower().startswith("not specified"):
        return "model not stated (and the hardware of the run not stated)"
    if "fate" in policy:
        if r.hit_rate_text:
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
        if r.hit_rate_text:
            return ("cache size not stated (the engine's default budget, no slots in the row); its tok/s: hardware "
                    "not stated (the GPU only from the repository's README; host, RAM and PCIe link not stated)")
        return ("tok/s only: hardware not stated (the GPU only from the repository's README; host, RAM and PCIe "
                "link not stated)")
    if src == "LCPP27861-csantiago78" and not r.hit_rate_text:
        return ("tok/s only: 2x RTX 3090 with a dual-socket Xeon whose model is not stated; Qwen3.8-Flash-Next has "
                "no model file in calibration/models")
    if src == "BV-cache-poc-tput" and not r.hit_rate_text:
        return ("tok/s of the cache build with its cache off at llama.cpp's partial -ngl placement: a llama.cpp "
                "offload run (the llama.cpp engine has no expert cache; the llama.cpp domain's)")
    if src.startswith("FT174"):
        if "live experts" in r.metric_name.lower():
            return "tokens of the serving window not stated (distinct experts need them)"
        if "oracle" not in policy:
            return "a range over the serving window (8-18%), not one value to predict"
    return None


def _geometry(r: ExpertCacheRow) -> tuple[int, int, int, bool] | None:
    experts, k = r.n_experts, r.top_k
    if not experts or not k or k > experts:
        return None
    layers = r.n_moe_layers
    return (layers or NOMINAL_LAYERS), experts, k, bool(layers)


def rows_of(r: ExpertCacheRow, prompts: dict[str, tuple[float, ...]], runs: dict[str, float]
             ) -> list[tuple[str, str, float, RouteRow, str]] | str:
    """The observations of one row as (quantity, unit, measured, key, label), or why it is excluded."""
    why = _excluded_why(r)
    if why:
        return why
    geo = _geometry(r)
    if geo is None:
        return "geometry (experts per layer, top_k) not stated"
    layers, experts, k, stated = geo
    model, src = r.model, r.source_id
    base = dict(model=model, layers=layers, experts=experts, top_k=k, layers_stated=stated)
    policy, metric = r.cache_policy.lower(), r.metric_name.lower()
    rough = TOL_ROUGH * PCT if r.hit_rate_approx else TOL_POINT * PCT
    hit = r.hit_rate_pct
    traced = prompts.get(model)
    out: list[tuple[str, str, float, RouteRow, str]] = []
    if src == "BV-lru-sim" and hit is not None and traced:
        cap = float(r.cache_slots_per_layer or 0)
        key = RouteRow(kind="lru", tokens=traced, capacity=cap, fitted=True, note="trace replay, cold per prompt",
                       **base)
        out.append(("hit_rate", "%", hit, key, f"{model} per-layer LRU @{cap:g} (replay of traces)"))
    elif src in ("BV-cache-poc", "BV-cache-poc-tput") and hit is not None:
        tokens = runs.get(r.cached_layers)
        if tokens is None:
            return "tokens of the run not stated (no stats counts for this layer range)"
        cap = float(r.cache_slots_per_layer or 0)
        key = RouteRow(kind="lru", tokens=(tokens,) * PROMPTS, capacity=cap,
                       note=f"engine counter, a run of {tokens:.0f} tokens, cold; predicted, not fitted (the "
                            "source's replay of the same runs: 38.9/42.4%)", **base)
        extra = "; its tok/s not predicted (llama.cpp placement with a per-tensor cache)" if r.tg_tok_s else ""
        out.append(("hit_rate", "%", hit, key, f"{model} per-tensor LRU @{cap:g}, layers {r.cached_layers}"
                    f"{extra}"))
    elif src == "BV-routing-overlap" and metric.startswith("mean consecutive-token expert overlap") and traced:
        key = RouteRow(kind="overlap", tokens=traced, fitted=True, group=f"{src}|{model}", **base)
        out.append(("overlap", "%", _pct(r.metric_number), key, f"{model} consecutive overlap, {r.workload[:40]}"))
    elif src == "BV-routing-stats" and traced:
        common = dict(tokens=traced, **base)
        if metric.startswith("median reuse distance"):
            out.append(("reuse_median", "tokens", r.metric_number, RouteRow(kind="reuse_median", **common),
                        f"{model} median reuse distance"))
        elif metric.startswith("median per-layer p90 reuse distance"):
            out.append(("reuse_p90", "tokens", r.metric_number, RouteRow(kind="reuse_p90", **common),
                        f"{model} median per-layer p90 reuse distance"))
        elif metric.startswith("overlap vs distance"):
            if len(r.distances) != len(r.metric_parts):
                return "overlap vs distance: one value per distance expected"
            for (lab, ends), (part, approx) in zip(r.distances, r.metric_parts, strict=True):
                # ends of "8-16": the mean at its ends, as sim fit-routing reads
                tol = TOL_ROUGH * PCT if approx else TOL_POINT * PCT
                key = RouteRow(kind="overlap_d", distances=ends, fitted=True, tolerance=tol, **common)
                out.append((f"overlap_d{lab}", "%", _pct(part), key, f"{model} overlap at distance {lab}"))
        else:
            names = {"experts used per layer": ("distinct", "distinct_experts", "experts"),
                     "top-1 expert share": ("top1", "top1_share", "%"),
                     "top-8 expert share": ("top8", "top8_share", "%"),
                     "routing entropy": ("entropy", "entropy", "bits")}
            hit_name = next((n for n in names if metric.startswith(n)), None)
            if hit_name is None or r.metric_range is None:
                return f"routing statistic not read: {r.metric_name[:60]}"
            stat, qty, unit = names[hit_name]
            for end, number in zip(("lo", "hi"), r.metric_range, strict=True):
                key = RouteRow(kind=f"range_{end}", stat=stat, **common)
                out.append((f"{qty}_{end}", unit, number, key,
                            f"{model} {hit_name} across layers: {'lowest' if end == 'lo' else 'highest'} layer"))
    elif src == "IMP1374-kekzl" and hit is not None:
        slots = r.cache_slots_per_layer or 0
        key = RouteRow(kind="lru", tokens=(256.0,) * PROMPTS, capacity=slots / KEYS_PER_EXPERT, fitted=True,
                       note="engine counter, one request of 256 decode tokens, cold", **base)
        out.append(("hit_rate", "%", hit, key, f"{model} LRU pool {slots} keys/layer = {slots / 3:.1f} experts; "
                    "its tok/s not predicted (hardware not stated)"))
    elif src == "IMP2061-kekzl":
        if hit is not None and policy == "lru":
            slots = r.cache_slots_per_layer or 0
            key = RouteRow(kind="lru", tokens=(300.0,) * PROMPTS, capacity=slots / KEYS_PER_EXPERT, fitted=True,
                           note="trace replay, one 300-token generation, cold", **base)
            out.append(("hit_rate", "%", hit, key, f"{model} per-layer LRU {slots} keys = {slots / 3:.1f} experts"))
        elif metric.startswith("layer-0 distinct experts touched"):
            tokens = r.metric_tokens or 0
            if not r.distinct_top or not tokens:
                return "distinct experts / top-N share not read"
            distinct, n, share = r.distinct_top
            common = dict(tokens=(float(tokens),) * PROMPTS, **base)
            out.append(("distinct_experts", "experts", float(distinct),
                        RouteRow(kind="distinct", note=f"one layer, one request of {tokens} tokens", **common),
                        f"{model} distinct experts of a layer in {tokens} tokens"))
            out.append((f"top{n}_share", "%", share,
                        RouteRow(kind="top_share", capacity=float(n), ranking="own",
                                 note=f"one layer, one request of {tokens} tokens", **common),
                        f"{model} share of activations on a layer's {n} most frequent experts"))
    elif src == "LCPP27861-csantiago78" and hit is not None:
        cap = float(r.cache_slots_per_layer or 0)
        if "static" in policy:
            key = RouteRow(kind="static", tokens=(1.0,) * PROMPTS, capacity=cap, ranking="profile", fitted=True,
                           tolerance=rough, note="hot list learned on other requests (the shared law)", **base)
            out.append(("hit_rate", "%", hit, key, f"{model} static top-{cap:g}, held-out half"))
        else:
            key = RouteRow(kind="lru", tokens=(float(WARM_TOKENS),) * PROMPTS, capacity=cap, fitted=True,
                           tolerance=rough, note="long instrumented trace: warm", **base)
            out.append(("hit_rate", "%", hit, key, f"{model} per-layer LRU @{cap:g}, warm"))
    elif src == "FT174-angelbaba01L" and hit is not None:
        slots = float(r.cache_slots_total or 0)
        key = RouteRow(kind="static", tokens=(1.0,) * PROMPTS, capacity=slots / layers, fitted=True,
                       note=f"oracle of the window's own frequencies, {slots:g} slots / {layers} layers", **base)
        out.append(("hit_rate", "%", hit, key, f"{model} stationary oracle, {slots:g} slots ({slots / layers:.1f} "
                    "experts per layer)"))
    if not out:
        return "not a statistic this domain reads (no hit rate vs cache size, overlap or routing statistic)"
    if any(not math.isfinite(o[2]) for o in out):
        return "value not a number"
    return out

