"""Routing-statistics tables: the columns of the shared measurements' ``expert_cache.csv`` (and a ``role``, ``fit`` or
``check``), as ``calibration/routing_public.csv`` holds them, read into :class:`RoutingStatistic` records.

A row holds one model's geometry (``n_moe_layers``, ``n_experts``, ``top_k``) and either an LRU or static cache's
hit rate (``hit_rate_pct`` at ``cache_slots_per_layer``) or one statistic named by ``metric_name`` with its
``metric_value``: a prompt's mean consecutive-token overlap (its prompt and tokens in ``workload``, ``"name: 140
tokens"``), overlaps at distances (``d=1/2/8-16`` in the name, one value per distance, ``/``-separated; a distance
range is read as its ends), median and p90 reuse distances (tokens), and ranges ``a-b`` (a trailing ``%``: percent)
of experts used per layer, top-1 and top-8 shares and routing entropy (bits). A value written ``~0.3`` is an
approximation: :attr:`RoutingStatistic.approximate`.

The table is read as every measured table is (:func:`sim.formats.measured_tables.read_measured`, a short row's last
cells blank) with at most :data:`MAX_TABLE_BYTES` bytes and :data:`MAX_TABLE_ROWS` lines. A row this reader does not
understand, or a bad cell, is a one-line :class:`ScenarioError` naming the row (by its ``row_id``) and column. Limits
of what a fit can take (a model's layers x experts, a prompt's tokens) are the fit's, not the format's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from sim.core.errors import ScenarioError
from sim.formats.measured_tables import read_measured

MAX_TABLE_BYTES, MAX_TABLE_ROWS = 16 * 2**20, 100_000  # a routing table's bytes and lines (the shipped: 29 KB)
COLUMNS = ("row_id", "source_id", "model", "n_moe_layers", "n_experts", "top_k", "metric_name", "metric_value",
           "hit_rate_pct", "cache_slots_per_layer", "workload")
MAX_TOKENS_READ = 10**12  # a workload's stated tokens are read up to this (13 digits): far beyond any fit's bound


@dataclass(frozen=True)
class RoutingStatistic:
    """One measured number (or range) of a routing table: a statistic of one model's routing.

    ``statistic``: ``lru_hit_rate`` / ``static_hit_rate`` (fraction of lookups, at ``capacity`` slots per layer),
    ``overlap`` (one prompt's mean consecutive-token overlap, fraction), ``overlap_d`` (the overlap at
    ``distances`` tokens apart, fraction), ``reuse_median`` / ``reuse_p90`` (tokens), ``distinct_range`` (experts
    used per layer), ``top1_range`` / ``top8_range`` (shares, fraction), ``entropy_range`` (bits): ``value`` is
    then a (low, high) range across layers, in ``unit``."""

    row_id: str  # the statistic's id: the row's row_id ("?" when blank), "/d<distances>" added for overlap_d
    table_row: str  # the row's row_id as errors name it ("?" when blank)
    model: str
    role: str  # fit or check
    layers: int  # MoE layers of the model
    experts: int  # routed experts per layer
    top_k: int  # experts each token chooses per layer
    statistic: str
    value: float | tuple[float, float]  # in ``unit``; a range: (low, high)
    unit: str = "fraction"  # fraction, tokens, experts or bits
    capacity: int = 0  # hit rates: cache slots per layer
    distances: tuple[int, ...] = (1,)  # overlap_d: tokens apart (several: the ends of a range, as "d=8-16")
    prompt: str | None = None  # overlap: the prompt ``workload`` names, None when it names none
    tokens: int | None = None  # overlap: the prompt's tokens per layer, None when ``workload`` does not say
    approximate: bool = False  # the value was written "~x"


def value_range(text: str, path: str, row: str) -> tuple[float, float]:
    """A range cell ``78-106`` or ``3-9%`` (percent: as fractions) as (low, high)."""
    m = re.match(r"\s*([0-9]+\.?[0-9]*|\.[0-9]+)\s*-\s*([0-9]+\.?[0-9]*|\.[0-9]+)\s*(%?)", text)  # 78-106, 3-9%
    if not m:
        raise ScenarioError(path, f"row {row}.metric_value", f"{text!r}: expected a range a-b")
    scale = 0.01 if m.group(3) else 1.0
    return float(m.group(1)) * scale, float(m.group(2)) * scale


def whole_number(text: str, path: str, key: str) -> int:
    """A cell holding a whole number from 1 to 999,999 (layers, experts, top_k, slots)."""
    try:
        value = int(str(text).strip())
    except ValueError:
        shown = repr(str(text)[:40]) if str(text).strip() else "missing value"
        raise ScenarioError(path, key, f"{shown}: expected a whole number from 1 to 999,999") from None
    if not 0 < value < 10**6:
        raise ScenarioError(path, key, f"{value}: expected a whole number from 1 to 999,999")
    return value


def bounded_number(text: str, path: str, key: str, lo: float, hi: float) -> float:
    """A cell holding a number from ``lo`` to ``hi`` (a leading ``~`` dropped)."""
    try:
        value = float(str(text).strip().lstrip("~"))
    except ValueError:
        shown = repr(str(text)[:40]) if str(text).strip() else "missing value"
        raise ScenarioError(path, key, f"{shown}: expected a number from {lo:g} to {hi:g}") from None
    if not (lo <= value <= hi) or math.isnan(value):
        raise ScenarioError(path, key, f"{value:g}: expected a number from {lo:g} to {hi:g}")
    return value


def _geometry(r: dict[str, str], path: str, key: str, rid: str) -> dict:
    """The fields every statistic of row ``r`` shares: its row, model, role and geometry."""
    role = (r.get("role") or "fit").strip() or "fit"
    if role not in ("fit", "check"):
        raise ScenarioError(path, f"{key}.role", f"{role!r}: expected fit or check")
    geo = dict(table_row=rid, model=r["model"].strip(), role=role,
               layers=whole_number(r["n_moe_layers"], path, f"{key}.n_moe_layers"),
               experts=whole_number(r["n_experts"], path, f"{key}.n_experts"),
               top_k=whole_number(r["top_k"], path, f"{key}.top_k"))
    if geo["top_k"] > geo["experts"]:
        raise ScenarioError(path, f"{key}.top_k", "more than n_experts")
    return geo


RANGES = {"experts used per layer": ("distinct_range", "experts"), "top-1 expert share": ("top1_range", "fraction"),
          "top-8 expert share": ("top8_range", "fraction"), "routing entropy": ("entropy_range", "bits")}


def _row_statistics(r: dict[str, str], path: str) -> list[RoutingStatistic]:
    """The statistics of one row (several for overlaps at several distances)."""
    rid = (r.get("row_id") or "").strip() or "?"
    key = f"row {rid}"
    geo = _geometry(r, path, key, rid)
    name = (r["metric_name"] or "").strip().lower()
    value = (r["metric_value"] or "").strip()
    policy = (r.get("cache_policy") or "lru").lower()
    if r["hit_rate_pct"].strip() and ("static" in policy or "lru" in policy):
        return [RoutingStatistic(rid, statistic="static_hit_rate" if "static" in policy else "lru_hit_rate",
                                 capacity=whole_number(r["cache_slots_per_layer"], path,
                                                       f"{key}.cache_slots_per_layer"),
                                 value=bounded_number(r["hit_rate_pct"], path, f"{key}.hit_rate_pct", 0, 100) / 100,
                                 approximate="~" in r["hit_rate_pct"], **geo)]
    if name.startswith("mean consecutive-token expert overlap"):
        m = re.match(r"\s*([\w.-]+):\s*(\d+)\s*tokens", r["workload"])
        return [RoutingStatistic(rid, statistic="overlap", value=bounded_number(value, path, f"{key}.metric_value",
                                                                                0, 1),
                                 prompt=m.group(1) if m else None, approximate="~" in value,
                                 tokens=min(int(m.group(2)[:13]), MAX_TOKENS_READ) if m else None, **geo)]
    if name.startswith("overlap vs distance"):
        dists = re.findall(r"d=(\d{1,9}(?:-\d{1,9})?(?:/\d{1,9}(?:-\d{1,9})?)*)", name)  # d=1/2/8-16
        parts = [p.strip() for p in value.split("/")]
        labels = dists[0].split("/") if dists else []
        if len(parts) != len(labels) or not parts:
            raise ScenarioError(path, f"{key}.metric_value", f"{value!r}: expected one value per distance")
        return [RoutingStatistic(f"{rid}/d{label}", statistic="overlap_d",
                                 distances=tuple(int(x) for x in label.split("-")),
                                 value=bounded_number(part, path, f"{key}.metric_value", 0, 1),
                                 approximate="~" in part, **geo)
                for label, part in zip(labels, parts, strict=True)]
    for prefix, statistic in (("median reuse distance", "reuse_median"),
                              ("median per-layer p90 reuse distance", "reuse_p90")):
        if name.startswith(prefix):
            return [RoutingStatistic(rid, statistic=statistic, unit="tokens", approximate="~" in value,
                                     value=bounded_number(value, path, f"{key}.metric_value", 0, 1e6), **geo)]
    for prefix, (statistic, unit) in RANGES.items():
        if name.startswith(prefix):
            return [RoutingStatistic(rid, statistic=statistic, unit=unit, value=value_range(value, path, rid),
                                     approximate="~" in value, **geo)]
    raise ScenarioError(path, f"{key}.metric_name", f"{name[:60]!r}: not a routing statistic this fit reads")


def read_routing_table(path: str) -> list[RoutingStatistic]:
    """The statistics of the routing table at ``path``, in row order (``#`` lines are comments). A missing column,
    a row of no statistic this reader knows, a bad cell, or a table of no rows is a one-line ScenarioError."""
    _, rows = read_measured(path, max_bytes=MAX_TABLE_BYTES, max_lines=MAX_TABLE_ROWS)
    missing = [c for c in COLUMNS if c not in rows.columns]
    if missing:
        raise ScenarioError(path, missing[0], "a column of the routing table (the columns of expert_cache.csv)")
    out = [stat for r in rows for stat in _row_statistics(r, path)]
    if not out:
        raise ScenarioError(path, "", "no rows")
    return out
