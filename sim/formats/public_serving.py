"""The public serving tables (``calibration/public/concurrency.csv`` and ``unified_memory_concurrency.csv``: verbatim
copies of serving sweeps with every row's source), read into :class:`ServingSweepRow` records.

Per row: a source, a setup, the machine (GPU text, GPU count, memory architecture), the engine, the load (clients,
requests, prompt and output tokens) and what was measured: output throughput (tok/s), mean TTFT and TPOT (ms), the
run's duration (s). A number cell is blank (None) or one number in its column's range (:data:`COLUMNS`); anything else
is a one-line ScenarioError at ``row ROW_ID.COLUMN``. A count is the whole part of its number (``"64"`` is 64), None
when it is not above 0. What a row means in sim's terms (which setup it is, whether an engine expresses it) is the
fidelity domain's (:mod:`sim.fidelity.concurrency`, :mod:`sim.fidelity.serving`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from sim.core.errors import ScenarioError
from sim.formats.public_tables import read_csv
from sim.formats.quantities import SECONDS, TOKENS, TOKENS_PER_S, Quantity

REQUIRED = ("row_id", "source_id", "setup_id", "gpu", "gpu_count", "engine")
CLIENTS = Quantity("a number of clients or requests", "", 0.0, 1e9, "a load of at most thousands of clients; 1e9 is "
                   "beyond any", lo_open=False)
MILLISECONDS = replace(SECONDS, unit="ms", hi=1e10)  # SECONDS' bound in ms
COUNTS: dict[str, Quantity] = {"concurrency": CLIENTS, "num_requests": CLIENTS, "input_tokens": TOKENS,
                               "output_tokens": TOKENS}
MEASURES: dict[str, Quantity] = {"output_tok_s": TOKENS_PER_S, "ttft_mean_ms": MILLISECONDS,
                                 "tpot_mean_ms": MILLISECONDS, "t_total_s": SECONDS}
COLUMNS: dict[str, Quantity] = COUNTS | MEASURES  # the number columns a row may have (a missing one reads blank)


@dataclass(frozen=True)
class ServingSweepRow:
    """One row of a public serving table. Text cells are stripped ("" when blank or absent); numbers are None when
    blank or absent."""

    row_id: str
    source_id: str
    setup_id: str
    gpu: str  # the GPU column's text ("2x NVIDIA GeForce RTX 3090 (TP=2)", "NVIDIA GB10 ...")
    engine: str
    grade: str  # the source's reliability grade
    memory_arch: str  # discrete or unified ("" when the table has no such column)
    gpu_count: int | None  # GPUs of the run, None unless the cell is a whole number
    tensor_parallel: str | None  # the GPU text's "TP=N" (upper case), None without one
    concurrency: int | None  # clients sending requests at once
    num_requests: int | None  # requests of the run
    input_tokens: int | None  # prompt tokens of a request
    output_tokens: int | None  # generated tokens of a request
    output_tok_s: float | None  # tok/s, output throughput
    ttft_mean_ms: float | None  # ms, mean time to first token
    tpot_mean_ms: float | None  # ms, mean time per output token
    t_total_s: float | None  # s, the run's duration
    cells: Mapping[str, str]  # every cell as text, by column: what a setup's ``rows`` filter compares


def _count(r: dict[str, str], column: str, path: str) -> int | None:
    v = COUNTS[column].parse(r.get(column, ""), path, f"row {r['row_id']}.{column}", required=False)
    return int(v) if v is not None and math.isfinite(v) and v > 0 else None


def _row(r: dict[str, str], path: str) -> ServingSweepRow:
    tp = re.search(r"TP=\d+", r["gpu"], re.IGNORECASE)
    counts = [_count(r, c, path) for c in COUNTS]
    measures = [q.parse(r.get(c, ""), path, f"row {r['row_id']}.{c}", required=False) for c, q in MEASURES.items()]
    return ServingSweepRow(r["row_id"], r["source_id"], r["setup_id"], r["gpu"], r["engine"], r.get("grade", ""),
                           r.get("memory_arch", ""), int(r["gpu_count"]) if r["gpu_count"].isdigit() else None,
                           tp.group(0).upper() if tp else None, *counts, *measures, MappingProxyType(dict(r)))


def read_serving_table(path: str | os.PathLike) -> list[ServingSweepRow]:
    """The rows of one public serving table at ``path``, in table order; a missing file or column (:data:`REQUIRED`)
    or a bad number is a one-line ScenarioError naming it."""
    path = str(path)
    rows, fields = read_csv(path)
    missing = [c for c in REQUIRED if c not in fields]
    if missing:
        raise ScenarioError(path, missing[0], "a column of the concurrency tables (calibration/public/README.md)")
    return [_row(r, path) for r in rows]
