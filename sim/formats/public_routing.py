"""The public expert-cache table (``calibration/public/expert_cache.csv``: verbatim copies of what each source
states, with its row's source), read into :class:`ExpertCacheRow` records.

Per row: a source, a setup, a MoE model's geometry (MoE layers, experts per layer, routed experts per token), a cache
(its policy, the slots of a layer or of all layers, the layers it covers) and what was measured: a hit rate in
percent, or a named statistic (``metric_name``) with its value (``metric_value``: a fraction, a count, a range
``lo-hi``, values per distance ``a / b / c``, ...). The cells are a source's words, so a number is a cell's leading
number (``"~67"`` is 67 and approximate, ``"~10 (uniform 6.2)"`` 10, ``"10+1 shared (model)"`` 10), None when the cell
holds none; a leading number out of its column's range (:data:`COUNT`, :data:`PERCENT`) is a one-line ScenarioError
at ``row ROW_ID.COLUMN``. What a row means for the routing law (which rows are read, how, and why the others are
excluded) is the fidelity domain's (:mod:`sim.fidelity.routing_rows`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from sim.core.errors import ScenarioError
from sim.formats.public_tables import read_csv
from sim.formats.quantities import TOKENS, Quantity

TABLE = "expert_cache.csv"
COLUMNS = ("row_id", "source_id", "setup_id", "grade", "engine", "model", "n_moe_layers", "n_experts", "top_k",
           "cache_policy", "cache_slots_per_layer", "cache_slots_total", "hit_rate_pct", "metric_name",
           "metric_value", "workload", "notes", "tg_tok_s", "cached_layers")
COUNT = Quantity("a count", "", 0.0, 1e9, "layers, experts and cache slots of a model: at most thousands; 1e9 is "
                 "beyond any", lo_open=False)
PERCENT = Quantity("a percentage", "%", 0.0, 100.0, "a hit rate: a share of lookups", lo_open=False)
COUNTS = ("n_moe_layers", "n_experts", "top_k", "cache_slots_per_layer", "cache_slots_total")


@dataclass(frozen=True)
class ExpertCacheRow:
    """One row of ``expert_cache.csv``. Text cells are stripped ("" when blank); numbers are a cell's leading number,
    None when it holds none."""

    row_id: str
    source_id: str
    setup_id: str
    grade: str  # the source's reliability grade
    engine: str
    model: str  # "" or "not specified ..." when the source does not say
    cache_policy: str  # lru, static, FATE pool, ... as the source words it
    metric_name: str  # the statistic ``metric_value`` holds ("" for a hit-rate row)
    metric_value: str  # the statistic's cell as written
    workload: str
    notes: str
    tg_tok_s: str  # the generation rate's cell as written ("" when none)
    cached_layers: str  # the layer range the cache covers, as written ("0-23", ...)
    hit_rate_text: str  # the hit_rate_pct cell as written ("" when none)
    n_moe_layers: int | None  # MoE layers of the model
    n_experts: int | None  # routed experts per layer
    top_k: int | None  # routed experts per token
    cache_slots_per_layer: int | None  # slots of one layer's cache (a source's unit: experts or keys)
    cache_slots_total: int | None  # slots over all layers
    hit_rate_pct: float | None  # %, the hit rate's leading number
    hit_rate_approx: bool  # the hit rate is written "~N"
    prompt_tokens: float | None  # tokens per layer of a traced prompt: the workload's ": N tokens/layer"
    stats_lookups: tuple[int, int, int] | None  # (hits, misses, tensors) of the notes' "hits=H misses=M tensors=T"
    metric_number: float  # the metric value's leading number, NaN when it holds none
    metric_parts: tuple[tuple[float, bool], ...]  # each " / "-separated part: (leading number or NaN, written "~")
    metric_range: tuple[float, float] | None  # a metric value written "lo-hi" (its ends)
    distances: tuple[tuple[str, tuple[int, ...]], ...]  # metric name's "d=1/2/8-16": (label, tokens apart at its ends)
    metric_tokens: int | None  # tokens of the metric name's "in N tokens"
    distinct_top: tuple[int, int, float] | None  # "D of E; top-N carry P%": (D experts, N, P %)


def leading_number(text: str) -> float | None:
    """The leading number of a cell ("~67", "~10 (uniform 6.2)", "31.27"), None when there is none."""
    m = re.match(r"\s*~?\s*([0-9]+(?:\.[0-9]+)?)", text or "")
    return float(m.group(1)) if m else None


def leading_int(text: str) -> int | None:
    """The leading whole number of a cell ("16 of 896" is 16), None when there is none."""
    m = re.match(r"\s*([0-9]+)", text or "")
    return int(m.group(1)) if m else None


def _checked(value: float | None, quantity: Quantity, path: str, key: str) -> float | None:
    return None if value is None else quantity.check(value, path, key)


def _prompt_tokens(workload: str) -> float | None:
    m = re.search(r":\s*(\d+)\s*tokens/layer", workload)
    return float(m.group(1)) if m else None


def _stats_lookups(notes: str) -> tuple[int, int, int] | None:
    m = re.search(r"hits=(\d+)\s+misses=(\d+)\s+tensors=(\d+)", notes)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _metric_range(value: str, path: str, key: str) -> tuple[float, float] | None:
    m = re.match(r"\s*([0-9.]+)\s*-\s*([0-9.]+)", value)
    if not m:
        return None
    try:
        return float(m.group(1)), float(m.group(2))
    except ValueError:
        raise ScenarioError(path, key, f"bad range {value[:40]!r}: expected LO-HI") from None


def _distances(metric: str, path: str, key: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    found = re.findall(r"d=([\d/-]+)", metric.lower())
    if not found:
        return ()
    try:
        return tuple((lab, tuple(int(x) for x in lab.split("-"))) for lab in found[0].split("/"))
    except ValueError:
        raise ScenarioError(path, key, f"bad distances {found[0][:40]!r}: expected d=N/N/N-M") from None


def _distinct_top(value: str) -> tuple[int, int, float] | None:
    m = re.match(r"\s*(\d+)\s+of\s+\d+;\s*top-(\d+)\s+carry\s+(\d+)%", value)
    return (int(m.group(1)), int(m.group(2)), float(m.group(3))) if m else None


def _number(text: str) -> float:
    v = leading_number(text)
    return float("nan") if v is None else v


def _row(r: dict[str, str], path: str) -> ExpertCacheRow:
    where = f"row {r['row_id']}."
    counts = {c: _checked(leading_int(r[c]), COUNT, path, where + c) for c in COUNTS}
    value, metric = r["metric_value"], r["metric_name"]
    t = re.search(r"in\s+(\d+)\s+tokens", metric.lower())
    tokens = _checked(_prompt_tokens(r["workload"]), TOKENS, path, where + "workload")
    return ExpertCacheRow(
        r["row_id"], r["source_id"], r["setup_id"], r["grade"], r["engine"], r["model"], r["cache_policy"], metric,
        value, r["workload"], r["notes"], r["tg_tok_s"], r["cached_layers"], r["hit_rate_pct"],
        *(None if counts[c] is None else int(counts[c]) for c in COUNTS),
        _checked(leading_number(r["hit_rate_pct"]), PERCENT, path, where + "hit_rate_pct"), "~" in r["hit_rate_pct"],
        tokens, _stats_lookups(r["notes"]), _number(value),
        tuple((_number(p.strip()), "~" in p) for p in value.split("/")),
        _metric_range(value, path, where + "metric_value"), _distances(metric, path, where + "metric_name"),
        int(t.group(1)) if t else None, _distinct_top(value))


def read_expert_cache(path: str | os.PathLike) -> list[ExpertCacheRow]:
    """The rows of ``expert_cache.csv`` at ``path``, in table order; a missing file or column (:data:`COLUMNS`) or a
    number out of its column's range is a one-line ScenarioError naming it."""
    path = str(path)
    rows, fields = read_csv(path)
    missing = [c for c in COLUMNS if c not in fields]
    if missing:
        raise ScenarioError(path, missing[0], "a column of expert_cache.csv (calibration/public/README.md)")
    return [_row(r, path) for r in rows]
