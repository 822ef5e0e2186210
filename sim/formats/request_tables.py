"""Request tables: measured tables of completed requests (CSV columns named like an engine log's rows, as ``sim run
--out`` writes ``requests.csv``), read into :class:`RequestRow` records.

Columns (:data:`CELLS`, each a :class:`~sim.formats.quantities.Quantity`): ``prompt_tokens``, ``cached_tokens``,
``output_tokens`` (tokens), ``acceptance`` (fraction of drafted tokens accepted), and any of the measured
``prefill_tok_s``, ``decode_tok_s`` (tok/s), ``ttft_s`` (s), ``expert_hit_rate`` (or ``hit_rate``, the name
``requests.csv`` gives it) and ``pcie_share`` (fractions); ``engine`` names the log format a row came from. A
number below 0 or above its quantity's bound is a one-line error naming the row and column; a blank, non-numeric or
non-finite cell is None (not measured), and so is a missing column; 0 stays 0 (``sim run --out`` writes 0 for a
rate it could not measure).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.core.errors import ScenarioError
from sim.formats.measured_tables import read_measured
from sim.formats.quantities import SECONDS, SHARE, TOKENS, TOKENS_PER_S, Quantity

# What a request table's cells are (engine logs' rows are checked by their reader)
CELLS: dict[str, Quantity] = {"prompt_tokens": TOKENS, "cached_tokens": TOKENS, "output_tokens": TOKENS,
                              "prefill_tok_s": TOKENS_PER_S, "decode_tok_s": TOKENS_PER_S, "ttft_s": SECONDS,
                              "expert_hit_rate": SHARE, "hit_rate": SHARE, "pcie_share": SHARE, "acceptance": SHARE}
HIT_RATE_COLUMNS = ("expert_hit_rate", "hit_rate")  # one figure; where a table has both, its later column


@dataclass(frozen=True)
class RequestRow:
    """One completed request of a request table; None: the cell is blank or not a number (not measured)."""

    line: int  # the data row (from 1)
    prompt_tokens: float | None  # tokens
    cached_tokens: float | None  # tokens of the prompt served from a prefix cache
    output_tokens: float | None  # tokens
    acceptance: float | None  # fraction
    prefill_tok_s: float | None  # tok/s
    decode_tok_s: float | None  # tok/s
    ttft_s: float | None  # s
    expert_hit_rate: float | None  # fraction
    pcie_share: float | None  # fraction
    engine: str  # the log format the row came from, "" when not said


def finite(value: object) -> float | None:
    """``value`` as a finite float, None when blank, not a number or not finite."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def is_request_table(path: str) -> bool:
    """Whether the measured table at ``path`` is a table of requests (``prompt_tokens`` and ``output_tokens``
    columns, at least one row) rather than a table of measured cells."""
    _, rows = read_measured(path)
    return bool(rows) and {"prompt_tokens", "output_tokens"} <= set(rows[0])


def read_request_table(path: str) -> list[RequestRow]:
    """The rows of the request table at ``path``, each number of :data:`CELLS` in its quantity's range (0 included)
    or None; a value out of range is a one-line ScenarioError naming the row and column."""
    _, table = read_measured(path)
    hit_rate = [c for c in table.columns if c in HIT_RATE_COLUMNS][-1:]  # the later of the two names
    out = []
    for i, row in enumerate(table, start=1):
        values: dict[str, float | None] = {}
        for column, quantity in CELLS.items():
            v = finite(row.get(column))
            if v is not None and (v < 0 or v > quantity.hi):
                raise ScenarioError(path, f"row {i}.{column}", quantity.problem(v) or quantity.expected())
            values[column] = v
        out.append(RequestRow(i, values["prompt_tokens"], values["cached_tokens"], values["output_tokens"],
                              values["acceptance"], values["prefill_tok_s"], values["decode_tok_s"], values["ttft_s"],
                              values[hit_rate[0]] if hit_rate else None, values["pcie_share"],
                              str(row.get("engine") or "")))
    return out
